//! One test per validation rule, each asserting the field, the message and the location.

mod pod;

use std::path::Path;

use celld_api::diagnostic::Diagnostic;

const DIGEST: &str = "1c0d854cd2af39fa439f163d5b88a19c7bccefd25fe35e2c0e1f43b3d886f424";

fn base() -> String {
    format!(
        "apiVersion: fleet.celld.dev/v1alpha1
kind: CelldFleet
metadata:
  name: alpha
  namespace: apps
spec:
  identity: 7kq2m9x4c1v8b3n6z5h0j2w4r8
  profile: PersistentFleet
  runtimeImage: ghcr.io/ewhauser/celld@sha256:{DIGEST}
  members: 3
  serviceAccountName: runtime
  storage:
    bucket: alpha-bucket
    region: us-east-1
    storageClassName: gp3
  placement:
    zones: [us-east-1a, us-east-1b, us-east-1c]
"
    )
}

fn check(text: &str) -> Vec<Diagnostic> {
    match super::load_str(Path::new("fleet.yaml"), text) {
        Ok(_) => Vec::new(),
        Err(d) => d,
    }
}

/// Asserts that `text` fails with exactly one problem at `field` whose message contains
/// `message`, and returns it.
#[track_caller]
fn fails(text: &str, field: &str, message: &str) -> Diagnostic {
    let d = check(text);
    let hit: Vec<&Diagnostic> = d
        .iter()
        .filter(|d| d.field == field && d.message.contains(message))
        .collect();
    assert!(
        hit.len() == 1 && d.len() == 1,
        "expected one problem at {field} containing {message:?}, got {d:#?}"
    );
    assert!(
        !hit[0].expected.is_empty(),
        "every problem says what would be valid"
    );
    hit[0].clone()
}

fn with(extra: &str) -> String {
    format!("{}{extra}", base())
}

fn replace(from: &str, to: &str) -> String {
    let b = base();
    assert!(b.contains(from), "base has no {from:?}");
    b.replacen(from, to, 1)
}

#[test]
fn the_base_fleet_is_valid() {
    assert_eq!(check(&base()), vec![]);
}

#[test]
fn every_problem_is_reported_not_only_the_first() {
    let text = replace("members: 3", "members: 0\n  colour: red")
        .replace("alpha-bucket", "Alpha")
        .replace("  bucket: Alpha", "  bucket: Alpha\n    size: 3");
    let d = check(&text);
    // Shape errors come first and all together; meaning is checked once the shape is right.
    let fields: Vec<&str> = d.iter().map(|d| d.field.as_str()).collect();
    assert_eq!(fields, vec!["spec.colour", "spec.storage.size"], "{d:#?}");
}

#[test]
fn unknown_fields_name_the_valid_ones_with_line_and_column() {
    let d = fails(
        &with("  colour: red\n"),
        "spec.colour",
        "unknown field `colour`",
    );
    assert_eq!((d.line, d.column), (18, 3));
    assert!(d.expected.contains("runtimeImage"));
    let d = fails(
        &replace(
            "    region: us-east-1",
            "    region: us-east-1\n    regoin: x",
        ),
        "spec.storage.regoin",
        "unknown field",
    );
    assert_eq!((d.line, d.column), (15, 5));
    fails(&with("status: {}\n"), "status", "written by the healer");
    fails(
        &replace("  namespace: apps", "  namespace: apps\n  uid: x"),
        "metadata.uid",
        "unknown field",
    );
}

#[test]
fn wrong_types_say_what_was_found() {
    let d = fails(
        &replace("members: 3", "members: three"),
        "spec.members",
        "`three` is a string",
    );
    assert_eq!(d.expected, "an integer from 1 to 100");
    assert_eq!((d.line, d.column), (10, 12));
    fails(
        &replace("members: 3", "members: 3.5"),
        "spec.members",
        "`3.5` is a number",
    );
    fails(
        &with("  maintenance: {restartToken: 2026}\n"),
        "spec.maintenance.restartToken",
        "quote the value",
    );
    fails(
        &replace("members: 3", "members: 99999999999"),
        "spec.members",
        "out of range",
    );
}

#[test]
fn enums_list_the_valid_values() {
    let d = fails(
        &replace("PersistentFleet", "Persistent"),
        "spec.profile",
        "`Persistent` is not a valid value",
    );
    assert!(d.expected.contains("Bucket") && d.expected.contains("PersistentFleet"));
}

#[test]
fn missing_required_fields_point_at_their_parent() {
    let d = fails(
        &replace("  serviceAccountName: runtime\n", ""),
        "spec.serviceAccountName",
        "missing required field",
    );
    assert_eq!(d.line, 7);
    fails(
        &replace("  namespace: apps\n", ""),
        "metadata.namespace",
        "missing required field",
    );
}

#[test]
fn header_must_be_the_fleet_api() {
    fails(
        &replace("fleet.celld.dev/v1alpha1", "celld.eric.dev/v1alpha1"),
        "apiVersion",
        "not the fleet API version",
    );
}

#[test]
fn name_is_a_dns_label_of_at_most_40() {
    fails(
        &replace("name: alpha", &format!("name: {}", "a".repeat(41))),
        "metadata.name",
        "not a valid fleet name",
    );
    fails(
        &replace("name: alpha", "name: Alpha"),
        "metadata.name",
        "not a valid fleet name",
    );
    assert!(
        check(&replace(
            "name: alpha",
            &format!("name: {}", "a".repeat(40))
        ))
        .is_empty()
    );
}

#[test]
fn own_label_and_annotation_keys_are_reserved() {
    fails(
        &replace(
            "  namespace: apps\n",
            "  namespace: apps\n  labels: {fleet.celld.dev/identity: x}\n",
        ),
        "metadata.labels.fleet.celld.dev/identity",
        "reserved for celld-gen",
    );
    fails(
        &replace(
            "  namespace: apps\n",
            "  namespace: apps\n  annotations: {fleet.celld.dev/replacement-claim: x}\n",
        ),
        "metadata.annotations.fleet.celld.dev/replacement-claim",
        "reserved for celld-gen",
    );
    assert_eq!(
        check(&replace(
            "  namespace: apps\n",
            "  namespace: apps\n  labels: {team: a}\n"
        )),
        vec![]
    );
}

#[test]
fn gitops_guards_may_only_be_written_as_strong() {
    let ann = |v: &str| {
        replace(
            "  namespace: apps\n",
            &format!("  namespace: apps\n  annotations: {{{v}}}\n"),
        )
    };
    fails(
        &ann("argocd.argoproj.io/sync-options: \"ServerSideApply=true,Prune=true\""),
        "metadata.annotations.argocd.argoproj.io/sync-options",
        "`Prune=true` would let Argo CD remove the fleet",
    );
    fails(
        &ann("argocd.argoproj.io/sync-options: Delete=yes"),
        "metadata.annotations.argocd.argoproj.io/sync-options",
        "without a person confirming",
    );
    fails(
        &ann("kustomize.toolkit.fluxcd.io/prune: enabled"),
        "metadata.annotations.kustomize.toolkit.fluxcd.io/prune",
        "would let Flux prune",
    );
    for ok in [
        "argocd.argoproj.io/sync-options: \"Prune=false,Delete=confirm\"",
        "argocd.argoproj.io/sync-options: ServerSideApply=true",
        "kustomize.toolkit.fluxcd.io/prune: disabled",
    ] {
        assert_eq!(check(&ann(ok)), vec![], "{ok}");
    }
}

#[test]
fn identity_is_26_lowercase_alphanumerics() {
    fails(
        &replace("7kq2m9x4c1v8b3n6z5h0j2w4r8", "7KQ2M9X4C1V8B3N6Z5H0J2W4R8"),
        "spec.identity",
        "26 lowercase",
    );
    fails(
        &replace("7kq2m9x4c1v8b3n6z5h0j2w4r8", "short"),
        "spec.identity",
        "26 lowercase",
    );
}

#[test]
fn bucket_workload_only_with_bucket_profile() {
    fails(
        &with("  bucketWorkload: Ordered\n"),
        "spec.bucketWorkload",
        "Bucket profile only",
    );
    let bucket = replace(
        "profile: PersistentFleet",
        "profile: Bucket\n  bucketWorkload: Ordered",
    )
    .replace("    storageClassName: gp3\n", "");
    assert_eq!(check(&bucket), vec![]);
}

#[test]
fn runtime_image_is_digest_pinned_and_not_stock() {
    let tagged = format!("runtimeImage: ghcr.io/ewhauser/celld@sha256:{DIGEST}");
    fails(
        &replace(&tagged, "runtimeImage: ghcr.io/ewhauser/celld:v0.6.1"),
        "spec.runtimeImage",
        "pinned by digest",
    );
    // `repo:tag@sha256:…`, as Renovate and Dependabot write it, is accepted; the
    // members run the digest alone (render/context.rs, `pinned_image`).
    assert_eq!(
        check(&replace(
            &tagged,
            &format!("runtimeImage: ghcr.io/ewhauser/celld:v0.6.1-ewhauser.3@sha256:{DIGEST}"),
        )),
        vec![]
    );
    assert_eq!(
        celld_api::validate::formats::pinned_image(&format!(
            "registry.example.com:5000/mirror/celld:v1@sha256:{DIGEST}"
        )),
        format!("registry.example.com:5000/mirror/celld@sha256:{DIGEST}")
    );
    fails(
        &replace(
            &tagged,
            &format!("runtimeImage: ghcr.io/ewhauser:v1/celld@sha256:{DIGEST}"),
        ),
        "spec.runtimeImage",
        "only the last path component",
    );
    fails(
        &replace(
            &tagged,
            &format!("runtimeImage: ghcr.io/ewhauser/celld:-v1@sha256:{DIGEST}"),
        ),
        "spec.runtimeImage",
        "the tag before the digest",
    );
    for stock in ["ghcr.io/denoland/celld", "ghcr.io/denoland/celld:v0.1"] {
        fails(
            &replace(&tagged, &format!("runtimeImage: {stock}@sha256:{DIGEST}")),
            "spec.runtimeImage",
            "stock ghcr.io/denoland/celld",
        );
    }
    fails(
        &replace(&tagged, "runtimeImage: ghcr.io/ewhauser/celld@sha256:abc"),
        "spec.runtimeImage",
        "64 lowercase",
    );
}

#[test]
fn members_range_and_zone_cover() {
    fails(
        &replace("members: 3", "members: 0"),
        "spec.members",
        "out of range",
    );
    fails(
        &replace("members: 3", "members: 101"),
        "spec.members",
        "out of range",
    );
    fails(
        &replace("members: 3", "members: 2"),
        "spec.members",
        "cannot cover 3 zones",
    );
    let four_zones =
        replace("  members: 3\n", "").replace("us-east-1c]", "us-east-1c, us-east-1d]");
    fails(
        &four_zones,
        "spec.members",
        "default of 3 members cannot cover 4 zones",
    );
}

#[test]
fn members_absent_in_external_mode() {
    fails(
        &with("  capacity: {mode: External}\n"),
        "spec.members",
        "owned by the /scale writer",
    );
    assert_eq!(
        check(&replace("  members: 3\n", "").replace(
            "  serviceAccountName",
            "  capacity: {mode: External}\n  serviceAccountName"
        )),
        vec![]
    );
}

#[test]
fn service_account_name_is_a_subdomain() {
    fails(
        &replace(
            "serviceAccountName: runtime",
            "serviceAccountName: Run_time",
        ),
        "spec.serviceAccountName",
        "not a valid ServiceAccount",
    );
}

#[test]
fn zones_are_unique_region_letters_and_at_most_six() {
    let d = fails(
        &replace("us-east-1b,", "us-west-2b,"),
        "spec.placement.zones[1]",
        "not a zone of region `us-east-1`",
    );
    assert_eq!((d.line, d.column), (17, 25));
    fails(
        &replace("us-east-1b,", "us-east-1a,"),
        "spec.placement.zones[1]",
        "listed twice",
    );
    let seven = replace("members: 3", "members: 7").replace(
        "us-east-1c]",
        "us-east-1c, us-east-1d, us-east-1e, us-east-1f, us-east-1g]",
    );
    fails(&seven, "spec.placement.zones", "7 zones listed");
    fails(
        &replace("zones: [us-east-1a, us-east-1b, us-east-1c]", "zones: []"),
        "spec.placement.zones",
        "0 zones",
    );
}

#[test]
fn storage_class_required_for_persistent_and_refused_for_bucket() {
    fails(
        &replace("    storageClassName: gp3\n", ""),
        "spec.storage.storageClassName",
        "needs a StorageClass",
    );
    fails(
        &replace("profile: PersistentFleet", "profile: Bucket"),
        "spec.storage.storageClassName",
        "keeps no disks",
    );
}

#[test]
fn bucket_region_prefix_and_size() {
    fails(
        &replace("bucket: alpha-bucket", "bucket: Alpha_Bucket"),
        "spec.storage.bucket",
        "not a valid bucket name",
    );
    fails(
        &replace("region: us-east-1", "region: useast"),
        "spec.storage.region",
        "not a region name",
    );
    fails(
        &replace(
            "storageClassName: gp3",
            "storageClassName: gp3\n    prefix: Team",
        ),
        "spec.storage.prefix",
        "not a valid prefix",
    );
    fails(
        &replace(
            "storageClassName: gp3",
            "storageClassName: gp3\n    sizeGiB: 0",
        ),
        "spec.storage.sizeGiB",
        "out of range",
    );
    fails(
        &replace(
            "storageClassName: gp3",
            "storageClassName: gp3\n    sizeGiB: 16385",
        ),
        "spec.storage.sizeGiB",
        "out of range",
    );
}

#[test]
fn endpoint_is_an_origin_with_a_secret() {
    let ep = |url: &str| {
        replace(
            "storageClassName: gp3",
            &format!(
                "storageClassName: gp3\n    endpoint: {{url: \"{url}\", credentialsSecretName: s3-creds}}"
            ),
        )
    };
    assert_eq!(check(&ep("http://minio.store:9000")), vec![]);
    fails(
        &ep("http://minio.store:9000/bucket"),
        "spec.storage.endpoint.url",
        "not an HTTP(S) origin",
    );
    fails(
        &ep("s3://minio"),
        "spec.storage.endpoint.url",
        "not an HTTP(S) origin",
    );
    let bad_cidr = replace(
        "storageClassName: gp3",
        "storageClassName: gp3\n    endpoint: {url: \"http://10.0.0.5:9000\", credentialsSecretName: s3-creds, egress: {cidr: 10.0.0.6/32}}",
    );
    fails(
        &bad_cidr,
        "spec.storage.endpoint.egress.cidr",
        "not the address in the URL",
    );
}

#[test]
fn quantities_parse_and_limits_cover_requests() {
    fails(
        &with("  execution: {cpuRequest: 2 cores}\n"),
        "spec.execution.cpuRequest",
        "not a quantity",
    );
    fails(
        &with("  execution: {memoryRequest: 1K}\n"),
        "spec.execution.memoryRequest",
        "not a quantity",
    );
    fails(
        &with("  execution: {cpuRequest: \"2\", cpuLimit: \"1\"}\n"),
        "spec.execution.cpuLimit",
        "below cpuRequest",
    );
    // Defaults take part: 256Mi alone is below the default 512Mi request.
    fails(
        &with("  execution: {memoryLimit: 256Mi}\n"),
        "spec.execution.memoryLimit",
        "below memoryRequest 512Mi",
    );
    fails(
        &with("  execution: {maxResidentCells: 0}\n"),
        "spec.execution.maxResidentCells",
        "out of range",
    );
    fails(
        &with("  execution: {idleEvictSeconds: 86401}\n"),
        "spec.execution.idleEvictSeconds",
        "out of range",
    );
}

#[test]
fn shutdown_and_grace_leave_headroom() {
    fails(
        &with("  lifecycle: {shutdownSeconds: 0}\n"),
        "spec.lifecycle.shutdownSeconds",
        "out of range",
    );
    fails(
        &with("  lifecycle: {shutdownSeconds: 3601, terminationGraceSeconds: 3605}\n"),
        "spec.lifecycle.shutdownSeconds",
        "out of range",
    );
    fails(
        &with("  lifecycle: {shutdownSeconds: 60, terminationGraceSeconds: 64}\n"),
        "spec.lifecycle.terminationGraceSeconds",
        "less than 5s of headroom",
    );
    // Only shutdown set: the default grace of 30 must still cover it.
    fails(
        &with("  lifecycle: {shutdownSeconds: 26}\n"),
        "spec.lifecycle.shutdownSeconds",
        "less than 5s of headroom",
    );
    assert_eq!(
        check(&with(
            "  lifecycle: {shutdownSeconds: 120, terminationGraceSeconds: 180}\n"
        )),
        vec![]
    );
}

#[test]
fn restart_token_is_short() {
    fails(
        &with(&format!(
            "  maintenance: {{restartToken: {}}}\n",
            "x".repeat(129)
        )),
        "spec.maintenance.restartToken",
        "longer than 128",
    );
}

#[test]
fn env_names_valid_unique_and_not_owned_or_reserved() {
    assert_eq!(
        check(&with("  env: [{name: RUST_LOG, value: info}]\n")),
        vec![]
    );
    fails(
        &with("  env: [{name: 1BAD, value: x}]\n"),
        "spec.env[0].name",
        "not a valid variable name",
    );
    fails(
        &with("  env: [{name: A, value: x}, {name: A, value: y}]\n"),
        "spec.env[1].name",
        "listed twice",
    );
    fails(
        &with("  env: [{name: CELLD_BUCKET, value: x}]\n"),
        "spec.env[0].name",
        "set by celld-gen",
    );
    fails(
        &with("  env: [{name: AWS_REGION, value: x}]\n"),
        "spec.env[0].name",
        "set by celld-gen",
    );
    fails(
        &with("  env: [{name: CELLD_UNSAFE_THING, value: x}]\n"),
        "spec.env[0].name",
        "`CELLD_UNSAFE_` are reserved",
    );
    fails(
        &with("  env: [{name: CELLD_OTEL_SINK, value: x}]\n"),
        "spec.env[0].name",
        "`CELLD_OTEL` are reserved",
    );
    fails(
        &with("  env: [{name: CELLD_VAR_X, value: x}]\n"),
        "spec.env[0].name",
        "reserved",
    );
    fails(
        &with("  env: [{name: CELLD_SHUTDOWN_DRAIN_MS, value: \"1\"}]\n"),
        "spec.env[0].name",
        "removed variable",
    );
}

#[test]
fn env_value_sources_and_celld_value_formats() {
    fails(
        &with("  env: [{name: A}]\n"),
        "spec.env[0]",
        "exactly one value source",
    );
    fails(
        &with("  env: [{name: A, value: x, secretKeyRef: {name: s, key: k}}]\n"),
        "spec.env[0]",
        "exactly one value source",
    );
    fails(
        &with("  env: [{name: A, secretKeyRef: {name: s, key: \"k/x\"}}]\n"),
        "spec.env[0].secretKeyRef.key",
        "not a valid Secret key",
    );
    fails(
        &with(&format!(
            "  env: [{{name: A, value: {}}}]\n",
            "x".repeat(4097)
        )),
        "spec.env[0].value",
        "longer than 4096",
    );
    fails(
        &with("  env: [{name: CELLD_CLOUD, value: \"yes\"}]\n"),
        "spec.env[0].value",
        "only 0 or 1",
    );
    fails(
        &with("  env: [{name: CELLD_RELEASES, value: \"0\"}]\n"),
        "spec.env[0].value",
        "positive whole number",
    );
    let many: Vec<String> = (0..33)
        .map(|i| format!("{{name: V{i}, value: x}}"))
        .collect();
    fails(
        &with(&format!("  env: [{}]\n", many.join(", "))),
        "spec.env",
        "33 variables",
    );
}

#[test]
fn telemetry_url_egress_and_sampler() {
    let t = |body: &str| with(&format!("  telemetry: {{{body}}}\n"));
    assert_eq!(
        check(&t(
            "collectorURL: \"http://otel.obs:4318\", egress: {podLabels: {app: otel}, namespace: obs}, sampler: parentbased_traceidratio, samplerArg: \"0.1\""
        )),
        vec![]
    );
    fails(
        &t("collectorURL: \"otel:4318\", egress: {cidr: 10.0.0.1/32}"),
        "spec.telemetry.collectorURL",
        "not an HTTP(S) base URL",
    );
    fails(
        &t("collectorURL: \"http://otel\", egress: {}"),
        "spec.telemetry.egress",
        "exactly one of cidr or podLabels",
    );
    fails(
        &t("collectorURL: \"http://otel\", egress: {cidr: 10.0.0.0/24}"),
        "spec.telemetry.egress.cidr",
        "exactly one address",
    );
    fails(
        &t("collectorURL: \"http://otel\", egress: {cidr: 10.0.0.1/32, namespace: obs}"),
        "spec.telemetry.egress.namespace",
        "only applies with podLabels",
    );
    fails(
        &t(
            "collectorURL: \"http://otel\", egress: {cidr: 10.0.0.1/32}, sampler: always_on, samplerArg: \"0.5\"",
        ),
        "spec.telemetry.samplerArg",
        "only applies to the ratio samplers",
    );
    fails(
        &t("collectorURL: \"http://otel\", egress: {cidr: 10.0.0.1/32}, sampler: traceidratio"),
        "spec.telemetry.samplerArg",
        "need a samplerArg",
    );
    fails(
        &t(
            "collectorURL: \"http://otel\", egress: {cidr: 10.0.0.1/32}, sampler: traceidratio, samplerArg: \"1.5\"",
        ),
        "spec.telemetry.samplerArg",
        "not a ratio",
    );
    fails(
        &t("collectorURL: \"http://otel\", egress: {cidr: 10.0.0.1/32}, flushBytes: 0"),
        "spec.telemetry.flushBytes",
        "out of range",
    );
}

fn routing(body: &str) -> String {
    with(&format!(
        "  routing:\n    hostnames: [alpha.example.com]\n    source: {{namespace: gateways, podLabels: {{app: envoy}}}}\n{body}"
    ))
}

#[test]
fn routing_needs_exactly_one_of_gateway_or_ingress() {
    assert_eq!(
        check(&routing(
            "    gateway: {name: public, namespace: gateways}\n"
        )),
        vec![]
    );
    assert_eq!(
        check(&routing(
            "    ingress: {className: nginx, tlsSecretName: alpha-tls}\n"
        )),
        vec![]
    );
    fails(
        &routing(""),
        "spec.routing",
        "exactly one of gateway or ingress",
    );
    fails(
        &routing("    gateway: {name: public}\n    ingress: {className: nginx}\n"),
        "spec.routing",
        "exactly one of gateway or ingress",
    );
}

#[test]
fn routing_hostnames_valid_unique_and_bounded() {
    let gw = "    gateway: {name: public}\n";
    fails(
        &routing(gw).replace("[alpha.example.com]", "[10.0.0.1]"),
        "spec.routing.hostnames[0]",
        "not a valid hostname",
    );
    fails(
        &routing(gw).replace("[alpha.example.com]", "[a.example.com, a.example.com]"),
        "spec.routing.hostnames[1]",
        "listed twice",
    );
    fails(
        &routing(gw).replace("[alpha.example.com]", "[]"),
        "spec.routing.hostnames",
        "0 hostnames",
    );
    let many: Vec<String> = (0..17).map(|i| format!("h{i}.example.com")).collect();
    fails(
        &routing(gw).replace("[alpha.example.com]", &format!("[{}]", many.join(", "))),
        "spec.routing.hostnames",
        "17 hostnames",
    );
}

#[test]
fn routing_source_and_reserved_annotations() {
    let gw = "    gateway: {name: public}\n";
    fails(
        &routing(gw).replace("podLabels: {app: envoy}", "podLabels: {}"),
        "spec.routing.source.podLabels",
        "0 labels",
    );
    fails(
        &routing(gw).replace("namespace: gateways,", "namespace: Gateways,"),
        "spec.routing.source.namespace",
        "not a valid namespace",
    );
    fails(
        &routing(
            "    ingress: {className: nginx, annotations: {kubernetes.io/ingress.class: nginx}}\n",
        ),
        "spec.routing.ingress.annotations.kubernetes.io/ingress.class",
        "is reserved",
    );
    fails(
        &routing("    ingress: {className: nginx, annotations: {fleet.celld.dev/x: y}}\n"),
        "spec.routing.ingress.annotations.fleet.celld.dev/x",
        "is reserved",
    );
}

#[test]
fn capacity_bounds_thresholds_and_windows() {
    let c = |body: &str| with(&format!("  capacity: {{mode: Automatic, {body}}}\n"));
    assert_eq!(check(&c("minMembers: 3, maxMembers: 10")), vec![]);
    fails(
        &c("minMembers: 5, maxMembers: 4"),
        "spec.capacity.minMembers",
        "above maxMembers",
    );
    fails(
        &c("minMembers: 2"),
        "spec.capacity.minMembers",
        "cannot cover 3 zones",
    );
    fails(
        &c("cpuLowMillicores: 300"),
        "spec.capacity.cpuLowMillicores",
        "not below cpuHighMillicores",
    );
    fails(
        &c("memoryLowMiB: 768"),
        "spec.capacity.memoryLowMiB",
        "not below memoryHighMiB",
    );
    fails(
        &c("minWindowSeconds: 50, maxWindowSeconds: 40"),
        "spec.capacity.minWindowSeconds",
        "above maxWindowSeconds",
    );
    fails(
        &c("sampleIntervalSeconds: 60, maxAgeSeconds: 30"),
        "spec.capacity.sampleIntervalSeconds",
        "every sample would be stale",
    );
    fails(
        &c("maxMembers: 101"),
        "spec.capacity.maxMembers",
        "out of range",
    );
    fails(
        &c("scaleOutStep: 11"),
        "spec.capacity.scaleOutStep",
        "out of range",
    );
}

/// Validation accepts exactly the range the CRD schema carries for every bounded field
/// (the same constants): both ends in, one past either end out.
#[test]
fn ranges_are_the_crd_bounds() {
    for b in crate::api::bounds_table::bounded() {
        for (v, inside) in [
            (b.min - 1, false),
            (b.min, true),
            (b.max, true),
            (b.max + 1, false),
        ] {
            let d = check(&b.edit.apply(&base(), v));
            let out_of_range = d
                .iter()
                .any(|d| d.field == b.field && d.message.contains("out of range"));
            assert_eq!(out_of_range, !inside, "{} = {v}: {d:#?}", b.field);
        }
    }
}

#[test]
fn a_hostname_routes_to_one_fleet() {
    let dir = std::env::temp_dir().join(format!("celld-gen-hosts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let routing = "  routing:\n    hostnames: [api.example.org]\n    source: {namespace: gw, podLabels: {app: gw}}\n    gateway: {name: gw}\n";
    std::fs::write(dir.join("a.yaml"), with(routing)).expect("write");
    let b = with(routing)
        .replace("name: alpha", "name: beta")
        .replace("7kq2m9x4c1v8b3n6z5h0j2w4r8", "7kq2m9x4c1v8b3n6z5h0j2w4r9")
        .replace("alpha-bucket", "beta-bucket");
    std::fs::write(dir.join("b.yaml"), b).expect("write");
    let d = crate::load::load_paths(std::slice::from_ref(&dir))
        .err()
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].field, "spec.routing.hostnames[0]");
    assert!(
        d[0].message
            .contains("`api.example.org` is already routed to the fleet in"),
        "{d:#?}"
    );
}

#[test]
fn fleets_may_not_share_identity_bucket_or_name() {
    let dir = std::env::temp_dir().join(format!("celld-gen-cross-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("a.yaml"), base()).expect("write");
    let b = base().replace("name: alpha", "name: beta");
    std::fs::write(dir.join("b.yaml"), &b).expect("write");
    let d = crate::load::load_paths(std::slice::from_ref(&dir))
        .err()
        .unwrap_or_default();
    let msgs: Vec<String> = d
        .iter()
        .map(|d| format!("{}: {}", d.field, d.message))
        .collect();
    assert_eq!(d.len(), 2, "{msgs:#?}");
    assert!(msgs[0].starts_with("spec.identity: this identity is already used"));
    assert!(msgs[1].starts_with("spec.storage.bucket: bucket `alpha-bucket` overlaps"));
    // Distinct prefixes in one bucket are fine; the whole bucket and a prefix are not.
    let c = b
        .replace("7kq2m9x4c1v8b3n6z5h0j2w4r8", "0000000000000000000000000b")
        .replace(
            "region: us-east-1\n",
            "region: us-east-1\n    prefix: team-b\n",
        );
    std::fs::write(dir.join("b.yaml"), &c).expect("write");
    let d = crate::load::load_paths(std::slice::from_ref(&dir))
        .err()
        .unwrap_or_default();
    assert_eq!(d.len(), 1, "{d:#?}");
    let a2 = base().replace(
        "region: us-east-1\n",
        "region: us-east-1\n    prefix: team-a\n",
    );
    std::fs::write(dir.join("a.yaml"), &a2).expect("write");
    let ok = crate::load::load_paths(std::slice::from_ref(&dir));
    assert!(ok.is_ok(), "{ok:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn directories_skip_other_yaml_and_rendered_output() {
    let dir = std::env::temp_dir().join(format!("celld-gen-walk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("out")).expect("temp dir");
    std::fs::write(dir.join("fleet.yaml"), base()).expect("write");
    std::fs::write(dir.join("kustomization.yaml"), "resources: []\n").expect("write");
    let rendered = base().replace(
        "  namespace: apps\n",
        "  namespace: apps\n  labels:\n    app.kubernetes.io/managed-by: celld-gen\n",
    );
    std::fs::write(dir.join("out").join("celldfleet.yaml"), rendered).expect("write");
    let fleets = crate::load::load_paths(std::slice::from_ref(&dir)).unwrap_or_default();
    assert_eq!(fleets.len(), 1);
    // Named explicitly, a file without a fleet is an error.
    let d = crate::load::load_paths(&[dir.join("kustomization.yaml")])
        .err()
        .unwrap_or_default();
    assert!(d[0].message.contains("no CelldFleet"), "{d:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn syntax_errors_are_located() {
    let d = check("apiVersion: x\nkind: [\n");
    assert_eq!(d.len(), 1);
    assert!(d[0].message.starts_with("invalid YAML"));
    assert!(d[0].line >= 2);
}
