//! Rules H1-H5: resolving a disk handoff found on a Pod. They run before every gate, so a
//! restarted healer settles what a previous one left from the cluster alone:
//!
//! - H1 (interrupted prepare): a record without `committed` means the guarded Pod delete
//!   was never acknowledged to the healer that prepared it (crash, lost response, or
//!   someone else deleted the Pod): abort and keep the disk.
//! - H2 (lifecycle changed): the fleet paused, deleting, sharing its identity with an
//!   older fleet or invalid, the StatefulSet gone, deleting or replaced, the Pod's owner
//!   or identity changed: abort without deleting anything.
//! - H3 (finish): a committed record on a terminating, held Pod whose claim still has the
//!   recorded uid and resourceVersion: delete the claim with both as preconditions.
//! - H4 (release): the claim is deleting or gone: remove the hold.
//! - H5 (malformed or stray): a record that cannot be read, names another fleet, is
//!   committed on a live Pod, or markers without a record: abort.
//! - H6 (still justified): before H3 deletes the claim, the facts of the rule that started
//!   the handoff (recorded in it) hold again on the fresh read that confirms the delete:
//!   for a lost disk (R2), the claim is still Lost and no other claim is (R8); for a
//!   member down too long (R3), every other member is ready. Otherwise abort, keeping
//!   the disk: a second member down between the decision and the last step must not cost
//!   a disk.
//!
//! A status edit, a missing Pod or a missing object never leads to a claim deletion here:
//! only a committed record on a held, terminating Pod does.

use crate::rule::Rule;
use celld_api::labels::{CLAIM_TEMPLATE, member_name, member_ordinal};

use super::{Ctx, Outcome};
use crate::plan::{Action, ClaimDeletion};
use crate::record::{HandoffCause, HandoffRecord};
use crate::snapshot::{Claim, ClaimPhase, Pod, RecordState, WorkloadKind};

/// Resolves the first Pod (by name) carrying any of the healer's handoff markers. Only
/// this fleet's member names (`<fleet>-<n>`) are considered: another fleet with the same
/// identity resolves its own handoffs, and neither aborts the other's.
pub(crate) fn resolve(cx: &mut Ctx) -> Option<Outcome> {
    let identity = cx.fleet.identity.as_str();
    let pod =
        cx.s.pods
            .iter()
            .filter(|p| cx.member_named(p))
            .filter(|p| {
                p.replacement_index.as_deref() == Some(identity)
                    || ((p.replacement_finalizer || p.record.is_some())
                        && p.identity.as_deref() == Some(identity))
            })
            .min_by(|a, b| a.name.cmp(&b.name))?;
    Some(resolve_one(cx, pod))
}

fn abort(rule: Rule, p: &Pod, why: String) -> Outcome {
    Outcome::act(
        rule,
        Action::AbortHandoff {
            name: p.name.clone(),
            uid: p.uid.clone(),
            resource_version: p.resource_version.clone(),
            why: why.clone(),
        },
        format!(
            "Abandoning the disk replacement of {} and keeping its disk: {why}",
            p.name
        ),
    )
}

fn release(p: &Pod, why: &str) -> Outcome {
    Outcome::act(
        Rule::H4,
        Action::ReleaseHandoff {
            name: p.name.clone(),
            uid: p.uid.clone(),
            resource_version: p.resource_version.clone(),
        },
        format!("Finishing the disk replacement of {}: {why}", p.name),
    )
}

/// Rule H6: why the facts that started this handoff no longer hold, if they do not.
fn unjustified(cx: &Ctx, p: &Pod, rec: &HandoffRecord, c: &Claim) -> Option<String> {
    let lost = |c: &&Claim| c.phase == ClaimPhase::Lost && !c.terminating();
    let n = cx.workload.map_or(0, |w| w.replicas.max(0) as usize);
    let own = member_ordinal(&cx.fleet.name, &p.name).map(|o| o as usize);
    match rec.cause {
        Some(HandoffCause::LostDisk) => {
            if c.phase != ClaimPhase::Lost {
                return Some(format!(
                    "its claim {} is no longer Lost, so its disk may be whole",
                    c.name
                ));
            }
            let others: Vec<&str> = (0..n)
                .filter(|&o| Some(o) != own)
                .filter_map(|o| cx.own_claim(o))
                .filter(lost)
                .filter(|o| !cx.fleet.accepted_disk_loss.contains(&o.uid))
                .map(|o| o.name.as_str())
                .collect();
            (!others.is_empty()).then(|| {
                format!(
                    "claim {} is Lost too, and several disks lost at once are held (rule R8)",
                    others.join(", ")
                )
            })
        }
        // A record from before H6: a Lost claim is a lost disk; otherwise a member
        // down too long.
        None if c.phase == ClaimPhase::Lost => None,
        Some(HandoffCause::DownTooLong) | None => (0..n)
            .filter(|&o| Some(o) != own)
            .find(|&o| !cx.member(o).is_some_and(|q| !q.terminating() && q.is_ready()))
            .map(|o| {
                format!(
                    "member {} went down too since the decision; no disk is replaced while more than one member is down",
                    member_name(&cx.fleet.name, o as u32)
                )
            }),
    }
}

fn resolve_one(cx: &Ctx, p: &Pod) -> Outcome {
    let f = cx.fleet;
    // Rule H5 (malformed or stray markers).
    let rec = match &p.record {
        Some(RecordState::Valid(r)) => r,
        Some(RecordState::Malformed(e)) => {
            return abort(
                Rule::H5,
                p,
                format!("its replacement record is unreadable ({e})"),
            );
        }
        None => {
            return abort(
                Rule::H5,
                p,
                "it carries replacement markers without a record".into(),
            );
        }
    };
    if rec.identity != f.identity || p.identity.as_deref() != Some(f.identity.as_str()) {
        return abort(
            Rule::H5,
            p,
            "the record or the Pod belongs to another fleet".into(),
        );
    }
    if !p.replacement_finalizer {
        return abort(Rule::H5, p, "the record holds no finalizer".into());
    }
    // Rule H2 (lifecycle changed).
    if let Some(why) = cx.restricted() {
        return abort(Rule::H2, p, format!("the fleet gets no action: {why}"));
    }
    if f.deleting {
        return abort(Rule::H2, p, "the fleet is being deleted".into());
    }
    if f.paused {
        return abort(Rule::H2, p, "the fleet is paused".into());
    }
    let owner_ok = match (cx.workload, &p.controller) {
        (Some(w), Some(c)) => {
            cx.workload_is_ours(w)
                && !w.deleting
                && w.kind == WorkloadKind::StatefulSet
                && c.kind == "StatefulSet"
                && c.name == f.name
                && c.uid == w.uid
        }
        _ => false,
    };
    if !owner_ok {
        return abort(
            Rule::H2,
            p,
            "its StatefulSet is gone, deleting, not this fleet's, or no longer controls it".into(),
        );
    }
    // Rule H1 (interrupted prepare).
    if !rec.committed {
        return abort(
            Rule::H1,
            p,
            "it was interrupted before its guarded Pod delete was acknowledged".into(),
        );
    }
    if !p.terminating() {
        return abort(
            Rule::H5,
            p,
            "a committed record on a Pod that is not deleting is invalid".into(),
        );
    }
    // Rules H3/H4: the claim recorded at commit time.
    let claim_name = format!("{CLAIM_TEMPLATE}-{}", p.name);
    let claim = cx.s.claims.iter().find(|c| c.name == claim_name);
    match claim {
        None => release(p, "its old claim is gone"),
        Some(c) if c.uid != rec.claim_uid => abort(
            Rule::H4,
            p,
            format!("claim {claim_name} was recreated since the decision; the new one is kept"),
        ),
        Some(c) if !cx.claim_is_ours(c) => abort(
            Rule::H4,
            p,
            format!("claim {claim_name} no longer carries this fleet's identity"),
        ),
        Some(c) if c.terminating() => release(p, "its old claim is being deleted"),
        Some(c) if c.resource_version != rec.claim_resource_version => abort(
            Rule::H4,
            p,
            format!("claim {claim_name} changed since the decision (it may have been repaired)"),
        ),
        // Rule H6 (still justified), on the fresh read that confirms H3.
        Some(c)
            if let Some(why) = unjustified(cx, p, rec, c).filter(|_| super::mutation::on("H6")) =>
        {
            abort(Rule::H6, p, why)
        }
        // Rule H3 (finish): delete the old disk, exactly as recorded.
        Some(c) => Outcome::act(
            Rule::H3,
            Action::DeleteClaim {
                name: c.name.clone(),
                uid: c.uid.clone(),
                resource_version: c.resource_version.clone(),
                purpose: ClaimDeletion::Handoff {
                    pod: p.name.clone(),
                },
            },
            format!(
                "Replacing member {}: deleting its old disk {}",
                p.name, c.name
            ),
        ),
    }
}
