//! The healer's writes as the API server applies them: each action of a plan with its
//! uid and resourceVersion preconditions, conflicts and lost responses, and the healer
//! crashing between two writes.

use celld_api::labels::member_name;

use super::Violation;
use super::world::*;
use crate::plan::Action;

impl Sim {
    /// Executes one action like the runtime would. Returns false when a write failed or
    /// the healer crashed (the next reconcile starts from the cluster).
    pub(super) fn act(&mut self, a: &Action) -> Result<bool, Violation> {
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
                            // A new process remembers nothing it observed.
                            self.observed.clear();
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
            Action::InitializeMembers {
                resource_version,
                members,
                ..
            } => {
                if !holds(self, *resource_version == self.fleet.rv.to_string()) {
                    return conflict(self, "fleet rv");
                }
                fate!({
                    self.fleet.members = *members;
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
                if *replicas < *from && sts.retention_deletes {
                    return Err(Violation(format!(
                        "contraction from {from} to {replicas} while the claim retention policy deletes the removed members' disks"
                    )));
                }
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
                if std::mem::take(&mut self.down_on_commit) {
                    let ord = self.pods[i].ord;
                    if let Some(k) = self
                        .pods
                        .iter()
                        .position(|p| p.ord != ord && p.ready && p.deletion.is_none())
                    {
                        let back = self.now + self.rng.range(20_000, 120_000);
                        let down = self.pods[k].ord;
                        self.log(|| format!("member {down} went down after the commit"));
                        self.fail_pod(k, Container::Starting(back));
                        self.kick();
                        self.interrupted();
                    }
                }
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
                if sts.retention_deletes {
                    return Err(Violation(
                        "workload deleted while the claim retention policy deletes every disk with it"
                            .into(),
                    ));
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
    pub(super) fn preconditions_hold(&self, a: &Action) -> bool {
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
            | Action::InitializeMembers {
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
}
