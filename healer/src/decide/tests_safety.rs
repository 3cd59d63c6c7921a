//! Tests of the rules that keep the healer from destroying what is not this fleet's:
//! identity scoping, V1/V2, D8, the ordinal bound (W4), F1's finalizer-held Pods, the
//! Lost confirmation window and the target bound.

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

fn reason(p: &Plan) -> &str {
    &p.status.conditions[0].reason
}

fn blocked(p: &Plan) -> bool {
    p.status
        .conditions
        .iter()
        .any(|c| c.type_ == "Blocked" && c.status == "True")
}

fn message(p: &Plan) -> &str {
    &p.status.conditions[0].message
}

/// A deleting fleet whose workload and members are gone.
fn emptied(mut s: Snapshot) -> Snapshot {
    s.fleet.deleting = true;
    s.workload = None;
    s.pods.clear();
    s
}

/// Another fleet's member Pod `copy-<o>` carrying our identity (a copied fleet file).
fn copy_pod(o: u32) -> Pod {
    let mut p = member(o, WorkloadKind::StatefulSet);
    p.name = format!("copy-{o}");
    p.uid = format!("copy-pod-{o}");
    p.controller = Some(Controller {
        kind: "StatefulSet".into(),
        name: "copy".into(),
        uid: "copy-sts-uid".into(),
    });
    p
}

/// Another fleet's claim `data-copy-<o>` carrying our identity.
fn copy_claim(o: u32) -> Claim {
    Claim {
        name: format!("data-copy-{o}"),
        uid: format!("copy-claim-{o}"),
        ..claim(o)
    }
}

// ---- scoping: a fleet's objects are its own names with its identity ----

#[test]
fn d5_deletes_only_this_fleets_names_never_a_same_identity_claim_of_another_fleet() {
    let mut s = emptied(persistent(2));
    s.claims.push(copy_claim(0));
    s.claims.push(copy_claim(7));
    let mut deleted = Vec::new();
    for _ in 0..10 {
        let p = plan(&s, T0);
        match p.action {
            Some(Action::DeleteClaim { name, .. }) => {
                assert!(!name.starts_with("data-copy"), "deleted {name}");
                s.claims
                    .iter_mut()
                    .find(|c| c.name == name)
                    .unwrap()
                    .deletion = Some(T0);
                deleted.push(name);
            }
            _ => break,
        }
    }
    assert_eq!(deleted, ["data-alpha-0", "data-alpha-1"]);
    s.claims.retain(|c| c.name.starts_with("data-copy"));
    let p = plan(&s, T0);
    assert_eq!(
        p.rule,
        Rule::D7,
        "the other fleet's claims do not hold the release"
    );
}

#[test]
fn handoffs_of_another_fleet_with_the_same_identity_are_left_to_it() {
    let mut s = persistent(3);
    let mut other = copy_pod(0);
    other.replacement_finalizer = true;
    other.replacement_index = Some(ID.into());
    other.record = Some(RecordState::Valid(crate::record::HandoffRecord {
        identity: ID.into(),
        claim_uid: "copy-claim-0".into(),
        claim_resource_version: "1".into(),
        committed: false,
        cause: None,
    }));
    s.pods.push(other);
    s.claims.push(copy_claim(0));
    let p = plan(&s, T0);
    assert_eq!(p.action, None, "{:?}", p.action);
    assert_eq!(p.rule, Rule::S1);
}

#[test]
fn d4_counts_orphaned_member_pods_as_still_running() {
    let mut s = emptied(persistent(2));
    let mut orphan = member(1, WorkloadKind::StatefulSet);
    orphan.controller = None; // --cascade=orphan
    s.pods.push(orphan);
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::D4));
}

#[test]
fn d4_force_deletes_an_orphaned_member_stranded_on_a_dead_node() {
    // The StatefulSet was deleted with --cascade=orphan; alpha-1's Pod was deleted
    // since, but its node is unreachable: nothing but a force delete ends it.
    let mut s = emptied(persistent(2));
    let mut orphan = member(1, WorkloadKind::StatefulSet);
    orphan.controller = None;
    orphan.deletion = Some(at(-3));
    s.pods.push(orphan);
    s.unreachable(1);
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::F1);
    assert!(matches!(
        p.action,
        Some(Action::ForceDeletePod { ref name, .. }) if name == "alpha-1"
    ));
    // Within its grace and margin: D4 waits and wakes at the deadline.
    let p = plan(&s, at(-3) + Span::secs(30));
    assert_eq!((p.action.clone(), p.rule), (None, Rule::D4));
    assert!(p.wake_at.is_some());
    // On a live node past its grace: stuck, not stranded; named, never force-deleted.
    s.pod(1).node = NodeState::Ready;
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::D4));
    assert!(
        message(&p).contains("orphaned by their workload: alpha-1"),
        "{}",
        message(&p)
    );
    assert!(message(&p).contains("stuck terminating"), "{}", message(&p));
    // Not being deleted at all: the healer never deletes a running orphan itself.
    s.pod(1).deletion = None;
    s.unreachable(1);
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::D4));
}

#[test]
fn d3_a_workload_named_like_the_fleet_but_not_ours_keeps_every_claim() {
    let mut s = persistent(2);
    s.fleet.deleting = true;
    s.sts().identity = None;
    s.pods.clear();
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::D3));
    assert_eq!(reason(&p), "DeletionBlocked");
}

// ---- V2: identity conflict ----

#[test]
fn v2_the_newer_fleet_with_a_shared_identity_is_blocked_and_acts_on_nothing() {
    let mut s = persistent(3);
    s.fleet.identity_conflict = Some("apps/original".into());
    s.fleet.members = Some(5); // would grow
    s.down(1, at(-60)); // would be replaced
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::V2));
    assert_eq!(reason(&p), "IdentityConflict");
    assert!(blocked(&p));
    assert!(message(&p).contains("apps/original"));
    // The older fleet's deletion is no event of this one's: it is looked at again.
    assert_eq!(p.wake_at, Some(T0 + super::IDENTITY_RECHECK));
    // Not even the finalizer is added.
    s.fleet.has_finalizer = false;
    assert_eq!(plan(&s, T0).action, None);
}

#[test]
fn v2_a_deleted_conflicting_fleet_is_released_without_deleting_anything() {
    let mut s = persistent(3);
    s.fleet.identity_conflict = Some("apps/original".into());
    s.fleet.deleting = true;
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::V2);
    assert!(matches!(
        p.action,
        Some(Action::RemoveFleetFinalizer { .. })
    ));
}

#[test]
fn v2_and_v1_abort_a_handoff_instead_of_finishing_it() {
    for restrict in [0, 1] {
        let mut s = persistent(3);
        s.hold(1, true);
        s.pod(1).deletion = Some(at(-1));
        if restrict == 0 {
            s.fleet.identity_conflict = Some("apps/original".into());
        } else {
            s.fleet.invalid = vec!["spec.members: 500 is above 100".into()];
        }
        let p = plan(&s, T0);
        assert_eq!(p.rule, Rule::H2);
        assert!(matches!(p.action, Some(Action::AbortHandoff { .. })));
    }
}

// ---- V1: invalid configuration ----

#[test]
fn v1_an_invalid_live_spec_is_blocked_with_the_validation_messages() {
    let mut s = persistent(3);
    s.fleet.invalid = vec!["spec.members: 500 is out of range (expected 1..100)".into()];
    s.fleet.members = Some(500);
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::V1));
    assert_eq!(reason(&p), "InvalidConfiguration");
    assert!(blocked(&p));
    assert!(message(&p).contains("spec.members: 500"));
    // Deleting an invalid fleet does nothing either.
    s.fleet.deleting = true;
    assert_eq!(plan(&s, T0).action, None);
}

// ---- D8: deletion protection ----

#[test]
fn d8_a_protected_fleet_being_deleted_keeps_its_workload_and_every_disk() {
    let mut s = persistent(3);
    s.fleet.deleting = true;
    s.fleet.deletion_protected = true;
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::D8));
    assert_eq!(reason(&p), "DeletionProtected");
    assert!(blocked(&p));
    assert!(message(&p).contains("deletionProtection: false"));
    // Also once the workload went some other way: no claim is deleted.
    let mut s = emptied(s);
    s.fleet.deletion_protected = true;
    assert_eq!(plan(&s, T0).action, None);
    // Protection off: deletion proceeds in order.
    s.fleet.deletion_protected = false;
    assert_eq!(plan(&s, T0).rule, Rule::D5);
}

// ---- the ordinal bound ----

#[test]
fn names_beyond_the_member_limit_are_ignored_and_reported_and_size_nothing() {
    let mut s = persistent(3);
    s.claims.push(Claim {
        name: "data-alpha-50000000".into(),
        uid: "huge".into(),
        ..claim(0)
    });
    s.claims.push(Claim {
        name: "data-alpha-4294967295".into(),
        uid: "huger".into(),
        ..claim(0)
    });
    let mut far = member(0, WorkloadKind::StatefulSet);
    far.name = "alpha-100".into();
    far.uid = "far".into();
    s.pods.push(far);
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::S1);
    assert_eq!(p.ignored.len(), 3, "{:?}", p.ignored);
    assert!(p.ignored.iter().any(|l| l.contains("data-alpha-50000000")));
    // Not deleted by fleet deletion either.
    let mut s = emptied(s);
    s.claims.retain(|c| c.uid.starts_with("huge"));
    assert_eq!(plan(&s, T0).rule, Rule::D7);
}

#[test]
fn w4_a_workload_scaled_beyond_the_limit_gets_no_action() {
    let mut s = persistent(3);
    s.sts().replicas = i32::MAX;
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::W4));
    assert!(blocked(&p));
    assert!(p.status.member_states.len() <= 100);
}

#[test]
fn the_target_never_leaves_zero_to_the_member_limit() {
    let mut s = persistent(3);
    s.fleet.members = Some(5000);
    let p = plan(&s, T0);
    assert_eq!(p.status.desired_members, Some(100));
    s.fleet.members = Some(-4);
    let p = plan(&s, T0);
    assert_eq!(p.status.desired_members, Some(0));
    // Contraction toward 0 is still one step at a time.
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas { replicas: 2, .. })
    ));
}

// ---- F1: a Pod held by someone else's finalizer ----

#[test]
fn f1_does_not_starve_later_rules_on_a_pod_held_by_a_foreign_finalizer() {
    let mut s = persistent(3);
    s.fleet.members = Some(4);
    let p = s.pod(2);
    p.deletion = Some(at(-30));
    p.force_deleted = true;
    p.other_finalizers = vec!["example.com/backup".into()];
    let p = plan(&s, T0);
    assert_ne!(p.rule, Rule::F1);
    assert!(!matches!(p.action, Some(Action::ForceDeletePod { .. })));
    // Later rules ran: growth is held by G4 (member 2 undecided), not by F1.
    assert_eq!(p.rule, Rule::G4, "{}", message(&p));
    // A PersistentFleet names the finalizer too, in the condition and on the member.
    let mut s = persistent(3);
    let p = s.pod(2);
    p.deletion = Some(at(-30));
    p.force_deleted = true;
    p.other_finalizers = vec!["example.com/backup".into()];
    let p = plan(&s, T0);
    assert!(
        message(&p).contains("example.com/backup"),
        "{}",
        message(&p)
    );
    let m = p
        .status
        .member_states
        .iter()
        .find(|m| m.name == "alpha-2")
        .unwrap();
    assert!(
        m.message
            .as_deref()
            .unwrap_or_default()
            .contains("example.com/backup"),
        "{m:?}"
    );
    // With nothing else to say (a Bucket `Ordered` fleet has no disk rules), the hold is
    // reported.
    let mut s = bucket_ordered(3);
    let p = s.pod(2);
    p.deletion = Some(at(-30));
    p.force_deleted = true;
    p.other_finalizers = vec!["example.com/backup".into()];
    let p = plan(&s, T0);
    assert!(
        message(&p).contains("example.com/backup"),
        "{}",
        message(&p)
    );
}

// ---- R2: Lost must be confirmed ----

#[test]
fn r2_a_claim_lost_for_less_than_the_window_waits_and_asks_to_be_woken() {
    let mut s = persistent(3);
    s.lose(1);
    s.claim(1).lost_since = Some(at(0));
    let p = plan(&s, T0 + crate::time::Span::secs(20));
    assert!(p.action.is_none(), "{:?}", p.action);
    assert_eq!(p.wake_at, Some(at(1)));
    assert!(message(&p).contains("reported lost"));
    // Seen Lost for the whole window: replaced.
    let p = plan(&s, at(1));
    assert_eq!(p.rule, Rule::R2);
    // Never observed as Lost before (no time): not confirmed.
    s.claim(1).lost_since = None;
    assert!(plan(&s, at(10)).action.is_none());
}

// ---- the pure helpers the runtime uses ----

#[test]
fn the_oldest_fleet_owns_a_shared_identity() {
    use celld_api::CelldFleet;
    use serde_json::json;
    let fleet = |ns: &str, name: &str, uid: &str, created: &str| -> CelldFleet {
        serde_json::from_value(json!({
            "apiVersion": "fleet.celld.dev/v1alpha1", "kind": "CelldFleet",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": created},
            "spec": {"identity": ID, "profile": "PersistentFleet",
                     "runtimeImage": "x", "serviceAccountName": "s",
                     "storage": {"bucket": "b", "region": "r"},
                     "placement": {"zones": ["r-a"]}}
        }))
        .unwrap()
    };
    let a = fleet("apps", "alpha", "1", "2026-01-01T00:00:00Z");
    let b = fleet("apps", "beta", "2", "2026-02-01T00:00:00Z");
    let c = fleet("apps", "gamma", "3", "2026-01-01T00:00:00Z");
    let all = [a.clone(), b.clone(), c.clone()];
    use crate::observe::identity_owner;
    assert_eq!(identity_owner(&a, &all), None);
    assert_eq!(identity_owner(&b, &all).as_deref(), Some("apps/alpha"));
    // Same creation time: namespace, then name decides.
    assert_eq!(identity_owner(&c, &all).as_deref(), Some("apps/alpha"));
    let mut other = b.clone();
    other.spec.identity = OTHER_ID.into();
    assert_eq!(identity_owner(&other, &all), None);

    // An older fleet the runtime could not read, whose identity it knows, still owns it.
    use crate::observe::{Claimant, identity_owner_among};
    let created = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2025-12-01T00:00:00Z".parse().unwrap(),
    );
    let unreadable = Claimant {
        identity: ID,
        uid: Some("9"),
        created: Some(&created),
        namespace: "apps",
        name: "first",
    };
    let among = |me: &CelldFleet| {
        identity_owner_among(me, all.iter().map(Claimant::of).chain([unreadable]))
    };
    assert_eq!(among(&a).as_deref(), Some("apps/first"));
    assert_eq!(among(&other), None);
}

#[test]
fn the_live_spec_is_checked_with_the_generators_messages() {
    use celld_api::CelldFleet;
    use serde_json::json;
    let mut f: CelldFleet = serde_json::from_value(json!({
        "apiVersion": "fleet.celld.dev/v1alpha1", "kind": "CelldFleet",
        "metadata": {"name": "alpha", "namespace": "apps", "uid": "u", "resourceVersion": "1",
                     "finalizers": ["fleet.celld.dev/lifecycle-protection"],
                     "managedFields": [{"manager": "argocd-controller"}]},
        "spec": {"identity": ID, "profile": "PersistentFleet",
                 "runtimeImage": "ghcr.io/ewhauser/celld@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                 "members": 3, "serviceAccountName": "runtime",
                 "storage": {"bucket": "alpha-bucket", "region": "us-east-1", "storageClassName": "gp3"},
                 "placement": {"zones": ["us-east-1a", "us-east-1b", "us-east-1c"]}}
    }))
    .unwrap();
    assert_eq!(crate::validity::problems(&f), Vec::<String>::new());
    f.spec.members = Some(5000);
    let problems = crate::validity::problems(&f);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("spec.members: "), "{problems:?}");
}

// ---- V3: the bucket reserved to another identity ----

#[test]
fn v3_a_bucket_reserved_to_another_identity_stops_growth_and_healing() {
    let mut s = persistent(3);
    s.fleet.reservation = Some(Reservation {
        name: "s3-abc".into(),
        found: Some(ReservedFor {
            this_fleet: false,
            holder: format!("identity {OTHER_ID} (fleet apps/original)"),
        }),
    });
    s.fleet.members = Some(5);
    s.down(1, at(-60));
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::V3));
    assert_eq!(reason(&p), "StorageScopeConflict");
    assert!(blocked(&p));
    assert!(message(&p).contains(OTHER_ID));
    assert_eq!(p.status.reservation, None);
    // Deleting the fleet still deletes its own disks (they are its own).
    let mut s = emptied(s);
    s.fleet.deletion_protected = false;
    assert_eq!(plan(&s, T0).rule, Rule::D5);
}

#[test]
fn v3_a_copy_with_the_same_identity_does_not_hold_the_originals_reservation() {
    let original = fleet_object("apps", "alpha", ID);
    let spec = celld_api::CelldBucketReservationSpec {
        bucket: "alpha-bucket".into(),
        prefix: None,
        identity: ID.into(),
        fleet_namespace: "apps".into(),
        fleet_name: "alpha".into(),
    };
    assert!(spec.held_by(&original));
    // The same file applied in another namespace, or under another name: a copy.
    assert!(!spec.held_by(&fleet_object("staging", "alpha", ID)));
    let mut renamed = fleet_object("apps", "beta", ID);
    renamed.spec.storage.bucket = "alpha-bucket".into();
    assert!(!spec.held_by(&renamed));
    // Another prefix of the bucket is another scope.
    let mut scoped = original.clone();
    scoped.spec.storage.prefix = Some("p".into());
    assert!(!spec.held_by(&scoped));
    // What decide sees of such a reservation: V3, naming the holder.
    let mut s = persistent(3);
    s.fleet.namespace = "staging".into();
    s.fleet.reservation = Some(Reservation {
        name: "s3-abc".into(),
        found: Some(ReservedFor {
            this_fleet: spec.held_by(&fleet_object("staging", "alpha", ID)),
            holder: spec.holder(),
        }),
    });
    s.fleet.members = Some(4);
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::V3));
    assert!(
        message(&p).contains("(fleet apps/alpha)"),
        "{}",
        message(&p)
    );
}

#[test]
fn the_status_names_the_reservation_once_found_with_this_identity() {
    let mut s = persistent(3);
    s.fleet.reservation = Some(Reservation {
        name: "s3-abc".into(),
        found: Some(ReservedFor {
            this_fleet: true,
            holder: format!("identity {ID} (fleet apps/alpha)"),
        }),
    });
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::S1);
    assert_eq!(p.status.reservation.as_deref(), Some("s3-abc"));
    // Not there (yet): growth and healing go on; nothing is named.
    s.fleet.reservation = Some(Reservation {
        name: "s3-abc".into(),
        found: None,
    });
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::S1);
    assert_eq!(p.status.reservation, None);
}

#[test]
fn f1_a_failed_force_delete_waits_its_back_off_and_later_rules_run() {
    let mut s = bucket_ordered(3);
    s.fleet.members = Some(4);
    let p = s.pod(2);
    p.deletion = Some(at(-30));
    p.force_delete_retry_at = Some(at(2));
    s.unreachable(2);
    let plan_now = plan(&s, T0);
    // Growth (rule G2 for a Bucket fleet) is not starved by the stuck Pod.
    assert_eq!(plan_now.rule, Rule::G2);
    assert!(plan_now.wake_at.is_some_and(|t| t <= at(2)));
    // Once the back-off passed, F1 tries again first.
    assert_eq!(plan(&s, at(2)).rule, Rule::F1);
}

#[test]
fn the_plan_does_not_depend_on_the_order_objects_come_in() {
    let cfg = Config::default();
    let mut fixtures = Vec::new();
    // Two members stranded past their grace (F1 picks one).
    let mut s = persistent(4);
    s.pod(1).deletion = Some(at(-30));
    s.pod(2).deletion = Some(at(-30));
    fixtures.push(s);
    // Deletion with several claims (D5 picks one).
    let mut s = emptied(persistent(3));
    s.fleet.deletion_protected = false;
    fixtures.push(s);
    // A due replacement among several members.
    let mut s = persistent(5);
    s.down(3, at(-30));
    fixtures.push(s);
    for s in fixtures {
        let a = decide(&s, T0, &cfg);
        let mut r = s.clone();
        r.pods.reverse();
        r.claims.reverse();
        let b = decide(&r, T0, &cfg);
        assert_eq!(a.action, b.action);
        assert_eq!(a.rule, b.rule);
        assert_eq!(a.status, b.status);
    }
}

#[test]
fn d4_does_not_wait_for_a_same_identity_deployment_fleet_with_a_longer_name() {
    let mut s = emptied(bucket(2));
    s.fleet.deletion_protected = false;
    // Fleet `alpha-x` (a copy) has ReplicaSet `alpha-x-5d8f7` and an orphan Pod.
    let mut copy = member(0, WorkloadKind::Deployment);
    copy.name = "alpha-x-5d8f7-abcde".into();
    copy.controller = Some(Controller {
        kind: "ReplicaSet".into(),
        name: "alpha-x-5d8f7".into(),
        uid: "copy-rs".into(),
    });
    let mut orphan = member(1, WorkloadKind::Deployment);
    orphan.name = "alpha-x-5d8f7-fghij".into();
    orphan.controller = None;
    s.pods = vec![copy, orphan];
    assert_eq!(plan(&s, T0).rule, Rule::D7);
    // Our own ReplicaSet's Pod and our own orphan do hold deletion.
    let mut ours = member(0, WorkloadKind::Deployment);
    ours.name = "alpha-7d9f8-abcde".into();
    ours.controller = Some(Controller {
        kind: "ReplicaSet".into(),
        name: "alpha-7d9f8".into(),
        uid: "rs".into(),
    });
    s.pods = vec![ours.clone()];
    assert_eq!(plan(&s, T0).rule, Rule::D4);
    ours.controller = None;
    s.pods = vec![ours];
    assert_eq!(plan(&s, T0).rule, Rule::D4);
}
