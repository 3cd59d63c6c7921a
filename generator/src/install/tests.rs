use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

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
            "Kustomization" => continue,
            other => panic!("{}: unexpected kind {other}", f.path),
        }
        seen += 1;
    }
    assert_eq!(seen, 12);
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
    assert_eq!(k["resources"].as_array().map(Vec::len), Some(12));
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

#[test]
fn rbac_grants_only_what_the_healer_uses() {
    for r in rbac::CLUSTER_RULES.iter().chain(rbac::NAMESPACE_RULES) {
        assert!(
            !r.resources.contains(&"secrets"),
            "the healer never reads Secrets"
        );
        assert!(
            !r.resources.contains(&"*") && !r.verbs.contains(&"*"),
            "no wildcards"
        );
        assert!(
            !r.verbs.contains(&"create") || r.resources == ["events"] || r.resources == ["leases"],
            "the healer creates only events and its lease: {:?}",
            r.resources
        );
    }
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
        watch_namespace: Some("apps".into()),
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
    let ignores = app["spec"]["ignoreDifferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(ignores[0]["jsonPointers"][0], "/spec/replicas");
    let flux = get("flux/kustomization.yaml");
    assert_eq!(flux["spec"]["ignore"][0]["paths"][0], "/spec/replicas");
    let cm = get("argocd/argocd-cm-health.yaml");
    assert_eq!(
        cm["data"]["resource.customizations.health.fleet.celld.dev_CelldFleet"].as_str(),
        Some(HEALTH_LUA)
    );
}

/// Runs the health check the way Argo CD does (Lua 5.1, `obj` global, the chunk returns
/// the status table) over every case in `install/argocd/health_test.yaml`.
#[test]
fn argocd_health_check_passes_its_cases() {
    use mlua::{Lua, LuaSerdeExt};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("install/argocd");
    let cases = parse(&std::fs::read_to_string(dir.join("health_test.yaml")).unwrap_or_default());
    let cases = cases["tests"].as_array().cloned().unwrap_or_default();
    assert_eq!(cases.len(), 7);
    for case in cases {
        let input = case["inputPath"].as_str().unwrap_or_default();
        let obj = parse(&std::fs::read_to_string(dir.join(input)).unwrap_or_default());
        let lua = Lua::new();
        let value = lua
            .to_value(&obj)
            .unwrap_or_else(|e| panic!("{input}: {e}"));
        lua.globals()
            .set("obj", value)
            .unwrap_or_else(|e| panic!("{input}: {e}"));
        let hs: mlua::Table = lua
            .load(HEALTH_LUA)
            .eval()
            .unwrap_or_else(|e| panic!("{input}: {e}"));
        let status: String = hs.get("status").unwrap_or_default();
        let message: String = hs.get("message").unwrap_or_default();
        assert_eq!(
            status,
            case["healthStatus"]["status"].as_str().unwrap_or_default(),
            "{input}"
        );
        assert_eq!(
            message,
            case["healthStatus"]["message"].as_str().unwrap_or_default(),
            "{input}"
        );
    }
}
