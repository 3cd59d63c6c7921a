//! One install per namespace. Two installs serving the same namespace (two teams'
//! bundles with overlapping `--watch-namespace`, or two that serve every namespace)
//! would both act on its fleets, each on its own memory. So an install acts in a
//! namespace only while it holds that namespace's claim: the Lease
//! [`NAMESPACE_CLAIM_LEASE`] there, holder [`claim_holder`] (the install, not the
//! replica: every replica and shard of an install holds its claims together).
//!
//! The leader claims each namespace where it serves a fleet, by the election's own
//! protocol ([`Campaign`]): the API server arbitrates a create or an update with the
//! resourceVersion read, and a claim is taken over only after its record stayed
//! unchanged for its whole duration as measured on this process's monotonic clock.
//! The claim lasts [`claim_duration`] (four lease durations, at least 45 s) and is
//! renewed every third of that; a leader writes in the namespace only until two thirds of it have passed
//! since its last renewal ([`Table::holds`]), so it stops before another install can
//! take the claim over.
//!
//! An install that finds the claim held by another reports the conflict (the log, a
//! Warning Event `NamespaceClaimedElsewhere` on each of its fleets there, and
//! `celld_healer_namespaces_claimed_elsewhere`) and stays out of the namespace until the
//! other stops renewing. Claims are forgotten with leadership ([`super::leader::Gate`]):
//! a new term reads them again before writing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use celld_api::CelldFleet;
use celld_api::healer_flags::{NAMESPACE_CLAIM_LEASE, NAMESPACE_CLAIM_LEASES, Shard, claim_holder};
use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::claim_table::{Claim, Table};
use super::events::Events;
use super::leader::{Campaign, Gate, Round};
use super::metrics::Metrics;
use super::requests::WRITE_TIMEOUT;
use super::served::Served;

/// What the claimer needs.
pub struct Claimer {
    /// Client.
    pub client: Client,
    /// This install's lease namespace and (unsharded) lease name: its holder identity.
    pub install: (String, String),
    /// `--lease-duration` (a claim lasts [`NAMESPACE_CLAIM_LEASES`] of it).
    pub lease_duration: Duration,
    /// The leader gate, whose [`Table`] this fills.
    pub gate: Gate,
    /// The fleets cache: the namespaces to claim are those of the fleets served.
    pub fleets: Store<CelldFleet>,
    /// The namespaces served.
    pub served: Served,
    /// The share of the fleets served.
    pub shard: Shard,
    /// Reconciles the fleets of a namespace once it is claimed.
    pub poke: mpsc::UnboundedSender<ObjectRef<CelldFleet>>,
    /// Reports a conflict on the fleets.
    pub events: Events,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

/// Per namespace: the campaign and when its claim is next due.
struct Entry {
    campaign: Campaign,
    due: Instant,
}

/// How long a claim lasts: [`NAMESPACE_CLAIM_LEASES`] lease durations, and never less
/// than [`MIN_CLAIM`]. The holder starts writes only until two thirds of it have passed
/// since a renewal, and a write may land up to [`WRITE_TIMEOUT`] later; another install
/// takes over only after the whole claim passed unrenewed. So the last third must exceed
/// the write timeout with room for clock rates: with `--lease-duration` 3 s, four
/// durations would leave 4 s.
pub fn claim_duration(lease_duration: Duration) -> Duration {
    (lease_duration * NAMESPACE_CLAIM_LEASES).max(MIN_CLAIM)
}

/// The shortest claim (45 s): its last third is half again the write timeout.
pub const MIN_CLAIM: Duration = Duration::from_secs(WRITE_TIMEOUT.as_secs() * 9 / 2);

/// After a failed or raced round, the next one.
const RETRY: Duration = Duration::from_secs(2);

impl Claimer {
    /// Claims and renews until `shutdown`. Nothing is released at the end: a sibling
    /// replica of this install renews the claims as the next leader, and otherwise they
    /// expire.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let duration = claim_duration(self.lease_duration);
        let renew_every = duration / 3;
        let deadline = duration * 2 / 3;
        let holder = claim_holder(&self.install.0, &self.install.1);
        let table = self.gate.claims().clone();
        let mut leading = self.gate.subscribe();
        let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
        loop {
            if *shutdown.borrow() {
                return;
            }
            // The earliest round due, or (with nothing to claim) a look again later.
            let mut next: Option<Instant> = None;
            if !self.gate.may_act() {
                // A standby holds nothing; the gate cleared the table when the term ended.
                entries.clear();
            } else {
                let wanted = self.namespaces();
                // A namespace no longer served: its claim is forgotten (and expires).
                entries.retain(|ns, _| {
                    let keep = wanted.contains(ns);
                    if !keep {
                        table.set(ns, None);
                    }
                    keep
                });
                for ns in &wanted {
                    let entry = entries.entry(ns.clone()).or_insert_with(|| Entry {
                        campaign: Campaign::new(
                            &self.client,
                            ns,
                            NAMESPACE_CLAIM_LEASE,
                            &holder,
                            duration,
                        ),
                        due: Instant::now(),
                    });
                    if entry.due <= Instant::now() {
                        let started = Instant::now();
                        let term = self.gate.changes();
                        let (claim, after) = match entry.campaign.shared_round().await {
                            Ok(Round::Held) => (Some(Claim::Held(started + deadline)), renew_every),
                            Ok(Round::Other(other)) => (Some(Claim::Elsewhere(other)), renew_every),
                            Ok(Round::Raced) => (None, RETRY),
                            Err(e) => {
                                self.metrics.error("claim");
                                warn!(namespace = %ns, error = %e, "could not claim the namespace: not acting there until it is claimed");
                                (None, RETRY)
                            }
                        };
                        debug!(namespace = %ns, claim = ?claim, "claim round");
                        entry.due = Instant::now() + after;
                        // Leadership changed during the round: the new term reads the
                        // claims again rather than inherit this one.
                        if self.gate.changes() != term {
                            entries.clear();
                            break;
                        }
                        self.record(&table, ns, claim).await;
                    }
                    next = Some(next.map_or(entry.due, |n| n.min(entry.due)));
                }
            }
            self.metrics
                .namespaces_claimed
                .set(table.count(true) as i64);
            self.metrics
                .namespaces_claimed_elsewhere
                .set(table.count(false) as i64);
            let next = next.unwrap_or_else(|| Instant::now() + renew_every);
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = table.wanted() => {}
                _ = leading.changed() => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// The namespaces where this install serves a fleet.
    fn namespaces(&self) -> BTreeSet<String> {
        self.fleets
            .state()
            .iter()
            .filter(|f| self.served.serves(self.shard, f))
            .filter_map(|f| f.metadata.namespace.clone())
            .collect()
    }

    /// Records a round's outcome; reports what changed. A failed round keeps a held
    /// claim until its deadline ([`Table::standing`] times it out).
    async fn record(&self, table: &Table, ns: &str, claim: Option<Claim>) {
        let Some(claim) = claim else {
            return;
        };
        let before = table.set(ns, Some(claim.clone()));
        match (&before, &claim) {
            (Some(Claim::Held(_)), Claim::Held(_)) => {}
            (_, Claim::Held(_)) => {
                info!(namespace = %ns, "claimed the namespace: this install acts there");
                // Its fleets were turned away while it was not held.
                for f in self.fleets_in(ns) {
                    let _ = self.poke.send(ObjectRef::from_obj(&*f));
                }
            }
            (Some(Claim::Elsewhere(a)), Claim::Elsewhere(b)) if a == b => {}
            (_, Claim::Elsewhere(other)) => {
                let ours = claim_holder(&self.install.0, &self.install.1);
                warn!(namespace = %ns, holder = %other, ours = %ours,
                    "another healer install holds this namespace: this one stays out until it stops");
                for f in self.fleets_in(ns) {
                    self.events
                        .publish(
                            &f,
                            true,
                            "NamespaceClaimedElsewhere",
                            "Report",
                            format!(
                                "Two healer installs serve namespace {ns}: {other} holds its claim (Lease {NAMESPACE_CLAIM_LEASE}), so {ours} does not act on this fleet. Serve each namespace from one install (--watch-namespace)."
                            ),
                        )
                        .await;
                }
            }
        }
    }

    fn fleets_in(&self, ns: &str) -> Vec<Arc<CelldFleet>> {
        self.fleets
            .state()
            .into_iter()
            .filter(|f| f.metadata.namespace.as_deref() == Some(ns))
            .filter(|f| self.served.serves(self.shard, f))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::claim_table::Standing;

    #[test]
    fn a_claim_counts_only_until_its_deadline() {
        let t = Table::needed();
        assert_eq!(t.standing("a"), Standing::Pending);
        t.set(
            "a",
            Some(Claim::Held(Instant::now() + Duration::from_secs(60))),
        );
        assert!(t.holds("a"));
        assert!(!t.holds("b"), "another namespace is not claimed with it");
        // A renewal that did not land in time: the claim no longer lets writes start.
        t.set(
            "a",
            Some(Claim::Held(Instant::now() - Duration::from_millis(1))),
        );
        assert_eq!(t.standing("a"), Standing::Pending);
        t.set("a", Some(Claim::Elsewhere("other/celld-healer".into())));
        assert_eq!(
            t.standing("a"),
            Standing::Elsewhere("other/celld-healer".into())
        );
        assert_eq!((t.count(true), t.count(false)), (0, 1));
        t.clear();
        assert_eq!(t.standing("a"), Standing::Pending);
    }

    /// The holder's last write lands before another install can take over, whatever the
    /// lease duration.
    #[test]
    fn the_last_third_of_a_claim_outlasts_a_write() {
        for secs in [3, 6, 7, 15, 60] {
            let d = claim_duration(Duration::from_secs(secs));
            assert!(d / 3 >= WRITE_TIMEOUT + WRITE_TIMEOUT / 2, "{secs}s: {d:?}");
        }
        assert_eq!(
            claim_duration(Duration::from_secs(15)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn without_claims_every_namespace_counts_as_held() {
        let t = Table::not_needed();
        assert!(t.holds("anything"));
    }
}
