//! How many fleets are reconciled at once, in two lanes: one for fleets whose rule
//! deadline has come (a force delete, a replacement), one for everything else (status,
//! growth on a watch event, capacity).
//!
//! A reconcile mostly waits on the API server. With one lane, when a zone is lost every
//! fleet with a member there falls due within a second or two, and each due fleet waited
//! in line behind reconciles that only patch a status (the replacement Pods' events
//! bring a reconcile of every fleet hit). A due fleet's write was then late by the whole
//! line, not by its own round trips. The due lane is its own line, so a deadline waits
//! only for other deadlines.
//!
//! Which lane is a scheduling choice only: every reconcile of a fleet, in either lane,
//! decides and confirms exactly as before, and the controller never runs two reconciles
//! of one fleet at once. No safety rule depends on it.

use std::time::Duration;

use tokio::sync::{AcquireError, Semaphore, SemaphorePermit};

use crate::time::Timestamp;

/// The lane of one reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The wake-up the fleet's last decision asked for (a rule's deadline) has come.
    Due,
    /// Anything else.
    Other,
}

/// The lane of a reconcile starting at `now` for a fleet whose last decision asked to be
/// woken at `wake` (`None`: it asked for nothing). A wake-up up to `early` ahead counts as
/// come: the queue is asked for wake-ups a debounce early and may start them that much
/// before the deadline.
pub fn lane(wake: Option<Timestamp>, now: Timestamp, early: Duration) -> Lane {
    let early_ms = i64::try_from(early.as_millis()).unwrap_or(i64::MAX);
    match wake {
        Some(w) if w.0 <= now.0.saturating_add(early_ms) => Lane::Due,
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

    /// Waits for a slot in `lane`; an error only once the slots are closed (shutdown).
    pub async fn acquire(&self, lane: Lane) -> Result<SemaphorePermit<'_>, AcquireError> {
        match lane {
            Lane::Due => self.due.acquire().await,
            Lane::Other => self.other.acquire().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EARLY: Duration = Duration::from_millis(250);

    #[test]
    fn a_fleet_is_due_once_its_wake_up_has_come() {
        let now = Timestamp(10_000);
        assert_eq!(lane(Some(Timestamp(9_000)), now, EARLY), Lane::Due);
        assert_eq!(lane(Some(Timestamp(10_000)), now, EARLY), Lane::Due);
        // Started by the queue up to a debounce before the deadline.
        assert_eq!(lane(Some(Timestamp(10_250)), now, EARLY), Lane::Due);
        assert_eq!(lane(Some(Timestamp(10_251)), now, EARLY), Lane::Other);
        assert_eq!(lane(None, now, EARLY), Lane::Other);
    }

    /// A due fleet gets a slot while every other slot is taken and more reconciles wait
    /// for one: the lanes do not share a line.
    #[tokio::test]
    async fn a_due_fleet_does_not_wait_behind_the_others() {
        let slots = std::sync::Arc::new(Slots::new(1, 2));
        let a = slots.acquire(Lane::Other).await.expect("open");
        let b = slots.acquire(Lane::Other).await.expect("open");
        let waiting = {
            let slots = slots.clone();
            tokio::spawn(async move {
                let _p = slots.acquire(Lane::Other).await.expect("open");
            })
        };
        tokio::task::yield_now().await;
        let due = tokio::time::timeout(Duration::from_secs(5), slots.acquire(Lane::Due))
            .await
            .expect("a due slot at once, whatever the other lane holds");
        assert!(due.is_ok());
        assert!(!waiting.is_finished(), "the other lane is still full");
        drop((a, b));
        waiting.await.expect("the waiting reconcile gets its slot");
    }
}
