//! What the runtime remembers between reconciles, per fleet, Pod or claim, and the
//! forgetting that keeps it no larger than the cluster: a fleet is forgotten when its
//! watch reports it deleted ([`Memory::forget_fleet`]), and every map is swept of objects
//! that are gone at most every [`SWEEP_EVERY`] ([`Memory::forget_gone`]), which catches
//! what a relist dropped without a delete event, and gone Pods and claims.
//!
//! The sweep used to follow every status write. It builds sets of every fleet, Pod and
//! claim, so at 1,000 fleets it cost more than the rest of the reconcile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use celld_api::CelldFleet;
use kube::runtime::reflector::ObjectRef;

use super::infra::ServiceDrift;
use super::members::ApplicationViews;
use crate::time::Timestamp;

type Fleet = ObjectRef<CelldFleet>;

/// The sweep of gone objects runs at most this often. Until it runs, what it will drop
/// only takes memory: a gone fleet is not reconciled, and a gone Pod's or claim's uid is
/// not seen again. (A fleet deleted and created again under its name would find the old
/// one's entries; its delete event forgets them first.)
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The live fleets, by reference, with their uids.
pub fn live_fleets(fleets: &[Arc<CelldFleet>]) -> HashMap<Fleet, Option<String>> {
    fleets
        .iter()
        .map(|f| (ObjectRef::from_obj(&**f), f.metadata.uid.clone()))
        .collect()
}

/// Whether an entry keyed `k` is of a live fleet. A reference compares by namespace and
/// name only, so the uid it was made with is checked too: a fleet deleted and created
/// again under its name (its delete event missed, or an entry written by a reconcile
/// still running when it came) is a new fleet, and inherits nothing.
pub fn is_live(live: &HashMap<Fleet, Option<String>>, k: &Fleet) -> bool {
    live.get(k)
        .is_some_and(|uid| k.extra.uid.is_none() || k.extra.uid == *uid)
}

/// What is remembered of one fleet between its reconciles.
#[derive(Clone, Debug, Default)]
pub struct FleetRecord {
    /// The wake-up it asked for last (for the deadline lag metric).
    pub wake: Option<Timestamp>,
    /// Whether its last status (written, held back or unchanged) said Blocked.
    pub blocked: bool,
    /// Consecutive failed reconciles (error back-off).
    pub failures: u32,
    /// The last "cannot read completely" report (reported once, not on every
    /// reconcile).
    pub unreadable: Option<String>,
    /// Consecutive reconciles whose destructive write the fresh read did not confirm.
    pub holds: u32,
    /// The last report of ignored objects (reported once per change).
    pub ignored: Vec<String>,
    /// When its status was last patched (patches are spaced:
    /// `status_writer::STATUS_EVERY`).
    pub status_written: Option<Instant>,
    /// When it last force-deleted a Pod: its status waits one spacing from then too
    /// (`status_writer::STATUS_EVERY`).
    pub force_deleted_at: Option<Instant>,
    /// Since when a changed status has been held back (cleared by a patch): a status is
    /// held at most twice the spacing.
    pub status_held_since: Option<Instant>,
    /// Its capacity policy's latest observation and history write.
    pub capacity: Option<CapacityMemo>,
}

/// What the capacity evaluation (`super::capacity`) remembers of a fleet with a policy
/// between reconciles. Not the history itself: that lives on the reservation, so
/// another replica or a restart continues it.
#[derive(Clone, Debug)]
pub struct CapacityMemo {
    /// The latest observation, re-evaluated until the next one is due.
    pub observation: crate::capacity::Observation,
    /// When it was collected.
    pub collected: Instant,
    /// The history this process last wrote: (resourceVersion after the write, text, when).
    pub written: Option<(String, String, Instant)>,
}

/// Everything a reconcile reads or writes that is not in the caches.
#[derive(Default)]
pub struct Memory {
    /// One record per fleet ([`Memory::fleet`]).
    fleets: Mutex<HashMap<Fleet, FleetRecord>>,
    /// What this process observed of Pods' readiness and Lost claims, on its own clock
    /// (rule T2); started over on a change of leadership or a failed watch.
    pub observed: Mutex<crate::clock::Observations>,
    /// Pod uid -> (failed force deletes in a row, when to try again).
    pub force_retry: Mutex<HashMap<String, (u32, Timestamp)>>,
    /// Pod uid -> when this process force-deleted it, until the Pod cache drops the Pod
    /// (see `snapshot_of`).
    pub force_deleted: Mutex<HashMap<String, Timestamp>>,
    /// Members' application views, per fleet.
    pub views: Arc<ApplicationViews>,
    /// The rendered Services each fleet's live ones are checked against, per fleet uid.
    pub services: ServiceDrift,
    /// Each fleet's spec problems, per fleet uid and spec.
    pub validity: crate::validity::Remembered,
    /// When the last sweep of gone objects ran ([`SWEEP_EVERY`]).
    pub swept: Mutex<Option<Instant>>,
}

impl Memory {
    /// Whether a sweep of gone objects is due at `now` ([`SWEEP_EVERY`]); if so, it is
    /// taken: the next is due a whole interval later.
    pub fn sweep_due(&self, now: Instant) -> bool {
        let mut swept = self.swept.lock().expect("memory");
        let due = swept.is_none_or(|at| now.saturating_duration_since(at) >= SWEEP_EVERY);
        if due {
            *swept = Some(now);
        }
        due
    }

    /// Runs `f` on the record of fleet `key` (an empty one if none is kept), under the
    /// lock of every fleet's record: `f` must not wait on anything. A record kept for
    /// another fleet of that name (another uid: deleted and created again, its delete
    /// event missed) is dropped first: the new fleet inherits nothing.
    pub fn fleet<R>(&self, key: &Fleet, f: impl FnOnce(&mut FleetRecord) -> R) -> R {
        let mut fleets = self.fleets.lock().expect("memory");
        let other = fleets.get_key_value(key).is_some_and(|(kept, _)| {
            kept.extra.uid.is_some() && key.extra.uid.is_some() && kept.extra.uid != key.extra.uid
        });
        if other {
            fleets.remove(key);
        }
        f(fleets.entry(key.clone()).or_default())
    }

    /// How many fleets were Blocked at their last status write.
    pub fn blocked_count(&self) -> usize {
        self.fleets
            .lock()
            .expect("memory")
            .values()
            .filter(|r| r.blocked)
            .count()
    }

    /// Drops what is remembered of one fleet (its watch reported it deleted).
    pub fn forget_fleet(&self, fleet: &CelldFleet) {
        let key = ObjectRef::from_obj(fleet);
        let uid = fleet.metadata.uid.as_deref();
        self.keep_fleets(|k| *k != key, |u| Some(u) != uid);
    }

    /// Keeps what is remembered of the fleets `keep` keeps (by reference) and
    /// `keep_uid` keeps (by uid).
    fn keep_fleets(&self, keep: impl Fn(&Fleet) -> bool, keep_uid: impl Fn(&str) -> bool) {
        self.fleets.lock().expect("memory").retain(|k, _| keep(k));
        self.views.retain(&keep);
        self.services.retain(&keep_uid);
        self.validity.retain(&keep_uid);
    }

    /// Drops what is remembered of fleets, Pods and claims that are gone. `pods` and
    /// `claims` give the live uids; each is called only when a map may hold such an
    /// entry, and never while a lock is held.
    pub fn forget_gone(
        &self,
        fleets: &[Arc<CelldFleet>],
        pods: impl FnOnce() -> HashSet<String>,
        claims: impl FnOnce() -> HashSet<String>,
    ) {
        let live = live_fleets(fleets);
        let uids: HashSet<&str> = fleets
            .iter()
            .filter_map(|f| f.metadata.uid.as_deref())
            .collect();
        self.keep_fleets(|k| is_live(&live, k), |u| uids.contains(u));
        // Three maps are keyed by Pod uid: one scan of the Pod cache serves them all,
        // and only when one of them holds anything.
        let observed = !self.observed.lock().expect("memory").is_empty();
        let mut live_pods = None;
        if !self.force_retry.lock().expect("memory").is_empty()
            || !self.force_deleted.lock().expect("memory").is_empty()
            || observed
        {
            let live = live_pods.insert(pods());
            self.force_retry
                .lock()
                .expect("memory")
                .retain(|uid, _| live.contains(uid));
            self.force_deleted
                .lock()
                .expect("memory")
                .retain(|uid, _| live.contains(uid));
        }
        if let (true, Some(pods)) = (observed, live_pods) {
            let claims = claims();
            self.observed
                .lock()
                .expect("memory")
                .retain(|u| pods.contains(u), |u| claims.contains(u));
        }
    }

    /// How many entries each map holds (for the test that memory stays flat).
    pub fn sizes(&self) -> [usize; 7] {
        fn n<K, V>(m: &Mutex<HashMap<K, V>>) -> usize {
            m.lock().expect("memory").len()
        }
        [
            n(&self.fleets),
            self.observed.lock().expect("memory").len(),
            n(&self.force_retry),
            n(&self.force_deleted),
            self.views.len(),
            self.services.len(),
            self.validity.len(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::runtime::members::View;

    fn fleet(i: usize) -> Arc<CelldFleet> {
        let identity = format!("7kq2m9x4c1v8b3n6z5h0j2w{i:04}");
        Arc::new(crate::testkit::fleet_object(
            "apps",
            &format!("f{i}"),
            &identity,
        ))
    }

    /// A record with every field set.
    fn every_field(t: Timestamp) -> FleetRecord {
        FleetRecord {
            wake: Some(t),
            blocked: true,
            failures: 1,
            unreadable: Some("x".into()),
            holds: 1,
            ignored: vec!["x".into()],
            status_written: Some(Instant::now()),
            force_deleted_at: Some(Instant::now()),
            status_held_since: Some(Instant::now()),
            capacity: Some(CapacityMemo {
                observation: Default::default(),
                collected: Instant::now(),
                written: None,
            }),
        }
    }

    /// An application view of `key`, as a finished observation leaves it.
    fn remember_a_view(m: &Memory, key: &Fleet) {
        m.views.remember(
            key,
            View {
                at: Instant::now(),
                status: celld_api::ApplicationStatus {
                    converged: "True".into(),
                    reason: "Converged".into(),
                    observed_members: 3,
                    message: None,
                },
                versions: Vec::new(),
            },
        );
    }

    /// Fleets come and go (a few live at a time, hundreds over the test): every map,
    /// the rendered-Services cache too, holds only the live ones.
    #[test]
    fn memory_stays_flat_as_fleets_come_and_go() {
        let m = Memory::default();
        let mut live: Vec<Arc<CelldFleet>> = Vec::new();
        for i in 0..300 {
            let f = fleet(i);
            let key = ObjectRef::from_obj(&*f);
            let t = Timestamp(i as i64);
            m.fleet(&key, |r| *r = every_field(t));
            m.observed
                .lock()
                .unwrap()
                .seen_lost_for_tests(&format!("claim-{i}"));
            m.force_retry
                .lock()
                .unwrap()
                .insert(format!("pod-{i}"), (1, t));
            m.force_deleted
                .lock()
                .unwrap()
                .insert(format!("pod-{i}"), t);
            remember_a_view(&m, &key);
            let _ = m.services.verify(&f, |_| None);
            let _ = m.validity.problems(&f);
            live.push(f);
            if live.len() > 3 {
                live.remove(0);
            }
            // The Pods and claims of the live fleets only.
            let pods: HashSet<String> = (i.saturating_sub(2)..=i)
                .map(|j| format!("pod-{j}"))
                .collect();
            let claims: HashSet<String> = (i.saturating_sub(2)..=i)
                .map(|j| format!("claim-{j}"))
                .collect();
            m.forget_gone(&live, || pods, || claims);
            for (which, n) in m.sizes().iter().enumerate() {
                assert!(*n <= 3, "map {which} holds {n} entries after fleet {i}");
            }
        }
        m.forget_gone(&[], HashSet::new, HashSet::new);
        assert_eq!(m.sizes(), [0; 7]);
    }

    /// A deleted fleet is forgotten at once, every map of it; the others stay.
    #[test]
    fn a_deleted_fleet_is_forgotten_and_only_it() {
        let m = Memory::default();
        let (a, b) = (fleet(1), fleet(2));
        for f in [&a, &b] {
            let key = ObjectRef::from_obj(&**f);
            remember_a_view(&m, &key);
            m.fleet(&key, |r| *r = every_field(Timestamp(1)));
            let _ = m.services.verify(f, |_| None);
            let _ = m.validity.problems(f);
        }
        let both = m.sizes();
        m.forget_fleet(&a);
        for (which, (before, after)) in both.iter().zip(m.sizes()).enumerate() {
            assert_eq!(after, before / 2, "map {which}");
        }
        m.forget_fleet(&b);
        assert_eq!(m.sizes(), [0; 7]);
    }

    /// A fleet created again under a deleted one's name is not the deleted one: the
    /// sweep drops what was remembered of the old, whose uid differs.
    #[test]
    fn a_fleet_created_again_under_its_name_inherits_nothing() {
        let m = Memory::default();
        let old = fleet(1);
        m.fleet(&ObjectRef::from_obj(&*old), |r| r.failures = 5);
        let mut new = (*old).clone();
        new.metadata.uid = Some("uid-new".into());
        m.forget_gone(&[Arc::new(new)], HashSet::new, HashSet::new);
        assert_eq!(m.sizes()[0], 0);
        m.fleet(&ObjectRef::from_obj(&*old), |r| r.failures = 5);
        m.forget_gone(std::slice::from_ref(&old), HashSet::new, HashSet::new);
        assert_eq!(
            m.fleet(&ObjectRef::from_obj(&*old), |r| r.failures),
            5,
            "the same fleet stays"
        );
        // Before any sweep: the new fleet's first reconcile finds the old one's record
        // under its name and starts afresh.
        let mut again = (*old).clone();
        again.metadata.uid = Some("uid-again".into());
        assert_eq!(m.fleet(&ObjectRef::from_obj(&again), |r| r.failures), 0);
        m.fleet(&ObjectRef::from_obj(&again), |r| r.failures = 2);
        assert_eq!(m.fleet(&ObjectRef::from_obj(&again), |r| r.failures), 2);
        assert_eq!(m.sizes()[0], 1);
    }

    #[test]
    fn a_sweep_is_due_once_per_interval() {
        let m = Memory::default();
        let t0 = Instant::now();
        assert!(m.sweep_due(t0), "the first is due at once");
        assert!(!m.sweep_due(t0 + SWEEP_EVERY / 2));
        assert!(m.sweep_due(t0 + SWEEP_EVERY));
        assert!(!m.sweep_due(t0 + SWEEP_EVERY + SWEEP_EVERY / 2));
    }
}
