//! Beyond AWS, end to end through the built binary: the zone formats of each cloud and of
//! clusters on premises, and the provider-specific credentials-agent egress rule.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const IMAGE: &str = "ghcr.io/ewhauser/celld@sha256:1c0d854cd2af39fa439f163d5b88a19c7bccefd25fe35e2c0e1f43b3d886f424";

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_celld-gen"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("CELLD_GEN_HEALER_NAMESPACE")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A valid Bucket fleet with the given storage and placement blocks (indented by two)
/// and extra spec lines.
fn fleet(storage: &str, placement: &str, extra: &str) -> String {
    format!(
        "apiVersion: fleet.celld.dev/v1alpha1\nkind: CelldFleet\nmetadata:\n  name: alpha\n  namespace: apps\nspec:\n  identity: ma9qajlqywp3us43qnx2u06rm8\n  profile: Bucket\n  runtimeImage: {IMAGE}\n  members: 3\n  serviceAccountName: alpha\n  storage:\n    bucket: alpha-cells\n{storage}  placement:\n{placement}{extra}"
    )
}

const MINIO: &str =
    "    endpoint:\n      url: http://minio.store:9000\n      credentialsSecretName: minio\n";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn check(text: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "f.yaml", text);
    run(&["check", p.to_str().unwrap()])
}

fn assert_valid(text: &str) {
    let out = check(text);
    assert!(
        out.status.success(),
        "{text}\n{}{}",
        text_of(&out.stdout),
        text_of(&out.stderr)
    );
}

fn text_of(b: &[u8]) -> String {
    text(b)
}

/// Checks `text` and returns stdout, asserting status 1.
fn refused(text: &str) -> String {
    let out = check(text);
    assert_eq!(out.status.code(), Some(1), "{text}");
    text_of(&out.stdout)
}

#[test]
fn zones_of_each_cloud_are_accepted_and_checked_against_the_region() {
    for (region, zones, endpoint) in [
        ("us-east-1", "[us-east-1a, us-east-1b, us-east-1c]", ""),
        (
            "us-west-2",
            "[us-west-2a, us-west-2-lax-1a, us-west-2-lax-1b]",
            "",
        ),
        (
            "us-east-1",
            "[us-east-1a, us-east-1-wl1-bos-wlz-1, us-east-1c]",
            "",
        ),
        (
            "us-central1",
            "[us-central1-a, us-central1-b, us-central1-c]",
            MINIO,
        ),
        ("eastus", "[eastus-1, eastus-2, eastus-3]", MINIO),
        ("eastus2", "[eastus2-1, eastus2-2, eastus2-3]", MINIO),
    ] {
        assert_valid(&fleet(
            &format!("    region: {region}\n{endpoint}"),
            &format!("    zones: {zones}\n"),
            "",
        ));
    }
    // A zone of another region, in each cloud's format.
    for (region, zone, endpoint, expected) in [
        (
            "us-east-1",
            "us-east-2a",
            "",
            "us-east-1a, a Local Zone such as us-east-1-lax-1a",
        ),
        (
            "us-central1",
            "us-east1-b",
            MINIO,
            "a zone of us-central1 such as us-central1-a",
        ),
        (
            "eastus",
            "westus-1",
            MINIO,
            "a zone of eastus such as eastus-1",
        ),
        (
            "eastus",
            "eastus-a",
            MINIO,
            "a zone of eastus such as eastus-1",
        ),
    ] {
        let out = refused(&fleet(
            &format!("    region: {region}\n{endpoint}"),
            &format!("    zones: [{zone}]\n"),
            "",
        ));
        assert!(
            out.contains(&format!(
                "spec.placement.zones[0]: `{zone}` is not a zone of region `{region}`"
            )),
            "{out}"
        );
        assert!(out.contains(expected), "{out}");
        assert!(
            out.contains("or `zoneFormat: Any` in spec.placement"),
            "{out}"
        );
    }
}

#[test]
fn zone_format_any_takes_label_values_unchecked() {
    assert_valid(&fleet(
        &format!("    region: us-east-1\n{MINIO}"),
        "    zones: [rack-1, rack-2, DC_3.b]\n    zoneFormat: Any\n",
        "",
    ));
    // Azure fault domains, as AKS labels nodes of a region without availability zones.
    assert_valid(&fleet(
        &format!("    region: westeurope\n{MINIO}"),
        "    zones: [\"0\", \"1\", \"2\"]\n    zoneFormat: Any\n",
        "",
    ));
    // Still a label value.
    let out = refused(&fleet(
        "    region: us-east-1\n",
        "    zones: [rack-1, -rack-2]\n    zoneFormat: Any\n",
        "",
    ));
    assert!(out.contains("spec.placement.zones"), "{out}");
    // Without it, a free-form zone is refused with the way out.
    let out = refused(&fleet(
        "    region: us-east-1\n",
        "    zones: [rack-1]\n",
        "",
    ));
    assert!(
        out.contains("`rack-1` is not a zone of region `us-east-1`"),
        "{out}"
    );
    // Only Cloud and Any.
    let out = refused(&fleet(
        "    region: us-east-1\n",
        "    zones: [rack-1]\n    zoneFormat: OnPrem\n",
        "",
    ));
    assert!(out.contains("spec.placement.zoneFormat"), "{out}");
}

#[test]
fn non_aws_regions_need_an_endpoint() {
    let out = refused(&fleet(
        "    region: us-central1\n",
        "    zones: [us-central1-a]\n",
        "",
    ));
    assert!(
        out.contains("spec.storage.region: `us-central1` is not a region name of Amazon S3"),
        "{out}"
    );
    assert!(
        out.contains("Google Cloud and Azure names need storage.endpoint"),
        "{out}"
    );
    // The zones are not reported again for a region that is wrong itself.
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
fn init_expands_short_zones_in_each_cloud_and_takes_full_names() {
    let base = |region: &str, zones: &str, extra: &[&str]| {
        let mut args = vec![
            "init",
            "alpha",
            "--namespace",
            "apps",
            "--profile",
            "Bucket",
            "--bucket",
            "alpha-cells",
            "--region",
            region,
            "--zones",
            zones,
            "--image",
            IMAGE,
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let gcs = [
        "--endpoint",
        "https://storage.googleapis.com",
        "--credentials-secret",
        "gcs-hmac",
    ];
    for (region, zones, extra, want) in [
        (
            "us-east-1",
            "a,b,c",
            &[][..],
            ["us-east-1a", "us-east-1b", "us-east-1c"],
        ),
        (
            "us-central1",
            "a,b,c",
            &gcs[..],
            ["us-central1-a", "us-central1-b", "us-central1-c"],
        ),
        (
            "eastus",
            "1,2,3",
            &gcs[..],
            ["eastus-1", "eastus-2", "eastus-3"],
        ),
        (
            "us-central1",
            "us-central1-a,b,us-central1-c",
            &gcs[..],
            ["us-central1-a", "us-central1-b", "us-central1-c"],
        ),
        (
            "us-west-2",
            "a,us-west-2-lax-1a,c",
            &[][..],
            ["us-west-2a", "us-west-2-lax-1a", "us-west-2c"],
        ),
    ] {
        let out = base(region, zones, extra);
        assert!(
            out.status.success(),
            "{region} {zones}: {}",
            text(&out.stderr)
        );
        let s = text(&out.stdout);
        for z in want {
            assert!(s.contains(&format!("    - \"{z}\"\n")), "{z}: {s}");
        }
    }
    let out = base("us-central1", "a,b,c", &gcs);
    let s = text(&out.stdout);
    assert!(s.contains("    endpoint:\n      url: \"https://storage.googleapis.com\"\n      credentialsSecretName: \"gcs-hmac\"\n"), "{s}");

    // On premises: taken as written, not expanded.
    let out = base("us-east-1", "a,b,rack-3", &["--zone-format", "Any"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("    - \"a\"\n") && s.contains("    zoneFormat: Any\n"),
        "{s}"
    );

    // A GCP region without an endpoint: refused, nothing printed.
    let out = base("us-central1", "a,b,c", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("not a region name of Amazon S3"));
    // --endpoint and --credentials-secret go together.
    let out = base(
        "us-central1",
        "a",
        &["--endpoint", "https://storage.googleapis.com"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--credentials-secret"));
}

#[test]
fn help_and_schema_say_which_zone_formats_are_accepted() {
    let help = text(&run(&["init", "--help"]).stdout);
    for needle in [
        "us-west-2-lax-1a",
        "us-central1-a",
        "eastus-1",
        "zoneFormat Any",
        "--zone-format",
        "--zones a,b,c --endpoint https://storage.googleapis.com",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let schema: serde_json::Value = serde_json::from_slice(&run(&["schema"]).stdout).unwrap();
    let placement = &schema["properties"]["spec"]["properties"]["placement"]["properties"];
    let formats = placement["zoneFormat"]["description"].as_str().unwrap();
    assert_eq!(formats, celld_gen::api::validate::formats::ZONE_FORMATS);
    assert_eq!(
        placement["zones"]["items"]["pattern"],
        celld_gen::api::validate::formats::ZONE_PATTERN
    );
    // The CRD carries the same description and the region rule.
    let crds = text(&run(&["crds"]).stdout);
    assert!(crds.contains("us-east-1-wl1-bos-wlz-1"));
    assert!(crds.contains("unless placement.zoneFormat is Any"));
}

/// The NetworkPolicy of a rendered fleet.
fn network_policy(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "f.yaml", text);
    let out = run(&["render", p.to_str().unwrap(), "--stdout"]);
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    let s = text_of(&out.stdout);
    s.split("---\n")
        .find(|d| d.contains("kind: NetworkPolicy"))
        .unwrap()
        .to_owned()
}

#[test]
fn credentials_agent_egress_is_commented_and_can_change_or_go() {
    let aws = |extra: &str| {
        fleet(
            "    region: us-east-1\n",
            "    zones: [us-east-1a]\n",
            extra,
        )
    };
    let np = network_policy(&aws(""));
    assert!(
        np.contains(
            "  # EKS Pod Identity agent (bucket credentials), the default: set\n  # spec.credentialsAgent to change it, or enabled: false to leave it out.\n  - to:\n    - ipBlock:\n        cidr: \"169.254.170.23/32\"\n    ports:\n    - protocol: TCP\n      port: 80\n"
        ),
        "{np}"
    );

    let np = network_policy(&aws(
        "  credentialsAgent:\n    cidr: 169.254.169.254/32\n    port: 988\n",
    ));
    assert!(
        np.contains("  # credentials agent (spec.credentialsAgent)\n  - to:\n    - ipBlock:\n        cidr: \"169.254.169.254/32\"\n    ports:\n    - protocol: TCP\n      port: 988\n"),
        "{np}"
    );
    assert!(!np.contains("169.254.170.23"));

    let np = network_policy(&aws("  credentialsAgent:\n    enabled: false\n"));
    assert!(
        !np.contains("169.254.") && !np.contains("credentials agent"),
        "{np}"
    );
    assert!(!np.contains("Pod Identity"), "{np}");

    // Errors.
    let out = refused(&aws(
        "  credentialsAgent:\n    enabled: false\n    port: 80\n",
    ));
    assert!(
        out.contains("spec.credentialsAgent.enabled: cidr and port describe an agent that `enabled: false` turns off"),
        "{out}"
    );
    let out = refused(&aws("  credentialsAgent:\n    cidr: 169.254.0.0/16\n"));
    assert!(
        out.contains(
            "spec.credentialsAgent.cidr: `169.254.0.0/16` does not name exactly one address"
        ),
        "{out}"
    );
    let out = refused(&aws("  credentialsAgent:\n    port: 0\n"));
    assert!(
        out.contains("spec.credentialsAgent.port: 0 is out of range"),
        "{out}"
    );
    let out = refused(&aws("  credentialsAgent:\n    address: x\n"));
    assert!(out.contains("spec.credentialsAgent"), "{out}");
}
