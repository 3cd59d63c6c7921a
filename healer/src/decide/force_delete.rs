//! Rule F1: a member Pod still present `force_delete_margin` after its deletionTimestamp
//! (which already includes its termination grace) sits on a node that never confirmed
//! the kill. It is deleted with grace 0 and a uid precondition; it keeps its disk and
//! returns through the StatefulSet. Every StatefulSet fleet (PersistentFleet and
//! Bucket `Ordered`). A Pod still present after a force delete is held by someone else's
//! finalizer: it is reported (rule S2) and skipped, so later rules keep running.

use super::{Ctx, Outcome};
use crate::plan::Action;

/// The first member Pod due for force-deletion, if any; schedules a wake-up for the rest.
pub(crate) fn check(cx: &mut Ctx) -> Option<Outcome> {
    let margin = cx.cfg.force_delete_margin;
    let mut due = None;
    let mut wakes = Vec::new();
    let mut held = Vec::new();
    let mut retrying = Vec::new();
    for p in cx.member_list.iter().copied() {
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
    if let Some(h) = held.first() {
        let who = if h.other_finalizers.is_empty() {
            "a finalizer".to_string()
        } else {
            format!("finalizer {}", h.other_finalizers.join(", "))
        };
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
            "F1",
            Action::ForceDeletePod {
                name: p.name.clone(),
                uid: p.uid.clone(),
            },
            format!("Force-deleting Pod {} stranded past its grace", p.name),
        )
        .with_event("Warning", "MemberForceDeleted", message),
    )
}
