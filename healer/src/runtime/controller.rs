//! The controller: opens the watches ([`super::watches`]), and runs one reconcile per
//! fleet ([`super::reconcile`]) when a watched object of the fleet changes, at the
//! wake-up time `decide` returned, when this replica becomes leader, and when an
//! application observation finished with a changed view, and when a member's node or
//! volume zone appeared or changed ([`super::zones`]). Bursts of events are coalesced
//! ([`DEBOUNCE`]); [`CONCURRENCY`] fleets are reconciled at once. There is no periodic
//! resync.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::Client;
use kube::core::PartialObjectMeta;
use kube::runtime::controller;
use tokio::sync::watch as tokio_watch;
use tracing::debug;

use super::cli::HaltPoint;
use super::context::Reconciler;
use super::events::Events;
use super::http::Health;
use super::leader::Gate;
use super::members::Observing;
use super::memory::Memory;
use super::metrics::Metrics;
use super::reconcile::reconcile;
use super::schedule::{DEBOUNCE, error_policy};
use super::served::Served;
use super::watches::{self, Obj, WatchHealth};
use super::zones::Zones;
use crate::config::Config;
use celld_api::healer_flags::Shard;

/// Fleets reconciled at once. A reconcile mostly waits on the API server (a fresh read,
/// a write, a status patch), so this is sized for a burst: when a zone goes down, every
/// fleet with a member there is due at the same moment, and each waits for a slot.
/// Since the fleets of a namespace due together share one fresh read
/// ([`super::fresh::SharedReads`]), more fleets at once no longer means more reads, only
/// larger ones: 48, where 16 made a 50-fleet burst wait in three waves of slots.
///
/// The slots are a fair semaphore in [`super::reconcile`], not the controller's own
/// limit: a saturated controller keeps the fleets that are due in a hash set and takes
/// the first free one in hash order, so while some fleets keep asking (a thousand fleets
/// growing), the others are never taken. At 1,000 fleets 164 were never reconciled in
/// minutes. Here every due fleet starts at once and waits in line for a slot.
pub(super) const CONCURRENCY: usize = 48;

/// The controller's queue: events coalesced ([`DEBOUNCE`]), and no limit of its own on
/// reconciles at once: [`CONCURRENCY`] is applied in line, fairly (see there).
fn config() -> controller::Config {
    controller::Config::default()
        .concurrency(0)
        .debounce(DEBOUNCE)
}

/// What the controller needs.
pub struct Settings {
    /// Client.
    pub client: Client,
    /// The namespaces served.
    pub served: Served,
    /// The share of the fleets served (`--shard`).
    pub shard: Shard,
    /// Delays for `decide`.
    pub config: Config,
    /// This replica's name.
    pub identity: String,
    /// Leader gate.
    pub gate: Gate,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Readiness.
    pub health: Arc<Health>,
    /// Tests only.
    pub halt_after: Option<HaltPoint>,
    /// Application observation interval (zero: off).
    pub application_interval: Duration,
    /// The monotonic clock and the API server's (fed by the client's requests layer).
    pub clocks: Arc<super::clocks::Clocks>,
    /// This install's lease namespace and (unsharded) lease name, which name its
    /// namespace claims ([`super::claims`]).
    pub install: (String, String),
    /// `--lease-duration`.
    pub lease_duration: Duration,
}

/// The controller.
pub struct Controller {
    s: Settings,
}

impl Controller {
    /// A controller with these settings; nothing runs until [`Controller::run`].
    pub fn new(s: Settings) -> Controller {
        Controller { s }
    }

    /// Watches and reconciles until `shutdown` turns true (running reconciles finish).
    pub async fn run(self, shutdown: tokio_watch::Receiver<bool>) -> Result<()> {
        let s = self.s;
        let watches = Arc::new(WatchHealth::new(
            s.metrics.clone(),
            s.health.clone(),
            &s.served,
        ));
        let all_listed = watches.listed();
        let memory = Arc::new(Memory::default());
        let (forget, metrics) = (memory.clone(), s.metrics.clone());
        let fleets_changed = Arc::new(tokio::sync::Notify::new());
        let poke_access = fleets_changed.clone();
        let (stores, touched) = watches::open(
            &s.client,
            &s.served,
            &watches,
            move |f| {
                forget.forget_fleet(f);
                let key = kube::runtime::reflector::ObjectRef::from_obj(f);
                metrics.retain_fleets(|k| *k != key);
                metrics.blocked_fleets.set(forget.blocked_count() as i64);
            },
            move || poke_access.notify_one(),
        );
        super::access::start(
            &s.client,
            &s.served,
            stores.fleets.clone(),
            stores.unreadable.clone(),
            s.gate.clone(),
            fleets_changed,
        );
        tokio::spawn(stores.unreadable.clone().report(
            Events::new(s.client.clone(), &s.identity, s.metrics.clone()),
            s.metrics.clone(),
            s.gate.clone(),
        ));
        let zones = Arc::new(Zones::new(s.metrics.clone()));
        let zone_changes = super::zones::open(&s.client, &zones, &stores);
        let fleets = stores.fleets.clone();
        let (served, shard, store) = (s.served.clone(), s.shard, fleets.clone());
        s.metrics
            .count_served_with(move || served.count(shard, &store.state()));
        let (poke_tx, poke_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(
            super::claims::Claimer {
                client: s.client.clone(),
                install: s.install.clone(),
                lease_duration: s.lease_duration,
                gate: s.gate.clone(),
                fleets: stores.fleets.clone(),
                served: s.served.clone(),
                shard: s.shard,
                poke: poke_tx.clone(),
                events: Events::new(s.client.clone(), &s.identity, s.metrics.clone()),
                metrics: s.metrics.clone(),
            }
            .run(shutdown.clone()),
        );
        let ctx = Arc::new(Reconciler {
            client: s.client.clone(),
            served: s.served.clone(),
            shard: s.shard,
            stores,
            watches,
            zones,
            config: s.config.clone(),
            gate: s.gate.clone(),
            metrics: s.metrics.clone(),
            events: Events::new(s.client.clone(), &s.identity, s.metrics.clone()),
            halt_after: s.halt_after,
            observing: (!s.application_interval.is_zero()).then(|| {
                let gate = s.gate.clone();
                Observing {
                    interval: s.application_interval,
                    may_observe: Arc::new(move || gate.may_act()),
                    poke: poke_tx,
                    observed: s.metrics.application_observations.clone(),
                }
            }),
            memory,
            clocks: s.clocks.clone(),
            slots: tokio::sync::Semaphore::new(CONCURRENCY),
            fresh: {
                let rounds = s.metrics.fresh_read_rounds.clone();
                super::fresh::SharedReads::new(s.client.clone(), move |_| {
                    rounds.inc();
                })
            },
        });
        let poked =
            futures::stream::unfold(
                poke_rx,
                |mut rx| async move { rx.recv().await.map(|k| (k, rx)) },
            );

        // Becoming leader reconciles every fleet.
        let became_leader = futures::stream::unfold(s.gate.subscribe(), |mut rx| async move {
            rx.changed().await.ok()?;
            let leading = *rx.borrow_and_update();
            Some((leading, rx))
        })
        .filter_map(|leading| std::future::ready(leading.then_some(())));
        // So does every watch becoming listed (the start, a recovery), while leading:
        // the fleets asked for before then were turned away as "unsynced".
        let gate = s.gate.clone();
        let listed = futures::stream::unfold(all_listed, |mut rx| async move {
            rx.changed().await.ok()?;
            rx.borrow_and_update();
            Some(((), rx))
        })
        .filter(move |()| std::future::ready(gate.may_act()));

        let m = watches::by_identity(fleets.clone());
        let (m1, m2, m3, m4, m5, m6, m7) = (
            m.clone(),
            m.clone(),
            m.clone(),
            m.clone(),
            m.clone(),
            m.clone(),
            m,
        );
        let m8 = watches::by_reservation(fleets.clone());

        let mut shutdown = shutdown;
        let controller = controller::Controller::for_stream(touched.fleets, fleets)
            .watches_stream(touched.stateful_sets, move |o: StatefulSet| {
                m1(&Obj::workload(&o))
            })
            .watches_stream(touched.deployments, move |o: Deployment| {
                m2(&Obj::workload(&o))
            })
            .watches_stream(
                touched.replica_sets,
                move |o: PartialObjectMeta<ReplicaSet>| m3(&Obj::labelled(&o)),
            )
            .watches_stream(touched.pods, move |o: Pod| m4(&Obj::labelled(&o)))
            .watches_stream(touched.held_pods, move |o: Pod| m5(&Obj::held(&o)))
            .watches_stream(touched.claims, move |o: PersistentVolumeClaim| {
                m6(&Obj::claim(&o))
            })
            .watches_stream(touched.services, move |o: Service| m7(&Obj::service(&o)))
            .watches_stream(touched.reservations, m8)
            .reconcile_all_on(became_leader)
            .reconcile_all_on(listed)
            .reconcile_on(poked)
            .reconcile_on(zone_changes)
            .graceful_shutdown_on(async move {
                let _ = shutdown.wait_for(|s| *s).await;
            })
            .with_config(config());
        controller
            .run(reconcile, error_policy, ctx)
            .for_each(|r| async move {
                match r {
                    Ok(_) => {}
                    Err(controller::Error::ReconcilerFailed(e, obj)) => {
                        debug!(fleet = %obj, error = %e, "reconcile failed (retried with back-off)")
                    }
                    Err(e) => debug!(error = %e, "controller event"),
                }
            })
            .await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::controller::Action;
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher;
    use tokio::sync::Semaphore;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    /// Ten objects that ask again at once after every reconcile (fleets growing, their
    /// Pods changing all the time) and ten asked for once, two slots, each reconcile
    /// 100 ms, so that the slots are always taken: the queue as the healer configures
    /// it, with the slots taken in line, reconciles every quiet object within a few
    /// virtual seconds. (With the limit in
    /// the controller instead, `concurrency(2)`, the quiet objects hashed after the
    /// third busy one are never taken.)
    #[tokio::test(start_paused = true)]
    async fn a_fleet_asked_for_once_is_reconciled_however_busy_the_others_are() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let names: Vec<String> = (0..10)
            .flat_map(|i| [format!("busy-{i}"), format!("quiet-{i}")])
            .collect();
        writer.apply_watcher_event(&watcher::Event::Init);
        for n in &names {
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(n.clone());
            cm.metadata.namespace = Some("apps".into());
            writer.apply_watcher_event(&watcher::Event::InitApply(cm));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let queue = futures::stream::iter(
            names
                .iter()
                .map(|n| Ok::<_, Never>(ObjectRef::<ConfigMap>::new(n).within("apps")))
                .collect::<Vec<_>>(),
        )
        .chain(futures::stream::pending());
        struct Ctx {
            slots: Semaphore,
            runs: Mutex<BTreeMap<String, usize>>,
        }
        let ctx = Arc::new(Ctx {
            slots: Semaphore::new(2),
            runs: Mutex::new(BTreeMap::new()),
        });
        let reconcile = |cm: Arc<ConfigMap>, ctx: Arc<Ctx>| {
            Box::pin(async move {
                let Ok(_slot) = ctx.slots.acquire().await else {
                    return Ok::<_, Never>(Action::await_change());
                };
                tokio::time::sleep(Duration::from_millis(100)).await;
                let name = cm.metadata.name.clone().unwrap_or_default();
                *ctx.runs.lock().unwrap().entry(name.clone()).or_default() += 1;
                Ok(if name.starts_with("busy") {
                    Action::requeue(Duration::from_millis(1))
                } else {
                    Action::await_change()
                })
            })
        };
        let run = controller::applier(
            reconcile,
            |_, _: &Never, _| Action::await_change(),
            ctx.clone(),
            store,
            queue,
            config(),
        )
        .for_each(|_| async {});
        let _ = tokio::time::timeout(Duration::from_secs(5), run).await;
        let runs = ctx.runs.lock().unwrap();
        let quiet: Vec<_> = names.iter().filter(|n| n.starts_with("quiet")).collect();
        let missed: Vec<_> = quiet.iter().filter(|n| !runs.contains_key(**n)).collect();
        assert!(missed.is_empty(), "never reconciled: {missed:?} ({runs:?})");
        // The slots were full all along (2 slots x 10 runs a second x 5 s): the queue was
        // saturated, as at 1,000 growing fleets.
        let all: usize = runs.values().sum();
        assert!(
            all >= 90,
            "only {all} reconciles: the slots were not kept full"
        );
    }
}
