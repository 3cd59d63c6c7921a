//! The healer: observe -> decide (pure) -> act.
//!
//! - [`observe`] turns the Kubernetes objects of one fleet into a [`Snapshot`], refusing
//!   any object it cannot read in full;
//! - [`decide()`] is a pure function from a snapshot, the time and the [`Config`] to a
//!   [`Plan`]: at most one [`Action`], the full status, the next wake-up;
//! - [`runtime`] executes the action with the preconditions it carries, writes the
//!   status `decide` built, and sleeps until the next watch event or `wake_at`.
//!
//! The `sim` module (tests, or the `sim` feature) is a seeded model cluster that drives
//! `decide` through faults and checks safety invariants after every step.

pub mod application;
pub mod capacity;
pub mod clock;
pub mod config;
pub mod confirm;
pub mod decide;
pub mod lean_json;
pub mod observe;
pub mod plan;
pub mod record;
pub mod rule;
pub mod runtime;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod snapshot;
pub mod testkit;
pub mod time;
pub mod validity;
pub mod zone;

pub use config::Config;
pub use decide::decide;
pub use plan::{Action, Plan};
pub use snapshot::Snapshot;
pub use time::{Span, Timestamp};
