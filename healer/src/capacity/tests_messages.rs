//! The words of `status.capacity.message`: a waiting decision names the member and why
//! (one test per cause), and a running window does not rewrite the message at every
//! sample (its counts go to the metrics instead).

use celld_api::CapacityMode;

use super::observation::{Observation, Problem, Source};
use super::reasons::Reason;
use super::tests::Bench;
use crate::time::Timestamp;

/// A settled 3-member bench and its next observation, for member `f-1` to spoil.
fn next() -> (Bench, Observation) {
    let mut b = Bench::new(CapacityMode::ScaleOut, 3);
    b.tick(15);
    b.t += 15_000;
    let o = b.observation();
    (b, o)
}

/// Evaluates `o` and checks the reason and that the message says `words` of `f-1`.
fn waits(b: &mut Bench, o: &Observation, reason: Reason, words: &str) {
    let d = b.eval_with(o);
    assert_eq!(d.reason, reason, "{}", d.message);
    assert!(
        d.message.contains(words),
        "want {words:?} in {:?}",
        d.message
    );
    assert_eq!(d.desired, 3, "a waiting decision keeps the count");
}

/// A `/state` problem the collector reported: the member is pending, with the cause.
fn state_problem(p: Problem, words: &str) {
    let (mut b, mut o) = next();
    o.samples[1].runtime = None;
    o.samples[1].problem = Some(p);
    waits(&mut b, &o, Reason::PendingCapacity, words);
}

#[test]
fn missing_state_says_what_came_back() {
    state_problem(
        Problem::Missing(Source::State, "HTTP 503".into()),
        "f-1: no /state sample (HTTP 503)",
    );
}

#[test]
fn stale_state_says_stale() {
    // Refused by the collector (sampled before the container started)...
    state_problem(
        Problem::Stale(Source::State),
        "f-1: its /state sample is stale",
    );
    // ...or by the evaluator (older than maxAgeSeconds).
    let (mut b, mut o) = next();
    o.samples[1].runtime.as_mut().unwrap().sampled = Timestamp(b.t - 3_600_000);
    waits(
        &mut b,
        &o,
        Reason::PendingCapacity,
        "f-1: its /state sample is stale",
    );
}

#[test]
fn malformed_state_says_what_is_wrong() {
    state_problem(
        Problem::Malformed(Source::State, "not strict JSON: trailing characters".into()),
        "f-1: its /state answer is malformed (not strict JSON: trailing characters)",
    );
}

#[test]
fn too_large_state_says_over_the_limit() {
    state_problem(
        Problem::TooLarge(Source::State),
        "f-1: its /state answer is over 1 MiB",
    );
}

#[test]
fn slow_state_says_no_answer_in_time() {
    state_problem(
        Problem::Slow(Source::State),
        "f-1: /state did not answer in time",
    );
}

#[test]
fn a_member_that_changed_meanwhile_says_so() {
    state_problem(Problem::Changed, "f-1: it changed while it was sampled");
    // A failed re-read is the re-read's cause, not the member's.
    state_problem(
        Problem::Slow(Source::Pods),
        "f-1: the Pod re-read did not answer in time",
    );
}

#[test]
fn a_member_not_ready_says_not_ready() {
    let (mut b, mut o) = next();
    o.samples[1].ready = false;
    waits(&mut b, &o, Reason::PendingCapacity, "f-1: not ready");
}

/// Spoils member `f-1`'s metrics in an observation taken at the given time (ms).
type Spoil = fn(&mut Observation, i64);

#[test]
fn metrics_causes_name_the_member_and_why() {
    let cases: [(Spoil, &str); 5] = [
        (
            |o, _| {
                o.samples[1].metrics = None;
                o.samples[1].problem = Some(Problem::Missing(
                    Source::Metrics,
                    "no PodMetrics for the member".into(),
                ));
            },
            "member f-1: no metrics.k8s.io sample (no PodMetrics for the member)",
        ),
        (
            |o, t| o.samples[1].metrics.as_mut().unwrap().at = Timestamp(t - 3_600_000),
            "member f-1: its metrics.k8s.io sample is stale",
        ),
        (
            |o, _| o.samples[1].metrics.as_mut().unwrap().window_ms = 3_600_000,
            "member f-1: its metrics.k8s.io answer is malformed (averaging window or usage out of range)",
        ),
        (
            |o, _| {
                o.samples[1].metrics = None;
                o.samples[1].problem = Some(Problem::TooLarge(Source::Metrics));
            },
            "member f-1: its metrics.k8s.io answer is over 1 MiB",
        ),
        (
            |o, _| {
                o.samples[1].metrics = None;
                o.samples[1].problem = Some(Problem::Slow(Source::Metrics));
            },
            "member f-1: metrics.k8s.io did not answer in time",
        ),
    ];
    for (spoil, words) in cases {
        let (mut b, mut o) = next();
        spoil(&mut o, b.t);
        waits(&mut b, &o, Reason::IncompleteMetrics, words);
    }
}

/// While a window runs, every sample counts, but the message stays word for word the
/// same (the status is not rewritten); the counts are in `Decision::window`.
#[test]
fn a_running_window_keeps_its_message() {
    for (mode, cpu, reason) in [
        (CapacityMode::ScaleOut, 500, Reason::StabilizingOut),
        (CapacityMode::Automatic, 10, Reason::StabilizingIn),
    ] {
        let mut b = Bench::new(mode, 4);
        b.p.min_members = 3;
        b.p.scale_in_stabilization_seconds = 300;
        b.p.scale_out_stabilization_seconds = 300;
        b.load(cpu);
        b.mem = 10;
        let first = b.tick(15);
        assert_eq!(first.reason, reason, "{}", first.message);
        let mut seen = vec![first.window.unwrap().samples];
        for _ in 0..4 {
            let d = b.tick(15);
            assert_eq!(d.reason, reason);
            assert_eq!(
                d.message, first.message,
                "the message moved with the window"
            );
            seen.push(d.window.unwrap().samples);
        }
        assert_eq!(seen, [1, 2, 3, 4, 5], "the metrics keep the exact count");
        assert!(first.message.contains("since "), "{}", first.message);
    }
}
