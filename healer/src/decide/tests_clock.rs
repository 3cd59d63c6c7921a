//! Rules T1 (a trusted clock before any destructive write) and T2 (readiness timed by
//! the healer's own observation). The conversions themselves are tested in
//! `crate::clock`.

use crate::config::Config;
use crate::decide;
use crate::plan::{Action, Plan};
use crate::rule::Rule;
use crate::snapshot::*;
use crate::testkit::*;
use crate::time::{Span, Timestamp};

fn plan(s: &Snapshot, now: Timestamp) -> Plan {
    decide(s, now, &Config::default())
}

fn ready(p: &Plan) -> &celld_api::Condition {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition")
}

fn handoff(p: &Plan) -> bool {
    matches!(p.action, Some(Action::StartHandoff(_)))
}

// ---- T2: observed, not reported, time ----

#[test]
fn t2_a_member_the_kubelet_calls_long_down_waits_the_delay_from_when_the_healer_saw_it() {
    let mut s = persistent(3);
    // The kubelet's clock is an hour behind: its condition says down since an hour
    // ago. The healer has seen it down for one minute.
    s.down(1, at(-60));
    s.pod(1).seen_since = Some(at(-1));
    let p = plan(&s, T0);
    assert!(!handoff(&p), "{p:?}");
    assert_eq!(p.wake_at, Some(at(9)));
    assert!(ready(&p).message.contains("fresh disk at"), "{p:?}");
    let due = plan(&s, at(9));
    assert_eq!(due.rule, Rule::R3);
    assert!(handoff(&due));
}

#[test]
fn t2_a_member_not_observed_yet_counts_as_down_from_now() {
    let mut s = persistent(3);
    s.down(1, at(-60));
    s.pod(1).seen_since = None;
    let p = plan(&s, T0);
    assert!(!handoff(&p));
    assert_eq!(p.wake_at, Some(at(10)));
}

#[test]
fn t2_the_absorb_window_counts_from_when_the_healer_saw_the_others_ready() {
    let mut s = persistent(3);
    s.down(1, at(-20));
    // The kubelet says ready for an hour; the healer saw member 0 ready a minute ago
    // (a new leader, or a transition the kubelet timed wrong).
    s.pod(0).seen_since = Some(at(-1));
    let p = plan(&s, T0);
    assert!(!handoff(&p));
    assert_eq!(p.wake_at, Some(at(4)));
    assert!(plan(&s, at(4)).action.is_some());
    // Not observed at all: never settled yet.
    s.pod(2).seen_since = None;
    assert!(!handoff(&plan(&s, at(4))));
}

#[test]
fn t2_a_time_from_the_future_counts_as_now() {
    let mut s = persistent(3);
    s.down(1, at(-60));
    s.pod(1).seen_since = Some(at(30));
    let p = plan(&s, T0);
    assert!(!handoff(&p));
    assert_eq!(p.wake_at, Some(at(10)));
}

// ---- T1: a trusted clock ----

#[test]
fn t1_holds_a_force_delete_while_the_clock_is_skewed_beyond_the_bound() {
    for skew in [
        Span::secs(31),
        Span::secs(-31),
        Span::mins(15),
        Span::mins(-15),
    ] {
        let mut s = persistent(3);
        s.pod(2).deletion = Some(at(0));
        s.unreachable(2);
        s.clock_skew = Some(skew);
        let p = plan(&s, at(5));
        assert_eq!(p.action, None, "{skew:?}");
        assert_eq!(p.rule, Rule::T1);
        assert_eq!(ready(&p).reason, "ClockSkewed");
        assert!(ready(&p).message.contains("--max-clock-skew"), "{p:?}");
        assert!(
            ready(&p).message.contains("Force-deleting Pod alpha-2"),
            "{p:?}"
        );
        let blocked = p.status.conditions.iter().find(|c| c.type_ == "Blocked");
        assert_eq!(blocked.map(|c| c.status.as_str()), Some("True"));
        assert_eq!(p.event.as_ref().map(|e| e.reason), Some("ClockSkewed"));
        assert_eq!(p.wake_at, Some(at(5) + Span::secs(30)));
    }
}

#[test]
fn t1_lets_writes_through_within_the_bound() {
    for skew in [Span(0), Span::secs(30), Span::secs(-30)] {
        let mut s = persistent(3);
        s.pod(2).deletion = Some(at(0));
        s.unreachable(2);
        s.clock_skew = Some(skew);
        assert_eq!(plan(&s, at(5)).rule, Rule::F1, "{skew:?}");
    }
}

#[test]
fn t1_holds_destructive_writes_until_the_clock_was_measured() {
    let mut s = persistent(3);
    s.lose(1);
    s.clock_skew = None;
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::T1);
    assert!(ready(&p).message.contains("has not measured"), "{p:?}");
}

#[test]
fn t1_the_bound_is_the_flag() {
    let mut s = persistent(3);
    s.pod(2).deletion = Some(at(0));
    s.unreachable(2);
    s.clock_skew = Some(Span::mins(2));
    let wide = Config {
        max_clock_skew: Span::mins(5),
        ..Config::default()
    };
    assert_eq!(decide(&s, at(5), &wide).rule, Rule::F1);
    assert_eq!(plan(&s, at(5)).rule, Rule::T1);
}

#[test]
fn t1_lets_safe_writes_through_a_skewed_clock() {
    // Growth, the finalizer and a handoff's abort (which keeps the disk) go on.
    let mut grow = persistent(3);
    grow.fleet.members = Some(5);
    grow.clock_skew = Some(Span::mins(15));
    assert!(matches!(
        plan(&grow, T0).action,
        Some(Action::SetReplicas { replicas: 5, .. })
    ));
    let mut fin = persistent(3);
    fin.fleet.has_finalizer = false;
    fin.clock_skew = None;
    assert!(matches!(
        plan(&fin, T0).action,
        Some(Action::AddFleetFinalizer { .. })
    ));
    let mut abort = persistent(3);
    abort.hold(1, false);
    abort.fleet.invalid = vec!["spec.members: out of range".into()];
    abort.clock_skew = Some(Span::mins(-15));
    assert!(matches!(
        plan(&abort, T0).action,
        Some(Action::AbortHandoff { .. })
    ));
}
