//! When a fleet is looked at again: the queue's debounce, the wake-up `decide` asked
//! for turned into the controller's next step, and the back-offs after a failure.
//!
//! The delays a rule asks for are `decide`'s (`Plan::wake_at`), and only turned into a
//! requeue here; the back-offs after a failure are here. A few short fixed waits stay
//! where they are taken (a second while the caches sync or a claim is pending, the status
//! spacing of `super::status_writer`).

use std::sync::Arc;
use std::time::Duration;

use celld_api::CelldFleet;
use kube::runtime::controller::Action as KAction;
use kube::runtime::reflector::ObjectRef;
use tracing::warn;

use super::context::{ReconcileError, Reconciler};
use crate::time::{Span, Timestamp};

/// How long the queue holds a fleet's trigger to merge it with the ones that follow (a
/// rollout's dozens of Pod events make one reconcile). The queue adds it to every
/// requested wake-up too, so wake-ups are asked for that much early ([`until`]).
pub(super) const DEBOUNCE: Duration = Duration::from_millis(250);

/// After a write refused by its precondition, the fleet is looked at again this much
/// later (the caches have a moment to catch up).
pub(super) const AFTER_CONFLICT: Duration = Duration::from_secs(2);

/// After a force delete that failed (it waits out its own back-off), the fleet is looked
/// at again this much later, so that its later rules still run.
pub(super) const AFTER_BACK_OFF: Duration = Duration::from_secs(1);

/// A delay that doubles with each attempt, from `first` up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Doubling {
    first: Duration,
    max: Duration,
}

impl Doubling {
    /// The delay after the `n`th attempt in a row (`n` from 1).
    pub(super) fn after(self, n: u32) -> Duration {
        let shift = n.saturating_sub(1).min(16);
        self.first.saturating_mul(1 << shift).min(self.max)
    }
}

/// A reconcile that failed is retried after 2 s, doubling to 256 s.
pub(super) const FAILED_RECONCILE: Doubling = Doubling {
    first: Duration::from_secs(2),
    max: Duration::from_secs(256),
};

/// A destructive write the fresh read did not confirm: looked at again after 5 s,
/// doubling to 5 min while the caches and the API server keep disagreeing (a lasting
/// cause, such as an unlabelled workload named like the fleet, must not become a read
/// every few seconds).
pub(super) const UNCONFIRMED: Doubling = Doubling {
    first: Duration::from_secs(5),
    max: Duration::from_secs(300),
};

/// A Pod whose force delete failed (rule F1) is tried again after 10 s, doubling to
/// 5 min; the fleet's other rules go on meanwhile.
pub(super) const FORCE_DELETE_RETRY: Doubling = Doubling {
    first: Duration::from_secs(10),
    max: Duration::from_secs(300),
};

/// The next look after the `n`th unconfirmed write in a row. After a first
/// disagreement, a deadline the fresh read still waits for (`due`, from now: a force
/// delete due in a moment, the caches' decision came just before it) is looked at on
/// time rather than a back-off later; a lasting disagreement backs off whatever the
/// wake-up.
pub(super) fn after_unconfirmed(n: u32, due: Option<Span>) -> Duration {
    let back_off = UNCONFIRMED.after(n);
    match due.filter(|_| n == 1) {
        Some(d) => {
            let ms = u64::try_from(d.millis()).unwrap_or(0);
            back_off.min(Duration::from_millis(ms.max(100)))
        }
        None => back_off,
    }
}

/// The controller's retry after a failed reconcile ([`FAILED_RECONCILE`], counted per
/// fleet until a reconcile succeeds).
pub(super) fn error_policy(
    fleet: Arc<CelldFleet>,
    err: &ReconcileError,
    ctx: Arc<Reconciler>,
) -> KAction {
    let key = ObjectRef::from_obj(&*fleet);
    let n = ctx.memory.fleet(&key, |f| {
        f.failures = f.failures.saturating_add(1);
        f.failures
    });
    let delay = FAILED_RECONCILE.after(n);
    warn!(fleet = %key, error = %err, retry_in = ?delay, "reconcile failed");
    KAction::requeue(delay)
}

/// The requeue delay that makes the queue run the fleet at `t`: the queue adds its
/// debounce to every delay, so that much less is asked for; a little after `t` rather
/// than before, since a run before the deadline finds nothing due and waits a whole
/// debounce more.
pub(super) fn until(t: Timestamp, now: Timestamp) -> Duration {
    early(Duration::from_millis((t - now).millis().max(0) as u64))
}

/// The requeue delay that makes the queue run the fleet `wanted` from now (see
/// [`until`]).
pub(super) fn early(wanted: Duration) -> Duration {
    const AFTER: Duration = Duration::from_millis(10);
    (wanted + AFTER)
        .saturating_sub(DEBOUNCE)
        .max(Duration::from_millis(1))
}

/// Turns `decide`'s wake-up into the controller's next step, remembering it for the
/// deadline-lag metric.
pub(super) fn next_step(
    ctx: &Reconciler,
    key: &ObjectRef<CelldFleet>,
    wake_at: Option<Timestamp>,
    now: Timestamp,
) -> KAction {
    ctx.memory.fleet(key, |f| f.wake = wake_at);
    match wake_at {
        Some(t) => KAction::requeue(until(t, now)),
        None => KAction::await_change(),
    }
}

/// The next step of a reconcile the leader gate turned away: a standby waits (becoming
/// leader reconciles every fleet); a leader whose renewal is late looks again shortly
/// (`Gate::lapsed`: nothing else would bring the fleet back).
pub(super) fn turned_away(ctx: &Reconciler) -> KAction {
    if ctx.gate.lapsed() {
        KAction::requeue(Duration::from_secs(1))
    } else {
        KAction::await_change()
    }
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

    /// Each back-off doubles from its first delay and stays at its ceiling, however
    /// many attempts follow.
    #[test]
    fn back_offs_double_up_to_their_ceiling() {
        let secs = |d: Doubling| (1..=10).map(|n| d.after(n).as_secs()).collect::<Vec<_>>();
        assert_eq!(
            secs(FAILED_RECONCILE),
            [2, 4, 8, 16, 32, 64, 128, 256, 256, 256]
        );
        assert_eq!(
            secs(UNCONFIRMED),
            [5, 10, 20, 40, 80, 160, 300, 300, 300, 300]
        );
        assert_eq!(
            secs(FORCE_DELETE_RETRY),
            [10, 20, 40, 80, 160, 300, 300, 300, 300, 300]
        );
        assert_eq!(FAILED_RECONCILE.after(u32::MAX), Duration::from_secs(256));
    }

    /// A first disagreement looks again at a deadline due sooner than the back-off (not
    /// before 100 ms); a second one backs off whatever the deadline.
    #[test]
    fn an_unconfirmed_write_looks_again_at_a_near_deadline_once() {
        let ms = |d: Duration| d.as_millis();
        assert_eq!(ms(after_unconfirmed(1, None)), 5_000);
        assert_eq!(ms(after_unconfirmed(1, Some(Span(1_500)))), 1_500);
        assert_eq!(ms(after_unconfirmed(1, Some(Span(20)))), 100);
        assert_eq!(ms(after_unconfirmed(1, Some(Span(-20)))), 100);
        assert_eq!(ms(after_unconfirmed(1, Some(Span(60_000)))), 5_000);
        assert_eq!(ms(after_unconfirmed(2, Some(Span(1_500)))), 10_000);
    }
}
