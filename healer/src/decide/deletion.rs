//! Rules D2-D7: deleting a fleet in order once its CelldFleet has a deletionTimestamp.
//! (D1, adding the finalizer, runs in `decide` itself.)
//!
//! D2 delete the workload in the foreground (members drain on SIGTERM); D3 refuse a
//! workload that is not ours; D4 wait until no member Pod is left (force-deleting one
//! stranded past its grace, rule F1); D5 delete every claim carrying the identity, removed
//! members' included, one per step; D6 wait until they are gone; D7 remove the finalizer.
//! Paused fleets and drifted prerequisites do not stop deletion: it is an explicit intent.

use super::{Ctx, Outcome, Reason, force_delete};
use crate::plan::{Action, ClaimDeletion};

pub(crate) fn run(cx: &mut Ctx) -> Outcome {
    if let Some(w) = cx.workload {
        if !cx.workload_is_ours(w) {
            // Rule D3 (foreign workload).
            return Outcome::report(
                "D3",
                Reason::DeletionBlocked,
                format!(
                    "{} {} is not this fleet's (identity label, owners or kind differ); the healer will not delete it, and keeps the fleet until it is resolved",
                    w.kind.as_str(),
                    w.name
                ),
            );
        }
        if !w.deleting {
            // Rule D2 (workload, foreground).
            return Outcome::act(
                "D2",
                Action::DeleteWorkload {
                    kind: w.kind,
                    name: w.name.clone(),
                    uid: w.uid.clone(),
                    resource_version: w.resource_version.clone(),
                },
                format!(
                    "Deleting {} {}; members drain on SIGTERM",
                    w.kind.as_str(),
                    w.name
                ),
            );
        }
        if w.kind == crate::snapshot::WorkloadKind::StatefulSet
            && let Some(o) = force_delete::check(cx)
        {
            return o;
        }
    }
    // Rule D4 (members gone): Pods of the fleet's workload (any uid) must be gone.
    let identity = cx.fleet.identity.as_str();
    let left = cx
        .s
        .pods
        .iter()
        .filter(|p| {
            p.identity.as_deref() == Some(identity)
                && !p.finished()
                && p.controller.as_ref().is_some_and(|c| {
                    c.name == cx.fleet.name || c.name.starts_with(&format!("{}-", cx.fleet.name))
                })
        })
        .count();
    if cx.workload.is_some() || left > 0 {
        return Outcome::report(
            "D4",
            Reason::Deleting,
            format!(
                "Deleting the fleet: waiting for the workload and its {left} member Pods to go"
            ),
        );
    }
    // Rule D5 (claims): every claim with the identity and no owner, one per step.
    let mut mine: Vec<_> = cx.s.claims.iter().filter(|c| cx.claim_is_ours(c)).collect();
    mine.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(c) = mine.iter().find(|c| !c.terminating()) {
        return Outcome::act(
            "D5",
            Action::DeleteClaim {
                name: c.name.clone(),
                uid: c.uid.clone(),
                resource_version: c.resource_version.clone(),
                purpose: ClaimDeletion::FleetDeletion,
            },
            format!("Deleting the fleet: deleting disk {}", c.name),
        );
    }
    // Rule D6 (claims gone).
    if !mine.is_empty() {
        return Outcome::report(
            "D6",
            Reason::Deleting,
            format!(
                "Deleting the fleet: waiting for {} disks to be released",
                mine.len()
            ),
        );
    }
    // Rule D7 (release).
    if cx.fleet.has_finalizer {
        return Outcome::act(
            "D7",
            Action::RemoveFleetFinalizer {
                uid: cx.fleet.uid.clone(),
                resource_version: cx.fleet.resource_version.clone(),
            },
            "Deleting the fleet: everything is gone; releasing the CelldFleet".into(),
        );
    }
    Outcome::report(
        "D7",
        Reason::Deleting,
        "Deleting the fleet: nothing left to remove".into(),
    )
}
