//! Which namespaces this install holds the claim of, as last decided by the claimer
//! ([`super::claims`]), and read synchronously by every write through the leader gate
//! (`super::leader::Gate::may_act_in`). Apart from both, so that the gate reads it
//! without depending on the claimer, which campaigns through the gate.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Where this install stands in one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The claim is held and renewed recently enough: writes may start.
    Held,
    /// Not known yet (or its renewal failed): no write starts; the claimer is asked.
    Pending,
    /// Another install holds the claim: this one stays out.
    Elsewhere(String),
}

/// One namespace's claim as last decided.
#[derive(Clone, Debug)]
pub(super) enum Claim {
    /// Held until this instant (two thirds of the claim after its last renewal).
    Held(Instant),
    /// Held by this other install.
    Elsewhere(String),
}

/// This install's claims, per namespace: written by the claimer, read synchronously by
/// every write (`Gate::may_act_in`).
pub struct Table {
    claims: Mutex<BTreeMap<String, Claim>>,
    /// False for a gate that is always open (tests, tools): every namespace counts as
    /// held.
    needed: bool,
    /// Wakes the claimer: a reconcile found a namespace it has not claimed yet.
    wanted: Notify,
}

impl Table {
    /// Claims are needed before acting (the healer).
    pub fn needed() -> Table {
        Table {
            claims: Mutex::default(),
            needed: true,
            wanted: Notify::new(),
        }
    }

    /// Every namespace counts as held.
    pub fn not_needed() -> Table {
        Table {
            needed: false,
            ..Table::needed()
        }
    }

    /// Whether this install holds `namespace`'s claim now.
    pub fn holds(&self, namespace: &str) -> bool {
        self.standing(namespace) == Standing::Held
    }

    /// Where this install stands in `namespace` now.
    pub fn standing(&self, namespace: &str) -> Standing {
        if !self.needed {
            return Standing::Held;
        }
        match self.lock().get(namespace) {
            Some(Claim::Held(until)) if Instant::now() < *until => Standing::Held,
            Some(Claim::Elsewhere(holder)) => Standing::Elsewhere(holder.clone()),
            _ => Standing::Pending,
        }
    }

    /// Asks the claimer for a round now (a fleet in a namespace not claimed yet).
    pub fn want(&self) {
        self.wanted.notify_one();
    }

    /// Waits until a reconcile asks for a round ([`Table::want`]).
    pub(super) async fn wanted(&self) {
        self.wanted.notified().await;
    }

    /// Forgets every claim (leadership changed or the healer stops).
    pub(super) fn clear(&self) {
        self.lock().clear();
    }

    pub(super) fn set(&self, namespace: &str, claim: Option<Claim>) -> Option<Claim> {
        let mut claims = self.lock();
        match claim {
            Some(c) => claims.insert(namespace.to_string(), c),
            None => claims.remove(namespace),
        }
    }

    #[cfg(test)]
    pub(super) fn set_held_for_test(&self, namespace: &str, until: Instant) {
        self.set(namespace, Some(Claim::Held(until)));
    }

    pub(super) fn count(&self, held: bool) -> usize {
        let now = Instant::now();
        self.lock()
            .values()
            .filter(|c| match c {
                Claim::Held(until) => held && now < *until,
                Claim::Elsewhere(_) => !held,
            })
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Claim>> {
        self.claims.lock().expect("claims lock")
    }
}
