//! Confirming a destructive decision on a fresh read.
//!
//! `decide` normally runs on the watch caches, which may lag or disagree with each other
//! (one watch stalled, another current). A write that removes something (a claim, a Pod,
//! the workload, a member by contraction) is therefore made only after the runtime has
//! read every object of the fleet again from the API server, run `decide` on that fresh
//! snapshot, and found the same rule aimed at the same objects. The write then carries
//! the fresh preconditions. When the fresh decision differs, the cached one is dropped:
//! the fresh one is made instead if it destroys nothing (an abort, keeping the disk, for
//! example), and otherwise nothing is written until the caches catch up.
//!
//! Pure, so the simulation runs exactly this comparison against its lagging views.

use crate::config::Config;
use crate::plan::{Action, Plan};
use crate::snapshot::Snapshot;
use crate::time::Timestamp;

/// What to do with a cached decision after the fresh read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confirmation {
    /// The fresh decision is the same write on the same objects: make it, with the
    /// fresh preconditions it carries.
    Confirmed(Action),
    /// The fresh decision is a different write that destroys nothing: make that instead.
    Instead(Action),
    /// No write: the fresh read does not justify the cached one (why, for the log).
    Hold(String),
}

/// Whether `action` must be confirmed on a fresh read before it is made: every write
/// that removes something, growth (a fresh-disk run must not start while the scheduler
/// has not decided a member the caches show as placed) and the fleet's release (which
/// must not happen while a claim the caches no longer show is still there).
pub fn needs_confirmation(action: &Action) -> bool {
    action.is_destructive()
        || matches!(
            action,
            Action::SetReplicas { .. } | Action::RemoveFleetFinalizer { .. }
        )
}

/// Whether `next`, decided on the fresh read that confirmed `done` once `done` is
/// applied to it ([`crate::snapshot::Snapshot::force_deleted`]), may go out with `done`,
/// on the same read ([`batch`]): only a force delete of another Pod after a force delete
/// (rule F1).
///
/// A node or zone lost strands several members of a fleet at once, all due together,
/// and one fresh read per Pod put a round trip to a busy API server before each of
/// them. Rule F1's write depends on the fleet's gates and its workload, which the read
/// just checked, and on its target: a member (its identity and controller), due (its
/// deletionTimestamp), not held by a handoff, which does not depend on the other
/// members. Every other write depends on several objects at once (a disk's members, the
/// replica count), and has a read of its own.
pub fn rides_fresh_read(done: &Action, next: &Action) -> bool {
    matches!(
        (done, next),
        (Action::ForceDeletePod { uid: a, .. }, Action::ForceDeletePod { uid: b, .. }) if a != b
    )
}

/// The write that goes out with `done` on the same fresh read, if there is one:
/// `on_read`, decided on the fresh read `done` was confirmed on (with `done` and the
/// deletes before it applied), rides it ([`rides_fresh_read`]), and `on_caches`,
/// decided on the caches (with the same deletes applied), reaches the same write, as
/// every write's cached and fresh decisions must ([`confirm`]).
pub fn ride(done: &Action, on_read: &Plan, on_caches: &Plan) -> Option<Action> {
    let next = on_read.action.as_ref()?;
    let cached = on_caches.action.as_ref()?;
    (rides_fresh_read(done, next) && same_target(next, cached)).then(|| next.clone())
}

/// The force deletes sent together with `first` (confirmed on the fresh read `read`):
/// the fleet is decided again on the read and on the caches, `first` applied to both,
/// then again with the next applied, for as long as the next write rides the read
/// ([`ride`]). Each plan holds its write. They go out at once with `first`, so each is
/// made as soon after the read as `first` is; a write refused or failed does not make
/// the others wrong, since none depends on another member (see [`rides_fresh_read`]).
pub fn batch(
    first: &Action,
    mut read: Snapshot,
    mut caches: Snapshot,
    now: Timestamp,
    config: &Config,
) -> Vec<Plan> {
    let mut out: Vec<Plan> = Vec::new();
    // Rule F1 never aims at a Pod it force-deleted, so each step is a Pod not in the
    // batch yet; the set makes that a bound of its own, and the Pods bound the batch.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..read.pods.len() {
        let done = out.last().and_then(|p| p.action.as_ref()).unwrap_or(first);
        let Action::ForceDeletePod { uid, .. } = done else {
            break;
        };
        seen.insert(uid.clone());
        read.force_deleted(uid);
        caches.force_deleted(uid);
        let mut on_read = crate::decide(&read, now, config);
        let Some(next) = ride(done, &on_read, &crate::decide(&caches, now, config)) else {
            break;
        };
        if matches!(&next, Action::ForceDeletePod { uid, .. } if seen.contains(uid)) {
            break;
        }
        on_read.action = Some(next);
        out.push(on_read);
    }
    out
}

/// Compares the cached decision with the plan `decide` made on the fresh snapshot.
pub fn confirm(cached: &Action, fresh: &Plan) -> Confirmation {
    match &fresh.action {
        Some(a) if same_target(cached, a) => Confirmation::Confirmed(a.clone()),
        Some(a) if !a.is_destructive() => Confirmation::Instead(a.clone()),
        Some(a) => Confirmation::Hold(format!(
            "the fresh read leads to another destructive write (rule {}, {a:?})",
            fresh.rule
        )),
        None => Confirmation::Hold(format!(
            "the fresh read justifies no write (rule {})",
            fresh.rule
        )),
    }
}

/// The same kind of write on the same objects (uids), for the same purpose. Resource
/// versions may differ: the fresh ones are used.
fn same_target(a: &Action, b: &Action) -> bool {
    match (a, b) {
        (
            Action::RemoveFleetFinalizer { uid: x, .. },
            Action::RemoveFleetFinalizer { uid: y, .. },
        )
        | (Action::ForceDeletePod { uid: x, .. }, Action::ForceDeletePod { uid: y, .. })
        | (Action::DeletePod { uid: x, .. }, Action::DeletePod { uid: y, .. })
        | (Action::DeleteWorkload { uid: x, .. }, Action::DeleteWorkload { uid: y, .. }) => x == y,
        (Action::StartHandoff(x), Action::StartHandoff(y)) => {
            x.pod_uid == y.pod_uid && x.claim_uid == y.claim_uid && x.cause == y.cause
        }
        (
            Action::DeleteClaim {
                uid: x, purpose: p, ..
            },
            Action::DeleteClaim {
                uid: y, purpose: q, ..
            },
        ) => x == y && p == q,
        (
            Action::SetReplicas {
                uid: x,
                from: f1,
                replicas: r1,
                ..
            },
            Action::SetReplicas {
                uid: y,
                from: f2,
                replicas: r2,
                ..
            },
        ) => x == y && f1 == f2 && r1 == r2,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::decide;
    use crate::rule::Rule;
    use crate::testkit::{Edit, at, persistent};

    fn due_replacement() -> crate::snapshot::Snapshot {
        let mut s = persistent(3);
        s.down(1, at(-30));
        s
    }

    #[test]
    fn the_same_handoff_on_the_fresh_read_is_confirmed_with_fresh_preconditions() {
        let cfg = Config::default();
        let cached = decide(&due_replacement(), at(0), &cfg);
        let mut fresh = due_replacement();
        fresh.pod(1).resource_version = "999".into();
        let plan = decide(&fresh, at(0), &cfg);
        let Confirmation::Confirmed(Action::StartHandoff(h)) =
            confirm(cached.action.as_ref().unwrap(), &plan)
        else {
            panic!("not confirmed");
        };
        assert_eq!(h.pod_resource_version, "999");
    }

    #[test]
    fn a_second_member_down_on_the_fresh_read_holds_the_handoff() {
        let cfg = Config::default();
        let cached = decide(&due_replacement(), at(0), &cfg);
        assert_eq!(cached.rule, Rule::R3);
        // The cache lagged: member 2 is also down.
        let mut fresh = due_replacement();
        fresh.down(2, at(-1));
        let plan = decide(&fresh, at(0), &cfg);
        assert!(matches!(
            confirm(cached.action.as_ref().unwrap(), &plan),
            Confirmation::Hold(_)
        ));
    }

    #[test]
    fn a_fresh_abort_is_made_instead() {
        let cfg = Config::default();
        let mut cached_s = persistent(3);
        cached_s.hold(1, true);
        cached_s.pod(1).deletion = Some(at(-1));
        let cached = decide(&cached_s, at(0), &cfg);
        assert_eq!(cached.rule, Rule::H3);
        // The claim changed since the decision (repaired): the fresh plan aborts.
        let mut fresh = cached_s.clone();
        fresh.claim(1).resource_version = "1000".into();
        let plan = decide(&fresh, at(0), &cfg);
        assert!(matches!(
            confirm(cached.action.as_ref().unwrap(), &plan),
            Confirmation::Instead(Action::AbortHandoff { .. })
        ));
    }

    /// A lost node strands three members at once: the fresh read that confirmed the
    /// first force delete, with each write applied, leads to the next due Pod (the
    /// caches agreeing), and all go out together; the Pod a finalizer holds is aimed at
    /// once and never again.
    #[test]
    fn the_due_pods_of_a_lost_node_go_out_together_on_one_fresh_read() {
        let cfg = Config::default();
        let mut fresh = persistent(5);
        for o in [3, 1, 2] {
            fresh.pod(o).deletion = Some(at(-5));
            fresh.unreachable(o);
        }
        // Held by someone else's finalizer: it stays, read as force-deleted already.
        fresh.pod(2).other_finalizers = vec!["example.com/keep".into()];
        let caches = fresh.clone();
        let first = decide(&fresh, at(0), &cfg).action.expect("F1");
        let rest = batch(&first, fresh.clone(), caches, at(0), &cfg);
        let names: Vec<_> = std::iter::once(&first)
            .chain(rest.iter().filter_map(|p| p.action.as_ref()))
            .map(|a| match a {
                Action::ForceDeletePod { name, .. } => name.as_str(),
                other => panic!("not a force delete: {other:?}"),
            })
            .collect();
        assert_eq!(names, ["alpha-1", "alpha-2", "alpha-3"]);
        assert!(rest.iter().all(|p| p.rule == Rule::F1));
        // With all three applied, nothing more rides the read.
        for a in std::iter::once(&first).chain(rest.iter().filter_map(|p| p.action.as_ref())) {
            if let Action::ForceDeletePod { uid, .. } = a {
                fresh.force_deleted(uid);
            }
        }
        let left: Vec<_> = fresh.pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(left, ["alpha-0", "alpha-2", "alpha-4"]);
        assert!(fresh.pods[1].force_deleted);
        assert!(!matches!(
            decide(&fresh, at(0), &cfg).action,
            Some(Action::ForceDeletePod { .. })
        ));
        // The caches have not seen the third member stranded: only the first two go.
        let mut lagging = persistent(5);
        for o in [1, 2] {
            lagging.pod(o).deletion = Some(at(-5));
            lagging.unreachable(o);
        }
        lagging.pod(2).other_finalizers = vec!["example.com/keep".into()];
        let mut read = persistent(5);
        for o in [3, 1, 2] {
            read.pod(o).deletion = Some(at(-5));
            read.unreachable(o);
        }
        read.pod(2).other_finalizers = vec!["example.com/keep".into()];
        assert_eq!(batch(&first, read, lagging, at(0), &cfg).len(), 1);
        // Anything but a force delete first: nothing goes with it.
        let handoff = decide(&due_replacement(), at(0), &cfg).action.expect("R3");
        assert!(batch(&handoff, due_replacement(), due_replacement(), at(0), &cfg).is_empty());
    }

    /// The caches must agree for each write sent with the first: a pause (rule P1) they
    /// show, or caches that have not seen the first delete, and the next due Pod waits
    /// for a fresh read of its own.
    #[test]
    fn a_gate_the_caches_show_closed_stops_the_ride() {
        let cfg = Config::default();
        let mut fresh = persistent(3);
        for o in [1, 2] {
            fresh.pod(o).deletion = Some(at(-5));
            fresh.unreachable(o);
        }
        let done = decide(&fresh, at(0), &cfg).action.expect("F1");
        let Action::ForceDeletePod { uid, .. } = &done else {
            panic!("not a force delete: {done:?}");
        };
        fresh.force_deleted(uid);
        let on_read = decide(&fresh, at(0), &cfg);
        assert!(matches!(
            on_read.action,
            Some(Action::ForceDeletePod { .. })
        ));
        let agreeing = fresh.clone();
        assert!(ride(&done, &on_read, &decide(&agreeing, at(0), &cfg)).is_some());
        let mut paused = fresh.clone();
        paused.fleet.paused = true;
        assert_eq!(ride(&done, &on_read, &decide(&paused, at(0), &cfg)), None);
        // The caches have not seen the first delete yet: they aim at that Pod again.
        let mut lagging = fresh.clone();
        lagging.pods = persistent(3).pods;
        for o in [1, 2] {
            lagging.pod(o).deletion = Some(at(-5));
            lagging.unreachable(o);
        }
        assert_eq!(ride(&done, &on_read, &decide(&lagging, at(0), &cfg)), None);
    }

    /// Only a force delete of another Pod rides the read: the same Pod again, or any
    /// write that depends on more than its own target, reads again.
    #[test]
    fn only_a_force_delete_of_another_pod_rides_a_fresh_read() {
        let force = |uid: &str| Action::ForceDeletePod {
            name: format!("alpha-{uid}"),
            uid: uid.into(),
        };
        let delete = Action::DeletePod {
            name: "alpha-2".into(),
            uid: "2".into(),
            resource_version: "7".into(),
        };
        assert!(rides_fresh_read(&force("1"), &force("2")));
        assert!(!rides_fresh_read(&force("1"), &force("1")));
        assert!(!rides_fresh_read(&force("1"), &delete));
        assert!(!rides_fresh_read(&delete, &force("2")));
    }

    /// What a force delete leaves: the Pod gone, or, held by a finalizer (the healer's
    /// own or another's), there with a grace of zero; an unknown uid changes nothing.
    #[test]
    fn a_force_delete_leaves_the_pod_gone_or_held() {
        let mut s = persistent(3);
        s.pod(1).replacement_finalizer = true;
        s.pod(2).other_finalizers = vec!["example.com/keep".into()];
        let before = s.clone();
        s.force_deleted("no-such-uid");
        assert_eq!(s, before);
        for o in 0..3 {
            let uid = before.pods[o].uid.clone();
            s.force_deleted(&uid);
        }
        let left: Vec<_> = s
            .pods
            .iter()
            .map(|p| (p.name.as_str(), p.force_deleted))
            .collect();
        assert_eq!(left, [("alpha-1", true), ("alpha-2", true)]);
    }
}
