//! Clocks the healer can trust, for every delay that justifies a destructive write.
//!
//! Two kinds of timestamps reach the healer, and neither is read against its own wall
//! clock directly:
//!
//! - **Written by the API server** (creation and deletion timestamps; a Pod's
//!   deletionTimestamp already includes its grace). They are moved onto the healer's
//!   clock through [`ServerClock`]: the API server's time measured from the `Date` of its
//!   responses on the healer's monotonic clock, rounded so that a deadline is never
//!   reached early ([`ServerClock::offset`]).
//! - **Written by other machines** (a kubelet's Ready condition). A node whose clock is
//!   12 minutes behind would make a blip look like 12 minutes down, and the fresh read
//!   confirms the same timestamps. These are timed by the healer's own continuous
//!   observation instead ([`Observations`]): since when this process has seen the Pod in
//!   its current state, or the claim Lost, on its monotonic clock. A restart, a change of
//!   leader or a failed watch starts every observation over ([`Observations::epoch`]):
//!   the price is that a member already down when that happens waits a whole
//!   replacement delay again (a Lost claim a whole confirmation window).
//!
//! Rule T1 (`decide`) holds every destructive write while the measured skew exceeds
//! `--max-clock-skew` or was never measured: the conversions above do not depend on the
//! skew being small, but a skew that large means something is wrong with the clocks,
//! and a destructive write can wait until someone looks.

use std::collections::HashMap;

use crate::decide::mutation;
use crate::snapshot::{NodeState, Snapshot};
use crate::time::{Span, Timestamp};

/// A reading of the healer's monotonic clock, in milliseconds from an arbitrary origin
/// (the runtime: its start). Unlike the wall clock it never steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Mono(pub i64);

/// The healer's two clocks, read at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// The wall clock (what `decide` is given as `now`).
    pub wall: Timestamp,
    /// The monotonic clock.
    pub mono: Mono,
}

impl Now {
    /// The wall-clock time, as of now, of the monotonic reading `at`: `wall` minus the
    /// time elapsed since `at`. A wall clock that stepped since `at` does not shift it.
    pub fn wall_of(&self, at: Mono) -> Timestamp {
        self.wall - Span(self.mono.0.saturating_sub(at.0))
    }
}

/// One response of the API server: the `Date` it carried (whole seconds, truncated) and
/// when the request was sent and the response received, on the monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateSample {
    /// The `Date` header, on the API server's clock.
    pub date: Timestamp,
    /// When the request was sent.
    pub sent: Mono,
    /// When the response's headers arrived.
    pub received: Mono,
}

/// How many recent samples bound the API server's clock together ([`ServerClock`]).
pub const SAMPLES: usize = 8;

/// Samples received longer ago than this no longer bound the API server's clock (the
/// latest always does).
pub const SAMPLE_WINDOW: Span = Span::secs(10);

/// How far the API server's clock may drift from the healer's monotonic clock, in
/// milliseconds per second of a sample's age: 1 ms/s, two clocks each slewed by NTP at
/// its usual most (500 ppm).
const DRIFT_MS_PER_S: i64 = 1;

/// The API server's clock as the healer measured it.
///
/// Each response's `Date` (whole seconds, truncated) was written between the request's
/// sending and the response's arrival, so it bounds the server's clock minus the
/// healer's monotonic clock to `[date - received, date + 1 s - sent)`. One sample leaves
/// a second of doubt, and a deadline read from the lower bound (as every deadline is:
/// [`ServerClock::offset`]) is reached up to a second late. Samples of the last
/// [`SAMPLE_WINDOW`] bound it together: their intervals, each widened by the drift its
/// age allows, all hold the server's clock if it ran steadily since, so their
/// intersection does too, and two samples on either side of a second's tick narrow it to
/// their round trips. A server clock stepped within the window is seen when the
/// intervals no longer meet, and then the latest sample alone bounds it, as before. What
/// cannot be seen (a step back smaller than the doubt left, a clock slewed faster than
/// the drift allowed, API server replicas whose clocks differ by less than the doubt)
/// moves the lower bound at most to the latest sample's upper bound: a deadline is then
/// reached at most one second plus that sample's round trip early, against margins of
/// minutes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ServerClock {
    /// The latest sample; `None` until the first response.
    pub latest: Option<DateSample>,
    /// The most recent samples (the latest among them), in no order.
    recent: [Option<DateSample>; SAMPLES],
}

impl ServerClock {
    /// Keeps a new sample. The latest one wins, whatever its latency: it is bounded by
    /// its own send and receive times, and an older sample would carry the drift of the
    /// monotonic clock since. It takes the place of the oldest recent sample.
    pub fn record(&mut self, s: DateSample) {
        if self.latest.is_none_or(|l| s.received >= l.received) {
            self.latest = Some(s);
        }
        let slot = self.recent.iter_mut().min_by_key(|x| x.map(|x| x.received));
        if let Some(slot) = slot
            && slot.is_none_or(|x| x.received < s.received)
        {
            *slot = Some(s);
        }
    }

    /// Bounds on the API server's clock minus the monotonic clock (ms) from one sample,
    /// widened by the drift its age at `now` allows.
    fn bounds_of(s: &DateSample, now: Mono) -> (i64, i64) {
        // From the sending, rounded up: never less than the drift allowed.
        let age = now.0.saturating_sub(s.sent.0).max(0);
        let drift = (age.saturating_mul(DRIFT_MS_PER_S) + 999) / 1000;
        (
            s.date.0 - s.received.0 - drift,
            s.date.0 + 1000 - s.sent.0 + drift,
        )
    }

    /// Bounds on the API server's time now (see the type's documentation): from the
    /// recent samples together, or from the latest alone when they do not agree.
    pub fn server_now(&self, now: Now) -> Option<(Timestamp, Timestamp)> {
        let latest = self.latest?;
        let alone = Self::bounds_of(&latest, now.mono);
        let (low, high) = self
            .recent
            .iter()
            .flatten()
            .filter(|s| now.mono.0.saturating_sub(s.received.0) <= SAMPLE_WINDOW.0)
            .map(|s| Self::bounds_of(s, now.mono))
            .fold(alone, |(l, h), (sl, sh)| (l.max(sl), h.min(sh)));
        let (low, high) = if low <= high { (low, high) } else { alone };
        Some((Timestamp(now.mono.0 + low), Timestamp(now.mono.0 + high)))
    }

    /// The healer's wall clock minus the API server's, at the middle of the bounds:
    /// positive when the healer runs ahead. `None` until measured.
    pub fn skew(&self, now: Now) -> Option<Span> {
        let (low, high) = self.server_now(now)?;
        let mid = low + Span((high - low).millis() / 2);
        Some(now.wall - mid)
    }

    /// What to add to an API-server timestamp to put it on the healer's wall clock, so
    /// that a deadline computed from it is reached on the healer's clock no earlier than
    /// on the API server's: the wall clock minus the server's *lowest* possible time.
    /// Zero until measured (rule T1 holds destructive writes meanwhile).
    pub fn offset(&self, now: Now) -> Span {
        match self.server_now(now) {
            Some((low, _)) => now.wall - low,
            None => Span(0),
        }
    }
}

/// Puts the API server's timestamps of a snapshot on the healer's wall clock (see
/// [`ServerClock::offset`]) and records the skew for rule T1.
pub fn to_healer_clock(snap: &mut Snapshot, clock: &ServerClock, now: Now) {
    snap.clock_skew = clock.skew(now);
    let offset = clock.offset(now);
    if !mutation::on("T-server") {
        return;
    }
    for p in &mut snap.pods {
        p.created = p.created + offset;
        p.deletion = p.deletion.map(|t| t + offset);
    }
    for c in &mut snap.claims {
        c.created = c.created + offset;
        c.deletion = c.deletion.map(|t| t + offset);
    }
}

/// What one Pod was seen as, and since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PodSeen {
    ready: bool,
    /// The Ready condition's own transition time: a change means the Pod went through
    /// a transition even if this process missed it, so the observation starts over.
    transition: Option<Timestamp>,
    since: Mono,
}

/// The healer's own observation of the facts other machines time: per Pod, since when it
/// has been seen ready or not ready; per claim, since when it has been seen Lost. Kept
/// by the runtime (and the simulation) between reconciles, updated from the watch caches
/// only: a fresh read is compared with it but never starts an observation, so a stale
/// cache and a fresh read cannot take turns restarting it.
#[derive(Clone, Debug, Default)]
pub struct Observations {
    epoch: u64,
    pods: HashMap<String, PodSeen>,
    /// Claim uid -> (the resourceVersion it was first seen Lost at, when). A Lost claim
    /// has no transition time of its own: any change to it (Bound and Lost again, while
    /// a watch skipped the versions in between) starts its observation over.
    lost: HashMap<String, (String, Mono)>,
    /// Node name -> since when it has been seen NotReady or Unknown (rule F1). The
    /// node's condition times are its kubelet's or the node controller's clocks.
    /// Keyed by the node and its Ready condition's transition time, so two Pods that see
    /// one node differently (one read later) never restart each other's observation.
    unreachable: HashMap<(String, Option<Timestamp>), Mono>,
    /// Pod uid -> when its celld last answered that it is recovering its predecessor's
    /// log (rule R9). Heard from the member itself, not read from a cache; forgotten
    /// once the Pod is seen ready.
    recovering: HashMap<String, Mono>,
}

impl Observations {
    /// Starts every observation over when `epoch` changed: the runtime counts changes of
    /// leadership and failed watches, after which what this process saw may have missed
    /// a transition.
    pub fn epoch(&mut self, epoch: u64) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.clear();
        }
    }

    /// Forgets everything (a restart of the observation).
    pub fn clear(&mut self) {
        if mutation::on("T-forget") {
            self.pods.clear();
            self.lost.clear();
            self.unreachable.clear();
            self.recovering.clear();
        }
    }

    /// Records that the member Pod `uid` answered, at `at`, that it is recovering its
    /// predecessor's log (rule R9).
    pub fn heard_recovering(&mut self, uid: &str, at: Mono) {
        let t = self.recovering.entry(uid.to_string()).or_insert(at);
        *t = (*t).max(at);
    }

    /// Fills `seen_since` of every Pod, the `since` of an unreachable node under a Pod,
    /// and `lost_since` of every claim of `snap`. With
    /// `update` (a snapshot from the watch caches) a new state starts an observation now;
    /// without (a fresh read), a state that differs from the one observed counts as seen
    /// only now, and nothing is recorded.
    pub fn observe(&mut self, snap: &mut Snapshot, now: Now, update: bool) {
        for p in &mut snap.pods {
            let seen = PodSeen {
                ready: p.is_ready(),
                transition: p.ready.and_then(|c| c.since),
                since: now.mono,
            };
            let known = self
                .pods
                .get(&p.uid)
                .filter(|k| k.ready == seen.ready && k.transition == seen.transition)
                .copied();
            let since = match known {
                Some(k) => k.since,
                None => {
                    if update {
                        self.pods.insert(p.uid.clone(), seen);
                    }
                    now.mono
                }
            };
            p.seen_since = Some(now.wall_of(since));
            if seen.ready {
                if update {
                    self.recovering.remove(&p.uid);
                }
                p.recovering_seen = None;
            } else {
                p.recovering_seen = self
                    .recovering
                    .get(&p.uid)
                    .map(|t| now.wall_of(*t).min(now.wall));
            }
            if let (Some(node), NodeState::Unreachable { since, transition }) =
                (&p.node_name, &mut p.node)
            {
                // Another transition (the node back and lost again between two looks)
                // starts the observation over.
                let key = (node.clone(), *transition);
                let t = match self.unreachable.get(&key) {
                    Some(t) => *t,
                    None => {
                        if update {
                            self.unreachable.insert(key, now.mono);
                        }
                        now.mono
                    }
                };
                *since = Some(now.wall_of(t));
            } else if update
                && let (Some(node), NodeState::Ready | NodeState::Gone) = (&p.node_name, p.node)
            {
                self.unreachable.retain(|(n, _), _| n != node);
            }
        }
        for c in &mut snap.claims {
            if c.phase == crate::snapshot::ClaimPhase::Lost {
                let known = self
                    .lost
                    .get(&c.uid)
                    .filter(|(rv, _)| *rv == c.resource_version || !mutation::on("T-lost-version"));
                let since = match known {
                    Some((_, t)) => *t,
                    None => {
                        if update {
                            self.lost
                                .insert(c.uid.clone(), (c.resource_version.clone(), now.mono));
                        }
                        now.mono
                    }
                };
                c.lost_since = Some(now.wall_of(since));
            } else {
                c.lost_since = None;
                if update {
                    self.lost.remove(&c.uid);
                }
            }
        }
    }

    /// Keeps only the entries of live Pods and claims (the runtime's sweep).
    pub fn retain(&mut self, pod: impl Fn(&str) -> bool, claim: impl Fn(&str) -> bool) {
        self.pods.retain(|uid, _| pod(uid));
        self.recovering.retain(|uid, _| pod(uid));
        self.lost.retain(|uid, _| claim(uid));
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
            && self.lost.is_empty()
            && self.unreachable.is_empty()
            && self.recovering.is_empty()
    }

    /// Records a claim seen Lost now (tests of the runtime's sweep).
    #[cfg(test)]
    pub(crate) fn seen_lost_for_tests(&mut self, claim: &str) {
        self.lost
            .insert(claim.to_string(), (String::new(), Mono(0)));
    }

    /// Entries held (Pods and claims).
    pub fn len(&self) -> usize {
        self.pods.len() + self.lost.len() + self.unreachable.len() + self.recovering.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{ClaimPhase, CondStatus};
    use crate::testkit::{Edit, T0, at, persistent};

    fn now(wall: Timestamp, mono: i64) -> Now {
        Now {
            wall,
            mono: Mono(mono),
        }
    }

    #[test]
    fn server_time_is_bounded_by_the_truncated_date_and_the_round_trip() {
        let mut c = ServerClock::default();
        assert_eq!(c.skew(now(T0, 0)), None);
        assert_eq!(c.offset(now(T0, 0)), Span(0));
        // The server wrote 10:00:00 (truncated) between 1000 and 1200 on the monotonic
        // clock; the healer's wall clock reads 15 minutes ahead.
        c.record(DateSample {
            date: T0,
            sent: Mono(1_000),
            received: Mono(1_200),
        });
        let n = now(T0 + Span::mins(15) + Span(800), 2_000);
        let (low, high) = c.server_now(n).expect("measured");
        // (Widened by 1 ms of drift for the second since the sample was sent.)
        assert_eq!(low, T0 + Span(799));
        assert_eq!(high, T0 + Span(800 + 1_000 + 200 + 1));
        assert_eq!(c.skew(n), Some(Span::mins(15) - Span(600)));
        // Offset from the lowest server time: a server deadline is reached on the
        // healer's clock no earlier than on the server's.
        assert_eq!(c.offset(n), Span(Span::mins(15).0 + 1));
    }

    #[test]
    fn an_older_sample_does_not_replace_a_newer_one() {
        let mut c = ServerClock::default();
        let newer = DateSample {
            date: T0,
            sent: Mono(5_000),
            received: Mono(5_010),
        };
        c.record(newer);
        c.record(DateSample {
            date: T0 - Span::secs(60),
            sent: Mono(100),
            received: Mono(4_000),
        });
        assert_eq!(c.latest, Some(newer));
    }

    fn sample(date: Timestamp, sent: i64, received: i64) -> DateSample {
        DateSample {
            date,
            sent: Mono(sent),
            received: Mono(received),
        }
    }

    /// Two samples on either side of the server's second tick narrow its clock to
    /// their round trips: a deadline read from the lower bound is no longer up to a
    /// second late.
    #[test]
    fn samples_across_a_tick_narrow_the_server_clock() {
        let mut c = ServerClock::default();
        // 10:00:00 at 1000 (round trip 0): the server's clock minus the monotonic one is
        // in [T0 - 1000, T0).
        c.record(sample(T0, 1_000, 1_000));
        // (Each widened by 1 ms of drift: the allowance is rounded up.)
        let n = now(T0 + Span::mins(15), 1_500);
        assert_eq!(c.server_now(n), Some((T0 + Span(499), T0 + Span(1_501))));
        // 10:00:01 at 1300: in [T0 - 300, T0 + 700); together [T0 - 300, T0).
        c.record(sample(T0 + Span::secs(1), 1_300, 1_300));
        assert_eq!(c.server_now(n), Some((T0 + Span(1_199), T0 + Span(1_501))));
        // A deadline at T0 + 1199 on the server is reached then, not 700 ms later.
        assert_eq!(c.offset(n), Span::mins(15) - Span(1_199));
    }

    /// A sample older than the window no longer narrows the bounds, and an older
    /// sample's interval is widened by the drift its age allows.
    #[test]
    fn old_samples_widen_then_drop_out() {
        let mut c = ServerClock::default();
        c.record(sample(T0, 1_000, 1_000));
        c.record(sample(T0 + Span::secs(1), 1_300, 1_300));
        // 5 s after the second sample: the first was sent 5.3 s ago (6 ms of drift,
        // rounded up), the second 5 s ago (5 ms).
        let n = now(T0, 6_300);
        let (low, high) = c.server_now(n).expect("measured");
        assert_eq!(low, T0 + Span(6_300 - 300 - 5));
        assert_eq!(high, T0 + Span(6_300 + 6));
        // Past the window only the latest bounds it: a second of doubt again.
        let n = now(T0, 1_300 + SAMPLE_WINDOW.0 + 1_000);
        let (low, high) = c.server_now(n).expect("measured");
        let drift = (SAMPLE_WINDOW.0 + 1_000) / 1_000;
        assert_eq!(high - low, Span(1_000 + 2 * drift));
    }

    /// A server clock stepped back since the older samples: their intervals no longer
    /// meet the new ones, and the latest sample alone bounds the clock, so no deadline
    /// is reached early by the step.
    #[test]
    fn a_stepped_server_clock_falls_back_to_the_latest_sample() {
        let mut c = ServerClock::default();
        c.record(sample(T0, 1_000, 1_000));
        c.record(sample(T0 + Span::secs(1), 1_300, 1_300));
        // Five minutes back, at 2000.
        c.record(sample(T0 - Span::mins(5), 2_000, 2_000));
        let n = now(T0, 2_000);
        let (low, high) = c.server_now(n).expect("measured");
        assert_eq!(low, T0 - Span::mins(5));
        assert_eq!(high, T0 - Span::mins(5) + Span(1_000));
    }

    /// Only the most recent [`SAMPLES`] are kept; a late, older sample takes no newer
    /// one's place.
    #[test]
    fn the_most_recent_samples_are_kept() {
        let mut c = ServerClock::default();
        for i in 0..(SAMPLES as i64 + 3) {
            c.record(sample(T0, 1_000 + i, 1_000 + i));
        }
        c.record(sample(T0, 0, 0));
        let kept: Vec<i64> = {
            let mut v: Vec<i64> = c.recent.iter().flatten().map(|s| s.received.0).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(kept, (1_003..1_003 + SAMPLES as i64).collect::<Vec<_>>());
    }

    #[test]
    fn server_timestamps_move_onto_the_healer_clock() {
        let mut s = persistent(3);
        s.pod(0).deletion = Some(T0);
        let mut c = ServerClock::default();
        // The healer runs 3 minutes ahead, with an exact Date.
        c.record(DateSample {
            date: T0,
            sent: Mono(0),
            received: Mono(0),
        });
        to_healer_clock(&mut s, &c, now(T0 + Span::mins(3), 0));
        assert_eq!(s.pod(0).deletion, Some(T0 + Span::mins(3)));
        assert_eq!(s.pod(1).created, at(-120) + Span::mins(3));
        assert_eq!(s.claim(0).created, at(-180) + Span::mins(3));
        assert_eq!(s.clock_skew, Some(Span::mins(3) - Span(500)));
    }

    #[test]
    fn observation_times_pods_and_claims_on_the_monotonic_clock() {
        let mut o = Observations::default();
        let mut s = persistent(3);
        // The kubelet says down since an hour ago (its clock is behind); the healer
        // first sees it now.
        s.down(1, at(-60));
        s.claim(2).phase = ClaimPhase::Lost;
        o.observe(&mut s, now(T0, 10_000), true);
        assert_eq!(s.pod(1).seen_since, Some(T0));
        assert_eq!(s.claim(2).lost_since, Some(T0));
        // Ninety seconds later the wall clock stepped back an hour: the observation
        // still counts ninety seconds.
        let later = now(T0 - Span::mins(60), 100_000);
        let mut s2 = s.clone();
        o.observe(&mut s2, later, true);
        assert_eq!(s2.pod(1).seen_since, Some(later.wall - Span::secs(90)));
        assert_eq!(s2.claim(2).lost_since, Some(later.wall - Span::secs(90)));
    }

    #[test]
    fn a_new_transition_or_state_starts_the_observation_over() {
        let mut o = Observations::default();
        let mut s = persistent(3);
        s.down(1, at(-60));
        o.observe(&mut s, now(T0, 0), true);
        // Ready again and down again in between, missed: the transition time changed.
        s.down(1, at(-1));
        o.observe(&mut s, now(T0 + Span::secs(30), 30_000), true);
        assert_eq!(s.pod(1).seen_since, Some(T0 + Span::secs(30)));
        // Ready now.
        s.pod(1).ready = Some(crate::snapshot::Cond {
            status: CondStatus::True,
            since: Some(T0),
        });
        o.observe(&mut s, now(T0 + Span::secs(40), 40_000), true);
        assert_eq!(s.pod(1).seen_since, Some(T0 + Span::secs(40)));
    }

    #[test]
    fn a_recovery_heard_is_kept_while_the_member_is_down_and_forgotten_once_ready() {
        let mut o = Observations::default();
        let mut s = persistent(3);
        s.down(1, at(-60));
        o.observe(&mut s, now(T0, 0), true);
        assert_eq!(s.pod(1).recovering_seen, None);
        o.heard_recovering(&s.pod(1).uid.clone(), Mono(20_000));
        // An older answer arriving late does not move it back.
        o.heard_recovering(&s.pod(1).uid.clone(), Mono(10_000));
        o.observe(&mut s, now(T0 + Span::secs(30), 30_000), false);
        assert_eq!(s.pod(1).recovering_seen, Some(T0 + Span::secs(20)));
        // Ready: forgotten, so a later fall is timed from scratch.
        s.pod(1).ready = Some(crate::snapshot::Cond {
            status: CondStatus::True,
            since: Some(T0),
        });
        o.observe(&mut s, now(T0 + Span::secs(40), 40_000), true);
        assert_eq!(s.pod(1).recovering_seen, None);
        s.down(1, at(50));
        o.observe(&mut s, now(T0 + Span::secs(50), 50_000), true);
        assert_eq!(s.pod(1).recovering_seen, None);
        // And a change of leadership forgets it too.
        o.heard_recovering(&s.pod(1).uid.clone(), Mono(55_000));
        o.epoch(7);
        o.observe(&mut s, now(T0 + Span::secs(60), 60_000), true);
        assert_eq!(s.pod(1).recovering_seen, None);
    }

    #[test]
    fn a_lost_claim_that_changed_starts_its_observation_over() {
        let mut o = Observations::default();
        let mut s = persistent(3);
        s.claim(2).phase = ClaimPhase::Lost;
        o.observe(&mut s, now(T0, 0), true);
        // Bound and Lost again in between, both versions missed: another version.
        s.claim(2).resource_version = "999".into();
        o.observe(&mut s, now(T0 + Span::mins(5), 300_000), false);
        assert_eq!(s.claim(2).lost_since, Some(T0 + Span::mins(5)));
        o.observe(&mut s, now(T0 + Span::mins(6), 360_000), true);
        assert_eq!(s.claim(2).lost_since, Some(T0 + Span::mins(6)));
    }

    #[test]
    fn a_fresh_read_never_starts_an_observation() {
        let mut o = Observations::default();
        let mut cached = persistent(3);
        o.observe(&mut cached, now(T0, 0), true);
        let mut fresh = cached.clone();
        fresh.down(1, at(-60));
        fresh.claim(0).phase = ClaimPhase::Lost;
        o.observe(&mut fresh, now(T0 + Span::mins(20), 1_200_000), false);
        assert_eq!(fresh.pod(1).seen_since, Some(T0 + Span::mins(20)));
        assert_eq!(fresh.claim(0).lost_since, Some(T0 + Span::mins(20)));
        // Still unknown to the observation afterwards.
        let mut again = fresh.clone();
        o.observe(&mut again, now(T0 + Span::mins(30), 1_800_000), false);
        assert_eq!(again.pod(1).seen_since, Some(T0 + Span::mins(30)));
    }

    #[test]
    fn a_new_epoch_forgets_what_was_seen() {
        let mut o = Observations::default();
        let mut s = persistent(3);
        s.claim(2).phase = ClaimPhase::Lost;
        o.epoch(1);
        o.observe(&mut s, now(T0, 0), true);
        assert_eq!(o.len(), 4);
        o.epoch(1);
        assert_eq!(o.len(), 4);
        o.epoch(2);
        assert!(o.is_empty());
        o.observe(&mut s, now(T0 + Span::mins(5), 300_000), true);
        assert_eq!(s.claim(2).lost_since, Some(T0 + Span::mins(5)));
    }

    /// Rule F2's timing: a node is timed from the healer's first look at it unreachable;
    /// a new transition (back and lost again between two looks) starts over, and so does
    /// a fresh read that shows what the caches have not.
    #[test]
    fn an_unreachable_node_is_timed_per_transition() {
        let unreachable = |t: i64| NodeState::Unreachable {
            since: None,
            transition: Some(at(t)),
        };
        let mut o = Observations::default();
        let mut s = persistent(3);
        s.pod(1).node = unreachable(-1);
        o.observe(&mut s, now(T0, 0), true);
        let since = |s: &mut Snapshot| match s.pod(1).node {
            NodeState::Unreachable { since, .. } => since,
            other => panic!("{other:?}"),
        };
        assert_eq!(since(&mut s), Some(T0));
        // Five minutes on, the same loss: timed from the first look.
        let mut later = persistent(3);
        later.pod(1).node = unreachable(-1);
        o.observe(&mut later, now(T0 + Span::mins(5), 300_000), true);
        assert_eq!(since(&mut later), Some(T0));
        // A fresh read with another transition: seen only now, and not recorded.
        let mut fresh = persistent(3);
        fresh.pod(1).node = unreachable(4);
        o.observe(&mut fresh, now(T0 + Span::mins(5), 300_000), false);
        assert_eq!(since(&mut fresh), Some(T0 + Span::mins(5)));
        // The node was back and lost again: the caches' next look starts over.
        let mut again = persistent(3);
        again.pod(1).node = unreachable(4);
        o.observe(&mut again, now(T0 + Span::mins(6), 360_000), true);
        assert_eq!(since(&mut again), Some(T0 + Span::mins(6)));
        // Seen Ready: forgotten.
        let mut ready = persistent(3);
        o.observe(&mut ready, now(T0 + Span::mins(7), 420_000), true);
        let mut lost = persistent(3);
        lost.pod(1).node = unreachable(4);
        o.observe(&mut lost, now(T0 + Span::mins(8), 480_000), true);
        assert_eq!(since(&mut lost), Some(T0 + Span::mins(8)));
    }
}
