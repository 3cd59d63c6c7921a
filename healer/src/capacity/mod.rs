//! The capacity evaluator: from a policy, the remembered history, one observation of the
//! members and the applied member count to a decision, and the next history. Pure, like
//! [`crate::decide()`]: the runtime's collector produces the [`Observation`], the history
//! is read from and written to one annotation on the bucket reservation, and the
//! [`Decision`] becomes the [`crate::snapshot::CapacitySignal`] that rules K1-K5 apply.
//!
//! - [`policy`]: validity and the fingerprint of the effective policy.
//! - [`observation`]: what the collector hands over, one sample per member.
//! - [`history`]: what survives between reconciles, and its bounded annotation form.
//! - [`reasons`]: the reason vocabulary of `status.capacity`.
//! - [`evaluate`](mod@evaluate): windows, stabilization, cooldowns, manual edits (rules E1-E14).
//! - [`redistribution`]: whether an addition relieved the incumbents (rules R1-R4).
//! - [`evidence`]: whether survivors can absorb a removed member (rules S1-S3).
//! - [`wire`]: strict parsing of `/state` and PodMetrics (rules W1-W5).

pub mod evaluate;
pub mod evidence;
pub mod history;
pub mod observation;
pub mod policy;
pub mod reasons;
pub mod redistribution;
pub mod wire;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_messages;

pub use evaluate::{Applied, Decision, Window, evaluate, record_action};
pub use history::{History, HistoryError};
pub use observation::{MetricsSample, Observation, Problem, RuntimeSample, Sample, Source};
pub use reasons::Reason;
