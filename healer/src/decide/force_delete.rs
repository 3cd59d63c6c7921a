//! Rule F1: a member Pod still present `force_delete_margin` after its deletionTimestamp
//! (which already includes its termination grace) sits on a node that never confirmed
//! the kill. It is deleted with grace 0 and a uid precondition; it keeps its disk and
//! returns through the StatefulSet. Every StatefulSet fleet (PersistentFleet and
//! Bucket `Ordered`).

use super::{Ctx, Outcome};
use crate::plan::Action;

/// The first member Pod due for force-deletion, if any; schedules a wake-up for the rest.
pub(crate) fn check(cx: &mut Ctx) -> Option<Outcome> {
    let margin = cx.cfg.force_delete_margin;
    let mut due = None;
    let mut wakes = Vec::new();
    for p in cx.member_list.iter().copied() {
        // A Pod held by a disk handoff is resolved by rules H1-H5 first.
        if p.replacement_finalizer {
            continue;
        }
        let Some(t) = p.deletion else { continue };
        if cx.now >= t + margin {
            if due.is_none() {
                due = Some(p);
            }
        } else {
            wakes.push(t + margin);
        }
    }
    for t in wakes {
        cx.wake_at(t);
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
