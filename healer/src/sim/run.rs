//! The main loop: the clock jumps to the next event, then the controllers, the faults
//! and the healer take their turn, and the invariants are checked; plus the entry points
//! that run one seed (and the mutation checks that switch one protection off).

use super::world::*;
use super::{CONVERGENCE_BOUND, Violation};

impl Sim {
    pub(super) fn next_time(&self) -> i64 {
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
            if let Container::Starting(x) | Container::Recovering(x) = p.container {
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
        for &(x, _) in self.relost.iter().chain(&self.flaps) {
            m(x);
        }
        m(self.away_until);
        for (x, _) in &self.in_flight {
            m(*x);
        }
        for x in [
            self.unpause_at,
            self.undrift_at,
            self.unretain_at,
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

    pub(super) fn run(&mut self) -> Result<(), Violation> {
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
                && self.flaps.is_empty()
                && self.revalid_at.is_none()
                && self.unreserve_at.is_none()
                && self.unpause_at.is_none()
                && self.undrift_at.is_none()
                && self.unretain_at.is_none()
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
        // A healer whose clock is beyond the bound deletes nothing (rule T1): its
        // fleet's deletion waits for a clock that never comes back in the model.
        if self.fleet.deleting && !self.conflicted && self.healer_skew.abs() <= 30_000 {
            return Err(Violation("fleet deletion did not finish".into()));
        }
        if self.safety_only {
            return Ok(());
        }
        Err(Violation(format!("no end after {MAX_STEPS} steps")))
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
    /// A confirmation takes the answer of a shared fresh read sent before it asked.
    JoinReadUnderWay,
}

/// The mutation checks: runs one seed with `m` switched off. Returns the violation, if
/// any.
#[cfg(test)]
pub fn run_seed_mutated(seed: u64, m: Mutation) -> Option<Violation> {
    let mut sim = Sim::new(seed, false);
    match m {
        Mutation::Unconfirmed => sim.skip_confirmation = true,
        Mutation::NoPreconditions => sim.ignore_preconditions = true,
        Mutation::JoinReadUnderWay => sim.join_reads_under_way = true,
        Mutation::CachedReservation => {
            sim.fresh_reservation = false;
            sim.focus = Some(super::world::Fault::ReservedElsewhere);
        }
    }
    sim.run().err()
}
