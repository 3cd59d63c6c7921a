//! Making the writes a pass decided: one write ([`Writing::one`]) or a fleet's due force
//! deletes together ([`Writing::force_deletes`]), each with its metrics and log, and an
//! Event (one for a batch of force deletes, naming each Pod),
//! and what the pass does next as the writes went ([`Executed`], [`AfterBatch`]).
//!
//! Nothing here decides whether to write: the write is `decide`'s, confirmed on a fresh
//! read where it destroys anything ([`super::confirmation`]); [`super::act`] makes it
//! with its preconditions.

use std::sync::Arc;

use celld_api::CelldFleet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use tracing::{info, warn};

use super::act::{self, ActError, Actor};
use super::context::{ReconcileError, Reconciler};
use super::schedule::{AFTER_BACK_OFF, AFTER_CONFLICT, FORCE_DELETE_RETRY};
use crate::plan::{Action, Plan};
use crate::time::{Span, Timestamp};

/// At most this many of a fleet's force deletes are on the wire at once.
const AT_ONCE: usize = 8;

/// What every write of one pass over a fleet shares.
pub(super) struct Writing<'a> {
    pub(super) ctx: &'a Arc<Reconciler>,
    pub(super) key: &'a ObjectRef<CelldFleet>,
    /// The CelldFleet the plan was made from (the fresh one after a fresh read).
    pub(super) fleet: &'a Arc<CelldFleet>,
    /// The wake-up the fleet asked for before this pass (for the deadline lag metric).
    pub(super) due: Option<Timestamp>,
    /// The time the plan was made for.
    pub(super) now: Timestamp,
}

/// What making a write concluded, when it did not fail the reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Executed {
    /// Made; the pass goes on to the status.
    Made,
    /// A Pod was force-deleted: decide again at once.
    ForceDeleted,
    /// Not made: a precondition failed (the object changed or went since it was read).
    Conflict,
    /// Not made: the leader gate refused it.
    TurnedAway,
    /// Not made: a force delete failed and waits out its back-off.
    BackOff,
}

/// What follows a batch of force deletes sent at once.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AfterBatch {
    /// The leader gate refused a write: as for any write it refuses.
    TurnedAway,
    /// A Pod was force-deleted: decide again at once, as after one alone.
    Again,
    /// Nothing was deleted: look again after this long.
    Wait(std::time::Duration),
}

/// What follows a batch, from how each of its writes went: a write the gate refused
/// stops the fleet; any delete made decides again at once; otherwise a failed delete
/// (waiting out its back-off) or writes all refused by their preconditions wait, as one
/// alone would.
fn after_batch(outcomes: &[Executed]) -> AfterBatch {
    if outcomes.contains(&Executed::TurnedAway) {
        AfterBatch::TurnedAway
    } else if outcomes.contains(&Executed::ForceDeleted) {
        AfterBatch::Again
    } else if outcomes.contains(&Executed::BackOff) {
        AfterBatch::Wait(AFTER_BACK_OFF)
    } else {
        AfterBatch::Wait(AFTER_CONFLICT)
    }
}

impl Writing<'_> {
    /// Sends a fleet's due force deletes at once: `first`, confirmed on a fresh read, and
    /// `rest`, decided on that read after it (`crate::confirm::batch`). Each is made,
    /// refused or failed on its own (a failed one waits out its back-off, as alone);
    /// then the fleet is decided again from the caches, which read the deletes made as
    /// made (`snapshot_of`).
    pub(super) async fn force_deletes(
        &self,
        plan: &Plan,
        first: &Action,
        rest: &[Plan],
    ) -> Result<AfterBatch, ReconcileError> {
        use futures::StreamExt as _;
        let mut writes = vec![(plan, first)];
        for p in rest {
            if let Some(a) = &p.action {
                writes.push((p, a));
            }
        }
        // Built first, then polled at most `AT_ONCE` at a time, results in order. The
        // batch's deletes made share one Event (below), not one each.
        let sends: Vec<_> = writes
            .iter()
            .map(|(p, a)| self.send(p, a, None, false))
            .collect();
        let results: Vec<Result<Executed, ReconcileError>> = futures::stream::iter(sends)
            .buffered(AT_ONCE)
            .collect()
            .await;
        let mut outcomes = Vec::with_capacity(results.len());
        let mut error = None;
        let mut notes = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(e) => {
                    if e == Executed::ForceDeleted {
                        if i > 0 {
                            self.ctx.metrics.force_deletes_ridden.inc();
                        }
                        let (p, a) = writes[i];
                        notes.push(super::events::action_note(p, a));
                    }
                    outcomes.push(e);
                }
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        if !notes.is_empty() {
            let (events, f) = (self.ctx.events.clone(), self.fleet.clone());
            tokio::spawn(async move { events.publish_joined(&f, notes).await });
        }
        match error {
            Some(e) => Err(e),
            None => Ok(after_batch(&outcomes)),
        }
    }

    /// Makes the write `action` of `plan`, with its metrics, log and Event. `pod` is the
    /// Pod a handoff step writes to (the fresh read's, else the cache's; none in a batch
    /// of force deletes).
    pub(super) async fn one(
        &self,
        plan: &Plan,
        action: &Action,
        pod: Option<Arc<Pod>>,
    ) -> Result<Executed, ReconcileError> {
        self.send(plan, action, pod, true).await
    }

    /// [`Writing::one`], with its Event recorded here (`event`) or left to the caller.
    async fn send(
        &self,
        plan: &Plan,
        action: &Action,
        pod: Option<Arc<Pod>>,
        event: bool,
    ) -> Result<Executed, ReconcileError> {
        let Writing {
            ctx,
            key,
            fleet,
            due,
            now,
        } = *self;
        let kind = action.kind();
        let actor = Actor {
            client: &ctx.client,
            fleet,
            pod,
            gate: &ctx.gate,
            halt_after: ctx.halt_after,
        };
        match actor.execute(action).await {
            Ok(written) => {
                if let act::Written::TookOver(owners) = &written {
                    info!(fleet = %key, rule = %plan.rule, action = kind, %owners, "spec.replicas taken over from co-owners holding its live value");
                }
                ctx.metrics.action(
                    kind,
                    match written {
                        act::Written::Plain => "ok",
                        act::Written::TookOver(_) => "taken_over",
                    },
                );
                ctx.metrics.reconcile("acted");
                let after = super::context::now();
                if let Some(due) = due.filter(|d| *d <= after) {
                    ctx.metrics
                        .deadline_lag_seconds
                        .observe((after - due).millis() as f64 / 1000.0);
                }
                info!(
                    fleet = %key, rule = %plan.rule, action = kind, detail = ?action,
                    deadline = due.map(|d| d.rfc3339()),
                    "acted"
                );
                // The Event does not hold up the fleet's next write (it never fails a
                // reconcile either).
                if event {
                    let (events, f, p, a) = (
                        ctx.events.clone(),
                        fleet.clone(),
                        plan.clone(),
                        action.clone(),
                    );
                    tokio::spawn(async move { events.record_action(&f, &p, &a).await });
                }
                let force_deleted = matches!(action, Action::ForceDeletePod { .. });
                ctx.memory.fleet(key, |f| {
                    f.failures = 0;
                    if force_deleted {
                        f.force_deleted_at = Some(std::time::Instant::now());
                    }
                });
                if let Action::ForceDeletePod { uid, .. } = action {
                    ctx.memory
                        .force_retry
                        .lock()
                        .expect("force retry")
                        .remove(uid);
                    // Until the Pod cache shows the delete, the caches are read as the
                    // API server now has the Pod (`snapshot_of`).
                    ctx.memory
                        .force_deleted
                        .lock()
                        .expect("force deleted")
                        .insert(uid.clone(), now);
                    return Ok(Executed::ForceDeleted);
                }
                Ok(Executed::Made)
            }
            Err(ActError::NotLeader) => {
                ctx.metrics.action(kind, "not_leader");
                ctx.metrics.reconcile("standby");
                Ok(Executed::TurnedAway)
            }
            Err(e @ ActError::Conflict(_)) => {
                ctx.metrics.action(kind, e.outcome());
                ctx.metrics.reconcile("conflict");
                info!(fleet = %key, rule = %plan.rule, action = kind, error = %e, "precondition failed; looking again");
                Ok(Executed::Conflict)
            }
            Err(e) if matches!(action, Action::ForceDeletePod { .. }) => {
                // Rule F1 must not starve the fleet's later rules: the Pod waits out a
                // back-off (`FORCE_DELETE_RETRY`) and the fleet is looked at again now.
                ctx.metrics.action(kind, e.outcome());
                ctx.metrics.reconcile("error");
                ctx.metrics.error("api");
                if let Action::ForceDeletePod { uid, name } = action {
                    let mut m = ctx.memory.force_retry.lock().expect("force retry");
                    let n = m.get(uid).map_or(0, |(n, _)| *n).saturating_add(1);
                    let wait = FORCE_DELETE_RETRY.after(n);
                    let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
                    m.insert(uid.clone(), (n, now + Span(wait_ms)));
                    warn!(fleet = %key, pod = %name, error = %e, retry_in_ms = wait_ms, "force delete failed; retried on a back-off");
                }
                Ok(Executed::BackOff)
            }
            Err(e) => {
                ctx.metrics.action(kind, e.outcome());
                ctx.metrics.reconcile("error");
                ctx.metrics.error("api");
                if let ActError::ManagerConflict(m) = &e {
                    ctx.events
                        .publish(
                            fleet,
                            true,
                            "ReplicasOwnedElsewhere",
                            kind,
                            format!("The healer did not change spec.replicas: a field manager other than the GitOps engines owns it ({m}). Stop that writer (a kubectl scale, or replicas applied by hand) so the healer can own the field."),
                        )
                        .await;
                }
                Err(ReconcileError::Act {
                    action: kind,
                    source: e,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch goes on as its writes went: the gate refusing one stops the fleet, a
    /// delete made decides again at once, and otherwise it waits as one write alone
    /// would (a back-off before a conflict's wait).
    #[test]
    fn a_batch_goes_on_as_its_writes_went() {
        use Executed::*;
        assert_eq!(
            after_batch(&[ForceDeleted, TurnedAway, ForceDeleted]),
            AfterBatch::TurnedAway
        );
        assert_eq!(after_batch(&[Conflict, ForceDeleted]), AfterBatch::Again);
        assert_eq!(after_batch(&[BackOff, ForceDeleted]), AfterBatch::Again);
        assert_eq!(
            after_batch(&[Conflict, BackOff]),
            AfterBatch::Wait(AFTER_BACK_OFF)
        );
        assert_eq!(
            after_batch(&[Conflict, Conflict]),
            AfterBatch::Wait(AFTER_CONFLICT)
        );
    }
}
