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

/// Cluster-wide rules (fleets live in any namespace; reservations are cluster-scoped).
pub const CLUSTER_RULES: &[Rule] = &[
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldfleets"],
        verbs: &["get", "list", "watch", "patch", "update"],
        why: "read fleets; add and remove the deletion finalizer",
    },
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldfleets/status"],
        verbs: &["get", "patch", "update"],
        why: "report status",
    },
    Rule {
        group: "fleet.celld.dev",
        resources: &["celldbucketreservations"],
        verbs: &["get", "list", "watch", "patch"],
        why: "verify a fleet's reservation; keep capacity history in its annotation",
    },
    Rule {
        group: "apps",
        resources: &["statefulsets", "deployments"],
        verbs: &["get", "list", "watch", "patch", "delete"],
        why: "own spec.replicas by server-side apply; delete the workload when the fleet is deleted",
    },
    Rule {
        group: "",
        resources: &["pods"],
        verbs: &["get", "list", "watch", "patch", "update", "delete"],
        why: "observe members; disk handoff record and finalizer; force-delete stranded members",
    },
    Rule {
        group: "",
        resources: &["persistentvolumeclaims"],
        verbs: &["get", "list", "watch", "delete"],
        why: "observe disks; delete a lost disk after a committed handoff, and a deleted fleet's disks",
    },
    Rule {
        group: "",
        resources: &["services"],
        verbs: &["get", "list", "watch"],
        why: "verify the rendered Services before any lifecycle action",
    },
    Rule {
        group: "",
        resources: &["nodes"],
        verbs: &["get", "list", "watch"],
        why: "the zone of each member's node, for zone-safe disk replacement",
    },
    Rule {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
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
