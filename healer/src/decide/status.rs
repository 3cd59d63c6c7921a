//! Rules S1-S4 and the status every plan carries.
//!
//! - S1 (steady): every member ready on the current template: `Provisioned`.
//! - S2 (members): a disk rule's note about a down member: `Provisioning`.
//! - S3 (rolling out): `Provisioning` until every replica runs the current template.
//! - S4 (conditions): all four conditions carry the same reason and message; only their
//!   status differs by reason ([`Reason::classes`]). Ready is the workload's own
//!   readiness (ready replicas equal its spec, counted only once it observed its spec),
//!   and never below the policy's floor (`spec.members` by hand, `minMembers` in
//!   Automatic and External): with fewer ready members, Ready is False and its message
//!   starts with the gap.
//!
//! The previous status only keeps transition times (and `blockedSince`) stable; it never
//! changes a decision.

use celld_api::labels::IDENTITY;
use celld_api::{CelldFleetStatus, Condition, MemberStatus};

use super::disk::crash_looping;
use super::{Ctx, Outcome};
use crate::plan::Plan;
use crate::snapshot::{Pod, RecordState, WorkloadKind};
use crate::time::Timestamp;

/// The reason every condition carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Every member ready on the current template.
    Provisioned,
    /// Waiting: growth, contraction, rollout, a member coming back.
    Provisioning,
    /// The healer is writing (one action this reconcile).
    LifecycleProgress,
    /// Waiting for Argo CD or Flux to create the workload.
    WorkloadMissing,
    /// spec.maintenance.paused.
    MaintenancePaused,
    /// Live prerequisites differ from the rendering.
    InfrastructureBlocked,
    /// The workload is not this fleet's.
    LifecycleBlocked,
    /// A claim at a member name belongs to another fleet.
    StorageIdentityConflict,
    /// A member cannot be scheduled and is not being replaced.
    MemberUnschedulable,
    /// A member crash-loops; the healer does not replace its disk.
    MemberCrashLooping,
    /// Contraction waits for evidence that the survivors can take the load.
    CapacityUncertain,
    /// The fleet is being deleted and the healer waits on a step.
    Deleting,
    /// Deletion cannot proceed (the workload is not ours).
    DeletionBlocked,
    /// The fleet is being deleted but `spec.deletionProtection` is on: everything is kept.
    DeletionProtected,
    /// An older fleet carries the same identity; this one gets no action.
    IdentityConflict,
    /// The live spec fails validation; the fleet gets no action but handoff aborts.
    InvalidConfiguration,
    /// The bucket reservation names another identity: no growth or healing.
    StorageScopeConflict,
    /// More than one of the fleet's claims is Lost at once: no disk is replaced until
    /// they recover or an operator accepts the loss (rule R8).
    DisksLost,
    /// The healer's clock is too far from the API server's (or not measured yet): a
    /// destructive write is held (rule T1).
    ClockSkewed,
    /// A member Pod is past its grace on a node that is Ready: its kubelet has not
    /// finished it, and the healer does not force-delete it (rule F2).
    MemberStuckTerminating,
}

impl Reason {
    /// The CamelCase reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Provisioned => "Provisioned",
            Reason::Provisioning => "Provisioning",
            Reason::LifecycleProgress => "LifecycleProgress",
            Reason::WorkloadMissing => "WorkloadMissing",
            Reason::MaintenancePaused => "MaintenancePaused",
            Reason::InfrastructureBlocked => "InfrastructureBlocked",
            Reason::LifecycleBlocked => "LifecycleBlocked",
            Reason::StorageIdentityConflict => "StorageIdentityConflict",
            Reason::MemberUnschedulable => "MemberUnschedulable",
            Reason::MemberCrashLooping => "MemberCrashLooping",
            Reason::CapacityUncertain => "CapacityUncertain",
            Reason::Deleting => "Deleting",
            Reason::DeletionBlocked => "DeletionBlocked",
            Reason::DeletionProtected => "DeletionProtected",
            Reason::IdentityConflict => "IdentityConflict",
            Reason::InvalidConfiguration => "InvalidConfiguration",
            Reason::StorageScopeConflict => "StorageScopeConflict",
            Reason::ClockSkewed => "ClockSkewed",
            Reason::DisksLost => "DisksLost",
            Reason::MemberStuckTerminating => "MemberStuckTerminating",
        }
    }

    /// (Progressing, Blocked, InfrastructureReady) for this reason. A pause is a
    /// deliberate state, not a fault, so it is not Blocked.
    pub fn classes(self) -> (bool, bool, bool) {
        match self {
            Reason::Provisioned => (false, false, true),
            Reason::Provisioning | Reason::LifecycleProgress | Reason::Deleting => {
                (true, false, true)
            }
            Reason::WorkloadMissing => (true, false, false),
            Reason::MaintenancePaused | Reason::CapacityUncertain => (false, false, true),
            Reason::InfrastructureBlocked
            | Reason::LifecycleBlocked
            | Reason::DeletionBlocked
            | Reason::IdentityConflict
            | Reason::InvalidConfiguration
            | Reason::StorageScopeConflict => (false, true, false),
            Reason::DeletionProtected => (false, true, true),
            Reason::StorageIdentityConflict
            | Reason::MemberUnschedulable
            | Reason::MemberCrashLooping
            | Reason::ClockSkewed
            | Reason::DisksLost
            | Reason::MemberStuckTerminating => (false, true, true),
        }
    }
}

pub(crate) fn build(cx: &Ctx, o: Outcome) -> Plan {
    let f = cx.fleet;
    let prev = f.previous_status.as_ref();
    let now = cx.now;
    let w = cx.workload.filter(|w| cx.workload_is_ours(w));
    let ready_n = w.filter(|w| w.observed()).map_or(0, |w| w.ready_replicas);
    // Rule S4's floor: "all 0 of 0 ready" is no Ready fleet, nor is any count below what
    // the policy requires, whatever the workload's own spec says.
    let floor = cx.target.as_ref().map_or(0, |t| t.floor);
    let gap = (!f.deleting && ready_n < floor).then(|| {
        format!(
            "{ready_n} of the {floor} members the fleet requires {} ready. ",
            if ready_n == 1 { "is" } else { "are" }
        )
    });
    let ready =
        gap.is_none() && !f.deleting && w.is_some_and(|w| w.replicas > 0 && ready_n == w.replicas);
    let (progressing, blocked, infra) = o.reason.classes();
    let cond = |type_: &str, on: bool| {
        let status = if on { "True" } else { "False" };
        let since = prev
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
            .filter(|c| c.status == status)
            .map_or_else(|| now.rfc3339(), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: o.reason.as_str().to_string(),
            message: match (&gap, type_) {
                (Some(gap), "Ready") => format!("{gap}{}", o.message),
                _ => o.message.clone(),
            },
            last_transition_time: since,
            observed_generation: Some(f.generation),
        }
    };
    let conditions = vec![
        cond("Ready", ready),
        cond("Progressing", progressing),
        cond("Blocked", blocked),
        cond("InfrastructureReady", infra),
    ];
    let was_blocked = prev
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Blocked"))
        .is_some_and(|c| c.status == "True");
    let blocked_since = blocked.then(|| {
        prev.and_then(|s| s.blocked_since.clone())
            .filter(|_| was_blocked)
            .unwrap_or_else(|| now.rfc3339())
    });
    let target = cx.target.as_ref();
    let status = CelldFleetStatus {
        observed_generation: Some(f.generation),
        conditions,
        desired_members: target.map(|t| t.members),
        applied_members: w.map(|w| w.replicas),
        ready_members: Some(ready_n),
        members: Some(cx.member_list.iter().filter(|p| !p.finished()).count() as i32),
        joining_members: Some(
            cx.member_list
                .iter()
                .filter(|p| !p.finished() && p.deletion.is_none() && !p.is_ready())
                .count() as i32,
        ),
        terminating_members: Some(
            cx.member_list
                .iter()
                .filter(|p| !p.finished() && p.deletion.is_some())
                .count() as i32,
        ),
        label_selector: Some(format!("{IDENTITY}={}", f.identity)),
        blocked_since,
        // The reservation this fleet holds, once the runtime found it with its identity.
        reservation: match &f.reservation {
            Some(r) if r.found.as_ref().is_some_and(|f| f.this_fleet) => Some(r.name.clone()),
            Some(_) => None,
            None => prev.and_then(|s| s.reservation.clone()),
        },
        member_states: member_states(cx),
        // The members' latest answers when the runtime has them, else what the status
        // already said.
        runtime_versions: match &cx.s.application {
            Some(a) => a.versions.clone(),
            None => prev.map(|s| s.runtime_versions.clone()).unwrap_or_default(),
        },
        application: match &cx.s.application {
            Some(a) => Some(a.status.clone()),
            None => prev.and_then(|s| s.application.clone()),
        },
        capacity: target.and_then(|t| t.status.clone()),
    };
    Plan {
        action: o.action,
        rule: o.rule,
        status,
        wake_at: cx.wake,
        event: o.event,
        ignored: cx.ignored.clone(),
    }
}

fn member_states(cx: &Ctx) -> Vec<MemberStatus> {
    let Some(w) = cx.workload else {
        return Vec::new();
    };
    if w.kind == WorkloadKind::Deployment {
        let mut states: Vec<MemberStatus> = cx
            .member_list
            .iter()
            .map(|p| state_of(cx, p.name.clone(), None, Some(p), None))
            .collect();
        states.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        return states;
    }
    // Bounded by the member limit: a hand-scaled workload cannot size the status.
    let applied = (w.replicas.max(0) as usize).min(super::MAX_ORDINAL as usize);
    let n = applied.max(cx.members.len());
    (0..n)
        .filter(|&o| o < applied || cx.member(o).is_some())
        .map(|o| {
            let note = cx.notes.get(o);
            state_of(
                cx,
                fast_member_name(&cx.fleet.name, o),
                Some(o as i32),
                cx.member(o),
                note,
            )
        })
        .collect()
}

fn state_of(
    cx: &Ctx,
    name: String,
    ordinal: Option<i32>,
    p: Option<&Pod>,
    note: Option<&super::MemberNote>,
) -> MemberStatus {
    let (state, since, zone) = match p {
        None => ("Missing", None, None),
        Some(p) => {
            let (s, t): (&str, Option<Timestamp>) =
                if matches!(p.record, Some(RecordState::Valid(_))) {
                    ("Replacing", None)
                } else if let Some(t) = p.deletion {
                    ("Terminating", Some(t))
                } else if p.is_ready() {
                    ("Ready", p.ready.and_then(|r| r.since))
                } else if let Some(u) = &p.unschedulable {
                    ("Unschedulable", Some(u.since.unwrap_or(p.created)))
                } else if let Some(r) = &p.config_wait {
                    let s = if r == "CreateContainerConfigError" {
                        "WaitingForConfig"
                    } else {
                        "WaitingForImage"
                    };
                    (s, Some(p.not_ready_since()))
                } else if crash_looping(p) {
                    ("CrashLooping", Some(p.not_ready_since()))
                } else if p.recovering_seen.is_some() {
                    // Rule R9: it said so itself, and is not counted down meanwhile.
                    ("Recovering", Some(p.not_ready_since()))
                } else if p.ready.is_none() || p.node_name.is_none() {
                    ("Starting", Some(p.created))
                } else {
                    ("Down", Some(p.not_ready_since()))
                };
            (s, t, p.zone.clone())
        }
    };
    let _ = cx;
    MemberStatus {
        name,
        ordinal,
        state: state.to_string(),
        since: since.map(Timestamp::rfc3339),
        replace_at: note.and_then(|n| n.replace_at).map(Timestamp::rfc3339),
        zone,
        message: note.and_then(|n| n.message.clone()),
    }
}

/// `<fleet>-<ordinal>` without the formatting machinery (one per member per call).
fn fast_member_name(fleet: &str, o: usize) -> String {
    let mut digits = [0u8; 20];
    let mut n = o;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut s = String::with_capacity(fleet.len() + 1 + digits.len() - i);
    s.push_str(fleet);
    s.push('-');
    s.extend(digits[i..].iter().map(|&c| c as char));
    s
}
