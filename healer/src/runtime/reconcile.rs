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
use kube::runtime::controller::Action as KAction;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info, warn};

use super::capacity::evaluate_fleet;
use super::claim_table::Standing;
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
use crate::plan::Plan;

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

async fn pass(fleet: Arc<CelldFleet>, ctx: &Arc<Reconciler>) -> Result<Pass, ReconcileError> {
    let key = ObjectRef::from_obj(&*fleet);
    if !ctx.gate.may_act() {
        ctx.metrics.reconcile("standby");
        return Ok(Pass::Done(turned_away(ctx)));
    }
    // One install per namespace (`super::claims`).
    match ctx
        .gate
        .claims()
        .standing(fleet.metadata.namespace.as_deref().unwrap_or_default())
    {
        Standing::Held => {}
        Standing::Pending => {
            ctx.gate.claims().want();
            ctx.metrics.reconcile("unclaimed");
            return Ok(Pass::Done(KAction::requeue(Duration::from_secs(1))));
        }
        // The claimer reconciles the namespace's fleets if it takes the claim over.
        Standing::Elsewhere(_) => {
            ctx.metrics.reconcile("claimed_elsewhere");
            return Ok(Pass::Done(KAction::await_change()));
        }
    }
    if let Err(why) = ctx
        .watches
        .ready_for(fleet.metadata.namespace.as_deref().unwrap_or_default())
    {
        ctx.metrics.reconcile("unsynced");
        debug!(fleet = %key, why = %why, "caches incomplete: not acting");
        return Ok(Pass::Done(KAction::requeue(Duration::from_secs(1))));
    }
    // Counted for `celld_healer_fleets_reconciled` (how far a new leader has got).
    ctx.metrics.fleet_reconciled(&key);
    // The cache may hold a newer version than the trigger.
    let fleet = ctx.stores.fleets.get(&key).unwrap_or(fleet);
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
        return Ok(Pass::Done(KAction::await_change()));
    }
    let g = gather(&ctx.stores, &fleet);
    // Rule R9: members that are down are asked whether they are recovering.
    if fleet.spec.is_stateful_set() {
        let members = own_members(&g, &fleet, &ctx.memory.force_deleted);
        super::recovery::listen(ctx, &members).await;
    }
    let reading = ctx.clocks.read();
    let now = reading.now.wall;
    // The capacity policy's signal (no policy: nothing collected, nothing read). The
    // fresh read below decides with the same signal, so a confirmation compares like
    // with like.
    let capacity = evaluate_fleet(ctx, &fleet, &g, now).await?;
    let snapshot = match snapshot_of(ctx, &fleet, &g, reading, &capacity.signal, true) {
        Ok(s) => s,
        Err(e) => {
            ctx.metrics.reconcile("unobservable");
            ctx.metrics.error("observe");
            let msg = e.to_string();
            let new = ctx.memory.fleet(&key, |f| {
                f.unreadable.replace(msg.clone()).as_ref() != Some(&msg)
            });
            if new {
                warn!(fleet = %key, error = %e, "cannot read the fleet completely: not acting");
                ctx.events
                    .publish(&fleet, true, "ObservationIncomplete", "Report", msg)
                    .await;
            }
            return Ok(Pass::Done(KAction::await_change()));
        }
    };
    ctx.memory.fleet(&key, |f| f.unreadable = None);
    let started = std::time::Instant::now();
    let mut plan = crate::decide(&snapshot, now, &ctx.config);
    ctx.metrics
        .decide_seconds
        .observe(started.elapsed().as_secs_f64());
    let due = ctx.memory.fleet(&key, |f| f.wake);
    report_ignored(ctx, &key, &fleet, &plan).await;

    // A destructive write is made only if `decide` reaches it again on a fresh read
    // from the API server (see `crate::confirm`); the write then carries the fresh
    // preconditions, and the fresh Pod for a handoff.
    let mut fresh_pod = None;
    let mut fresh_snapshot = None;
    let mut fleet = fleet;
    if let Some(action) = plan.action.clone()
        && confirm::needs_confirmation(&action)
    {
        match confirm_fresh(ctx, &fleet, &action, reading, &capacity.signal).await {
            Ok((Confirmation::Confirmed(a) | Confirmation::Instead(a), pod, fresh)) => {
                if a != action {
                    info!(fleet = %key, cached = ?action, fresh = ?a, "the fresh read changed the write");
                }
                // The fresh plan whole (its rule, event, status and wake-up describe the
                // write actually made), against the fresh CelldFleet.
                if let Some(read) = fresh {
                    plan = read.plan;
                    fleet = read.fleet;
                    fresh_snapshot = Some(read.snapshot);
                }
                plan.action = Some(a);
                fresh_pod = pod;
                ctx.memory.fleet(&key, |f| f.holds = 0);
            }
            Ok((Confirmation::Hold(why), _, fresh)) => {
                ctx.metrics.action(action.kind(), "unconfirmed");
                ctx.metrics.reconcile("unconfirmed");
                info!(fleet = %key, rule = %plan.rule, action = ?action, why = %why, "not confirmed on a fresh read: no write");
                // Report what the fresh read shows, and look again once the caches had
                // time to catch up (`after_unconfirmed`); a watch event still triggers a
                // reconcile. That look may be minutes away: the status is not spaced
                // here.
                let mut due = None;
                if let Some(read) = fresh {
                    write_status(ctx, &read.fleet, &read.plan, Spacing::Now).await?;
                    due = read.plan.wake_at.map(|t| t - ctx.clocks.now().wall);
                }
                let n = ctx.memory.fleet(&key, |f| {
                    f.holds = f.holds.saturating_add(1);
                    f.holds
                });
                return Ok(Pass::Done(KAction::requeue(after_unconfirmed(n, due))));
            }
            Err(e) => {
                ctx.metrics.reconcile("error");
                ctx.metrics.error("fresh_read");
                return Err(ReconcileError::FreshRead(e));
            }
        }
    }

    // Not held (a held reconcile returned above).
    ctx.memory.fleet(&key, |f| f.holds = 0);

    if let Some(action) = plan.action.clone() {
        // The fleet's other due force deletes go out with this one, on its read.
        let rest = match fresh_snapshot {
            Some(read) => confirm::batch(&action, read, snapshot, now, &ctx.config),
            None => Vec::new(),
        };
        let writing = Writing {
            ctx,
            key: &key,
            fleet: &fleet,
            due,
            now,
        };
        if !rest.is_empty() {
            return Ok(match writing.force_deletes(&plan, &action, &rest).await? {
                AfterBatch::TurnedAway => Pass::Done(turned_away(ctx)),
                AfterBatch::Again => Pass::Again,
                AfterBatch::Wait(d) => Pass::Done(KAction::requeue(d)),
            });
        }
        let pod = fresh_pod.or_else(|| pod_named(&ctx.stores, &fleet, &action));
        match writing.one(&plan, &action, pod).await? {
            Executed::Made => {}
            Executed::ForceDeleted => return Ok(Pass::Again),
            Executed::Conflict => {
                return Ok(Pass::Done(KAction::requeue(AFTER_CONFLICT)));
            }
            Executed::TurnedAway => return Ok(Pass::Done(turned_away(ctx))),
            Executed::BackOff => return Ok(Pass::Done(KAction::requeue(AFTER_BACK_OFF))),
        }
    } else {
        ctx.metrics.reconcile("idle");
        ctx.memory.fleet(&key, |f| f.failures = 0);
    }
    track_application(ctx, &key, &fleet, &g, &plan);
    // A write to the CelldFleet itself (its finalizer, its first spec.members) moved its
    // resourceVersion on: the status follows from the reconcile its watch event triggers.
    let fleet_written = plan.action.as_ref().is_some_and(|a| a.writes_the_fleet());
    let status_next = if fleet_written {
        None
    } else {
        write_status(ctx, &fleet, &plan, Spacing::Spaced).await?
    };
    let step = next_step(ctx, &key, plan.wake_at, now);
    let wake_ms = plan.wake_at.map(|w| (w - now).millis().max(1) as u128);
    // The earliest of decide's wake-up, the next capacity observation (each fleet with
    // a policy asks for its own, so there is no loop over all fleets) and a status held
    // back (`STATUS_EVERY`). The application observation keeps its own clock.
    let sooner = [capacity.next, status_next]
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
