//! Property tests over random snapshots for the rules that can cost a disk: whatever the
//! snapshot, `decide` deletes a claim or commits a handoff only when the conditions hold.
//! The conditions are restated here independently of the rules' code.

use celld_api::labels::{claim_name, member_name};
use proptest::prelude::*;

use crate::config::Config;
use crate::decide;
use crate::plan::{Action, ClaimDeletion};
use crate::record::HandoffRecord;
use crate::snapshot::*;
use crate::testkit::*;
use crate::time::{Span, Timestamp};

#[derive(Debug, Clone)]
struct MemberGen {
    pod: u8,    // 0 missing, 1 ready, 2 not ready, 3 terminating
    since: i64, // minutes relative to T0 for the Ready transition
    node: bool,
    unsched: bool,
    config_wait: bool,
    crash: bool,
    pod_age: i64,   // minutes before T0 the Pod was made
    claim: u8,      // 0 missing, 1 Bound, 2 Lost, 3 Pending, 4 terminating, 5 foreign
    claim_age: i64, // minutes before T0 the claim was made
    marker: u8, // 0 none, 1 prepared, 2 committed, 3 committed wrong uid, 4 committed wrong rv, 5 stray finalizer
}

fn member_gen() -> impl Strategy<Value = MemberGen> {
    (
        0u8..4,
        -30i64..30,
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        0i64..240,
        0u8..6,
        0i64..240,
        prop_oneof![6 => Just(0u8), 1 => 1u8..6],
    )
        .prop_map(
            |(pod, since, node, unsched, config_wait, crash, pod_age, claim, claim_age, marker)| {
                MemberGen {
                    pod,
                    since,
                    node,
                    unsched,
                    config_wait,
                    crash,
                    pod_age,
                    claim,
                    claim_age,
                    marker,
                }
            },
        )
}

#[derive(Debug, Clone)]
struct World {
    members: Vec<MemberGen>,
    replicas: i32,
    target: i32,
    observed: bool,
    paused: bool,
    deleting: bool,
    drift: bool,
    workload: u8, // 0 ours, 1 missing, 2 foreign, 3 deleting
    now: i64,
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(member_gen(), 1..7),
        0i32..7,
        1i32..7,
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        prop_oneof![8 => Just(0u8), 1 => 1u8..4],
        -10i64..40,
    )
        .prop_map(
            |(members, replicas, target, observed, paused, deleting, drift, workload, now)| World {
                members,
                replicas,
                target,
                observed,
                paused,
                deleting,
                drift,
                workload,
                now,
            },
        )
}

fn build(w: &World) -> Snapshot {
    let mut s = persistent(0);
    s.fleet.members = Some(w.target);
    s.fleet.paused = w.paused;
    s.fleet.deleting = w.deleting;
    if w.drift {
        s.infrastructure.drift.push("Service alpha differs".into());
    }
    {
        let sts = s.workload.as_mut().unwrap();
        sts.replicas = w.replicas;
        sts.generation = if w.observed { 4 } else { 5 };
        match w.workload {
            2 => sts.identity = Some(OTHER_ID.into()),
            3 => sts.deleting = true,
            _ => {}
        }
    }
    if w.workload == 1 {
        s.workload = None;
    }
    let mut ready = 0;
    for (o, m) in w.members.iter().enumerate() {
        let o = o as u32;
        let mut c = claim(o);
        c.created = at(-m.claim_age);
        match m.claim {
            0 => {}
            1 => s.claims.push(c.clone()),
            2 => {
                c.phase = ClaimPhase::Lost;
                // Seen Lost 0, 1 or 2 minutes ago: inside and past the window.
                c.lost_since = Some(at(-(m.claim_age % 3)));
                s.claims.push(c.clone())
            }
            3 => {
                c.phase = ClaimPhase::Pending;
                s.claims.push(c.clone())
            }
            4 => {
                c.deletion = Some(at(-1));
                s.claims.push(c.clone())
            }
            _ => {
                c.identity = Some(OTHER_ID.into());
                s.claims.push(c.clone())
            }
        }
        if m.pod == 0 {
            continue;
        }
        let mut p = member(o, WorkloadKind::StatefulSet);
        p.created = at(-m.pod_age);
        p.ready = Some(Cond {
            status: if m.pod == 1 {
                CondStatus::True
            } else {
                CondStatus::False
            },
            since: Some(at(m.since)),
        });
        // The healer watched it since the same moment (rule T2's clock; the clock
        // tests tell the two apart).
        p.seen_since = Some(at(m.since));
        if m.pod == 1 {
            ready += 1;
        }
        if m.pod == 3 {
            p.deletion = Some(at(m.since));
        }
        if !m.node {
            p.node_name = None;
            if m.unsched {
                p.unschedulable = Some(Unschedulable {
                    since: Some(at(m.since)),
                    message: "no node".into(),
                });
            }
        }
        if m.config_wait {
            p.config_wait = Some("ImagePullBackOff".into());
        }
        p.crash_loop_backoff = m.crash;
        if m.marker > 0 {
            p.replacement_finalizer = true;
            p.replacement_index = Some(ID.into());
            if m.marker < 5 {
                p.record = Some(RecordState::Valid(HandoffRecord {
                    identity: ID.into(),
                    claim_uid: if m.marker == 3 {
                        "old".into()
                    } else {
                        c.uid.clone()
                    },
                    claim_resource_version: if m.marker == 4 {
                        "1".into()
                    } else {
                        c.resource_version.clone()
                    },
                    committed: m.marker >= 2,
                    cause: None,
                }));
            }
        }
        s.pods.push(p);
    }
    if let Some(sts) = s.workload.as_mut() {
        sts.ready_replicas = ready;
        sts.status_replicas = s.pods.len() as i32;
        sts.updated_replicas = s.pods.len() as i32;
    }
    s
}

fn member_of(s: &Snapshot, o: u32) -> Option<&Pod> {
    let name = member_name("alpha", o);
    s.pods.iter().find(|p| p.name == name)
}

fn own_claim(s: &Snapshot, o: u32) -> Option<&Claim> {
    let name = claim_name("alpha", o);
    s.claims
        .iter()
        .find(|c| c.name == name && c.identity.as_deref() == Some(ID))
}

fn workload_ok(s: &Snapshot) -> bool {
    s.workload.as_ref().is_some_and(|w| {
        w.identity.as_deref() == Some(ID) && !w.deleting && !w.has_owner_references
    })
}

/// No fresh disk unless the StatefulSet observed its spec and every other member is
/// decided.
fn zone_safe(s: &Snapshot, o: u32) -> bool {
    let w = s.workload.as_ref().unwrap();
    w.observed()
        && (0..w.replicas.max(0) as u32).filter(|&x| x != o).all(|x| {
            member_of(s, x).is_some_and(|p| {
                p.deletion.is_none() && (p.node_name.is_some() || p.unschedulable.is_some())
            })
        })
}

fn lifecycle_allowed(s: &Snapshot) -> bool {
    !s.fleet.paused
        && !s.fleet.deleting
        && s.infrastructure.drift.is_empty()
        && workload_ok(s)
        && !s
            .pods
            .iter()
            .any(|p| p.replacement_finalizer || p.record.is_some())
}

fn handoff_justified(s: &Snapshot, pod: &str, now: Timestamp, cfg: &Config) -> bool {
    let o = celld_api::labels::member_ordinal("alpha", pod).unwrap();
    let w = s.workload.as_ref().unwrap();
    let Some(p) = member_of(s, o) else {
        return false;
    };
    let Some(c) = own_claim(s, o) else {
        return false;
    };
    if p.deletion.is_some() || c.deletion.is_some() || !lifecycle_allowed(s) || !zone_safe(s, o) {
        return false;
    }
    if (o as i32) >= w.replicas {
        return false;
    }
    if c.phase == ClaimPhase::Lost {
        // Never while another claim of the fleet is Lost too (R8; nothing accepted).
        let lost = (0..w.replicas.max(0) as u32)
            .filter_map(|x| own_claim(s, x))
            .filter(|c| c.phase == ClaimPhase::Lost && c.deletion.is_none())
            .count();
        if lost > 1 {
            return false;
        }
        // Only once it stayed Lost for the confirmation window.
        return c
            .lost_since
            .is_some_and(|t| now >= t + cfg.lost_confirmation);
    }
    // Timed by the healer's own observation (T2).
    let down_since = p.seen_since.unwrap_or(now).min(now);
    c.phase == ClaimPhase::Bound
        && !p.is_ready()
        && p.config_wait.is_none()
        && !p.crash_loop_backoff
        && c.created + Span::mins(1) < p.created
        && now >= down_since + cfg.replacement_delay
        && (0..w.replicas.max(0) as u32).filter(|&x| x != o).all(|x| {
            member_of(s, x).is_some_and(|q| {
                q.deletion.is_none()
                    && q.is_ready()
                    && q.seen_since
                        .is_some_and(|t| t.min(now) + cfg.absorb_window <= now)
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, .. ProptestConfig::default() })]

    #[test]
    fn disks_are_deleted_only_when_the_rules_allow(w in world()) {
        let s = build(&w);
        let cfg = Config::default();
        let now = at(w.now);
        let plan = decide(&s, now, &cfg);
        match &plan.action {
            Some(Action::DeleteClaim { name, uid, resource_version, purpose }) => {
                let c = s.claims.iter().find(|c| &c.name == name).unwrap();
                prop_assert_eq!(c.identity.as_deref(), Some(ID), "foreign claim deleted");
                prop_assert!(c.owner.is_none());
                prop_assert_eq!(&c.uid, uid);
                prop_assert_eq!(&c.resource_version, resource_version);
                match purpose {
                    ClaimDeletion::FleetDeletion => {
                        prop_assert!(s.fleet.deleting && s.workload.is_none());
                        prop_assert!(!s.pods.iter().any(|p| p.identity.as_deref() == Some(ID)));
                    }
                    ClaimDeletion::Handoff { pod } => {
                        let p = s.pods.iter().find(|p| &p.name == pod).unwrap();
                        let Some(RecordState::Valid(r)) = &p.record else {
                            return Err(TestCaseError::fail("no record"));
                        };
                        prop_assert!(r.committed && p.replacement_finalizer && p.deletion.is_some());
                        prop_assert_eq!(&r.claim_uid, uid);
                        prop_assert_eq!(&r.claim_resource_version, resource_version);
                        prop_assert!(!s.fleet.paused && !s.fleet.deleting && workload_ok(&s));
                        prop_assert_eq!(name, &format!("data-{pod}"));
                    }
                }
            }
            Some(Action::StartHandoff(h)) => {
                prop_assert!(handoff_justified(&s, &h.pod, now, &cfg), "unjustified handoff {:?}", h);
                prop_assert!(!h.record.committed);
            }
            Some(Action::DeletePod { name, .. }) => {
                let o = celld_api::labels::member_ordinal("alpha", name).unwrap();
                prop_assert!(own_claim(&s, o).is_some_and(|c| c.deletion.is_some()));
                prop_assert!(lifecycle_allowed(&s) && zone_safe(&s, o));
            }
            Some(Action::ForceDeletePod { name, .. }) => {
                let p = s.pods.iter().find(|p| &p.name == name).unwrap();
                prop_assert!(p.deletion.is_some_and(|t| now >= t + cfg.force_delete_margin));
                prop_assert!(!p.replacement_finalizer);
            }
            _ => {}
        }
    }
}
