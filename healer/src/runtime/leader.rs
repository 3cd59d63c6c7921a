//! Leader election on a `coordination.k8s.io/v1` Lease, so that of two (or more) healer
//! replicas only one writes.
//!
//! Implemented here rather than with a crate: the protocol is a handful of requests
//! (get, create, update with the resourceVersion read), and the healer needs two things
//! the crates we looked at (`kube-lease-manager` 0.13 supports kube 5,
//! `kube-leader-election` 0.44 still targets kube 4) do not give directly: a *gate* that
//! every write checks synchronously right before it is sent, and a release on SIGTERM
//! that happens after the gate closed.
//!
//! Protocol (the client-go one, made robust to clock skew the way client-go is: expiry
//! is judged by how long *this* process has seen the same lease record unchanged, never
//! by comparing the holder's `renewTime` with the local clock):
//!
//! - no Lease: create it naming this replica; `AlreadyExists` means someone else won;
//! - held by this replica: update `renewTime` (precondition: the resourceVersion of the
//!   last lease this replica wrote or read);
//! - held by another replica: take it over only when the holder is empty (released), or
//!   the record has not changed for `leaseDurationSeconds` as measured locally; the
//!   update carries the resourceVersion read, so of two contenders only one wins.
//!
//! The leader renews every third of the lease duration and may write only until two
//! thirds of it have passed since its last successful renewal ([`Gate::may_act`]), so it
//! stops writing before any other replica can consider the lease expired. On shutdown
//! the gate closes first, then the lease is released (holder cleared) so the standby
//! takes over at once.
//!
//! The lease is advisory: it keeps two healthy replicas from doing the same work, but
//! safety rests on the uid and resourceVersion preconditions every write carries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::metrics::Metrics;

/// Where the lease lives and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's holder identity.
    pub identity: String,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
}

/// Whether this replica may write right now. Cheap to clone and to check.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

struct GateInner {
    /// Writes are allowed until this instant (set on every successful renewal).
    until: Mutex<Option<Instant>>,
    /// Closed for good (shutdown).
    closed: AtomicBool,
    /// Leadership as last decided by the elector (for triggering a full reconcile).
    leading: watch::Sender<bool>,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            inner: Arc::new(GateInner {
                until: Mutex::new(None),
                closed: AtomicBool::new(false),
                leading: watch::channel(false).0,
            }),
        }
    }

    /// A gate that is always open (no election: tests, single replica tools).
    pub fn always_open() -> Gate {
        let g = Gate::new();
        *g.inner.until.lock().expect("gate lock") =
            Some(Instant::now() + Duration::from_secs(1 << 40));
        g.inner.leading.send_replace(true);
        g
    }

    /// Whether a write may start now: this replica holds the lease, renewed recently
    /// enough, and is not shutting down.
    pub fn may_act(&self) -> bool {
        !self.inner.closed.load(Ordering::SeqCst)
            && self
                .inner
                .until
                .lock()
                .expect("gate lock")
                .is_some_and(|t| Instant::now() < t)
    }

    /// Closes the gate for good (shutdown): no write starts after this.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        *self.inner.until.lock().expect("gate lock") = None;
        self.inner.leading.send_replace(false);
    }

    /// Leadership changes (true when this replica became leader).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.inner.leading.subscribe()
    }

    fn renewed(&self, until: Instant) {
        if self.inner.closed.load(Ordering::SeqCst) {
            return;
        }
        *self.inner.until.lock().expect("gate lock") = Some(until);
        if !*self.inner.leading.borrow() {
            self.inner.leading.send_replace(true);
        }
    }

    fn lost(&self) {
        *self.inner.until.lock().expect("gate lock") = None;
        if *self.inner.leading.borrow() {
            self.inner.leading.send_replace(false);
        }
    }
}

/// Runs the election loop.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    gate: Gate,
    metrics: Arc<Metrics>,
}

/// What the elector last saw of another holder's record.
struct Observed {
    resource_version: String,
    since: Instant,
}

impl Elector {
    /// Creates the elector; nothing is sent until [`Elector::run`].
    pub fn new(client: Client, cfg: LeaseConfig, metrics: Arc<Metrics>) -> Elector {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            gate: Gate::new(),
            metrics,
        }
    }

    /// The gate this elector opens and closes.
    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }

    /// Campaigns and renews until `shutdown` turns true, then releases the lease if held.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let renew_every = self.cfg.duration / 3;
        let renew_deadline = self.cfg.duration * 2 / 3;
        let mut held: Option<Lease> = None;
        let mut observed: Option<Observed> = None;
        let mut leading = false;
        loop {
            if *shutdown.borrow() {
                break;
            }
            let started = Instant::now();
            let next = match self.attempt(&mut held, &mut observed).await {
                Ok(true) => {
                    self.gate.renewed(started + renew_deadline);
                    if !leading {
                        info!(lease = %self.cfg.name, identity = %self.cfg.identity, "acquired the lease: this replica writes");
                        leading = true;
                    }
                    self.metrics.leader.set(1);
                    renew_every
                }
                Ok(false) => {
                    self.gate.lost();
                    if leading {
                        warn!(lease = %self.cfg.name, "lost the lease: this replica stops writing");
                        leading = false;
                    }
                    self.metrics.leader.set(0);
                    renew_every
                }
                Err(e) => {
                    self.metrics.error("lease");
                    warn!(error = %e, lease = %self.cfg.name, "lease request failed");
                    // The gate stays open only until the renew deadline passes.
                    if !self.gate.may_act() {
                        self.metrics.leader.set(0);
                        if leading {
                            warn!("lease not renewed in time: this replica stops writing");
                            leading = false;
                        }
                        self.gate.lost();
                    }
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = shutdown.changed() => {}
            }
        }
        self.gate.close();
        self.metrics.leader.set(0);
        if let Some(lease) = held {
            self.release(lease).await;
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.cfg.duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// One round: Ok(true) when this replica holds the lease afterwards.
    async fn attempt(
        &self,
        held: &mut Option<Lease>,
        observed: &mut Option<Observed>,
    ) -> Result<bool, kube::Error> {
        // Renew what we hold, with the resourceVersion of our last write.
        if let Some(mut lease) = held.take() {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.renew_time = Some(Self::now());
            spec.lease_duration_seconds = Some(self.duration_secs());
            match self
                .api
                .replace(&self.cfg.name, &PostParams::default(), &lease)
                .await
            {
                Ok(l) => {
                    *held = Some(l);
                    return Ok(true);
                }
                Err(kube::Error::Api(s)) if s.is_conflict() || s.is_not_found() => {
                    debug!("lease changed under us; reading it again");
                }
                Err(e) => {
                    // Keep it: the next round retries with the same resourceVersion.
                    *held = Some(lease);
                    return Err(e);
                }
            }
        }
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease: Lease = serde_json::from_value(serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.cfg.name, "namespace": self.cfg.namespace},
                "spec": {
                    "holderIdentity": self.cfg.identity,
                    "leaseDurationSeconds": self.duration_secs(),
                    "acquireTime": Self::now(),
                    "renewTime": Self::now(),
                    "leaseTransitions": 0,
                }
            }))
            .expect("a valid Lease");
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    *held = Some(l);
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let mine = holder == self.cfg.identity;
        if !mine && !holder.is_empty() {
            let now = Instant::now();
            let since = match observed {
                Some(o) if o.resource_version == rv => o.since,
                _ => {
                    *observed = Some(Observed {
                        resource_version: rv.clone(),
                        since: now,
                    });
                    now
                }
            };
            let their_duration = spec
                .lease_duration_seconds
                .map_or(self.cfg.duration, |s| Duration::from_secs(s.max(1) as u64));
            if now.duration_since(since) < their_duration {
                return Ok(false);
            }
            info!(holder = %holder, "the lease holder stopped renewing; taking over");
        }
        let s = lease.spec.get_or_insert_with(Default::default);
        if !mine {
            s.holder_identity = Some(self.cfg.identity.clone());
            s.acquire_time = Some(Self::now());
            s.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        s.renew_time = Some(Self::now());
        s.lease_duration_seconds = Some(self.duration_secs());
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(l) => {
                *held = Some(l);
                *observed = None;
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Clears the holder so a standby takes over without waiting for expiry.
    async fn release(&self, mut lease: Lease) {
        let s = lease.spec.get_or_insert_with(Default::default);
        s.holder_identity = None;
        s.renew_time = Some(Self::now());
        s.lease_duration_seconds = Some(1);
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.cfg.name, "released the lease"),
            Err(e) => warn!(error = %e, "could not release the lease; it expires on its own"),
        }
    }
}
