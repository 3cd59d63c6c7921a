//! The healer's permissions: every verb it uses and nothing else. This table is the single
//! source of the rendered ClusterRole and Role, and the end-to-end tests run the healer
//! with exactly what is rendered from it.

/// One RBAC rule: API group, resources, verbs, and why the healer needs them.
pub struct Rule {
    /// API group (`""` is the core group).
    pub group: &'static str,
    /// Resources (subresources as `resource/sub`).
    pub resources: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Why, for the comment in the rendered role.
    pub why: &'static str,
}

/// Cluster-wide rules (fleets live in any namespace). The healer reads everything through
/// watches, so it needs `list` and `watch` but never `get`.
pub const CLUSTER_RULES: &[Rule] = &[
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldfleets"],
        verbs: &["list", "watch", "patch"],
        why: "watch fleets; add and remove the deletion finalizer (JSON patch)",
    },
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldfleets/status"],
        verbs: &["patch"],
        why: "report status (merge patch)",
    },
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldbucketreservations"],
        verbs: &["list", "watch"],
        why: "refuse to grow or heal a fleet whose bucket reservation names another identity",
    },
    Rule {
        group: "apps",
        resources: &["statefulsets", "deployments"],
        verbs: &["list", "watch", "patch", "delete"],
        why: "own spec.replicas by server-side apply; delete the workload when the fleet is deleted",
    },
    Rule {
        group: "apps",
        resources: &["replicasets"],
        verbs: &["list", "watch"],
        why: "which Deployment controls a Pod (Pod -> ReplicaSet -> Deployment)",
    },
    Rule {
        group: "",
        resources: &["pods"],
        verbs: &["list", "watch", "patch", "delete"],
        why: "observe members; disk handoff markers; guarded and force deletes",
    },
    Rule {
        group: "",
        resources: &["persistentvolumeclaims"],
        verbs: &["list", "watch", "delete"],
        why: "observe disks (another fleet's at a member name too); guarded deletes",
    },
    Rule {
        group: "",
        resources: &["services"],
        verbs: &["list", "watch"],
        why: "verify the rendered Services before any lifecycle action (never written)",
    },
    Rule {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create"],
        why: "record every action and every change of Blocked on the fleet",
    },
];

/// Rules in the healer's own namespace (leader election).
pub const NAMESPACE_RULES: &[Rule] = &[Rule {
    group: "coordination.k8s.io",
    resources: &["leases"],
    verbs: &["get", "create", "update"],
    why: "leader election: only the holder of the lease acts",
}];
