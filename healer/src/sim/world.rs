//! The model's world: its objects (nodes, Pods, claims, the StatefulSet, the fleet), its
//! random source and the starting state of a seed. The main loop (`run.rs`) steps the
//! controllers (`controllers.rs`), the faults (`faults.rs`) and the healer (`healer.rs`,
//! `writes.rs`) and checks the invariants (`invariants.rs`) after every step.

use std::collections::VecDeque;

use celld_api::CelldFleetStatus;

use crate::config::Config;
use crate::plan::{Action, HandoffRecord};
use crate::snapshot::{self as s, CondStatus};
use crate::time::Timestamp;

pub(super) const FLEET: &str = "alpha";
pub(super) const ID: &str = "7kq2m9x4c1v8b3n6z5h0j2w4r8";
pub(super) const ZONES: usize = 3;
pub(super) const NODES_PER_ZONE: usize = 3;
pub(super) const GRACE: i64 = 30_000;
pub(super) const EVICTION: i64 = 300_000;
pub(super) const NOT_READY_AFTER: i64 = 40_000;
pub(super) const MAX_STEPS: usize = 4_000;
pub(super) const START: i64 = 1_795_910_400_000;

/// SplitMix64: tiny, fast and stable across dependency upgrades, so a seed replays the
/// same run for ever.
#[derive(Clone)]
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(super) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// Puts `v` in a random order (Fisher-Yates).
    pub(super) fn shuffle<T>(&mut self, v: &mut [T]) {
        for k in (1..v.len()).rev() {
            let j = self.below(k as u64 + 1) as usize;
            v.swap(k, j);
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Node {
    pub(super) zone: usize,
    pub(super) up: bool,
    pub(super) down_at: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Container {
    /// Starts serving at the time (on an up node, with a usable disk).
    Starting(i64),
    /// Running and recovering its predecessor's log until the time, then serving: it
    /// answers "predecessor recovery in progress" meanwhile (rule R9).
    Recovering(i64),
    Ready,
    CrashLoop,
    ImagePull,
    /// Cannot start: its disk is lost or cannot attach.
    NoDisk,
    /// Not scheduled yet.
    Unplaced,
}

#[derive(Clone, Debug)]
pub(super) struct Pod {
    pub(super) ord: u32,
    pub(super) uid: u64,
    pub(super) rv: u64,
    pub(super) created: i64,
    pub(super) deletion: Option<i64>,
    pub(super) node: Option<usize>,
    pub(super) unsched_since: Option<i64>,
    pub(super) sched_at: i64,
    pub(super) ready: bool,
    pub(super) ready_cond: Option<i64>,
    pub(super) container: Container,
    pub(super) last_exit: Option<i64>,
    pub(super) rev: u64,
    pub(super) stuck: bool,
    pub(super) terminated: bool,
    pub(super) fin: bool,
    pub(super) index: bool,
    pub(super) record: Option<HandoffRecord>,
    pub(super) claim_uid: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Pending,
    Bound,
    Lost,
}

#[derive(Clone, Debug)]
pub(super) struct Claim {
    pub(super) ord: u32,
    pub(super) uid: u64,
    pub(super) rv: u64,
    pub(super) created: i64,
    pub(super) deletion: Option<i64>,
    pub(super) phase: Phase,
    pub(super) zone: Option<usize>,
    pub(super) foreign: bool,
    pub(super) stuck: bool,
    /// When it became Lost (the healer's first observation, in this model).
    pub(super) lost_at: Option<i64>,
}

#[derive(Clone, Debug)]
pub(super) struct Sts {
    pub(super) uid: u64,
    pub(super) rv: u64,
    pub(super) generation: i64,
    pub(super) observed: i64,
    pub(super) replicas: i32,
    pub(super) update_rev: u64,
    pub(super) deleting: bool,
    /// spec.persistentVolumeClaimRetentionPolicy deletes claims (a hand edit): scaling
    /// down or deleting the set would delete disks (rule W5).
    pub(super) retention_deletes: bool,
}

#[derive(Clone, Debug)]
pub(super) struct FleetObj {
    pub(super) rv: u64,
    pub(super) generation: i64,
    pub(super) members: i32,
    pub(super) paused: bool,
    pub(super) deleting: bool,
    pub(super) finalizer: bool,
    pub(super) drift: bool,
    pub(super) status: Option<CelldFleetStatus>,
    pub(super) gone: bool,
    /// spec.deletionProtection.
    pub(super) protected: bool,
    /// The live spec is invalid (an edit the API server let through).
    pub(super) invalid: bool,
    /// Its bucket reservation names another identity (another object: the fleet's own
    /// resourceVersion does not change with it).
    pub(super) reserved_elsewhere: bool,
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
    /// Force deletes sent with the first on its fresh read (`confirm::batch`).
    pub ridden: usize,
}

pub(super) struct Sim {
    pub(super) rng: Rng,
    pub(super) now: i64,
    pub(super) nodes: Vec<Node>,
    pub(super) pods: Vec<Pod>,
    pub(super) claims: Vec<Claim>,
    pub(super) sts: Option<Sts>,
    pub(super) fleet: FleetObj,
    pub(super) next_uid: u64,
    pub(super) next_rv: u64,
    pub(super) cfg: Config,
    /// Healer: when it runs next (watch event or wake-up).
    pub(super) heal_at: Option<i64>,
    pub(super) sts_sync_at: Option<i64>,
    /// Claim uids whose deletion an acknowledged, justified guarded Pod delete authorized.
    pub(super) justified: Vec<u64>,
    /// Fault script.
    pub(super) next_fault_at: i64,
    pub(super) faults_left: u32,
    pub(super) double: bool,
    pub(super) converge_by: Option<i64>,
    pub(super) fault_end: i64,
    pub(super) fixes: Vec<(i64, u32, Fault)>,
    pub(super) node_back: Vec<(i64, usize)>,
    pub(super) unpause_at: Option<i64>,
    pub(super) undrift_at: Option<i64>,
    /// When a hand-edited claim retention policy is restored to Retain.
    pub(super) unretain_at: Option<i64>,
    pub(super) foreign_gone_at: Option<i64>,
    pub(super) delete_fleet_at_end: bool,
    pub(super) trace: Option<Vec<String>>,
    pub(super) out: Outcome,
    /// The healer's caches lag and disagree: each reconcile decides on Pods, claims and
    /// the workload taken from different recent moments, and confirms destructive
    /// writes on the fresh state (`crate::confirm`).
    pub(super) laggy: bool,
    /// Recent states the lagging caches are drawn from.
    pub(super) views: VecDeque<s::Snapshot>,
    /// Test only: skip the fresh-read confirmation (the mutation check).
    pub(super) skip_confirmation: bool,
    /// What the healer observed of readiness and Lost claims on its own clock (the
    /// runtime's `crate::clock::Observations`): started over when it restarts or leads
    /// again after a gap.
    pub(super) observed: crate::clock::Observations,
    /// The API server's clock as the healer measured it.
    pub(super) server_clock: crate::clock::ServerClock,
    /// The healer's wall clock minus the true time (ms).
    pub(super) healer_skew: i64,
    /// Each node's clock minus the true time (ms): the kubelet writes its timestamps
    /// with it.
    pub(super) node_skew: Vec<i64>,
    /// No healer acts until then: the lease changed hands and the replica that leads
    /// next starts from nothing (a restart, or a standby taking over).
    pub(super) away_until: i64,
    /// Lost claims that come back Bound and are lost again: (when, claim uid).
    pub(super) flaps: Vec<(i64, u64)>,
    /// Objects of another fleet with the same identity, and claims at huge ordinals:
    /// the healer must never write to any of them.
    pub(super) decoys: Vec<Decoy>,
    /// An older fleet carries this fleet's identity: it must get no action but aborts
    /// and its release.
    pub(super) conflicted: bool,
    /// Lost claims that come back Bound: (when, claim uid).
    pub(super) relost: Vec<(i64, u64)>,
    /// When an invalid spec is fixed.
    pub(super) revalid_at: Option<i64>,
    /// When the reservation naming another identity is removed.
    pub(super) unreserve_at: Option<i64>,
    /// The reservation names another identity right after the next handoff commits.
    pub(super) reserved_on_commit: bool,
    /// The spec turns invalid right after the next handoff commits.
    pub(super) invalid_on_commit: bool,
    /// An older fleet with the same identity shows up right after the next commit.
    pub(super) conflict_on_commit: bool,
    /// Another member goes down right after the next handoff commits (rule H6).
    pub(super) down_on_commit: bool,
    /// When deletion protection is turned off (deliberate deletion after a refusal).
    pub(super) unprotect_at: Option<i64>,
    /// No convergence promise (two faults at once, or a conflicted fleet).
    pub(super) safety_only: bool,
    /// A second healer replica that lost the lease while a write was on the wire: some
    /// of the leader's confirmed writes are sent again by it, and land later (after the
    /// new leader has moved on) carrying the preconditions of their decision.
    pub(super) deposed: bool,
    /// The deposed replica's writes still on the wire: (when it lands, the write).
    pub(super) in_flight: Vec<(i64, Action)>,
    /// A late write is being applied (one request: no retry, no crash, no later step).
    pub(super) replaying: bool,
    /// Test only: late writes land whatever their preconditions (the mutation check).
    pub(super) ignore_preconditions: bool,
    /// The fresh read re-reads the bucket reservation too (false: the mutation check).
    pub(super) fresh_reservation: bool,
    /// A mutation check's fault, drawn half the time (`None`: the usual mix).
    pub(super) focus: Option<Fault>,
    /// Test only: a confirmation may take the answer of a shared fresh read sent before
    /// it asked (for another fleet of the namespace, still under way), which the
    /// runtime's `fresh::SharedReads` never does (the mutation check).
    pub(super) join_reads_under_way: bool,
    /// The states recent reconciles read, as such reads under way: (when, the state).
    pub(super) reads_under_way: VecDeque<(i64, s::Snapshot)>,
}

/// An object of another fleet that shares the identity, or a claim at a huge ordinal.
#[derive(Clone, Debug)]
pub(super) enum Decoy {
    Pod(Box<s::Pod>),
    Claim(s::Claim),
}

impl Decoy {
    pub(super) fn uid(&self) -> &str {
        match self {
            Decoy::Pod(p) => &p.uid,
            Decoy::Claim(c) => &c.uid,
        }
    }
}

pub(super) fn ts(ms: i64) -> Timestamp {
    Timestamp(ms)
}

/// Another fleet `alpha-1` copied from this one (same identity) with a handoff in
/// progress on one of its Pods, and claims of ours at ordinals no member can have.
pub(super) fn decoys() -> Vec<Decoy> {
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
            node: s::NodeState::Unreachable {
                since: Some(ts(START - 3_600_000)),
                transition: None,
            },
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
                    cause: None,
                })
            }),
            force_deleted: false,
            other_finalizers: Vec::new(),
            force_delete_retry_at: None,
            seen_since: None,
            recovering_seen: None,
        })));
        out.push(Decoy::Claim(s::Claim {
            name: format!("data-{FLEET}-1-{o}"),
            uid: format!("decoy-claim-{o}"),
            resource_version: "1".into(),
            identity: Some(ID.into()),
            owner: None,
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
            owner: None,
            created: ts(START - 3_600_000),
            deletion: None,
            phase: s::ClaimPhase::Bound,
            lost_since: None,
        }));
    }
    out
}

impl Sim {
    pub(super) fn new(seed: u64, trace: bool) -> Sim {
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
            unretain_at: None,
            foreign_gone_at: None,
            delete_fleet_at_end: false,
            trace: trace.then(Vec::new),
            out: Outcome::default(),
            laggy: false,
            views: VecDeque::new(),
            skip_confirmation: false,
            observed: crate::clock::Observations::default(),
            server_clock: crate::clock::ServerClock::default(),
            healer_skew: 0,
            node_skew: Vec::new(),
            away_until: 0,
            flaps: Vec::new(),
            decoys: Vec::new(),
            conflicted: false,
            relost: Vec::new(),
            revalid_at: None,
            unreserve_at: None,
            reserved_on_commit: false,
            invalid_on_commit: false,
            conflict_on_commit: false,
            down_on_commit: false,
            unprotect_at: None,
            safety_only: false,
            deposed: false,
            in_flight: Vec::new(),
            replaying: false,
            ignore_preconditions: false,
            fresh_reservation: true,
            focus: None,
            join_reads_under_way: false,
            reads_under_way: VecDeque::new(),
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
        // Clocks. Most healers run on time or within the bound of rule T1 (30 s); one
        // in ten is 15 minutes off, so T1 holds every destructive write (safety only).
        // Half the fleets have nodes whose clocks are up to 15 minutes off either way.
        sim.healer_skew = match sim.rng.below(10) {
            0..=5 => 0,
            6..=8 => sim.rng.range(-25_000, 25_000),
            _ => {
                sim.safety_only = true;
                if sim.rng.chance(50) {
                    900_000
                } else {
                    -900_000
                }
            }
        };
        let skewed_nodes = sim.rng.chance(50);
        sim.node_skew = (0..sim.nodes.len())
            .map(|_| {
                if skewed_nodes {
                    sim.rng.range(-900_000, 900_000)
                } else {
                    0
                }
            })
            .collect();
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
            retention_deletes: false,
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

    pub(super) fn uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    pub(super) fn rv(&mut self) -> u64 {
        self.next_rv += 1;
        self.next_rv
    }

    pub(super) fn log(&mut self, f: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            let m = (self.now - START) / 1000;
            t.push(format!("[{:>5}:{:02}] {}", m / 60, m % 60, f()));
        }
    }

    pub(super) fn kick(&mut self) {
        let t = self.now + 50;
        self.heal_at = Some(self.heal_at.map_or(t, |h| h.min(t)));
        let d = self.now + self.rng.range(100, 3_000);
        self.sts_sync_at = Some(self.sts_sync_at.map_or(d, |x| x.min(d)));
    }

    pub(super) fn pod_idx(&self, ord: u32) -> Option<usize> {
        self.pods.iter().position(|p| p.ord == ord)
    }

    pub(super) fn claim_idx(&self, ord: u32) -> Option<usize> {
        self.claims.iter().position(|c| c.ord == ord)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// One fault of the script, injected at a random time and healed (or not) later.
pub(super) enum Fault {
    NodeLost {
        back: bool,
    },
    /// Every node of one zone at once, back later: its members are stranded together,
    /// all due for force-deletion at the same moment (the burst a lost zone makes).
    ZoneLost,
    VolumeLost,
    VolumeStuck,
    CrashLoop,
    ImagePull,
    StuckTerminating,
    Scale,
    Rollout,
    Pause,
    Drift,
    /// The StatefulSet's claim retention policy edited by hand to Delete for a while.
    RetentionDrift,
    HandDeletedClaim,
    /// A claim reported Lost for a while, then Bound again (a restore bringing claims
    /// back before their volumes).
    TransientLost,
    /// The live spec turns invalid for a while.
    Invalid,
    /// The fleet's bucket reservation names another identity for a while (rule V3).
    ReservedElsewhere,
    /// A member restarts and recovers its predecessor's log for longer than the
    /// replacement delay (rule R9).
    Recovery,
}
