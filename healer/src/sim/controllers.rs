//! The model's controllers: the StatefulSet controller (Parallel Pod management, claims
//! from the template, rolling updates), the scheduler (anti-affinity, zone spread,
//! zone-pinned disks) and the kubelets (readiness, termination, eviction from lost nodes,
//! PVC protection), plus the timed events they wait on.

use celld_api::labels::member_name;

use super::world::Fault;
use super::world::*;

impl Sim {
    pub(super) fn sts_sync(&mut self) {
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

    pub(super) fn delete_pod(&mut self, i: usize, grace: i64) {
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

    pub(super) fn sts_status(&self) -> (i32, i32, i32, bool) {
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

    pub(super) fn schedule(&mut self) {
        let mut order: Vec<usize> = (0..self.pods.len())
            .filter(|&i| {
                let p = &self.pods[i];
                p.node.is_none() && p.deletion.is_none() && p.sched_at <= self.now
            })
            .collect();
        // Random order: the #79 race needs a fresh-disk Pod to win sometimes.
        self.rng.shuffle(&mut order);
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

    pub(super) fn kubelets(&mut self) {
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
            if let Container::Starting(t) | Container::Recovering(t) = p.container
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

    pub(super) fn timed_events(&mut self) {
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
                            Container::Ready | Container::Starting(_) | Container::Recovering(_)
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
                if f == Fault::StuckTerminating {
                    for p in self.pods.iter_mut().filter(|p| p.ord == ord) {
                        p.stuck = false;
                    }
                }
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
        while i < self.flaps.len() {
            if self.flaps[i].0 <= now {
                let (_, cuid) = self.flaps.remove(i);
                self.lose_claim_again(cuid);
            } else {
                i += 1;
            }
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
                    // Flapping storage: some claims are lost again shortly after.
                    if self.rng.chance(30) {
                        let t = now + self.rng.range(5_000, 60_000);
                        self.flaps.push((t, cuid));
                    }
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
        if self.unretain_at.is_some_and(|t| t <= now) {
            self.unretain_at = None;
            let rv = self.rv();
            if let Some(sts) = self.sts.as_mut() {
                sts.retention_deletes = false;
                sts.generation += 1;
                sts.rv = rv;
            }
            self.log(|| "claim retention policy restored".into());
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
}
