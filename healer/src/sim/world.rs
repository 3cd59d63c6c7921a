//! The model cluster, its controllers, the fault script and the healer loop.

use std::collections::VecDeque;

use celld_api::labels::{claim_name, member_name};
use celld_api::{CelldFleetStatus, Profile};

use super::{CONVERGENCE_BOUND, PER_INTERRUPTION, Violation};
use crate::config::Config;
use crate::confirm::{self, Confirmation};
use crate::plan::{Action, ClaimDeletion, HandoffRecord};
use crate::snapshot::{self as s, CondStatus};
use crate::time::{Span, Timestamp};

const FLEET: &str = "alpha";
const ID: &str = "7kq2m9x4c1v8b3n6z5h0j2w4r8";
const ZONES: usize = 3;
const NODES_PER_ZONE: usize = 3;
const GRACE: i64 = 30_000;
const EVICTION: i64 = 300_000;
const NOT_READY_AFTER: i64 = 40_000;
const MAX_STEPS: usize = 4_000;
const START: i64 = 1_795_910_400_000;

/// SplitMix64: tiny, fast and stable across dependency upgrades, so a seed replays the
/// same run for ever.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Debug)]
struct Node {
    zone: usize,
    up: bool,
    down_at: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Container {
    /// Starts serving at the time (on an up node, with a usable disk).
    Starting(i64),
    Ready,
    CrashLoop,
    ImagePull,
    /// Cannot start: its disk is lost or cannot attach.
    NoDisk,
    /// Not scheduled yet.
    Unplaced,
}

#[derive(Clone, Debug)]
struct Pod {
    ord: u32,
    uid: u64,
    rv: u64,
    created: i64,
    deletion: Option<i64>,
    node: Option<usize>,
    unsched_since: Option<i64>,
    sched_at: i64,
    ready: bool,
    ready_cond: Option<i64>,
    container: Container,
    last_exit: Option<i64>,
    rev: u64,
    stuck: bool,
    terminated: bool,
    fin: bool,
    index: bool,
    record: Option<HandoffRecord>,
    claim_uid: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Pending,
    Bound,
    Lost,
}

#[derive(Clone, Debug)]
struct Claim {
    ord: u32,
    uid: u64,
    rv: u64,
    created: i64,
    deletion: Option<i64>,
    phase: Phase,
    zone: Option<usize>,
    foreign: bool,
    stuck: bool,
    /// When it became Lost (the healer's first observation, in this model).
    lost_at: Option<i64>,
}

#[derive(Clone, Debug)]
struct Sts {
    uid: u64,
    rv: u64,
    generation: i64,
    observed: i64,
    replicas: i32,
    update_rev: u64,
    deleting: bool,
}

#[derive(Clone, Debug)]
struct FleetObj {
    rv: u64,
    generation: i64,
    members: i32,
    paused: bool,
    deleting: bool,
    finalizer: bool,
    drift: bool,
    status: Option<CelldFleetStatus>,
    gone: bool,
    /// spec.deletionProtection.
    protected: bool,
    /// The live spec is invalid (an edit the API server let through).
    invalid: bool,
    /// Its bucket reservation names another identity (another object: the fleet's own
    /// resourceVersion does not change with it).
    reserved_elsewhere: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    NodeLost {
        back: bool,
    },
    VolumeLost,
    VolumeStuck,
    CrashLoop,
    ImagePull,
    StuckTerminating,
    Scale,
    Rollout,
    Pause,
    Drift,
    HandDeletedClaim,
    /// A claim reported Lost for a while, then Bound again (a restore bringing claims
    /// back before their volumes).
    TransientLost,
    /// The live spec turns invalid for a while.
    Invalid,
    /// The fleet's bucket reservation names another identity for a while (rule V3).
    ReservedElsewhere,
}

/// Summary of one seed.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Steps run.
    pub steps: usize,
    /// Healer reconciles.
    pub reconciles: usize,
    /// Disk handoffs committed.
    pub handoffs: usize,
    /// Claims deleted by the healer.
    pub claims_deleted: usize,
    /// Faults injected.
    pub faults: usize,
    /// Longest time from a fault's end to convergence (ms).
    pub slowest_convergence: i64,
    /// Late writes of a deposed replica that reached the API server.
    pub late_writes: usize,
}

struct Sim {
    rng: Rng,
    now: i64,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    claims: Vec<Claim>,
    sts: Option<Sts>,
    fleet: FleetObj,
    next_uid: u64,
    next_rv: u64,
    cfg: Config,
    /// Healer: when it runs next (watch event or wake-up).
    heal_at: Option<i64>,
    sts_sync_at: Option<i64>,
    /// Claim uids whose deletion an acknowledged, justified guarded Pod delete authorized.
    justified: Vec<u64>,
    /// Fault script.
    next_fault_at: i64,
    faults_left: u32,
    double: bool,
    converge_by: Option<i64>,
    fault_end: i64,
    fixes: Vec<(i64, u32, Fault)>,
    node_back: Vec<(i64, usize)>,
    unpause_at: Option<i64>,
    undrift_at: Option<i64>,
    foreign_gone_at: Option<i64>,
    delete_fleet_at_end: bool,
    trace: Option<Vec<String>>,
    out: Outcome,
    /// The healer's caches lag and disagree: each reconcile decides on Pods, claims and
    /// the workload taken from different recent moments, and confirms destructive
    /// writes on the fresh state (`crate::confirm`).
    laggy: bool,
    /// Recent states the lagging caches are drawn from.
    views: VecDeque<s::Snapshot>,
    /// Test only: skip the fresh-read confirmation (the mutation check).
    skip_confirmation: bool,
    /// Claim uid -> when the healer first saw it Lost (the runtime's memory).
    lost_seen: std::collections::BTreeMap<String, Timestamp>,
    /// Objects of another fleet with the same identity, and claims at huge ordinals:
    /// the healer must never write to any of them.
    decoys: Vec<Decoy>,
    /// An older fleet carries this fleet's identity: it must get no action but aborts
    /// and its release.
    conflicted: bool,
    /// Lost claims that come back Bound: (when, claim uid).
    relost: Vec<(i64, u64)>,
    /// When an invalid spec is fixed.
    revalid_at: Option<i64>,
    /// When the reservation naming another identity is removed.
    unreserve_at: Option<i64>,
    /// The reservation names another identity right after the next handoff commits.
    reserved_on_commit: bool,
    /// The spec turns invalid right after the next handoff commits.
    invalid_on_commit: bool,
    /// An older fleet with the same identity shows up right after the next commit.
    conflict_on_commit: bool,
    /// When deletion protection is turned off (deliberate deletion after a refusal).
    unprotect_at: Option<i64>,
    /// No convergence promise (two faults at once, or a conflicted fleet).
    safety_only: bool,
    /// A second healer replica that lost the lease while a write was on the wire: some
    /// of the leader's confirmed writes are sent again by it, and land later (after the
    /// new leader has moved on) carrying the preconditions of their decision.
    deposed: bool,
    /// The deposed replica's writes still on the wire: (when it lands, the write).
    in_flight: Vec<(i64, Action)>,
    /// A late write is being applied (one request: no retry, no crash, no later step).
    replaying: bool,
    /// Test only: late writes land whatever their preconditions (the mutation check).
    ignore_preconditions: bool,
    /// The fresh read re-reads the bucket reservation too (false: the mutation check).
    fresh_reservation: bool,
}

/// An object of another fleet that shares the identity, or a claim at a huge ordinal.
#[derive(Clone, Debug)]
enum Decoy {
    Pod(Box<s::Pod>),
    Claim(s::Claim),
}

impl Decoy {
    fn uid(&self) -> &str {
        match self {
            Decoy::Pod(p) => &p.uid,
            Decoy::Claim(c) => &c.uid,
        }
    }
}

fn ts(ms: i64) -> Timestamp {
    Timestamp(ms)
}

/// Another fleet `alpha-1` copied from this one (same identity) with a handoff in
/// progress on one of its Pods, and claims of ours at ordinals no member can have.
fn decoys() -> Vec<Decoy> {
    let mut out = Vec::new();
    for o in 0..2 {
        out.push(Decoy::Pod(Box::new(s::Pod {
            name: format!("{FLEET}-1-{o}"),
            uid: format!("decoy-pod-{o}"),
            resource_version: "1".into(),
            identity: Some(ID.into()),
            controller: Some(s::Controller {
                kind: "StatefulSet".into(),
                name: format!("{FLEET}-1"),
                uid: "decoy-sts".into(),
            }),
            created: ts(START - 3_600_000),
            deletion: None,
            node_name: Some("node-0".into()),
            zone: None,
            phase: s::PodPhase::Running,
            ready: Some(s::Cond {
                status: CondStatus::False,
                since: Some(ts(START - 3_600_000)),
            }),
            unschedulable: None,
            config_wait: None,
            crash_loop_backoff: false,
            last_container_exit: None,
            replacement_finalizer: o == 0,
            replacement_index: (o == 0).then(|| ID.into()),
            record: (o == 0).then(|| {
                s::RecordState::Valid(HandoffRecord {
                    identity: ID.into(),
                    claim_uid: "decoy-claim-0".into(),
                    claim_resource_version: "1".into(),
                    committed: false,
                })
            }),
            force_deleted: false,
            other_finalizers: Vec::new(),
            force_delete_retry_at: None,
        })));
        out.push(Decoy::Claim(s::Claim {
            name: format!("data-{FLEET}-1-{o}"),
            uid: format!("decoy-claim-{o}"),
            resource_version: "1".into(),
            identity: Some(ID.into()),
            has_owner_references: false,
            created: ts(START - 3_600_000),
            deletion: None,
            phase: s::ClaimPhase::Lost,
            lost_since: Some(ts(START - 3_600_000)),
        }));
    }
    for (i, o) in ["50000000", "4294967296", "100"].iter().enumerate() {
        out.push(Decoy::Claim(s::Claim {
            name: format!("data-{FLEET}-{o}"),
            uid: format!("decoy-huge-{i}"),
            resource_version: "1".into(),
            identity: Some(ID.into()),
            has_owner_references: false,
            created: ts(START - 3_600_000),
            deletion: None,
            phase: s::ClaimPhase::Bound,
            lost_since: None,
        }));
    }
    out
}

impl Sim {
    fn new(seed: u64, trace: bool) -> Sim {
        let mut rng = Rng(seed);
        let members = rng.range(3, 5) as i32;
        let nodes = (0..ZONES * NODES_PER_ZONE)
            .map(|i| Node {
                zone: i % ZONES,
                up: true,
                down_at: 0,
            })
            .collect();
        let mut sim = Sim {
            rng,
            now: START,
            nodes,
            pods: Vec::new(),
            claims: Vec::new(),
            sts: None,
            fleet: FleetObj {
                rv: 1,
                generation: 1,
                members,
                paused: false,
                deleting: false,
                finalizer: true,
                drift: false,
                status: None,
                gone: false,
                protected: false,
                invalid: false,
                reserved_elsewhere: false,
            },
            next_uid: 1000,
            next_rv: 10,
            cfg: Config::default(),
            heal_at: Some(START),
            sts_sync_at: None,
            justified: Vec::new(),
            next_fault_at: START,
            faults_left: 0,
            double: false,
            converge_by: None,
            fault_end: START,
            fixes: Vec::new(),
            node_back: Vec::new(),
            unpause_at: None,
            undrift_at: None,
            foreign_gone_at: None,
            delete_fleet_at_end: false,
            trace: trace.then(Vec::new),
            out: Outcome::default(),
            laggy: false,
            views: VecDeque::new(),
            skip_confirmation: false,
            lost_seen: std::collections::BTreeMap::new(),
            decoys: Vec::new(),
            conflicted: false,
            relost: Vec::new(),
            revalid_at: None,
            unreserve_at: None,
            reserved_on_commit: false,
            invalid_on_commit: false,
            conflict_on_commit: false,
            unprotect_at: None,
            safety_only: false,
            deposed: false,
            in_flight: Vec::new(),
            replaying: false,
            ignore_preconditions: false,
            fresh_reservation: true,
        };
        sim.fleet.finalizer = !sim.rng.chance(10);
        sim.faults_left = sim.rng.range(2, 4) as u32;
        sim.double = sim.rng.chance(20);
        sim.delete_fleet_at_end = sim.rng.chance(20);
        sim.laggy = sim.rng.chance(30);
        sim.conflicted = sim.rng.chance(5);
        sim.safety_only = sim.double || sim.conflicted;
        if sim.rng.chance(30) {
            sim.decoys = decoys();
        }
        sim.deposed = sim.rng.chance(25);
        sim.next_fault_at = START + sim.rng.range(10, 30) * 60_000;
        // A settled fleet: members ready for an hour on disks older than their Pods.
        let uid = sim.uid();
        sim.sts = Some(Sts {
            uid,
            rv: 1,
            generation: 1,
            observed: 1,
            replicas: members,
            update_rev: 1,
            deleting: false,
        });
        for o in 0..members as u32 {
            let node = (o as usize % ZONES) + ZONES * (o as usize / ZONES);
            let cuid = sim.uid();
            sim.claims.push(Claim {
                ord: o,
                uid: cuid,
                rv: 1,
                created: START - 3 * 3_600_000,
                deletion: None,
                phase: Phase::Bound,
                zone: Some(sim.nodes[node].zone),
                foreign: false,
                stuck: false,
                lost_at: None,
            });
            let puid = sim.uid();
            sim.pods.push(Pod {
                ord: o,
                uid: puid,
                rv: 1,
                created: START - 2 * 3_600_000,
                deletion: None,
                node: Some(node),
                unsched_since: None,
                sched_at: 0,
                ready: true,
                ready_cond: Some(START - 3_600_000),
                container: Container::Ready,
                last_exit: None,
                rev: 1,
                stuck: false,
                terminated: false,
                fin: false,
                index: false,
                record: None,
                claim_uid: cuid,
            });
        }
        // Another fleet's disk at one of our names above the current members.
        if sim.rng.chance(20) {
            let o = sim.rng.range(members as i64, 5) as u32;
            let cuid = sim.uid();
            sim.claims.push(Claim {
                ord: o,
                uid: cuid,
                rv: 1,
                created: START - 3_600_000,
                deletion: None,
                phase: Phase::Bound,
                zone: Some(0),
                foreign: true,
                stuck: false,
                lost_at: None,
            });
        }
        sim
    }

    fn uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    fn rv(&mut self) -> u64 {
        self.next_rv += 1;
        self.next_rv
    }

    fn log(&mut self, f: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            let m = (self.now - START) / 1000;
            t.push(format!("[{:>5}:{:02}] {}", m / 60, m % 60, f()));
        }
    }

    fn kick(&mut self) {
        let t = self.now + 50;
        self.heal_at = Some(self.heal_at.map_or(t, |h| h.min(t)));
        let d = self.now + self.rng.range(100, 3_000);
        self.sts_sync_at = Some(self.sts_sync_at.map_or(d, |x| x.min(d)));
    }

    fn pod_idx(&self, ord: u32) -> Option<usize> {
        self.pods.iter().position(|p| p.ord == ord)
    }

    fn claim_idx(&self, ord: u32) -> Option<usize> {
        self.claims.iter().position(|c| c.ord == ord)
    }

    // ---------------------------------------------------------------- controllers

    fn sts_sync(&mut self) {
        let Some(mut sts) = self.sts.clone() else {
            return;
        };
        let mut changed = false;
        if sts.observed != sts.generation {
            sts.observed = sts.generation;
            changed = true;
        }
        if sts.deleting {
            // Foreground deletion: the garbage collector deletes every Pod, then the set.
            for i in 0..self.pods.len() {
                if self.pods[i].deletion.is_none() {
                    self.delete_pod(i, GRACE);
                    changed = true;
                }
            }
            if self.pods.is_empty() {
                self.sts = None;
                self.log(|| "statefulset: deleted".into());
                self.kick();
                return;
            }
        } else {
            for o in 0..sts.replicas.max(0) as u32 {
                if self.pod_idx(o).is_some() {
                    continue;
                }
                let cuid = match self.claim_idx(o) {
                    Some(ci) if self.claims[ci].deletion.is_some() => continue,
                    Some(ci) => self.claims[ci].uid,
                    None => {
                        let uid = self.uid();
                        let rv = self.rv();
                        self.claims.push(Claim {
                            ord: o,
                            uid,
                            rv,
                            created: self.now,
                            deletion: None,
                            phase: Phase::Pending,
                            zone: None,
                            foreign: false,
                            stuck: false,
                            lost_at: None,
                        });
                        uid
                    }
                };
                let uid = self.uid();
                let rv = self.rv();
                let sched_at = self.now + self.rng.range(0, 2_000);
                self.pods.push(Pod {
                    ord: o,
                    uid,
                    rv,
                    created: self.now,
                    deletion: None,
                    node: None,
                    unsched_since: None,
                    sched_at,
                    ready: false,
                    ready_cond: None,
                    container: Container::Unplaced,
                    last_exit: None,
                    rev: sts.update_rev,
                    stuck: false,
                    terminated: false,
                    fin: false,
                    index: false,
                    record: None,
                    claim_uid: cuid,
                });
                self.log(|| format!("statefulset: created {}", member_name(FLEET, o)));
                changed = true;
            }
            for i in 0..self.pods.len() {
                if self.pods[i].ord as i32 >= sts.replicas && self.pods[i].deletion.is_none() {
                    self.delete_pod(i, GRACE);
                    changed = true;
                }
            }
            // Rolling update: one Pod at a time, highest ordinal first, once all are ready.
            let n = sts.replicas.max(0) as u32;
            let all_ready = (0..n).all(|o| {
                self.pod_idx(o)
                    .is_some_and(|i| self.pods[i].ready && self.pods[i].deletion.is_none())
            });
            if all_ready
                && let Some(o) = (0..n)
                    .rev()
                    .find(|&o| self.pods[self.pod_idx(o).unwrap()].rev != sts.update_rev)
            {
                let i = self.pod_idx(o).unwrap();
                self.delete_pod(i, GRACE);
                self.log(|| format!("statefulset: rolling {}", member_name(FLEET, o)));
                changed = true;
            }
        }
        if changed {
            sts.rv = self.rv();
            self.sts = Some(sts);
            self.kick();
        }
    }

    fn delete_pod(&mut self, i: usize, grace: i64) {
        let now = self.now;
        let rv = self.rv();
        let p = &mut self.pods[i];
        if p.deletion.is_none() {
            p.deletion = Some(if p.node.is_some() { now + grace } else { now });
            p.rv = rv;
        }
        if p.node.is_none() {
            p.terminated = true;
        }
    }

    fn sts_status(&self) -> (i32, i32, i32, bool) {
        let Some(sts) = &self.sts else {
            return (0, 0, 0, false);
        };
        let n = sts.replicas.max(0) as u32;
        let mut replicas = 0;
        let mut ready = 0;
        let mut updated = 0;
        for p in self.pods.iter().filter(|p| p.ord < n) {
            replicas += 1;
            if p.ready && p.deletion.is_none() {
                ready += 1;
            }
            if p.rev == sts.update_rev && p.deletion.is_none() {
                updated += 1;
            }
        }
        (replicas, ready, updated, updated == sts.replicas)
    }

    fn schedule(&mut self) {
        let mut order: Vec<usize> = (0..self.pods.len())
            .filter(|&i| {
                let p = &self.pods[i];
                p.node.is_none() && p.deletion.is_none() && p.sched_at <= self.now
            })
            .collect();
        // Random order: the #79 race needs a fresh-disk Pod to win sometimes.
        for k in (1..order.len()).rev() {
            let j = self.rng.below(k as u64 + 1) as usize;
            order.swap(k, j);
        }
        for i in order {
            let ord = self.pods[i].ord;
            let pin = self
                .claim_idx(ord)
                .filter(|&c| self.claims[c].uid == self.pods[i].claim_uid)
                .and_then(|c| self.claims[c].zone);
            let mut per_zone = [0i32; ZONES];
            let mut used = vec![false; self.nodes.len()];
            for p in &self.pods {
                if let Some(n) = p.node {
                    used[n] = true;
                    per_zone[self.nodes[n].zone] += 1;
                }
            }
            let cands: Vec<usize> = (0..self.nodes.len())
                .filter(|&n| {
                    let z = self.nodes[n].zone;
                    self.nodes[n].up && !used[n] && pin.is_none_or(|pz| pz == z)
                })
                .collect();
            // Topology spread, maxSkew 1, DoNotSchedule: the candidate zone's count plus
            // this Pod may exceed the smallest zone's count by at most one.
            let min = *per_zone.iter().min().unwrap();
            let cands: Vec<usize> = cands
                .into_iter()
                .filter(|&n| per_zone[self.nodes[n].zone] + 1 - min <= 1)
                .collect();
            let rv = self.rv();
            if cands.is_empty() {
                let now = self.now;
                let p = &mut self.pods[i];
                if p.unsched_since.is_none() {
                    p.unsched_since = Some(now);
                    p.rv = rv;
                    self.kick();
                }
                self.pods[i].sched_at = self.now + 30_000;
                continue;
            }
            let n = cands[self.rng.below(cands.len() as u64) as usize];
            let zone = self.nodes[n].zone;
            let delay = self.rng.range(5_000, 60_000);
            let now = self.now;
            let claim = self
                .claim_idx(ord)
                .filter(|&c| self.claims[c].uid == self.pods[i].claim_uid);
            let mut usable = true;
            if let Some(c) = claim {
                let cl = &mut self.claims[c];
                if cl.phase == Phase::Pending {
                    cl.phase = Phase::Bound;
                    cl.zone = Some(zone);
                    cl.rv = rv;
                }
                usable = cl.phase == Phase::Bound && !cl.stuck;
            }
            let p = &mut self.pods[i];
            p.node = Some(n);
            p.unsched_since = None;
            p.ready_cond = Some(now);
            p.container = if usable {
                Container::Starting(now + delay)
            } else {
                Container::NoDisk
            };
            p.rv = rv;
            self.log(|| {
                format!(
                    "scheduler: {} -> node {n} (zone {zone})",
                    member_name(FLEET, ord)
                )
            });
            self.kick();
        }
    }

    fn kubelets(&mut self) {
        let now = self.now;
        let mut removed = false;
        for i in 0..self.pods.len() {
            let up = self.pods[i].node.is_none_or(|n| self.nodes[n].up);
            let down_at = self.pods[i].node.map_or(0, |n| self.nodes[n].down_at);
            let p = &self.pods[i];
            if let Some(d) = p.deletion {
                let _ = d;
                if !p.terminated && up && !p.stuck {
                    // Drains and exits within its grace; modelled as at once.
                    let rv = self.rv();
                    let p = &mut self.pods[i];
                    p.terminated = true;
                    p.ready = false;
                    p.rv = rv;
                    removed = true;
                }
                continue;
            }
            if !up {
                if p.ready && now >= down_at + NOT_READY_AFTER {
                    let rv = self.rv();
                    let p = &mut self.pods[i];
                    p.ready = false;
                    p.ready_cond = Some(down_at + NOT_READY_AFTER);
                    p.rv = rv;
                    removed = true;
                }
                continue;
            }
            if let Container::Starting(t) = p.container
                && now >= t
            {
                let rv = self.rv();
                let p = &mut self.pods[i];
                p.container = Container::Ready;
                p.ready = true;
                p.ready_cond = Some(now);
                p.rv = rv;
                removed = true;
            }
        }
        // Objects go once terminated and free of finalizers.
        let before = self.pods.len();
        self.pods.retain(|p| !p.terminated || p.fin);
        if self.pods.len() != before {
            removed = true;
        }
        // PVC protection: a deleting claim goes once no Pod uses it.
        let pods = &self.pods;
        let before = self.claims.len();
        self.claims
            .retain(|c| c.deletion.is_none() || pods.iter().any(|p| p.claim_uid == c.uid));
        if self.claims.len() != before {
            removed = true;
        }
        // Node lifecycle: evict Pods from nodes lost for the eviction timeout.
        for i in 0..self.pods.len() {
            if let Some(n) = self.pods[i].node
                && !self.nodes[n].up
                && self.pods[i].deletion.is_none()
                && now >= self.nodes[n].down_at + EVICTION
            {
                self.delete_pod(i, GRACE);
                self.log(|| "node lifecycle: evicted a Pod from a lost node".into());
                removed = true;
            }
        }
        if removed {
            self.kick();
        }
    }

    // ---------------------------------------------------------------- faults

    fn converged(&self) -> bool {
        let Some(sts) = &self.sts else { return false };
        let target = self.fleet.members;
        !self.fleet.paused
            && !self.fleet.drift
            && sts.replicas == target
            && sts.observed == sts.generation
            && self.pods.len() == target as usize
            && self.pods.iter().all(|p| {
                p.node.is_some_and(|n| self.nodes[n].up)
                    && p.ready
                    && p.deletion.is_none()
                    && p.rev == sts.update_rev
                    && !p.fin
                    && (p.ord as i32) < target
            })
    }

    fn inject(&mut self) {
        self.out.faults += 1;
        let kinds = [
            Fault::NodeLost { back: true },
            Fault::NodeLost { back: false },
            Fault::VolumeLost,
            Fault::VolumeStuck,
            Fault::CrashLoop,
            Fault::ImagePull,
            Fault::StuckTerminating,
            Fault::Scale,
            Fault::Scale,
            Fault::Rollout,
            Fault::Pause,
            Fault::Drift,
            Fault::HandDeletedClaim,
            Fault::TransientLost,
            Fault::Invalid,
            Fault::ReservedElsewhere,
        ];
        let f = kinds[self.rng.below(kinds.len() as u64) as usize];
        let n = self.fleet.members.max(1) as u32;
        let ord = self.rng.below(n as u64) as u32;
        let mut end = self.now;
        self.log(|| format!("FAULT {f:?} on ordinal {ord}"));
        match f {
            Fault::NodeLost { back } => {
                let Some(node) = self.pod_idx(ord).and_then(|i| self.pods[i].node) else {
                    return;
                };
                let zone = self.nodes[node].zone;
                // A node lost for good leaves its zone room for the members pinned there.
                if !back && self.nodes.iter().any(|n| n.zone == zone && !n.up) {
                    return;
                }
                self.nodes[node].up = false;
                self.nodes[node].down_at = self.now;
                if back {
                    let t = self.now + self.rng.range(60, 1_500) * 1000;
                    self.node_back.push((t, node));
                    end = t;
                }
            }
            Fault::VolumeLost | Fault::VolumeStuck => {
                let Some(ci) = self.claim_idx(ord).filter(|&c| !self.claims[c].foreign) else {
                    return;
                };
                if self.claims[ci].phase != Phase::Bound {
                    return;
                }
                // A disk made for its current Pod is never replaced again (by design), so
                // an unusable one would not converge: only age it out on older disks.
                let older = self
                    .pod_idx(ord)
                    .is_some_and(|i| self.claims[ci].created + 60_000 < self.pods[i].created);
                if f == Fault::VolumeStuck && !older {
                    return;
                }
                let rv = self.rv();
                if f == Fault::VolumeLost {
                    self.claims[ci].phase = Phase::Lost;
                    self.claims[ci].lost_at = Some(self.now);
                } else {
                    self.claims[ci].stuck = true;
                }
                self.claims[ci].rv = rv;
                let cuid = self.claims[ci].uid;
                if let Some(i) = self
                    .pod_idx(ord)
                    .filter(|&i| self.pods[i].claim_uid == cuid)
                {
                    self.fail_pod(i, Container::NoDisk);
                }
            }
            Fault::CrashLoop | Fault::ImagePull => {
                let Some(i) = self.pod_idx(ord) else { return };
                let c = if f == Fault::CrashLoop {
                    Container::CrashLoop
                } else {
                    Container::ImagePull
                };
                self.fail_pod(i, c);
                if f == Fault::CrashLoop {
                    self.pods[i].last_exit = Some(self.now + 1_000);
                }
                let t = self.now + self.rng.range(60, 3_000) * 1000;
                self.fixes.push((t, ord, f));
                end = t;
            }
            Fault::StuckTerminating => {
                let Some(i) = self.pod_idx(ord) else { return };
                self.pods[i].stuck = true;
                self.delete_pod(i, GRACE);
            }
            Fault::Scale => {
                let m = self.rng.range(3, 6) as i32;
                self.fleet.members = m;
                self.fleet.generation += 1;
                self.fleet.rv = self.rv();
                self.log(|| format!("members -> {m}"));
            }
            Fault::Rollout => {
                if let Some(sts) = &mut self.sts {
                    sts.generation += 1;
                    sts.update_rev += 1;
                }
            }
            Fault::Pause => {
                self.fleet.paused = true;
                let t = self.now + self.rng.range(60, 1_200) * 1000;
                self.unpause_at = Some(t);
                end = t;
            }
            Fault::Drift => {
                self.fleet.drift = true;
                let t = self.now + self.rng.range(60, 1_200) * 1000;
                self.undrift_at = Some(t);
                end = t;
            }
            Fault::TransientLost => {
                let Some(ci) = self.claim_idx(ord).filter(|&c| !self.claims[c].foreign) else {
                    return;
                };
                if self.claims[ci].phase != Phase::Bound || self.claims[ci].deletion.is_some() {
                    return;
                }
                let rv = self.rv();
                let cuid = self.claims[ci].uid;
                self.claims[ci].phase = Phase::Lost;
                self.claims[ci].lost_at = Some(self.now);
                self.claims[ci].rv = rv;
                // Back within 10 s to 2.5 min: inside and past the confirmation window.
                let t = self.now + self.rng.range(10, 150) * 1000;
                self.relost.push((t, cuid));
                end = t;
                if let Some(i) = self
                    .pod_idx(ord)
                    .filter(|&i| self.pods[i].claim_uid == cuid)
                {
                    self.fail_pod(i, Container::NoDisk);
                }
            }
            Fault::Invalid if self.rng.chance(10) => {
                self.conflict_on_commit = true;
            }
            Fault::Invalid if self.rng.chance(50) => {
                // Armed: the spec turns invalid right after the next handoff commits, so
                // a committed handoff meets rule H2 (abort, keep the disk).
                self.invalid_on_commit = true;
            }
            Fault::Invalid => {
                self.fleet.invalid = true;
                self.fleet.rv = self.rv();
                let t = self.now + self.rng.range(60, 1_200) * 1000;
                self.revalid_at = Some(t);
                end = t;
            }
            Fault::ReservedElsewhere if self.rng.chance(40) => {
                // Armed: the reservation turns up right after the next handoff commits,
                // so a committed handoff meets rule H2 under V3.
                self.reserved_on_commit = true;
            }
            Fault::ReservedElsewhere => {
                self.fleet.reserved_elsewhere = true;
                let t = self.now + self.rng.range(60, 1_200) * 1000;
                self.unreserve_at = Some(t);
                self.kick();
                end = t;
            }
            Fault::HandDeletedClaim => {
                let Some(ci) = self.claim_idx(ord).filter(|&c| !self.claims[c].foreign) else {
                    return;
                };
                if self.claims[ci].deletion.is_none() {
                    self.claims[ci].deletion = Some(self.now);
                    self.claims[ci].rv = self.rv();
                }
            }
        }
        // A foreign claim in the way is removed by an administrator after a while, so
        // growth can finish (the healer itself never touches it).
        if self
            .claims
            .iter()
            .any(|c| c.foreign && (c.ord as i32) < self.fleet.members)
        {
            let t = self.now + self.rng.range(60, 900) * 1000;
            self.foreign_gone_at.get_or_insert(t);
            end = end.max(t);
        }
        self.fault_end = self.fault_end.max(end);
        self.kick();
    }

    /// Between two handoff steps the member recovers: a Lost disk is Bound again, or a
    /// down Pod turns ready.
    fn recover_between_steps(&mut self, i: usize) {
        let cuid = self.pods[i].claim_uid;
        if let Some(ci) = self
            .claims
            .iter()
            .position(|c| c.uid == cuid && c.phase == Phase::Lost)
        {
            let rv = self.rv();
            self.claims[ci].phase = Phase::Bound;
            self.claims[ci].lost_at = None;
            self.claims[ci].rv = rv;
        }
        if !self.pods[i].ready && self.pods[i].node.is_some_and(|n| self.nodes[n].up) {
            let rv = self.rv();
            let now = self.now;
            let p = &mut self.pods[i];
            p.ready = true;
            p.ready_cond = Some(now);
            p.container = Container::Ready;
            p.rv = rv;
        }
        self.log(|| "the member recovered between two handoff steps".into());
    }

    fn fail_pod(&mut self, i: usize, c: Container) {
        let rv = self.rv();
        let now = self.now;
        let p = &mut self.pods[i];
        if p.ready {
            p.ready_cond = Some(now);
        }
        p.ready = false;
        p.container = c;
        p.rv = rv;
    }

    fn timed_events(&mut self) {
        let now = self.now;
        let mut i = 0;
        while i < self.node_back.len() {
            if self.node_back[i].0 <= now {
                let n = self.node_back.remove(i).1;
                self.nodes[n].up = true;
                self.log(|| format!("node {n} is back"));
                // Its kubelet restarts the Pods it still has.
                for k in 0..self.pods.len() {
                    if self.pods[k].node == Some(n)
                        && self.pods[k].deletion.is_none()
                        && !self.pods[k].ready
                    {
                        let d = self.rng.range(5_000, 60_000);
                        if matches!(
                            self.pods[k].container,
                            Container::Ready | Container::Starting(_)
                        ) {
                            self.pods[k].container = Container::Starting(now + d);
                        }
                    }
                }
                self.kick();
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.fixes.len() {
            if self.fixes[i].0 <= now {
                let (_, ord, f) = self.fixes.remove(i);
                self.log(|| format!("fixed {f:?} on ordinal {ord}"));
                for k in 0..self.pods.len() {
                    let want = if f == Fault::CrashLoop {
                        Container::CrashLoop
                    } else {
                        Container::ImagePull
                    };
                    if self.pods[k].ord == ord && self.pods[k].container == want {
                        let d = self.rng.range(5_000, 60_000);
                        self.pods[k].container = Container::Starting(now + d);
                        self.pods[k].rv = self.next_rv + 1;
                        self.next_rv += 1;
                    }
                }
                self.kick();
            } else {
                i += 1;
            }
        }
        if self.unpause_at.is_some_and(|t| t <= now) {
            self.unpause_at = None;
            self.fleet.paused = false;
            self.fleet.rv = self.rv();
            self.log(|| "unpaused".into());
            self.kick();
        }
        let mut i = 0;
        while i < self.relost.len() {
            if self.relost[i].0 <= now {
                let (_, cuid) = self.relost.remove(i);
                if let Some(ci) = self
                    .claims
                    .iter()
                    .position(|c| c.uid == cuid && c.phase == Phase::Lost)
                {
                    let rv = self.rv();
                    self.claims[ci].phase = Phase::Bound;
                    self.claims[ci].lost_at = None;
                    self.claims[ci].rv = rv;
                    self.log(|| "a Lost claim is Bound again".into());
                    for k in 0..self.pods.len() {
                        if self.pods[k].claim_uid == cuid
                            && self.pods[k].container == Container::NoDisk
                        {
                            let d = self.rng.range(5_000, 60_000);
                            self.pods[k].container = Container::Starting(now + d);
                        }
                    }
                    self.kick();
                }
            } else {
                i += 1;
            }
        }
        if self.unreserve_at.is_some_and(|t| t <= now) {
            self.unreserve_at = None;
            self.fleet.reserved_elsewhere = false;
            self.log(|| "the other identity's reservation removed".into());
            self.kick();
        }
        if self.revalid_at.is_some_and(|t| t <= now) {
            self.revalid_at = None;
            self.fleet.invalid = false;
            self.fleet.rv = self.rv();
            self.log(|| "spec fixed".into());
            self.kick();
        }
        if self.unprotect_at.is_some_and(|t| t <= now) {
            self.unprotect_at = None;
            self.fleet.protected = false;
            self.fleet.rv = self.rv();
            self.log(|| "deletion protection turned off".into());
            self.kick();
        }
        if self.undrift_at.is_some_and(|t| t <= now) {
            self.undrift_at = None;
            self.fleet.drift = false;
            self.log(|| "drift repaired".into());
            self.kick();
        }
        if self.foreign_gone_at.is_some_and(|t| t <= now) {
            self.foreign_gone_at = None;
            self.claims.retain(|c| !c.foreign);
            self.log(|| "administrator removed the foreign claim".into());
            self.kick();
        }
    }

    // ---------------------------------------------------------------- the healer

    fn snapshot(&self) -> s::Snapshot {
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
                zone: None,
                phase: if p.node.is_some() {
                    s::PodPhase::Running
                } else {
                    s::PodPhase::Pending
                },
                ready: p.ready_cond.map(|t| s::Cond {
                    status: if p.ready {
                        CondStatus::True
                    } else {
                        CondStatus::False
                    },
                    since: Some(ts(t)),
                }),
                unschedulable: p.unsched_since.map(|t| s::Unschedulable {
                    since: Some(ts(t)),
                    message: "0/9 nodes are available: node affinity or spread".into(),
                }),
                config_wait: (p.container == Container::ImagePull)
                    .then(|| "ImagePullBackOff".into()),
                crash_loop_backoff: p.container == Container::CrashLoop,
                last_container_exit: p.last_exit.map(ts),
                replacement_finalizer: p.fin,
                replacement_index: p.index.then(|| ID.into()),
                record: p.record.clone().map(s::RecordState::Valid),
                force_deleted: false,
                other_finalizers: Vec::new(),
                force_delete_retry_at: None,
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
                has_owner_references: false,
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
                reservation: self.fleet.reserved_elsewhere.then(|| s::Reservation {
                    name: "s3-ledger".into(),
                    identity: Some("someoneelse0000000000000000".into()),
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
        }
    }

    /// An interrupted write may cost a handoff attempt, whose member then waits a new
    /// replacement delay: the convergence bound grows by [`PER_INTERRUPTION`].
    fn interrupted(&mut self) {
        if let Some(by) = &mut self.converge_by {
            *by += PER_INTERRUPTION.millis();
        }
    }

    /// An API write's fate: Ok(()) applied and acknowledged; Err(true) applied but the
    /// response was lost; Err(false) refused (conflict) and not applied.
    fn api_fault(&mut self) -> Result<(), bool> {
        match self.rng.below(100) {
            0..=3 => Err(false),
            4..=7 => Err(true),
            _ => Ok(()),
        }
    }

    /// What lagging, mutually skewed watch caches show: Pods, claims and the workload
    /// each taken from one of the last few states (the fleet object is current).
    fn skewed(&mut self, truth: &s::Snapshot) -> s::Snapshot {
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
        for k in (1..v.pods.len()).rev() {
            let j = self.rng.below(k as u64 + 1) as usize;
            v.pods.swap(k, j);
        }
        for k in (1..v.claims.len()).rev() {
            let j = self.rng.below(k as u64 + 1) as usize;
            v.claims.swap(k, j);
        }
        v
    }

    /// What the runtime's Lost tracking does for a snapshot: a claim seen Lost keeps the
    /// time it was first seen so; one seen not Lost is forgotten.
    fn track_lost(&mut self, snap: &mut s::Snapshot) {
        let now = ts(self.now);
        for c in &mut snap.claims {
            if c.phase == s::ClaimPhase::Lost {
                c.lost_since = Some(*self.lost_seen.entry(c.uid.clone()).or_insert(now));
            } else {
                self.lost_seen.remove(&c.uid);
            }
        }
    }

    /// The deposed replica's late writes that land now. Each must be aimed only at this
    /// fleet's objects, and be allowed and justified by the state it lands on unless its
    /// preconditions refuse it. (A late handoff step 1 only marks
    /// the Pod: the leader must then abort it, or carry it on where that is justified,
    /// and those writes are checked as the leader's.)
    fn land_late_writes(&mut self) -> Result<(), Violation> {
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

    fn reconcile(&mut self) -> Result<(), Violation> {
        self.out.reconciles += 1;
        let mut truth = self.snapshot();
        let mut snap = if self.laggy {
            self.skewed(&truth)
        } else {
            truth.clone()
        };
        self.track_lost(&mut snap);
        let now = ts(self.now);
        let plan = crate::decide(&snap, now, &self.cfg);
        self.log(|| {
            format!(
                "healer: {} {:?} -> {}",
                plan.rule, plan.action, plan.status.conditions[0].message
            )
        });
        let mut action = plan.action.clone();
        // The fresh read before a destructive write: `decide` again on the true state.
        if let Some(a) = &action
            && confirm::needs_confirmation(a)
            && !self.skip_confirmation
        {
            self.track_lost(&mut truth);
            if !self.fresh_reservation {
                // What the runtime did before: the fresh read re-listed the fleet's own
                // objects only, and the reservation came from its cache.
                truth.fleet.reservation = snap.fleet.reservation.clone();
            }
            let fresh = crate::decide(&truth, now, &self.cfg);
            match confirm::confirm(a, &fresh) {
                Confirmation::Confirmed(x) | Confirmation::Instead(x) => action = Some(x),
                Confirmation::Hold(why) => {
                    self.log(|| format!("healer: not confirmed on the fresh read: {why}"));
                    self.heal_at = Some(self.now + 1_000);
                    return Ok(());
                }
            }
        }
        // The deposed replica made the same decision from the same facts; its request
        // is delayed on the wire and lands after the new leader's later writes.
        if self.deposed
            && let Some(a) = &action
            && self.rng.chance(15)
        {
            let at = self.now + self.rng.range(200, 20_000);
            self.in_flight.push((at, a.clone()));
        }
        // (At most one write per reconcile holds by construction: a plan has one action.)
        let mut ok = true;
        if let Some(a) = &action {
            // A write its preconditions refuse changes nothing, whatever it aimed at.
            if self.preconditions_hold(a) {
                self.check_allowed(a)?;
            }
            ok = self.act(a)?;
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
        self.heal_at = match (next, plan.wake_at.map(|t| t.0)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.laggy && snap != truth {
            // The lagging watch delivers the newer state a little later, and that event
            // triggers another reconcile.
            let t = self.now + self.rng.range(1_000, 10_000);
            self.heal_at = Some(self.heal_at.map_or(t, |h| h.min(t)));
        }
        Ok(())
    }

    /// Executes one action like the runtime would. Returns false when a write failed or
    /// the healer crashed (the next reconcile starts from the cluster).
    fn act(&mut self, a: &Action) -> Result<bool, Violation> {
        macro_rules! fate {
            ($apply:expr) => {{
                if self.replaying {
                    // A late write is one request that arrives; its sender is gone.
                    $apply;
                    self.kick();
                    return Ok(true);
                }
                match self.api_fault() {
                    Ok(()) => {
                        $apply;
                        // Controllers and the healer's own watch see the change.
                        self.kick();
                        if self.rng.chance(2) {
                            self.log(|| "healer crashed after a write".into());
                            self.interrupted();
                            return Ok(false);
                        }
                    }
                    Err(true) => {
                        $apply;
                        self.kick();
                        self.log(|| "write applied, response lost".into());
                        self.interrupted();
                        return Ok(false);
                    }
                    Err(false) => {
                        self.log(|| "write refused: conflict".into());
                        self.interrupted();
                        return Ok(false);
                    }
                }
            }};
        }
        let conflict = |s: &mut Sim, what: &str| {
            s.log(|| format!("precondition failed: {what}"));
            Ok(false)
        };
        // Whether a precondition holds (the mutation check waives it for late writes).
        let holds = |s: &Sim, ok: bool| ok || (s.replaying && s.ignore_preconditions);
        match a {
            Action::AddFleetFinalizer {
                resource_version, ..
            } => {
                if !holds(self, *resource_version == self.fleet.rv.to_string()) {
                    return conflict(self, "fleet rv");
                }
                fate!({
                    self.fleet.finalizer = true;
                    self.fleet.rv = self.rv();
                });
            }
            Action::RemoveFleetFinalizer {
                resource_version, ..
            } => {
                if !holds(self, *resource_version == self.fleet.rv.to_string()) {
                    return conflict(self, "fleet rv");
                }
                fate!({
                    self.fleet.finalizer = false;
                    if self.fleet.deleting {
                        self.fleet.gone = true;
                    }
                });
            }
            Action::SetReplicas {
                uid,
                resource_version,
                from,
                replicas,
                ..
            } => {
                let Some(sts) = &self.sts else {
                    return conflict(self, "no statefulset");
                };
                let same = *uid == sts.uid.to_string() && *resource_version == sts.rv.to_string();
                if !holds(self, same) {
                    return conflict(self, "statefulset uid/rv");
                }
                self.check_replicas(*from, *replicas)?;
                let r = *replicas;
                fate!({
                    let rv = self.rv();
                    let sts = self.sts.as_mut().unwrap();
                    sts.replicas = r;
                    sts.generation += 1;
                    sts.rv = rv;
                });
            }
            Action::ForceDeletePod { uid, .. } => {
                let Some(i) = self.pods.iter().position(|p| p.uid.to_string() == *uid) else {
                    return conflict(self, "pod gone");
                };
                fate!({
                    let p = &mut self.pods[i];
                    p.terminated = true;
                    p.deletion.get_or_insert(self.now);
                });
            }
            Action::DeletePod {
                uid,
                resource_version,
                ..
            } => {
                let Some(i) = self.pods.iter().position(|p| p.uid.to_string() == *uid) else {
                    return conflict(self, "pod gone");
                };
                if !holds(self, self.pods[i].rv.to_string() == *resource_version) {
                    return conflict(self, "pod rv");
                }
                let ord = self.pods[i].ord;
                let ci = self.claim_idx(ord);
                if ci.is_none_or(|c| self.claims[c].deletion.is_none()) {
                    return Err(Violation(format!(
                        "R1 deleted {} whose claim is not deleting",
                        member_name(FLEET, ord)
                    )));
                }
                self.check_zone_safety(ord, "releasing a deleting claim")?;
                fate!(self.delete_pod(i, GRACE));
            }
            Action::StartHandoff(h) => {
                let Some(i) = self
                    .pods
                    .iter()
                    .position(|p| p.uid.to_string() == h.pod_uid)
                else {
                    return conflict(self, "pod gone");
                };
                if !holds(self, self.pods[i].rv.to_string() == h.pod_resource_version) {
                    return conflict(self, "pod rv");
                }
                let ord = self.pods[i].ord;
                let rec = h.record.clone();
                if self.replaying {
                    // A late step 1 marks the Pod with an uncommitted record and nothing
                    // more (the deposed replica sends no step 2): harmless by itself, and
                    // the leader must abort it or carry it on only where it is justified.
                    fate!({
                        let rv = self.rv();
                        let p = &mut self.pods[i];
                        p.fin = true;
                        p.index = true;
                        p.record = Some(rec.clone());
                        p.rv = rv;
                    });
                }
                // The decision was confirmed on the fresh state, now: it must be justified
                // by that state (the runtime's fresh read precedes step 1 by moments).
                self.check_fresh_disk_justified(ord)?;
                self.check_zone_safety(ord, "committing a handoff")?;
                // 1. prepare
                fate!({
                    let rv = self.rv();
                    let p = &mut self.pods[i];
                    p.fin = true;
                    p.index = true;
                    p.record = Some(rec.clone());
                    p.rv = rv;
                });
                let prepared_rv = self.pods[i].rv;
                // The member may recover between two steps (its disk Bound again, or its
                // Pod ready): the guarded delete carries the rv step 1 returned, so it
                // fails, and the uncommitted record is aborted (the disk is kept).
                if self.rng.chance(10) {
                    self.recover_between_steps(i);
                }
                if self.pods[i].rv != prepared_rv {
                    return conflict(self, "pod changed since the prepare");
                }
                // 2. the guarded delete: the commit point.
                fate!(self.delete_pod(i, GRACE));
                // 3. commit, only after an acknowledged delete.
                let cuid: u64 = h.claim_uid.parse().unwrap();
                if self.pods[i].record.as_ref() != Some(&rec) {
                    return conflict(self, "record changed");
                }
                self.justified.push(cuid);
                fate!({
                    let rv = self.rv();
                    let p = &mut self.pods[i];
                    if let Some(r) = &mut p.record {
                        r.committed = true;
                    }
                    p.rv = rv;
                    self.out.handoffs += 1;
                });
                if std::mem::take(&mut self.conflict_on_commit) {
                    // The healer learns of an older fleet with this identity (its watch
                    // caught up) while a handoff is committed: rule H2 must abort it.
                    self.log(|| "an older fleet with this identity appeared".into());
                    self.conflicted = true;
                    self.safety_only = true;
                    self.converge_by = None;
                }
                if std::mem::take(&mut self.reserved_on_commit) {
                    self.log(|| "another identity's reservation appeared after the commit".into());
                    self.fleet.reserved_elsewhere = true;
                    let t = self.now + self.rng.range(60, 300) * 1000;
                    self.unreserve_at = Some(t);
                    self.interrupted();
                }
                if std::mem::take(&mut self.invalid_on_commit) {
                    self.log(|| "the spec turned invalid after the commit".into());
                    self.fleet.invalid = true;
                    self.fleet.rv = self.rv();
                    let t = self.now + self.rng.range(60, 300) * 1000;
                    self.revalid_at = Some(t);
                    self.interrupted();
                }
            }
            Action::DeleteClaim {
                uid,
                resource_version,
                purpose,
                ..
            } => {
                let Some(ci) = self.claims.iter().position(|c| c.uid.to_string() == *uid) else {
                    return conflict(self, "claim gone");
                };
                if !holds(self, self.claims[ci].rv.to_string() == *resource_version) {
                    return conflict(self, "claim rv");
                }
                self.check_claim_delete(ci, purpose)?;
                fate!({
                    // Marking it deleting is an update: its resourceVersion moves on, so
                    // a repeat of this delete (a deposed replica's) fails its precondition.
                    if self.claims[ci].deletion.is_none() {
                        self.claims[ci].deletion = Some(self.now);
                        self.claims[ci].rv = self.rv();
                    }
                    self.out.claims_deleted += 1;
                });
            }
            Action::ReleaseHandoff {
                uid,
                resource_version,
                ..
            }
            | Action::AbortHandoff {
                uid,
                resource_version,
                ..
            } => {
                let Some(i) = self.pods.iter().position(|p| p.uid.to_string() == *uid) else {
                    return conflict(self, "pod gone");
                };
                if !holds(self, self.pods[i].rv.to_string() == *resource_version) {
                    return conflict(self, "pod rv");
                }
                fate!({
                    let rv = self.rv();
                    let p = &mut self.pods[i];
                    p.fin = false;
                    p.index = false;
                    p.record = None;
                    p.rv = rv;
                });
            }
            Action::DeleteWorkload {
                uid,
                resource_version,
                ..
            } => {
                let Some(sts) = &self.sts else {
                    return conflict(self, "no statefulset");
                };
                let same = *uid == sts.uid.to_string() && *resource_version == sts.rv.to_string();
                if !holds(self, same) {
                    return conflict(self, "statefulset uid/rv");
                }
                fate!(self.sts.as_mut().unwrap().deleting = true);
            }
        }
        self.kick();
        Ok(true)
    }

    // ---------------------------------------------------------------- invariants

    /// Whether the API server would take `a`: its uid and resourceVersion preconditions
    /// hold on the current state (what `act` checks first).
    fn preconditions_hold(&self, a: &Action) -> bool {
        let pod = |uid: &str, rv: Option<&str>| {
            self.pods
                .iter()
                .any(|p| p.uid.to_string() == uid && rv.is_none_or(|rv| p.rv.to_string() == rv))
        };
        let sts = |uid: &str, rv: &str| {
            self.sts
                .as_ref()
                .is_some_and(|s| s.uid.to_string() == uid && s.rv.to_string() == rv)
        };
        match a {
            Action::AddFleetFinalizer {
                resource_version, ..
            }
            | Action::RemoveFleetFinalizer {
                resource_version, ..
            } => *resource_version == self.fleet.rv.to_string(),
            Action::SetReplicas {
                uid,
                resource_version,
                ..
            }
            | Action::DeleteWorkload {
                uid,
                resource_version,
                ..
            } => sts(uid, resource_version),
            Action::ForceDeletePod { uid, .. } => pod(uid, None),
            Action::DeletePod {
                uid,
                resource_version,
                ..
            }
            | Action::ReleaseHandoff {
                uid,
                resource_version,
                ..
            }
            | Action::AbortHandoff {
                uid,
                resource_version,
                ..
            } => pod(uid, Some(resource_version)),
            Action::StartHandoff(h) => pod(&h.pod_uid, Some(&h.pod_resource_version)),
            Action::DeleteClaim {
                uid,
                resource_version,
                ..
            } => self
                .claims
                .iter()
                .any(|c| c.uid.to_string() == *uid && c.rv.to_string() == *resource_version),
        }
    }

    /// Objects that are never this fleet's: no write may aim at one.
    fn check_targets(&self, a: &Action) -> Result<(), Violation> {
        let targets: Vec<&str> = match a {
            Action::ForceDeletePod { uid, .. }
            | Action::DeletePod { uid, .. }
            | Action::ReleaseHandoff { uid, .. }
            | Action::AbortHandoff { uid, .. }
            | Action::DeleteClaim { uid, .. } => vec![uid],
            Action::StartHandoff(h) => vec![&h.pod_uid, &h.claim_uid],
            _ => Vec::new(),
        };
        if let Some(d) = self.decoys.iter().find(|d| targets.contains(&d.uid())) {
            return Err(Violation(format!(
                "{a:?} aimed at an object that is not this fleet's: {d:?}"
            )));
        }
        Ok(())
    }

    /// Writes a fleet may never make in its current state, and objects never its own.
    fn check_allowed(&self, a: &Action) -> Result<(), Violation> {
        self.check_targets(a)?;
        let abort = matches!(a, Action::AbortHandoff { .. });
        if self.conflicted
            && !abort
            && !(self.fleet.deleting && matches!(a, Action::RemoveFleetFinalizer { .. }))
        {
            return Err(Violation(format!(
                "{a:?} for a fleet whose identity belongs to an older fleet"
            )));
        }
        let conflicted_release = self.conflicted
            && self.fleet.deleting
            && matches!(a, Action::RemoveFleetFinalizer { .. });
        if self.fleet.invalid && !abort && !conflicted_release {
            return Err(Violation(format!("{a:?} for a fleet with an invalid spec")));
        }
        // V3: a bucket scope reserved to another identity: no growth, no healing; only
        // a handoff's resolution (abort, or finishing a committed one) and the finalizer.
        let resolving = matches!(
            a,
            Action::AbortHandoff { .. }
                | Action::ReleaseHandoff { .. }
                | Action::AddFleetFinalizer { .. }
                | Action::DeleteClaim {
                    purpose: ClaimDeletion::Handoff { .. },
                    ..
                }
        );
        if self.fleet.reserved_elsewhere && !self.fleet.deleting && !resolving {
            return Err(Violation(format!(
                "{a:?} for a fleet whose bucket is reserved to another identity"
            )));
        }
        // A protected fleet being deleted: nothing destroyed, no release. (A conflicted
        // fleet's release deletes nothing, protected or not.)
        if self.fleet.deleting
            && self.fleet.protected
            && (a.is_destructive()
                || (!self.conflicted && matches!(a, Action::RemoveFleetFinalizer { .. })))
        {
            return Err(Violation(format!(
                "{a:?} while the fleet's deletion protection is on"
            )));
        }
        Ok(())
    }

    /// Ground truth, computed here from the model and not with `decide`'s helpers.
    fn down_since(&self, ord: u32) -> Option<i64> {
        match self.pod_idx(ord).map(|i| &self.pods[i]) {
            None => Some(i64::MIN),
            Some(p) if p.deletion.is_some() => Some(i64::MIN),
            Some(p) if !p.ready => Some(p.ready_cond.unwrap_or(p.created)),
            Some(_) => None,
        }
    }

    fn check_fresh_disk_justified(&self, ord: u32) -> Result<(), Violation> {
        let ci = self
            .claim_idx(ord)
            .ok_or_else(|| Violation(format!("handoff of {ord} without a claim")))?;
        let c = &self.claims[ci];
        if c.foreign {
            return Err(Violation(format!(
                "handoff would delete foreign claim {}",
                claim_name(FLEET, ord)
            )));
        }
        if c.phase == Phase::Lost {
            // Only a claim Lost for the whole confirmation window.
            let window = self.cfg.lost_confirmation.millis();
            return match c.lost_at {
                Some(t) if t + window <= self.now => Ok(()),
                _ => Err(Violation(format!(
                    "handoff of {} whose claim is Lost for less than the confirmation window",
                    claim_name(FLEET, ord)
                ))),
            };
        }
        let n = self.sts.as_ref().map_or(0, |s| s.replicas) as u32;
        let delay = self.cfg.replacement_delay.millis();
        let absorb = self.cfg.absorb_window.millis();
        let since = self
            .down_since(ord)
            .ok_or_else(|| Violation(format!("handoff of ready member {ord}")))?;
        if self.now < since.saturating_add(delay) {
            return Err(Violation(format!(
                "member {ord} replaced after only {} s down",
                (self.now - since) / 1000
            )));
        }
        for o in (0..n).filter(|&o| o != ord) {
            let ok = self.pod_idx(o).is_some_and(|i| {
                let p = &self.pods[i];
                p.ready
                    && p.deletion.is_none()
                    && p.ready_cond.is_some_and(|t| t + absorb <= self.now)
            });
            if !ok {
                return Err(Violation(format!(
                    "member {ord} replaced while member {o} was not ready for the absorb window"
                )));
            }
        }
        Ok(())
    }

    fn check_zone_safety(&self, ord: u32, what: &str) -> Result<(), Violation> {
        let sts = self
            .sts
            .as_ref()
            .ok_or_else(|| Violation(format!("{what} without a StatefulSet")))?;
        if sts.observed != sts.generation {
            return Err(Violation(format!(
                "{what} before the StatefulSet observed its spec"
            )));
        }
        for o in (0..sts.replicas.max(0) as u32).filter(|&o| o != ord) {
            let decided = self.pod_idx(o).is_some_and(|i| {
                let p = &self.pods[i];
                p.deletion.is_none() && (p.node.is_some() || p.unsched_since.is_some())
            });
            if !decided {
                return Err(Violation(format!(
                    "{what} for {ord} while member {o}'s Pod is undecided"
                )));
            }
        }
        Ok(())
    }

    fn check_replicas(&self, from: i32, to: i32) -> Result<(), Violation> {
        let sts = self.sts.as_ref().unwrap();
        if to < from {
            let (replicas, ready, updated, current) = self.sts_status();
            let rolled = sts.observed == sts.generation
                && replicas == from
                && ready == from
                && updated == from
                && current;
            if to != from - 1 || !rolled {
                return Err(Violation(format!(
                    "contraction {from} -> {to} (rolled out: {rolled})"
                )));
            }
        } else {
            if let Some(c) = self
                .claims
                .iter()
                .find(|c| c.foreign && (c.ord as i32) < to)
            {
                return Err(Violation(format!(
                    "growth to {to} over foreign claim {}",
                    claim_name(FLEET, c.ord)
                )));
            }
            // A fresh run only once every current member is decided.
            let kept = |o: u32| {
                self.claim_idx(o)
                    .is_some_and(|c| self.claims[c].deletion.is_none())
            };
            let first = kept(from as u32);
            if (from..to).any(|o| kept(o as u32) != first) {
                return Err(Violation(format!(
                    "growth {from} -> {to} mixes kept and fresh disks"
                )));
            }
            if !first {
                self.check_zone_safety(u32::MAX, "growing onto fresh disks")?;
            }
        }
        Ok(())
    }

    fn check_claim_delete(&self, ci: usize, purpose: &ClaimDeletion) -> Result<(), Violation> {
        let c = &self.claims[ci];
        if c.foreign {
            return Err(Violation(format!(
                "deleting foreign claim {}",
                claim_name(FLEET, c.ord)
            )));
        }
        match purpose {
            ClaimDeletion::FleetDeletion => {
                if !self.fleet.deleting || self.sts.is_some() || !self.pods.is_empty() {
                    return Err(Violation(
                        "fleet-deletion claim delete with the workload or Pods still there".into(),
                    ));
                }
            }
            ClaimDeletion::Handoff { .. } => {
                let held = self.pods.iter().any(|p| {
                    p.ord == c.ord
                        && p.fin
                        && p.deletion.is_some()
                        && p.record
                            .as_ref()
                            .is_some_and(|r| r.committed && r.claim_uid == c.uid.to_string())
                });
                if !held || !self.justified.contains(&c.uid) {
                    return Err(Violation(format!(
                        "claim {} deleted without a committed, justified handoff",
                        claim_name(FLEET, c.ord)
                    )));
                }
            }
        }
        Ok(())
    }

    fn check_state(&self) -> Result<(), Violation> {
        for p in &self.pods {
            if let Some(c) = self.claims.iter().find(|c| c.uid == p.claim_uid)
                && c.foreign
            {
                return Err(Violation(format!(
                    "member {} adopted a foreign claim",
                    p.ord
                )));
            }
        }
        if self.pods.iter().filter(|p| p.fin).count() > 1 {
            return Err(Violation("more than one handoff at a time".into()));
        }
        Ok(())
    }

    // ---------------------------------------------------------------- the loop

    fn next_time(&self) -> i64 {
        let mut t = i64::MAX;
        let now = self.now;
        // Timers already past were handled; only future ones move the clock.
        let mut m = |x: i64| {
            if x > now {
                t = t.min(x)
            }
        };
        if let Some(h) = self.heal_at {
            m(h.max(now + 1));
        }
        if let Some(x) = self.sts_sync_at {
            m(x.max(now + 1));
        }
        for p in &self.pods {
            if p.node.is_none() && p.deletion.is_none() {
                m(p.sched_at);
            }
            if let Container::Starting(x) = p.container {
                m(x);
            }
            if let Some(n) = p.node
                && !self.nodes[n].up
            {
                m(self.nodes[n].down_at + NOT_READY_AFTER);
                m(self.nodes[n].down_at + EVICTION);
            }
        }
        for &(x, _) in &self.node_back {
            m(x);
        }
        for &(x, _, _) in &self.fixes {
            m(x);
        }
        for &(x, _) in &self.relost {
            m(x);
        }
        for (x, _) in &self.in_flight {
            m(*x);
        }
        for x in [
            self.unpause_at,
            self.undrift_at,
            self.revalid_at,
            self.unreserve_at,
            self.unprotect_at,
            self.foreign_gone_at,
            self.converge_by,
        ]
        .into_iter()
        .flatten()
        {
            m(x);
        }
        if self.faults_left > 0 || self.delete_fleet_at_end {
            m(self.next_fault_at);
        }
        t.max(self.now + 1)
    }

    fn run(&mut self) -> Result<(), Violation> {
        for step in 0..MAX_STEPS {
            self.out.steps = step + 1;
            self.now = self.next_time();
            self.timed_events();
            if self.sts_sync_at.is_some_and(|t| t <= self.now) {
                self.sts_sync_at = None;
                self.sts_sync();
            }
            self.schedule();
            self.kubelets();
            self.land_late_writes()?;
            if self.heal_at.is_some_and(|t| t <= self.now) {
                self.heal_at = None;
                self.reconcile()?;
            }
            self.check_state()?;
            if self.fleet.gone {
                return self.check_deleted();
            }
            // The fault script.
            let calm = self.fixes.is_empty()
                && self.node_back.is_empty()
                && self.relost.is_empty()
                && self.revalid_at.is_none()
                && self.unreserve_at.is_none()
                && self.unpause_at.is_none()
                && self.undrift_at.is_none()
                && self.foreign_gone_at.is_none();
            if let Some(by) = self.converge_by {
                if calm && self.converged() {
                    self.out.slowest_convergence =
                        self.out.slowest_convergence.max(self.now - self.fault_end);
                    self.converge_by = None;
                    self.next_fault_at = self.now + self.rng.range(1, 30) * 60_000;
                } else if self.now > by {
                    return Err(Violation(format!(
                        "not back at {} ready members within {} min of the fault ending",
                        self.fleet.members,
                        CONVERGENCE_BOUND.millis() / 60_000
                    )));
                }
            }
            if self.converge_by.is_none() && self.now >= self.next_fault_at {
                if self.faults_left > 0 {
                    self.faults_left -= 1;
                    self.fault_end = self.now;
                    self.inject();
                    if self.safety_only {
                        // Two faults at once, or a fleet that may not act: safety only,
                        // no convergence promise.
                        if self.double {
                            self.inject();
                        }
                        self.next_fault_at = self.now + 3 * 3_600_000;
                        self.faults_left = 0;
                    } else {
                        self.converge_by = Some(self.fault_end + CONVERGENCE_BOUND.millis());
                    }
                } else if self.delete_fleet_at_end && !self.fleet.deleting {
                    self.log(|| "DELETE the fleet".into());
                    self.fleet.deleting = true;
                    // Without a finalizer the API server removes it at once.
                    self.fleet.gone = !self.fleet.finalizer;
                    // Half the deletions meet deletion protection, which an operator
                    // turns off after a while (deliberate deletion).
                    if self.rng.chance(50) {
                        self.fleet.protected = true;
                        self.unprotect_at = Some(self.now + self.rng.range(5, 60) * 60_000);
                    }
                    self.fleet.rv = self.rv();
                    self.kick();
                    self.next_fault_at = i64::MAX;
                } else if !self.fleet.deleting {
                    return Ok(());
                }
            }
        }
        if self.fleet.deleting && !self.conflicted {
            return Err(Violation("fleet deletion did not finish".into()));
        }
        if self.safety_only {
            return Ok(());
        }
        Err(Violation(format!("no end after {MAX_STEPS} steps")))
    }

    fn check_deleted(&self) -> Result<(), Violation> {
        if self.conflicted {
            // Released without deleting anything (every write was checked in `act`).
            return Ok(());
        }
        if self.sts.is_some() || !self.pods.is_empty() {
            return Err(Violation(
                "fleet released before its workload and Pods went".into(),
            ));
        }
        if let Some(c) = self.claims.iter().find(|c| !c.foreign) {
            return Err(Violation(format!(
                "fleet released with claim {} left",
                claim_name(FLEET, c.ord)
            )));
        }
        Ok(())
    }
}

/// Runs one seed. On failure, returns the violation and, re-running the same seed with
/// tracing, the step log.
pub fn run_seed(seed: u64) -> Result<Outcome, (Violation, Vec<String>)> {
    let mut sim = Sim::new(seed, false);
    match sim.run() {
        Ok(()) => Ok(sim.out),
        Err(v) => {
            let mut again = Sim::new(seed, true);
            let _ = again.run();
            Err((v, again.trace.unwrap_or_default()))
        }
    }
}

/// A protection of the runtime that a mutation check switches off in the simulation.
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub enum Mutation {
    /// The healer acts on its lagging caches, without the fresh-read confirmation.
    Unconfirmed,
    /// A deposed replica's late writes land whatever their uid and resourceVersion
    /// preconditions say.
    NoPreconditions,
    /// The confirmation before a write takes the bucket reservation from the (lagging)
    /// cache instead of reading it fresh.
    CachedReservation,
}

/// The mutation checks: runs one seed with `m` switched off. Returns the violation, if
/// any.
#[cfg(test)]
pub fn run_seed_mutated(seed: u64, m: Mutation) -> Option<Violation> {
    let mut sim = Sim::new(seed, false);
    match m {
        Mutation::Unconfirmed => sim.skip_confirmation = true,
        Mutation::NoPreconditions => sim.ignore_preconditions = true,
        Mutation::CachedReservation => sim.fresh_reservation = false,
    }
    sim.run().err()
}

#[allow(dead_code)]
fn span_mins(s: Span) -> i64 {
    s.millis() / 60_000
}
