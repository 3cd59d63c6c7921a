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
use celld_api::healer_flags::Shard;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::controller::Action as KAction;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info, warn};

use super::act::{self, ActError, Actor};
use super::capacity::evaluate_fleet;
use super::claims::Standing;
use super::cli::HaltPoint;
use super::clocks::{Clocks, Reading};
use super::controller::DEBOUNCE;
use super::events::Events;
use super::fresh::{self, Gathered};
use super::gather::{gather, own_members, pod_named, snapshot_of};
use super::leader::Gate;
use super::members::{Member, Observing, Target};
use super::memory::Memory;
use super::metrics::Metrics;
use super::served::Served;
use super::status_writer::{Spacing, write_status};
use super::watches::{Stores, WatchHealth};
use super::zones::Zones;

use crate::config::Config;
use crate::confirm::{self, Confirmation};
use crate::plan::{Action, Plan};
use crate::snapshot::{CapacitySignal, Snapshot};
use crate::time::Timestamp;

/// What every reconcile shares: the client, the caches and their health, the delays, the
/// leader gate, and what the runtime remembers between reconciles.
pub(super) struct Reconciler {
    pub(super) client: Client,
    /// The namespaces whose fleets are reconciled (others are only read, for V2).
    pub(super) served: Served,
    /// The share of those fleets this healer acts on (`--shard`).
    pub(super) shard: Shard,
    pub(super) stores: Stores,
    pub(super) watches: Arc<WatchHealth>,
    /// Node and volume zones, for member status only.
    pub(super) zones: Arc<Zones>,
    pub(super) config: Config,
    pub(super) gate: Gate,
    pub(super) metrics: Arc<Metrics>,
    pub(super) events: Events,
    pub(super) halt_after: Option<HaltPoint>,
    /// How the members' application is observed (`None`: off,
    /// `--application-interval 0s`).
    pub(super) observing: Option<Observing>,
    /// Per fleet, Pod and claim, between reconciles.
    pub(super) memory: Arc<Memory>,
    /// The monotonic clock and the API server's.
    pub(super) clocks: Arc<Clocks>,
    /// The fleets reconciled at once (`controller::CONCURRENCY`): a fair semaphore, so a
    /// due fleet waits in line, first come first served, however busy the others are.
    pub(super) slots: tokio::sync::Semaphore,
}

/// Why a reconcile failed (it is retried with back-off).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The action's write failed.
    #[error("{action} failed: {source}")]
    Act {
        /// Action kind.
        action: &'static str,
        /// Cause.
        source: ActError,
    },
    /// The status patch failed.
    #[error("status patch failed: {0}")]
    Status(#[source] kube::Error),
    /// The fresh read that must precede a destructive write failed (nothing written).
    #[error("fresh read before a destructive write failed: {0}")]
    FreshRead(#[source] kube::Error),
    /// The capacity history could not be encoded within its bounds (nothing written).
    #[error("capacity history: {0}")]
    History(#[source] crate::capacity::HistoryError),
    /// The capacity history patch on the reservation failed (a conflict included: the
    /// evaluation is repeated on the newer reservation; nothing acted on meanwhile).
    #[error("capacity history patch failed: {0}")]
    HistoryWrite(#[source] kube::Error),
}

pub(super) fn now() -> Timestamp {
    super::clocks::wall()
}

pub(super) fn error_policy(
    fleet: Arc<CelldFleet>,
    err: &ReconcileError,
    ctx: Arc<Reconciler>,
) -> KAction {
    let key = ObjectRef::from_obj(&*fleet);
    let n = {
        let mut f = ctx.memory.failures.lock().expect("failures");
        let n = f.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = Duration::from_secs((1u64 << n.min(8)).min(300));
    warn!(fleet = %key, error = %err, retry_in = ?delay, "reconcile failed");
    KAction::requeue(delay)
}

/// What a fresh read showed: the CelldFleet, the snapshot built from it and the plan
/// `decide` made on that.
struct FreshRead {
    fleet: Arc<CelldFleet>,
    snapshot: Snapshot,
    plan: Plan,
}

/// Reads the fleet fresh from the API server, decides again and compares (see
/// `crate::confirm`). Also returns the fresh Pod a confirmed handoff step needs.
async fn confirm_fresh(
    ctx: &Reconciler,
    fleet: &CelldFleet,
    action: &Action,
    reading: Reading,
    capacity: &CapacitySignal,
) -> Result<(Confirmation, Option<Arc<Pod>>, Option<FreshRead>), kube::Error> {
    let now = reading.now.wall;
    ctx.metrics.fresh_reads.inc();
    let Some((fresh_fleet, g)) = fresh::read(&ctx.client, fleet).await? else {
        return Ok((
            Confirmation::Hold("the CelldFleet is gone from the API server".into()),
            None,
            None,
        ));
    };
    // Rule R9 on fresh facts: the member a fresh disk is for is asked again now.
    if let Action::StartHandoff(h) = action {
        let target: Vec<&Pod> = own_members(&g, &fresh_fleet, &ctx.memory.force_deleted)
            .into_iter()
            .filter(|p| p.metadata.name.as_deref() == Some(h.pod.as_str()))
            .collect();
        super::recovery::listen(ctx, &target).await;
    }
    // The fresh read is compared with what the watches observed; it starts no
    // observation of its own (`crate::clock::Observations`).
    let snapshot = match snapshot_of(ctx, &fresh_fleet, &g, reading, capacity, false) {
        Ok(s) => s,
        Err(e) => return Ok((Confirmation::Hold(e.to_string()), None, None)),
    };
    let plan = crate::decide(&snapshot, now, &ctx.config);
    let c = confirm::confirm(action, &plan);
    let pod_name = match &c {
        Confirmation::Confirmed(a) | Confirmation::Instead(a) => match a {
            Action::StartHandoff(h) => Some(h.pod.clone()),
            Action::ReleaseHandoff { name, .. } | Action::AbortHandoff { name, .. } => {
                Some(name.clone())
            }
            _ => None,
        },
        Confirmation::Hold(_) => None,
    };
    let pod = pod_name.and_then(|n| {
        g.pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(n.as_str()))
            .cloned()
            .map(Arc::new)
    });
    let read = FreshRead {
        fleet: Arc::new(fresh_fleet),
        snapshot,
        plan,
    };
    Ok((c, pod, Some(read)))
}

/// Logs and records an Event when the objects `decide` ignored changed.
async fn report_ignored(
    ctx: &Reconciler,
    key: &ObjectRef<CelldFleet>,
    fleet: &CelldFleet,
    plan: &Plan,
) {
    let changed = {
        let mut map = ctx.memory.ignored.lock().expect("ignored");
        if plan.ignored.is_empty() {
            map.remove(key);
            false
        } else {
            map.insert(key.clone(), plan.ignored.clone()).as_ref() != Some(&plan.ignored)
        }
    };
    if changed {
        let msg = format!("Ignored, never acted on: {}", plan.ignored.join("; "));
        warn!(fleet = %key, ignored = ?plan.ignored, "objects outside the member range are ignored");
        ctx.events
            .publish(fleet, true, "ObjectsIgnored", "Report", msg)
            .await;
    }
}

/// The requeue delay that makes the queue run the fleet at `t`: the queue adds its
/// debounce to every delay, so that much less is asked for; a little after `t` rather
/// than before, since a run before the deadline finds nothing due and waits a whole
/// debounce more.
fn until(t: Timestamp, now: Timestamp) -> Duration {
    early(Duration::from_millis((t - now).millis().max(0) as u64))
}

/// The requeue delay that makes the queue run the fleet `wanted` from now (see
/// [`until`]).
fn early(wanted: Duration) -> Duration {
    const AFTER: Duration = Duration::from_millis(10);
    (wanted + AFTER)
        .saturating_sub(DEBOUNCE)
        .max(Duration::from_millis(1))
}

/// Turns `wake_at` into the controller's next step, remembering it for the lag metric.
fn next_step(
    ctx: &Reconciler,
    key: &ObjectRef<CelldFleet>,
    plan_wake: Option<Timestamp>,
    now: Timestamp,
) -> KAction {
    let mut wakes = ctx.memory.wakes.lock().expect("wakes");
    match plan_wake {
        Some(t) => {
            wakes.insert(key.clone(), t);
            KAction::requeue(until(t, now))
        }
        None => {
            wakes.remove(key);
            KAction::await_change()
        }
    }
}

/// The next step of a reconcile the leader gate turned away: a standby waits (becoming
/// leader reconciles every fleet); a leader whose renewal is late looks again shortly
/// (`Gate::lapsed`: nothing else would bring the fleet back).
fn turned_away(ctx: &Reconciler) -> KAction {
    if ctx.gate.lapsed() {
        KAction::requeue(Duration::from_secs(1))
    } else {
        KAction::await_change()
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
            let new = ctx
                .memory
                .unreadable
                .lock()
                .expect("unreadable")
                .insert(key.clone(), msg.clone())
                .is_none_or(|old| old != msg);
            if new {
                warn!(fleet = %key, error = %e, "cannot read the fleet completely: not acting");
                ctx.events
                    .publish(&fleet, true, "ObservationIncomplete", "Report", msg)
                    .await;
            }
            return Ok(Pass::Done(KAction::await_change()));
        }
    };
    ctx.memory
        .unreadable
        .lock()
        .expect("unreadable")
        .remove(&key);
    let started = std::time::Instant::now();
    let mut plan = crate::decide(&snapshot, now, &ctx.config);
    ctx.metrics
        .decide_seconds
        .observe(started.elapsed().as_secs_f64());
    let due = ctx.memory.wakes.lock().expect("wakes").get(&key).copied();
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
                ctx.memory.holds.lock().expect("holds").remove(&key);
            }
            Ok((Confirmation::Hold(why), _, fresh)) => {
                ctx.metrics.action(act::kind(&action), "unconfirmed");
                ctx.metrics.reconcile("unconfirmed");
                info!(fleet = %key, rule = plan.rule, action = ?action, why = %why, "not confirmed on a fresh read: no write");
                // Report what the fresh read shows. Look again once the caches had time
                // to catch up, backing off while they keep disagreeing (a lasting cause,
                // such as an unlabelled workload named like the fleet, must not become a
                // read every few seconds); a watch event still triggers a reconcile.
                // That look may be minutes away: the status is not spaced here.
                // After a first disagreement, a deadline the fresh read still waits
                // for (a force delete due in a moment: the caches' decision came just
                // before it) is looked at on time, not a back-off later; a lasting
                // disagreement backs off whatever the plan's wake-up.
                let mut due = None;
                if let Some(read) = fresh {
                    write_status(ctx, &read.fleet, &read.plan, Spacing::Now).await?;
                    due = read.plan.wake_at.map(|t| t - ctx.clocks.now().wall);
                }
                let n = {
                    let mut holds = ctx.memory.holds.lock().expect("holds");
                    let n = holds.entry(key.clone()).or_insert(0);
                    *n = n.saturating_add(1);
                    *n
                };
                let back_off = Duration::from_secs((5u64 << (n - 1).min(6)).min(300));
                let delay = due
                    .filter(|_| n == 1)
                    .map(|d| u64::try_from(d.millis()).unwrap_or(0))
                    .map_or(back_off, |ms| {
                        back_off.min(Duration::from_millis(ms.max(100)))
                    });
                return Ok(Pass::Done(KAction::requeue(delay)));
            }
            Err(e) => {
                ctx.metrics.reconcile("error");
                ctx.metrics.error("fresh_read");
                return Err(ReconcileError::FreshRead(e));
            }
        }
    }

    // Not held (a held reconcile returned above).
    ctx.memory.holds.lock().expect("holds").remove(&key);

    if let Some(action) = plan.action.clone() {
        // The fleet's other due force deletes go out with this one, on its read.
        let rest = match fresh_snapshot {
            Some(read) => confirm::batch(&action, read, snapshot, now, &ctx.config),
            None => Vec::new(),
        };
        if !rest.is_empty() {
            return force_delete_together(ctx, &key, &fleet, &plan, &action, &rest, due, now).await;
        }
        let pod = fresh_pod.or_else(|| pod_named(&ctx.stores, &fleet, &action));
        match execute(ctx, &key, &fleet, &plan, &action, pod, due, now).await? {
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
        ctx.memory.failures.lock().expect("failures").remove(&key);
    }
    track_application(ctx, &key, &fleet, &g, &plan);
    // A write to the CelldFleet itself (its finalizer, its first spec.members) moved its
    // resourceVersion on: the status follows from the reconcile its watch event triggers.
    let fleet_written = matches!(
        plan.action,
        Some(
            Action::AddFleetFinalizer { .. }
                | Action::RemoveFleetFinalizer { .. }
                | Action::InitializeMembers { .. }
        )
    );
    let status_next = if fleet_written {
        None
    } else {
        write_status(ctx, &fleet, &plan, Spacing::Spaced).await?
    };
    let mut step = next_step(ctx, &key, plan.wake_at, now);
    let mut wake_ms = plan.wake_at.map(|w| (w - now).millis().max(1) as u128);
    if plan.rule == "V2" && plan.wake_at.is_none() {
        // A fleet blocked by an older one with its identity has no event of its own
        // when that fleet goes: look again now and then (cache only, no request).
        step = KAction::requeue(Duration::from_secs(30));
        wake_ms = Some(30_000);
    }
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

/// Sends a fleet's due force deletes at once: `first`, confirmed on a fresh read, and
/// `rest`, decided on that read after it ([`confirm::batch`]). Each is made, refused
/// or failed on its own (a failed one waits out its back-off, as alone); then the fleet
/// is decided again from the caches, which read the deletes made as made
/// (`snapshot_of`).
#[allow(clippy::too_many_arguments)]
async fn force_delete_together(
    ctx: &Arc<Reconciler>,
    key: &ObjectRef<CelldFleet>,
    fleet: &Arc<CelldFleet>,
    plan: &Plan,
    first: &Action,
    rest: &[Plan],
    due: Option<Timestamp>,
    now: Timestamp,
) -> Result<Pass, ReconcileError> {
    use futures::StreamExt as _;
    let mut writes = vec![(plan, first)];
    for p in rest {
        if let Some(a) = &p.action {
            writes.push((p, a));
        }
    }
    // Built first, then polled at most `AT_ONCE` at a time, results in order.
    let sends: Vec<_> = writes
        .into_iter()
        .map(|(p, a)| execute(ctx, key, fleet, p, a, None, due, now))
        .collect();
    let results: Vec<Result<Executed, ReconcileError>> = futures::stream::iter(sends)
        .buffered(AT_ONCE)
        .collect()
        .await;
    let mut outcomes = Vec::with_capacity(results.len());
    let mut error = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(e) => {
                if i > 0 && e == Executed::ForceDeleted {
                    ctx.metrics.force_deletes_ridden.inc();
                }
                outcomes.push(e);
            }
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    Ok(match after_batch(&outcomes) {
        AfterBatch::TurnedAway => Pass::Done(turned_away(ctx)),
        AfterBatch::Again => Pass::Again,
        AfterBatch::Wait(d) => Pass::Done(KAction::requeue(d)),
    })
}

/// At most this many of a fleet's force deletes are on the wire at once.
const AT_ONCE: usize = 8;

/// After a write refused by its precondition, the fleet is looked at again this much
/// later (the caches have a moment to catch up).
const AFTER_CONFLICT: Duration = Duration::from_secs(2);

/// After a force delete that failed (it waits out its own back-off), the fleet is looked
/// at again this much later, so that its later rules still run.
const AFTER_BACK_OFF: Duration = Duration::from_secs(1);

/// What follows a batch of force deletes sent at once.
#[derive(Debug, PartialEq, Eq)]
enum AfterBatch {
    /// The leader gate refused a write: as for any write it refuses.
    TurnedAway,
    /// A Pod was force-deleted: decide again at once, as after one alone.
    Again,
    /// Nothing was deleted: look again after this long.
    Wait(Duration),
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

/// What making a write concluded, when it did not fail the reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Executed {
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

/// Makes the write `action` of `plan`, with its metrics, log and Event.
#[allow(clippy::too_many_arguments)]
async fn execute(
    ctx: &Arc<Reconciler>,
    key: &ObjectRef<CelldFleet>,
    fleet: &Arc<CelldFleet>,
    plan: &Plan,
    action: &Action,
    pod: Option<Arc<Pod>>,
    due: Option<Timestamp>,
    now: Timestamp,
) -> Result<Executed, ReconcileError> {
    let kind = act::kind(action);
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
                info!(fleet = %key, rule = plan.rule, action = kind, %owners, "spec.replicas taken over from co-owners holding its live value");
            }
            ctx.metrics.action(
                kind,
                match written {
                    act::Written::Plain => "ok",
                    act::Written::TookOver(_) => "taken_over",
                },
            );
            ctx.metrics.reconcile("acted");
            let after = crate::time::Timestamp(self::now().0);
            if let Some(due) = due.filter(|d| *d <= after) {
                ctx.metrics
                    .deadline_lag_seconds
                    .observe((after - due).millis() as f64 / 1000.0);
            }
            info!(
                fleet = %key, rule = plan.rule, action = kind, detail = ?action,
                deadline = due.map(|d| d.rfc3339()),
                "acted"
            );
            // The Event does not hold up the fleet's next write (it never fails a
            // reconcile either).
            let (events, f, p, a) = (
                ctx.events.clone(),
                fleet.clone(),
                plan.clone(),
                action.clone(),
            );
            tokio::spawn(async move { events.record_action(&f, &p, &a).await });
            ctx.memory.failures.lock().expect("failures").remove(key);
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
        }
        Err(ActError::NotLeader) => {
            ctx.metrics.action(kind, "not_leader");
            ctx.metrics.reconcile("standby");
            return Ok(Executed::TurnedAway);
        }
        Err(e @ ActError::Conflict(_)) => {
            ctx.metrics.action(kind, e.outcome());
            ctx.metrics.reconcile("conflict");
            info!(fleet = %key, rule = plan.rule, action = kind, error = %e, "precondition failed; looking again");
            return Ok(Executed::Conflict);
        }
        Err(e) if matches!(action, Action::ForceDeletePod { .. }) => {
            // Rule F1 must not starve the fleet's later rules: the Pod waits out a
            // back-off (5 s doubling to 5 min) and the fleet is looked at again now.
            ctx.metrics.action(kind, e.outcome());
            ctx.metrics.reconcile("error");
            ctx.metrics.error("api");
            if let Action::ForceDeletePod { uid, name } = action {
                let mut m = ctx.memory.force_retry.lock().expect("force retry");
                let n = m.get(uid).map_or(0, |(n, _)| *n).saturating_add(1);
                let wait = (5_000i64 << n.min(6)).min(300_000);
                m.insert(uid.clone(), (n, now + crate::time::Span(wait)));
                warn!(fleet = %key, pod = %name, error = %e, retry_in_ms = wait, "force delete failed; retried on a back-off");
            }
            return Ok(Executed::BackOff);
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
            return Err(ReconcileError::Act {
                action: kind,
                source: e,
            });
        }
    }
    Ok(Executed::Made)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue adds its debounce to a requeue: the delay asked for makes it run the
    /// fleet just after the deadline, never before it.
    #[test]
    fn a_wake_up_is_asked_for_one_debounce_early() {
        let now = Timestamp(1_000_000);
        let due = |ms: i64| until(Timestamp(now.0 + ms), now) + DEBOUNCE;
        assert_eq!(due(5_000), Duration::from_millis(5_010));
        assert_eq!(due(1_000), Duration::from_millis(1_010));
        // A deadline closer than the debounce cannot be met by a requeue: as soon as
        // the queue allows.
        assert_eq!(until(Timestamp(now.0 + 100), now), Duration::from_millis(1));
        assert_eq!(until(Timestamp(now.0 - 100), now), Duration::from_millis(1));
    }

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
