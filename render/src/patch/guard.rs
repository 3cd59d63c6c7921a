//! What a patch may not change: everything the healer and the safety rules rely on in a
//! rendered object. Each refusal names the JSON pointer it protects and why. The
//! comparison is between the object before a patch and after it, so a later patch
//! cannot undo what an earlier one was refused.
//!
//! - Every object: its apiVersion, kind, name and namespace; the labels and annotations
//!   the project owns (`fleet.celld.dev/…`, the managed-by label, the Argo CD and Flux
//!   deletion-protection and sync-wave annotations); no finalizers or owner references.
//! - The workload: the member count (the healer's), the selector, the Service name, the
//!   rollout and Pod-management policies (members restart one at a time, in order), the
//!   claim template and retention policy (the disks), the Pod template's owned keys,
//!   its ServiceAccount, termination grace (it covers the drain) and affinity and spread
//!   (the placement), and in the `celld` container the image (pinned by digest in the
//!   fleet file), the ports, the readiness probe (the healer counts readiness), the
//!   disk's mount and every variable celld-gen writes (a patched `CELLD_BUCKET` would
//!   write into another fleet's bucket).
//! - Services and the PodDisruptionBudget: everything rendered stays as rendered (the
//!   healer compares the live Services with the rendering); additions are allowed.
//! - NetworkPolicies: the Pod selector and policy types stay; rules may be appended after
//!   the rendered ones, which stay.

use serde_json::Value;

use crate::api::labels;
use crate::api::validate::rules::env::{GENERATOR_OWNED, REMOVED, RESERVED_PREFIXES};
use crate::render::ObjectKind;

/// One refused change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// JSON pointer of what changed.
    pub pointer: String,
    /// Why it may not.
    pub why: String,
}

/// Whether a kind may be patched at all; `Err` says what to do instead.
pub fn patchable(kind: ObjectKind) -> Result<(), &'static str> {
    match kind {
        ObjectKind::CelldFleet => Err(
            "the CelldFleet is the fleet file itself, and the healer reads it: change the fleet file",
        ),
        ObjectKind::CelldBucketReservation => Err(
            "the bucket reservation binds the bucket to this fleet and is immutable: it is never patched",
        ),
        _ => Ok(()),
    }
}

/// Prefixes of annotations that steer Argo CD, Flux or Helm (hooks that delete and
/// recreate an object, forced replacement, comparison and pruning options): how the
/// fleet's objects are applied and deleted is the fleet's, so patches never set them.
const ENGINE_PREFIXES: [&str; 3] = [
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "helm.sh/",
];

/// Whether a label or annotation key is the project's, or steers a GitOps engine.
fn owned_key(key: &str) -> bool {
    key.starts_with(&format!("{}/", labels::GROUP))
        || key == labels::MANAGED_BY
        || ENGINE_PREFIXES.iter().any(|p| key.starts_with(p))
}

struct Guard<'a> {
    before: &'a Value,
    after: &'a Value,
    out: Vec<Refusal>,
}

impl Guard<'_> {
    fn same(&mut self, pointer: &str, why: &str) {
        if self.before.pointer(pointer) != self.after.pointer(pointer) {
            self.refuse(pointer, why);
        }
    }

    fn refuse(&mut self, pointer: &str, why: &str) {
        self.out.push(Refusal {
            pointer: pointer.to_string(),
            why: why.to_string(),
        });
    }

    /// The project's keys of the map at `pointer` are unchanged, none added.
    fn owned_keys(&mut self, pointer: &str, why: &str) {
        let keys = |v: &Value| -> Vec<(String, Value)> {
            v.pointer(pointer)
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| owned_key(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (b, a) = (keys(self.before), keys(self.after));
        if b != a {
            let changed = b
                .iter()
                .chain(&a)
                .find(|kv| !(b.contains(kv) && a.contains(kv)))
                .map(|(k, _)| k.replace('~', "~0").replace('/', "~1"))
                .unwrap_or_default();
            self.refuse(&format!("{pointer}/{changed}"), why);
        }
    }

    /// Everything rendered under `pointer` is still there, equal (additions allowed;
    /// lists keep their length, except those named in `growable`, which keep their
    /// rendered items first).
    fn kept(&mut self, pointer: &str, growable: &[&str], why: &str) {
        let (Some(b), a) = (self.before.pointer(pointer), self.after.pointer(pointer)) else {
            return;
        };
        let mut changed = Vec::new();
        keeps(
            b,
            a.unwrap_or(&Value::Null),
            pointer,
            growable,
            &mut changed,
        );
        for p in changed {
            self.refuse(&p, why);
        }
    }
}

fn keeps(want: &Value, have: &Value, path: &str, growable: &[&str], out: &mut Vec<String>) {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, wv) in w {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match h.get(k) {
                    Some(hv) => keeps(wv, hv, &p, growable, out),
                    None => out.push(p),
                }
            }
            // A selector selects by all its keys: one more selects other Pods.
            if path.ends_with("/selector") || path.ends_with("/matchLabels") {
                for k in h.keys().filter(|k| !w.contains_key(*k)) {
                    out.push(format!("{path}/{k}"));
                }
            }
        }
        (Value::Array(w), Value::Array(h)) => {
            let grows = growable.contains(&path);
            if h.len() < w.len() || (!grows && h.len() != w.len()) {
                out.push(path.to_string());
                return;
            }
            for (i, (wv, hv)) in w.iter().zip(h).enumerate() {
                keeps(wv, hv, &format!("{path}/{i}"), growable, out);
            }
        }
        (w, h) if w == h => {}
        _ => out.push(path.to_string()),
    }
}

/// The changes of `after` against `before` (one rendered object of `kind`) that no
/// patch may make.
pub fn refusals(kind: ObjectKind, before: &Value, after: &Value) -> Vec<Refusal> {
    let mut g = Guard {
        before,
        after,
        out: Vec::new(),
    };
    for p in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
    ] {
        g.same(p, "it names the object celld-gen renders");
    }
    for p in ["/metadata/finalizers", "/metadata/ownerReferences"] {
        g.same(
            p,
            "finalizers and owner references decide when the object (and what it owns) is deleted",
        );
    }
    let owned = "the project's own labels and annotations (identity, ownership, deletion \
                 protection) are written by celld-gen from the fleet file";
    g.owned_keys("/metadata/labels", owned);
    g.owned_keys("/metadata/annotations", owned);
    match kind {
        ObjectKind::StatefulSet | ObjectKind::Deployment => workload(&mut g, owned),
        ObjectKind::Service => g.kept(
            "/spec",
            &[],
            "the healer compares the live Services with the fleet's rendering; a patch may add to a Service but not change what is rendered",
        ),
        ObjectKind::PodDisruptionBudget => g.same(
            "/spec",
            "the disruption budget lets one member go at a time; a patch may not change it",
        ),
        ObjectKind::NetworkPolicy => network_policy(&mut g),
        _ => {}
    }
    g.out
}

/// A NetworkPolicy's selector and types stay, and its rendered rules stay exactly as
/// rendered (a selector that gains an expression selects fewer Pods); rules appended
/// after them are the patch's own.
fn network_policy(g: &mut Guard<'_>) {
    let why = "the rendered rules let members, the healer and clients reach each other; a patch may append rules, not change or remove these";
    g.same("/spec/podSelector", why);
    g.same("/spec/policyTypes", why);
    for list in ["/spec/ingress", "/spec/egress"] {
        let items = |v: &Value| {
            v.pointer(list)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let (b, a) = (items(g.before), items(g.after));
        if a.len() < b.len() || a[..b.len()] != b[..] {
            g.refuse(list, why);
        }
    }
}

fn workload(g: &mut Guard<'_>, owned: &str) {
    for (p, why) in [
        (
            "/spec/replicas",
            "the healer sets the member count (growth in order, removal one at a time)",
        ),
        (
            "/spec/selector",
            "the selector is the fleet's identity; the API server refuses to change it",
        ),
        (
            "/spec/serviceName",
            "members find each other through the peers Service",
        ),
        (
            "/spec/podManagementPolicy",
            "the healer orders growth and removal itself",
        ),
        (
            "/spec/updateStrategy",
            "members restart one at a time, in order",
        ),
        ("/spec/strategy", "members restart one at a time"),
        ("/spec/minReadySeconds", "the rollout's pace is the fleet's"),
        (
            "/spec/persistentVolumeClaimRetentionPolicy",
            "the retention policy keeps every disk when members are removed; the healer deletes disks only on purpose",
        ),
        (
            "/spec/volumeClaimTemplates",
            "the claim template makes the members' disks (storage in the fleet file)",
        ),
        (
            "/spec/template/spec/serviceAccountName",
            "set spec.serviceAccountName in the fleet file",
        ),
        (
            "/spec/template/spec/terminationGracePeriodSeconds",
            "the grace covers the drain (spec.lifecycle in the fleet file)",
        ),
        (
            "/spec/template/spec/affinity",
            "the placement (zones, one member per node) is what the safety rules count on; set spec.pod.nodeAffinity in the fleet file",
        ),
        (
            "/spec/template/spec/topologySpreadConstraints",
            "the zone spread is what the safety rules count on",
        ),
        ("/spec/ordinals", "the healer counts members from ordinal 0"),
        (
            "/spec/template/spec/nodeName",
            "the scheduler places members, spread over zones and nodes",
        ),
        (
            "/spec/template/spec/schedulerName",
            "the default scheduler places members, spread over zones and nodes",
        ),
        (
            "/spec/template/spec/nodeSelector",
            "set spec.pod.nodeSelector in the fleet file, where check keeps every zone possible",
        ),
        (
            "/spec/template/spec/tolerations",
            "set spec.pod.tolerations in the fleet file, where check refuses tolerating a lost node for ever",
        ),
        (
            "/spec/template/spec/hostNetwork",
            "members are reached through their Pod IPs",
        ),
        (
            "/spec/template/spec/restartPolicy",
            "a member's container restarts in place",
        ),
        (
            "/spec/template/spec/volumes",
            "the members' data volume is the fleet's; a patch may add volumes after it",
        ),
    ] {
        if p == "/spec/template/spec/volumes" {
            g.kept(p, &[p], why);
        } else {
            g.same(p, why);
        }
    }
    g.owned_keys("/spec/template/metadata/labels", owned);
    g.owned_keys("/spec/template/metadata/annotations", owned);
    let celld = |v: &Value| -> Option<(usize, Value)> {
        v.pointer("/spec/template/spec/containers")?
            .as_array()?
            .iter()
            .enumerate()
            .find(|(_, c)| c["name"] == "celld")
            .map(|(i, c)| (i, c.clone()))
    };
    let (Some((bi, before)), after) = (celld(g.before), celld(g.after)) else {
        return;
    };
    let Some((ai, after)) = after else {
        g.refuse(
            &format!("/spec/template/spec/containers/{bi}"),
            "the celld container is the member",
        );
        return;
    };
    let base = format!("/spec/template/spec/containers/{ai}");
    for (field, why) in [
        (
            "image",
            "set spec.runtimeImage in the fleet file (pinned by digest)",
        ),
        (
            "ports",
            "the Services and the healer reach members on these ports",
        ),
        (
            "readinessProbe",
            "the healer counts a member as up by its readiness",
        ),
        (
            "command",
            "the member runs the pinned image's own entrypoint",
        ),
        ("args", "the member runs the pinned image's own entrypoint"),
        (
            "workingDir",
            "the member runs the pinned image's own entrypoint",
        ),
        (
            "lifecycle",
            "the drain on shutdown is timed by spec.lifecycle; a hook would eat the grace",
        ),
        (
            "envFrom",
            "variables come from spec.env, where names celld-gen and celld own are refused",
        ),
        (
            "livenessProbe",
            "a probe that kills a recovering member would count it down",
        ),
        (
            "startupProbe",
            "a probe that kills a recovering member would count it down",
        ),
    ] {
        if before.get(field) != after.get(field) {
            g.refuse(&format!("{base}/{field}"), why);
        }
    }
    let mounts = |c: &Value| -> Vec<Value> {
        c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["name"] == labels::CLAIM_TEMPLATE)
            .cloned()
            .collect()
    };
    if mounts(&before) != mounts(&after) {
        g.refuse(
            &format!("{base}/volumeMounts"),
            "the members' disk is mounted where celld keeps its data",
        );
    }
    // Nothing else is mounted inside the data folder, and no other container mounts the
    // disk: celld alone writes it.
    let data_path = mounts(&before)
        .first()
        .and_then(|m| m["mountPath"].as_str().map(str::to_owned));
    if let Some(data_path) = data_path {
        let inside = format!("{}/", data_path.trim_end_matches('/'));
        let other = after["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| {
                m["name"] != labels::CLAIM_TEMPLATE
                    && m["mountPath"]
                        .as_str()
                        .is_some_and(|p| p == data_path || p.starts_with(&inside))
            });
        if other {
            g.refuse(
                &format!("{base}/volumeMounts"),
                "nothing else is mounted in the folder where celld keeps its data",
            );
        }
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let pointer = format!("/spec/template/spec/{list}");
        let elsewhere = g
            .after
            .pointer(&pointer)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| !(list == "containers" && c["name"] == "celld"))
            .any(|c| {
                c["volumeMounts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|m| m["name"] == labels::CLAIM_TEMPLATE)
            });
        if elsewhere {
            g.refuse(
                &pointer,
                "only the celld container mounts the member's disk",
            );
        }
    }
    let env =
        |c: &Value| -> Vec<Value> { c["env"].as_array().into_iter().flatten().cloned().collect() };
    let (be, ae) = (env(&before), env(&after));
    // The rendered variables stay first, in order: `$(CELLD_NODE)` in a later value is
    // expanded only from variables defined before it.
    if ae.len() < be.len() || ae[..be.len()] != be[..] {
        g.refuse(
            &format!("{base}/env"),
            "the rendered variables stay as rendered and in their order (later values refer to earlier ones); a patch may append variables",
        );
    }
    let owned_var = |name: &str| {
        GENERATOR_OWNED.contains(&name)
            || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
            || REMOVED.iter().any(|(n, _)| *n == name)
    };
    // Appended variables: none celld-gen writes, celld reserves or refuses, and none
    // that repeats a rendered name (the later one would win).
    for (i, var) in ae.iter().enumerate().skip(be.len()) {
        let name = var["name"].as_str().unwrap_or_default();
        if owned_var(name) || be.iter().any(|b| b["name"] == var["name"]) {
            g.refuse(
                &format!("{base}/env/{i}"),
                "celld-gen writes this variable from the fleet file (bucket, identity, peers, drain, telemetry), or celld reserves it; set spec.env or the field it comes from",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sts() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "a", "namespace": "n",
                "labels": {"fleet.celld.dev/identity": "x", "app.kubernetes.io/managed-by": "celld-gen"},
                "annotations": {"argocd.argoproj.io/sync-options": "Prune=false"}},
            "spec": {
                "selector": {"matchLabels": {"fleet.celld.dev/identity": "x"}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
                "template": {"metadata": {"labels": {"fleet.celld.dev/identity": "x"}},
                    "spec": {"containers": [{"name": "celld", "image": "i@sha256:0",
                        "env": [{"name": "CELLD_BUCKET", "value": "b"}],
                        "volumeMounts": [{"name": "data", "mountPath": "/work"}]}]}}
            }
        })
    }

    fn refused(edit: impl Fn(&mut Value)) -> Vec<String> {
        let before = sts();
        let mut after = sts();
        edit(&mut after);
        refusals(ObjectKind::StatefulSet, &before, &after)
            .into_iter()
            .map(|r| r.pointer)
            .collect()
    }

    #[test]
    fn additions_the_fleet_does_not_model_pass() {
        assert_eq!(
            refused(|v| {
                v["metadata"]["annotations"]["example.com/x"] = json!("1");
                v["spec"]["template"]["spec"]["dnsConfig"] =
                    json!({"options": [{"name": "ndots", "value": "2"}]});
                v["spec"]["template"]["spec"]["containers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "RUST_LOG", "value": "debug"}));
            }),
            Vec::<String>::new()
        );
    }

    #[test]
    fn what_the_healer_relies_on_is_refused() {
        type Edit = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|v| v["spec"]["replicas"] = json!(5)),
                "/spec/replicas",
            ),
            (
                Box::new(|v| {
                    v["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] =
                        json!("Delete")
                }),
                "/spec/persistentVolumeClaimRetentionPolicy",
            ),
            (
                Box::new(|v| v["metadata"]["labels"]["fleet.celld.dev/identity"] = json!("y")),
                "/metadata/labels/fleet.celld.dev~1identity",
            ),
            (
                Box::new(|v| {
                    v["metadata"]["annotations"]
                        .as_object_mut()
                        .unwrap()
                        .remove("argocd.argoproj.io/sync-options");
                }),
                "/metadata/annotations/argocd.argoproj.io~1sync-options",
            ),
            (
                Box::new(|v| v["metadata"]["finalizers"] = json!(["x"])),
                "/metadata/finalizers",
            ),
            (
                Box::new(|v| {
                    v["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] =
                        json!("other")
                }),
                "/spec/template/spec/containers/0/env",
            ),
            (
                Box::new(|v| {
                    v["spec"]["template"]["spec"]["containers"][0]["env"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "CELLD_ADDR", "value": "x"}));
                }),
                "/spec/template/spec/containers/0/env/1",
            ),
            (
                Box::new(|v| {
                    v["spec"]["template"]["spec"]["containers"][0]["image"] = json!("evil")
                }),
                "/spec/template/spec/containers/0/image",
            ),
            (
                Box::new(|v| {
                    v["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = json!([])
                }),
                "/spec/template/spec/containers/0/volumeMounts",
            ),
        ];
        for (edit, want) in cases {
            assert_eq!(refused(edit), vec![want.to_string()]);
        }
    }

    /// The ways around the first guard a review found: each is refused now.
    #[test]
    fn placement_behaviour_and_the_disk_cannot_be_patched_around() {
        fn spec(v: &mut Value) -> &mut Value {
            &mut v["spec"]["template"]["spec"]
        }
        type Edit = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|v| v["spec"]["ordinals"] = json!({"start": 5})),
                "/spec/ordinals",
            ),
            (
                Box::new(|v| spec(v)["nodeName"] = json!("n1")),
                "/spec/template/spec/nodeName",
            ),
            (
                Box::new(|v| spec(v)["tolerations"] = json!([{"operator": "Exists"}])),
                "/spec/template/spec/tolerations",
            ),
            (
                Box::new(|v| spec(v)["nodeSelector"] = json!({"topology.kubernetes.io/zone": "a"})),
                "/spec/template/spec/nodeSelector",
            ),
            (
                Box::new(|v| spec(v)["containers"][0]["command"] = json!(["sh"])),
                "/spec/template/spec/containers/0/command",
            ),
            (
                Box::new(|v| {
                    spec(v)["containers"][0]["lifecycle"] =
                        json!({"preStop": {"exec": {"command": ["sleep", "3600"]}}})
                }),
                "/spec/template/spec/containers/0/lifecycle",
            ),
            (
                Box::new(|v| {
                    spec(v)["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "s"}}])
                }),
                "/spec/template/spec/containers/0/envFrom",
            ),
            (
                Box::new(|v| {
                    spec(v)["containers"][0]["volumeMounts"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "scratch", "mountPath": "/work/cells"}))
                }),
                "/spec/template/spec/containers/0/volumeMounts",
            ),
            (
                Box::new(
                    move |v| spec(v)["initContainers"] = json!([{"name": "wipe", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]),
                ),
                "/spec/template/spec/initContainers",
            ),
            (
                Box::new(|v| {
                    v["metadata"]["annotations"]["argocd.argoproj.io/hook"] = json!("PreSync")
                }),
                "/metadata/annotations/argocd.argoproj.io~1hook",
            ),
            (
                Box::new(|v| {
                    v["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/force"] =
                        json!("enabled")
                }),
                "/metadata/annotations/kustomize.toolkit.fluxcd.io~1force",
            ),
        ];
        for (edit, want) in cases {
            assert_eq!(refused(edit), vec![want.to_string()]);
        }
        // The rendered variables keep their order: a later value refers to an earlier one.
        let mut two = sts();
        two["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "CELLD_NODE", "value": "n"}, {"name": "CELLD_ADVERTISE", "value": "$(CELLD_NODE)"}]);
        let mut swapped = two.clone();
        swapped["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "CELLD_ADVERTISE", "value": "$(CELLD_NODE)"}, {"name": "CELLD_NODE", "value": "n"}]);
        assert_eq!(
            refusals(ObjectKind::StatefulSet, &two, &swapped)[0].pointer,
            "/spec/template/spec/containers/0/env"
        );
    }

    #[test]
    fn the_disruption_budget_and_rendered_rules_stay_exactly() {
        let pdb = json!({"spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"k": "v"}}}});
        let mut more = pdb.clone();
        more["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        assert_eq!(
            refusals(ObjectKind::PodDisruptionBudget, &pdb, &more)[0].pointer,
            "/spec"
        );
        let np = json!({"spec": {"podSelector": {"matchLabels": {"k": "v"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"k": "v"}}}]}]}});
        let mut narrowed = np.clone();
        narrowed["spec"]["podSelector"]["matchExpressions"] =
            json!([{"key": "k", "operator": "DoesNotExist"}]);
        assert_eq!(
            refusals(ObjectKind::NetworkPolicy, &np, &narrowed)[0].pointer,
            "/spec/podSelector"
        );
        let mut peer = np.clone();
        peer["spec"]["ingress"][0]["from"][0]["podSelector"]["matchExpressions"] = json!([]);
        assert_eq!(
            refusals(ObjectKind::NetworkPolicy, &np, &peer)[0].pointer,
            "/spec/ingress"
        );
    }

    #[test]
    fn services_keep_what_is_rendered() {
        let before = json!({"spec": {"selector": {"k": "v"}, "ports": [{"port": 80}]}});
        let ok = json!({"metadata": {"annotations": {"a": "b"}},
            "spec": {"selector": {"k": "v"}, "ports": [{"port": 80}], "externalTrafficPolicy": "Local"}});
        assert!(refusals(ObjectKind::Service, &before, &ok).is_empty());
        let wider = json!({"spec": {"selector": {"k": "v", "x": "y"}, "ports": [{"port": 80}]}});
        assert_eq!(
            refusals(ObjectKind::Service, &before, &wider)[0].pointer,
            "/spec/selector/x"
        );
        let more = json!({"spec": {"selector": {"k": "v"}, "ports": [{"port": 80}, {"port": 81}]}});
        assert_eq!(
            refusals(ObjectKind::Service, &before, &more)[0].pointer,
            "/spec/ports"
        );
    }

    #[test]
    fn network_policies_may_append_rules() {
        let before = json!({"spec": {"podSelector": {}, "ingress": [{"a": 1}]}});
        let appended = json!({"spec": {"podSelector": {}, "ingress": [{"a": 1}, {"b": 2}]}});
        assert!(refusals(ObjectKind::NetworkPolicy, &before, &appended).is_empty());
        let replaced = json!({"spec": {"podSelector": {}, "ingress": [{"b": 2}]}});
        assert_eq!(
            refusals(ObjectKind::NetworkPolicy, &before, &replaced)[0].pointer,
            "/spec/ingress"
        );
    }

    #[test]
    fn only_rendered_kubernetes_objects_are_patchable() {
        assert!(patchable(ObjectKind::CelldFleet).is_err());
        assert!(patchable(ObjectKind::CelldBucketReservation).is_err());
        assert!(patchable(ObjectKind::StatefulSet).is_ok());
    }
}
