//! Rules D2-D7: deleting a fleet in order once its CelldFleet has a deletionTimestamp.
//! (D1, adding the finalizer, runs in `decide` itself.)
//!
//! D8 keep everything while `spec.deletionProtection` is on (`DeletionProtected`); D2
//! delete the workload in the foreground (members drain on SIGTERM); D3 refuse a
//! workload that is not ours; D4 wait until no member Pod is left, orphaned ones
//! included (force-deleting one stranded past its grace, rule F1); D5 delete every claim
//! of the fleet (`data-<fleet>-<n>` with its identity), removed members' included, one per
//! step; D6 wait until they are gone; D7 remove the finalizer.
//! Paused fleets and drifted prerequisites do not stop deletion: it is an explicit intent.

use super::{Ctx, Outcome, Reason, force_delete};
use crate::plan::{Action, ClaimDeletion};
use crate::rule::Rule;

pub(crate) fn run(cx: &mut Ctx) -> Outcome {
    // Rule D8 (deletion protection): a protected fleet keeps its workload and every disk;
    // the admission policy normally refuses the delete, this covers clusters without it.
    if cx.fleet.deletion_protected && super::mutation::on("D8") {
        return Outcome::report(
            Rule::D8,
            Reason::DeletionProtected,
            "The CelldFleet is being deleted but spec.deletionProtection is on: the healer keeps its workload and every disk. To delete the fleet and its disks on purpose, set spec.deletionProtection: false".into(),
        );
    }
    if let Some(w) = cx.workload {
        if !cx.workload_is_ours(w) {
            // Rule D3 (foreign workload).
            return Outcome::report(
                Rule::D3,
                Reason::DeletionBlocked,
                format!(
                    "{} {} is not this fleet's (identity label, owners or kind differ); the healer will not delete it, and keeps the fleet until it is resolved",
                    w.kind.as_str(),
                    w.name
                ),
            );
        }
        // Rule W5 (claim retention) in deletion: deleting a set whose retention policy
        // deletes claims when it is deleted hands every disk to the garbage collector at
        // once, before the members have drained. Held until that field is Retain again
        // (`whenScaled` does nothing on deletion).
        if !w.deleting && w.claim_retention.when_deleted.is_some() && super::mutation::on("W5") {
            return Outcome::report(
                Rule::W5,
                Reason::DeletionBlocked,
                format!(
                    "{} {} has persistentVolumeClaimRetentionPolicy {}, which deletes disks outside the deletion order; restore Retain (the rendering's) to let the deletion go on",
                    w.kind.as_str(),
                    w.name,
                    w.claim_retention.describe()
                ),
            );
        }
        if !w.deleting {
            // Rule D2 (workload, foreground).
            return Outcome::act(
                Rule::D2,
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
    // Rule D4 (members gone): Pods of the fleet's workload (any uid) must be gone, and
    // so must Pods at its member names that nobody controls any more (orphaned by
    // `--cascade=orphan`): they may still be using a disk.
    let identity = cx.fleet.identity.as_str();
    let prefix = format!("{}-", cx.fleet.name);
    let left: Vec<&crate::snapshot::Pod> =
        cx.s.pods
            .iter()
            .filter(|p| {
                p.identity.as_deref() == Some(identity)
                    && !p.finished()
                    && match &p.controller {
                        // A Deployment's Pods may still name their ReplicaSet
                        // `<fleet>-<hash>`; a StatefulSet's only the set itself.
                        // (`<fleet>-<hash>`: a fleet named `<fleet>-x` that shares the
                        // identity has ReplicaSets `<fleet>-x-<hash>`, not ours.)
                        Some(c) => {
                            c.name == cx.fleet.name
                                || (c.kind == "ReplicaSet"
                                    && c.name
                                        .strip_prefix(&prefix)
                                        .is_some_and(|h| !h.is_empty() && !h.contains('-')))
                        }
                        // An orphaned Deployment Pod is `<fleet>-<hash>-<suffix>`.
                        None => {
                            cx.member_named(p)
                                || (!cx.fleet.stateful_set
                                    && p.name
                                        .strip_prefix(&prefix)
                                        .is_some_and(|r| r.matches('-').count() == 1))
                        }
                    }
            })
            .collect();
    // Rule F1 for orphans: an orphaned member whose deletion its node can never finish
    // (the node is gone or unreachable past the margin) would hold the deletion forever;
    // it is force-deleted by the same rule as a member, and one stuck on a live node is
    // reported the same way.
    let orphans: Vec<&crate::snapshot::Pod> = left
        .iter()
        .copied()
        .filter(|p| p.controller.is_none())
        .collect();
    if !orphans.is_empty()
        && let Some(o) = force_delete::check_among(cx, &orphans)
    {
        return o;
    }
    if cx.workload.is_some() || !left.is_empty() {
        let mut message = format!(
            "Deleting the fleet: waiting for the workload and its {} member Pods to go",
            left.len()
        );
        if !orphans.is_empty() {
            let names: Vec<&str> = orphans.iter().map(|p| p.name.as_str()).collect();
            message.push_str(&format!(
                " ({} orphaned by their workload: {}; delete them, the healer force-deletes one its node cannot finish)",
                orphans.len(),
                names.join(", ")
            ));
        }
        if let Some(note) = &cx.held_note {
            message.push_str(&format!(". {note}"));
        }
        return Outcome::report(Rule::D4, Reason::Deleting, message);
    }
    // Rule W6 (owned claim) in deletion: a claim of the fleet that something owns is
    // reported, not skipped: its fate is its owner's.
    if let Some(o) = super::owned_claim(cx).filter(|_| super::mutation::on("W6")) {
        return o;
    }
    // Rule D5 (claims): every claim of this fleet, removed members' included: named
    // `data-<fleet>-<n>`, with the identity and no owner, one per step. A claim with the
    // identity under another name is another fleet's (a copied fleet file).
    let mut mine: Vec<_> = cx
        .claims
        .iter()
        .flatten()
        .copied()
        .filter(|c| cx.claim_is_ours(c))
        .collect();
    mine.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(c) = mine.iter().find(|c| !c.terminating()) {
        return Outcome::act(
            Rule::D5,
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
            Rule::D6,
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
            Rule::D7,
            Action::RemoveFleetFinalizer {
                uid: cx.fleet.uid.clone(),
                resource_version: cx.fleet.resource_version.clone(),
            },
            "Deleting the fleet: everything is gone; releasing the CelldFleet".into(),
        );
    }
    Outcome::report(
        Rule::D7,
        Reason::Deleting,
        "Deleting the fleet: nothing left to remove".into(),
    )
}
