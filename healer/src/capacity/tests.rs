//! Unit tests of the evaluator, one or more per rule and per reason (named after them).

use celld_api::CapacityMode;
use celld_api::defaults::CAPACITY_DEFAULTS;

use super::evaluate::{Applied, Decision, evaluate};
use super::history::{History, HistoryError, MAX_BYTES, MAX_ENTRIES, VERSION};
use super::observation::{MetricsSample, Observation, Problem, RuntimeSample, Sample, Source};
use super::policy::Policy;
use super::reasons::Reason;
use crate::snapshot::SurvivorEvidence;
use crate::time::Timestamp;

const T0: i64 = 1_800_000_000_000;

/// A fleet the tests drive: every member answers with the configured load.
pub(super) struct Bench {
    pub(super) p: Policy,
    pub(super) h: Option<History>,
    pub(super) applied: Applied,
    /// Now, ms.
    pub(super) t: i64,
    pub(super) cpu: Vec<i64>,
    pub(super) mem: i64,
    pub(super) pressured: bool,
    /// Source timestamps advance with `t` unless frozen.
    pub(super) frozen_at: Option<i64>,
    pub(super) ready: bool,
}

impl Bench {
    pub(super) fn new(mode: CapacityMode, members: i32) -> Bench {
        Bench {
            p: Policy {
                mode,
                ..CAPACITY_DEFAULTS
            },
            h: None,
            applied: Applied {
                fleet_uid: "fleet-uid".into(),
                declared: members,
                members,
                victim: None,
            },
            t: T0,
            cpu: vec![100; members as usize],
            mem: 400,
            pressured: false,
            frozen_at: None,
            ready: true,
        }
    }

    pub(super) fn load(&mut self, cpu: i64) -> &mut Self {
        self.cpu = vec![cpu; self.applied.members as usize];
        self
    }

    pub(super) fn sample(&self, i: usize) -> Sample {
        let src = self.frozen_at.unwrap_or(self.t);
        Sample {
            member: format!("f-{i}"),
            identity: format!("uid-{i}/c/0"),
            ready: self.ready,
            runtime: Some(RuntimeSample {
                sampled: Timestamp(src - 1000),
                received: Timestamp(self.t),
                memory_mib: self.mem,
                pressured: self.pressured,
                backlog: false,
            }),
            metrics: Some(MetricsSample {
                at: Timestamp(src - 2000),
                received: Timestamp(self.t),
                window_ms: 15_000,
                cpu_millicores: self.cpu.get(i).copied().unwrap_or(100),
                memory_mib: self.mem,
            }),
            problem: None,
        }
    }

    pub(super) fn observation(&self) -> Observation {
        Observation {
            at: Timestamp(self.t),
            complete: true,
            samples: (0..self.applied.members as usize)
                .map(|i| self.sample(i))
                .collect(),
        }
    }

    pub(super) fn eval_with(&mut self, o: &Observation) -> Decision {
        let (h, d) = evaluate(&self.p, self.h.take(), o, &self.applied, Timestamp(self.t));
        self.h = Some(h);
        d
    }

    /// Advances `secs` and evaluates a fresh observation.
    pub(super) fn tick(&mut self, secs: i64) -> Decision {
        self.t += secs * 1000;
        let o = self.observation();
        self.eval_with(&o)
    }

    /// Ticks every sample interval until the reason is `want` (at most `n` times).
    pub(super) fn until(&mut self, want: Reason, n: usize) -> Decision {
        let step = i64::from(self.p.sample_interval_seconds);
        for _ in 0..n {
            let d = self.tick(step);
            if d.reason == want {
                return d;
            }
        }
        panic!("never reached {want}; history {:?}", self.h);
    }

    /// Applies a member count as the executor would.
    pub(super) fn apply(&mut self, members: i32) {
        self.applied.members = members;
        self.cpu
            .resize(members as usize, self.cpu.first().copied().unwrap_or(100));
    }
}

#[test]
fn e9_scale_out_recommended_only_after_min_samples_over_the_stabilization() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    // First sample starts the window; 15 s interval, 30 s stabilization, 3 samples.
    let d = b.tick(15);
    assert_eq!(d.reason, Reason::StabilizingOut);
    assert_eq!(b.tick(15).reason, Reason::StabilizingOut);
    let d = b.tick(15);
    assert_eq!(d.reason, Reason::ScaleOutRecommended, "{d:?}");
    assert!(d.actionable);
    assert_eq!(d.desired, 4);
    assert_eq!(d.signal(3).recommendation.map(|r| r.members), Some(4));
}

#[test]
fn e9_stabilizing_in_then_scale_in_recommended() {
    let mut b = Bench::new(CapacityMode::Automatic, 5);
    b.load(10);
    b.mem = 100;
    assert_eq!(b.tick(15).reason, Reason::StabilizingIn);
    let d = b.until(Reason::ScaleInRecommended, 60);
    assert_eq!(d.desired, 4);
    assert!(
        b.t - T0 >= 600_000,
        "not before the 600 s scale-in stabilization"
    );
    assert_eq!(d.survivors, SurvivorEvidence::Sufficient);
}

#[test]
fn within_thresholds_between_low_and_high() {
    let mut b = Bench::new(CapacityMode::Automatic, 3);
    b.load(150);
    let d = b.tick(15);
    assert_eq!(d.reason, Reason::WithinThresholds);
    assert_eq!(d.desired, 3);
}

#[test]
fn e11_at_maximum_and_at_minimum() {
    let mut b = Bench::new(CapacityMode::Automatic, 10);
    b.load(900);
    assert_eq!(b.until(Reason::AtMaximum, 10).desired, 10);
    let mut b = Bench::new(CapacityMode::Automatic, 3);
    b.load(10);
    b.mem = 10;
    assert_eq!(b.until(Reason::AtMinimum, 60).desired, 3);
}

#[test]
fn e7_below_min_members_counts_as_high_load() {
    let mut b = Bench::new(CapacityMode::Automatic, 2);
    b.load(10);
    b.mem = 10;
    let d = b.until(Reason::ScaleOutRecommended, 10);
    assert_eq!(d.desired, 3);
}

#[test]
fn e5_pending_capacity_names_the_member_then_ineffective_capacity() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.ready = false;
    let d = b.tick(15);
    assert_eq!(d.reason, Reason::PendingCapacity);
    assert!(d.message.contains("f-0"), "{}", d.message);
    let d = b.until(Reason::IneffectiveCapacity, 50);
    assert!(d.message.contains("600 s"), "{}", d.message);
    // A failed Pod list (nothing collected) is pending, not incomplete.
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.t += 15_000;
    let d = b.eval_with(&Observation::empty(Timestamp(b.t)));
    assert_eq!(d.reason, Reason::PendingCapacity);
}

#[test]
fn e6_incomplete_metrics_names_the_member_and_why() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.t += 15_000;
    let mut o = b.observation();
    o.samples[1].metrics = None;
    o.samples[1].problem = Some(Problem::Missing(Source::Metrics, "not found".into()));
    let d = b.eval_with(&o);
    assert_eq!(d.reason, Reason::IncompleteMetrics);
    assert!(
        d.message
            .contains("member f-1: no metrics.k8s.io sample (not found)"),
        "{}",
        d.message
    );
    // A stale metrics sample is just as incomplete.
    b.t += 15_000;
    let mut o = b.observation();
    o.samples[2].metrics.as_mut().unwrap().at = Timestamp(b.t - 120_000);
    let d = b.eval_with(&o);
    assert_eq!(d.reason, Reason::IncompleteMetrics);
    assert!(d.message.contains("f-2"));
    // A window outside [min, max] too.
    b.t += 15_000;
    let mut o = b.observation();
    o.samples[0].metrics.as_mut().unwrap().window_ms = 120_000;
    assert_eq!(b.eval_with(&o).reason, Reason::IncompleteMetrics);
}

#[test]
fn e1_invalid_observation_for_zero_or_backward_time_and_invalid_policy() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.t += 15_000;
    assert_eq!(
        b.eval_with(&Observation::empty(Timestamp(0))).reason,
        Reason::InvalidObservation
    );
    b.tick(15);
    let mut o = b.observation();
    o.at = Timestamp(b.t - 60_000);
    assert_eq!(b.eval_with(&o).reason, Reason::InvalidObservation);
    b.p.min_members = 20;
    b.p.max_members = 10;
    assert_eq!(b.tick(15).reason, Reason::InvalidObservation);
}

#[test]
fn e8_repeated_samples_do_not_count() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    assert_eq!(b.tick(15).reason, Reason::StabilizingOut);
    b.frozen_at = Some(b.t);
    assert_eq!(b.tick(15).reason, Reason::RepeatedSamples);
    assert_eq!(b.h.as_ref().unwrap().high_samples, 0);
}

#[test]
fn e3_window_interrupted_by_an_intermediate_sample() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    assert_eq!(b.tick(15).reason, Reason::StabilizingOut);
    b.load(150);
    // 5 s later: sooner than the 15 s interval, and it contradicts the high window.
    assert_eq!(b.tick(5).reason, Reason::WindowInterrupted);
    // An intermediate sample agreeing with the window only repeats the decision.
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    b.tick(15);
    let d = b.tick(5);
    assert_eq!(d.reason, Reason::StabilizingOut);
    assert_eq!(
        b.h.as_ref().unwrap().high_samples,
        1,
        "intermediate never counts"
    );
}

#[test]
fn e3_an_intent_not_carried_out_stands_between_intervals() {
    // Automatic, low load: the contraction is recommended, but the executor cannot carry
    // it out (say the survivors could not take the load). Every reconcile before the
    // next sample re-reads the same observation: the intent, its count and its history
    // stay exactly as they were, so the status does not flap back to the applied count.
    let mut b = Bench::new(CapacityMode::Automatic, 5);
    b.load(10);
    b.mem = 100;
    let d = b.until(Reason::ScaleInRecommended, 60);
    assert!(d.actionable);
    let o = b.observation();
    let h = b.h.clone();
    for _ in 0..3 {
        b.t += 1_000;
        let again = b.eval_with(&o);
        assert_eq!(again, d, "the same evidence, the same decision");
        assert_eq!(again.signal(5).recommendation.map(|r| r.members), Some(4));
        assert_eq!(b.h, h, "the same evidence, the same history (no write)");
    }
    // Carried out (5 -> 4): not repeated, and the status names the count it moved to.
    b.apply(4);
    b.t += 1_000;
    let after = b.eval_with(&o);
    assert!(!after.actionable);
    assert_eq!(after.desired, 4);
    assert_eq!(after.signal(4).recommendation.map(|r| r.members), Some(4));
}

#[test]
fn e2_policy_changed_restarts_the_windows() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    b.tick(15);
    b.tick(15);
    b.p.cpu_high_millicores = 300;
    assert_eq!(b.tick(5).reason, Reason::PolicyChanged);
    assert_eq!(b.h.as_ref().unwrap().high_samples, 0);
}

#[test]
fn e2_membership_change_restarts_the_windows() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    b.tick(15);
    b.tick(15);
    b.t += 15_000;
    let mut o = b.observation();
    o.samples[0].identity = "uid-0/c/1".into(); // the container restarted
    let d = b.eval_with(&o);
    assert_eq!(d.reason, Reason::StabilizingOut);
    assert_eq!(b.h.as_ref().unwrap().high_samples, 1);
}

#[test]
fn e4_a_gap_longer_than_max_age_restarts_the_windows() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    b.tick(15);
    b.tick(15);
    let d = b.tick(60);
    assert_eq!(d.reason, Reason::StabilizingOut);
    assert_eq!(b.h.as_ref().unwrap().high_samples, 1);
}

#[test]
fn e12_manual_override_wins_one_intent_even_beyond_the_bounds() {
    let mut b = Bench::new(CapacityMode::Automatic, 3);
    b.load(150);
    b.tick(15);
    b.applied.declared = 12; // beyond maxMembers 10
    let d = b.tick(15);
    assert_eq!(
        (d.reason, d.desired, d.manual),
        (Reason::ManualOverride, 12, true)
    );
    let sig = d.signal(3).recommendation.unwrap();
    assert!(sig.manual && sig.members == 12);
    // Once applied, the policy takes over again, and its windows restarted.
    b.apply(12);
    let d = b.tick(15);
    assert_ne!(d.reason, Reason::ManualOverride);
    // Rewriting the same value is not a command.
    b.apply(11);
    let d = b.tick(15);
    assert_ne!(d.reason, Reason::ManualOverride, "{d:?}");
}

#[test]
fn e10_e13_rate_limited_from_any_durable_action_including_manual() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    b.tick(15);
    // A manual edit to 4, applied.
    b.applied.declared = 4;
    b.tick(15);
    b.apply(4);
    let d = b.until(Reason::RateLimited, 10);
    assert!(d.message.contains("300 s"));
    assert_eq!(d.desired, 4);
    // After the cooldown the policy grows again.
    let d = b.until(Reason::ScaleOutRecommended, 30);
    assert_eq!(d.desired, 5);
}

#[test]
fn e14_external_owner_evaluates_nothing() {
    let mut b = Bench::new(CapacityMode::External, 4);
    b.applied.declared = 3;
    b.load(10);
    b.mem = 10;
    let d = b.tick(15);
    assert_eq!((d.reason, d.desired), (Reason::ExternalOwner, 3));
    assert!(d.signal(4).recommendation.is_none());
    assert_eq!(d.survivors, SurvivorEvidence::Sufficient);
}

/// Grows 3 -> 4 through the policy, and returns the bench right after the addition.
fn grown_bench() -> Bench {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    let d = b.until(Reason::ScaleOutRecommended, 10);
    assert_eq!(d.desired, 4);
    b.apply(4);
    b
}

#[test]
fn r3_observing_redistribution_after_an_addition() {
    let mut b = grown_bench();
    // The newcomer idles and the incumbents stay hot: still within the observation period.
    b.cpu = vec![500, 500, 500, 0];
    let d = b.tick(15);
    assert_eq!(d.reason, Reason::ObservingRedistribution, "{d:?}");
    assert!(b.h.as_ref().unwrap().addition.is_some());
}

#[test]
fn r2_r4_relief_clears_the_addition() {
    let mut b = grown_bench();
    b.cpu = vec![300, 300, 300, 300]; // the newcomer works
    let mut last = b.tick(15);
    for _ in 0..12 {
        if b.h.as_ref().unwrap().addition.is_none() {
            break;
        }
        last = b.tick(15);
    }
    assert!(b.h.as_ref().unwrap().addition.is_none(), "{last:?}");
    assert_eq!(b.h.as_ref().unwrap().ineffective_batches, 0);
}

#[test]
fn r4_load_not_redistributed_after_the_second_ineffective_addition() {
    let mut b = grown_bench();
    b.cpu = vec![500, 500, 500, 0];
    // First ineffective judgement is forgiven: growth resumes after the cooldown.
    let d = b.until(Reason::ScaleOutRecommended, 40);
    assert_eq!(d.desired, 5);
    assert_eq!(b.h.as_ref().unwrap().ineffective_batches, 1);
    b.apply(5);
    b.cpu = vec![500, 500, 500, 0, 0];
    let d = b.until(Reason::LoadNotRedistributed, 40);
    assert_eq!(d.desired, 5);
    // The hold persists while load does not move.
    assert_eq!(b.tick(15).reason, Reason::LoadNotRedistributed);
}

#[test]
fn r1_an_addition_undone_is_forgotten() {
    let mut b = grown_bench();
    b.apply(3);
    b.cpu = vec![500, 500, 500];
    b.tick(15);
    assert!(b.h.as_ref().unwrap().addition.is_none());
}

#[test]
fn s1_s3_survivor_evidence() {
    // Too hot to absorb a donor: one survivor would exceed cpuHigh.
    let mut b = Bench::new(CapacityMode::Automatic, 4);
    b.load(70);
    b.mem = 100;
    b.applied.victim = Some("f-3".into());
    let d = b.tick(15);
    assert_eq!(d.survivors, SurvivorEvidence::Sufficient);
    b.cpu = vec![79, 79, 150, 79];
    let d = b.tick(15);
    assert!(
        matches!(d.survivors, SurvivorEvidence::Insufficient(ref m) if m.contains("f-2")),
        "{:?}",
        d.survivors
    );
    // The victim was not observed.
    b.load(10);
    b.applied.victim = Some("f-9".into());
    assert!(matches!(
        b.tick(15).survivors,
        SurvivorEvidence::Insufficient(_)
    ));
    // Nothing collected.
    b.t += 15_000;
    let d = b.eval_with(&Observation::empty(Timestamp(b.t)));
    assert_eq!(d.survivors, SurvivorEvidence::Unavailable);
}

#[test]
fn signal_repeats_never_move_scale_out_or_automatic_but_shadow_shows_them() {
    let mut b = Bench::new(CapacityMode::Shadow, 3);
    b.load(500);
    let d = b.until(Reason::ScaleOutRecommended, 10);
    assert_eq!(d.signal(3).recommendation.unwrap().members, 4);
    let mut d2 = d.clone();
    d2.mode = CapacityMode::ScaleOut;
    d2.actionable = false;
    assert_eq!(d2.signal(3).recommendation.unwrap().members, 3);
}

#[test]
fn history_survives_encoding_and_gives_the_same_decision() {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.load(500);
    b.tick(15);
    b.tick(15);
    let text = b.h.as_ref().unwrap().encode().unwrap();
    let mut restarted = Bench::new(CapacityMode::ScaleOut, 3);
    restarted.load(500);
    restarted.t = b.t;
    restarted.h = Some(History::decode(&text, "fleet-uid").unwrap());
    assert_eq!(restarted.tick(15), b.tick(15));
}

#[test]
fn history_of_another_fleet_or_version_is_refused() {
    let h = History::new("a", 3);
    let text = h.encode().unwrap();
    assert!(matches!(
        History::decode(&text, "b"),
        Err(HistoryError::OtherFleet { .. })
    ));
    let other = text.replace(&format!("\"version\":{VERSION}"), "\"version\":7");
    assert_eq!(
        History::decode(&other, "a"),
        Err(HistoryError::Version { found: 7 })
    );
    assert!(matches!(
        History::decode("{\"version\":1,", "a"),
        Err(HistoryError::Unreadable(_))
    ));
    assert!(matches!(
        History::decode(&text.replace("}", ",\"extra\":1}"), "a"),
        Err(HistoryError::Unreadable(_))
    ));
}

#[test]
fn history_is_bounded() {
    let mut h = History::new("a", 3);
    for i in 0..=MAX_ENTRIES {
        h.load.insert(format!("id-{i}"), Default::default());
    }
    assert!(matches!(
        h.encode(),
        Err(HistoryError::TooManyEntries { field: "load", .. })
    ));
    h.load.clear();
    h.decision = Some(super::history::Remembered {
        mode: CapacityMode::Shadow,
        reason: Reason::WithinThresholds,
        message: "x".repeat(MAX_BYTES),
        desired: 3,
    });
    assert!(matches!(h.encode(), Err(HistoryError::TooLarge { .. })));
    assert!(History::size_warning(MAX_BYTES / 2 + 1));
    assert!(!History::size_warning(MAX_BYTES / 2));
}

#[test]
fn every_reason_has_a_distinct_name() {
    let mut names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Reason::ALL.len());
}
