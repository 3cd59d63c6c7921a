//! Rule F1: a member Pod still present `force_delete_margin` after its deletionTimestamp
//! (which already includes its termination grace) sits on a node that never confirmed
//! the kill. It is deleted with grace 0 and a uid precondition; it keeps its disk and
//! returns through the StatefulSet.
//!
//! Only a Pod that is really stranded (rule F2): bound to no node, on a node that is
//! gone, or on one the healer has seen NotReady or Unknown for the margin itself. A Pod
//! past its grace on a Ready node is stuck, not stranded (a hung container, a stuck
//! unmount): its process may still hold the disk, and a same-name replacement would
//! mount it beside it. It is reported (`MemberStuckTerminating`) and left to a person.
//! A node the healer cannot see (its node watch not listed) is not taken for
//! unreachable. Every StatefulSet fleet (PersistentFleet and
//! Bucket `Ordered`). A Pod still present after a force delete is held by someone else's
//! finalizer: it is reported (rule S2) and skipped, so later rules keep running.

use super::{Ctx, Outcome};
use crate::plan::Action;
use crate::rule::Rule;
use crate::snapshot::{NodeState, Pod};

/// Why a Pod past its deadline is not force-deleted (yet).
enum NotStranded {
    /// Its node is Ready: its kubelet can still finish it.
    Ready,
    /// Its node has been seen unreachable for less than the margin: due then.
    UnreachableTooShort,
    /// The healer does not know its node's state.
    Unknown,
}

/// Rule F2: whether a Pod past its deadline is stranded (its node cannot finish it).
fn stranded(p: &Pod, cx: &Ctx) -> Result<(), (NotStranded, Option<crate::time::Timestamp>)> {
    if !super::mutation::on("F2") {
        return Ok(());
    }
    match p.node {
        NodeState::Unbound | NodeState::Gone => Ok(()),
        NodeState::Unreachable { since, .. } => {
            // Not observed yet counts as seen only now (a restart or a new leader
            // times the node again: at most one margin more).
            let at = since.unwrap_or(cx.now) + cx.cfg.force_delete_margin;
            if cx.now >= at {
                Ok(())
            } else {
                Err((NotStranded::UnreachableTooShort, Some(at)))
            }
        }
        NodeState::Ready => Err((NotStranded::Ready, None)),
        NodeState::Unknown => Err((NotStranded::Unknown, None)),
    }
}

/// The first member Pod due for force-deletion, if any; schedules a wake-up for the rest.
pub(crate) fn check(cx: &mut Ctx) -> Option<Outcome> {
    let members = cx.member_list.clone();
    check_among(cx, &members)
}

/// Rule F1 over `pods`: the workload's members, or (in deletion, rule D4) the fleet's
/// orphaned member Pods, which no controller finishes once their node is gone.
pub(crate) fn check_among<'a>(cx: &mut Ctx<'a>, pods: &[&'a Pod]) -> Option<Outcome> {
    let margin = cx.cfg.force_delete_margin;
    let mut due = None;
    let mut wakes = Vec::new();
    let mut held = Vec::new();
    let mut retrying = Vec::new();
    let mut stuck = Vec::new();
    for p in pods.iter().copied() {
        // A Pod held by a disk handoff is resolved by rules H1-H5 first.
        if p.replacement_finalizer {
            continue;
        }
        // Force-deleted already and still here: someone else's finalizer holds it.
        // Another force delete would change nothing, and retrying it would starve every
        // later rule, so it is reported and left to whoever owns the finalizer.
        if p.force_deleted && p.deletion.is_some() {
            held.push(p);
            continue;
        }
        // A force delete that failed is retried on the runtime's back-off; meanwhile the
        // later rules run.
        if let Some(t) = p.force_delete_retry_at.filter(|t| *t > cx.now) {
            wakes.push(t);
            retrying.push((p, t));
            continue;
        }
        let Some(t) = p.deletion else { continue };
        if cx.now >= t + margin {
            if let Err((why, at)) = stranded(p, cx) {
                if let Some(at) = at {
                    wakes.push(at);
                }
                stuck.push((p, why));
                continue;
            }
            // The first by name, whatever order the snapshot came in: the decision on
            // the caches and the one on the fresh read must pick the same Pod.
            if due.is_none_or(|d: &crate::snapshot::Pod| p.name < d.name) {
                due = Some(p);
            }
        } else {
            wakes.push(t + margin);
        }
    }
    for t in wakes {
        cx.wake_at(t);
    }
    if let Some((p, t)) = retrying.first() {
        cx.held_note = Some(format!(
            "Force-deleting Pod {} failed; it is tried again at {}",
            p.name,
            t.rfc3339()
        ));
    }
    // A Pod stuck on a live node needs a person: it is the one reported, before one
    // that only waits for its node's margin or for the nodes watch.
    if let Some((p, why)) = stuck
        .iter()
        .min_by_key(|(p, why)| (!matches!(why, NotStranded::Ready), p.name.as_str()))
    {
        let node = p.node_name.as_deref().unwrap_or("?");
        let since = p.deletion.map(|t| t.rfc3339()).unwrap_or_default();
        let note = match why {
            NotStranded::Ready => format!(
                "Pod {} is stuck terminating (its grace ended at {since}) on node {node}, whose kubelet is up (Ready True or False, not Unknown): it has not finished the Pod (a hung container or a stuck unmount), and its process may still hold the disk, so the healer does not force-delete it. Find out why on the node; `kubectl delete pod {} --grace-period=0 --force` once it is safe",
                p.name, p.name
            ),
            NotStranded::UnreachableTooShort => format!(
                "Pod {} is past its grace (ended at {since}) on node {node}, whose kubelet is unreachable (Ready Unknown): it is force-deleted once the node stayed so for the margin",
                p.name
            ),
            NotStranded::Unknown => format!(
                "Pod {} is past its grace (ended at {since}) on node {node}, whose state the healer cannot see (its nodes watch has not listed or has failed, or the node reports no Ready condition): it is not force-deleted until the node is seen unreachable or gone",
                p.name
            ),
        };
        cx.stuck = matches!(why, NotStranded::Ready);
        cx.held_note = Some(note);
    }
    if let Some(h) = held.first() {
        let who = if h.other_finalizers.is_empty() {
            "a finalizer".to_string()
        } else {
            format!("finalizer {}", h.other_finalizers.join(", "))
        };
        cx.stuck = false;
        cx.held_note = Some(format!(
            "Pod {} was force-deleted but {who} keeps it; the member returns once its owner releases it",
            h.name
        ));
    }
    let p = due?;
    let message = format!(
        "Force-deleted Pod {}: its grace ended at {} and its node never confirmed termination; the member returns on its own disk",
        p.name,
        p.deletion.map(|t| t.rfc3339()).unwrap_or_default()
    );
    Some(
        Outcome::act(
            Rule::F1,
            Action::ForceDeletePod {
                name: p.name.clone(),
                uid: p.uid.clone(),
            },
            format!("Force-deleting Pod {} stranded past its grace", p.name),
        )
        .with_event("Warning", "MemberForceDeleted", message),
    )
}
