//! The healer's step in the model: the snapshot it would observe (with its caches
//! lagging), `decide`, the fresh-read confirmation, and each action applied as the API
//! server would apply it (uid/resourceVersion preconditions, conflicts, lost responses,
//! late writes of a deposed replica).

use celld_api::Profile;
use celld_api::labels::{claim_name, member_name};

use super::Violation;
use super::world::*;
use crate::clock::{DateSample, Mono, Now};
use crate::confirm::{self, Confirmation};
use crate::plan::Action;
use crate::snapshot::{self as s, CondStatus};

impl Sim {
    pub(super) fn snapshot(&self) -> s::Snapshot {
        let sts = self.sts.as_ref().map(|sts| {
            let (replicas, ready, updated, current) = self.sts_status();
            s::Workload {
                kind: s::WorkloadKind::StatefulSet,
                name: FLEET.into(),
                uid: sts.uid.to_string(),
                resource_version: sts.rv.to_string(),
                generation: sts.generation,
                observed_generation: Some(sts.observed),
                identity: Some(ID.into()),
                has_owner_references: false,
                deleting: sts.deleting,
                replicas: sts.replicas,
                status_replicas: replicas,
                ready_replicas: ready,
                updated_replicas: updated,
                current_revision: Some(
                    if current {
                        sts.update_rev
                    } else {
                        sts.update_rev - 1
                    }
                    .to_string(),
                ),
                update_revision: Some(sts.update_rev.to_string()),
                claim_retention: if sts.retention_deletes {
                    s::ClaimRetention::from_fields(Some("Delete"), Some("Delete"))
                } else {
                    s::ClaimRetention::default()
                },
            }
        });
        let sts_uid = self.sts.as_ref().map_or(0, |s| s.uid);
        let pods: Vec<s::Pod> = self
            .pods
            .iter()
            .map(|p| s::Pod {
                name: member_name(FLEET, p.ord),
                uid: p.uid.to_string(),
                resource_version: p.rv.to_string(),
                identity: Some(ID.into()),
                controller: Some(s::Controller {
                    kind: "StatefulSet".into(),
                    name: FLEET.into(),
                    uid: sts_uid.to_string(),
                }),
                created: ts(p.created),
                deletion: p.deletion.map(ts),
                node_name: p.node.map(|n| format!("node-{n}")),
                // The node lifecycle controller marks a node whose kubelet stopped
                // NotReady after its grace period, as it does a member.
                node: match p.node {
                    None => s::NodeState::Unbound,
                    Some(n)
                        if !self.nodes[n].up
                            && self.now >= self.nodes[n].down_at + NOT_READY_AFTER =>
                    {
                        s::NodeState::Unreachable {
                            since: None,
                            transition: Some(ts(self.nodes[n].down_at + NOT_READY_AFTER)),
                        }
                    }
                    Some(_) => s::NodeState::Ready,
                },
                zone: None,
                phase: if p.node.is_some() {
                    s::PodPhase::Running
                } else {
                    s::PodPhase::Pending
                },
                // The kubelet writes with its node's clock.
                ready: p.ready_cond.map(|t| s::Cond {
                    status: if p.ready {
                        CondStatus::True
                    } else {
                        CondStatus::False
                    },
                    since: Some(ts(t + self.kubelet_skew(p.node))),
                }),
                unschedulable: p.unsched_since.map(|t| s::Unschedulable {
                    since: Some(ts(t)),
                    message: "0/9 nodes are available: node affinity or spread".into(),
                }),
                config_wait: (p.container == Container::ImagePull)
                    .then(|| "ImagePullBackOff".into()),
                crash_loop_backoff: p.container == Container::CrashLoop,
                last_container_exit: p.last_exit.map(|t| ts(t + self.kubelet_skew(p.node))),
                replacement_finalizer: p.fin,
                replacement_index: p.index.then(|| ID.into()),
                record: p.record.clone().map(s::RecordState::Valid),
                force_deleted: false,
                other_finalizers: Vec::new(),
                force_delete_retry_at: None,
                seen_since: None,
                recovering_seen: None,
            })
            .collect();
        let mut claims: Vec<s::Claim> = self
            .claims
            .iter()
            .map(|c| s::Claim {
                name: claim_name(FLEET, c.ord),
                uid: c.uid.to_string(),
                resource_version: c.rv.to_string(),
                identity: Some(if c.foreign { "someotherfleet" } else { ID }.into()),
                owner: None,
                created: ts(c.created),
                deletion: c.deletion.map(ts),
                phase: match c.phase {
                    Phase::Pending => s::ClaimPhase::Pending,
                    Phase::Bound => s::ClaimPhase::Bound,
                    Phase::Lost => s::ClaimPhase::Lost,
                },
                // Filled as the runtime does: from the healer's own first sighting.
                lost_since: None,
            })
            .collect();
        let mut pods: Vec<s::Pod> = pods;
        for d in &self.decoys {
            match d {
                Decoy::Pod(p) => pods.push((**p).clone()),
                Decoy::Claim(c) => claims.push(c.clone()),
            }
        }
        s::Snapshot {
            fleet: s::Fleet {
                name: FLEET.into(),
                namespace: "apps".into(),
                uid: "fleet-uid".into(),
                resource_version: self.fleet.rv.to_string(),
                generation: self.fleet.generation,
                identity: ID.into(),
                profile: Profile::PersistentFleet,
                stateful_set: true,
                members: Some(self.fleet.members),
                zones: ZONES as i32,
                termination_grace_seconds: GRACE / 1000,
                paused: self.fleet.paused,
                deleting: self.fleet.deleting,
                deletion_protected: self.fleet.protected,
                identity_conflict: self.conflicted.then(|| "apps/original".into()),
                accepted_disk_loss: Vec::new(),
                reservation: self.fleet.reserved_elsewhere.then(|| s::Reservation {
                    name: "s3-ledger".into(),
                    found: Some(s::ReservedFor {
                        this_fleet: false,
                        holder: "identity someoneelse0000000000000000 (fleet apps/ledger)".into(),
                    }),
                }),
                invalid: if self.fleet.invalid {
                    vec!["spec.members: out of range (expected 1..100)".into()]
                } else {
                    Vec::new()
                },
                has_finalizer: self.fleet.finalizer,
                capacity: None,
                previous_status: self.fleet.status.clone(),
            },
            workload: sts,
            pods,
            claims,
            infrastructure: s::Infrastructure {
                drift: if self.fleet.drift {
                    vec!["Service alpha-peers differs".into()]
                } else {
                    Vec::new()
                },
            },
            capacity: s::CapacitySignal::default(),
            application: None,
            // Set with the rest of the healer's clock (`healer_view`).
            clock_skew: None,
        }
    }

    /// What lagging, mutually skewed watch caches show: Pods, claims and the workload
    /// each taken from one of the last few states (the fleet object is current).
    pub(super) fn skewed(&mut self, truth: &s::Snapshot) -> s::Snapshot {
        self.views.push_back(truth.clone());
        if self.views.len() > 6 {
            self.views.pop_front();
        }
        let n = self.views.len() as u64;
        let (a, b, c, d, e) = (
            self.rng.below(n) as usize,
            self.rng.below(n) as usize,
            self.rng.below(n) as usize,
            self.rng.below(n) as usize,
            self.rng.below(n) as usize,
        );
        let mut v = truth.clone();
        // The CelldFleet lags too (its protection, pause, validity, resourceVersion), and
        // the reservation cache on its own.
        v.fleet = self.views[d].fleet.clone();
        v.fleet.reservation = self.views[e].fleet.reservation.clone();
        v.pods = self.views[a].pods.clone();
        v.claims = self.views[b].claims.clone();
        v.workload = self.views[c].workload.clone();
        // A cache hands objects over in its own (hash) order, unlike the fresh read.
        self.rng.shuffle(&mut v.pods);
        self.rng.shuffle(&mut v.claims);
        v
    }

    /// The clock of a Pod's node (true time for a Pod on no node).
    pub(super) fn kubelet_skew(&self, node: Option<usize>) -> i64 {
        node.and_then(|n| self.node_skew.get(n))
            .copied()
            .unwrap_or(0)
    }

    /// The healer's two clocks now: its wall clock is skewed, its monotonic clock runs
    /// true (from an arbitrary origin).
    pub(super) fn healer_now(&self) -> Now {
        Now {
            wall: ts(self.now + self.healer_skew),
            mono: Mono(self.now),
        }
    }

    /// What the runtime does to a snapshot before `decide` (`gather::snapshot_of`): the
    /// API server's timestamps onto the healer's clock, and readiness and Lost timed by
    /// the healer's own observation (`watched`: from the caches, which record it).
    pub(super) fn healer_view(&mut self, snap: &mut s::Snapshot, watched: bool) {
        let now = self.healer_now();
        // Rule R9: the runtime asks each running member that is down; one that is
        // recovering says so (a member on a down node answers nothing).
        for p in &self.pods {
            if let Container::Recovering(_) = p.container
                && p.deletion.is_none()
                && p.node.is_some_and(|n| self.nodes[n].up)
            {
                self.observed.heard_recovering(&p.uid.to_string(), now.mono);
            }
        }
        crate::clock::to_healer_clock(snap, &self.server_clock, now);
        self.observed.observe(snap, now, watched);
    }

    /// The lease changes hands (a restart, a standby taking over, a replica that led
    /// before leading again): nobody acts for a while, and the replica that leads next
    /// starts its observation over.
    pub(super) fn leadership_change(&mut self) {
        self.observed.clear();
        let gap = self.rng.range(15_000, 180_000);
        self.away_until = self.now + gap;
        self.log(|| {
            format!(
                "the lease changes hands: no healer acts for {} s",
                gap / 1000
            )
        });
        self.interrupted();
    }

    /// The deposed replica's late writes that land now. Each must be aimed only at this
    /// fleet's objects, and be allowed and justified by the state it lands on unless its
    /// preconditions refuse it. (A late handoff step 1 only marks
    /// the Pod: the leader must then abort it, or carry it on where that is justified,
    /// and those writes are checked as the leader's.)
    pub(super) fn land_late_writes(&mut self) -> Result<(), Violation> {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        self.in_flight = later;
        for (_, a) in due {
            self.log(|| format!("deposed replica's late write lands: {a:?}"));
            self.out.late_writes += 1;
            self.check_targets(&a)?;
            // Like the leader's: a write its preconditions refuse changes nothing.
            if !matches!(a, Action::StartHandoff(_)) && self.preconditions_hold(&a) {
                self.check_allowed(&a)?;
            }
            self.replaying = true;
            let r = self.act(&a);
            self.replaying = false;
            r?;
        }
        Ok(())
    }

    pub(super) fn reconcile(&mut self) -> Result<(), Violation> {
        self.out.reconciles += 1;
        if self.now < self.away_until {
            self.heal_at = Some(self.away_until);
            return Ok(());
        }
        if self.rng.chance(1) {
            self.leadership_change();
            self.heal_at = Some(self.away_until);
            return Ok(());
        }
        // Every response carries the API server's `Date` (whole seconds, truncated).
        self.server_clock.record(DateSample {
            date: ts(self.now - self.now.rem_euclid(1_000)),
            sent: Mono(self.now),
            received: Mono(self.now),
        });
        let mut truth = self.snapshot();
        let mut snap = if self.laggy {
            self.skewed(&truth)
        } else {
            truth.clone()
        };
        // Whether the caches lag the truth (compared before either is put on the
        // healer's clock).
        let lagging = self.laggy && snap != truth;
        self.healer_view(&mut snap, true);
        let now = self.healer_now().wall;
        let plan = crate::decide(&snap, now, &self.cfg);
        self.log(|| {
            format!(
                "healer: {} {:?} -> {}",
                plan.rule, plan.action, plan.status.conditions[0].message
            )
        });
        let mut action = plan.action.clone();
        // The fresh read a write was confirmed on, if one was.
        let mut fresh_read = None;
        // The fresh read before a destructive write: `decide` again on the true state.
        if let Some(a) = &action
            && confirm::needs_confirmation(a)
            && !self.skip_confirmation
        {
            if self.join_reads_under_way {
                // A read begun up to 3 s before this confirmation asked (in the runtime,
                // one under way for the namespace's fleets), its answer taken as this
                // confirmation's: the model's one fleet stands in for all of them.
                let sent = self
                    .reads_under_way
                    .iter()
                    .filter(|(t, _)| self.now - t <= 3_000)
                    .map(|(_, s)| s.clone())
                    .collect::<Vec<_>>();
                if !sent.is_empty() {
                    let i = self.rng.range(0, sent.len() as i64 - 1) as usize;
                    self.reads_under_way.push_back((self.now, truth.clone()));
                    truth = sent[i].clone();
                } else {
                    self.reads_under_way.push_back((self.now, truth.clone()));
                }
                while self.reads_under_way.len() > 16 {
                    self.reads_under_way.pop_front();
                }
            }
            self.healer_view(&mut truth, false);
            if !self.fresh_reservation {
                // What the runtime did before: the fresh read re-listed the fleet's own
                // objects only, and the reservation came from its cache.
                truth.fleet.reservation = snap.fleet.reservation.clone();
            }
            let fresh = crate::decide(&truth, now, &self.cfg);
            match confirm::confirm(a, &fresh) {
                Confirmation::Confirmed(x) | Confirmation::Instead(x) => {
                    action = Some(x);
                    fresh_read = Some(truth.clone());
                }
                Confirmation::Hold(why) => {
                    self.log(|| format!("healer: not confirmed on the fresh read: {why}"));
                    self.heal_at = Some(self.now + 1_000);
                    return Ok(());
                }
            }
        }
        // A force delete confirmed on a fresh read takes the fleet's other due force
        // deletes with it, decided on the same read and on the caches it was decided on
        // (`confirm::batch`); all are sent at once.
        let mut writes: Vec<Action> = action.iter().cloned().collect();
        if let (Some(a @ Action::ForceDeletePod { .. }), Some(read)) = (&action, fresh_read) {
            let rest = confirm::batch(a, read, snap.clone(), now, &self.cfg);
            writes.extend(rest.into_iter().filter_map(|p| p.action));
            self.out.ridden += writes.len() - 1;
            // Sent at once: they land in any order.
            self.rng.shuffle(&mut writes);
        }
        // The deposed replica made the same decisions from the same facts; its requests
        // are delayed on the wire and land after the new leader's later writes. The
        // runtime bounds a write at `WRITE_TIMEOUT` from its sending to the API server's
        // deadline; the model lets them land up to twice that late.
        if self.deposed && !writes.is_empty() && self.rng.chance(15) {
            let bound = 2 * crate::runtime::requests::WRITE_TIMEOUT.as_millis() as i64;
            let at = self.now + self.rng.range(200, bound);
            for a in &writes {
                self.in_flight.push((at, a.clone()));
            }
        }
        // A plan has one action; only force deletes go out with others.
        let mut ok = true;
        for a in &writes {
            if writes.len() > 1 {
                self.log(|| format!("healer: F1 {a:?}, one of {} sent at once", writes.len()));
            }
            // A write its preconditions refuse changes nothing, whatever it aimed at.
            if self.preconditions_hold(a) {
                self.check_allowed(a)?;
            }
            // Sent at once: a failure or a crash does not stop the others.
            ok &= self.act(a)?;
        }
        // The healer may crash before its status write (or between any two writes).
        if ok && !self.rng.chance(3) {
            self.fleet.status = Some(plan.status.clone());
        }
        let retry = if ok { self.now + 50 } else { self.now + 1_000 };
        let next = if plan.action.is_some() || !ok {
            Some(retry)
        } else {
            None
        };
        // `decide` asks in the healer's wall-clock time.
        let wake = plan.wake_at.map(|t| t.0 - self.healer_skew);
        self.heal_at = match (next, wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if lagging {
            // The lagging watch delivers the newer state a little later, and that event
            // triggers another reconcile.
            let t = self.now + self.rng.range(1_000, 10_000);
            self.heal_at = Some(self.heal_at.map_or(t, |h| h.min(t)));
        }
        Ok(())
    }
}
