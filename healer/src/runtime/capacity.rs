//! The capacity policy in the reconcile: for a fleet with `spec.capacity`, observe its
//! members with the [`Collector`] (at most once per `sampleIntervalSeconds`), run the pure
//! evaluator ([`crate::capacity::evaluate`]) over the history kept on the fleet's bucket
//! reservation, write that history back when it changed, and hand `decide` the resulting
//! [`CapacitySignal`]. Everything the signal leads to goes through rules K1-K5 and the
//! same growth and contraction rules as a manual edit.
//!
//! History is one annotation ([`CAPACITY_HISTORY`]) on the reservation, written by merge
//! patch with the read resourceVersion as precondition (field manager `celld-healer`),
//! and removed once the fleet has no policy. A fleet without a policy costs nothing: no
//! collection, no request (the cached reservation shows whether there is a history to
//! remove).

use std::time::{Duration, Instant};

use celld_api::labels::{CAPACITY_HISTORY, HEALER_FIELD_MANAGER};
use celld_api::{CelldBucketReservation, CelldFleet, reservation_name};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info, warn};

use super::collector::Collector;
use super::context::{ReconcileError, Reconciler};
use super::fresh::Gathered;
use super::gather::own_members;
use super::memory::CapacityMemo;
use crate::capacity::{Applied, History, evaluate};
use crate::snapshot::CapacitySignal;
use crate::time::Timestamp;

/// How long a history this process wrote is trusted over an older one in the cache (the
/// reservation watch normally catches up within a second).
const CACHE_LAG: Duration = Duration::from_secs(10);

/// What one evaluation gives the reconcile.
#[derive(Default)]
pub(super) struct Evaluated {
    /// For `decide` (default: no policy, or nothing to evaluate yet).
    pub(super) signal: CapacitySignal,
    /// When the next observation is due.
    pub(super) next: Option<Duration>,
}

/// The fleet's bucket reservation from the cache, if it is this fleet's (bucket, prefix,
/// identity, namespace and name: never a copy's, which would write the original's history).
fn own_reservation(
    ctx: &Reconciler,
    fleet: &CelldFleet,
) -> Option<std::sync::Arc<CelldBucketReservation>> {
    let name = reservation_name(
        &fleet.spec.storage.bucket,
        fleet.spec.storage.prefix.as_deref(),
    );
    ctx.stores
        .reservations
        .get(&ObjectRef::new(&name))
        .filter(|r| r.spec.held_by(fleet))
}

fn annotation(r: &CelldBucketReservation) -> Option<&String> {
    r.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CAPACITY_HISTORY))
}

/// The member counts the evaluator is told: spec.members, the workload's replicas, and
/// the member a contraction of a StatefulSet removes (its highest ordinal).
fn applied(fleet: &CelldFleet, g: &Gathered) -> Applied {
    let name = fleet.metadata.name.clone().unwrap_or_default();
    let (members, victim) = if fleet.spec.is_stateful_set() {
        let n = g
            .workload_sts
            .as_ref()
            .and_then(|s| s.spec.replicas)
            .unwrap_or(0);
        (n, (n > 0).then(|| format!("{name}-{}", n - 1)))
    } else {
        let n = g
            .workload_dep
            .as_ref()
            .and_then(|d| d.spec.replicas)
            .unwrap_or(0);
        (n, None)
    };
    Applied {
        fleet_uid: fleet.metadata.uid.clone().unwrap_or_default(),
        declared: fleet.spec.effective_members(),
        members,
        victim,
    }
}

/// Evaluates the fleet's capacity policy for this reconcile (see the module comment).
pub(super) async fn evaluate_fleet(
    ctx: &Reconciler,
    fleet: &CelldFleet,
    g: &Gathered,
    now: Timestamp,
) -> Result<Evaluated, ReconcileError> {
    let key = ObjectRef::from_obj(fleet);
    // An invalid fleet writes nothing (rule V1), its capacity history included; the
    // reservation of a fleet it copies is not its own (`own_reservation`).
    if !ctx.memory.validity.problems(fleet).is_empty() {
        debug!(fleet = %key, "invalid spec: capacity not evaluated");
        return Ok(Evaluated::default());
    }
    let reservation = own_reservation(ctx, fleet);
    let policy = fleet
        .spec
        .capacity
        .as_ref()
        .map(|c| c.effective())
        .filter(|_| fleet.metadata.deletion_timestamp.is_none());
    let Some(policy) = policy else {
        // No policy needs a history: remove it (from the cache's view; no read).
        ctx.memory.fleet(&key, |f| f.capacity = None);
        ctx.metrics.forget_capacity(&key);
        if let Some(r) = reservation.as_deref().filter(|r| annotation(r).is_some()) {
            write_history(ctx, fleet, r, None).await?;
            info!(fleet = %key, reservation = ?r.metadata.name, "capacity history removed: the fleet has no capacity policy");
        }
        return Ok(Evaluated::default());
    };
    let Some(reservation) = reservation else {
        // Nowhere to keep a history yet (the reservation is missing or not this fleet's):
        // no recommendation rather than one that forgets its windows.
        debug!(fleet = %key, "no reservation of this fleet: capacity not evaluated");
        return Ok(Evaluated::default());
    };
    let interval = Duration::from_secs(policy.sample_interval_seconds.max(1) as u64);
    let applied = applied(fleet, g);

    let memo = ctx.memory.fleet(&key, |f| f.capacity.clone());
    let due = memo
        .as_ref()
        .is_none_or(|m| m.collected.elapsed() >= interval);
    let (observation, collected) = match &memo {
        Some(m) if !due => (m.observation.clone(), m.collected),
        _ => {
            let ns = fleet.metadata.namespace.as_deref().unwrap_or_default();
            let started = Instant::now();
            let o = Collector::new(ctx.client.clone())
                .collect(
                    ns,
                    &fleet.spec.identity,
                    own_members(g, fleet, &ctx.memory.force_deleted)
                        .into_iter()
                        .cloned()
                        .collect(),
                )
                .await;
            ctx.metrics
                .capacity_collect_seconds
                .observe(started.elapsed().as_secs_f64());
            (o, started)
        }
    };

    // Evaluated as of now: after the collection, which stamps its samples with later
    // times than the reconcile's start (an observation from the future is invalid, E1).
    let now = now.max(super::context::now());

    // The history: the cache's, unless this process wrote a newer one the cache has not
    // caught up with yet.
    let cached_rv = reservation
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let (rv, old_text) = match memo.as_ref().and_then(|m| m.written.clone()) {
        Some((rv, text, at)) if rv != cached_rv && at.elapsed() < CACHE_LAG => (rv, Some(text)),
        _ => (cached_rv, annotation(&reservation).cloned()),
    };
    let uid = applied.fleet_uid.clone();
    let history = old_text
        .as_deref()
        .and_then(|t| match History::decode(t, &uid) {
            Ok(h) => Some(h),
            Err(e) => {
                warn!(fleet = %key, error = %e, "capacity history dropped; windows restart");
                None
            }
        });
    let (history, decision) = evaluate(&policy, history, &observation, &applied, now);
    debug!(fleet = %key, reason = decision.reason.as_str(), message = %decision.message, desired = decision.desired, "capacity evaluated");
    let text = history.encode().map_err(ReconcileError::History)?;
    if History::size_warning(text.len()) {
        warn!(fleet = %key, bytes = text.len(), "capacity history is over half its size limit");
    }
    let mut written = memo.and_then(|m| m.written);
    if old_text.as_deref() != Some(text.as_str()) {
        let mut r = (*reservation).clone();
        r.metadata.resource_version = Some(rv);
        if let Some(new_rv) = write_history(ctx, fleet, &r, Some(&text)).await? {
            written = Some((new_rv, text, Instant::now()));
        }
    }
    let memo = CapacityMemo {
        observation,
        collected,
        written,
    };
    ctx.memory.fleet(&key, |f| f.capacity = Some(memo));
    ctx.metrics.capacity(&key, &decision, applied.members);
    Ok(Evaluated {
        signal: decision.signal(applied.members),
        next: Some(
            interval
                .saturating_sub(collected.elapsed())
                .max(Duration::from_millis(100)),
        ),
    })
}

/// Sets (`Some`) or removes (`None`) the history annotation: a merge patch carrying the
/// resourceVersion it was read at, as field manager `celld-healer`. Returns the new
/// resourceVersion; `None` when this replica may not write.
async fn write_history(
    ctx: &Reconciler,
    fleet: &CelldFleet,
    r: &CelldBucketReservation,
    text: Option<&str>,
) -> Result<Option<String>, ReconcileError> {
    // Cluster-scoped, but the fleet's: written only by the install holding its namespace.
    if !ctx
        .gate
        .may_act_in(fleet.metadata.namespace.as_deref().unwrap_or_default())
    {
        return Ok(None);
    }
    let name = r.metadata.name.clone().unwrap_or_default();
    let body = serde_json::json!({
        "metadata": {
            "resourceVersion": r.metadata.resource_version,
            "annotations": {CAPACITY_HISTORY: text},
        }
    });
    let api: Api<CelldBucketReservation> = Api::all(ctx.client.clone());
    let pp = PatchParams {
        field_manager: Some(HEALER_FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    match api.patch(&name, &pp, &Patch::Merge(&body)).await {
        Ok(o) => {
            ctx.metrics.capacity_history_writes.inc();
            Ok(o.metadata.resource_version)
        }
        Err(e) => {
            ctx.metrics.error("capacity_history");
            Err(ReconcileError::HistoryWrite(e))
        }
    }
}
