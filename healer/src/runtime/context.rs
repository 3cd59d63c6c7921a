//! What every reconcile shares ([`Reconciler`]), how a reconcile fails
//! ([`ReconcileError`]), and the wall clock the runtime reads ([`now`]).
//!
//! A room of its own so that the rooms a reconcile calls (the gathering, the capacity
//! evaluation, the status writer, the fresh read) take the context from here rather
//! than from the step that calls them: `reconcile` imports them, never the reverse.

use std::sync::Arc;

use celld_api::healer_flags::Shard;
use kube::Client;

use super::act::ActError;
use super::cli::HaltPoint;
use super::clocks::Clocks;
use super::events::Events;
use super::leader::Gate;
use super::members::Observing;
use super::memory::Memory;
use super::metrics::Metrics;
use super::served::Served;
use super::watches::{Stores, WatchHealth};
use super::zones::Zones;
use crate::config::Config;
use crate::time::Timestamp;

/// What every reconcile shares: the client, the caches and their health, the delays, the
/// leader gate, and what the runtime remembers between reconciles.
pub(super) struct Reconciler {
    pub(super) client: Client,
    /// The namespaces whose fleets are reconciled (others are only read, for V2).
    pub(super) served: Served,
    /// The share of those fleets this healer acts on (`--shard`).
    pub(super) shard: Shard,
    pub(super) stores: Stores,
    pub(super) watches: Arc<WatchHealth>,
    /// Node and volume zones, for member status only.
    pub(super) zones: Arc<Zones>,
    pub(super) config: Config,
    pub(super) gate: Gate,
    pub(super) metrics: Arc<Metrics>,
    pub(super) events: Events,
    pub(super) halt_after: Option<HaltPoint>,
    /// How the members' application is observed (`None`: off,
    /// `--application-interval 0s`).
    pub(super) observing: Option<Observing>,
    /// Per fleet, Pod and claim, between reconciles.
    pub(super) memory: Arc<Memory>,
    /// The monotonic clock and the API server's.
    pub(super) clocks: Arc<Clocks>,
    /// The fleets reconciled at once (`controller::CONCURRENCY`): a fair semaphore, so a
    /// due fleet waits in line, first come first served, however busy the others are.
    pub(super) slots: tokio::sync::Semaphore,
    /// The fresh reads, shared by the fleets of a namespace that ask together.
    pub(super) fresh: Arc<super::fresh::SharedReads>,
}

/// Why a reconcile failed (it is retried with back-off).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The action's write failed.
    #[error("{action} failed: {source}")]
    Act {
        /// Action kind.
        action: &'static str,
        /// Cause.
        source: ActError,
    },
    /// The status patch failed.
    #[error("status patch failed: {0}")]
    Status(#[source] kube::Error),
    /// The fresh read that must precede a destructive write failed (nothing written).
    #[error("fresh read before a destructive write failed: {0}")]
    FreshRead(#[source] Arc<kube::Error>),
    /// The capacity history could not be encoded within its bounds (nothing written).
    #[error("capacity history: {0}")]
    History(#[source] crate::capacity::HistoryError),
    /// The capacity history patch on the reservation failed (a conflict included: the
    /// evaluation is repeated on the newer reservation; nothing acted on meanwhile).
    #[error("capacity history patch failed: {0}")]
    HistoryWrite(#[source] kube::Error),
}

pub(super) fn now() -> Timestamp {
    super::clocks::wall()
}
