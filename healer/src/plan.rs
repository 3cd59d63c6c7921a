//! What `decide` returns: at most one action, the full status to write, and when to look
//! again. Every action carries the preconditions the runtime must send with its write, so
//! the write fails (Conflict) rather than touching an object that changed since it was
//! observed.

use crate::rule::Rule;
use celld_api::CelldFleetStatus;
// Re-exported: the simulation (being reworked elsewhere) still names it here.
pub use crate::record::HandoffRecord;
use crate::snapshot::WorkloadKind;
use crate::time::Timestamp;

/// The result of one `decide` call.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The one write to make, if any.
    pub action: Option<Action>,
    /// The rule that produced the action or the reported state (e.g. `R3`), for logs,
    /// metrics and tests.
    pub rule: Rule,
    /// The complete status to write (merge-patch with the fleet's resourceVersion, and
    /// only when it differs from the stored one).
    pub status: CelldFleetStatus,
    /// The next time `decide` must run even if nothing changes (a member's replacement
    /// time, a stuck Pod's force-delete time, the end of an absorb window...). Watch
    /// events trigger earlier runs.
    pub wake_at: Option<Timestamp>,
    /// An event to record on the CelldFleet once the action succeeded.
    pub event: Option<Event>,
    /// Objects `decide` ignored because their names are outside what a member can be
    /// (an ordinal at or above the member limit): one line each, for logs and Events.
    /// Nothing is sized from such a name.
    pub ignored: Vec<String>,
}

/// A Kubernetes event the runtime records on the CelldFleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Message.
    pub message: String,
}

/// One write the runtime executes. Apart from [`Action::StartHandoff`], each is exactly
/// one API call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Add the fleet finalizer to the CelldFleet (update with the resourceVersion).
    AddFleetFinalizer {
        /// CelldFleet uid.
        uid: String,
        /// CelldFleet resourceVersion.
        resource_version: String,
    },
    /// Set `spec.members` of an External fleet that has none yet (JSON patch, field
    /// manager `celld-healer`, `test` ops on uid and resourceVersion): the API server
    /// cannot serve `/scale` while the field is absent, so no autoscaler could read or
    /// drive the fleet. Written once; from then on the `/scale` writer owns the field.
    InitializeMembers {
        /// CelldFleet uid.
        uid: String,
        /// CelldFleet resourceVersion (the one without `spec.members`).
        resource_version: String,
        /// The count to start from.
        members: i32,
    },
    /// Remove the fleet finalizer, releasing the CelldFleet (update with the
    /// resourceVersion; other finalizers are kept).
    RemoveFleetFinalizer {
        /// CelldFleet uid.
        uid: String,
        /// CelldFleet resourceVersion.
        resource_version: String,
    },
    /// Set the workload's `spec.replicas` by server-side apply, field manager
    /// `celld-healer`, with `metadata.uid` and `metadata.resourceVersion` in the applied
    /// object as preconditions.
    SetReplicas {
        /// Workload kind.
        kind: WorkloadKind,
        /// Workload name.
        name: String,
        /// Workload uid.
        uid: String,
        /// Workload resourceVersion.
        resource_version: String,
        /// Replicas before.
        from: i32,
        /// Replicas to set.
        replicas: i32,
    },
    /// Delete a member Pod with `gracePeriodSeconds: 0` and a uid precondition: its grace
    /// ended long ago and its node never confirmed. It keeps its disk.
    ForceDeletePod {
        /// Pod name.
        name: String,
        /// Pod uid.
        uid: String,
    },
    /// Delete a member Pod with its normal grace and uid + resourceVersion preconditions,
    /// so that its already-terminating claim can go and the StatefulSet makes a fresh one.
    DeletePod {
        /// Pod name.
        name: String,
        /// Pod uid.
        uid: String,
        /// Pod resourceVersion.
        resource_version: String,
    },
    /// Begin a disk handoff. The runtime makes up to three writes, each only after the
    /// previous one was acknowledged, and stops at the first error:
    ///
    /// 1. *prepare*: update the Pod (precondition `pod_resource_version`) adding the
    ///    replacement finalizer, the replacement index label (value: fleet identity) and
    ///    the record annotation [`HandoffRecord`] with `committed: false`;
    /// 2. *commit point*: delete the Pod with preconditions uid and the resourceVersion
    ///    returned by step 1 (normal grace);
    /// 3. *commit*: patch the Pod with a uid precondition, setting `committed: true`
    ///    only if the record still names this claim uncommitted.
    ///
    /// Only an acknowledged guarded delete can lead to `committed: true`. A record found
    /// uncommitted by any later `decide` is an interrupted handoff and is aborted, keeping
    /// the disk.
    StartHandoff(Handoff),
    /// Delete a claim with uid + resourceVersion preconditions.
    DeleteClaim {
        /// Claim name.
        name: String,
        /// Claim uid.
        uid: String,
        /// Claim resourceVersion.
        resource_version: String,
        /// Why this disk may go.
        purpose: ClaimDeletion,
    },
    /// The handoff is finished (its claim is deleting or gone): remove the replacement
    /// finalizer, record annotation and index label from the Pod (update with its
    /// resourceVersion; foreign finalizers, labels and annotations stay).
    ReleaseHandoff {
        /// Pod name.
        name: String,
        /// Pod uid.
        uid: String,
        /// Pod resourceVersion.
        resource_version: String,
    },
    /// The handoff is abandoned and the disk kept: same write as [`Action::ReleaseHandoff`].
    AbortHandoff {
        /// Pod name.
        name: String,
        /// Pod uid.
        uid: String,
        /// Pod resourceVersion.
        resource_version: String,
        /// Why.
        why: String,
    },
    /// Delete the workload with `propagationPolicy: Foreground` and uid +
    /// resourceVersion preconditions (members drain on SIGTERM before it goes).
    DeleteWorkload {
        /// Kind.
        kind: WorkloadKind,
        /// Name.
        name: String,
        /// uid.
        uid: String,
        /// resourceVersion.
        resource_version: String,
    },
}

impl Action {
    /// The action's variant name, for metrics, logs and Events.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::AddFleetFinalizer { .. } => "AddFleetFinalizer",
            Action::RemoveFleetFinalizer { .. } => "RemoveFleetFinalizer",
            Action::InitializeMembers { .. } => "InitializeMembers",
            Action::SetReplicas { .. } => "SetReplicas",
            Action::ForceDeletePod { .. } => "ForceDeletePod",
            Action::DeletePod { .. } => "DeletePod",
            Action::StartHandoff(_) => "StartHandoff",
            Action::DeleteClaim { .. } => "DeleteClaim",
            Action::ReleaseHandoff { .. } => "ReleaseHandoff",
            Action::AbortHandoff { .. } => "AbortHandoff",
            Action::DeleteWorkload { .. } => "DeleteWorkload",
        }
    }

    /// Whether the write is to the CelldFleet itself (its finalizer, its first
    /// `spec.members`): that moves its resourceVersion on, so its status follows from
    /// the reconcile the fleet's watch event brings.
    pub fn writes_the_fleet(&self) -> bool {
        matches!(
            self,
            Action::AddFleetFinalizer { .. }
                | Action::RemoveFleetFinalizer { .. }
                | Action::InitializeMembers { .. }
        )
    }

    /// Whether the write removes something (a Pod, a claim, the workload, or a member by
    /// contraction).
    pub fn is_destructive(&self) -> bool {
        match self {
            Action::ForceDeletePod { .. }
            | Action::DeletePod { .. }
            | Action::StartHandoff(_)
            | Action::DeleteClaim { .. }
            | Action::DeleteWorkload { .. } => true,
            Action::SetReplicas { from, replicas, .. } => replicas < from,
            _ => false,
        }
    }
}

/// Why a claim is deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimDeletion {
    /// A committed handoff on this Pod authorizes it.
    Handoff {
        /// The held Pod.
        pod: String,
    },
    /// The fleet is being deleted and its workload and members are gone.
    FleetDeletion,
}

/// The start of a disk handoff for one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// Member Pod name.
    pub pod: String,
    /// Pod uid.
    pub pod_uid: String,
    /// Pod resourceVersion observed.
    pub pod_resource_version: String,
    /// Claim name (`data-<pod>`).
    pub claim: String,
    /// Claim uid.
    pub claim_uid: String,
    /// Claim resourceVersion observed: the claim is deleted only if it still has it.
    pub claim_resource_version: String,
    /// Why the member gets a fresh disk.
    pub cause: HandoffCause,
    /// The record to write in step 1.
    pub record: HandoffRecord,
}

pub use crate::record::HandoffCause;
