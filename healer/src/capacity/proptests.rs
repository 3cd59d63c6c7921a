//! Property: no policy recommendation without minSamples fresh, advancing samples spanning
//! the stabilization window, and never outside [minMembers, maxMembers] except by a
//! manual edit.

use celld_api::CapacityMode;
use celld_api::defaults::CAPACITY_DEFAULTS;
use proptest::prelude::*;

use super::evaluate::{Applied, evaluate};
use super::history::History;
use super::observation::{MetricsSample, Observation, RuntimeSample, Sample};
use super::policy::Policy;
use super::reasons::Reason;
use crate::time::Timestamp;

#[derive(Clone, Debug)]
struct Tick {
    advance_s: i64,
    cpu: i64,
    mem: i64,
    /// Source timestamps advance with the clock.
    advancing: bool,
    /// Source ages, seconds.
    age_s: i64,
    /// The member count applied before this tick (the executor's work).
    apply_delta: i32,
    /// spec.members changed by hand.
    manual: Option<i32>,
    complete: bool,
}

fn tick() -> impl Strategy<Value = Tick> {
    (
        prop_oneof![Just(15i64), 1i64..40, Just(5)],
        prop_oneof![Just(10i64), Just(150), Just(500), 0i64..1000],
        prop_oneof![Just(100i64), Just(500), Just(900)],
        prop::bool::weighted(0.85),
        prop_oneof![Just(1i64), 0i64..120],
        prop_oneof![Just(0i32), Just(0), Just(1), Just(-1)],
        prop::option::weighted(0.05, 1i32..15),
        prop::bool::weighted(0.95),
    )
        .prop_map(
            |(advance_s, cpu, mem, advancing, age_s, apply_delta, manual, complete)| Tick {
                advance_s,
                cpu,
                mem,
                advancing,
                age_s,
                apply_delta,
                manual,
                complete,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn recommendations_need_stable_fresh_advancing_samples_and_stay_in_bounds(
        mode in prop_oneof![Just(CapacityMode::ScaleOut), Just(CapacityMode::Automatic), Just(CapacityMode::Shadow)],
        min in 1i32..5,
        span in 0i32..6,
        min_samples in 2i32..5,
        start in 1i32..12,
        ticks in prop::collection::vec(tick(), 1..80),
    ) {
        let p = Policy { mode, min_members: min, max_members: min + span, min_samples, ..CAPACITY_DEFAULTS };
        let mut h: Option<History> = None;
        let mut t = 1_800_000_000_000i64;
        let mut frozen = t;
        let mut applied = Applied { fleet_uid: "u".into(), declared: start, members: start, victim: None };
        // Counted (interval-spaced, fresh, advancing, complete) samples in the current
        // same-direction run, and when the run started.
        let mut run: Vec<(i64, bool)> = Vec::new();
        // When the last counted sample was taken: a sample advances when it is newer
        // (rule E8 compares with the last counted observation, so a sample first seen
        // between intervals, and not counted then, counts once at the next interval). A
        // tick that holds `frozen` but reports a smaller age still carries a newer sample.
        let mut last_src: Option<i64> = None;
        // The last actionable decision made on a counted sample.
        let mut last_intent: Option<(Reason, i32)> = None;
        for k in ticks {
            t += k.advance_s * 1000;
            applied.members = (applied.members + k.apply_delta).clamp(1, 20);
            if let Some(m) = k.manual { applied.declared = m; }
            if k.advancing { frozen = t; }
            let src = frozen - k.age_s * 1000;
            let advanced = last_src.is_none_or(|prev| src > prev);
            let o = Observation {
                at: Timestamp(t),
                complete: k.complete,
                samples: (0..applied.members).map(|i| Sample {
                    member: format!("m-{i}"),
                    identity: format!("id-{i}"),
                    ready: true,
                    runtime: Some(RuntimeSample { sampled: Timestamp(src), received: Timestamp(t), memory_mib: k.mem, pressured: false, backlog: false }),
                    metrics: Some(MetricsSample { at: Timestamp(src), received: Timestamp(t), window_ms: 15_000, cpu_millicores: k.cpu, memory_mib: k.mem }),
                    problem: None,
                }).collect(),
            };
            let (next, d) = evaluate(&p, h.take(), &o, &applied, Timestamp(t));
            // Counted: this observation became the last counted one (rule E3).
            let counted = next.last_observation == Some(t);
            if counted {
                last_src = Some(src);
            }
            let high_samples = next.high_samples;
            let low_samples = next.low_samples;
            let (high_since, low_since) = (next.high_since, next.low_since);
            h = Some(next);
            run.push((t, k.advancing));
            match d.reason {
                Reason::ScaleOutRecommended => {
                    let since = high_since.expect("a high window");
                    prop_assert!(high_samples >= min_samples);
                    prop_assert!(t - since >= i64::from(p.scale_out_stabilization_seconds) * 1000);
                    prop_assert!(d.desired > applied.members && d.desired <= p.max_members);
                }
                Reason::ScaleInRecommended => {
                    let since = low_since.expect("a low window");
                    prop_assert!(low_samples >= min_samples);
                    prop_assert!(t - since >= i64::from(p.scale_in_stabilization_seconds) * 1000);
                    prop_assert!(d.desired < applied.members && d.desired >= p.min_members);
                }
                _ => prop_assert!(!d.actionable),
            }
            if d.actionable && counted {
                // Every counted sample in the window was fresh and advancing.
                prop_assert!(advanced && k.complete && k.age_s * 1000 <= i64::from(p.max_age_seconds) * 1000,
                    "{:?} from a sample that did not advance", d.reason);
                last_intent = Some((d.reason, d.desired));
            } else if d.actionable {
                // Between intervals only the last counted intent stands, never a new one.
                prop_assert_eq!(last_intent, Some((d.reason, d.desired)));
            }
            // The decision and the signal agree: a policy mode's signal is the decision's
            // count when it may be acted on, the applied count otherwise, and then the
            // decision names that count too.
            if mode != CapacityMode::Shadow && !d.actionable && !d.manual {
                prop_assert_eq!(d.desired, applied.members, "{:?}: {}", d.reason, d.message);
            }
            if !d.manual && d.actionable {
                prop_assert!((p.min_members..=p.max_members).contains(&d.desired));
            }
            let sig = d.signal(applied.members).recommendation.expect("a policy mode recommends");
            if !sig.manual && mode != CapacityMode::Shadow && sig.members != applied.members {
                prop_assert!((p.min_members..=p.max_members).contains(&sig.members));
            }
        }
    }
}
