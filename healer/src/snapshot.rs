//! What `decide` sees: one fleet, read at one moment, already reduced to the facts the
//! rules use. [`crate::observe`] builds it from Kubernetes objects and refuses objects it
//! cannot read in full, so every field here is trustworthy; the simulation builds it from
//! its model directly.
//!
//! Nothing in a snapshot is remembered by the healer: it is rebuilt from the cluster on
//! every reconcile. The previous status is carried only to keep condition transition
//! times stable; no rule reads it.

use celld_api::{ApplicationStatus, CapacityMode, CelldFleetStatus, Profile};
use serde::{Deserialize, Serialize};

use crate::time::{Span, Timestamp};

/// One fleet and everything of it the healer may act on.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The CelldFleet.
    pub fleet: Fleet,
    /// The workload named after the fleet (StatefulSet or Deployment), if it exists.
    pub workload: Option<Workload>,
    /// Pods carrying the fleet's identity label, plus any Pod carrying the replacement
    /// index label with the fleet's identity. `decide` itself works out which are members
    /// (controlled by the workload).
    pub pods: Vec<Pod>,
    /// Claims carrying the fleet's identity label, plus any claim named
    /// `data-<fleet>-<n>` without it (another fleet's disk at one of our names).
    pub claims: Vec<Claim>,
    /// The result of verifying live prerequisites (Services) against the rendering.
    pub infrastructure: Infrastructure,
    /// What the capacity evaluator (runtime side) concluded, if anything.
    pub capacity: CapacitySignal,
    /// What the members last said about the application, when the runtime asked them
    /// (`--application-interval`); `None` keeps what the status had. Never gates any
    /// action (rule A4): `decide` only reports it.
    pub application: Option<ApplicationView>,
    /// The healer's wall clock minus the API server's, as measured
    /// ([`crate::clock::ServerClock::skew`]); `None` until measured. Rule T1 holds every
    /// destructive write while it is unknown or beyond `--max-clock-skew`.
    pub clock_skew: Option<Span>,
}

impl Snapshot {
    /// The snapshot as the API server has it once the Pod `uid` is force-deleted (grace
    /// 0): gone, or, held by a finalizer (the healer's own or another's), still there
    /// with a grace of zero, which rule F1 reads as force-deleted already. Used where a
    /// decision follows a force delete before any read shows it: the runtime's caches
    /// until the Pod watch catches up, and the force deletes sent with it on the same
    /// fresh read ([`crate::confirm::batch`]).
    pub fn force_deleted(&mut self, uid: &str) {
        let Some(i) = self.pods.iter().position(|p| p.uid == uid) else {
            return;
        };
        let p = &mut self.pods[i];
        if p.replacement_finalizer || !p.other_finalizers.is_empty() {
            p.force_deleted = true;
        } else {
            self.pods.remove(i);
        }
    }
}

/// The members' view of the application, as the status reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ApplicationView {
    /// `status.application`.
    pub status: ApplicationStatus,
    /// `status.runtimeVersions`: distinct deployments (`version@prefix`) the members run.
    pub versions: Vec<String>,
}

/// The facts of the CelldFleet the rules use.
#[derive(Clone, Debug, PartialEq)]
pub struct Fleet {
    /// metadata.name.
    pub name: String,
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.uid.
    pub uid: String,
    /// metadata.resourceVersion (precondition for finalizer edits).
    pub resource_version: String,
    /// metadata.generation.
    pub generation: i64,
    /// spec.identity: the value of the identity label on everything the fleet owns.
    pub identity: String,
    /// spec.profile.
    pub profile: Profile,
    /// Whether the workload is a StatefulSet (PersistentFleet, or Bucket `Ordered`).
    pub stateful_set: bool,
    /// spec.members as it stands (the default 3 applied unless the mode is External,
    /// where only the `/scale` writer sets it and it may still be absent).
    pub members: Option<i32>,
    /// Number of zones in spec.placement.
    pub zones: i32,
    /// spec.lifecycle.terminationGraceSeconds, defaulted.
    pub termination_grace_seconds: i64,
    /// spec.maintenance.paused.
    pub paused: bool,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// spec.deletionProtection, defaulted (true): deletion keeps the workload and disks.
    pub deletion_protected: bool,
    /// Another fleet served by this healer carries the same identity and is older (by
    /// creationTimestamp, then namespace and name): its `namespace/name`. The healer
    /// takes no action for this fleet while it is set.
    pub identity_conflict: Option<String>,
    /// The fleet's bucket reservation, when the runtime looked it up (`None` in tests
    /// and the simulation: not checked).
    pub reservation: Option<Reservation>,
    /// What `celld-gen check` reports for the live spec (one line per problem); empty
    /// when the spec is valid. The healer takes no action for an invalid fleet except
    /// aborting a handoff (which keeps the disk).
    pub invalid: Vec<String>,
    /// The healer's fleet finalizer is present.
    pub has_finalizer: bool,
    /// Claim uids an operator accepted the loss of (annotation
    /// `fleet.celld.dev/accept-disk-loss`): rule R8 lets their disks be replaced while
    /// several are Lost at once.
    pub accepted_disk_loss: Vec<String>,
    /// spec.capacity with defaults applied; `None` means members are set by hand.
    pub capacity: Option<celld_api::defaults::CapacityPolicy>,
    /// The status currently stored, used only to keep transition times stable.
    pub previous_status: Option<CelldFleetStatus>,
}

impl Fleet {
    /// Capacity mode, `None` for manual members.
    pub fn capacity_mode(&self) -> Option<CapacityMode> {
        self.capacity.as_ref().map(|c| c.mode)
    }
}

/// The CelldBucketReservation named after the fleet's bucket and prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Its name (`reservation_name(bucket, prefix)`).
    pub name: String,
    /// The reservation found (`None` when there is none yet: Argo CD and Flux create it
    /// before the fleet): whether it is this fleet's (bucket, prefix, identity, namespace
    /// and name: `CelldBucketReservationSpec::held_by`), and who holds it, in words.
    pub found: Option<ReservedFor>,
}

/// Whom a bucket reservation names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedFor {
    /// It names this fleet.
    pub this_fleet: bool,
    /// Its holder, in words (its identity and fleet).
    pub holder: String,
}

/// Kind of the fleet's workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WorkloadKind {
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 Deployment.
    Deployment,
}

impl WorkloadKind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Deployment => "Deployment",
        }
    }
}

/// The fleet's StatefulSet or Deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Kind.
    pub kind: WorkloadKind,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// metadata.resourceVersion.
    pub resource_version: String,
    /// metadata.generation.
    pub generation: i64,
    /// status.observedGeneration (absent until the controller first saw it).
    pub observed_generation: Option<i64>,
    /// Value of the identity label, if any.
    pub identity: Option<String>,
    /// metadata.ownerReferences is non-empty (then it is not ours to touch).
    pub has_owner_references: bool,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// spec.replicas (Kubernetes defaults an absent value to 1).
    pub replicas: i32,
    /// status.replicas.
    pub status_replicas: i32,
    /// status.readyReplicas.
    pub ready_replicas: i32,
    /// status.updatedReplicas.
    pub updated_replicas: i32,
    /// status.currentRevision (StatefulSet).
    pub current_revision: Option<String>,
    /// status.updateRevision (StatefulSet).
    pub update_revision: Option<String>,
    /// spec.persistentVolumeClaimRetentionPolicy of a StatefulSet, field by field
    /// (absent fields are `Retain`, the API server's default); always kept for a
    /// Deployment, which has no claims.
    pub claim_retention: ClaimRetention,
}

/// What a StatefulSet's controller does with the claims of Pods it removes, as
/// `spec.persistentVolumeClaimRetentionPolicy` says. The rendering keeps every claim
/// (`Retain` for both); anything else lets the controller and the garbage collector
/// delete disks the healer's rules count on (rule W5).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimRetention {
    /// `whenDeleted`, when it is not `Retain` (the value as written).
    pub when_deleted: Option<String>,
    /// `whenScaled`, when it is not `Retain` (the value as written).
    pub when_scaled: Option<String>,
}

impl ClaimRetention {
    /// The value that keeps claims, the rendering's for both fields.
    pub const RETAIN: &'static str = "Retain";

    /// From the live fields; an absent field is the API server's default, `Retain`.
    pub fn from_fields(when_deleted: Option<&str>, when_scaled: Option<&str>) -> Self {
        let drifted = |v: Option<&str>| v.filter(|v| *v != Self::RETAIN).map(str::to_string);
        ClaimRetention {
            when_deleted: drifted(when_deleted),
            when_scaled: drifted(when_scaled),
        }
    }

    /// Every field keeps claims.
    pub fn keeps_claims(&self) -> bool {
        self.when_deleted.is_none() && self.when_scaled.is_none()
    }

    /// The drifted fields, for a message: `whenScaled: Delete`.
    pub fn describe(&self) -> String {
        [
            ("whenDeleted", &self.when_deleted),
            ("whenScaled", &self.when_scaled),
        ]
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}: {v}")))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

impl Workload {
    /// The controller has seen the current spec.
    pub fn observed(&self) -> bool {
        self.observed_generation
            .is_some_and(|g| g >= self.generation)
    }

    /// The last change finished: observed, every replica exists, runs the current
    /// template and is ready (and, for a StatefulSet, both revisions agree).
    pub fn rolled_out(&self) -> bool {
        let n = self.replicas;
        self.observed()
            && self.status_replicas == n
            && self.updated_replicas == n
            && self.ready_replicas == n
            && (self.kind == WorkloadKind::Deployment
                || (self.current_revision.is_some()
                    && self.current_revision == self.update_revision))
    }
}

/// What the healer knows of the node a Pod is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// The Pod is bound to no node: nothing runs it.
    Unbound,
    /// The node object is gone from the API server.
    Gone,
    /// The node's kubelet reports: Ready is True, or False (a kubelet that says its node
    /// is not ready is alive, and so may be its containers). It can still finish the Pod
    /// (a hung container or a stuck unmount is not a stranded Pod).
    Ready,
    /// Ready is Unknown: the node controller lost contact with the kubelet. `since`:
    /// since when the healer has seen it so without a break, on its own clock
    /// ([`crate::clock::Observations`]; `None`: not observed, which counts as seen only
    /// now).
    Unreachable {
        /// Start of the healer's observation.
        since: Option<Timestamp>,
        /// The Ready condition's `lastTransitionTime` (the node controller's clock):
        /// only a key, so that a node that recovered and was lost again in between two
        /// looks is observed anew, never timed from the first loss.
        transition: Option<Timestamp>,
    },
    /// The healer cannot tell: its node watch has not listed or has failed, or the node
    /// has no Ready condition.
    Unknown,
}

/// A Pod's controller reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controller {
    /// Kind (StatefulSet, ReplicaSet...).
    pub kind: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// Status of a Kubernetes condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondStatus {
    /// True.
    True,
    /// False.
    False,
    /// Unknown (or any other value).
    Unknown,
}

/// A condition's status and when it last changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cond {
    /// Status.
    pub status: CondStatus,
    /// lastTransitionTime, when present.
    pub since: Option<Timestamp>,
}

/// The scheduler found no node for the Pod (PodScheduled=False, reason Unschedulable,
/// and no nodeName).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    /// lastTransitionTime of PodScheduled, when present.
    pub since: Option<Timestamp>,
    /// The scheduler's message.
    pub message: String,
}

/// Pod phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    /// Pending.
    Pending,
    /// Running.
    Running,
    /// Succeeded.
    Succeeded,
    /// Failed.
    Failed,
    /// Unknown or absent.
    Unknown,
}

/// A disk-replacement record found on a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordState {
    /// The annotation parsed.
    Valid(crate::record::HandoffRecord),
    /// The annotation is present but unreadable (the reason).
    Malformed(String),
}

/// One Pod.
#[derive(Clone, Debug, PartialEq)]
pub struct Pod {
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// metadata.resourceVersion.
    pub resource_version: String,
    /// Value of the identity label, if any.
    pub identity: Option<String>,
    /// The controller ownerReference, if any.
    pub controller: Option<Controller>,
    /// metadata.creationTimestamp.
    pub created: Timestamp,
    /// metadata.deletionTimestamp (for a Pod: deletion request + grace).
    pub deletion: Option<Timestamp>,
    /// spec.nodeName, if bound.
    pub node_name: Option<String>,
    /// The state of that node, as the healer knows it (rule F1 force-deletes only a
    /// Pod whose node cannot finish it).
    pub node: NodeState,
    /// Zone of the node, when the runtime knows it (only shown in status).
    pub zone: Option<String>,
    /// status.phase.
    pub phase: PodPhase,
    /// The Ready condition, if present (its time is the kubelet's clock).
    pub ready: Option<Cond>,
    /// Since when the healer has seen the Pod ready, or not ready, without a break, on
    /// its own clock ([`crate::clock::Observations`]); `None`: not observed, which
    /// counts as seen only now. Delays that justify a destructive write are timed with
    /// this, never with the kubelet's timestamps.
    pub seen_since: Option<Timestamp>,
    /// When the healer last heard this member's celld say that it is recovering its
    /// predecessor's log (HTTP 503 "predecessor recovery in progress" on its internal
    /// port), on the healer's own clock ([`crate::clock::Observations`]); `None`: not
    /// heard while the Pod has been down. Rule R9: such a member is not down.
    pub recovering_seen: Option<Timestamp>,
    /// Set when the scheduler found no node for it.
    pub unschedulable: Option<Unschedulable>,
    /// A container or init container waiting on its image or configuration
    /// (ErrImagePull, ImagePullBackOff, InvalidImageName, ErrImageNeverPull,
    /// CreateContainerConfigError): the reason.
    pub config_wait: Option<String>,
    /// A container or init container waiting in CrashLoopBackOff.
    pub crash_loop_backoff: bool,
    /// Latest `lastState.terminated.finishedAt` over its containers: when a container
    /// last exited and was restarted.
    pub last_container_exit: Option<Timestamp>,
    /// Carries the healer's replacement finalizer.
    pub replacement_finalizer: bool,
    /// Value of the replacement index label, if any.
    pub replacement_index: Option<String>,
    /// The replacement record annotation, if any.
    pub record: Option<RecordState>,
    /// `metadata.deletionGracePeriodSeconds` is 0: it was force-deleted already, so a
    /// Pod still present is held by a finalizer and another force delete changes nothing.
    pub force_deleted: bool,
    /// Finalizers other than the healer's own, which keep the Pod after any delete.
    pub other_finalizers: Vec<String>,
    /// A force delete of this Pod failed: not tried again before this time (the
    /// runtime's back-off), so later rules run meanwhile.
    pub force_delete_retry_at: Option<Timestamp>,
}

impl Pod {
    /// metadata.deletionTimestamp is set.
    pub fn terminating(&self) -> bool {
        self.deletion.is_some()
    }

    /// Ready=True.
    pub fn is_ready(&self) -> bool {
        matches!(
            self.ready,
            Some(Cond {
                status: CondStatus::True,
                ..
            })
        )
    }

    /// The scheduler has decided: the Pod is bound to a node, or found unschedulable.
    /// A missing, terminating or not-yet-tried Pod is undecided.
    pub fn schedule_decided(&self) -> bool {
        !self.terminating() && (self.node_name.is_some() || self.unschedulable.is_some())
    }

    /// Since when it has not been ready: the Ready condition's transition time when it
    /// is not True, or the creation time when there is none.
    pub fn not_ready_since(&self) -> Timestamp {
        match self.ready {
            Some(Cond {
                status,
                since: Some(t),
            }) if status != CondStatus::True => t,
            _ => self.created,
        }
    }

    /// Finished (Succeeded or Failed): no longer counted as a member that exists.
    pub fn finished(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// Phase of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimPhase {
    /// Waiting for a volume (with WaitForFirstConsumer: for its Pod to be scheduled).
    Pending,
    /// Bound to a volume.
    Bound,
    /// Its volume is gone.
    Lost,
    /// Absent or unrecognised.
    Unknown,
}

/// One PersistentVolumeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// metadata.resourceVersion.
    pub resource_version: String,
    /// Value of the identity label, if any.
    pub identity: Option<String>,
    /// The first of metadata.ownerReferences, as `Kind/name` (none: not owned). An
    /// owned claim is not the healer's to act on, and the garbage collector deletes it
    /// with its owner (rule W6 reports it).
    pub owner: Option<String>,
    /// metadata.creationTimestamp.
    pub created: Timestamp,
    /// metadata.deletionTimestamp.
    pub deletion: Option<Timestamp>,
    /// status.phase.
    pub phase: ClaimPhase,
    /// Since when the healer has seen the claim Lost without a break, on its own clock
    /// ([`crate::clock::Observations`]; none when not Lost). A Lost claim gets a fresh
    /// disk only once it stayed Lost for the confirmation window: a backup restore, for
    /// example, can bring claims back before their volumes.
    pub lost_since: Option<Timestamp>,
}

impl Claim {
    /// metadata.deletionTimestamp is set.
    pub fn terminating(&self) -> bool {
        self.deletion.is_some()
    }
}

/// Result of verifying the live prerequisites against the rendering (filled by the
/// runtime: any difference except filling a field the live object leaves unset).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Infrastructure {
    /// One line per difference; empty when everything matches.
    pub drift: Vec<String>,
}

/// What the runtime's capacity evaluator concluded for this reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CapacitySignal {
    /// The policy's recommendation, when it has one.
    pub recommendation: Option<Recommendation>,
    /// Whether survivors can absorb a removed member's load.
    pub survivors: SurvivorEvidence,
}

/// A capacity recommendation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recommendation {
    /// Members the policy wants.
    pub members: i32,
    /// CamelCase reason (ScaleOutRecommended, WithinThresholds...).
    pub reason: String,
    /// Explanation.
    pub message: String,
    /// The count comes from a manual edit of spec.members, which wins one intent and may
    /// leave [minMembers, maxMembers] (rule K4 does not clamp it).
    pub manual: bool,
}

/// Evidence that the remaining members can take a removed member's load.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum SurvivorEvidence {
    /// No metrics were collected (no collector, or the collection failed).
    #[default]
    Unavailable,
    /// Collected, but it does not show enough headroom (why).
    Insufficient(String),
    /// Every survivor can take the removed member's load.
    Sufficient,
}
