//! Rules G1-G5: growth. A PersistentFleet grows one run of consecutive ordinals at a
//! time, all on kept disks or all on fresh ones, each run only once the StatefulSet has
//! observed its spec and the scheduler has decided every current member. A Bucket fleet
//! grows in one step.
//!
//! Why runs: the StatefulSet creates every new Pod at once, a Pod reattaching a kept
//! zonal disk is pinned to that zone, and the zone spread counts only Pods already on
//! nodes, so a fresh disk created alongside could take the zone a kept-disk member needs.

use crate::rule::Rule;
use celld_api::Profile;
use celld_api::labels::member_name;

use super::capacity::Target;
use super::{Ctx, Outcome, Reason, Step};
use crate::plan::Action;
use crate::snapshot::Workload;

/// One growth step, or why it waits.
pub(crate) fn step(cx: &mut Ctx, w: &Workload, target: &Target) -> Step {
    let applied = w.replicas.max(0) as usize;
    let goal = target.members as usize;
    if cx.fleet.profile == Profile::PersistentFleet {
        // Rule G1 (foreign claim): another fleet's disk anywhere in [0, target) holds all
        // growth; it is never adopted.
        if let Some(o) = conflict(cx, goal) {
            return Step::Hold(o);
        }
    } else {
        // Rule G2 (Bucket growth): members keep nothing locally; grow in one step.
        return Step::Write(set_replicas(
            cx,
            w,
            goal as i32,
            Rule::G2,
            format!("Growing from {applied} to {goal} members"),
        ));
    }
    let kept = |o: usize| cx.own_claim(o).is_some_and(|c| !c.terminating());
    let first_kept = kept(applied);
    let mut end = applied + 1;
    while end < goal && kept(end) == first_kept {
        end += 1;
    }
    let adding = describe_run(&cx.fleet.name, applied, end, first_kept);
    // Rule G3 (observed spec): the StatefulSet must have seen its current spec.
    if !w.observed() {
        return Step::Hold(Outcome::report(
            Rule::G3,
            Reason::Provisioning,
            format!("Waiting for the StatefulSet to observe its spec before {adding}"),
        ));
    }
    // Rule G4 (scheduler decided): every current member's Pod is on a node or was found
    // unschedulable; a missing, terminating or untried Pod holds the run back.
    for o in 0..applied {
        let decided = cx.member(o).is_some_and(|p| p.schedule_decided());
        if !decided {
            return Step::Hold(Outcome::report(
                Rule::G4,
                Reason::Provisioning,
                format!(
                    "Waiting for the scheduler to place member {}, or find no node for it, before {adding}",
                    member_name(&cx.fleet.name, o as u32)
                ),
            ));
        }
    }
    // Rule G5 (one run): write the end of the run.
    Step::Write(set_replicas(
        cx,
        w,
        end as i32,
        Rule::G5,
        format!("Growing: {adding}"),
    ))
}

/// Rule G1 for members already in place: a foreign claim under [0, replicas) is reported
/// (the StatefulSet may have bound it before the healer saw it), never touched.
pub(crate) fn conflict_in_use(cx: &Ctx, w: &Workload) -> Option<Outcome> {
    if cx.fleet.profile != Profile::PersistentFleet {
        return None;
    }
    conflict(cx, w.replicas.max(0) as usize)
}

fn conflict(cx: &Ctx, upto: usize) -> Option<Outcome> {
    (0..upto).find_map(|o| {
        let c = cx.claim_at(o)?;
        (c.identity.as_deref() != Some(cx.fleet.identity.as_str())).then(|| {
            Outcome::report(
                Rule::G1,
                Reason::StorageIdentityConflict,
                format!(
                    "Claim {} exists without this fleet's identity label: it is another fleet's disk, so the healer will not grow onto it",
                    c.name
                ),
            )
        })
    })
}

fn describe_run(fleet: &str, start: usize, end: usize, kept: bool) -> String {
    let first = member_name(fleet, start as u32);
    if end == start + 1 {
        if kept {
            format!("adding member {first} on its kept disk")
        } else {
            format!("adding member {first} on a fresh disk")
        }
    } else {
        let last = member_name(fleet, end as u32 - 1);
        if kept {
            format!("adding members {first} to {last} on their kept disks")
        } else {
            format!("adding members {first} to {last} on fresh disks")
        }
    }
}

pub(crate) fn set_replicas(
    _cx: &Ctx,
    w: &Workload,
    replicas: i32,
    rule: Rule,
    message: String,
) -> Outcome {
    Outcome::act(
        rule,
        Action::SetReplicas {
            kind: w.kind,
            name: w.name.clone(),
            uid: w.uid.clone(),
            resource_version: w.resource_version.clone(),
            from: w.replicas,
            replicas,
        },
        message,
    )
}
