//! One test (at least) per rule: the action, the rule name and the reported reason.

use crate::rule::Rule;
use celld_api::CapacityMode;
use celld_api::Profile;

use crate::config::Config;
use crate::decide;
use crate::plan::{Action, ClaimDeletion, HandoffCause, Plan};
use crate::snapshot::*;
use crate::testkit::*;
use crate::time::{Span, Timestamp};

fn plan(s: &Snapshot, now: Timestamp) -> Plan {
    decide(s, now, &Config::default())
}

fn cond<'a>(p: &'a Plan, t: &str) -> &'a celld_api::Condition {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition"))
}

fn reason(p: &Plan) -> &str {
    &cond(p, "Ready").reason
}

fn blocked(p: &Plan) -> bool {
    cond(p, "Blocked").status == "True"
}

fn message(p: &Plan) -> &str {
    &cond(p, "Ready").message
}

fn policy(mode: CapacityMode) -> celld_api::defaults::CapacityPolicy {
    celld_api::Capacity {
        mode: Some(mode),
        min_members: Some(3),
        max_members: Some(6),
        ..Default::default()
    }
    .effective()
}

// ---- steady state and status (S1-S4) ----

#[test]
fn s1_steady_fleet_is_provisioned_and_ready() {
    let p = plan(&persistent(3), T0);
    assert_eq!(p.action, None);
    assert_eq!(p.rule, Rule::S1);
    assert_eq!(reason(&p), "Provisioned");
    assert_eq!(cond(&p, "Ready").status, "True");
    assert_eq!(cond(&p, "Progressing").status, "False");
    assert!(!blocked(&p));
    assert_eq!(cond(&p, "InfrastructureReady").status, "True");
    assert_eq!(p.status.desired_members, Some(3));
    assert_eq!(p.status.applied_members, Some(3));
    assert_eq!(p.status.ready_members, Some(3));
    assert_eq!(p.status.members, Some(3));
    assert_eq!(
        p.status.label_selector.as_deref(),
        Some("fleet.celld.dev/identity=7kq2m9x4c1v8b3n6z5h0j2w4r8")
    );
    assert_eq!(p.status.member_states.len(), 3);
    assert!(p.status.member_states.iter().all(|m| m.state == "Ready"));
    assert_eq!(p.wake_at, None);
}

#[test]
fn s3_rollout_in_progress_is_provisioning() {
    let mut s = persistent(3);
    s.sts().update_revision = Some("rev-2".into());
    s.sts().updated_replicas = 1;
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::S3, "Provisioning")
    );
    assert_eq!(cond(&p, "Progressing").status, "True");
}

#[test]
fn s4_ready_counts_only_once_the_workload_observed_its_spec() {
    let mut s = persistent(3);
    s.sts().generation = 5;
    let p = plan(&s, T0);
    assert_eq!(p.status.ready_members, Some(0));
    assert_eq!(cond(&p, "Ready").status, "False");
}

#[test]
fn s4_transition_times_are_kept_and_blocked_since_tracks_blocked() {
    let mut s = persistent(3);
    s.fleet.members = Some(4);
    s.claims.push(Claim {
        identity: Some(OTHER_ID.into()),
        ..claim(3)
    });
    let first = plan(&s, T0);
    assert!(blocked(&first));
    assert_eq!(
        first.status.blocked_since.as_deref(),
        Some("2026-11-29T00:00:00Z")
    );
    s.fleet.previous_status = Some(first.status.clone());
    let later = plan(&s, at(30));
    assert_eq!(later.status.blocked_since, first.status.blocked_since);
    assert_eq!(
        cond(&later, "Blocked").last_transition_time,
        "2026-11-29T00:00:00Z"
    );
    s.claims.pop();
    s.fleet.members = Some(3);
    s.fleet.previous_status = Some(later.status);
    let clear = plan(&s, at(40));
    assert_eq!(clear.status.blocked_since, None);
    assert_eq!(
        cond(&clear, "Blocked").last_transition_time,
        "2026-11-29T00:40:00Z"
    );
}

// ---- handoff resolution (H1-H5) ----

#[test]
fn h1_prepared_record_on_a_live_pod_is_aborted_keeping_the_disk() {
    let mut s = persistent(3);
    s.hold(1, false);
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::H1);
    assert!(matches!(p.action, Some(Action::AbortHandoff { ref name, .. }) if name == "alpha-1"));
    assert_eq!(reason(&p), "LifecycleProgress");
}

#[test]
fn h1_prepared_record_on_a_terminating_pod_is_aborted() {
    // The guarded delete happened (maybe by someone else, maybe with a lost response)
    // but was never acknowledged to the healer: nothing authorizes the claim delete.
    let mut s = persistent(3);
    s.hold(1, false);
    s.pod(1).deletion = Some(at(-1));
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::H1);
    assert!(matches!(p.action, Some(Action::AbortHandoff { .. })));
}

#[test]
fn h1_runs_before_every_gate() {
    let mut s = persistent(3);
    s.hold(2, false);
    s.fleet.has_finalizer = false;
    s.infrastructure.drift.push("Service alpha differs".into());
    assert_eq!(plan(&s, T0).rule, Rule::H1);
}

#[test]
fn h2_pause_deletion_or_a_gone_statefulset_abort_even_a_committed_hold() {
    let mut base = persistent(3);
    base.hold(1, true);
    base.pod(1).deletion = Some(at(-1));
    let mut paused = base.clone();
    paused.fleet.paused = true;
    let mut deleting = base.clone();
    deleting.fleet.deleting = true;
    let mut gone = base.clone();
    gone.workload = None;
    let mut replaced = base.clone();
    replaced.sts().uid = "another-sts".into();
    let mut owner_changed = base.clone();
    owner_changed.pod(1).controller.as_mut().unwrap().name = "beta".into();
    for s in [paused, deleting, gone, replaced] {
        let p = plan(&s, T0);
        assert_eq!(p.rule, Rule::H2);
        assert!(
            matches!(p.action, Some(Action::AbortHandoff { .. })),
            "{p:?}"
        );
    }
    // A Pod whose controller no longer is our StatefulSet is no member; its hold is still
    // ours to release.
    let p = plan(&owner_changed, T0);
    assert_eq!(p.rule, Rule::H2);
}

#[test]
fn h3_committed_hold_deletes_exactly_the_recorded_claim() {
    let mut s = persistent(3);
    s.hold(1, true);
    s.pod(1).deletion = Some(at(-1));
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::H3);
    assert_eq!(
        p.action,
        Some(Action::DeleteClaim {
            name: "data-alpha-1".into(),
            uid: "claim-1-uid".into(),
            resource_version: "301".into(),
            purpose: ClaimDeletion::Handoff {
                pod: "alpha-1".into()
            },
        })
    );
}

#[test]
fn h3_finishes_for_a_member_scaled_in_meanwhile() {
    let mut s = persistent(3);
    s.hold(2, true);
    s.pod(2).deletion = Some(at(-1));
    s.sts().replicas = 2;
    assert_eq!(plan(&s, T0).rule, Rule::H3);
}

#[test]
fn h4_releases_once_the_claim_is_deleting_or_gone() {
    let mut s = persistent(3);
    s.hold(1, true);
    s.pod(1).deletion = Some(at(-1));
    s.claim(1).deletion = Some(at(0));
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::H4);
    assert!(matches!(p.action, Some(Action::ReleaseHandoff { .. })));
    s.claims.retain(|c| c.name != "data-alpha-1");
    assert!(matches!(
        plan(&s, T0).action,
        Some(Action::ReleaseHandoff { .. })
    ));
}

#[test]
fn h4_keeps_a_claim_that_changed_or_was_recreated() {
    let mut base = persistent(3);
    base.hold(1, true);
    base.pod(1).deletion = Some(at(-1));
    let mut repaired = base.clone();
    repaired.claim(1).resource_version = "999".into();
    let mut recreated = base.clone();
    recreated.claim(1).uid = "new-uid".into();
    let mut relabelled = base.clone();
    relabelled.claim(1).identity = Some(OTHER_ID.into());
    for s in [repaired, recreated, relabelled] {
        let p = plan(&s, T0);
        assert_eq!(p.rule, Rule::H4);
        assert!(
            matches!(p.action, Some(Action::AbortHandoff { .. })),
            "{p:?}"
        );
    }
}

#[test]
fn h5_malformed_or_stray_markers_are_aborted() {
    let mut bad = persistent(3);
    bad.hold(1, false);
    bad.pod(1).record = Some(RecordState::Malformed("expected value".into()));
    let mut committed_live = persistent(3);
    committed_live.hold(1, true);
    let mut stray = persistent(3);
    stray.pod(1).replacement_finalizer = true;
    let mut foreign = persistent(3);
    foreign.hold(1, true);
    foreign.pod(1).deletion = Some(at(-1));
    if let Some(RecordState::Valid(r)) = &mut foreign.pod(1).record {
        r.identity = OTHER_ID.into();
    }
    for s in [bad, committed_live, stray, foreign] {
        let p = plan(&s, T0);
        assert_eq!(p.rule, Rule::H5);
        assert!(
            matches!(p.action, Some(Action::AbortHandoff { .. })),
            "{p:?}"
        );
    }
}

// ---- finalizer and deletion (D1-D7) ----

#[test]
fn d1_adds_the_finalizer_when_missing() {
    let mut s = persistent(3);
    s.fleet.has_finalizer = false;
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::D1);
    assert_eq!(
        p.action,
        Some(Action::AddFleetFinalizer {
            uid: "fleet-uid".into(),
            resource_version: "7".into()
        })
    );
}

#[test]
fn d2_deletes_the_workload_in_the_foreground_first_even_when_paused() {
    let mut s = persistent(3);
    s.fleet.deleting = true;
    s.fleet.paused = true;
    s.infrastructure.drift.push("x".into());
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::D2);
    assert!(
        matches!(p.action, Some(Action::DeleteWorkload { ref uid, ref resource_version, .. }) if uid == "sts-uid" && resource_version == "100")
    );
    assert_eq!(reason(&p), "LifecycleProgress");
}

#[test]
fn d3_refuses_a_workload_that_is_not_ours() {
    let mut s = persistent(3);
    s.fleet.deleting = true;
    s.sts().identity = Some(OTHER_ID.into());
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::D3, "DeletionBlocked")
    );
    assert!(blocked(&p));
}

#[test]
fn d4_waits_for_the_members_to_go() {
    let mut s = persistent(3);
    s.fleet.deleting = true;
    s.sts().deleting = true;
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::D4, "Deleting")
    );
    s.workload = None;
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::D4));
}

#[test]
fn d4_force_deletes_a_member_stranded_during_deletion() {
    let mut s = persistent(3);
    s.fleet.deleting = true;
    s.sts().deleting = true;
    s.pod(0).deletion = Some(at(-3));
    s.unreachable(0);
    assert_eq!(plan(&s, T0).rule, Rule::F1);
}

#[test]
fn d5_deletes_every_claim_with_the_identity_including_removed_members() {
    let mut s = persistent(2);
    s.claims.push(claim(5)); // a removed member's kept disk
    s.claims.push(Claim {
        identity: Some(OTHER_ID.into()),
        ..claim(2)
    });
    s.fleet.deleting = true;
    s.workload = None;
    s.pods.clear();
    let mut deleted = Vec::new();
    for _ in 0..10 {
        let p = plan(&s, T0);
        match p.action {
            Some(Action::DeleteClaim { name, purpose, .. }) => {
                assert_eq!(p.rule, Rule::D5);
                assert_eq!(purpose, ClaimDeletion::FleetDeletion);
                s.claims
                    .iter_mut()
                    .find(|c| c.name == name)
                    .unwrap()
                    .deletion = Some(T0);
                deleted.push(name);
            }
            Some(Action::RemoveFleetFinalizer { .. }) => panic!("released before the disks went"),
            _ => break,
        }
    }
    assert_eq!(deleted, ["data-alpha-0", "data-alpha-1", "data-alpha-5"]);
    // D6: wait for them to go.
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::D6));
    // D7: only the foreign claim is left, untouched.
    s.claims.retain(|c| c.identity.as_deref() == Some(OTHER_ID));
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::D7);
    assert!(matches!(
        p.action,
        Some(Action::RemoveFleetFinalizer { .. })
    ));
}

// ---- gates (P1, I1, W1-W3) ----

#[test]
fn p1_pause_stops_every_lifecycle_action() {
    let mut s = persistent(3);
    s.fleet.paused = true;
    s.fleet.members = Some(5);
    s.pod(0).deletion = Some(at(-10));
    s.lose(1);
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::P1, "MaintenancePaused")
    );
    assert!(!blocked(&p));
}

#[test]
fn i1_infrastructure_drift_blocks_lifecycle_actions() {
    let mut s = persistent(3);
    s.infrastructure
        .drift
        .push("Service alpha-peers: publishNotReadyAddresses is false".into());
    s.lose(1);
    s.pod(0).deletion = Some(at(-10));
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::I1, "InfrastructureBlocked")
    );
    assert!(blocked(&p));
    assert_eq!(cond(&p, "InfrastructureReady").status, "False");
    assert!(message(&p).contains("publishNotReadyAddresses"));
}

#[test]
fn w1_w2_w3_workload_missing_foreign_or_deleting() {
    let mut missing = persistent(3);
    missing.workload = None;
    let p = plan(&missing, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::W1, "WorkloadMissing")
    );
    let mut owned = persistent(3);
    owned.sts().has_owner_references = true;
    let p = plan(&owned, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::W2, "LifecycleBlocked")
    );
    let mut unlabelled = persistent(3);
    unlabelled.sts().identity = None;
    unlabelled.fleet.members = Some(5);
    assert_eq!(plan(&unlabelled, T0).rule, Rule::W2);
    let mut deleting = persistent(3);
    deleting.sts().deleting = true;
    assert_eq!(plan(&deleting, T0).rule, Rule::W3);
}

// ---- force-deletion (F1) ----

#[test]
fn f1_force_deletes_two_minutes_past_grace_with_a_uid_precondition() {
    let mut s = persistent(3);
    // Kubernetes sets deletionTimestamp = request + grace.
    s.pod(2).deletion = Some(at(0));
    s.unreachable(2);
    let early = plan(&s, at(1));
    assert_eq!(early.action, None);
    assert_eq!(early.wake_at, Some(at(2)));
    let p = plan(&s, at(2));
    assert_eq!(p.rule, Rule::F1);
    assert_eq!(
        p.action,
        Some(Action::ForceDeletePod {
            name: "alpha-2".into(),
            uid: "pod-2-uid".into()
        })
    );
    assert_eq!(
        p.event.as_ref().map(|e| e.reason),
        Some("MemberForceDeleted")
    );
}

#[test]
fn f1_applies_to_ordered_bucket_fleets_but_not_deployments_or_held_pods() {
    let mut ordered = bucket_ordered(3);
    ordered.pod(1).deletion = Some(at(-5));
    ordered.unreachable(1);
    assert_eq!(plan(&ordered, T0).rule, Rule::F1);
    let mut dep = bucket(3);
    dep.pods[0].deletion = Some(at(-5));
    assert!(!matches!(
        plan(&dep, T0).action,
        Some(Action::ForceDeletePod { .. })
    ));
    // A Pod held by a handoff is resolved first, never force-deleted.
    let mut held = persistent(3);
    held.hold(1, true);
    held.pod(1).deletion = Some(at(-5));
    held.unreachable(1);
    assert_eq!(plan(&held, T0).rule, Rule::H3);
}

#[test]
fn f1_ignores_pods_the_workload_does_not_control() {
    let mut s = persistent(3);
    let mut stray = member(7, WorkloadKind::StatefulSet);
    stray.controller = None;
    stray.deletion = Some(at(-30));
    s.pods.push(stray);
    assert_eq!(plan(&s, T0).action, None);
}

// ---- capacity target (K1-K6) ----

#[test]
fn k1_k2_manual_and_shadow_follow_spec_members() {
    let mut s = persistent(3);
    s.fleet.members = Some(4);
    assert!(matches!(
        plan(&s, T0).action,
        Some(Action::SetReplicas { replicas: 4, .. })
    ));
    s.fleet.capacity = Some(policy(CapacityMode::Shadow));
    s.capacity.recommendation = Some(Recommendation {
        members: 6,
        reason: "ScaleOutRecommended".into(),
        message: "busy".into(),
        manual: false,
    });
    let p = plan(&s, T0);
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas { replicas: 4, .. })
    ));
    let cap = p.status.capacity.unwrap();
    assert_eq!(
        (cap.reason.as_str(), cap.desired_members),
        ("ScaleOutRecommended", Some(6))
    );
}

#[test]
fn k3_scale_out_grows_on_recommendation_and_never_below_members() {
    let mut s = persistent(3);
    s.fleet.capacity = Some(policy(CapacityMode::ScaleOut));
    s.capacity.recommendation = Some(Recommendation {
        members: 5,
        reason: "ScaleOutRecommended".into(),
        message: "busy".into(),
        manual: false,
    });
    // Two fresh ordinals form one run.
    assert!(matches!(
        plan(&s, T0).action,
        Some(Action::SetReplicas { replicas: 5, .. })
    ));
    s.capacity.recommendation.as_mut().unwrap().members = 1;
    assert_eq!(plan(&s, T0).action, None);
}

#[test]
fn k4_automatic_follows_the_recommendation_within_bounds() {
    let mut s = persistent(4);
    s.fleet.capacity = Some(policy(CapacityMode::Automatic));
    s.capacity.recommendation = Some(Recommendation {
        members: 1,
        reason: "ScaleInRecommended".into(),
        message: "idle".into(),
        manual: false,
    });
    s.capacity.survivors = SurvivorEvidence::Sufficient;
    let p = plan(&s, T0);
    assert_eq!(p.status.desired_members, Some(3)); // clamped to minMembers
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas { replicas: 3, .. })
    ));
    s.capacity.recommendation = None;
    assert_eq!(plan(&s, T0).action, None);
}

#[test]
fn k4_a_manual_edit_may_leave_the_bounds_and_needs_no_survivor_evidence() {
    let mut s = persistent(4);
    s.fleet.capacity = Some(policy(CapacityMode::Automatic));
    s.fleet.members = Some(2);
    s.capacity.recommendation = Some(Recommendation {
        members: 2,
        reason: "ManualOverride".into(),
        message: "manual".into(),
        manual: true,
    });
    // No survivor metrics at all: a manual contraction goes ahead anyway, below min 3.
    s.capacity.survivors = SurvivorEvidence::Unavailable;
    let p = plan(&s, T0);
    assert_eq!(p.status.desired_members, Some(2));
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas { replicas: 3, .. })
    ));
}

#[test]
fn k5_external_follows_the_scale_writer_within_the_bounds() {
    let mut s = persistent(4);
    s.fleet.capacity = Some(policy(CapacityMode::External));
    s.fleet.members = Some(5);
    assert!(matches!(
        plan(&s, T0).action,
        Some(Action::SetReplicas { replicas: 5, .. })
    ));
    // Below minMembers 3: the fleet keeps 3 (no contraction below the floor, whatever
    // the /scale writer asks).
    s.fleet.members = Some(2);
    s.sts().replicas = 3;
    s.sts().ready_replicas = 3;
    s.pods.retain(|p| p.name != "alpha-3");
    let p = plan(&s, T0);
    assert_eq!(p.action, None);
    assert_eq!(p.status.desired_members, Some(3));
    let cap = p.status.capacity.clone().unwrap();
    assert_eq!(cap.desired_members, Some(3));
    assert!(
        cap.message.contains("asks for 2: below minMembers 3"),
        "{}",
        cap.message
    );
    // Above maxMembers 6: it stops at 6.
    s.fleet.members = Some(9);
    let p = plan(&s, T0);
    assert_eq!(p.status.desired_members, Some(6));
    // Growth in runs: first back to alpha-3's kept disk.
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas {
            from: 3,
            replicas: 4,
            ..
        })
    ));
}

#[test]
fn k6_an_external_fleet_without_members_gets_its_first_count() {
    // A new fleet: the StatefulSet created at 0 replicas; it starts from minMembers.
    let mut s = persistent(0);
    s.fleet.capacity = Some(policy(CapacityMode::External));
    s.fleet.members = None;
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::K6);
    assert_eq!(
        p.action,
        Some(Action::InitializeMembers {
            uid: s.fleet.uid.clone(),
            resource_version: s.fleet.resource_version.clone(),
            members: 3,
        })
    );
    // Before any workload too (Argo CD has not created it yet), and while paused: the
    // count changes no member.
    s.workload = None;
    s.fleet.paused = true;
    assert_eq!(plan(&s, T0).rule, Rule::K6);
    // A running fleet keeps the count it runs, within [min, max].
    let mut s = bucket(5);
    s.fleet.capacity = Some(policy(CapacityMode::External));
    s.fleet.members = None;
    assert!(matches!(
        plan(&s, T0).action,
        Some(Action::InitializeMembers { members: 5, .. })
    ));
    s.sts().replicas = 9;
    assert!(matches!(
        plan(&s, T0).action,
        Some(Action::InitializeMembers { members: 6, .. })
    ));
    // Once set, never again; nor for any other mode.
    s.fleet.members = Some(4);
    assert_ne!(plan(&s, T0).rule, Rule::K6);
    s.fleet.members = None;
    s.fleet.capacity = Some(policy(CapacityMode::Automatic));
    assert_ne!(plan(&s, T0).rule, Rule::K6);
}

#[test]
fn s4_below_the_floor_a_fleet_is_never_ready() {
    // External, minMembers 3, one member running and ready, /scale asks for 3.
    let mut s = bucket(1);
    s.fleet.capacity = Some(policy(CapacityMode::External));
    s.fleet.members = Some(3);
    let p = plan(&s, T0);
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas { replicas: 3, .. })
    ));
    assert_eq!(cond(&p, "Ready").status, "False");
    assert!(
        message(&p).starts_with("1 of the 3 members the fleet requires is ready. "),
        "{}",
        message(&p)
    );
    // The other conditions keep the decision's own message.
    assert!(!cond(&p, "Progressing").message.contains("requires"));
    // The workload's own readiness is not enough: all 1 of 1 ready, below the floor.
    s.fleet.members = Some(1);
    let p = plan(&s, T0);
    assert_eq!(p.status.desired_members, Some(3));
    assert_eq!(cond(&p, "Ready").status, "False");
    // Nothing running at all: "all 0 ready" is no Ready fleet.
    let mut s = persistent(0);
    s.fleet.capacity = Some(policy(CapacityMode::External));
    s.fleet.members = Some(3);
    let p = plan(&s, T0);
    assert_eq!(cond(&p, "Ready").status, "False");
    assert!(message(&p).starts_with("0 of the 3 members the fleet requires are ready. "));
    // At the floor and all ready: Ready, with the plain message.
    let p = plan(&bucket(3), T0);
    assert_eq!(cond(&p, "Ready").status, "True");
    assert!(!message(&p).contains("requires"));
}

// ---- growth (G1-G5) ----

#[test]
fn g1_foreign_claim_in_range_blocks_all_growth() {
    let mut s = persistent(3);
    s.fleet.members = Some(6);
    s.claims.push(claim(3)); // kept run before it: still held
    s.claims.push(Claim {
        identity: None,
        ..claim(5)
    });
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::G1, "StorageIdentityConflict")
    );
    assert!(blocked(&p));
    assert!(message(&p).contains("data-alpha-5"));
}

#[test]
fn g1_a_foreign_claim_beyond_the_target_does_not_block() {
    let mut s = persistent(3);
    s.fleet.members = Some(4);
    s.claims.push(Claim {
        identity: Some(OTHER_ID.into()),
        ..claim(4)
    });
    assert_eq!(plan(&s, T0).rule, Rule::G5);
}

#[test]
fn g2_bucket_fleets_grow_in_one_step() {
    let mut s = bucket(3);
    s.fleet.members = Some(6);
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::G2);
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas {
            from: 3,
            replicas: 6,
            ..
        })
    ));
    let mut o = bucket_ordered(3);
    o.fleet.members = Some(5);
    assert!(matches!(
        plan(&o, T0).action,
        Some(Action::SetReplicas { replicas: 5, .. })
    ));
}

#[test]
fn g3_growth_waits_for_the_statefulset_to_observe_its_spec() {
    let mut s = persistent(3);
    s.fleet.members = Some(5);
    s.sts().generation = 5;
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::G3, "Provisioning")
    );
}

#[test]
fn g4_growth_waits_for_the_scheduler_to_decide_every_member() {
    let mut s = persistent(3);
    s.fleet.members = Some(5);
    s.pod(1).node_name = None;
    let p = plan(&s, T0);
    assert_eq!((p.action.clone(), p.rule), (None, Rule::G4));
    assert!(message(&p).contains("place member alpha-1"));
    // An unschedulable member is decided and does not hold growth back.
    s.pod(1).unschedulable = Some(Unschedulable {
        since: Some(at(-1)),
        message: "0/6 nodes are available".into(),
    });
    s.pod(1).ready = Some(Cond {
        status: CondStatus::False,
        since: Some(at(-1)),
    });
    assert_eq!(plan(&s, T0).rule, Rule::G5);
    // A missing member is undecided.
    let mut m = persistent(3);
    m.fleet.members = Some(5);
    m.remove_pod(2);
    assert_eq!(plan(&m, T0).rule, Rule::G4);
}

#[test]
fn g5_growth_goes_kept_run_first_then_fresh_run() {
    let mut s = persistent(1);
    s.fleet.members = Some(5);
    s.claims.push(claim(1));
    s.claims.push(claim(2));
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::G5);
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas {
            from: 1,
            replicas: 3,
            ..
        })
    ));
    assert!(message(&p).contains("alpha-1 to alpha-2 on their kept disks"));
    let mut s = persistent(3);
    s.fleet.members = Some(5);
    s.claims.push(claim(4));
    let p = plan(&s, T0);
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas {
            from: 3,
            replicas: 4,
            ..
        })
    ));
    assert!(message(&p).contains("alpha-3 on a fresh disk"));
    // A terminating claim counts as fresh.
    let mut s = persistent(2);
    s.fleet.members = Some(4);
    s.claims.push(Claim {
        deletion: Some(T0),
        ..claim(2)
    });
    assert!(matches!(
        plan(&s, T0).action,
        Some(Action::SetReplicas { replicas: 4, .. })
    ));
}

// ---- contraction (C1-C3) ----

#[test]
fn c1_contraction_waits_for_the_previous_change_to_roll_out() {
    let mut s = persistent(3);
    s.fleet.members = Some(1);
    s.sts().update_revision = Some("rev-2".into());
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::C1, "Provisioning")
    );
    let mut s = persistent(3);
    s.fleet.members = Some(1);
    s.down(0, at(-1));
    assert_eq!(plan(&s, T0).rule, Rule::C1);
}

#[test]
fn c2_automatic_and_external_contraction_need_survivor_evidence() {
    for mode in [CapacityMode::Automatic, CapacityMode::External] {
        let mut s = persistent(4);
        s.fleet.capacity = Some(policy(mode));
        s.fleet.members = Some(3);
        s.capacity.recommendation = Some(Recommendation {
            members: 3,
            reason: "ScaleInRecommended".into(),
            message: "idle".into(),
            manual: false,
        });
        let p = plan(&s, T0);
        assert_eq!(
            (p.action.clone(), p.rule, reason(&p)),
            (None, Rule::C2, "CapacityUncertain")
        );
        assert!(!blocked(&p));
        s.capacity.survivors =
            SurvivorEvidence::Insufficient("projected capacity exceeded on alpha-0".into());
        assert!(message(&plan(&s, T0)).contains("projected capacity exceeded"));
        s.capacity.survivors = SurvivorEvidence::Sufficient;
        assert_eq!(plan(&s, T0).rule, Rule::C3);
    }
}

#[test]
fn c3_contraction_removes_one_member_per_step_keeping_its_claim() {
    let mut s = persistent(3);
    s.fleet.members = Some(1);
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::C3);
    assert!(matches!(
        p.action,
        Some(Action::SetReplicas {
            from: 3,
            replicas: 2,
            ..
        })
    ));
    assert!(message(&p).contains("alpha-2"));
    // Bucket Deployment contracts the same way.
    let mut b = bucket(3);
    b.fleet.members = Some(1);
    assert!(matches!(
        plan(&b, T0).action,
        Some(Action::SetReplicas { replicas: 2, .. })
    ));
}

// ---- disks (R1-R7) ----

#[test]
fn r1_terminating_claim_releases_its_pod() {
    let mut s = persistent(3);
    s.claim(1).deletion = Some(at(-1));
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::R1);
    assert_eq!(
        p.action,
        Some(Action::DeletePod {
            name: "alpha-1".into(),
            uid: "pod-1-uid".into(),
            resource_version: "201".into()
        })
    );
    // R5 holds it while another member is undecided.
    s.pod(2).node_name = None;
    assert_eq!(plan(&s, T0).action, None);
}

#[test]
fn r2_lost_claim_starts_a_handoff_even_with_two_members_down() {
    let mut s = persistent(3);
    s.lose(1);
    s.down(1, at(-1));
    s.down(2, at(-1));
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::R2);
    let Some(Action::StartHandoff(h)) = &p.action else {
        panic!("{p:?}")
    };
    assert_eq!(h.cause, HandoffCause::LostDisk);
    assert_eq!(
        (
            h.pod.as_str(),
            h.pod_uid.as_str(),
            h.pod_resource_version.as_str()
        ),
        ("alpha-1", "pod-1-uid", "201")
    );
    assert_eq!(
        (h.claim_uid.as_str(), h.claim_resource_version.as_str()),
        ("claim-1-uid", "301")
    );
    assert!(!h.record.committed);
    assert_eq!(p.event.as_ref().map(|e| e.reason), Some("MemberDiskLost"));
}

#[test]
fn r2_lost_claim_waits_for_a_live_pod() {
    let mut s = persistent(3);
    s.lose(1);
    s.remove_pod(1);
    let p = plan(&s, T0);
    assert_eq!(p.action, None);
    assert!(message(&p).contains("waiting for its Pod"));
}

#[test]
fn r3_single_member_down_past_the_delay_gets_a_fresh_disk() {
    let mut s = persistent(3);
    s.down(1, at(0));
    let p = plan(&s, at(5));
    assert_eq!(p.action, None);
    assert_eq!(p.rule, Rule::S2);
    assert_eq!(reason(&p), "Provisioning");
    assert_eq!(p.wake_at, Some(at(10)));
    assert!(message(&p).contains("gets a fresh disk at 2026-11-29T00:10:00Z"));
    let m = &p.status.member_states[1];
    assert_eq!(
        (m.state.as_str(), m.replace_at.as_deref()),
        ("Down", Some("2026-11-29T00:10:00Z"))
    );
    let p = plan(&s, at(10));
    assert_eq!(p.rule, Rule::R3);
    assert!(
        matches!(&p.action, Some(Action::StartHandoff(h)) if h.cause == HandoffCause::DownTooLong && h.pod == "alpha-1")
    );
    assert_eq!(p.event.as_ref().map(|e| e.reason), Some("MemberReplaced"));
}

#[test]
fn r9_a_member_heard_recovering_is_not_down() {
    let mut s = persistent(3);
    s.down(1, at(0));
    s.pod(1).recovering_seen = Some(at(8));
    // Down for the whole delay, but heard recovering two minutes ago: not due.
    let p = plan(&s, at(10));
    assert_eq!(p.action, None);
    let m = &p.status.member_states[1];
    assert_eq!(
        (m.state.as_str(), m.replace_at.as_deref()),
        ("Recovering", Some("2026-11-29T00:18:00Z"))
    );
    assert!(
        message(&p).contains("is recovering its predecessor's log"),
        "{}",
        message(&p)
    );
    // Asked again a quarter of the delay later, well before the new deadline.
    assert_eq!(p.wake_at, Some(at(10) + Span::secs(150)));
    // Nothing heard for the whole delay since: down, and replaced.
    let p = plan(&s, at(18));
    assert_eq!(p.rule, Rule::R3);
    assert!(matches!(&p.action, Some(Action::StartHandoff(h)) if h.pod == "alpha-1"));
    let event = p
        .event
        .as_ref()
        .map(|e| e.message.as_str())
        .unwrap_or_default();
    assert!(
        event.contains("seen down since 2026-11-29T00:08:00Z"),
        "{event}"
    );
}

#[test]
fn r9_a_recovery_heard_in_the_future_counts_as_now() {
    // An answer timed after the decision's own clock reading (the fresh read asks the
    // member after the reading) counts from now, never later.
    let mut s = persistent(3);
    s.down(1, at(0));
    s.pod(1).recovering_seen = Some(at(30));
    let p = plan(&s, at(12));
    assert_eq!(p.action, None);
    assert_eq!(
        p.status.member_states[1].replace_at.as_deref(),
        Some("2026-11-29T00:22:00Z")
    );
}

#[test]
fn r3_the_delay_is_configurable() {
    let mut s = persistent(3);
    s.down(1, at(0));
    let cfg = Config {
        replacement_delay: Span::mins(3),
        ..Config::default()
    };
    assert_eq!(decide(&s, at(3), &cfg).rule, Rule::R3);
}

#[test]
fn r4_left_alone_when_a_fresh_disk_would_not_help() {
    let late = at(60);
    let mut image = persistent(3);
    image.down(1, at(0));
    image.pod(1).config_wait = Some("ImagePullBackOff".into());
    let mut config = persistent(3);
    config.down(1, at(0));
    config.pod(1).config_wait = Some("CreateContainerConfigError".into());
    let mut new_disk = persistent(3);
    new_disk.down(1, at(0));
    new_disk.claim(1).created = at(-120) - Span::secs(30);
    let mut pending = persistent(3);
    pending.down(1, at(0));
    pending.claim(1).phase = ClaimPhase::Pending;
    let mut recent = persistent(3);
    recent.down(1, at(0));
    recent.pod(0).ready = Some(Cond {
        status: CondStatus::True,
        since: Some(late - Span::mins(1)),
    });
    recent.pod(0).seen_since = Some(late - Span::mins(1));
    let mut no_time = persistent(3);
    no_time.down(1, at(0));
    no_time.pod(2).seen_since = None;
    let mut two = persistent(3);
    two.down(1, at(0));
    two.down(2, at(0));
    let mut crash = persistent(3);
    crash.down(1, at(0));
    crash.pod(1).crash_loop_backoff = true;
    for (what, s) in [
        ("image", image),
        ("config", config),
        ("disk made for the pod", new_disk),
        ("claim not bound", pending),
        ("another member ready 1 min", recent),
        ("ready but not observed yet", no_time),
        ("two down", two),
        ("crash loop", crash),
    ] {
        let p = plan(&s, late);
        assert!(
            !matches!(p.action, Some(Action::StartHandoff(_))),
            "{what}: {p:?}"
        );
    }
}

#[test]
fn r4_absorb_window_schedules_a_wake_up() {
    let mut s = persistent(3);
    s.down(1, at(0));
    s.pod(0).ready = Some(Cond {
        status: CondStatus::True,
        since: Some(at(8)),
    });
    s.pod(0).seen_since = Some(at(8));
    let p = plan(&s, at(10));
    assert_eq!(p.action, None);
    assert_eq!(p.wake_at, Some(at(13)));
    assert!(message(&p).contains("until member alpha-0 has been ready for 5 minutes"));
    assert_eq!(plan(&s, at(13)).rule, Rule::R3);
}

#[test]
fn r5_no_fresh_disk_until_the_statefulset_caught_up_and_every_other_member_is_decided() {
    let mut unobserved = persistent(3);
    unobserved.lose(1);
    unobserved.sts().generation = 5;
    let mut undecided = persistent(3);
    undecided.lose(1);
    undecided.pod(2).node_name = None;
    for s in [unobserved, undecided] {
        let p = plan(&s, T0);
        assert_eq!(p.action, None, "{p:?}");
        assert!(message(&p).contains("first"), "{}", message(&p));
    }
    // The same for a member down too long.
    let mut s = persistent(3);
    s.down(1, at(0));
    s.sts().generation = 5;
    let p = plan(&s, at(30));
    assert_eq!(p.action, None);
    assert!(message(&p).contains("due for a fresh disk"));
    // The member itself being unplaced does not count against it.
    let mut s = persistent(3);
    s.down(1, at(0));
    s.pod(1).node_name = None;
    assert_eq!(plan(&s, at(30)).rule, Rule::R3);
}

#[test]
fn r6_unschedulable_member_not_replaced_is_blocked_after_the_delay() {
    let mut s = persistent(3);
    let p1 = s.pod(1);
    p1.node_name = None;
    p1.created = at(0);
    p1.unschedulable = Some(Unschedulable {
        since: Some(at(0)),
        message: "0/6 nodes are available: 3 node(s) had volume node affinity conflict. ".into(),
    });
    p1.ready = Some(Cond {
        status: CondStatus::False,
        since: Some(at(0)),
    });
    s.sts().ready_replicas = 2;
    s.down(2, at(0));
    let p = plan(&s, at(5));
    assert_eq!(p.action, None);
    assert!(!blocked(&p));
    assert_eq!(p.wake_at, Some(at(10)));
    let p = plan(&s, at(10));
    assert_eq!((p.rule, reason(&p)), (Rule::R6, "MemberUnschedulable"));
    assert!(blocked(&p));
    assert_eq!(cond(&p, "InfrastructureReady").status, "True");
    let why = "Member alpha-1 has not been scheduled since 2026-11-29T00:00:00Z: 0/6 nodes are available: 3 node(s) had volume node affinity conflict; it is not replaced while alpha-2 is also down";
    assert_eq!(cond(&p, "Blocked").message, why);
    // Ready leads with the gap to spec.members (rule S4).
    assert_eq!(
        message(&p),
        format!("1 of the 3 members the fleet requires is ready. {why}")
    );
}

#[test]
fn r6_a_lone_unschedulable_member_is_replaced_instead() {
    let mut s = persistent(3);
    let p1 = s.pod(1);
    p1.node_name = None;
    p1.created = at(0);
    p1.unschedulable = Some(Unschedulable {
        since: Some(at(0)),
        message: "0/6 nodes are available".into(),
    });
    p1.ready = None;
    s.sts().ready_replicas = 2;
    let p = plan(&s, at(10));
    assert_eq!(p.rule, Rule::R3);
}

#[test]
fn r7_a_member_waiting_on_its_image_is_not_called_crash_looping() {
    let mut s = persistent(3);
    s.down(1, at(0));
    s.pod(1).last_container_exit = Some(at(3));
    s.pod(1).config_wait = Some("ImagePullBackOff".into());
    let p = plan(&s, at(30));
    assert_eq!(p.action, None);
    assert_eq!(p.status.member_states[1].state, "WaitingForImage");
    assert!(!blocked(&p), "{:?}", p.status.conditions);
}

#[test]
fn r7_crash_looping_member_is_never_replaced_and_blocks_after_the_delay() {
    let mut s = persistent(3);
    s.down(1, at(0));
    s.pod(1).last_container_exit = Some(at(3));
    let p = plan(&s, at(5));
    assert_eq!(p.action, None);
    assert_eq!(p.status.member_states[1].state, "CrashLooping");
    let p = plan(&s, at(10));
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::R7, "MemberCrashLooping")
    );
    assert!(blocked(&p));
    // A container exit from before the member went down (a node that died) is no crash loop.
    s.pod(1).last_container_exit = Some(at(-30));
    assert_eq!(plan(&s, at(10)).rule, Rule::R3);
}

#[test]
fn r_disk_rules_do_not_apply_to_bucket_fleets() {
    let mut s = bucket_ordered(3);
    s.down(1, at(0));
    assert_eq!(plan(&s, at(60)).action, None);
}

// ---- one action per call ----

#[test]
fn one_action_even_when_many_rules_apply() {
    let mut s = persistent(4);
    s.fleet.members = Some(2);
    s.pod(0).deletion = Some(at(-10));
    s.unreachable(0);
    s.lose(1);
    s.claim(2).deletion = Some(at(-1));
    s.down(3, at(-30));
    let p = plan(&s, T0);
    // Force-deletion comes first; everything else waits for later calls.
    assert_eq!(p.rule, Rule::F1);
    assert!(p.action.is_some());
}

#[test]
fn a_plan_never_writes_the_workload_and_a_disk_together() {
    let mut s = persistent(3);
    s.fleet.members = Some(4);
    s.lose(1);
    let p = plan(&s, T0);
    assert!(matches!(p.action, Some(Action::SetReplicas { .. })));
    // The next call, before the StatefulSet observed the write: no fresh disk.
    s.sts().replicas = 4;
    s.sts().generation = 5;
    let p = plan(&s, T0);
    assert!(!matches!(p.action, Some(Action::StartHandoff(_))), "{p:?}");
}

#[test]
fn persistent_fleet_profile_is_what_enables_disk_rules() {
    let s = persistent(3);
    assert_eq!(s.fleet.profile, Profile::PersistentFleet);
}

// ---- R8: several disks lost at once ----

#[test]
fn r8_two_lost_claims_hold_the_fleet_and_name_them() {
    let mut s = persistent(3);
    s.lose(1);
    s.lose(2);
    let p = plan(&s, T0);
    assert_eq!(p.action, None);
    assert_eq!((p.rule, reason(&p)), (Rule::R8, "DisksLost"));
    assert!(blocked(&p));
    let m = message(&p);
    assert!(m.contains("data-alpha-1 (uid claim-1-uid)"), "{m}");
    assert!(m.contains("data-alpha-2 (uid claim-2-uid)"), "{m}");
    assert!(
        m.contains("kubectl annotate celldfleet alpha -n apps fleet.celld.dev/accept-disk-loss=claim-1-uid,claim-2-uid"),
        "{m}"
    );
}

#[test]
fn r8_accepting_exactly_the_lost_claims_lets_them_be_replaced_one_by_one() {
    let mut s = persistent(3);
    s.lose(1);
    s.lose(2);
    s.fleet.accepted_disk_loss = vec!["claim-1-uid".into(), "claim-2-uid".into()];
    let p = plan(&s, T0);
    assert_eq!(p.rule, Rule::R2);
    assert!(matches!(p.action, Some(Action::StartHandoff(ref h)) if h.claim == "data-alpha-1"));
}

#[test]
fn r8_an_acceptance_of_other_claims_authorizes_nothing() {
    let mut s = persistent(3);
    s.lose(1);
    s.lose(2);
    // Left from an earlier incident, or naming only one of the two.
    for accepted in [
        vec!["claim-1-uid".to_string()],
        vec!["old-uid".into(), "claim-2-uid".into()],
    ] {
        s.fleet.accepted_disk_loss = accepted;
        assert_eq!(plan(&s, T0).rule, Rule::R8);
    }
}

#[test]
fn r8_one_lost_claim_is_routine() {
    let mut s = persistent(3);
    s.lose(1);
    assert_eq!(plan(&s, T0).rule, Rule::R2);
}

#[test]
fn w5_a_retention_policy_that_deletes_claims_holds_contraction() {
    for (deleted, scaled) in [(None, Some("Delete")), (Some("Delete"), None)] {
        let mut s = persistent(4);
        s.fleet.members = Some(3);
        s.sts().claim_retention = ClaimRetention::from_fields(deleted, scaled);
        let p = plan(&s, T0);
        assert_eq!(p.action, None);
        assert_eq!((p.rule, reason(&p)), (Rule::W5, "LifecycleBlocked"));
        assert!(blocked(&p));
        let m = message(&p);
        assert!(m.contains("persistentVolumeClaimRetentionPolicy"), "{m}");
        assert!(m.contains(": Delete"), "{m}");
        assert!(m.contains("member alpha-3"), "{m}");
    }
}

#[test]
fn w5_retain_written_out_or_left_to_the_default_lets_contraction_go_on() {
    for retention in [
        ClaimRetention::from_fields(Some("Retain"), Some("Retain")),
        ClaimRetention::from_fields(None, None),
    ] {
        let mut s = persistent(4);
        s.fleet.members = Some(3);
        s.sts().claim_retention = retention;
        let p = plan(&s, T0);
        assert_eq!(p.rule, Rule::C3);
        assert!(matches!(
            p.action,
            Some(Action::SetReplicas { replicas: 3, .. })
        ));
    }
}

#[test]
fn w5_growth_and_healing_go_on_under_a_drifted_retention_policy() {
    // Neither adds nor replaces a disk through the policy: only removal is held.
    let mut s = persistent(3);
    s.fleet.members = Some(4);
    s.sts().claim_retention = ClaimRetention::from_fields(Some("Delete"), Some("Delete"));
    assert!(matches!(
        plan(&s, T0).action,
        Some(Action::SetReplicas { replicas: 4, .. })
    ));
    let mut s = persistent(3);
    s.sts().claim_retention = ClaimRetention::from_fields(None, Some("Delete"));
    s.lose(1);
    assert_eq!(plan(&s, T0).rule, Rule::R2);
}

#[test]
fn w5_a_drifted_retention_policy_holds_the_workload_deletion() {
    let mut s = persistent(3);
    s.fleet.deleting = true;
    s.sts().claim_retention = ClaimRetention::from_fields(Some("Delete"), None);
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::W5, "DeletionBlocked")
    );
    assert!(
        message(&p).contains("whenDeleted: Delete"),
        "{}",
        message(&p)
    );
    // Protection still comes first.
    s.fleet.deletion_protected = true;
    assert_eq!(plan(&s, T0).rule, Rule::D8);
}

#[test]
fn w6_an_owned_claim_of_the_fleet_is_reported_and_nothing_is_touched() {
    let mut s = persistent(3);
    s.claims[1].owner = Some("StatefulSet/alpha".into());
    // Lost too: without W6 it would be neither ours to replace nor visibly held.
    s.lose(1);
    let p = plan(&s, T0);
    assert_eq!(p.action, None);
    assert_eq!((p.rule, reason(&p)), (Rule::W6, "LifecycleBlocked"));
    let m = message(&p);
    assert!(
        m.contains("data-alpha-1") && m.contains("owned by StatefulSet/alpha"),
        "{m}"
    );
}

#[test]
fn w6_an_owned_claim_holds_the_end_of_a_deletion() {
    let mut s = persistent(2);
    s.fleet.deleting = true;
    s.workload = None;
    s.pods.clear();
    s.claims[0].owner = Some("Pod/alpha-0".into());
    let p = plan(&s, T0);
    assert_eq!(
        (p.action.clone(), p.rule, reason(&p)),
        (None, Rule::W6, "DeletionBlocked")
    );
}

#[test]
fn w6_an_owned_claim_of_another_identity_is_not_ours_to_report() {
    let mut s = persistent(3);
    s.claims[2].identity = Some(OTHER_ID.into());
    s.claims[2].owner = Some("Backup/nightly".into());
    assert_ne!(plan(&s, T0).rule, Rule::W6);
}

#[test]
fn f2_a_pod_stuck_on_a_ready_node_is_reported_not_force_deleted() {
    let mut s = persistent(3);
    s.pod(2).deletion = Some(at(0));
    // The node is Ready: its kubelet has not finished the Pod (a hung container).
    let p = plan(&s, at(30));
    assert_eq!(p.action, None);
    assert_eq!((p.rule, reason(&p)), (Rule::S2, "MemberStuckTerminating"));
    assert!(blocked(&p));
    let m = message(&p);
    assert!(
        m.contains("alpha-2") && m.contains("node-2, whose kubelet is up") && m.contains("--force"),
        "{m}"
    );
    // Other rules still run: growth (rule G2 for a Bucket fleet) is not starved by the
    // stuck Pod.
    let mut s = bucket_ordered(3);
    s.pod(2).deletion = Some(at(0));
    s.fleet.members = Some(4);
    assert!(matches!(
        plan(&s, at(30)).action,
        Some(Action::SetReplicas { replicas: 4, .. })
    ));
}

#[test]
fn f2_an_unreachable_node_is_timed_by_the_healer_for_the_margin() {
    let mut s = persistent(3);
    s.pod(2).deletion = Some(at(0));
    // Seen NotReady only since minute 3: due at minute 5, not at the Pod's deadline.
    s.pod(2).node = NodeState::Unreachable {
        since: Some(at(3)),
        transition: None,
    };
    let p = plan(&s, at(4));
    assert_eq!(p.action, None);
    assert_eq!(reason(&p), "Provisioning");
    assert!(message(&p).contains("unreachable"), "{}", message(&p));
    assert_eq!(p.wake_at, Some(at(5)));
    assert_eq!(plan(&s, at(5)).rule, Rule::F1);
    // Not observed at all (a new leader): counts as seen now, so one margin more.
    s.pod(2).node = NodeState::Unreachable {
        since: None,
        transition: None,
    };
    let p = plan(&s, at(10));
    assert_eq!(p.action, None);
    assert_eq!(p.wake_at, Some(at(12)));
}

#[test]
fn f2_unbound_or_on_a_gone_node_is_stranded_and_an_unknown_node_is_not() {
    for (node, due) in [
        (NodeState::Unbound, true),
        (NodeState::Gone, true),
        (NodeState::Unknown, false),
    ] {
        let mut s = persistent(3);
        s.pod(2).deletion = Some(at(0));
        s.pod(2).node = node;
        let p = plan(&s, at(2));
        assert_eq!(p.rule == Rule::F1, due, "{node:?}: {}", p.rule);
        if !due {
            assert_eq!(reason(&p), "Provisioning");
            assert!(message(&p).contains("cannot see"), "{}", message(&p));
        }
    }
}
