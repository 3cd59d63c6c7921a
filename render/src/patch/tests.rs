//! Patches end to end: read with the fleets, applied after rendering, refused where they
//! touch what the healer relies on, and errors that name the patch.

use std::path::PathBuf;

use crate::render::{Bundle, render_all};
use crate::validate::{Source, load_sources};
use celld_api::diagnostic::Diagnostic;

const FLEET: &str = "apiVersion: fleet.celld.dev/v1alpha1
kind: CelldFleet
metadata: {name: alpha, namespace: apps}
spec:
  identity: 7kq2m9x4c1v8b3n6z5h0j2w4r8
  profile: PersistentFleet
  runtimeImage: ghcr.io/ewhauser/celld@sha256:1c0d854cd2af39fa439f163d5b88a19c7bccefd25fe35e2c0e1f43b3d886f424
  serviceAccountName: runtime
  storage: {bucket: alpha-bucket, region: us-east-1, storageClassName: gp3}
  placement: {zones: [us-east-1a, us-east-1b, us-east-1c]}
";

fn patch(body: &str) -> String {
    format!(
        "apiVersion: fleet.celld.dev/v1alpha1
kind: CelldFleetPatch
metadata: {{name: alpha, namespace: apps}}
patches:
{body}"
    )
}

fn run(files: &[(&str, String)]) -> Result<Bundle, Vec<Diagnostic>> {
    let sources: Vec<Source> = files
        .iter()
        .map(|(p, t)| Source {
            path: PathBuf::from(p),
            text: t.clone(),
            explicit: false,
        })
        .collect();
    let fleets = load_sources(&sources, &mut Vec::new())?;
    render_all(&fleets)
}

fn file<'a>(b: &'a Bundle, name: &str) -> &'a str {
    &b.files
        .iter()
        .find(|f| f.path == format!("apps/alpha/{name}"))
        .unwrap_or_else(|| panic!("no {name}"))
        .contents
}

#[track_caller]
fn refused(body: &str, field: &str, message: &str) -> Diagnostic {
    let e = run(&[("f.yaml", FLEET.into()), ("p.yaml", patch(body))]).unwrap_err();
    assert!(
        e.len() == 1 && e[0].field == field && e[0].message.contains(message),
        "expected one problem at {field} with {message:?}, got {e:#?}"
    );
    assert_eq!(e[0].file, PathBuf::from("p.yaml"));
    e[0].clone()
}

#[test]
fn patches_beside_or_inside_the_fleet_file_apply_after_rendering() {
    let body = "  - target: {kind: StatefulSet}
    jsonPatch:
      - {op: add, path: /spec/template/spec/dnsConfig, value: {options: [{name: ndots, value: \"2\"}]}}
  - target: {kind: Service, name: alpha-peers}
    strategicMerge: {metadata: {annotations: {example.com/x: y}}}
";
    let beside = run(&[("f.yaml", FLEET.into()), ("p.yaml", patch(body))]).unwrap();
    let inside = run(&[("f.yaml", format!("{FLEET}---\n{}", patch(body)))]).unwrap();
    assert_eq!(beside, inside);
    let sts = file(&beside, "statefulset.yaml");
    assert!(
        sts.contains("dnsConfig:\n        options:\n        - name: \"ndots\""),
        "{sts}"
    );
    assert!(file(&beside, "service-peers.yaml").contains("example.com/x: \"y\""));
    // Untouched objects keep their rendering, byte for byte.
    let plain = run(&[("f.yaml", FLEET.into())]).unwrap();
    assert_eq!(file(&beside, "service.yaml"), file(&plain, "service.yaml"));
    // Same input, same bytes.
    assert_eq!(
        beside,
        run(&[("f.yaml", FLEET.into()), ("p.yaml", patch(body))]).unwrap()
    );
}

#[test]
fn what_the_healer_relies_on_cannot_be_patched() {
    let d = refused(
        "  - target: {kind: StatefulSet}
    strategicMerge: {spec: {persistentVolumeClaimRetentionPolicy: {whenScaled: Delete}}}
",
        "patches[0]",
        "/spec/persistentVolumeClaimRetentionPolicy",
    );
    assert!(d.message.contains("keeps every disk"), "{d}");
    refused(
        "  - target: {kind: StatefulSet}
    jsonPatch: [{op: add, path: /spec/replicas, value: 5}]
",
        "patches[0]",
        "/spec/replicas",
    );
    refused(
        "  - target: {kind: Service}
    jsonPatch: [{op: replace, path: /spec/ports/0/port, value: 80}]
",
        "patches[0]",
        "/spec/ports/0/port",
    );
    refused(
        "  - target: {kind: StatefulSet}
    jsonPatch: [{op: remove, path: /metadata/annotations/argocd.argoproj.io~1sync-options}]
",
        "patches[0]",
        "argocd.argoproj.io~1sync-options",
    );
    refused(
        "  - target: {kind: CelldFleet}
    strategicMerge: {spec: {members: 9}}
",
        "patches[0].target.kind",
        "change the fleet file",
    );
    refused(
        "  - target: {kind: StatefulSet}
    strategicMerge: {spec: {template: {spec: {containers: [{name: celld, env: [{name: CELLD_BUCKET, value: s3://other}]}]}}}}
",
        "patches[0]",
        "env",
    );
}

#[test]
fn a_patch_that_no_longer_applies_is_an_error_naming_it() {
    let d = refused(
        "  - target: {kind: StatefulSet}
    jsonPatch:
      - {op: add, path: /spec/template/spec/dnsConfig, value: {}}
      - {op: replace, path: /spec/template/spec/nodeName, value: n1}
",
        "patches[0].jsonPatch[1]",
        "no longer applies",
    );
    assert_eq!(d.line, 8, "{d}");
    refused(
        "  - target: {kind: Deployment}
    strategicMerge: {metadata: {labels: {a: b}}}
",
        "patches[0].target",
        "renders no Deployment named `alpha`",
    );
    refused(
        "  - target: {kind: StatefulSet}
    strategicMerge: {spec: {template: {spec: {nodeNmae: x}}}}
",
        "patches[0]",
        "not a valid StatefulSet",
    );
}

/// A number kubectl would read differently (an octal file mode) is refused, in both
/// kinds of patch; in decimal it is taken.
#[test]
fn numbers_read_differently_by_kubectl_are_refused() {
    let d = refused(
        "  - target: {kind: StatefulSet}
    jsonPatch:
      - {op: add, path: /spec/template/spec/volumes, value: [{name: s, secret: {secretName: s, defaultMode: 0644}}]}
",
        "patches[0].jsonPatch[0].value[0].secret.defaultMode",
        "`0644` is read as a different number",
    );
    assert!(d.expected.contains("420"), "{d}");
    refused(
        "  - target: {kind: StatefulSet}
    strategicMerge: {spec: {template: {spec: {volumes: [{name: s, secret: {secretName: s, defaultMode: 0o400}}]}}}}
",
        "patches[0].strategicMerge.spec.template.spec.volumes[0].secret.defaultMode",
        "`0o400`",
    );
    let ok = run(&[
        ("f.yaml", FLEET.into()),
        (
            "p.yaml",
            patch("  - target: {kind: StatefulSet}\n    strategicMerge: {spec: {template: {spec: {volumes: [{name: s, secret: {secretName: s, defaultMode: 420}}]}}}}\n"),
        ),
    ])
    .unwrap();
    assert!(file(&ok, "statefulset.yaml").contains("defaultMode: 420"));
}

#[test]
fn patch_documents_are_checked_like_fleet_files() {
    let e = run(&[(
        "p.yaml",
        patch("  - target: {kind: StatefulSet}\n    jsonPatch: [{op: ad, path: /x, value: 1}]\n    strategicMerg: {}\n"),
    ), ("f.yaml", FLEET.into())])
    .unwrap_err();
    let fields: Vec<&str> = e.iter().map(|d| d.field.as_str()).collect();
    assert_eq!(
        fields,
        ["patches[0].jsonPatch[0].op", "patches[0].strategicMerg"],
        "{e:#?}"
    );
    assert!(
        e[1].message.contains("did you mean `strategicMerge`"),
        "{e:#?}"
    );
    // A patch for a fleet that is not among the inputs is an error, not dropped.
    let e = run(&[(
        "p.yaml",
        patch("  - target: {kind: StatefulSet}\n    strategicMerge: {metadata: {labels: {a: b}}}\n")
            .replace("name: alpha", "name: beta"),
    ), ("f.yaml", FLEET.into())])
    .unwrap_err();
    assert!(
        e.len() == 1
            && e[0]
                .message
                .contains("apps/beta, which is not among the fleets read"),
        "{e:#?}"
    );
}
