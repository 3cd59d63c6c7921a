//! The reconcile step of one fleet: read it from the caches, `decide`, confirm a
//! destructive write on a fresh read, make the one write, write the status `decide`
//! built, and say when to look again.
//!
//! A reconcile never acts on incomplete data:
//! - before every watch has listed its objects once, or while a watch is failing, it
//!   writes nothing and looks again shortly (log, `celld_healer_watch_healthy`);
//! - when `observe` refuses an object, it writes nothing, records a Warning Event
//!   `ObservationIncomplete` naming the object, and waits for the object to change.
//!
//! Only the lease holder reconciles; the standby keeps its caches warm and is ready, and
//! reconciles every fleet the moment it becomes leader.

use std::sync::Arc;
use std::time::Duration;

use celld_api::CelldFleet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action as KAction;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info, warn};

use super::capacity::evaluate_fleet;
use super::claim_table::Standing;
use super::clocks::Reading;
use super::confirmation::confirm_fresh;
use super::context::{ReconcileError, Reconciler};
use super::execute::{AfterBatch, Executed, Writing};
use super::fresh::Gathered;
use super::gather::{gather, own_members, pod_named, snapshot_of};
use super::members::{Member, Target};
use super::schedule::{
    AFTER_BACK_OFF, AFTER_CONFLICT, after_unconfirmed, early, next_step, turned_away,
};
use super::status_writer::{Spacing, write_status};
use crate::confirm::{self, Confirmation};
use crate::plan::{Action, Plan};
use crate::snapshot::{CapacitySignal, Snapshot};
use crate::time::Timestamp;

/// Logs and records an Event when the objects `decide` ignored changed.
async fn report_ignored(
    ctx: &Reconciler,
    key: &ObjectRef<CelldFleet>,
    fleet: &CelldFleet,
    plan: &Plan,
) {
    let changed = ctx.memory.fleet(key, |f| {
        let changed = !plan.ignored.is_empty() && f.ignored != plan.ignored;
        f.ignored.clone_from(&plan.ignored);
        changed
    });
    if changed {
        let msg = format!("Ignored, never acted on: {}", plan.ignored.join("; "));
        warn!(fleet = %key, ignored = ?plan.ignored, "objects outside the member range are ignored");
        ctx.events
            .publish(fleet, true, "ObjectsIgnored", "Report", msg)
            .await;
    }
}

/// At most this many passes in one reconcile: each pass after the first follows a
/// force-delete of a distinct Pod, so a fleet's Pods bound it.
const MAX_PASSES: usize = celld_api::defaults::MAX_MEMBERS as usize + 1;

/// What one pass over a fleet concluded.
enum Pass {
    /// The controller's next step for the fleet.
    Done(KAction),
    /// A Pod was force-deleted (rule F1): decide again at once.
    Again,
}

/// Reconciles one fleet. Rule F1 force-deletes one Pod per decision, and a lost node or
/// zone strands several members of a fleet at once, all due together: after a
/// force-delete the fleet is decided again at once, here, rather than after its next
/// watch event and the queue's debounce behind every other fleet. The fleet's other due
/// force deletes go out together with the first, on its fresh read
/// ([`confirm::batch`]); any other write is confirmed on a read of its own.
pub(super) async fn reconcile(
    fleet: Arc<CelldFleet>,
    ctx: Arc<Reconciler>,
) -> Result<KAction, ReconcileError> {
    // Fleets outside the served namespaces or in another shard are watched (the identity
    // check reads every fleet), never acted on.
    if !ctx.served.serves(ctx.shard, &fleet) {
        ctx.memory.views.untrack(&ObjectRef::from_obj(&*fleet));
        return Ok(KAction::await_change());
    }
    // Closed only at shutdown, when nothing is reconciled any more.
    let Ok(_slot) = ctx.slots.acquire().await else {
        return Ok(KAction::await_change());
    };
    for _ in 0..MAX_PASSES {
        match pass(fleet.clone(), &ctx).await? {
            Pass::Done(step) => return Ok(step),
            Pass::Again => {}
        }
    }
    Ok(KAction::requeue(Duration::from_millis(1)))
}

/// One pass: the gates, the caches' view of the fleet, `decide`, the fresh confirmation
/// of a destructive write, the write, the status and the next step.
async fn pass(fleet: Arc<CelldFleet>, ctx: &Arc<Reconciler>) -> Result<Pass, ReconcileError> {
    let key = ObjectRef::from_obj(&*fleet);
    let fleet = match admit(ctx, &key, fleet) {
        Ok(latest) => latest,
        Err(step) => return Ok(Pass::Done(step)),
    };
    let g = gather(&ctx.stores, &fleet);
    // Rule R9: members that are down are asked whether they are recovering.
    if fleet.spec.is_stateful_set() {
        let members = own_members(&g, &fleet, &ctx.memory.force_deleted);
        super::recovery::listen(ctx, &members).await;
    }
    let reading = ctx.clocks.read();
    let now = reading.now.wall;
    // The capacity policy's signal (no policy: nothing collected, nothing read). The
    // fresh read decides with the same signal, so a confirmation compares like with like.
    let capacity = evaluate_fleet(ctx, &fleet, &g, now).await?;
    let Some(snapshot) = observe(ctx, &key, &fleet, &g, reading, &capacity.signal).await else {
        return Ok(Pass::Done(KAction::await_change()));
    };
    let started = std::time::Instant::now();
    let plan = crate::decide(&snapshot, now, &ctx.config);
    ctx.metrics
        .decide_seconds
        .observe(started.elapsed().as_secs_f64());
    let due = ctx.memory.fleet(&key, |f| f.wake);
    report_ignored(ctx, &key, &fleet, &plan).await;
    let decided = match confirmed(ctx, &key, fleet, &g, plan, reading, &capacity.signal).await? {
        Confirmed::Write(d) => d,
        Confirmed::Held(step) => return Ok(Pass::Done(step)),
    };
    let Decided {
        fleet,
        plan,
        fresh_pod,
        fresh_snapshot,
    } = *decided;
    if let Some(action) = &plan.action {
        let writing = Writing {
            ctx,
            key: &key,
            fleet: &fleet,
            due,
            now,
        };
        if let Some(end) =
            write(&writing, &plan, action, fresh_pod, fresh_snapshot, snapshot).await?
        {
            return Ok(end);
        }
    } else {
        ctx.metrics.reconcile("idle");
        ctx.memory.fleet(&key, |f| f.failures = 0);
    }
    track_application(ctx, &key, &fleet, &g, &plan);
    settle(ctx, &key, &fleet, &plan, capacity.next, now).await
}

/// Whether this replica reconciles the fleet now: the cache's latest version of it, or
/// the next step when it does not (a standby, a namespace not claimed or claimed by
/// another install, caches not synced, a latest version that does not read).
fn admit(
    ctx: &Reconciler,
    key: &ObjectRef<CelldFleet>,
    fleet: Arc<CelldFleet>,
) -> Result<Arc<CelldFleet>, KAction> {
    if !ctx.gate.may_act() {
        ctx.metrics.reconcile("standby");
        return Err(turned_away(ctx));
    }
    let namespace = fleet.metadata.namespace.as_deref().unwrap_or_default();
    // One install per namespace (`super::claims`).
    match ctx.gate.claims().standing(namespace) {
        Standing::Held => {}
        Standing::Pending => {
            ctx.gate.claims().want();
            ctx.metrics.reconcile("unclaimed");
            return Err(KAction::requeue(Duration::from_secs(1)));
        }
        // The claimer reconciles the namespace's fleets if it takes the claim over.
        Standing::Elsewhere(_) => {
            ctx.metrics.reconcile("claimed_elsewhere");
            return Err(KAction::await_change());
        }
    }
    if let Err(why) = ctx.watches.ready_for(namespace) {
        ctx.metrics.reconcile("unsynced");
        debug!(fleet = %key, why = %why, "caches incomplete: not acting");
        return Err(KAction::requeue(Duration::from_secs(1)));
    }
    // Counted for `celld_healer_fleets_reconciled` (how far a new leader has got).
    ctx.metrics.fleet_reconciled(key);
    // The cache may hold a newer version than the trigger.
    let fleet = ctx.stores.fleets.get(key).unwrap_or(fleet);
    // A fleet whose latest version does not read is not acted on on an older one
    // (`super::unreadable` reports it).
    if let Some(why) = fleet
        .metadata
        .uid
        .as_deref()
        .and_then(|u| ctx.stores.unreadable.problem(u))
    {
        ctx.metrics.reconcile("unreadable");
        debug!(fleet = %key, why = %why, "the CelldFleet does not read: not acting");
        return Err(KAction::await_change());
    }
    Ok(fleet)
}

/// The fleet's snapshot from the caches, or `None` when an object does not read in full:
/// nothing is acted on, and the problem is reported once (a Warning Event
/// `ObservationIncomplete`), not on every reconcile.
async fn observe(
    ctx: &Reconciler,
    key: &ObjectRef<CelldFleet>,
    fleet: &CelldFleet,
    g: &Gathered,
    reading: Reading,
    capacity: &CapacitySignal,
) -> Option<Snapshot> {
    match snapshot_of(ctx, fleet, g, reading, capacity, true) {
        Ok(s) => {
            ctx.memory.fleet(key, |f| f.unreadable = None);
            Some(s)
        }
        Err(e) => {
            ctx.metrics.reconcile("unobservable");
            ctx.metrics.error("observe");
            let msg = e.to_string();
            let new = ctx.memory.fleet(key, |f| {
                f.unreadable.replace(msg.clone()).as_ref() != Some(&msg)
            });
            if new {
                warn!(fleet = %key, error = %e, "cannot read the fleet completely: not acting");
                ctx.events
                    .publish(fleet, true, "ObservationIncomplete", "Report", msg)
                    .await;
            }
            None
        }
    }
}

/// What a pass writes from: the plan made on the caches, or, for a destructive write,
/// the fresh read's plan and CelldFleet (its rule, event, status and wake-up describe the
/// write actually made), with the fresh Pod a handoff step needs.
struct Decided {
    fleet: Arc<CelldFleet>,
    plan: Plan,
    fresh_pod: Option<Arc<Pod>>,
    fresh_snapshot: Option<Snapshot>,
}

/// Whether a pass goes on to its write.
enum Confirmed {
    /// Boxed: a plan and a snapshot, against a requeue.
    Write(Box<Decided>),
    /// The fresh read did not confirm the write: nothing is written; the next step.
    Held(KAction),
}

/// A destructive write is made only if `decide` reaches it again on a fresh read from the
/// API server (see `crate::confirm`); the write then carries the fresh preconditions.
async fn confirmed(
    ctx: &Reconciler,
    key: &ObjectRef<CelldFleet>,
    fleet: Arc<CelldFleet>,
    cached: &Gathered,
    mut plan: Plan,
    reading: Reading,
    capacity: &CapacitySignal,
) -> Result<Confirmed, ReconcileError> {
    let Some(action) = plan.action.clone().filter(confirm::needs_confirmation) else {
        ctx.memory.fleet(key, |f| f.holds = 0);
        return Ok(Confirmed::Write(Box::new(Decided {
            fleet,
            plan,
            fresh_pod: None,
            fresh_snapshot: None,
        })));
    };
    match confirm_fresh(ctx, &fleet, cached, &action, reading, capacity).await {
        Ok((Confirmation::Confirmed(a) | Confirmation::Instead(a), fresh_pod, fresh)) => {
            if a != action {
                info!(fleet = %key, cached = ?action, fresh = ?a, "the fresh read changed the write");
            }
            let (fleet, fresh_snapshot) = match fresh {
                Some(read) => {
                    plan = read.plan;
                    (read.fleet, Some(read.snapshot))
                }
                None => (fleet, None),
            };
            plan.action = Some(a);
            ctx.memory.fleet(key, |f| f.holds = 0);
            Ok(Confirmed::Write(Box::new(Decided {
                fleet,
                plan,
                fresh_pod,
                fresh_snapshot,
            })))
        }
        Ok((Confirmation::Hold(why), _, fresh)) => {
            ctx.metrics.action(action.kind(), "unconfirmed");
            ctx.metrics.reconcile("unconfirmed");
            info!(fleet = %key, rule = %plan.rule, action = ?action, why = %why, "not confirmed on a fresh read: no write");
            // Report what the fresh read shows, and look again once the caches had time
            // to catch up (`after_unconfirmed`); a watch event still triggers a
            // reconcile. That look may be minutes away: the status is not spaced here.
            let mut due = None;
            if let Some(read) = fresh {
                write_status(ctx, &read.fleet, &read.plan, Spacing::Now).await?;
                due = read.plan.wake_at.map(|t| t - ctx.clocks.now().wall);
            }
            let n = ctx.memory.fleet(key, |f| {
                f.holds = f.holds.saturating_add(1);
                f.holds
            });
            Ok(Confirmed::Held(KAction::requeue(after_unconfirmed(n, due))))
        }
        Err(e) => {
            ctx.metrics.reconcile("error");
            ctx.metrics.error("fresh_read");
            Err(ReconcileError::FreshRead(e))
        }
    }
}

/// Makes the plan's write, with the fleet's other due force deletes when the fresh read
/// has them ([`confirm::batch`]). `Some`: the pass ends there.
async fn write(
    writing: &Writing<'_>,
    plan: &Plan,
    action: &Action,
    fresh_pod: Option<Arc<Pod>>,
    fresh_snapshot: Option<Snapshot>,
    cached: Snapshot,
) -> Result<Option<Pass>, ReconcileError> {
    let ctx = writing.ctx;
    let rest = match fresh_snapshot {
        Some(read) => confirm::batch(action, read, cached, writing.now, &ctx.config),
        None => Vec::new(),
    };
    if !rest.is_empty() {
        return Ok(Some(
            match writing.force_deletes(plan, action, &rest).await? {
                AfterBatch::TurnedAway => Pass::Done(turned_away(ctx)),
                AfterBatch::Again => Pass::Again,
                AfterBatch::Wait(d) => Pass::Done(KAction::requeue(d)),
            },
        ));
    }
    let pod = fresh_pod.or_else(|| pod_named(&ctx.stores, writing.fleet, action));
    Ok(match writing.one(plan, action, pod).await? {
        Executed::Made => None,
        Executed::ForceDeleted => Some(Pass::Again),
        Executed::Conflict => Some(Pass::Done(KAction::requeue(AFTER_CONFLICT))),
        Executed::TurnedAway => Some(Pass::Done(turned_away(ctx))),
        Executed::BackOff => Some(Pass::Done(KAction::requeue(AFTER_BACK_OFF))),
    })
}

/// After the write, or none: the status `decide` built, then the next step, the earliest
/// of `decide`'s wake-up, the next capacity observation (`capacity_next`: each fleet with
/// a policy asks for its own, so there is no loop over all fleets) and a status held back
/// (`STATUS_EVERY`). The application observation keeps its own clock.
async fn settle(
    ctx: &Reconciler,
    key: &ObjectRef<CelldFleet>,
    fleet: &CelldFleet,
    plan: &Plan,
    capacity_next: Option<Duration>,
    now: Timestamp,
) -> Result<Pass, ReconcileError> {
    // A write to the CelldFleet itself (its finalizer, its first spec.members) moved its
    // resourceVersion on: the status follows from the reconcile its watch event triggers.
    let fleet_written = plan.action.as_ref().is_some_and(|a| a.writes_the_fleet());
    let status_next = if fleet_written {
        None
    } else {
        write_status(ctx, fleet, plan, Spacing::Spaced).await?
    };
    let step = next_step(ctx, key, plan.wake_at, now);
    let wake_ms = plan.wake_at.map(|w| (w - now).millis().max(1) as u128);
    let sooner = [capacity_next, status_next]
        .into_iter()
        .flatten()
        .min()
        .filter(|d| wake_ms.is_none_or(|w| w > d.as_millis()));
    // The status writer skips its patch while the gate is closed: a leader whose renewal
    // is late looks again shortly, so the status is not left behind.
    if ctx.gate.lapsed() {
        return Ok(Pass::Done(turned_away(ctx)));
    }
    // Asked for as early as the wake-up it replaces, so the two compare as they will run.
    Ok(Pass::Done(match sooner {
        Some(d) => KAction::requeue(early(d)),
        None => step,
    }))
}

/// Hands the fleet's members to its application observer (which runs on its own clock:
/// [`super::members`]), or stops it while the fleet is being deleted. The latest view
/// reaches the status through the snapshot ([`super::gather::snapshot_of`]).
fn track_application(
    ctx: &Arc<Reconciler>,
    key: &ObjectRef<CelldFleet>,
    fleet: &CelldFleet,
    g: &Gathered,
    plan: &Plan,
) {
    let Some(how) = &ctx.observing else {
        return;
    };
    if fleet.metadata.deletion_timestamp.is_some() {
        ctx.memory.views.untrack(key);
        return;
    }
    let target = Target {
        members: own_members(g, fleet, &ctx.memory.force_deleted)
            .into_iter()
            .map(Member::of)
            .collect(),
        expected: plan.status.applied_members.unwrap_or(0).max(0) as usize,
    };
    ctx.memory.views.track(key, target, how);
}
