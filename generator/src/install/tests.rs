use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::*;

fn parse(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"))
}

/// Parses `v` into `T` and back: any field lost or added fails.
fn round_trips<T: DeserializeOwned + Serialize>(path: &str, v: &Value) {
    let typed: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{path}: {e}"));
    let back = serde_json::to_value(&typed).unwrap_or(Value::Null);
    assert_eq!(
        &back, v,
        "{path} does not round-trip through its typed form"
    );
}

#[test]
fn every_object_round_trips_through_its_type() {
    let files = render(&InstallOptions::default());
    let mut seen = 0;
    for f in &files {
        if !f.path.ends_with(".yaml")
            || f.path.starts_with("argocd/")
            || f.path.starts_with("flux/")
            || f.path == super::record::RECORD_FILE
        {
            continue;
        }
        let v = parse(&f.text);
        let kind = v["kind"].as_str().unwrap_or("").to_string();
        match kind.as_str() {
            "CustomResourceDefinition" => round_trips::<CustomResourceDefinition>(&f.path, &v),
            "Namespace" => round_trips::<Namespace>(&f.path, &v),
            "ServiceAccount" => round_trips::<ServiceAccount>(&f.path, &v),
            "ClusterRole" => round_trips::<ClusterRole>(&f.path, &v),
            "ClusterRoleBinding" => round_trips::<ClusterRoleBinding>(&f.path, &v),
            "Role" => round_trips::<Role>(&f.path, &v),
            "RoleBinding" => round_trips::<RoleBinding>(&f.path, &v),
            "Deployment" => round_trips::<Deployment>(&f.path, &v),
            "Service" => round_trips::<Service>(&f.path, &v),
            "PodDisruptionBudget" => round_trips::<PodDisruptionBudget>(&f.path, &v),
            "NetworkPolicy" => round_trips::<NetworkPolicy>(&f.path, &v),
            "ValidatingAdmissionPolicy" => round_trips::<ValidatingAdmissionPolicy>(&f.path, &v),
            "ValidatingAdmissionPolicyBinding" => {
                round_trips::<ValidatingAdmissionPolicyBinding>(&f.path, &v)
            }
            "MutatingAdmissionPolicy" => round_trips::<MutatingAdmissionPolicy>(&f.path, &v),
            "MutatingAdmissionPolicyBinding" => {
                round_trips::<MutatingAdmissionPolicyBinding>(&f.path, &v)
            }
            "Kustomization" => continue,
            other => panic!("{}: unexpected kind {other}", f.path),
        }
        seen += 1;
    }
    assert_eq!(seen, 20);
}

#[test]
fn output_is_deterministic_and_sorted() {
    let a = render(&InstallOptions::default());
    let b = render(&InstallOptions::default());
    assert_eq!(a, b);
    let paths: Vec<&str> = a.iter().map(|f| f.path.as_str()).collect();
    let mut sorted = paths.clone();
    sorted.sort_unstable();
    assert_eq!(paths, sorted);
    let k = parse(
        &a.iter()
            .find(|f| f.path == "kustomization.yaml")
            .map(|f| f.text.clone())
            .unwrap_or_default(),
    );
    assert_eq!(k["resources"].as_array().map(Vec::len), Some(20));
}

#[test]
fn crds_carry_status_and_scale_and_the_reservation_is_immutable() {
    let objs: BTreeMap<String, Value> = objects(&InstallOptions::default()).into_iter().collect();
    let fleet = &objs["crds/celldfleets.fleet.celld.dev.yaml"];
    let v = &fleet["spec"]["versions"][0];
    assert_eq!(v["subresources"]["status"], serde_json::json!({}));
    assert_eq!(
        v["subresources"]["scale"]["specReplicasPath"],
        ".spec.members"
    );
    assert_eq!(
        v["subresources"]["scale"]["labelSelectorPath"],
        ".status.labelSelector"
    );
    let res = &objs["crds/celldbucketreservations.fleet.celld.dev.yaml"];
    assert_eq!(res["spec"]["scope"], "Cluster");
    let rules = &res["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"];
    assert_eq!(rules[0]["rule"], "self == oldSelf");
    // Never pruned by Argo CD or Flux: deleting a CRD deletes every fleet.
    assert!(
        fleet["metadata"]["annotations"][labels::ARGOCD_SYNC_OPTIONS]
            .as_str()
            .is_some_and(|s| s.contains("Prune=false"))
    );
}

/// Every (group, resource, verb) of the roles of `kind` in `objs`, by namespace.
fn granted(objs: &[(String, Value)], kind: &str) -> BTreeMap<String, Vec<rbac::Triple>> {
    let mut out: BTreeMap<String, Vec<rbac::Triple>> = BTreeMap::new();
    for (_, o) in objs.iter().filter(|(_, o)| o["kind"] == kind) {
        let ns = o["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let e = out.entry(ns).or_default();
        e.extend(rbac::triples_of(&o["rules"]));
        e.sort();
        e.dedup();
    }
    out
}

#[test]
fn every_namespace_served_by_the_cluster_role() {
    use rbac::Scope::*;
    let objs = objects(&InstallOptions::default());
    let cluster = granted(&objs, "ClusterRole");
    assert_eq!(cluster.len(), 1);
    assert_eq!(cluster[""], rbac::triples(&[ClusterRead, Served]));
    let roles = granted(&objs, "Role");
    assert_eq!(roles.keys().collect::<Vec<_>>(), ["celld-system"]);
    assert_eq!(roles["celld-system"], rbac::triples(&[LeaseNamespace]));
}

/// The rules of each ClusterRole in `objs`, by name.
fn cluster_roles(objs: &[(String, Value)]) -> BTreeMap<String, Vec<rbac::Triple>> {
    objs.iter()
        .filter(|(_, o)| o["kind"] == "ClusterRole")
        .map(|(_, o)| {
            (
                o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                rbac::triples_of(&o["rules"]),
            )
        })
        .collect()
}

#[test]
fn served_namespaces_get_bindings_and_the_bound_cluster_role_only_reads() {
    use rbac::Scope::*;
    let o = InstallOptions {
        watch_namespaces: vec!["team-a".into(), "team-b".into()],
        ..InstallOptions::default()
    };
    let objs = objects(&o);
    let cluster = cluster_roles(&objs);
    let (bound, served) = (cluster_role_name("celld-system"), SERVED_ROLE.to_string());
    assert_eq!(
        cluster.keys().collect::<Vec<_>>(),
        [&bound, &served],
        "one ClusterRole bound cluster-wide, one bound in the served namespaces"
    );
    assert_eq!(cluster[&bound], rbac::triples(&[ClusterRead]));
    assert_eq!(cluster[&served], rbac::triples(&[Served, ServedBinding]));
    // Read-only, but for the one cluster-wide write: the capacity history annotation on
    // the (cluster-scoped) bucket reservations.
    for (_, resource, verb) in &cluster[&bound] {
        assert!(
            verb == "list"
                || verb == "watch"
                || (verb == "patch" && resource == "celldbucketreservations"),
            "cluster-wide {verb} on {resource}"
        );
    }
    // The served ClusterRole is never bound cluster-wide: only by a RoleBinding in each
    // served namespace.
    let cluster_bindings: Vec<&Value> = objs
        .iter()
        .map(|(_, o)| o)
        .filter(|o| o["kind"] == "ClusterRoleBinding")
        .collect();
    assert_eq!(cluster_bindings.len(), 1);
    assert_eq!(cluster_bindings[0]["roleRef"]["name"], bound.as_str());
    // No Role in a served namespace: a namespace deletion would take it at once.
    let roles = granted(&objs, "Role");
    assert_eq!(roles.keys().collect::<Vec<_>>(), ["celld-system"]);
    // The rolebinding rule names the healer's own binding only.
    let served_obj = objs
        .iter()
        .find(|(_, o)| o["kind"] == "ClusterRole" && o["metadata"]["name"] == served.as_str())
        .map(|(_, o)| o)
        .expect("the served ClusterRole");
    let binding_rule = served_obj["rules"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["resources"][0] == "rolebindings"))
        .expect("the rolebindings rule");
    assert_eq!(binding_rule["resourceNames"], json!([rbac::ACCESS_BINDING]));
    // Each namespace's binding gives the healer's ServiceAccount the served ClusterRole.
    let bindings: Vec<&Value> = objs
        .iter()
        .map(|(_, o)| o)
        .filter(|o| o["kind"] == "RoleBinding")
        .collect();
    for ns in ["team-a", "team-b"] {
        let b = bindings
            .iter()
            .find(|b| b["metadata"]["namespace"] == ns)
            .expect("a RoleBinding per served namespace");
        assert_eq!(b["metadata"]["name"], rbac::ACCESS_BINDING);
        assert_eq!(b["roleRef"]["kind"], "ClusterRole");
        assert_eq!(b["roleRef"]["name"], served.as_str());
        assert_eq!(b["subjects"][0]["namespace"], "celld-system");
        assert_eq!(b["subjects"][0]["name"], labels::HEALER_NAME);
    }
    let d: BTreeMap<String, Value> = objs.into_iter().collect();
    let args = &d["healer/deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .is_some_and(|a| a.contains(&Value::from("--namespace=team-a,team-b")))
    );
}

#[test]
fn two_installs_never_share_cluster_scoped_rbac() {
    let names = |ns: &str| -> Vec<String> {
        objects(&InstallOptions {
            namespace: ns.into(),
            ..InstallOptions::default()
        })
        .into_iter()
        .filter(|(_, o)| o["kind"] == "ClusterRole" || o["kind"] == "ClusterRoleBinding")
        .map(|(_, o)| o["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
    };
    let a = names("celld-system");
    let b = names("celld-team-b");
    assert_eq!(a.len(), 2);
    assert!(a.iter().all(|n| !b.contains(n)), "{a:?} {b:?}");
    // With --watch-namespace, the served ClusterRole is the one shared object: rendered
    // alike by every install, never pruned.
    let served = |ns: &str| -> Vec<Value> {
        objects(&InstallOptions {
            namespace: ns.into(),
            watch_namespaces: vec!["apps".into()],
            ..InstallOptions::default()
        })
        .into_iter()
        .filter(|(_, o)| o["kind"] == "ClusterRole" && o["metadata"]["name"] == SERVED_ROLE)
        .map(|(_, o)| o)
        .collect()
    };
    let (x, y) = (served("celld-system"), served("celld-team-b"));
    assert_eq!(x.len(), 1);
    assert_eq!(x, y, "the served ClusterRole differs between installs");
    assert!(
        x[0]["metadata"]["annotations"][labels::ARGOCD_SYNC_OPTIONS]
            .as_str()
            .is_some_and(|s| s.contains("Prune=false"))
    );
}

#[test]
fn the_healer_deployment_is_hardened_and_redundant() {
    let objs: BTreeMap<String, Value> = objects(&InstallOptions::default()).into_iter().collect();
    let d = &objs["healer/deployment.yaml"];
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert!(c["resources"]["limits"]["memory"].is_string());
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    let with_ns = objects(&InstallOptions {
        watch_namespaces: vec!["apps".into()],
        ..InstallOptions::default()
    });
    let d: BTreeMap<String, Value> = with_ns.into_iter().collect();
    let args = &d["healer/deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .is_some_and(|a| a.contains(&Value::from("--namespace=apps")))
    );
}

#[test]
fn shards_get_a_deployment_each_with_disjoint_pods() {
    let one: BTreeMap<String, Value> = objects(&InstallOptions::default()).into_iter().collect();
    let args = |d: &Value| d["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    // Unsharded: no --shard, no shard label (the bundle of earlier versions).
    assert!(
        !args(&one["healer/deployment.yaml"])
            .to_string()
            .contains("--shard")
    );
    let three: BTreeMap<String, Value> = objects(&InstallOptions {
        shards: 3,
        ..InstallOptions::default()
    })
    .into_iter()
    .collect();
    assert!(!three.contains_key("healer/deployment.yaml"));
    let mut selectors = Vec::new();
    for i in 0..3 {
        let d = &three[&format!("healer/deployment-{i}.yaml")];
        assert_eq!(d["metadata"]["name"], format!("celld-healer-{i}"));
        let a = args(d);
        assert!(
            a.as_array()
                .unwrap()
                .contains(&json!(format!("--shard={i}/3"))),
            "{a}"
        );
        let sel = &d["spec"]["selector"]["matchLabels"];
        assert_eq!(sel[labels::HEALER_SHARD_LABEL], i.to_string());
        // The Pods match their own Deployment's selector, and no other.
        let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
        for (k, v) in sel.as_object().unwrap() {
            assert_eq!(&pod_labels[k], v);
        }
        let pdb = &three[&format!("healer/poddisruptionbudget-{i}.yaml")];
        assert_eq!(&pdb["spec"]["selector"]["matchLabels"], sel);
        selectors.push(sel.clone());
    }
    selectors.dedup();
    assert_eq!(selectors.len(), 3);
}

#[test]
fn gitops_examples_ignore_exactly_the_fields_others_own() {
    let files = render(&InstallOptions::default());
    let get = |p: &str| {
        parse(
            &files
                .iter()
                .find(|f| f.path == p)
                .map(|f| f.text.clone())
                .unwrap_or_default(),
        )
    };
    let app = get("argocd/application.yaml");
    let opts = app["spec"]["syncPolicy"]["syncOptions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(opts.contains(&Value::from("ServerSideApply=true")));
    assert!(opts.contains(&Value::from("RespectIgnoreDifferences=true")));
    // A sync refused for a stale copied spec.replicas is retried with a fresh read.
    assert_eq!(app["spec"]["syncPolicy"]["retry"]["limit"], 5);
    let ignores = app["spec"]["ignoreDifferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(ignores[0]["jsonPointers"][0], "/spec/replicas");
    let flux = get("flux/kustomization.yaml");
    assert_eq!(flux["spec"]["ignore"][0]["paths"][0], "/spec/replicas");
    // spec.members only of the fleets render marks as External: under Flux, a members
    // change committed for any other fleet must be applied.
    let members = &flux["spec"]["ignore"][2];
    assert_eq!(members["paths"][0], "/spec/members");
    assert_eq!(
        members["target"]["annotationSelector"],
        format!("{}={}", labels::MEMBERS_OWNER, labels::MEMBERS_OWNER_SCALE)
    );
    let cm = get("argocd/argocd-cm-health.yaml");
    assert_eq!(
        cm["data"]["resource.customizations.health.fleet.celld.dev_CelldFleet"].as_str(),
        Some(HEALTH_LUA)
    );
}

/// Every limit of the fleet file that the CRD can express is in the rendered CRD, equal
/// to its Rust constant (the same constants validation checks against).
#[test]
fn the_crd_carries_every_bound_from_its_constant() {
    use crate::api::defaults::{self as d, CAPACITY_DEFAULTS as CAP};
    use crate::api::{
        BucketWorkload, CapacityMode, PlacementMode, Profile, Sampler, bounds_table, cel,
    };
    use celld_api::validate::formats as f;
    use serde_json::json;

    let objs: BTreeMap<String, Value> = objects(&InstallOptions::default()).into_iter().collect();
    let version = &objs["crds/celldfleets.fleet.celld.dev.yaml"]["spec"]["versions"][0];
    let root = &version["schema"]["openAPIV3Schema"];
    let spec = &root["properties"]["spec"];
    let prop = |path: &str| -> Value {
        let p = path.split('/').fold(spec, |s, k| {
            if k == "[]" {
                &s["items"]
            } else {
                &s["properties"][k]
            }
        });
        assert!(p.is_object(), "no property {path} in the CRD");
        p.clone()
    };

    // Ranges: minimum and maximum, for every bounded field.
    let table = bounds_table::bounded();
    assert_eq!(table.len(), 28);
    for b in &table {
        let p = prop(b.schema_path);
        assert_eq!(
            p["minimum"].as_f64(),
            Some(b.min as f64),
            "{}",
            b.schema_path
        );
        assert_eq!(
            p["maximum"].as_f64(),
            Some(b.max as f64),
            "{}",
            b.schema_path
        );
    }
    // `kubectl scale` and HPAs write .spec.members through /scale: that field is bounded.
    assert_eq!(
        version["subresources"]["scale"]["specReplicasPath"],
        ".spec.members"
    );
    assert_eq!(prop("members")["maximum"], json!(f64::from(d::MAX_MEMBERS)));
    assert_eq!(
        prop("members")["minimum"],
        json!(f64::from(d::MEMBERS_BOUNDS.min))
    );

    // Counts, lengths and patterns.
    let expect: Vec<(&str, &str, Value)> = vec![
        ("placement/zones", "minItems", json!(d::ZONES_BOUNDS.min)),
        ("placement/zones", "maxItems", json!(d::MAX_ZONES)),
        ("placement/zones/[]", "maxLength", json!(d::MAX_ZONE_LENGTH)),
        ("placement/zones/[]", "pattern", json!(f::ZONE_PATTERN)),
        ("env", "maxItems", json!(d::MAX_ENV)),
        ("env/[]/name", "maxLength", json!(d::MAX_ENV_NAME_LENGTH)),
        ("env/[]/name", "pattern", json!(f::ENV_NAME_PATTERN)),
        ("env/[]/value", "maxLength", json!(d::MAX_ENV_VALUE_BYTES)),
        (
            "env/[]/secretKeyRef/key",
            "pattern",
            json!(f::SECRET_KEY_PATTERN),
        ),
        (
            "routing/hostnames",
            "minItems",
            json!(d::HOSTNAMES_BOUNDS.min),
        ),
        ("routing/hostnames", "maxItems", json!(d::MAX_HOSTNAMES)),
        (
            "routing/hostnames/[]",
            "pattern",
            json!(f::ROUTE_HOSTNAME_PATTERN),
        ),
        (
            "routing/source/podLabels",
            "minProperties",
            json!(d::POD_LABELS_BOUNDS.min),
        ),
        (
            "routing/source/podLabels",
            "maxProperties",
            json!(d::MAX_POD_LABELS),
        ),
        (
            "telemetry/egress/podLabels",
            "maxProperties",
            json!(d::MAX_POD_LABELS),
        ),
        (
            "storage/endpoint/egress/podLabels",
            "maxProperties",
            json!(d::MAX_POD_LABELS),
        ),
        (
            "routing/ingress/annotations",
            "maxProperties",
            json!(d::MAX_INGRESS_ANNOTATIONS),
        ),
        ("identity", "minLength", json!(d::IDENTITY_LENGTH)),
        ("identity", "maxLength", json!(d::IDENTITY_LENGTH)),
        ("identity", "pattern", json!(f::identity_pattern())),
        ("identity", "pattern", json!("^[a-z0-9]{26}$")),
        ("runtimeImage", "pattern", json!(f::IMAGE_DIGEST_PATTERN)),
        (
            "serviceAccountName",
            "pattern",
            json!(f::DNS_SUBDOMAIN_PATTERN),
        ),
        (
            "storage/bucket",
            "minLength",
            json!(d::BUCKET_LENGTH_BOUNDS.min),
        ),
        (
            "storage/bucket",
            "maxLength",
            json!(d::BUCKET_LENGTH_BOUNDS.max),
        ),
        ("storage/bucket", "pattern", json!(f::BUCKET_PATTERN)),
        ("storage/region", "maxLength", json!(d::MAX_REGION_LENGTH)),
        ("storage/region", "pattern", json!(f::REGION_PATTERN)),
        ("storage/prefix", "pattern", json!(f::DNS_LABEL_PATTERN)),
        (
            "storage/storageClassName",
            "pattern",
            json!(f::DNS_SUBDOMAIN_PATTERN),
        ),
        (
            "maintenance/restartToken",
            "maxLength",
            json!(d::MAX_RESTART_TOKEN_CHARS),
        ),
    ];
    for (path, key, value) in expect {
        assert_eq!(prop(path)[key], value, "{path} {key}");
    }

    // Enums, from the types' own serde names.
    let names = |v: Vec<Value>| json!(v);
    let enums: Vec<(&str, Value)> = vec![
        (
            "profile",
            names(vec![
                json!(Profile::Bucket),
                json!(Profile::PersistentFleet),
            ]),
        ),
        (
            "bucketWorkload",
            names(vec![
                json!(BucketWorkload::Deployment),
                json!(BucketWorkload::Ordered),
            ]),
        ),
        (
            "placement/mode",
            names(vec![
                json!(PlacementMode::Strict),
                json!(PlacementMode::Relaxed),
            ]),
        ),
        (
            "capacity/mode",
            names(vec![
                json!(CapacityMode::Shadow),
                json!(CapacityMode::ScaleOut),
                json!(CapacityMode::Automatic),
                json!(CapacityMode::External),
            ]),
        ),
        (
            "telemetry/sampler",
            json!(Sampler::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
        ),
    ];
    for (path, values) in enums {
        let p = prop(path);
        assert_eq!(p["enum"], values, "{path}");
        let longest = values
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::len)
            .max();
        assert_eq!(p["maxLength"].as_u64(), longest.map(|n| n as u64), "{path}");
    }

    // Cross-field rules (CEL), where validation has them.
    let rules = |v: &Value| -> Vec<String> {
        v["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["rule"].as_str().map(str::to_string))
            .collect()
    };
    let has = |at: &Value, rule: kube::core::Rule, what: &str| {
        assert!(
            rules(at).contains(&rule.rule),
            "{what}: {} missing from {:?}",
            rule.rule,
            rules(at)
        );
    };
    has(root, cel::name_length(), "metadata");
    has(spec, cel::members_cover_zones(), "spec");
    has(spec, cel::capacity_min_covers_zones(), "spec");
    has(spec, cel::bucket_workload_only_for_bucket(), "spec");
    has(spec, cel::storage_class_iff_persistent(), "spec");
    has(spec, cel::zones_of_region(), "spec");
    has(spec, cel::aws_region_without_endpoint(), "spec");
    let capacity = prop("capacity");
    for r in [
        cel::capacity_members_ordered(),
        cel::capacity_cpu_ordered(),
        cel::capacity_memory_ordered(),
        cel::capacity_windows_ordered(),
        cel::capacity_samples_fresh(),
    ] {
        has(&capacity, r, "capacity");
    }
    has(&prop("lifecycle"), cel::grace_covers_drain(), "lifecycle");
    has(&prop("routing"), cel::one_route(), "routing");
    has(
        &prop("routing/hostnames"),
        cel::unique_strings("hostname"),
        "hostnames",
    );
    has(
        &prop("placement/zones"),
        cel::unique_strings("zone"),
        "zones",
    );
    has(&prop("env"), cel::unique_env_names(), "env");
    has(&prop("env/[]"), cel::one_env_source(), "env[]");
    has(
        &prop("telemetry"),
        cel::sampler_arg_with_ratio(),
        "telemetry",
    );
    for egress in ["telemetry/egress", "storage/endpoint/egress"] {
        has(&prop(egress), cel::one_egress_destination(), egress);
        has(&prop(egress), cel::egress_namespace_with_labels(), egress);
    }
    // The rules carry the constants, not copies of them.
    let members = cel::members_cover_zones().rule;
    assert!(
        members.contains(&format!(": {}) >=", d::MEMBERS)),
        "{members}"
    );
    assert!(members.contains("'External'"), "{members}");
    let minmax = cel::capacity_members_ordered().rule;
    assert_eq!(
        minmax,
        format!(
            "(has(self.minMembers) ? self.minMembers : {}) <= (has(self.maxMembers) ? self.maxMembers : {})",
            CAP.min_members, CAP.max_members
        )
    );
    assert_eq!(
        cel::name_length().rule,
        format!("size(self.metadata.name) <= {}", d::MAX_NAME_LENGTH)
    );
}

/// The editor schema (`celld-gen schema`) carries the same bounds.
#[test]
fn the_editor_schema_carries_the_bounds_too() {
    let schema = crate::cli::fleet_file_schema();
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(
        spec["members"]["maximum"].as_f64(),
        Some(f64::from(crate::api::defaults::MAX_MEMBERS))
    );
    assert_eq!(
        spec["identity"]["pattern"],
        celld_api::validate::formats::identity_pattern()
    );
}

/// The two admission policies: DELETE only, fail closed, deny; the fleet's rule reads
/// spec.deletionProtection with its default; the disk rule exempts exactly this install's
/// healer ServiceAccount and honours the operator's annotation.
#[test]
fn admission_policies_protect_fleets_and_disks() {
    use super::admission::{DISK_POLICY, FLEET_POLICY};
    let objs: BTreeMap<String, Value> = objects(&InstallOptions::default()).into_iter().collect();
    let policy = |name: &str| {
        objs.values()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicy" && o["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no policy {name}"))
    };
    for name in [FLEET_POLICY, DISK_POLICY] {
        let p = policy(name);
        assert_eq!(p["spec"]["failurePolicy"], "Fail");
        let rule = &p["spec"]["matchConstraints"]["resourceRules"][0];
        assert_eq!(rule["operations"], serde_json::json!(["DELETE"]));
        let b = objs
            .values()
            .find(|o| {
                o["kind"] == "ValidatingAdmissionPolicyBinding" && o["spec"]["policyName"] == name
            })
            .unwrap_or_else(|| panic!("no binding of {name}"));
        assert_eq!(b["spec"]["validationActions"], serde_json::json!(["Deny"]));
        // Never pruned: removing the bundle from Git must not lift the protection.
        assert!(
            p["metadata"]["annotations"][labels::ARGOCD_SYNC_OPTIONS]
                .as_str()
                .is_some_and(|s| s.contains("Prune=false") && s.contains("Delete=false"))
        );
    }
    let fleet = policy(FLEET_POLICY);
    assert_eq!(
        fleet["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
        serde_json::json!(["celldfleets"])
    );
    let v = &fleet["spec"]["validations"][0];
    assert_eq!(
        v["expression"],
        "(has(oldObject.spec.deletionProtection) ? oldObject.spec.deletionProtection : true) == false"
    );
    let msg = v["messageExpression"].as_str().unwrap_or_default();
    assert!(
        msg.contains("spec.deletionProtection: false in Git"),
        "{msg}"
    );
    assert!(msg.contains("oldObject.metadata.name"), "{msg}");

    let disk = policy(DISK_POLICY);
    let mc = &disk["spec"]["matchConstraints"];
    assert_eq!(
        mc["resourceRules"][0]["resources"],
        serde_json::json!(["persistentvolumeclaims"])
    );
    assert_eq!(
        mc["objectSelector"]["matchExpressions"][0]["key"],
        labels::IDENTITY
    );
    assert_eq!(
        disk["spec"]["matchConditions"][0]["expression"],
        "!(request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':celld-healer') && authorizer.group('fleet.celld.dev').resource('celldfleets').subresource('disks').namespace(request.namespace).check('delete').allowed())"
    );
    let v = &disk["spec"]["validations"][0];
    let expr = v["expression"].as_str().unwrap_or_default();
    assert!(
        expr.contains("'fleet.celld.dev/deletion-allowed'") && expr.ends_with("== 'true'"),
        "{expr}"
    );
    // A second install (another namespace, other served namespaces) renders the same
    // validating policies and bindings, and only its own start-at-zero binding: applying
    // it never takes anything away from the first install.
    let admission = |o: &InstallOptions| -> BTreeMap<String, Value> {
        objects(o)
            .into_iter()
            .filter(|(path, _)| path.starts_with("admission/"))
            .map(|(_, v)| {
                let key = format!(
                    "{}/{}",
                    v["kind"].as_str().unwrap_or(""),
                    v["metadata"]["name"].as_str().unwrap_or("")
                );
                (key, v)
            })
            .collect()
    };
    let first = admission(&InstallOptions {
        watch_namespaces: vec!["team-a".into(), "team-b".into()],
        ..InstallOptions::default()
    });
    let second = admission(&InstallOptions {
        namespace: "ops".into(),
        watch_namespaces: vec!["team-c".into()],
        ..InstallOptions::default()
    });
    for (key, obj) in &second {
        match first.get(key) {
            Some(same) => assert_eq!(same, obj, "{key} differs between installs"),
            None => assert!(
                [
                    "MutatingAdmissionPolicyBinding/celld-fleet-start-at-zero.ops",
                    "ValidatingAdmissionPolicyBinding/celld-fleet-replicas.ops",
                ]
                .contains(&key.as_str()),
                "only the second install's own bindings are new: {key}"
            ),
        }
    }
    assert!(
        first.contains_key("MutatingAdmissionPolicyBinding/celld-fleet-start-at-zero.celld-system")
    );
}

#[test]
fn fleet_statefulsets_are_created_at_zero_replicas() {
    use super::admission::{START_POLICY, rendered_workload, start_policy};
    let p = start_policy();
    assert_eq!(p["metadata"]["name"], START_POLICY);
    let rule = &p["spec"]["matchConstraints"]["resourceRules"][0];
    // Creation of StatefulSets only: an update never resets the healer's replicas.
    assert_eq!(rule["operations"], serde_json::json!(["CREATE"]));
    assert_eq!(rule["resources"], serde_json::json!(["statefulsets"]));
    assert_eq!(
        p["spec"]["matchConditions"][1]["expression"],
        super::admission::API_DEFAULT_REPLICAS
    );
    let cond = rendered_workload();
    assert!(cond.contains("'fleet.celld.dev/identity'"), "{cond}");
    assert!(cond.contains("'app.kubernetes.io/managed-by'"), "{cond}");
    assert!(cond.contains("'celld-gen'"), "{cond}");
    assert_eq!(
        p["spec"]["mutations"][0]["applyConfiguration"]["expression"],
        "Object{spec: Object.spec{replicas: 0}}"
    );
}

#[test]
fn start_at_zero_covers_only_the_served_namespace() {
    use super::admission::start_binding;
    let all = start_binding(&InstallOptions::default());
    assert!(all["spec"].get("matchResources").is_none());
    let one = start_binding(&InstallOptions {
        watch_namespaces: vec!["apps".into()],
        ..InstallOptions::default()
    });
    assert_eq!(
        one["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["apps"])
    );
}

/// The Argo CD plugin: its definition, the same definition in the ConfigMap the sidecar
/// mounts, and the sidecar patch that mounts it where the CMP server reads it.
#[test]
fn argocd_plugin_renders_celld_gen_for_the_healers_namespace() {
    let o = InstallOptions {
        namespace: "ops".into(),
        cmp_image: "registry.example.com/celld-gen:1".into(),
        ..InstallOptions::default()
    };
    let files = render(&o);
    let get = |p: &str| {
        files
            .iter()
            .find(|f| f.path == p)
            .map(|f| f.text.clone())
            .unwrap_or_else(|| panic!("no {p}"))
    };
    let plugin_text = get("argocd/cmp/plugin.yaml");
    let plugin = parse(&plugin_text);
    assert_eq!(plugin["kind"], "ConfigManagementPlugin");
    assert_eq!(plugin["metadata"]["name"], argocd_cmp::PLUGIN_NAME);
    assert_eq!(
        plugin["spec"]["generate"],
        serde_json::json!({"command": ["sh", "-c"],
            "args": ["exec celld-gen render . --stdout --healer-namespace ops --kubernetes-version 1.37"]})
    );
    let cm = parse(&get("argocd/cmp/configmap.yaml"));
    let mounted = cm["data"][argocd_cmp::PLUGIN_FILE]
        .as_str()
        .unwrap_or_default();
    assert_eq!(format!("{HEADER}{mounted}"), plugin_text);
    let patch = parse(&get("argocd/cmp/repo-server-patch.yaml"));
    let pod = &patch["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "registry.example.com/celld-gen:1");
    assert_eq!(c["command"][0], "/var/run/argocd/argocd-cmp-server");
    assert_eq!(c["securityContext"]["runAsUser"], 999);
    assert_eq!(c["securityContext"]["runAsNonRoot"], true);
    let mounts = c["volumeMounts"].as_array().cloned().unwrap_or_default();
    let config = mounts
        .iter()
        .find(|m| m["mountPath"] == argocd_cmp::PLUGIN_CONFIG_PATH)
        .unwrap_or_else(|| panic!("plugin.yaml is not mounted: {mounts:?}"));
    assert_eq!(config["subPath"], argocd_cmp::PLUGIN_FILE);
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        cm["metadata"]["name"]
    );
    assert_eq!(config["name"], pod["volumes"][0]["name"]);
}

/// The bundle records its options, and the record reads back as the same options
/// (`install --options-from` renders the same bundle again).
#[test]
fn the_bundle_records_its_options() {
    use super::record::{RECORD_FILE, Record};
    let o = InstallOptions {
        shards: 3,
        watch_namespaces: vec!["a".into(), "b".into()],
        member_replacement_delay: std::time::Duration::from_secs(90),
        metrics_auth: flags::MetricsAuth::Kubernetes,
        service_monitor: true,
        ..InstallOptions::default()
    };
    let files = render(&o);
    let record = files
        .iter()
        .find(|f| f.path == RECORD_FILE)
        .expect("a record");
    assert!(record.text.starts_with(super::HEADER));
    let back = Record::parse(&record.text).unwrap();
    assert_eq!(back, Record::of(&o));
    assert_eq!(back.delay().unwrap(), o.member_replacement_delay);
    // Not a cluster object: the kustomization leaves it out.
    let k = files
        .iter()
        .find(|f| f.path == "kustomization.yaml")
        .unwrap();
    assert!(!k.text.contains(RECORD_FILE));
    assert!(Record::parse("kind: Other\n").is_err());
    // The release's default images are not recorded (a later release uses its own); a
    // chosen one is, with whether it needed --allow-tag.
    assert_eq!(
        (back.image, back.cmp_image, back.allow_tag),
        (None, None, false)
    );
    let tagged = Record::of(&InstallOptions {
        image: "registry.example/healer:dev".into(),
        ..InstallOptions::default()
    });
    assert_eq!(tagged.image.as_deref(), Some("registry.example/healer:dev"));
    assert!(tagged.allow_tag);
}

/// `--team`: per team an AppProject limited to its namespace and the kinds a fleet
/// renders, an Application and a Flux Kustomization syncing only its folder.
#[test]
fn each_team_gets_a_project_an_application_and_a_kustomization() {
    let o = InstallOptions {
        teams: vec!["payments".into()],
        repo_path: "deploy".into(),
        ..InstallOptions::default()
    };
    let files = render(&o);
    let get = |path: &str| parse(&files.iter().find(|f| f.path == path).unwrap().text);
    let project = get("argocd/teams/payments/appproject.yaml");
    assert_eq!(project["spec"]["destinations"][0]["namespace"], "payments");
    let kinds: Vec<String> = project["spec"]["namespaceResourceWhitelist"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            format!(
                "{}/{}",
                k["group"].as_str().unwrap(),
                k["kind"].as_str().unwrap()
            )
        })
        .collect();
    for want in [
        "apps/StatefulSet",
        "/Service",
        "fleet.celld.dev/CelldFleet",
        "policy/PodDisruptionBudget",
    ] {
        assert!(kinds.contains(&want.to_string()), "{kinds:?}");
    }
    assert_eq!(
        project["spec"]["clusterResourceWhitelist"],
        serde_json::json!([{"group": "fleet.celld.dev", "kind": "CelldBucketReservation"}])
    );
    let app = get("argocd/teams/payments/application.yaml");
    assert_eq!(app["spec"]["project"], "celld-payments");
    assert_eq!(app["spec"]["source"]["path"], "deploy/payments");
    assert_eq!(app["spec"]["destination"]["namespace"], "payments");
    let flux = get("flux/teams/payments.yaml");
    assert_eq!(flux["metadata"]["namespace"], "payments");
    assert_eq!(flux["spec"]["path"], "./deploy/payments");
    assert_eq!(
        flux["spec"]["serviceAccountName"],
        super::TEAM_SERVICE_ACCOUNT
    );
    // The team objects are examples to adapt, not cluster objects of the bundle.
    let k = files
        .iter()
        .find(|f| f.path == "kustomization.yaml")
        .unwrap();
    assert!(!k.text.contains("teams/"));
}

/// `--metrics-auth kubernetes`: the healer's flag, HTTPS probes, the two review rights in
/// its ClusterRole (from the RBAC table) and a reader ClusterRole to bind to Prometheus;
/// `--service-monitor` scrapes over HTTPS with Prometheus's token. Without them, none of
/// it.
#[test]
fn metrics_auth_and_the_service_monitor() {
    use rbac::Scope::*;
    let plain = objects(&InstallOptions {
        service_monitor: true,
        ..InstallOptions::default()
    });
    let o = InstallOptions {
        metrics_auth: flags::MetricsAuth::Kubernetes,
        service_monitor: true,
        ..InstallOptions::default()
    };
    let objs = objects(&o);
    let by_path: BTreeMap<&str, &Value> = objs.iter().map(|(p, v)| (p.as_str(), v)).collect();
    let plain_by_path: BTreeMap<&str, &Value> =
        plain.iter().map(|(p, v)| (p.as_str(), v)).collect();

    let container = &by_path["healer/deployment.yaml"]["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--metrics-auth=kubernetes"), "{args:?}");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["scheme"], "HTTPS");
        let plain_c =
            &plain_by_path["healer/deployment.yaml"]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(plain_c[probe]["httpGet"]["scheme"], "HTTP");
    }

    let roles = cluster_roles(&objs);
    let bound = cluster_role_name("celld-system");
    assert_eq!(
        roles[&bound],
        rbac::triples(&[ClusterRead, Served, MetricsAuth])
    );
    assert_eq!(
        cluster_roles(&plain)[&bound],
        rbac::triples(&[ClusterRead, Served])
    );
    let reader = by_path["healer/clusterrole-metrics-reader.yaml"];
    assert_eq!(
        reader["metadata"]["name"],
        metrics_reader_name("celld-system")
    );
    assert_eq!(
        reader["rules"],
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    assert!(!plain_by_path.contains_key("healer/clusterrole-metrics-reader.yaml"));

    let sm = &by_path["healer/servicemonitor.yaml"]["spec"];
    assert_eq!(sm["endpoints"][0]["scheme"], "https");
    assert_eq!(
        sm["endpoints"][0]["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    let plain_sm = &plain_by_path["healer/servicemonitor.yaml"]["spec"];
    assert!(plain_sm["endpoints"][0].get("scheme").is_none());
    // It selects the metrics Service, and only it, by the port's name.
    let service = by_path["healer/service-metrics.yaml"];
    assert_eq!(sm["selector"]["matchLabels"], service["metadata"]["labels"]);
    assert_eq!(
        sm["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    let services = objs
        .iter()
        .filter(|(_, v)| {
            v["kind"] == "Service" && v["metadata"]["labels"] == service["metadata"]["labels"]
        })
        .count();
    assert_eq!(services, 1);
    assert!(
        !objects(&InstallOptions::default())
            .iter()
            .any(|(p, _)| p == "healer/servicemonitor.yaml")
    );
}

/// Each supported minor gets only APIs it serves: the mutating start policy where
/// `admissionregistration.k8s.io/v1` serves it (1.36 on); the replicas policy on every
/// minor; the rest of the bundle is the same.
#[test]
fn the_start_guard_is_rendered_for_the_clusters_minor() {
    use crate::kubernetes::Minor;
    let kinds = |m: Minor| -> Vec<(String, String)> {
        let o = InstallOptions {
            kubernetes: m,
            ..InstallOptions::default()
        };
        super::admission::objects(&o)
            .into_iter()
            .map(|(f, v)| (f, v["kind"].as_str().unwrap_or_default().to_string()))
            .collect()
    };
    for m in Minor::supported() {
        let k = kinds(m);
        let mutating = k
            .iter()
            .any(|(_, kind)| kind.starts_with("MutatingAdmission"));
        let replicas = k.iter().any(|(f, _)| f == "replicas-policy.yaml");
        assert_eq!(mutating, m.minor() >= 36, "{m}: {k:?}");
        assert!(replicas, "{m}: {k:?}");
    }
    let old = InstallOptions {
        kubernetes: "1.34".parse().unwrap(),
        ..InstallOptions::default()
    };
    let files = render(&old);
    let all: String = files.iter().map(|f| f.text.as_str()).collect();
    assert!(!all.contains("MutatingAdmissionPolicy"), "{all}");
    assert!(all.contains("--kubernetes-version 1.34"));
    let record = files
        .iter()
        .find(|f| f.path == super::record::RECORD_FILE)
        .expect("the record");
    assert!(
        record.text.contains("kubernetesVersion: \"1.34\""),
        "{}",
        record.text
    );
}

/// The replicas policy: creation at the API default refused, a count written on purpose
/// (or Git's 0) kept; on update only a healer may change replicas.
#[test]
fn the_replicas_policy_refuses_the_default_and_every_writer_but_the_healer() {
    use super::admission::{REPLICAS_POLICY, from_a_healer, rendered_workload, replicas_policy};
    let p = replicas_policy();
    assert_eq!(p["metadata"]["name"], REPLICAS_POLICY);
    assert_eq!(p["spec"]["failurePolicy"], "Fail");
    let rules = &p["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(rules["resources"], serde_json::json!(["statefulsets"]));
    assert_eq!(rules["operations"], serde_json::json!(["CREATE", "UPDATE"]));
    let cond = p["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap_or_default();
    assert!(
        cond.starts_with(&format!(
            "({}) || (request.operation == 'UPDATE' && (",
            rendered_workload()
        )),
        "{cond}"
    );
    assert!(cond.contains("oldObject.metadata.labels"), "{cond}");
    // Bound per install, to the served namespaces only, like the mutating one.
    let b = super::admission::replicas_binding(&InstallOptions {
        watch_namespaces: vec!["a".into()],
        ..InstallOptions::default()
    });
    assert_eq!(b["kind"], "ValidatingAdmissionPolicyBinding");
    assert_eq!(b["metadata"]["name"], "celld-fleet-replicas.celld-system");
    assert_eq!(b["spec"]["validationActions"], serde_json::json!(["Deny"]));
    assert_eq!(
        b["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["a"])
    );
    let v = p["spec"]["validations"].as_array().unwrap();
    assert_eq!(v.len(), 2);
    let create = v[0]["expression"].as_str().unwrap();
    assert!(
        create.starts_with("request.operation != 'CREATE' || !("),
        "{create}"
    );
    let update = v[1]["expression"].as_str().unwrap();
    assert!(update.contains(&from_a_healer()), "{update}");
    assert!(update.contains("oldObject.spec.replicas"), "{update}");
    assert!(update.contains("request.dryRun"), "{update}");
    assert!(!create.contains("request.dryRun"), "{create}");
    for m in [&v[0]["messageExpression"], &v[1]["messageExpression"]] {
        assert!(
            m.as_str()
                .is_some_and(|m| m.contains("object.metadata.name"))
        );
    }
}
