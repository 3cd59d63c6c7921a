//! The healer's permissions: every verb it uses and nothing else, written once. The
//! install bundle renders its roles from [`RULES`], the healer re-exports the same table
//! (`celld_healer::runtime::rbac`), and the end-to-end tests run the healer with exactly
//! what is rendered from it. `rbac.md` beside this file explains each line.

use serde_json::{Value, json};

use crate::healer_flags::NAMESPACE_CLAIM_LEASE;

/// Where a rule is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Always cluster-wide (ClusterRole + ClusterRoleBinding), and read-only but for one
    /// rule: every CelldFleet for the identity check (rule V2 compares a fleet with every
    /// fleet of the cluster, served or not) and the cluster-scoped bucket reservations
    /// (rule V3), plus `patch` on reservations for the capacity history annotation; and
    /// the Nodes and PersistentVolumes whose zones member status shows.
    ClusterRead,
    /// The namespaces the healer serves. Watching every namespace: in the ClusterRole.
    /// With `--watch-namespace`: a Role and RoleBinding in each of those namespaces, so
    /// the healer can write nothing anywhere else.
    Served,
    /// A Role (and RoleBinding) in the healer's own namespace: the leader-election lease.
    LeaseNamespace,
    /// With `--metrics-auth kubernetes` only, cluster-wide (these reviews are
    /// cluster-scoped and store nothing): authenticating and authorizing a reader of
    /// `/metrics`.
    MetricsAuth,
    /// With `--watch-namespace` only, in each served namespace: the healer's own
    /// RoleBinding there, by name ([`ACCESS_BINDING`], [`ACCESS_FINALIZER`]). Watching every namespace, the
    /// healer's rights come from a ClusterRoleBinding that no namespace deletion removes.
    ServedBinding,
}

/// The finalizer the healer keeps on its RoleBinding in a served namespace
/// (`--watch-namespace`) while any CelldFleet lives there. A namespace deletion removes
/// that binding with everything else, while a protected fleet and its disks stay; the
/// way out (protection off, then the healer deletes the fleet's workload and disks in
/// order) needs the healer's rights until the last fleet is gone.
pub const ACCESS_FINALIZER: &str = "fleet.celld.dev/healer-access";

/// The name of the healer's RoleBinding in each served namespace (`--watch-namespace`),
/// which binds the install's served ClusterRole there and carries [`ACCESS_FINALIZER`].
pub const ACCESS_BINDING: &str = "celld-healer-access";

/// One RBAC rule: API group, resources, verbs, where, and why the healer needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// API group (`""` is the core group).
    pub group: &'static str,
    /// Resources (subresources as `resource/sub`).
    pub resources: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// The objects it is limited to, by name (`resourceNames`); empty: every object.
    pub names: &'static [&'static str],
    /// Where it is granted.
    pub scope: Scope,
    /// Why, in a few words.
    pub why: &'static str,
}

/// The permission that lets a claim deletion through the install's disk-protection
/// policy: `delete` on the subresource `disks` of CelldFleets, which does not exist, so
/// RBAC grants it to nobody by accident. The policy asks the API server's authorizer
/// whether the requester, a ServiceAccount named `celld-healer`, holds it in the claim's
/// namespace: exactly the healers of the installs serving that namespace, never a
/// ServiceAccount that merely shares the healer's name.
pub const DISK_DELETER: (&str, &str, &str, &str) =
    ("fleet.celld.dev", "celldfleets", "disks", "delete");

/// The healer's RBAC. It reads everything through watches, so it needs `list` and
/// `watch` but never `get` (the fresh read before a destructive write is a `list` with a
/// field selector).
pub const RULES: &[Rule] = &[
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldfleets"],
        verbs: &["list", "watch"],
        names: &[],
        scope: Scope::ClusterRead,
        why: "every fleet of the cluster, for the identity check (rule V2)",
    },
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldbucketreservations"],
        verbs: &["list", "watch"],
        names: &[],
        scope: Scope::ClusterRead,
        why: "refuse to grow or heal a fleet whose bucket reservation names another identity",
    },
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldbucketreservations"],
        verbs: &["patch"],
        names: &[],
        scope: Scope::ClusterRead,
        why: "capacity history: one annotation on the fleet's reservation (merge patch with resourceVersion)",
    },
    Rule {
        group: "",
        resources: &["nodes"],
        verbs: &["list", "watch"],
        names: &[],
        scope: Scope::ClusterRead,
        why: "each member's zone in status, from its node's zone label; whether a terminating member's node is Ready before a force delete (rule F2; a node the healer cannot read is never taken for unreachable)",
    },
    Rule {
        group: "",
        resources: &["persistentvolumes"],
        verbs: &["list", "watch"],
        names: &[],
        scope: Scope::ClusterRead,
        why: "a member's zone while its Pod is on no node: its disk's node affinity (status only)",
    },
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldfleets"],
        verbs: &["patch"],
        names: &[],
        scope: Scope::Served,
        why: "add and remove the deletion finalizer; the first spec.members of an External fleet, so /scale can be served (JSON patch)",
    },
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldfleets/status"],
        verbs: &["patch"],
        names: &[],
        scope: Scope::Served,
        why: "report status (merge patch)",
    },
    Rule {
        group: "apps",
        resources: &["statefulsets", "deployments"],
        verbs: &["list", "watch", "patch", "delete"],
        names: &[],
        scope: Scope::Served,
        why: "own spec.replicas by server-side apply; delete the workload when the fleet is deleted",
    },
    Rule {
        group: "apps",
        resources: &["replicasets"],
        verbs: &["list", "watch"],
        names: &[],
        scope: Scope::Served,
        why: "which Deployment controls a Pod (Pod -> ReplicaSet -> Deployment)",
    },
    Rule {
        group: "",
        resources: &["pods"],
        verbs: &["list", "watch", "patch", "delete"],
        names: &[],
        scope: Scope::Served,
        why: "observe members; disk handoff markers; guarded and force deletes",
    },
    Rule {
        group: "",
        resources: &["persistentvolumeclaims"],
        verbs: &["list", "watch", "delete"],
        names: &[],
        scope: Scope::Served,
        why: "observe disks (another fleet's at a member name too); guarded deletes",
    },
    Rule {
        group: DISK_DELETER.0,
        resources: &["celldfleets/disks"],
        verbs: &[DISK_DELETER.3],
        names: &[],
        scope: Scope::Served,
        why: "no object: the disk-protection policy lets through the claim deletions of those who hold it (DISK_DELETER)",
    },
    Rule {
        group: "",
        resources: &["services"],
        verbs: &["list", "watch"],
        names: &[],
        scope: Scope::Served,
        why: "verify the rendered Services before any lifecycle action (never written)",
    },
    Rule {
        group: "metrics.k8s.io",
        resources: &["pods"],
        verbs: &["list"],
        names: &[],
        scope: Scope::Served,
        why: "capacity policy: one list of a fleet's Pod metrics per observation",
    },
    Rule {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create"],
        names: &[],
        scope: Scope::Served,
        why: "record every action and every change of Blocked on the fleet",
    },
    Rule {
        group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["create"],
        names: &[],
        scope: Scope::Served,
        why: "claim the namespace: its Lease celld-healer-claim, when none exists (a create cannot be limited by name)",
    },
    Rule {
        group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["get", "update"],
        names: &[NAMESPACE_CLAIM_LEASE],
        scope: Scope::Served,
        why: "renew the namespace's claim, or take it over from an install that stopped renewing it",
    },
    Rule {
        group: "rbac.authorization.k8s.io",
        resources: &["rolebindings"],
        verbs: &["list", "watch", "patch"],
        names: &[ACCESS_BINDING],
        scope: Scope::ServedBinding,
        why: "keep the finalizer fleet.celld.dev/healer-access on its own RoleBinding while a fleet lives in the namespace (JSON patch with test ops)",
    },
    Rule {
        group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["get", "create", "update"],
        names: &[],
        scope: Scope::LeaseNamespace,
        why: "leader election: only the holder of the lease acts",
    },
    Rule {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create"],
        names: &[],
        scope: Scope::LeaseNamespace,
        why: "Events about the healer itself, on its Lease (permissions beyond this table)",
    },
    Rule {
        group: "authentication.k8s.io",
        resources: &["tokenreviews"],
        verbs: &["create"],
        names: &[],
        scope: Scope::MetricsAuth,
        why: "who presents a bearer token to /metrics (--metrics-auth kubernetes)",
    },
    Rule {
        group: "authorization.k8s.io",
        resources: &["subjectaccessreviews"],
        verbs: &["create"],
        names: &[],
        scope: Scope::MetricsAuth,
        why: "whether that user may get /metrics (--metrics-auth kubernetes)",
    },
];

/// The rules granted in any of `scopes`, in table order.
pub fn rules_in(scopes: &[Scope]) -> impl Iterator<Item = &'static Rule> + '_ {
    RULES.iter().filter(|r| scopes.contains(&r.scope))
}

/// The `rules` of a ClusterRole or Role granting `scopes`, as Kubernetes JSON.
pub fn rules_json(scopes: &[Scope]) -> Value {
    Value::Array(
        rules_in(scopes)
            .map(|r| {
                let mut rule = json!({
                    "apiGroups": [r.group],
                    "resources": r.resources,
                    "verbs": r.verbs,
                });
                if !r.names.is_empty() {
                    rule["resourceNames"] = json!(r.names);
                }
                rule
            })
            .collect(),
    )
}

/// A (group, resource, verb) permission.
pub type Triple = (String, String, String);

/// Every (group, resource, verb) granted in `scopes`, sorted: for comparing a rendered
/// role with [`RULES`] whatever its grouping.
pub fn triples(scopes: &[Scope]) -> Vec<Triple> {
    let mut v: Vec<Triple> = rules_in(scopes)
        .flat_map(|r| {
            r.resources.iter().flat_map(move |res| {
                r.verbs
                    .iter()
                    .map(move |verb| (r.group.to_string(), res.to_string(), verb.to_string()))
            })
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The (group, resource, verb) triples of a rendered role's `rules`, sorted.
pub fn triples_of(rules: &Value) -> Vec<Triple> {
    let strs = |x: &Value| -> Vec<String> {
        x.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut v = Vec::new();
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

    const ALL: [Scope; 5] = [
        Scope::ClusterRead,
        Scope::Served,
        Scope::LeaseNamespace,
        Scope::ServedBinding,
        Scope::MetricsAuth,
    ];

    #[test]
    fn no_wildcards_no_secrets_no_get_on_members() {
        for (g, r, v) in triples(&ALL) {
            assert!(g != "*" && r != "*" && v != "*");
            assert_ne!(r, "secrets");
            assert_ne!(r, "configmaps");
            assert!(
                v != "create"
                    || matches!(
                        r.as_str(),
                        "events" | "leases" | "tokenreviews" | "subjectaccessreviews"
                    ),
                "{r} {v}"
            );
            assert!(v != "get" || r == "leases", "{r} {v}");
        }
        for s in ALL {
            assert_eq!(triples_of(&rules_json(&[s])), triples(&[s]));
        }
    }

    /// What stays cluster-wide when namespaces are served by Roles must be read-only,
    /// with one deliberate exception: `patch` on bucket reservations (cluster-scoped, so
    /// no Role can grant it), for the capacity history annotation the healer alone owns.
    #[test]
    fn cluster_wide_rules_only_read() {
        let mut writes = Vec::new();
        for (g, r, v) in triples(&[Scope::ClusterRead]) {
            if !matches!(v.as_str(), "list" | "watch") {
                writes.push((g, r, v));
            }
        }
        assert_eq!(
            writes,
            [(
                "fleet.celld.dev".to_string(),
                "celldbucketreservations".to_string(),
                "patch".to_string()
            )]
        );
    }
}
