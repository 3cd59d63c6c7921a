//! How many fleets are reconciled at once, in two lanes: one for fleets whose rule
//! deadline has come (a force delete, a replacement), one for everything else (status,
//! growth on a watch event, capacity).
//!
//! A reconcile mostly waits on the API server. With one lane, when a zone is lost every
//! fleet with a member there falls due within a second or two, and each due fleet waited
//! in line behind reconciles that only patch a status (the replacement Pods' events
//! bring a reconcile of every fleet hit). The due lane is a line of its own, and a
//! reconcile already waiting in the other line when its fleet's deadline comes moves to
//! it (the controller holds a fleet's wake-up while a reconcile of that fleet runs, so
//! that reconcile is the one that must act).
//!
//! Which lane is a scheduling choice only: every reconcile of a fleet, in either lane,
//! decides and confirms exactly as before, and the controller never runs two reconciles
//! of one fleet at once. No safety rule depends on it.

use std::time::Duration;

use tokio::sync::{AcquireError, Semaphore, SemaphorePermit};

use crate::time::{Span, Timestamp};

/// How long after its wake-up a fleet still counts as due. A deadline not acted on by
/// then is held (the fresh read disagreed; it backs off for up to minutes) or failing
/// (error back-off): its later reconciles, mostly status-only ones on watch events, are
/// no longer deadline work and must not take the due lane from fleets just due.
pub const DUE_FOR: Span = Span::secs(60);

/// The lane of one reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The wake-up the fleet's last decision asked for (a rule's deadline) has come,
    /// less than [`DUE_FOR`] ago.
    Due,
    /// Anything else.
    Other,
}

impl Lane {
    /// As the `lane` label of `celld_healer_slot_wait_seconds` names it.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Due => "due",
            Lane::Other => "other",
        }
    }
}

/// The lane of a reconcile starting at `now` for a fleet whose last decision asked to be
/// woken at `wake` (`None`: it asked for nothing).
pub fn lane(wake: Option<Timestamp>, now: Timestamp) -> Lane {
    match wake {
        Some(w) if w <= now && now - w <= DUE_FOR => Lane::Due,
        _ => Lane::Other,
    }
}

/// The two lanes' slots: each a fair semaphore (first come, first served in its lane).
pub struct Slots {
    due: Semaphore,
    other: Semaphore,
}

impl Slots {
    /// `due` slots for due fleets and `other` for the rest.
    pub fn new(due: usize, other: usize) -> Slots {
        Slots {
            due: Semaphore::new(due),
            other: Semaphore::new(other),
        }
    }

    /// Waits for a slot for a reconcile starting at `now` of a fleet whose last decision
    /// asked to be woken at `wake`: in the due lane if that has come ([`lane`]);
    /// otherwise in the other lane, until a slot frees there or the wake-up comes,
    /// whichever is first, and then in the due lane. Returns the lane the slot is in.
    /// An error only once the slots are closed (shutdown).
    pub async fn acquire(
        &self,
        wake: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<(Lane, SemaphorePermit<'_>), AcquireError> {
        if lane(wake, now) == Lane::Due {
            return Ok((Lane::Due, self.due.acquire().await?));
        }
        let Some(until_due) = wake.filter(|w| *w > now).map(|w| w - now) else {
            return Ok((Lane::Other, self.other.acquire().await?));
        };
        let until_due = Duration::from_millis(u64::try_from(until_due.millis()).unwrap_or(0));
        tokio::select! {
            p = self.other.acquire() => Ok((Lane::Other, p?)),
            () = tokio::time::sleep(until_due) => Ok((Lane::Due, self.due.acquire().await?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_fleet_is_due_from_its_wake_up_for_a_while() {
        let now = Timestamp(100_000);
        assert_eq!(lane(Some(Timestamp(99_000)), now), Lane::Due);
        assert_eq!(lane(Some(now), now), Lane::Due);
        assert_eq!(lane(Some(now - DUE_FOR), now), Lane::Due);
        // Held or failing since: no longer deadline work.
        assert_eq!(lane(Some(now - DUE_FOR - Span(1)), now), Lane::Other);
        // Started by a watch event before the deadline.
        assert_eq!(lane(Some(Timestamp(100_001)), now), Lane::Other);
        assert_eq!(lane(None, now), Lane::Other);
    }

    /// Both slots of the other lane taken, and one more reconcile waiting there.
    async fn other_lane_full(slots: &Arc<Slots>) -> tokio::task::JoinHandle<()> {
        let held: Vec<_> = futures::future::join_all([
            slots.acquire(None, Timestamp(0)),
            slots.acquire(None, Timestamp(0)),
        ])
        .await;
        for p in held {
            // Taken for the rest of the test.
            p.expect("open").1.forget();
        }
        let s = slots.clone();
        tokio::spawn(async move {
            let _p = s.acquire(None, Timestamp(0)).await.expect("open");
        })
    }

    /// A due fleet gets a slot while every other slot is taken and more reconciles wait
    /// for one: the lanes do not share a line.
    #[tokio::test(start_paused = true)]
    async fn a_due_fleet_does_not_wait_behind_the_others() {
        let slots = Arc::new(Slots::new(1, 2));
        let waiting = other_lane_full(&slots).await;
        tokio::task::yield_now().await;
        let now = Timestamp(10_000);
        let (lane, _p) = tokio::time::timeout(
            Duration::from_millis(1),
            slots.acquire(Some(Timestamp(9_000)), now),
        )
        .await
        .expect("a due slot at once, whatever the other lane holds")
        .expect("open");
        assert_eq!(lane, Lane::Due);
        assert!(!waiting.is_finished(), "the other lane is still full");
    }

    /// A reconcile that started before its fleet's deadline and still waits for a slot
    /// in the other lane when the deadline comes takes a due slot then.
    #[tokio::test(start_paused = true)]
    async fn a_reconcile_waiting_in_the_other_lane_moves_when_its_deadline_comes() {
        let slots = Arc::new(Slots::new(1, 2));
        let _waiting = other_lane_full(&slots).await;
        let now = Timestamp(10_000);
        let started = tokio::time::Instant::now();
        let (lane, _p) = tokio::time::timeout(
            Duration::from_secs(60),
            slots.acquire(Some(Timestamp(12_000)), now),
        )
        .await
        .expect("a due slot once the deadline came")
        .expect("open");
        assert_eq!(lane, Lane::Due);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    /// A fleet with no deadline coming waits in the other lane.
    #[tokio::test(start_paused = true)]
    async fn a_fleet_with_no_deadline_waits_in_the_other_lane() {
        let slots = Arc::new(Slots::new(1, 2));
        let _waiting = other_lane_full(&slots).await;
        let r = tokio::time::timeout(Duration::from_secs(600), slots.acquire(None, Timestamp(0)))
            .await;
        assert!(r.is_err(), "no slot while the other lane is full");
    }
}
