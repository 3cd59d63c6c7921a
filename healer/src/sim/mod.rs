//! A deterministic, seeded model of a cluster that drives `decide` through faults and
//! checks safety invariants after every step.
//!
//! The model is deliberately small (it must run 10,000 seeds within a debug-build
//! `cargo test` in well under a minute) but keeps the semantics the rules depend on:
//!
//! - zones and nodes (3 zones × 3 nodes); nodes are lost and come back;
//! - a StatefulSet controller: Parallel Pod management, claims from the template
//!   (Retain on scale-in and deletion), missing Pods recreated, rolling update one Pod at
//!   a time from the highest ordinal once every member is ready, no Pod created while its
//!   claim is terminating, `observedGeneration` catching up after a delay;
//! - a scheduler honouring strict anti-affinity (one member per node), the zone spread
//!   (max skew 1, counting only Pods on nodes) and zone-pinned disks provisioned
//!   WaitForFirstConsumer; Pods it cannot place are marked Unschedulable and retried;
//! - kubelets with random readiness delays, graceful termination, and nodes whose
//!   kubelet never confirms; the node lifecycle controller evicting Pods from lost nodes;
//!   PVC protection (a claim goes once no Pod uses it);
//! - faults: node lost (and back, or not), volume lost, volume that cannot attach,
//!   container crash loop, image pull error, Pod stuck Terminating, and two at once;
//! - API writes that fail with a conflict or succeed and lose their response, real
//!   uid/resourceVersion preconditions, and a healer that crashes between any two writes
//!   and restarts from the cluster alone (it keeps nothing between reconciles anyway).
//!
//! Invariants ([`Violation`]) are checked on every healer write and after every step;
//! see `check_*`. With one fault at a time the fleet must be back at its target, all
//! ready, within [`CONVERGENCE_BOUND`] of the fault ending (a lost node counts as ending
//! at once, a crash loop or image error when it is fixed, a lost node that returns when
//! it returns).

mod controllers;
mod faults;
mod healer;
mod invariants;
mod run;
#[cfg(test)]
mod tests;
mod world;
mod writes;

pub use run::run_seed;
#[cfg(test)]
pub use run::{Mutation, run_seed_mutated};
pub use world::Outcome;

use crate::time::Span;

/// With one fault at a time, the fleet is back at its target with every member ready
/// within this long after the fault ends. Worst case: eviction from a lost node (5 min),
/// grace (30 s) and the force-delete margin (2 min), the replacement delay (10 min) for a
/// member that cannot come back, readiness (≤ 1 min), plus the absorb window (5 min) when
/// the fault follows a recovery: about 24 min; the bound leaves room for retries after
/// API faults and healer crashes.
pub const CONVERGENCE_BOUND: Span = Span::mins(40);

/// Each API write that fails (conflict, lost response) or healer crash while the fleet
/// converges extends the bound by this much: an interrupted handoff is abandoned, keeping
/// the disk, and its member waits a new replacement delay (10 min) before the next try.
pub const PER_INTERRUPTION: Span = Span::mins(12);

/// An invariant that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);
