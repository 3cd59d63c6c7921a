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
//! **Shards.** With `--shard i/n` each shard elects its own leader on its own Lease
//! ([`Shard::lease_name`]). Every shard leader also renews one Lease shared by the
//! leaders of its shard *count*, `<lease>-shards` with holder `shards=<n>`, by the same
//! protocol (a sibling's renewal is not a takeover, so a conflict with one is retried
//! at once). A healer started with another count sees the record change at every
//! renewal and takes the Lease over only when nobody of the old count renewed it for
//! its duration, that is once every old shard leader stopped writing. The gate opens
//! only while both Leases are held, so while `n` changes no fleet has two writers, even
//! though the old and the new count hash fleets differently. A single healer (`0/1`)
//! holds the group Lease too: going from one shard to several is the same procedure.
//!
//! The lease is advisory: it keeps two healthy replicas from doing the same work, but
//! safety rests on the uid and resourceVersion preconditions every write carries.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

use super::claim_table::Table;
use super::metrics::Metrics;
#[cfg(doc)]
use celld_api::healer_flags::Shard;

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
    /// The Lease shared by the shard leaders of one shard count ([`Shard::group_lease_name`]).
    pub group_name: String,
    /// Its holder identity for this replica's count ([`Shard::group_holder`]).
    pub group_holder: String,
}

/// Whether this replica may write right now. Cheap to clone and to check.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

struct GateInner {
    /// The leases that must both be held, each until the instant set on its last
    /// successful renewal.
    until: Mutex<Held>,
    /// Closed for good (shutdown).
    closed: AtomicBool,
    /// Leadership as last decided by the elector (for triggering a full reconcile).
    leading: watch::Sender<bool>,
    /// How many times leadership changed (either way).
    changes: AtomicU64,
    /// This install's namespace claims ([`super::claims`]): a leader writes in a
    /// namespace only while its install holds that namespace's claim.
    claims: Arc<Table>,
}

/// Until when each lease counts as held (None: not held).
#[derive(Default)]
struct Held {
    /// This shard's lease.
    shard: Option<Instant>,
    /// The lease of this replica's shard count.
    group: Option<Instant>,
}

impl Held {
    fn both(&self) -> bool {
        self.shard.is_some() && self.group.is_some()
    }
}

/// Which of the two leases a renewal or loss concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Shard,
    Group,
}

impl Gate {
    fn new(claims: Table) -> Gate {
        Gate {
            inner: Arc::new(GateInner {
                until: Mutex::new(Held::default()),
                closed: AtomicBool::new(false),
                leading: watch::channel(false).0,
                changes: AtomicU64::new(0),
                claims: Arc::new(claims),
            }),
        }
    }

    /// A gate that is always open, in every namespace (no election: tests, single
    /// replica tools).
    pub fn always_open() -> Gate {
        let g = Gate::new(Table::not_needed());
        let forever = Some(Instant::now() + Duration::from_secs(1 << 40));
        *g.inner.until.lock().expect("gate lock") = Held {
            shard: forever,
            group: forever,
        };
        g.inner.leading.send_replace(true);
        g
    }

    /// Whether a write may start now: this replica holds its shard's lease and its shard
    /// count's lease, both renewed recently enough, and is not shutting down.
    pub fn may_act(&self) -> bool {
        if self.inner.closed.load(Ordering::SeqCst) {
            return false;
        }
        let held = self.inner.until.lock().expect("gate lock");
        let now = Instant::now();
        held.shard.is_some_and(|t| now < t) && held.group.is_some_and(|t| now < t)
    }

    /// Whether a write in `namespace` may start now: [`Gate::may_act`], and this
    /// install holds the namespace's claim.
    pub fn may_act_in(&self, namespace: &str) -> bool {
        self.may_act() && self.inner.claims.holds(namespace)
    }

    /// This install's namespace claims.
    pub fn claims(&self) -> &Arc<Table> {
        &self.inner.claims
    }

    /// Whether this replica leads, but its last renewal is older than the lease allows:
    /// a renewal is late (a slow API server), and until it lands or the lease is lost no
    /// write starts. Leadership did not change, so nothing will reconcile every fleet
    /// when the renewal lands: a reconcile turned away meanwhile must look again soon
    /// rather than wait for its fleet's next change (seen at 1,000 fleets: 82 fleets
    /// never reconciled after a late renewal).
    pub fn lapsed(&self) -> bool {
        *self.inner.leading.borrow() && !self.may_act()
    }

    /// Whether this shard's lease is held (the shard count's lease is renewed only then).
    fn holds_shard(&self) -> bool {
        self.inner
            .until
            .lock()
            .expect("gate lock")
            .shard
            .is_some_and(|t| Instant::now() < t)
    }

    /// Closes the gate for good (shutdown): no write starts after this.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        *self.inner.until.lock().expect("gate lock") = Held::default();
        self.inner.claims.clear();
        self.inner.leading.send_replace(false);
    }

    /// How many times leadership changed, either way, since this process started: what
    /// the process remembers from an earlier term may have missed what happened while
    /// another replica led (`crate::clock::Observations::epoch`).
    pub fn changes(&self) -> u64 {
        self.inner.changes.load(Ordering::SeqCst)
    }

    /// Leadership changes (true when this replica became leader).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.inner.leading.subscribe()
    }

    fn renewed(&self, which: Which, until: Instant) {
        if self.inner.closed.load(Ordering::SeqCst) {
            return;
        }
        self.set(which, Some(until));
    }

    fn lost(&self, which: Which) {
        self.set(which, None);
    }

    /// Records one lease's state; leadership (what triggers a full reconcile) is
    /// holding both.
    fn set(&self, which: Which, until: Option<Instant>) {
        let both = {
            let mut held = self.inner.until.lock().expect("gate lock");
            match which {
                Which::Shard => held.shard = until,
                Which::Group => held.group = until,
            }
            held.both()
        };
        if *self.inner.leading.borrow() != both {
            // Claims are renewed by the leader only: a new term claims anew.
            self.inner.claims.clear();
            self.inner.changes.fetch_add(1, Ordering::SeqCst);
            self.inner.leading.send_replace(both);
        }
    }
}

/// Runs the election loop.
pub struct Elector {
    client: Client,
    cfg: LeaseConfig,
    gate: Gate,
    metrics: Arc<Metrics>,
}

/// What a campaign last saw of another holder's record.
struct Observed {
    resource_version: String,
    since: Instant,
}

/// One Lease this replica campaigns for (the election's, or a namespace claim): where it
/// is, the holder identity it writes, the record it last wrote, and what it last saw of
/// another holder. The protocol is the one described at the top of this module.
pub(super) struct Campaign {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
    held: Option<Lease>,
    observed: Option<Observed>,
}

/// The outcome of one round for one lease.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Round {
    /// This replica holds it (renewed or acquired).
    Held,
    /// Another holder has it and has not let it expire.
    Other(String),
    /// Another writer changed it between our read and our write.
    Raced,
}

/// How often a shared lease's round is retried at once after a sibling's renewal raced
/// ours.
const SHARED_RETRIES: usize = 3;

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl Campaign {
    /// A campaign for the Lease `name` in `namespace`, held as `identity` for
    /// `duration` at a time.
    pub(super) fn new(
        client: &Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Campaign {
        Campaign {
            api: Api::namespaced(client.clone(), namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            held: None,
            observed: None,
        }
    }

    /// The Lease's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// A round on a lease several replicas hold together: a sibling's renewal between
    /// our read and our write is retried at once, not taken for a loss.
    pub(super) async fn shared_round(&mut self) -> Result<Round, kube::Error> {
        for _ in 0..SHARED_RETRIES {
            match self.round().await? {
                Round::Raced => continue,
                other => return Ok(other),
            }
        }
        Ok(Round::Raced)
    }

    /// One round on the lease.
    pub(super) async fn round(&mut self) -> Result<Round, kube::Error> {
        // Renew what we hold, with the resourceVersion of our last write.
        if let Some(mut lease) = self.held.take() {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.renew_time = Some(now());
            spec.lease_duration_seconds = Some(self.duration_secs());
            match self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
            {
                Ok(l) => {
                    self.held = Some(l);
                    return Ok(Round::Held);
                }
                Err(kube::Error::Api(s)) if s.is_conflict() || s.is_not_found() => {
                    debug!(lease = %self.name, "lease changed under us; reading it again");
                }
                Err(e) => {
                    // Keep it: the next round retries with the same resourceVersion.
                    self.held = Some(lease);
                    return Err(e);
                }
            }
        }
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease: Lease = serde_json::from_value(serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": self.duration_secs(),
                    "acquireTime": now(),
                    "renewTime": now(),
                    "leaseTransitions": 0,
                }
            }))
            .expect("a valid Lease");
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    self.held = Some(l);
                    Ok(Round::Held)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => {
                    Ok(Round::Raced)
                }
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() {
            let at = Instant::now();
            let since = match &self.observed {
                Some(o) if o.resource_version == rv => o.since,
                _ => {
                    self.observed = Some(Observed {
                        resource_version: rv.clone(),
                        since: at,
                    });
                    at
                }
            };
            let their_duration = spec
                .lease_duration_seconds
                .map_or(self.duration, |s| Duration::from_secs(s.max(1) as u64));
            if at.duration_since(since) < their_duration {
                return Ok(Round::Other(holder));
            }
            info!(lease = %self.name, namespace = %self.namespace, holder = %holder,
                "the lease holder stopped renewing; taking over");
        }
        let s = lease.spec.get_or_insert_with(Default::default);
        if !mine {
            s.holder_identity = Some(self.identity.clone());
            s.acquire_time = Some(now());
            s.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        s.renew_time = Some(now());
        s.lease_duration_seconds = Some(self.duration_secs());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(l) => {
                self.held = Some(l);
                self.observed = None;
                Ok(Round::Held)
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Round::Raced),
            Err(e) => Err(e),
        }
    }

    /// Clears the holder of a lease this replica holds, so a standby takes over without
    /// waiting for expiry.
    async fn release(mut self) {
        let Some(mut lease) = self.held.take() else {
            return;
        };
        let s = lease.spec.get_or_insert_with(Default::default);
        s.holder_identity = None;
        s.renew_time = Some(now());
        s.lease_duration_seconds = Some(1);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.name, "released the lease"),
            Err(e) => warn!(error = %e, "could not release the lease; it expires on its own"),
        }
    }
}

impl Elector {
    /// Creates the elector; nothing is sent until [`Elector::run`].
    pub fn new(client: Client, cfg: LeaseConfig, metrics: Arc<Metrics>) -> Elector {
        Elector {
            client,
            cfg,
            gate: Gate::new(Table::needed()),
            metrics,
        }
    }

    /// The gate this elector opens and closes.
    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }

    fn campaign(&self, name: &str, identity: &str) -> Campaign {
        Campaign::new(
            &self.client,
            &self.cfg.namespace,
            name,
            identity,
            self.cfg.duration,
        )
    }

    /// Campaigns and renews until `shutdown` turns true, then releases the shard's lease
    /// if held (the shared lease stays with the siblings; it expires once none renews).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let renew_every = self.cfg.duration / 3;
        let renew_deadline = self.cfg.duration * 2 / 3;
        let mut shard = self.campaign(&self.cfg.name, &self.cfg.identity);
        let mut group = self.campaign(&self.cfg.group_name, &self.cfg.group_holder);
        let mut acting = false;
        let mut waiting_for: Option<String> = None;
        loop {
            if *shutdown.borrow() {
                break;
            }
            let mut next = renew_every;
            let started = Instant::now();
            match shard.round().await {
                Ok(Round::Held) => self.gate.renewed(Which::Shard, started + renew_deadline),
                Ok(_) => self.gate.lost(Which::Shard),
                Err(e) => {
                    self.failed(shard.name(), &e);
                    // The gate stays open only until the renew deadline passes.
                    if !self.gate.holds_shard() {
                        self.gate.lost(Which::Shard);
                    }
                    next = Duration::from_secs(1);
                }
            }
            if self.gate.holds_shard() {
                let started = Instant::now();
                match group.shared_round().await {
                    Ok(Round::Held) => {
                        self.gate.renewed(Which::Group, started + renew_deadline);
                        waiting_for = None;
                    }
                    Ok(Round::Other(holder)) => {
                        self.gate.lost(Which::Group);
                        if waiting_for.as_deref() != Some(holder.as_str()) {
                            warn!(lease = %group.name, holder = %holder, ours = %group.identity,
                                "healers of another shard count still renew the shared lease: this replica waits until they stop");
                            waiting_for = Some(holder);
                        }
                    }
                    Ok(Round::Raced) => {
                        if !self.gate.may_act() {
                            self.gate.lost(Which::Group);
                        }
                        next = Duration::from_secs(1);
                    }
                    Err(e) => {
                        self.failed(group.name(), &e);
                        if !self.gate.may_act() {
                            self.gate.lost(Which::Group);
                        }
                        next = Duration::from_secs(1);
                    }
                }
            } else {
                // Only shard leaders speak for their count; a standby holds nothing.
                self.gate.lost(Which::Group);
                group.held = None;
            }
            let now_acting = self.gate.may_act();
            if now_acting != acting {
                if now_acting {
                    info!(lease = %shard.name, identity = %shard.identity, "acquired the lease: this replica writes");
                } else {
                    warn!(lease = %shard.name, "lost the lease: this replica stops writing");
                }
                acting = now_acting;
            }
            self.metrics.set_leader(now_acting);
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = shutdown.changed() => {}
            }
        }
        self.gate.close();
        self.metrics.set_leader(false);
        shard.release().await;
    }

    fn failed(&self, lease: &str, e: &kube::Error) {
        self.metrics.error("lease");
        warn!(error = %e, lease = %lease, "lease request failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_renewal_lapses_the_gate_without_losing_leadership() {
        let g = Gate::new(Table::needed());
        // Standby: neither leading nor lapsed.
        assert!(!g.may_act() && !g.lapsed());
        let later = Instant::now() + Duration::from_secs(60);
        g.renewed(Which::Shard, later);
        g.renewed(Which::Group, later);
        assert!(g.may_act() && !g.lapsed());
        // The renewal deadline passed before the next renewal landed.
        let past = Instant::now() - Duration::from_millis(1);
        g.renewed(Which::Shard, past);
        assert!(!g.may_act() && g.lapsed());
        assert!(
            *g.subscribe().borrow(),
            "still leading: no full reconcile will follow"
        );
        g.renewed(Which::Shard, later);
        assert!(g.may_act() && !g.lapsed());
        // Lost: standby again.
        g.lost(Which::Shard);
        assert!(!g.may_act() && !g.lapsed());
    }

    #[test]
    fn a_leader_writes_only_where_its_install_holds_the_claim() {
        let g = Gate::new(Table::needed());
        let later = Instant::now() + Duration::from_secs(60);
        g.renewed(Which::Shard, later);
        g.renewed(Which::Group, later);
        assert!(g.may_act());
        assert!(
            !g.may_act_in("a"),
            "leading, but the namespace is not claimed yet"
        );
        g.claims().set_held_for_test("a", later);
        assert!(g.may_act_in("a") && !g.may_act_in("b"));
        // A lost term forgets the claims: the next term reads them again.
        g.lost(Which::Shard);
        g.renewed(Which::Shard, later);
        assert!(g.may_act() && !g.may_act_in("a"));
        g.claims().set_held_for_test("a", later);
        g.close();
        assert!(!g.may_act_in("a"));
        assert!(
            Gate::always_open().may_act_in("a"),
            "tools and tests: every namespace"
        );
    }
}
