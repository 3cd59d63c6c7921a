//! The safety invariants, checked on every healer write and after every step; each
//! failure is a [`Violation`] naming what the healer must never do.

use celld_api::labels::claim_name;

use super::Violation;
use super::world::*;
use crate::plan::{Action, ClaimDeletion};

impl Sim {
    pub(super) fn converged(&self) -> bool {
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

    /// Objects that are never this fleet's: no write may aim at one.
    pub(super) fn check_targets(&self, a: &Action) -> Result<(), Violation> {
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
    pub(super) fn check_allowed(&self, a: &Action) -> Result<(), Violation> {
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
        // a handoff's resolution (abort, or finishing a committed one), the finalizer
        // and an External fleet's first spec.members.
        let resolving = matches!(
            a,
            Action::AbortHandoff { .. }
                | Action::ReleaseHandoff { .. }
                | Action::AddFleetFinalizer { .. }
                // A first spec.members (rule K6) grows nothing by itself.
                | Action::InitializeMembers { .. }
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
        // F1 on true time: a Pod is force-deleted only once its deletionTimestamp (the
        // API server's, grace included) plus the margin has really passed, whatever the
        // healer's clock says.
        if let Action::ForceDeletePod { uid, .. } = a
            && let Some(p) = self.pods.iter().find(|p| p.uid.to_string() == *uid)
            && let Some(d) = p.deletion
            && self.now < d + self.cfg.force_delete_margin.millis()
        {
            return Err(Violation(format!(
                "member {} force-deleted {} s before its grace and margin ended",
                p.ord,
                (d + self.cfg.force_delete_margin.millis() - self.now) / 1000
            )));
        }
        // F2: a force delete only for a Pod its node cannot finish: unbound, or on a node
        // that is down (its kubelet stopped). A Pod stuck on an up node may still hold
        // its disk.
        // And only once the node has been unreachable (its Ready condition Unknown, which
        // the node controller sets NOT_READY_AFTER after the kubelet stopped) for the
        // whole margin, without a break.
        if let Action::ForceDeletePod { uid, .. } = a
            && let Some(p) = self.pods.iter().find(|p| p.uid.to_string() == *uid)
            && let Some(n) = p.node
            && (self.nodes[n].up
                || self.now
                    < self.nodes[n].down_at
                        + NOT_READY_AFTER
                        + self.cfg.force_delete_margin.millis())
        {
            return Err(Violation(format!(
                "member {} force-deleted while its node was {}",
                p.ord,
                if self.nodes[n].up {
                    "up (stuck terminating, not stranded)"
                } else {
                    "unreachable for less than the margin"
                }
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
    pub(super) fn down_since(&self, ord: u32) -> Option<i64> {
        match self.pod_idx(ord).map(|i| &self.pods[i]) {
            None => Some(i64::MIN),
            Some(p) if p.deletion.is_some() => Some(i64::MIN),
            Some(p) if !p.ready => Some(p.ready_cond.unwrap_or(p.created)),
            Some(_) => None,
        }
    }

    pub(super) fn check_fresh_disk_justified(&self, ord: u32) -> Result<(), Violation> {
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
            // R8: never while another of the fleet's claims is Lost too (nobody accepts
            // a loss in the model).
            let lost = self
                .claims
                .iter()
                .filter(|c| !c.foreign && c.phase == Phase::Lost && c.deletion.is_none())
                .count();
            if lost > 1 {
                return Err(Violation(format!(
                    "handoff of {} while {lost} claims are Lost at once",
                    claim_name(FLEET, ord)
                )));
            }
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
        // R9: never a member that is recovering its predecessor's log.
        if let Some(i) = self.pod_idx(ord)
            && matches!(self.pods[i].container, Container::Recovering(_))
            && self.pods[i].node.is_some_and(|n| self.nodes[n].up)
        {
            return Err(Violation(format!(
                "member {ord} replaced while recovering its predecessor's log"
            )));
        }
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

    pub(super) fn check_zone_safety(&self, ord: u32, what: &str) -> Result<(), Violation> {
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

    pub(super) fn check_replicas(&self, from: i32, to: i32) -> Result<(), Violation> {
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

    pub(super) fn check_claim_delete(
        &self,
        ci: usize,
        purpose: &ClaimDeletion,
    ) -> Result<(), Violation> {
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
                // H6: still justified when the last step lands. A lost disk is still
                // Lost; otherwise every other member is up.
                if c.phase != Phase::Lost {
                    let n = self.sts.as_ref().map_or(0, |s| s.replicas.max(0)) as u32;
                    if let Some(o) = (0..n).filter(|&o| o != c.ord).find(|&o| {
                        !self
                            .pod_idx(o)
                            .is_some_and(|k| self.pods[k].ready && self.pods[k].deletion.is_none())
                    }) {
                        return Err(Violation(format!(
                            "claim {} deleted while member {o} was down too",
                            claim_name(FLEET, c.ord)
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn check_state(&self) -> Result<(), Violation> {
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

    pub(super) fn check_deleted(&self) -> Result<(), Violation> {
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
