//! Fault injection: what goes wrong in the model cluster (nodes, volumes, containers,
//! API writes, the healer process) and how each fault heals.

use super::PER_INTERRUPTION;
use super::world::*;

impl Sim {
    pub(super) fn inject(&mut self) {
        self.out.faults += 1;
        let kinds = [
            Fault::NodeLost { back: true },
            Fault::NodeLost { back: false },
            Fault::ZoneLost,
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
            Fault::RetentionDrift,
            Fault::HandDeletedClaim,
            Fault::TransientLost,
            Fault::Invalid,
            Fault::ReservedElsewhere,
            Fault::Recovery,
        ];
        let f = kinds[self.rng.below(kinds.len() as u64) as usize];
        // A mutation check about one rare race draws its fault half the time.
        let f = match self.focus {
            Some(focus) if self.rng.chance(50) => focus,
            _ => f,
        };
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
            Fault::ZoneLost => {
                let Some(node) = self.pod_idx(ord).and_then(|i| self.pods[i].node) else {
                    return;
                };
                let zone = self.nodes[node].zone;
                let t = self.now + self.rng.range(60, 1_500) * 1000;
                for n in 0..self.nodes.len() {
                    if self.nodes[n].zone == zone && self.nodes[n].up {
                        self.nodes[n].up = false;
                        self.nodes[n].down_at = self.now;
                        self.node_back.push((t, n));
                    }
                }
                end = t;
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
                // On an up node the kubelet finishes it in the end (a hung container
                // killed at last, or a person on the node); the healer must not.
                let t = self.now + self.rng.range(60, 1_800) * 1000;
                self.fixes.push((t, ord, f));
                end = t;
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
            Fault::RetentionDrift => {
                let rv = self.rv();
                let Some(sts) = self.sts.as_mut().filter(|s| !s.deleting) else {
                    return;
                };
                sts.retention_deletes = true;
                sts.generation += 1;
                sts.rv = rv;
                let t = self.now + self.rng.range(60, 1_200) * 1000;
                self.unretain_at = Some(t);
                end = t;
                // Often with a contraction from Git at the same time, the change the
                // edited policy would turn into a deleted disk.
                if self.fleet.members > 3 && self.rng.below(2) == 0 {
                    self.fleet.members -= 1;
                    self.fleet.generation += 1;
                    self.fleet.rv = self.rv();
                }
                self.kick();
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
            Fault::Invalid if self.rng.chance(15) => {
                // Armed: another member goes down right after the next handoff commits,
                // so its last step meets rule H6 (abort, keep the disk).
                self.down_on_commit = true;
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
            Fault::Recovery => {
                let Some(i) = self.pod_idx(ord) else { return };
                let p = &self.pods[i];
                if !p.ready || p.deletion.is_some() || p.node.is_none_or(|n| !self.nodes[n].up) {
                    return;
                }
                // One to four replacement delays: celld retries a recovery for up to an
                // hour before it gives up and exits.
                let delay = self.cfg.replacement_delay.millis();
                let t = self.now + self.rng.range(delay / 1000, 4 * delay / 1000) * 1000;
                self.fail_pod(i, Container::Recovering(t));
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
    pub(super) fn recover_between_steps(&mut self, i: usize) {
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

    /// A claim that came back Bound is Lost again (flapping storage), and comes back
    /// again later.
    pub(super) fn lose_claim_again(&mut self, cuid: u64) {
        let Some(ci) = self
            .claims
            .iter()
            .position(|c| c.uid == cuid && c.phase == Phase::Bound && c.deletion.is_none())
        else {
            return;
        };
        let rv = self.rv();
        self.claims[ci].phase = Phase::Lost;
        self.claims[ci].lost_at = Some(self.now);
        self.claims[ci].rv = rv;
        self.log(|| "the claim is Lost again".into());
        let t = self.now + self.rng.range(10, 150) * 1000;
        self.relost.push((t, cuid));
        if let Some(i) = self.pods.iter().position(|p| p.claim_uid == cuid) {
            self.fail_pod(i, Container::NoDisk);
        }
        self.kick();
    }

    pub(super) fn fail_pod(&mut self, i: usize, c: Container) {
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

    /// An interrupted write may cost a handoff attempt, whose member then waits a new
    /// replacement delay: the convergence bound grows by [`PER_INTERRUPTION`].
    pub(super) fn interrupted(&mut self) {
        if let Some(by) = &mut self.converge_by {
            *by += PER_INTERRUPTION.millis();
        }
    }

    /// An API write's fate: Ok(()) applied and acknowledged; Err(true) applied but the
    /// response was lost; Err(false) refused (conflict) and not applied.
    pub(super) fn api_fault(&mut self) -> Result<(), bool> {
        match self.rng.below(100) {
            0..=3 => Err(false),
            4..=7 => Err(true),
            _ => Ok(()),
        }
    }
}
