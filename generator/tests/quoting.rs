//! Strings that YAML would retype or that could break out of their line survive
//! rendering unchanged, in every object they reach.

use std::collections::BTreeMap;
use std::path::Path;

use celld_api::validate::ValidatedFleet;
use celld_gen::api::{EnvVar, Maintenance};
use celld_gen::load::load_str;
use celld_gen::render::{parse::parse_document, render_fleet};
use serde_json::Value;

const TRICKY: &[&str] = &[
    "on",
    "No",
    "y",
    "~",
    "null",
    "0755",
    "1e3",
    "0x1F",
    "1:30",
    ".inf",
    "- item",
    "a: b",
    "#not a comment",
    "'single'",
    "\"double\"",
    "back\\slash",
    "multi\nline",
    "tab\there",
    "trailing ",
    " leading",
    "{flow}",
    "[flow]",
    "*alias",
    "&anchor",
    "!tag",
    "%directive",
    "@at",
    "`tick`",
    "émoji 🚀",
    "\u{85}nel",
    "\u{2028}ls",
    "",
];

/// Taken as valid: these tests render values validation would refuse, to show that
/// rendering never retypes them anyway.
fn unchecked(fleet: celld_gen::api::CelldFleet) -> ValidatedFleet {
    ValidatedFleet::unchecked(fleet)
}

fn base() -> celld_gen::api::CelldFleet {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples/routing-ingress-tls.yaml");
    load_str(&path, &std::fs::read_to_string(&path).unwrap())
        .unwrap()
        .into_fleet()
}

#[test]
fn tricky_strings_round_trip_in_every_object() {
    let mut fleet = base();
    // Values the validator may well refuse: rendering must still never retype them.
    let labels: BTreeMap<String, String> = TRICKY
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("example.com/k{i}"), v.to_string()))
        .collect();
    fleet.metadata.labels = Some(labels.clone());
    fleet.metadata.annotations = Some(
        TRICKY
            .iter()
            .map(|k| (k.to_string(), "v".to_string()))
            .filter(|(k, _)| !k.is_empty())
            .collect(),
    );
    fleet.spec.env = Some(
        TRICKY
            .iter()
            .enumerate()
            .map(|(i, v)| EnvVar {
                name: format!("CELLD_X{i}"),
                value: Some(v.to_string()),
                secret_key_ref: None,
            })
            .collect(),
    );
    fleet.spec.maintenance = Some(Maintenance {
        restart_token: Some("0755".into()),
        paused: None,
    });
    let routing = fleet.spec.routing.as_mut().unwrap();
    routing.ingress.as_mut().unwrap().annotations = Some(labels.clone());
    routing.source.pod_labels = labels.clone();

    let rendered = render_fleet(&unchecked(fleet.clone())).expect("renders and round-trips");
    let get = |file: &str| -> Value {
        let o = rendered.objects.iter().find(|o| o.file == file).unwrap();
        parse_document(&o.yaml).unwrap()
    };

    let fleet_obj = get("celldfleet.yaml");
    let back: celld_gen::api::CelldFleet = serde_json::from_value(fleet_obj).unwrap();
    assert_eq!(back.spec, fleet.spec);
    assert_eq!(back.metadata.labels, fleet.metadata.labels);
    assert_eq!(
        back.metadata.annotations,
        Some(celld_gen::render::context::fleet_annotations(
            fleet.metadata.annotations.as_ref(),
            fleet.spec.capacity_mode() == Some(celld_gen::api::CapacityMode::External)
        ))
    );

    let sts = get("statefulset.yaml");
    let env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    for (i, v) in TRICKY.iter().enumerate() {
        let e = env
            .iter()
            .find(|e| e["name"] == format!("CELLD_X{i}"))
            .unwrap();
        assert_eq!(e["value"], *v, "env CELLD_X{i}");
    }
    assert_eq!(
        sts["spec"]["template"]["metadata"]["annotations"]["fleet.celld.dev/restart-token"],
        "0755"
    );

    let ingress = get("ingress.yaml");
    for (k, v) in &labels {
        assert_eq!(ingress["metadata"]["annotations"][k], v.as_str());
    }
    let np = get("networkpolicy-routing.yaml");
    for (k, v) in &labels {
        assert_eq!(
            np["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"][k],
            v.as_str()
        );
    }
}

#[test]
fn tricky_keys_are_quoted() {
    let mut fleet = base();
    let keys: BTreeMap<String, String> = TRICKY
        .iter()
        .filter(|k| !k.is_empty())
        .map(|k| (k.to_string(), "v".to_string()))
        .collect();
    fleet.metadata.labels = Some(keys.clone());
    let rendered = render_fleet(&unchecked(fleet.clone())).expect("renders and round-trips");
    let o = rendered
        .objects
        .iter()
        .find(|o| o.file == "celldfleet.yaml")
        .unwrap();
    let v = parse_document(&o.yaml).unwrap();
    let got: BTreeMap<String, String> =
        serde_json::from_value(v["metadata"]["labels"].clone()).unwrap();
    assert_eq!(got, keys);
}
