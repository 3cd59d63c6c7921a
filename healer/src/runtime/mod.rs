//! The healer's runtime: the I/O around the pure [`crate::decide()`].
//!
//! ```text
//! watches.rs              gather.rs           reconcile.rs          execute.rs       status_writer.rs
//! CelldFleet, workloads,  one fleet's    ──▶  observe -> decide ──▶ the writes   ──▶ the status decide
//! ReplicaSets, Pods, ──▶  objects from        -> confirmation.rs    (act.rs: each    built, Events on a
//! claims, Services,       the caches          (a fresh read)        with its         Blocked change
//! reservations                                                      preconditions)
//! ```
//!
//! - [`controller`]: opens the watches and runs one reconcile per fleet when a watched
//!   object of the fleet changes, and at the wake-up time `decide` returned; there is no
//!   polling loop.
//! - [`context`]: what every reconcile shares ([`context::Reconciler`]) and how one
//!   fails; the rooms below take it from there, so none of them imports the step.
//! - [`watches`]: the watches, their caches and health, and which fleet an object
//!   concerns; [`trim`]: what the caches keep of each object; [`zones`]: the node and
//!   volume zones shown in member status (never gating); [`gather`]: one fleet's objects
//!   and its [`crate::Snapshot`]; [`index`]: each cache indexed by the fleet its objects
//!   may belong to, so gathering one fleet does not scan its namespace.
//! - [`reconcile`]: the step, a short driver over the rooms that follow;
//!   [`confirmation`]: a destructive write decided again on a fresh read ([`fresh`]);
//!   [`execute`]: the writes of one pass, with their metrics, logs and Events;
//!   [`schedule`]: when a fleet is looked at again (the queue's debounce, `decide`'s
//!   wake-up, the back-offs); [`status_writer`]: the status patch; [`memory`]: what is
//!   remembered between reconciles (one record per fleet), and forgotten when objects
//!   go.
//! - [`act`]: executes one [`crate::Action`] exactly as its documentation says, with uid
//!   and resourceVersion preconditions.
//! - [`leader`]: the coordination Lease; only the leader writes anything. [`claims`]:
//!   one install per namespace, each namespace's claim Lease; [`claim_table`]: the
//!   claims held, which the leader gate reads before every write.
//! - [`access`]: with `--watch-namespace`, the finalizer that keeps the healer's
//!   RoleBinding in a served namespace while a fleet lives there (a namespace deletion
//!   would take the healer's rights before its fleets' disks).
//! - [`clocks`]: the monotonic clock and the API server's, measured from every
//!   response (`crate::clock` says which delay is timed on which).
//! - [`infra`]: checks the live Services against the generator's rendering.
//! - [`members`]: asks each member for its application view (`status.application`).
//! - [`collector`]: samples members and their metrics for the capacity evaluator.
//! - [`events`], [`metrics`], [`http`]: Kubernetes Events, Prometheus metrics, and the
//!   `/metrics`, `/healthz`, `/readyz` endpoints.
//! - [`rbac`]: every verb on every resource the healer uses (re-exported from the table
//!   `celld-gen install` renders).
//! - [`cli`]: command-line flags, declared from [`celld_api::healer_flags`].

pub mod access;
pub mod act;
pub mod capacity;
pub mod claim_table;
pub mod claims;
pub mod cli;
pub mod clocks;
pub mod collector;
pub mod confirmation;
pub mod context;
pub mod controller;
pub mod events;
pub mod execute;
pub mod fresh;
pub mod gather;
pub mod http;
pub mod index;
pub mod infra;
pub mod leader;
pub mod members;
pub mod memory;
pub mod metrics;
pub mod metrics_auth;
pub mod permissions;
pub mod rbac;
pub mod reconcile;
pub mod recovery;
pub mod requests;
pub mod schedule;
pub mod scoped;
pub mod served;
pub mod status_writer;
pub mod trim;
pub mod unreadable;
pub mod watches;
pub mod zones;

use std::sync::Arc;

use anyhow::{Context as _, Result};
use celld_api::healer_flags::{self as flags, Shard};
use tracing::{info, warn};

pub use cli::Args;

/// Runs the healer until SIGTERM or SIGINT: starts the HTTP endpoints, the Lease and the
/// controller; on a signal, stops acting, lets running reconciles finish, releases the
/// Lease and returns.
pub async fn run(args: Args) -> Result<()> {
    let config = args.decide_config()?;
    let served = args.served()?;
    let metrics = Arc::new(metrics::Metrics::new());
    let clocks = Arc::new(clocks::Clocks::new(metrics.clone(), config.max_clock_skew));
    let client = requests::client(metrics.clone(), clocks.clone())
        .await
        .context("building the Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let identity = args.identity();
    info!(
        identity = %identity,
        namespaces = %served,
        shard = %args.shard,
        replacement_delay = ?args.member_replacement_delay,
        force_delete_margin = ?args.force_delete_margin,
        absorb_window = ?args.absorb_window,
        "celld-healer starting"
    );

    let health = Arc::new(http::Health::default());
    let metrics_auth = (args.metrics_auth == flags::MetricsAuth::Kubernetes)
        .then(|| metrics_auth::Authorizer::new(client.clone()));
    let http_task = tokio::spawn(http::serve(
        args.metrics_addr,
        metrics.clone(),
        health.clone(),
        metrics_auth,
    ));

    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let lease = leader::Elector::new(
        client.clone(),
        leader::LeaseConfig {
            namespace: args.lease_namespace.clone(),
            name: args.shard.lease_name(&args.lease_name),
            identity: identity.clone(),
            duration: args.lease_duration,
            group_name: Shard::group_lease_name(&args.lease_name),
            group_holder: args.shard.group_holder(),
        },
        metrics.clone(),
    );
    let gate = lease.gate();
    let lease_task = tokio::spawn(lease.run(shutdown_rx.clone()));

    // Its own permissions, compared with its RBAC table (reported, never a hold).
    tokio::spawn(permissions::report(
        client.clone(),
        served.clone(),
        args.metrics_auth,
        metrics.clone(),
        gate.clone(),
        identity.clone(),
        (
            args.lease_namespace.clone(),
            args.shard.lease_name(&args.lease_name),
        ),
    ));

    let ctl = controller::Controller::new(controller::Settings {
        client: client.clone(),
        served,
        shard: args.shard,
        config,
        identity: identity.clone(),
        gate: gate.clone(),
        metrics: metrics.clone(),
        health: health.clone(),
        halt_after: args.test_halt_after,
        application_interval: args.application_interval,
        clocks,
        install: (args.lease_namespace.clone(), args.lease_name.clone()),
        lease_duration: args.lease_duration,
    });
    let ctl_task = tokio::spawn(ctl.run(shutdown_rx.clone()));

    let signal = shutdown_signal().await;
    info!(
        signal,
        "shutting down: no new writes, finishing running reconciles"
    );
    // Stop acting first: the gate closes before anything else, so no write starts after
    // this point even if the lease is still ours for a while.
    gate.close();
    health.set_shutting_down();
    let _ = shutdown_tx.send(true);
    match tokio::time::timeout(std::time::Duration::from_secs(20), ctl_task).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!(error = %format!("{e:#}"), "controller ended with an error"),
        Ok(Err(e)) => warn!(error = %e, "controller task failed"),
        Err(_) => warn!("controller did not stop within 20s"),
    }
    // The lease task releases the lease (if held) once it sees the shutdown.
    match tokio::time::timeout(std::time::Duration::from_secs(5), lease_task).await {
        Ok(_) => {}
        Err(_) => warn!("lease release did not finish within 5s"),
    }
    http_task.abort();
    info!("celld-healer stopped");
    Ok(())
}

/// Waits for SIGTERM or SIGINT and names it.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing the SIGINT handler");
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
