//! The watches, their caches, and one reconcile per fleet.
//!
//! Watches (list + watch, kept in reflector stores, `managedFields` dropped):
//!
//! | resource | selector |
//! | --- | --- |
//! | CelldFleet | all |
//! | StatefulSet, Deployment, Service | label `fleet.celld.dev/identity` exists |
//! | ReplicaSet (metadata only) | label `fleet.celld.dev/identity` exists |
//! | Pod | label `fleet.celld.dev/identity` exists |
//! | Pod | label `fleet.celld.dev/replacement-fleet` exists (a held Pod that lost its identity label) |
//! | PersistentVolumeClaim | all (another fleet's claim at a member name carries no label of ours) |
//! | CelldBucketReservation | all (cluster-scoped; rule V3) |
//!
//! Each watch event is mapped to the fleet it concerns (identity label, or for claims
//! and Services their name) through the fleet cache, and the controller reconciles that
//! fleet, coalescing bursts (250 ms debounce, at most 4 fleets at once). A reconcile
//! also runs at the wake-up time `decide` returned. There is no periodic resync.
//!
//! A reconcile never acts on incomplete data:
//! - before every watch has listed its objects once, or while a watch is failing, it
//!   writes nothing and looks again shortly (log, `celld_healer_watch_healthy`);
//! - when `observe` refuses an object, it writes nothing, records a Warning Event
//!   `ObservationIncomplete` naming the object, and waits for the object to change.
//!
//! Only the lease holder reconciles; the standby keeps its caches warm and is ready, and
//! reconciles every fleet the moment it becomes leader.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use celld_gen::api::labels::{IDENTITY, REPLACEMENT_INDEX, claim_ordinal};
use celld_gen::api::{CelldBucketReservation, CelldFleet, CelldFleetStatus, reservation_name};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action as KAction};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_fn};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tokio::sync::watch as tokio_watch;
use tracing::{debug, info, warn};

use super::act::{self, ActError, Actor};
use super::cli::HaltPoint;
use super::events::Events;
use super::fresh::{self, Gathered};
use super::http::Health;
use super::infra::Verifier;
use super::leader::Gate;
use super::members::Observer;
use super::metrics::{Metrics, ResourceLabel};
use super::scoped::Scoped;
use super::served::Served;
use crate::config::Config;
use crate::confirm::{self, Confirmation};
use crate::observe::{self, Inputs, ObserveError, WorkloadObject};
use crate::plan::{Action, Plan};
use crate::snapshot::{CapacitySignal, Snapshot};
use crate::time::Timestamp;

/// What the controller needs.
pub struct Settings {
    /// Client.
    pub client: Client,
    /// The namespaces served.
    pub served: Served,
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
}

/// The controller.
pub struct Controller {
    s: Settings,
}

/// Every cache a snapshot is built from. Fleets and reservations are watched
/// cluster-wide; the rest in each served namespace.
#[derive(Clone)]
struct Stores {
    fleets: Store<CelldFleet>,
    stateful_sets: Scoped<StatefulSet>,
    deployments: Scoped<Deployment>,
    replica_sets: Scoped<PartialObjectMeta<ReplicaSet>>,
    pods: Scoped<Pod>,
    held_pods: Scoped<Pod>,
    claims: Scoped<PersistentVolumeClaim>,
    services: Scoped<Service>,
    reservations: Store<CelldBucketReservation>,
}

/// The watches that are always cluster-wide: every fleet (for the identity check) and the
/// cluster-scoped reservations.
const CLUSTER_WATCHES: [&str; 2] = ["celldfleets", "celldbucketreservations"];

/// The watches, by the name used in logs and metrics.
const WATCHES: [&str; 9] = [
    "celldfleets",
    "statefulsets",
    "deployments",
    "replicasets",
    "pods",
    "pods-held",
    "persistentvolumeclaims",
    "services",
    "celldbucketreservations",
];

#[derive(Clone, Debug, PartialEq, Eq)]
enum WatchState {
    Listing,
    Ok,
    Failed(String),
}

/// One watch: a resource, in one namespace or (`None`) cluster-wide.
type WatchKey = (&'static str, Option<String>);

/// Health of every watch.
struct Watches {
    states: Mutex<BTreeMap<WatchKey, WatchState>>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl Watches {
    fn new(metrics: Arc<Metrics>, health: Arc<Health>, served: &Served) -> Watches {
        let mut states = BTreeMap::new();
        for w in WATCHES {
            metrics
                .watch_healthy
                .get_or_create(&ResourceLabel { resource: w })
                .set(0);
            let scopes = if CLUSTER_WATCHES.contains(&w) {
                vec![None]
            } else {
                served.watch_scopes()
            };
            for scope in scopes {
                states.insert((w, scope), WatchState::Listing);
            }
        }
        Watches {
            states: Mutex::new(states),
            metrics,
            health,
        }
    }

    fn record<K>(&self, key: &WatchKey, ev: &Result<Event<K>, watcher::Error>) {
        let name = key.0;
        let ns = key.1.as_deref().unwrap_or("<all>");
        let next = match ev {
            Err(e) => Some(WatchState::Failed(e.to_string())),
            Ok(Event::InitDone) | Ok(Event::Apply(_)) | Ok(Event::Delete(_)) => {
                Some(WatchState::Ok)
            }
            Ok(Event::Init) | Ok(Event::InitApply(_)) => None,
        };
        let Some(next) = next else { return };
        let mut states = self.states.lock().expect("watch states");
        let prev = states.insert(key.clone(), next.clone());
        if prev.as_ref() != Some(&next) {
            match &next {
                WatchState::Failed(e) => {
                    self.metrics.error("watch");
                    warn!(watch = name, namespace = ns, error = %e, "watch failed: no fleet is acted on until it recovers");
                }
                WatchState::Ok => info!(watch = name, namespace = ns, "watch listed and running"),
                WatchState::Listing => {}
            }
            // A resource is healthy when its watch in every served namespace is.
            let healthy = i64::from(
                states
                    .iter()
                    .filter(|((n, _), _)| *n == name)
                    .all(|(_, s)| *s == WatchState::Ok),
            );
            self.metrics
                .watch_healthy
                .get_or_create(&ResourceLabel { resource: name })
                .set(healthy);
        }
        if states.values().all(|s| *s == WatchState::Ok) {
            self.health.set_synced();
        }
    }

    /// Ok when every watch has listed and none is failing; else why not.
    #[cfg(test)]
    fn ready(&self) -> Result<(), String> {
        self.ready_where(|_| true)
    }

    /// Ok when the watches a fleet in `namespace` is built from (the cluster-wide ones
    /// and that namespace's) have listed and none is failing. Another served namespace's
    /// failing watch (its Role deleted, say) does not stop healing here: nothing of that
    /// namespace is read for this fleet.
    fn ready_for(&self, namespace: &str) -> Result<(), String> {
        self.ready_where(|scope| scope.is_none_or(|s| s == namespace))
    }

    fn ready_where(&self, covers: impl Fn(Option<&str>) -> bool) -> Result<(), String> {
        let states = self.states.lock().expect("watch states");
        let bad: Vec<String> = states
            .iter()
            .filter(|((_, scope), _)| covers(scope.as_deref()))
            .filter_map(|((n, scope), s)| {
                let n = match scope {
                    Some(ns) => format!("{n} in {ns}"),
                    None => n.to_string(),
                };
                match s {
                    WatchState::Ok => None,
                    WatchState::Listing => Some(format!("{n}: not listed yet")),
                    WatchState::Failed(e) => Some(format!("{n}: {e}")),
                }
            })
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    }
}

/// Shared by every reconcile.
struct Ctx {
    client: Client,
    /// The namespaces whose fleets are reconciled (others are only read, for V2).
    served: Served,
    stores: Stores,
    watches: Arc<Watches>,
    config: Config,
    gate: Gate,
    metrics: Arc<Metrics>,
    events: Events,
    infra: Verifier,
    halt_after: Option<HaltPoint>,
    /// The wake-up each fleet asked for last (for the deadline lag metric).
    wakes: Mutex<HashMap<ObjectRef<CelldFleet>, Timestamp>>,
    /// Whether each fleet was Blocked at its last reconcile.
    blocked: Mutex<HashMap<ObjectRef<CelldFleet>, bool>>,
    /// Consecutive failures per fleet (error back-off).
    failures: Mutex<HashMap<ObjectRef<CelldFleet>, u32>>,
    /// The last "cannot read completely" report per fleet (reported once, not on every
    /// reconcile).
    unreadable: Mutex<HashMap<ObjectRef<CelldFleet>, String>>,
    /// Members' application views.
    observer: Arc<Observer>,
    /// Application observation interval (zero: off).
    application_interval: Duration,
    /// Claim uid -> when this process first saw it Lost (without a break since).
    lost: Mutex<HashMap<String, Timestamp>>,
    /// Consecutive reconciles whose destructive write the fresh read did not confirm.
    holds: Mutex<HashMap<ObjectRef<CelldFleet>, u32>>,
    /// Pod uid -> (failed force deletes in a row, when to try again).
    force_retry: Mutex<HashMap<String, (u32, Timestamp)>>,
    /// The last report of ignored objects per fleet (reported once per change).
    ignored: Mutex<HashMap<ObjectRef<CelldFleet>, Vec<String>>>,
    /// Asks for a reconcile of a fleet (a finished application observation).
    poke: tokio::sync::mpsc::UnboundedSender<ObjectRef<CelldFleet>>,
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
    FreshRead(#[source] kube::Error),
}

fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Timestamp(ms)
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A watch feeding a store, recording its health, yielding every touched object.
fn watched<K>(
    key: WatchKey,
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    writer: reflector::store::Writer<K>,
    ctx_watches: Arc<Watches>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    events
        .map(move |ev| {
            ctx_watches.record(&key, &ev);
            ev
        })
        .modify(|o| o.managed_fields_mut().clear())
        .reflect(writer)
        .touched_objects()
}

/// A namespaced resource watched in every served namespace (one watch and store each),
/// as one cache and one stream of touched objects.
fn served_watch<K>(
    name: &'static str,
    client: &Client,
    served: &Served,
    config: &watcher::Config,
    watches: &Arc<Watches>,
) -> (Scoped<K>, BoxStream<'static, Result<K, watcher::Error>>)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let mut stores = Vec::new();
    let mut streams = Vec::new();
    for scope in served.watch_scopes() {
        let (store, writer) = reflector::store::<K>();
        let events = watch_fn(api::<K>(client, scope.as_deref()), config.clone()).default_backoff();
        streams.push(watched((name, scope.clone()), events, writer, watches.clone()).boxed());
        stores.push((scope, store));
    }
    (
        Scoped::new(stores),
        futures::stream::select_all(streams).boxed(),
    )
}

fn label<'a, K: Resource>(o: &'a K, key: &str) -> Option<&'a str> {
    o.meta().labels.as_ref()?.get(key).map(String::as_str)
}

/// Fleets in `ns` whose identity is `identity` or whose name is `name`.
fn fleets_matching(
    fleets: &Store<CelldFleet>,
    ns: Option<&str>,
    matches: impl Fn(&CelldFleet) -> bool,
) -> Vec<ObjectRef<CelldFleet>> {
    fleets
        .state()
        .iter()
        .filter(|f| f.metadata.namespace.as_deref() == ns && matches(f))
        .map(|f| ObjectRef::from_obj(&**f))
        .collect()
}

impl Controller {
    /// A controller with these settings; nothing runs until [`Controller::run`].
    pub fn new(s: Settings) -> Controller {
        Controller { s }
    }

    /// Watches and reconciles until `shutdown` turns true (running reconciles finish).
    pub async fn run(self, shutdown: tokio_watch::Receiver<bool>) -> Result<()> {
        let s = self.s;
        let client = &s.client;
        let served = &s.served;
        let has_identity = watcher::Config::default().labels(IDENTITY);
        let watches = Arc::new(Watches::new(s.metrics.clone(), s.health.clone(), served));

        let (fleets, fleets_w) = reflector::store::<CelldFleet>();
        let (reservations, res_w) = reflector::store::<CelldBucketReservation>();
        // Every fleet of the cluster, served or not: rule V2 compares identities across
        // all of them (the install grants this read cluster-wide).
        let fleet_stream = watched(
            ("celldfleets", None),
            watch_fn(
                Api::<CelldFleet>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff(),
            fleets_w,
            watches.clone(),
        );
        let (stateful_sets, sts_stream) =
            served_watch::<StatefulSet>("statefulsets", client, served, &has_identity, &watches);
        let (deployments, dep_stream) =
            served_watch::<Deployment>("deployments", client, served, &has_identity, &watches);
        let (replica_sets, rs_stream) = served_watch::<PartialObjectMeta<ReplicaSet>>(
            "replicasets",
            client,
            served,
            &has_identity,
            &watches,
        );
        let (pods, pod_stream) =
            served_watch::<Pod>("pods", client, served, &has_identity, &watches);
        let (held_pods, held_stream) = served_watch::<Pod>(
            "pods-held",
            client,
            served,
            &watcher::Config::default().labels(REPLACEMENT_INDEX),
            &watches,
        );
        // All claims: another fleet's claim at a member name carries no label of ours.
        let (claims, claim_stream) = served_watch::<PersistentVolumeClaim>(
            "persistentvolumeclaims",
            client,
            served,
            &watcher::Config::default(),
            &watches,
        );
        let (services, svc_stream) =
            served_watch::<Service>("services", client, served, &has_identity, &watches);
        let res_stream = watched(
            ("celldbucketreservations", None),
            watch_fn(
                Api::<CelldBucketReservation>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff(),
            res_w,
            watches.clone(),
        );

        let stores = Stores {
            fleets: fleets.clone(),
            stateful_sets,
            deployments,
            replica_sets,
            pods,
            held_pods,
            claims,
            services,
            reservations,
        };
        let (poke_tx, poke_rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = Arc::new(Ctx {
            client: s.client.clone(),
            served: s.served.clone(),
            stores,
            watches,
            config: s.config.clone(),
            gate: s.gate.clone(),
            metrics: s.metrics.clone(),
            events: Events::new(s.client.clone(), &s.identity, s.metrics.clone()),
            infra: Verifier::default(),
            halt_after: s.halt_after,
            wakes: Mutex::new(HashMap::new()),
            blocked: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            unreadable: Mutex::new(HashMap::new()),
            observer: Arc::new(Observer::default()),
            application_interval: s.application_interval,
            lost: Mutex::new(HashMap::new()),
            force_retry: Mutex::new(HashMap::new()),
            holds: Mutex::new(HashMap::new()),
            ignored: Mutex::new(HashMap::new()),
            poke: poke_tx,
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

        let by_identity = {
            let fleets = fleets.clone();
            move |o: &dyn ResourceLike| -> Vec<ObjectRef<CelldFleet>> {
                let id = o.identity();
                let name = o.name();
                fleets_matching(&fleets, o.namespace(), |f| {
                    id.is_some_and(|id| id == f.spec.identity)
                        || o.names_fleet(f.metadata.name.as_deref().unwrap_or_default(), name)
                })
            }
        };
        let m1 = by_identity.clone();
        let m2 = by_identity.clone();
        let m3 = by_identity.clone();
        let m4 = by_identity.clone();
        let m5 = by_identity.clone();
        let m6 = by_identity.clone();
        let m7 = by_identity;
        // A reservation concerns the fleets whose bucket and prefix it names.
        let m8 = {
            let fleets = fleets.clone();
            move |r: CelldBucketReservation| -> Vec<ObjectRef<CelldFleet>> {
                let name = r.metadata.name.unwrap_or_default();
                fleets
                    .state()
                    .iter()
                    .filter(|f| {
                        reservation_name(&f.spec.storage.bucket, f.spec.storage.prefix.as_deref())
                            == name
                    })
                    .map(|f| ObjectRef::from_obj(&**f))
                    .collect()
            }
        };

        let mut shutdown = shutdown;
        let controller = controller::Controller::for_stream(fleet_stream, fleets)
            .watches_stream(sts_stream, move |o: StatefulSet| m1(&Obj::workload(&o)))
            .watches_stream(dep_stream, move |o: Deployment| m2(&Obj::workload(&o)))
            .watches_stream(rs_stream, move |o: PartialObjectMeta<ReplicaSet>| {
                m3(&Obj::labelled(&o))
            })
            .watches_stream(pod_stream, move |o: Pod| m4(&Obj::labelled(&o)))
            .watches_stream(held_stream, move |o: Pod| m5(&Obj::held(&o)))
            .watches_stream(claim_stream, move |o: PersistentVolumeClaim| {
                m6(&Obj::claim(&o))
            })
            .watches_stream(svc_stream, move |o: Service| m7(&Obj::service(&o)))
            .watches_stream(res_stream, m8)
            .reconcile_all_on(became_leader)
            .reconcile_on(poked)
            .graceful_shutdown_on(async move {
                let _ = shutdown.wait_for(|s| *s).await;
            })
            .with_config(
                controller::Config::default()
                    .concurrency(4)
                    .debounce(Duration::from_millis(250)),
            );
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

/// The facts a mapper needs of a watched object.
trait ResourceLike {
    fn namespace(&self) -> Option<&str>;
    fn name(&self) -> &str;
    fn identity(&self) -> Option<&str>;
    /// Whether the object's name alone ties it to fleet `fleet`.
    fn names_fleet(&self, fleet: &str, name: &str) -> bool;
}

/// A watched object reduced to what the mappers read.
struct Obj<'a> {
    namespace: Option<&'a str>,
    name: &'a str,
    identity: Option<&'a str>,
    by_name: fn(&str, &str) -> bool,
}

impl<'a> Obj<'a> {
    fn base<K: Resource>(o: &'a K, identity_key: &str, by_name: fn(&str, &str) -> bool) -> Obj<'a> {
        Obj {
            namespace: o.meta().namespace.as_deref(),
            name: o.meta().name.as_deref().unwrap_or_default(),
            identity: label(o, identity_key),
            by_name,
        }
    }

    /// A workload: identity label, or named after the fleet.
    fn workload<K: Resource>(o: &'a K) -> Obj<'a> {
        Obj::base(o, IDENTITY, |fleet, name| fleet == name)
    }

    /// Anything tied to its fleet by the identity label only.
    fn labelled<K: Resource>(o: &'a K) -> Obj<'a> {
        Obj::base(o, IDENTITY, |_, _| false)
    }

    /// A Pod held by a handoff: the index label carries the identity.
    fn held(o: &'a Pod) -> Obj<'a> {
        Obj::base(o, REPLACEMENT_INDEX, |_, _| false)
    }

    /// A claim: identity label, or a member claim name of the fleet (another fleet's
    /// disk at one of our names).
    fn claim(o: &'a PersistentVolumeClaim) -> Obj<'a> {
        Obj::base(o, IDENTITY, |fleet, name| {
            claim_ordinal(fleet, name).is_some()
        })
    }

    /// A Service: identity label, or one of the two names the generator gives them.
    fn service(o: &'a Service) -> Obj<'a> {
        Obj::base(o, IDENTITY, |fleet, name| {
            name == fleet || name.strip_suffix("-peers") == Some(fleet)
        })
    }
}

impl ResourceLike for Obj<'_> {
    fn namespace(&self) -> Option<&str> {
        self.namespace
    }
    fn name(&self) -> &str {
        self.name
    }
    fn identity(&self) -> Option<&str> {
        self.identity
    }
    fn names_fleet(&self, fleet: &str, name: &str) -> bool {
        (self.by_name)(fleet, name)
    }
}

fn error_policy(fleet: Arc<CelldFleet>, err: &ReconcileError, ctx: Arc<Ctx>) -> KAction {
    let key = ObjectRef::from_obj(&*fleet);
    let n = {
        let mut f = ctx.failures.lock().expect("failures");
        let n = f.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = Duration::from_secs((1u64 << n.min(8)).min(300));
    warn!(fleet = %key, error = %err, retry_in = ?delay, "reconcile failed");
    KAction::requeue(delay)
}

/// Everything of one fleet from the caches, cloned (the caches keep changing).
fn gather(stores: &Stores, fleet: &CelldFleet) -> Gathered {
    let ns = fleet.metadata.namespace.as_deref();
    let name = fleet.metadata.name.as_deref().unwrap_or_default();
    let identity = fleet.spec.identity.as_str();
    let key = |n: &str| -> (Option<&str>, String) { (ns, n.to_string()) };
    let (kns, kname) = key(name);
    let sts = stores
        .stateful_sets
        .get(&ObjectRef::new(&kname).within(kns.unwrap_or_default()));
    let dep = stores
        .deployments
        .get(&ObjectRef::new(&kname).within(kns.unwrap_or_default()));
    let in_ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.namespace.as_deref() == ns
    };
    let mut pods: Vec<Pod> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let in_fleet_ns = ns.unwrap_or_default();
    for p in stores
        .pods
        .state_in(in_fleet_ns)
        .iter()
        .chain(stores.held_pods.state_in(in_fleet_ns).iter())
    {
        let m = &p.metadata;
        let ours = m.labels.as_ref().is_some_and(|l| {
            l.get(IDENTITY).map(String::as_str) == Some(identity)
                || l.get(REPLACEMENT_INDEX).map(String::as_str) == Some(identity)
        });
        if in_ns(m) && ours && seen.insert(m.uid.clone()) {
            pods.push((**p).clone());
        }
    }
    let claims = stores
        .claims
        .state_in(in_fleet_ns)
        .iter()
        .filter(|c| in_ns(&c.metadata) && fresh::concerns(name, identity, c))
        .map(|c| (**c).clone())
        .collect();
    let replica_sets = stores
        .replica_sets
        .state_in(in_fleet_ns)
        .iter()
        .filter(|r| {
            in_ns(&r.metadata)
                && r.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(IDENTITY))
                    .map(String::as_str)
                    == Some(identity)
        })
        .map(|r| ReplicaSet {
            metadata: r.metadata.clone(),
            ..ReplicaSet::default()
        })
        .collect();
    Gathered {
        workload_sts: sts,
        workload_dep: dep,
        pods,
        claims,
        replica_sets,
        reservation: None,
    }
}

/// The snapshot of one fleet from gathered objects (caches or a fresh read).
fn snapshot_of(
    ctx: &Ctx,
    fleet: &CelldFleet,
    g: &Gathered,
    now: Timestamp,
) -> Result<Snapshot, ObserveError> {
    let workload = if fleet.spec.is_stateful_set() {
        g.workload_sts
            .as_deref()
            .map(WorkloadObject::StatefulSet)
            .or(g.workload_dep.as_deref().map(WorkloadObject::Deployment))
    } else {
        g.workload_dep
            .as_deref()
            .map(WorkloadObject::Deployment)
            .or(g.workload_sts.as_deref().map(WorkloadObject::StatefulSet))
    };
    let svc_ns = fleet.metadata.namespace.clone().unwrap_or_default();
    let infrastructure = ctx.infra.verify(fleet, |n| {
        ctx.stores
            .services
            .get(&ObjectRef::new(n).within(&svc_ns))
            .filter(|s| label(&**s, IDENTITY) == Some(fleet.spec.identity.as_str()))
    });
    let zones = BTreeMap::new();
    let capacity = CapacitySignal::default();
    let all = ctx.stores.fleets.state();
    let owner = observe::identity_owner(fleet, all.iter().map(|f| f.as_ref()));
    let lost_since = track_lost(&ctx.lost, &g.claims, now);
    let force_retry: BTreeMap<String, Timestamp> = ctx
        .force_retry
        .lock()
        .expect("force retry")
        .iter()
        .map(|(uid, (_, t))| (uid.clone(), *t))
        .collect();
    // The fresh read brings its own; the caches' otherwise.
    let reservation = match &g.reservation {
        Some(fresh) => fresh.clone(),
        None => ctx
            .stores
            .reservations
            .get(&ObjectRef::new(&reservation_name(
                &fleet.spec.storage.bucket,
                fleet.spec.storage.prefix.as_deref(),
            ))),
    };
    observe::snapshot(Inputs {
        fleet,
        workload,
        pods: &g.pods,
        claims: &g.claims,
        replica_sets: &g.replica_sets,
        node_zones: &zones,
        infrastructure: &infrastructure,
        capacity: &capacity,
        identity_conflict: owner.as_deref(),
        lost_since: &lost_since,
        force_delete_retry: &force_retry,
        reservation: Some(reservation.as_deref()),
    })
}

/// Remembers when each Lost claim was first seen Lost (forgotten once it is not), and
/// returns the entries of these claims.
fn track_lost(
    lost: &Mutex<HashMap<String, Timestamp>>,
    claims: &[PersistentVolumeClaim],
    now: Timestamp,
) -> BTreeMap<String, Timestamp> {
    let mut map = lost.lock().expect("lost claims");
    let mut out = BTreeMap::new();
    for c in claims {
        let Some(uid) = c.metadata.uid.clone() else {
            continue;
        };
        if c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            let since = *map.entry(uid.clone()).or_insert(now);
            out.insert(uid, since);
        } else {
            map.remove(&uid);
        }
    }
    out
}

/// Reads the fleet fresh from the API server, decides again and compares (see
/// `crate::confirm`). Also returns the fresh Pod a confirmed handoff step needs.
async fn confirm_fresh(
    ctx: &Ctx,
    fleet: &CelldFleet,
    action: &Action,
    now: Timestamp,
) -> Result<
    (
        Confirmation,
        Option<Arc<Pod>>,
        Option<(Plan, Arc<CelldFleet>)>,
    ),
    kube::Error,
> {
    ctx.metrics.fresh_reads.inc();
    let Some((fresh_fleet, g)) = fresh::read(&ctx.client, fleet).await? else {
        return Ok((
            Confirmation::Hold("the CelldFleet is gone from the API server".into()),
            None,
            None,
        ));
    };
    let snapshot = match snapshot_of(ctx, &fresh_fleet, &g, now) {
        Ok(s) => s,
        Err(e) => return Ok((Confirmation::Hold(e.to_string()), None, None)),
    };
    let plan = crate::decide(&snapshot, now, &ctx.config);
    let c = confirm::confirm(action, &plan);
    let pod_name = match &c {
        Confirmation::Confirmed(a) | Confirmation::Instead(a) => match a {
            Action::StartHandoff(h) => Some(h.pod.clone()),
            Action::ReleaseHandoff { name, .. } | Action::AbortHandoff { name, .. } => {
                Some(name.clone())
            }
            _ => None,
        },
        Confirmation::Hold(_) => None,
    };
    let pod = pod_name.and_then(|n| {
        g.pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(n.as_str()))
            .cloned()
            .map(Arc::new)
    });
    Ok((c, pod, Some((plan, Arc::new(fresh_fleet)))))
}

/// Logs and records an Event when the objects `decide` ignored changed.
async fn report_ignored(ctx: &Ctx, key: &ObjectRef<CelldFleet>, fleet: &CelldFleet, plan: &Plan) {
    let changed = {
        let mut map = ctx.ignored.lock().expect("ignored");
        if plan.ignored.is_empty() {
            map.remove(key);
            false
        } else {
            map.insert(key.clone(), plan.ignored.clone()).as_ref() != Some(&plan.ignored)
        }
    };
    if changed {
        let msg = format!("Ignored, never acted on: {}", plan.ignored.join("; "));
        warn!(fleet = %key, ignored = ?plan.ignored, "objects outside the member range are ignored");
        ctx.events
            .publish(fleet, true, "ObjectsIgnored", "Report", msg)
            .await;
    }
}

/// Turns `wake_at` into the controller's next step, remembering it for the lag metric.
fn next_step(
    ctx: &Ctx,
    key: &ObjectRef<CelldFleet>,
    plan_wake: Option<Timestamp>,
    now: Timestamp,
) -> KAction {
    let mut wakes = ctx.wakes.lock().expect("wakes");
    match plan_wake {
        Some(t) => {
            wakes.insert(key.clone(), t);
            let ms = (t - now).millis().max(1) as u64;
            KAction::requeue(Duration::from_millis(ms))
        }
        None => {
            wakes.remove(key);
            KAction::await_change()
        }
    }
}

async fn reconcile(fleet: Arc<CelldFleet>, ctx: Arc<Ctx>) -> Result<KAction, ReconcileError> {
    let key = ObjectRef::from_obj(&*fleet);
    // Fleets outside the served namespaces are watched only for the identity check.
    if !ctx
        .served
        .contains(fleet.metadata.namespace.as_deref().unwrap_or_default())
    {
        return Ok(KAction::await_change());
    }
    if !ctx.gate.may_act() {
        ctx.metrics.reconcile("standby");
        return Ok(KAction::await_change());
    }
    if let Err(why) = ctx
        .watches
        .ready_for(fleet.metadata.namespace.as_deref().unwrap_or_default())
    {
        ctx.metrics.reconcile("unsynced");
        debug!(fleet = %key, why = %why, "caches incomplete: not acting");
        return Ok(KAction::requeue(Duration::from_secs(1)));
    }
    // The cache may hold a newer version than the trigger.
    let fleet = ctx.stores.fleets.get(&key).unwrap_or(fleet);
    let g = gather(&ctx.stores, &fleet);
    let now = now();
    let snapshot = match snapshot_of(&ctx, &fleet, &g, now) {
        Ok(s) => s,
        Err(e) => {
            ctx.metrics.reconcile("unobservable");
            ctx.metrics.error("observe");
            let msg = e.to_string();
            let new = ctx
                .unreadable
                .lock()
                .expect("unreadable")
                .insert(key.clone(), msg.clone())
                .is_none_or(|old| old != msg);
            if new {
                warn!(fleet = %key, error = %e, "cannot read the fleet completely: not acting");
                ctx.events
                    .publish(&fleet, true, "ObservationIncomplete", "Report", msg)
                    .await;
            }
            return Ok(KAction::await_change());
        }
    };
    ctx.unreadable.lock().expect("unreadable").remove(&key);
    let started = std::time::Instant::now();
    let mut plan = crate::decide(&snapshot, now, &ctx.config);
    ctx.metrics
        .decide_seconds
        .observe(started.elapsed().as_secs_f64());
    let due = ctx.wakes.lock().expect("wakes").get(&key).copied();
    report_ignored(&ctx, &key, &fleet, &plan).await;

    // A destructive write is made only if `decide` reaches it again on a fresh read
    // from the API server (see `crate::confirm`); the write then carries the fresh
    // preconditions, and the fresh Pod for a handoff.
    let mut fresh_pod = None;
    let mut fleet = fleet;
    if let Some(action) = plan.action.clone()
        && confirm::needs_confirmation(&action)
    {
        match confirm_fresh(&ctx, &fleet, &action, now).await {
            Ok((Confirmation::Confirmed(a) | Confirmation::Instead(a), pod, fresh)) => {
                if a != action {
                    info!(fleet = %key, cached = ?action, fresh = ?a, "the fresh read changed the write");
                }
                // The fresh plan whole (its rule, event, status and wake-up describe the
                // write actually made), against the fresh CelldFleet.
                if let Some((p, f)) = fresh {
                    plan = p;
                    fleet = f;
                }
                plan.action = Some(a);
                fresh_pod = pod;
                ctx.holds.lock().expect("holds").remove(&key);
            }
            Ok((Confirmation::Hold(why), _, fresh)) => {
                ctx.metrics.action(act::kind(&action), "unconfirmed");
                ctx.metrics.reconcile("unconfirmed");
                info!(fleet = %key, rule = plan.rule, action = ?action, why = %why, "not confirmed on a fresh read: no write");
                // Report what the fresh read shows. Look again once the caches had time
                // to catch up, backing off while they keep disagreeing (a lasting cause,
                // such as an unlabelled workload named like the fleet, must not become a
                // read every few seconds); a watch event still triggers a reconcile.
                if let Some((p, f)) = fresh {
                    write_status(&ctx, &f, &p).await?;
                }
                let n = {
                    let mut holds = ctx.holds.lock().expect("holds");
                    let n = holds.entry(key.clone()).or_insert(0);
                    *n = n.saturating_add(1);
                    *n
                };
                let secs = (5u64 << (n - 1).min(6)).min(300);
                return Ok(KAction::requeue(Duration::from_secs(secs)));
            }
            Err(e) => {
                ctx.metrics.reconcile("error");
                ctx.metrics.error("fresh_read");
                return Err(ReconcileError::FreshRead(e));
            }
        }
    }

    // Not held (a held reconcile returned above).
    ctx.holds.lock().expect("holds").remove(&key);

    if let Some(action) = &plan.action {
        let kind = act::kind(action);
        let pod = fresh_pod.or_else(|| pod_named(&ctx.stores, &fleet, action));
        let actor = Actor {
            client: &ctx.client,
            fleet: &fleet,
            pod,
            gate: &ctx.gate,
            halt_after: ctx.halt_after,
        };
        match actor.execute(action).await {
            Ok(()) => {
                ctx.metrics.action(kind, "ok");
                ctx.metrics.reconcile("acted");
                let after = crate::time::Timestamp(self::now().0);
                if let Some(due) = due.filter(|d| *d <= after) {
                    ctx.metrics
                        .deadline_lag_seconds
                        .observe((after - due).millis() as f64 / 1000.0);
                }
                info!(
                    fleet = %key, rule = plan.rule, action = kind, detail = ?action,
                    deadline = due.map(|d| d.rfc3339()),
                    "acted"
                );
                record_action_event(&ctx, &fleet, &plan, action).await;
                ctx.failures.lock().expect("failures").remove(&key);
                if let Action::ForceDeletePod { uid, .. } = action {
                    ctx.force_retry.lock().expect("force retry").remove(uid);
                }
            }
            Err(ActError::NotLeader) => {
                ctx.metrics.action(kind, "not_leader");
                ctx.metrics.reconcile("standby");
                return Ok(KAction::await_change());
            }
            Err(e @ ActError::Conflict(_)) => {
                ctx.metrics.action(kind, e.outcome());
                ctx.metrics.reconcile("conflict");
                info!(fleet = %key, rule = plan.rule, action = kind, error = %e, "precondition failed; looking again");
                return Ok(KAction::requeue(Duration::from_secs(2)));
            }
            Err(e) if matches!(action, Action::ForceDeletePod { .. }) => {
                // Rule F1 must not starve the fleet's later rules: the Pod waits out a
                // back-off (5 s doubling to 5 min) and the fleet is looked at again now.
                ctx.metrics.action(kind, e.outcome());
                ctx.metrics.reconcile("error");
                ctx.metrics.error("api");
                if let Action::ForceDeletePod { uid, name } = action {
                    let mut m = ctx.force_retry.lock().expect("force retry");
                    let n = m.get(uid).map_or(0, |(n, _)| *n).saturating_add(1);
                    let wait = (5_000i64 << n.min(6)).min(300_000);
                    m.insert(uid.clone(), (n, now + crate::time::Span(wait)));
                    warn!(fleet = %key, pod = %name, error = %e, retry_in_ms = wait, "force delete failed; retried on a back-off");
                }
                return Ok(KAction::requeue(Duration::from_secs(1)));
            }
            Err(e) => {
                ctx.metrics.action(kind, e.outcome());
                ctx.metrics.reconcile("error");
                ctx.metrics.error("api");
                if let ActError::ManagerConflict(m) = &e {
                    ctx.events
                        .publish(
                            &fleet,
                            true,
                            "ReplicasOwnedElsewhere",
                            kind,
                            format!("The healer did not change spec.replicas: another field manager owns it ({m}). Stop that writer (e.g. remove replicas from Git) so the healer can own the field."),
                        )
                        .await;
                }
                return Err(ReconcileError::Act {
                    action: kind,
                    source: e,
                });
            }
        }
    } else {
        ctx.metrics.reconcile("idle");
        ctx.failures.lock().expect("failures").remove(&key);
    }

    let app_next = application(&ctx, &key, &fleet, &g, &mut plan);
    // A write to the CelldFleet itself (its finalizer) moved its resourceVersion on:
    // the status follows from the reconcile its watch event triggers.
    let fleet_written = matches!(
        plan.action,
        Some(Action::AddFleetFinalizer { .. } | Action::RemoveFleetFinalizer { .. })
    );
    if !fleet_written {
        write_status(&ctx, &fleet, &plan).await?;
    }
    let mut step = next_step(&ctx, &key, plan.wake_at, now);
    if plan.rule == "V2" && plan.wake_at.is_none() {
        // A fleet blocked by an older one with its identity has no event of its own
        // when that fleet goes: look again now and then (cache only, no request).
        step = KAction::requeue(Duration::from_secs(30));
    }
    Ok(match app_next {
        Some(d)
            if plan
                .wake_at
                .is_none_or(|w| (w - now).millis() as u128 > d.as_millis()) =>
        {
            KAction::requeue(d)
        }
        _ => step,
    })
}

/// Puts the latest application view into the status, starts the next observation in
/// the background when it is due, and says when the one after is due.
fn application(
    ctx: &Arc<Ctx>,
    key: &ObjectRef<CelldFleet>,
    fleet: &CelldFleet,
    g: &Gathered,
    plan: &mut Plan,
) -> Option<Duration> {
    let interval = ctx.application_interval;
    if interval.is_zero() || fleet.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let view = ctx.observer.view(key);
    // A fleet that has not converged (members starting, moving cells, unreachable) is
    // looked at again sooner.
    let interval = match &view {
        Some(v) if v.status.converged != "True" => interval.min(Duration::from_secs(5)),
        _ => interval,
    };
    if let Some(v) = &view {
        plan.status.application = Some(v.status.clone());
        plan.status.runtime_versions = v.versions.clone();
    }
    if plan.action.is_none() && ctx.observer.start(key, interval) {
        let identity = fleet.spec.identity.clone();
        // Only the fleet's own members: Pods its workload controls (directly, or through
        // one of its ReplicaSets), never another fleet's that shares the identity.
        let owners: std::collections::HashSet<&str> = g
            .workload_sts
            .iter()
            .filter_map(|s| s.metadata.uid.as_deref())
            .chain(g.replica_sets.iter().filter_map(|r| {
                let dep = g.workload_dep.as_ref()?.metadata.uid.as_deref()?;
                r.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.controller == Some(true) && o.uid == dep)
                    .then_some(r.metadata.uid.as_deref())
                    .flatten()
            }))
            .collect();
        let members: Vec<Pod> = g
            .pods
            .iter()
            .filter(|p| label(*p, IDENTITY) == Some(identity.as_str()))
            .filter(|p| {
                p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.controller == Some(true) && owners.contains(o.uid.as_str()))
            })
            .cloned()
            .collect();
        let expected = plan.status.applied_members.unwrap_or(0).max(0) as usize;
        let (observer, poke, key) = (ctx.observer.clone(), ctx.poke.clone(), key.clone());
        let before = view.map(|v| (v.status, v.versions));
        tokio::spawn(async move {
            let view = super::members::observe(members, expected).await;
            let changed = before.as_ref() != Some(&(view.status.clone(), view.versions.clone()));
            observer.finish(key.clone(), view);
            // Only a changed view needs a reconcile (to write it into the status).
            if changed {
                let _ = poke.send(key);
            }
        });
        // The next observation is due one interval from now.
        return Some(interval);
    }
    if ctx.observer.in_flight(key) {
        return None;
    }
    view.map(|v| {
        interval
            .saturating_sub(v.at.elapsed())
            .max(Duration::from_millis(100))
    })
}

/// The cached Pod an action names (for handoff steps and release).
fn pod_named(stores: &Stores, fleet: &CelldFleet, action: &Action) -> Option<Arc<Pod>> {
    let name = match action {
        Action::StartHandoff(h) => &h.pod,
        Action::ReleaseHandoff { name, .. } | Action::AbortHandoff { name, .. } => name,
        _ => return None,
    };
    let ns = fleet.metadata.namespace.as_deref().unwrap_or_default();
    let r = ObjectRef::new(name).within(ns);
    stores.pods.get(&r).or_else(|| stores.held_pods.get(&r))
}

async fn record_action_event(ctx: &Ctx, fleet: &CelldFleet, plan: &Plan, action: &Action) {
    let kind = act::kind(action);
    let message = plan
        .status
        .conditions
        .first()
        .map(|c| c.message.clone())
        .unwrap_or_default();
    match &plan.event {
        Some(e) => {
            ctx.events
                .publish(
                    fleet,
                    e.type_ == "Warning",
                    e.reason,
                    kind,
                    e.message.clone(),
                )
                .await
        }
        None => {
            let (warning, reason) = match action {
                Action::AddFleetFinalizer { .. } => (false, "FinalizerAdded"),
                Action::RemoveFleetFinalizer { .. } => (false, "FleetReleased"),
                Action::SetReplicas { from, replicas, .. } if replicas > from => {
                    (false, "MembersAdded")
                }
                Action::SetReplicas { .. } => (false, "MemberRemoved"),
                Action::ForceDeletePod { .. } => (true, "MemberForceDeleted"),
                Action::DeletePod { .. } => (false, "MemberPodDeleted"),
                Action::StartHandoff(_) => (true, "DiskHandoffStarted"),
                Action::DeleteClaim { .. } => (true, "DiskDeleted"),
                Action::ReleaseHandoff { .. } => (false, "DiskHandoffFinished"),
                Action::AbortHandoff { .. } => (true, "DiskHandoffAborted"),
                Action::DeleteWorkload { .. } => (false, "WorkloadDeleted"),
            };
            let detail = match action {
                Action::SetReplicas {
                    kind,
                    name,
                    from,
                    replicas,
                    ..
                } => format!(
                    "{} {name}: spec.replicas {from} -> {replicas}. {message}",
                    kind.as_str()
                ),
                _ => message,
            };
            ctx.events
                .publish(fleet, warning, reason, kind, detail)
                .await
        }
    }
}

/// Patches the status (merge patch on the status subresource) when it changed, records
/// an Event when the Blocked condition changed, and updates the blocked-fleets gauge.
async fn write_status(ctx: &Ctx, fleet: &CelldFleet, plan: &Plan) -> Result<(), ReconcileError> {
    let key = ObjectRef::from_obj(fleet);
    let old = fleet.status.clone().unwrap_or_default();
    let new = &plan.status;
    let blocked_of = |s: &CelldFleetStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "Blocked")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let was = blocked_of(&old);
    let is = blocked_of(new);
    if &old != new {
        let old_v = serde_json::to_value(&old).unwrap_or(Value::Null);
        let new_v = serde_json::to_value(new).unwrap_or(Value::Null);
        if let Some(diff) = merge_diff(&old_v, &new_v) {
            // The resourceVersion the status was computed from is a precondition: a
            // replica deposed since it read the fleet (or one with a lagging cache)
            // gets a conflict instead of overwriting a newer status.
            let body = serde_json::json!({
                "metadata": {"resourceVersion": fleet.metadata.resource_version},
                "status": diff,
            });
            let api: Api<CelldFleet> = Api::namespaced(
                ctx.client.clone(),
                fleet.metadata.namespace.as_deref().unwrap_or_default(),
            );
            if !ctx.gate.may_act() {
                return Ok(());
            }
            let r = api
                .patch_status(
                    &fleet.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&body),
                )
                .await;
            match r {
                Ok(_) => {
                    ctx.metrics.status_writes.inc();
                }
                // The fleet moved on since it was read (a lagging cache, another writer):
                // its watch event brings a reconcile with the newer version.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    debug!(fleet = %key, "status not written: the CelldFleet changed since it was read");
                    return Ok(());
                }
                Err(e) => {
                    ctx.metrics.error("status");
                    return Err(ReconcileError::Status(e));
                }
            }
        }
    }
    // A change of Blocked: its status flipped, or it stays True for another reason.
    // (While it is False its reason follows every phase of the fleet; those are not
    // changes of Blocked.)
    let changed = match (&was, &is) {
        (Some((s1, r1, _)), Some((s2, r2, _))) => s1 != s2 || (s2 == "True" && r1 != r2),
        (None, Some((s, _, _))) => s == "True",
        _ => false,
    };
    if changed && let Some((status, reason, message)) = &is {
        let warning = status == "True";
        let note = if warning {
            format!("Blocked: {message}")
        } else {
            format!("No longer blocked: {message}")
        };
        ctx.events
            .publish(fleet, warning, reason, "Report", note)
            .await;
    }
    let blocked_now = is.as_ref().is_some_and(|(s, _, _)| s == "True");
    let count = {
        let mut blocked = ctx.blocked.lock().expect("blocked");
        blocked.insert(key, blocked_now);
        blocked.values().filter(|b| **b).count()
    };
    ctx.metrics.blocked_fleets.set(count as i64);
    forget_gone(ctx);
    Ok(())
}

/// Drops what the controller remembers of fleets, Pods and claims that are gone, so no
/// per-object map outgrows the cluster. Scans a cache only when a map may hold such an
/// entry, and never while holding another lock.
fn forget_gone(ctx: &Ctx) {
    let live: std::collections::HashSet<ObjectRef<CelldFleet>> = ctx
        .stores
        .fleets
        .state()
        .iter()
        .map(|f| ObjectRef::from_obj(&**f))
        .collect();
    ctx.blocked
        .lock()
        .expect("blocked")
        .retain(|k, _| live.contains(k));
    ctx.failures
        .lock()
        .expect("failures")
        .retain(|k, _| live.contains(k));
    ctx.wakes
        .lock()
        .expect("wakes")
        .retain(|k, _| live.contains(k));
    ctx.unreadable
        .lock()
        .expect("unreadable")
        .retain(|k, _| live.contains(k));
    ctx.ignored
        .lock()
        .expect("ignored")
        .retain(|k, _| live.contains(k));
    ctx.holds
        .lock()
        .expect("holds")
        .retain(|k, _| live.contains(k));
    ctx.observer.retain(&live);
    if !ctx.force_retry.lock().expect("force retry").is_empty() {
        let pods: std::collections::HashSet<String> = ctx
            .stores
            .pods
            .state()
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        ctx.force_retry
            .lock()
            .expect("force retry")
            .retain(|uid, _| pods.contains(uid));
    }
    if !ctx.lost.lock().expect("lost claims").is_empty() {
        let claims: std::collections::HashSet<String> = ctx
            .stores
            .claims
            .state()
            .iter()
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        ctx.lost
            .lock()
            .expect("lost claims")
            .retain(|uid, _| claims.contains(uid));
    }
}

/// An RFC 7396 merge patch turning `old` into `new`, or None when they are equal.
/// Removed keys become `null`; arrays and scalars are replaced whole.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_diff(ov, nv) {
                            out.insert(k.clone(), d);
                        }
                    }
                    None => {
                        out.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_fleet_is_acted_on_until_every_watch_listed_and_while_one_fails() {
        let health = Arc::new(Health::default());
        let w = Watches::new(Arc::new(Metrics::new()), health.clone(), &Served::All);
        let done: Result<Event<Pod>, watcher::Error> = Ok(Event::InitDone);
        for name in &WATCHES[1..] {
            w.record(&(*name, None), &done);
        }
        assert!(
            w.ready()
                .unwrap_err()
                .contains("celldfleets: not listed yet")
        );
        assert!(!health.synced());
        w.record(&("celldfleets", None), &done);
        assert_eq!(w.ready(), Ok(()));
        assert!(health.synced());
        let failed: Result<Event<Pod>, watcher::Error> = Err(watcher::Error::NoResourceVersion);
        w.record(&("pods", None), &failed);
        assert!(w.ready().unwrap_err().starts_with("pods: "));
        // A re-list in progress keeps the failure; its end clears it.
        w.record::<Pod>(&("pods", None), &Ok(Event::Init));
        assert!(w.ready().is_err());
        w.record(&("pods", None), &done);
        assert_eq!(w.ready(), Ok(()));
    }

    /// Served namespaces: each has its own watch of each namespaced resource, and every
    /// one of them must have listed; fleets and reservations stay one cluster-wide watch.
    #[test]
    fn every_served_namespace_must_list() {
        let health = Arc::new(Health::default());
        let served = Served::new(&["b".into(), "a".into()]).unwrap();
        let w = Watches::new(Arc::new(Metrics::new()), health.clone(), &served);
        let done: Result<Event<Pod>, watcher::Error> = Ok(Event::InitDone);
        for name in CLUSTER_WATCHES {
            w.record(&(name, None), &done);
        }
        for name in WATCHES.iter().filter(|n| !CLUSTER_WATCHES.contains(n)) {
            w.record(&(*name, Some("a".to_string())), &done);
        }
        let why = w.ready().unwrap_err();
        assert!(why.contains("pods in b: not listed yet"), "{why}");
        assert!(!why.contains(" in a:"), "{why}");
        assert!(!health.synced());
        // Fleets in `a` may be acted on while `b` is still listing; not those in `b`.
        assert_eq!(w.ready_for("a"), Ok(()));
        assert!(w.ready_for("b").is_err());
        for name in WATCHES.iter().filter(|n| !CLUSTER_WATCHES.contains(n)) {
            w.record(&(*name, Some("b".to_string())), &done);
        }
        assert_eq!(w.ready(), Ok(()));
        assert!(health.synced());
        // One namespace's watch failing (its Role gone) stops only that namespace.
        let failed: Result<Event<Pod>, watcher::Error> = Err(watcher::Error::NoResourceVersion);
        w.record(&("pods", Some("b".to_string())), &failed);
        assert_eq!(w.ready_for("a"), Ok(()));
        assert!(w.ready_for("b").unwrap_err().starts_with("pods in b: "));
        // A cluster-wide watch failing stops every namespace.
        w.record(&("celldfleets", None), &failed);
        assert!(w.ready_for("a").is_err());
    }

    #[test]
    fn merge_diff_sets_changes_and_nulls_removals() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1], "gone": "x"});
        let new = json!({"a": 1, "b": {"c": 2, "d": 4}, "e": [1, 2], "added": true});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"b": {"d": 4}, "e": [1, 2], "added": true, "gone": null}))
        );
        assert_eq!(merge_diff(&old, &old), None);
    }
}
