//! Every verb on every resource the healer's requests use, and nothing else. The install
//! bundle's ClusterRole (fleet namespaces) and Role (the lease namespace) must grant
//! exactly these; `rbac.md` beside this file explains each line, and the end-to-end
//! tests run the healer with exactly this RBAC and check the rendered bundle against it.

use serde_json::{Value, json};

/// Where a rule is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A ClusterRole bound by a ClusterRoleBinding: fleets in every namespace.
    Cluster,
    /// A Role (and RoleBinding) in the lease namespace only.
    LeaseNamespace,
}

/// One RBAC rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// API group (`""` for core).
    pub api_group: &'static str,
    /// Resources (with `/subresource`).
    pub resources: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Where it is granted.
    pub scope: Scope,
}

/// The healer's RBAC.
pub const RULES: &[Rule] = &[
    // Watch fleets; add/remove the fleet finalizer (JSON patch).
    Rule {
        api_group: "fleet.celld.dev",
        resources: &["celldfleets"],
        verbs: &["list", "watch", "patch"],
        scope: Scope::Cluster,
    },
    // Status, merge patch.
    Rule {
        api_group: "fleet.celld.dev",
        resources: &["celldfleets/status"],
        verbs: &["patch"],
        scope: Scope::Cluster,
    },
    // Workloads: watch; spec.replicas by server-side apply (patch); foreground delete
    // when the fleet is deleted.
    Rule {
        api_group: "apps",
        resources: &["statefulsets", "deployments"],
        verbs: &["list", "watch", "patch", "delete"],
        scope: Scope::Cluster,
    },
    // Which Deployment controls a Pod (Pod -> ReplicaSet -> Deployment); metadata only.
    Rule {
        api_group: "apps",
        resources: &["replicasets"],
        verbs: &["list", "watch"],
        scope: Scope::Cluster,
    },
    // Members: watch; handoff markers (JSON patch); guarded and force deletes.
    Rule {
        api_group: "",
        resources: &["pods"],
        verbs: &["list", "watch", "patch", "delete"],
        scope: Scope::Cluster,
    },
    // Disks: watch (all claims, to see another fleet's claim at a member name); guarded
    // deletes (handoff, fleet deletion).
    Rule {
        api_group: "",
        resources: &["persistentvolumeclaims"],
        verbs: &["list", "watch", "delete"],
        scope: Scope::Cluster,
    },
    // Prerequisites verified against the rendering (never written).
    Rule {
        api_group: "",
        resources: &["services"],
        verbs: &["list", "watch"],
        scope: Scope::Cluster,
    },
    // Bucket reservations: a fleet whose reservation names another identity is not grown
    // or healed (StorageScopeConflict); never written.
    Rule {
        api_group: "fleet.celld.dev",
        resources: &["celldbucketreservations"],
        verbs: &["list", "watch"],
        scope: Scope::Cluster,
    },
    // Events on fleets (each created anew, never patched).
    Rule {
        api_group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create"],
        scope: Scope::Cluster,
    },
    // Leader election.
    Rule {
        api_group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["get", "create", "update"],
        scope: Scope::LeaseNamespace,
    },
];

/// The `rules` of the ClusterRole or Role for `scope`, as Kubernetes JSON.
pub fn rules_json(scope: Scope) -> Value {
    Value::Array(
        RULES
            .iter()
            .filter(|r| r.scope == scope)
            .map(|r| {
                json!({
                    "apiGroups": [r.api_group],
                    "resources": r.resources,
                    "verbs": r.verbs,
                })
            })
            .collect(),
    )
}

/// Every (group, resource, verb) granted in `scope`, sorted: for comparing a rendered
/// role with [`RULES`] whatever its grouping.
pub fn triples(scope: Scope) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = RULES
        .iter()
        .filter(|r| r.scope == scope)
        .flat_map(|r| {
            r.resources.iter().flat_map(move |res| {
                r.verbs
                    .iter()
                    .map(move |verb| (r.api_group.to_string(), res.to_string(), verb.to_string()))
            })
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The (group, resource, verb) triples of a rendered role's `rules`.
pub fn triples_of(rules: &Value) -> Vec<(String, String, String)> {
    let mut v = Vec::new();
    let strs = |x: &Value| -> Vec<String> {
        x.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for r in rules.as_array().into_iter().flatten() {
        for g in strs(&r["apiGroups"]) {
            for res in strs(&r["resources"]) {
                for verb in strs(&r["verbs"]) {
                    v.push((g.clone(), res.clone(), verb));
                }
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wildcards_no_secrets_no_get_on_members() {
        for (g, r, v) in triples(Scope::Cluster)
            .into_iter()
            .chain(triples(Scope::LeaseNamespace))
        {
            assert!(g != "*" && r != "*" && v != "*");
            assert_ne!(r, "secrets");
            assert_ne!(r, "configmaps");
            assert!(v != "create" || r == "events" || r == "leases", "{r} {v}");
        }
        assert_eq!(
            triples_of(&rules_json(Scope::Cluster)),
            triples(Scope::Cluster)
        );
    }
}
