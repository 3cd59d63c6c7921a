//! The status writer: patches the status `decide` built onto the CelldFleet when it
//! changed (a merge patch with the resourceVersion it was computed from), at most once
//! per [`STATUS_EVERY`] per fleet, records an Event when the Blocked condition changed,
//! keeps the blocked-fleets gauge, and runs the sweep of gone objects when one is due
//! ([`super::memory::SWEEP_EVERY`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use celld_api::{CelldFleet, CelldFleetStatus};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value};
use tracing::debug;

use super::context::{ReconcileError, Reconciler};
use crate::plan::Plan;

/// A fleet's status is patched at most this often. When a lost node or zone strands
/// members of many fleets at once, every member's passage (terminating, gone, pending,
/// running, ready) changed its fleet's status, and those patches were the healer's
/// largest share of requests to an API server that was the bottleneck for the force
/// deletes (1,237 patches against 249 deletes at 200 fleets). Changes within the
/// interval go out together in the next patch. Three seconds: a burst's statuses per
/// fleet fall to about one per step a person would notice (the evictions, the force
/// deletes, the members back), while a lone change still goes out at once. A status
/// never holds up a write: it is patched after the pass's write.
///
/// A force delete counts as a patch here: the status after it waits one interval. The
/// members it moved pass through their next states (gone, pending, running) within
/// those seconds, and in a burst a patch sent at once reached the API server beside the
/// other fleets' force deletes it was answering (at 50 fleets, every fleet's deletes
/// came back from one shared read at once, then every fleet's patch).
pub(super) const STATUS_EVERY: Duration = Duration::from_secs(3);

/// How long a changed status waits for its patch, if it must: the fleet's last patch
/// (`patched`) or its last force delete, the later of the two, was less than
/// [`STATUS_EVERY`] before `now`. A change already held since `held` for twice the
/// interval goes out at once, so force deletes coming less than an interval apart (a
/// long evacuation) cannot hold a status back for longer than that.
fn held_back(
    patched: Option<Instant>,
    force_deleted: Option<Instant>,
    held: Option<Instant>,
    now: Instant,
) -> Option<Duration> {
    if held.is_some_and(|h| now.saturating_duration_since(h) >= 2 * STATUS_EVERY) {
        return None;
    }
    let since = now.saturating_duration_since(patched.max(force_deleted)?);
    (since < STATUS_EVERY).then(|| STATUS_EVERY - since)
}

/// Patches the status (merge patch on the status subresource) when it changed, records
/// an Event when the Blocked condition changed, and updates the blocked-fleets gauge.
/// `Some(wait)`: the status changed but the fleet's last patch is too recent
/// ([`STATUS_EVERY`]); the caller looks at the fleet again in `wait`, and the patch
/// (and any Event) goes out then: a Blocked condition that comes and goes within the
/// interval is never written, and gets no Event either. `Spacing::Now` writes at once
/// (for a caller that will not look again that soon).
pub(super) async fn write_status(
    ctx: &Reconciler,
    fleet: &CelldFleet,
    plan: &Plan,
    spacing: Spacing,
) -> Result<Option<Duration>, ReconcileError> {
    let key = ObjectRef::from_obj(fleet);
    let old = fleet.status.clone().unwrap_or_default();
    let new = &plan.status;
    let blocked_of = |s: &CelldFleetStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "Blocked")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let was = blocked_of(&old);
    let is = blocked_of(new);
    let held = if &old != new && spacing == Spacing::Spaced {
        let now = Instant::now();
        ctx.memory.fleet(&key, |f| {
            let wait = held_back(
                f.status_written,
                f.force_deleted_at,
                f.status_held_since,
                now,
            );
            if wait.is_some() {
                f.status_held_since.get_or_insert(now);
            }
            wait
        })
    } else {
        if &old == new {
            // Nothing is held any more: the next change is spaced from its own start.
            ctx.memory.fleet(&key, |f| f.status_held_since = None);
        }
        None
    };
    if &old != new && held.is_none() {
        let old_v = serde_json::to_value(&old).unwrap_or(Value::Null);
        let new_v = serde_json::to_value(new).unwrap_or(Value::Null);
        if let Some(diff) = merge_diff(&old_v, &new_v) {
            // The resourceVersion the status was computed from is a precondition: a
            // replica deposed since it read the fleet (or one with a lagging cache)
            // gets a conflict instead of overwriting a newer status.
            let body = serde_json::json!({
                "metadata": {"resourceVersion": fleet.metadata.resource_version},
                "status": diff,
            });
            let api: Api<CelldFleet> = Api::namespaced(
                ctx.client.clone(),
                fleet.metadata.namespace.as_deref().unwrap_or_default(),
            );
            if !ctx
                .gate
                .may_act_in(fleet.metadata.namespace.as_deref().unwrap_or_default())
            {
                return Ok(None);
            }
            let r = api
                .patch_status(
                    &fleet.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&body),
                )
                .await;
            match r {
                Ok(_) => {
                    ctx.metrics.status_writes.inc();
                    ctx.memory.fleet(&key, |f| {
                        f.status_written = Some(Instant::now());
                        f.status_held_since = None;
                    });
                }
                // The fleet moved on since it was read (a lagging cache, another writer):
                // its watch event brings a reconcile with the newer version.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    debug!(fleet = %key, "status not written: the CelldFleet changed since it was read");
                    return Ok(None);
                }
                Err(e) => {
                    ctx.metrics.error("status");
                    return Err(ReconcileError::Status(e));
                }
            }
        }
    }
    // A change of Blocked: its status flipped, or it stays True for another reason.
    // (While it is False its reason follows every phase of the fleet; those are not
    // changes of Blocked.)
    let changed = match (&was, &is) {
        (Some((s1, r1, _)), Some((s2, r2, _))) => s1 != s2 || (s2 == "True" && r1 != r2),
        (None, Some((s, _, _))) => s == "True",
        _ => false,
    };
    if changed
        && held.is_none()
        && let Some((status, reason, message)) = &is
    {
        let warning = status == "True";
        let note = if warning {
            format!("Blocked: {message}")
        } else {
            format!("No longer blocked: {message}")
        };
        ctx.events
            .publish(fleet, warning, reason, "Report", note)
            .await;
    }
    let blocked_now = is.as_ref().is_some_and(|(s, _, _)| s == "True");
    ctx.memory.fleet(&key, |f| f.blocked = blocked_now);
    ctx.metrics
        .blocked_fleets
        .set(ctx.memory.blocked_count() as i64);
    if ctx.memory.sweep_due(Instant::now()) {
        let fleets = ctx.stores.fleets.state();
        ctx.memory.forget_gone(
            &fleets,
            || uids(ctx.stores.pods.state()),
            || uids(ctx.stores.claims.state()),
        );
        let live = super::memory::live_fleets(&fleets);
        ctx.metrics
            .retain_fleets(|k| super::memory::is_live(&live, k));
    }
    Ok(held)
}

/// Whether a status patch keeps to [`STATUS_EVERY`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Spacing {
    /// At most one patch per fleet per interval.
    Spaced,
    /// At once.
    Now,
}

/// The uids of cached objects (what [`super::memory::Memory::forget_gone`] keeps).
fn uids<K: Resource>(objects: Vec<Arc<K>>) -> std::collections::HashSet<String> {
    objects
        .iter()
        .filter_map(|o| o.meta().uid.clone())
        .collect()
}

/// An RFC 7396 merge patch turning `old` into `new`, or None when they are equal.
/// Removed keys become `null`; arrays and scalars are replaced whole.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_diff(ov, nv) {
                            out.insert(k.clone(), d);
                        }
                    }
                    None => {
                        out.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_waits_out_the_interval_since_the_last_patch() {
        let now = Instant::now();
        assert_eq!(held_back(None, None, None, now), None);
        let ms = Duration::from_millis;
        assert_eq!(
            held_back(Some(now - ms(300)), None, None, now),
            Some(STATUS_EVERY - ms(300))
        );
        assert_eq!(held_back(Some(now - STATUS_EVERY), None, None, now), None);
        assert_eq!(held_back(Some(now - ms(5_000)), None, None, now), None);
    }

    /// A force delete holds the status back like a patch: the later of the two counts.
    #[test]
    fn a_status_waits_out_the_interval_since_the_last_force_delete() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(
            held_back(None, Some(now - ms(100)), None, now),
            Some(STATUS_EVERY - ms(100))
        );
        assert_eq!(
            held_back(Some(now - ms(2_000)), Some(now - ms(500)), None, now),
            Some(STATUS_EVERY - ms(500))
        );
        assert_eq!(
            held_back(Some(now - ms(500)), Some(now - ms(2_000)), None, now),
            Some(STATUS_EVERY - ms(500))
        );
        assert_eq!(held_back(None, Some(now - ms(5_000)), None, now), None);
    }

    /// Force deletes coming less than an interval apart hold a change back at most twice
    /// the interval from when it was first held.
    #[test]
    fn a_status_held_by_force_deletes_goes_out_after_twice_the_interval() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let recent = Some(now - ms(500));
        assert!(held_back(None, recent, Some(now - ms(1_000)), now).is_some());
        assert_eq!(
            held_back(None, recent, Some(now - 2 * STATUS_EVERY), now),
            None
        );
        assert_eq!(
            held_back(
                Some(now - ms(200)),
                recent,
                Some(now - 3 * STATUS_EVERY),
                now
            ),
            None
        );
    }

    #[test]
    fn merge_diff_sets_changes_and_nulls_removals() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1], "gone": "x"});
        let new = json!({"a": 1, "b": {"c": 2, "d": 4}, "e": [1, 2], "added": true});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"b": {"d": 4}, "e": [1, 2], "added": true, "gone": null}))
        );
        assert_eq!(merge_diff(&old, &old), None);
    }
}
