//! The watches: their caches, their health, and which fleet a watched object concerns.
//!
//! Watches (list + watch, kept in reflector stores, each object cut down to what the
//! healer reads: see [`super::trim`]):
//!
//! | resource | selector |
//! | --- | --- |
//! | CelldFleet | all (read one by one: see [`super::unreadable`]) |
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
//! A reconcile acts only once every watch has listed its objects and while none is
//! failing ([`WatchHealth::ready`]; `celld_healer_watch_healthy`, `/readyz`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use celld_api::labels::{IDENTITY, REPLACEMENT_INDEX, claim_ordinal};
use celld_api::{CelldBucketReservation, CelldFleet, reservation_name};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_fn};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::http::Health;
use super::index::{Index, Indexed};
use super::metrics::{Metrics, ResourceLabel};
use super::scoped::Scoped;
use super::served::Served;
use super::trim::Trim;
use super::unreadable::Unreadable;

/// Every cache a snapshot is built from. Fleets and reservations are watched
/// cluster-wide; the rest in each served namespace.
#[derive(Clone)]
pub(super) struct Stores {
    pub(super) fleets: Store<CelldFleet>,
    /// The CelldFleets that did not read, kept out of `fleets`.
    pub(super) unreadable: Arc<Unreadable>,
    pub(super) stateful_sets: Scoped<StatefulSet>,
    pub(super) deployments: Scoped<Deployment>,
    pub(super) replica_sets: Scoped<PartialObjectMeta<ReplicaSet>>,
    pub(super) pods: Scoped<Pod>,
    pub(super) held_pods: Scoped<Pod>,
    pub(super) claims: Scoped<PersistentVolumeClaim>,
    pub(super) services: Scoped<Service>,
    pub(super) reservations: Store<CelldBucketReservation>,
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

/// Health of every watch: whether each has listed and none is failing (the reconcile
/// acts only then; `/readyz` reports it).
pub(super) struct WatchHealth {
    states: Mutex<BTreeMap<WatchKey, WatchState>>,
    /// How many times a watch failed: events may have been missed meanwhile.
    failures: std::sync::atomic::AtomicU64,
    /// Counts the moments every watch became listed and healthy ([`Self::listed`]).
    listed: tokio::sync::watch::Sender<u64>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl WatchHealth {
    pub(super) fn new(metrics: Arc<Metrics>, health: Arc<Health>, served: &Served) -> WatchHealth {
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
        WatchHealth {
            states: Mutex::new(states),
            failures: std::sync::atomic::AtomicU64::new(0),
            listed: tokio::sync::watch::Sender::new(0),
            metrics,
            health,
        }
    }

    fn record<K>(&self, key: &WatchKey, ev: &Result<Event<K>, watcher::Error>) {
        let name = key.0;
        let ns = key.1.as_deref().unwrap_or("<all>");
        self.metrics.watch_event(name, ev);
        let next = match ev {
            Err(e) => Some(WatchState::Failed(e.to_string())),
            Ok(Event::InitDone) | Ok(Event::Apply(_)) | Ok(Event::Delete(_)) => {
                Some(WatchState::Ok)
            }
            Ok(Event::Init) | Ok(Event::InitApply(_)) => None,
        };
        let Some(next) = next else { return };
        let mut states = self.states.lock().expect("watch states");
        let all_before = states.values().all(|s| *s == WatchState::Ok);
        let prev = states.insert(key.clone(), next.clone());
        if prev.as_ref() != Some(&next) {
            match &next {
                WatchState::Failed(e) => {
                    self.failures
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
            if !all_before {
                self.listed.send_modify(|n| *n += 1);
            }
        }
    }

    /// Changes each time every watch has become listed and healthy (at the start, and
    /// after a watch failed and recovered). The controller reconciles every fleet then:
    /// the fleets turned away while the caches were incomplete
    /// (`super::reconcile`, "unsynced") are looked at at once, not up to a second later.
    pub(super) fn listed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.listed.subscribe()
    }

    /// How many times a watch failed since the start: a watch that failed may have
    /// missed transitions (`crate::clock::Observations::epoch`).
    pub(super) fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Marks every watch listed (tests of what must not gate a reconcile).
    #[cfg(test)]
    pub(super) fn all_listed_for_tests(&self) {
        let done: Result<Event<Pod>, watcher::Error> = Ok(Event::InitDone);
        let keys: Vec<WatchKey> = self
            .states
            .lock()
            .expect("watch states")
            .keys()
            .cloned()
            .collect();
        for k in keys {
            self.record(&k, &done);
        }
    }

    /// Ok when every watch has listed and none is failing; else why not.
    #[cfg(test)]
    pub(super) fn ready(&self) -> Result<(), String> {
        self.ready_where(|_| true)
    }

    /// Ok when the watches a fleet in `namespace` is built from (the cluster-wide ones
    /// and that namespace's) have listed and none is failing. Another served namespace's
    /// failing watch (its Role deleted, say) does not stop healing here: nothing of that
    /// namespace is read for this fleet.
    pub(super) fn ready_for(&self, namespace: &str) -> Result<(), String> {
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
/// `then` sees each event right after the store took it (a store's index follows it
/// there), before the event's object is passed on to trigger a reconcile.
fn watched<K>(
    key: WatchKey,
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    writer: reflector::store::Writer<K>,
    health: Arc<WatchHealth>,
    then: impl Fn(&Event<K>) + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Trim + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    // The health is recorded last: a watch is Ok (its list done) only once its store
    // and index hold that list.
    events
        .modify(K::trim)
        .reflect(writer)
        .map(move |ev| {
            if let Ok(ev) = &ev {
                then(ev);
            }
            health.record(&key, &ev);
            ev
        })
        .touched_objects()
}

/// A namespaced resource watched in every served namespace (one watch and store each),
/// as one cache and one stream of touched objects.
fn served_watch<K>(
    name: &'static str,
    client: &Client,
    served: &Served,
    config: &watcher::Config,
    watches: &Arc<WatchHealth>,
) -> (Scoped<K>, BoxStream<'static, Result<K, watcher::Error>>)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Trim
        + Indexed
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
        let index = Arc::new(Index::default());
        let events = watch_fn(api::<K>(client, scope.as_deref()), config.clone()).default_backoff();
        let follows = index.clone();
        streams.push(
            watched(
                (name, scope.clone()),
                events,
                writer,
                watches.clone(),
                move |ev| follows.apply(ev),
            )
            .boxed(),
        );
        stores.push((scope, store, index));
    }
    (
        Scoped::new(stores),
        futures::stream::select_all(streams).boxed(),
    )
}

pub(super) fn label<'a, K: Resource>(o: &'a K, key: &str) -> Option<&'a str> {
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

/// The stream of objects each watch touched, to trigger reconciles.
pub(super) struct Touched {
    pub(super) fleets: BoxStream<'static, Result<CelldFleet, watcher::Error>>,
    pub(super) stateful_sets: BoxStream<'static, Result<StatefulSet, watcher::Error>>,
    pub(super) deployments: BoxStream<'static, Result<Deployment, watcher::Error>>,
    pub(super) replica_sets:
        BoxStream<'static, Result<PartialObjectMeta<ReplicaSet>, watcher::Error>>,
    pub(super) pods: BoxStream<'static, Result<Pod, watcher::Error>>,
    pub(super) held_pods: BoxStream<'static, Result<Pod, watcher::Error>>,
    pub(super) claims: BoxStream<'static, Result<PersistentVolumeClaim, watcher::Error>>,
    pub(super) services: BoxStream<'static, Result<Service, watcher::Error>>,
    pub(super) reservations: BoxStream<'static, Result<CelldBucketReservation, watcher::Error>>,
}

/// Opens every watch (see the table above): the caches, and the streams of touched
/// objects. `fleet_deleted` is told of each fleet the fleet watch reports deleted, once
/// the cache has dropped it. Nothing is listed until the streams are polled.
pub(super) fn open(
    client: &Client,
    served: &Served,
    watches: &Arc<WatchHealth>,
    fleet_deleted: impl Fn(&CelldFleet) + Send + 'static,
    fleet_changed: impl Fn() + Send + 'static,
) -> (Stores, Touched) {
    let has_identity = watcher::Config::default().labels(IDENTITY);

    let (fleets, fleets_w) = reflector::store::<CelldFleet>();
    let (reservations, res_w) = reflector::store::<CelldBucketReservation>();
    // Every fleet of the cluster, served or not: rule V2 compares identities across
    // all of them (the install grants this read cluster-wide). Untyped, each object
    // read on its own: one that does not read is kept apart, not a failed watch.
    let unreadable = Arc::new(Unreadable::default());
    let (record, cache) = (unreadable.clone(), fleets.clone());
    let fleet_stream = watched(
        ("celldfleets", None),
        watch_fn(
            Api::<DynamicObject>::all_with(client.clone(), &ApiResource::erase::<CelldFleet>(&())),
            watcher::Config::default(),
        )
        .default_backoff()
        .filter_map(move |ev| std::future::ready(record.read(ev, &cache))),
        fleets_w,
        watches.clone(),
        move |ev| {
            if let Event::Delete(f) = ev {
                fleet_deleted(f);
            }
            fleet_changed();
        },
    )
    .boxed();
    let (stateful_sets, sts_stream) =
        served_watch::<StatefulSet>("statefulsets", client, served, &has_identity, watches);
    let (deployments, dep_stream) =
        served_watch::<Deployment>("deployments", client, served, &has_identity, watches);
    let (replica_sets, rs_stream) = served_watch::<PartialObjectMeta<ReplicaSet>>(
        "replicasets",
        client,
        served,
        &has_identity,
        watches,
    );
    let (pods, pod_stream) = served_watch::<Pod>("pods", client, served, &has_identity, watches);
    let (held_pods, held_stream) = served_watch::<Pod>(
        "pods-held",
        client,
        served,
        &watcher::Config::default().labels(REPLACEMENT_INDEX),
        watches,
    );
    // All claims: another fleet's claim at a member name carries no label of ours.
    let (claims, claim_stream) = served_watch::<PersistentVolumeClaim>(
        "persistentvolumeclaims",
        client,
        served,
        &watcher::Config::default(),
        watches,
    );
    let (services, svc_stream) =
        served_watch::<Service>("services", client, served, &has_identity, watches);
    let res_stream = watched(
        ("celldbucketreservations", None),
        watch_fn(
            Api::<CelldBucketReservation>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
        res_w,
        watches.clone(),
        |_| {},
    )
    .boxed();

    let stores = Stores {
        fleets,
        unreadable,
        stateful_sets,
        deployments,
        replica_sets,
        pods,
        held_pods,
        claims,
        services,
        reservations,
    };
    let touched = Touched {
        fleets: fleet_stream,
        stateful_sets: sts_stream,
        deployments: dep_stream,
        replica_sets: rs_stream,
        pods: pod_stream,
        held_pods: held_stream,
        claims: claim_stream,
        services: svc_stream,
        reservations: res_stream,
    };
    (stores, touched)
}

/// Maps a watched object to the fleets it concerns: same namespace, and the fleet's
/// identity in its label or (for some kinds) the fleet's name in its own.
pub(super) fn by_identity(
    fleets: Store<CelldFleet>,
) -> impl Fn(&dyn ResourceLike) -> Vec<ObjectRef<CelldFleet>> + Clone + Send + Sync + 'static {
    move |o: &dyn ResourceLike| -> Vec<ObjectRef<CelldFleet>> {
        let id = o.identity();
        let name = o.name();
        fleets_matching(&fleets, o.namespace(), |f| {
            id.is_some_and(|id| id == f.spec.identity)
                || o.names_fleet(f.metadata.name.as_deref().unwrap_or_default(), name)
        })
    }
}

/// A reservation concerns the fleets whose bucket and prefix it names.
pub(super) fn by_reservation(
    fleets: Store<CelldFleet>,
) -> impl Fn(CelldBucketReservation) -> Vec<ObjectRef<CelldFleet>> + Send + Sync + 'static {
    move |r: CelldBucketReservation| -> Vec<ObjectRef<CelldFleet>> {
        let name = r.metadata.name.unwrap_or_default();
        fleets
            .state()
            .iter()
            .filter(|f| {
                reservation_name(&f.spec.storage.bucket, f.spec.storage.prefix.as_deref()) == name
            })
            .map(|f| ObjectRef::from_obj(&**f))
            .collect()
    }
}

/// The facts a mapper needs of a watched object.
pub(super) trait ResourceLike {
    fn namespace(&self) -> Option<&str>;
    fn name(&self) -> &str;
    fn identity(&self) -> Option<&str>;
    /// Whether the object's name alone ties it to fleet `fleet`.
    fn names_fleet(&self, fleet: &str, name: &str) -> bool;
}

/// A watched object reduced to what the mappers read.
pub(super) struct Obj<'a> {
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
    pub(super) fn workload<K: Resource>(o: &'a K) -> Obj<'a> {
        Obj::base(o, IDENTITY, |fleet, name| fleet == name)
    }

    /// Anything tied to its fleet by the identity label only.
    pub(super) fn labelled<K: Resource>(o: &'a K) -> Obj<'a> {
        Obj::base(o, IDENTITY, |_, _| false)
    }

    /// A Pod held by a handoff: the index label carries the identity.
    pub(super) fn held(o: &'a Pod) -> Obj<'a> {
        Obj::base(o, REPLACEMENT_INDEX, |_, _| false)
    }

    /// A claim: identity label, or a member claim name of the fleet (another fleet's
    /// disk at one of our names).
    pub(super) fn claim(o: &'a PersistentVolumeClaim) -> Obj<'a> {
        Obj::base(o, IDENTITY, |fleet, name| {
            claim_ordinal(fleet, name).is_some()
        })
    }

    /// A Service: identity label, or one of the two names the generator gives them.
    pub(super) fn service(o: &'a Service) -> Obj<'a> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_fleet_is_acted_on_until_every_watch_listed_and_while_one_fails() {
        let health = Arc::new(Health::default());
        let w = WatchHealth::new(Arc::new(Metrics::new()), health.clone(), &Served::All);
        let mut listed = w.listed();
        let done: Result<Event<Pod>, watcher::Error> = Ok(Event::InitDone);
        for name in &WATCHES[1..] {
            w.record(&(*name, None), &done);
        }
        assert!(!listed.has_changed().unwrap(), "not every watch listed yet");
        assert!(
            w.ready()
                .unwrap_err()
                .contains("celldfleets: not listed yet")
        );
        assert!(!health.synced());
        w.record(&("celldfleets", None), &done);
        assert_eq!(w.ready(), Ok(()));
        assert!(health.synced());
        // The moment every watch listed is told once (the controller reconciles every
        // fleet then); later events of healthy watches tell nothing.
        assert_eq!(*listed.borrow_and_update(), 1);
        w.record(&("pods", None), &done);
        assert!(!listed.has_changed().unwrap());
        let failed: Result<Event<Pod>, watcher::Error> = Err(watcher::Error::NoResourceVersion);
        w.record(&("pods", None), &failed);
        assert!(w.ready().unwrap_err().starts_with("pods: "));
        // A re-list in progress keeps the failure; its end clears it.
        w.record::<Pod>(&("pods", None), &Ok(Event::Init));
        assert!(w.ready().is_err());
        assert!(!listed.has_changed().unwrap(), "a watch is failing");
        w.record(&("pods", None), &done);
        assert_eq!(w.ready(), Ok(()));
        // A recovery is told again.
        assert_eq!(*listed.borrow_and_update(), 2);
    }

    /// Served namespaces: each has its own watch of each namespaced resource, and every
    /// one of them must have listed; fleets and reservations stay one cluster-wide watch.
    #[test]
    fn every_served_namespace_must_list() {
        let health = Arc::new(Health::default());
        let served = Served::new(&["b".into(), "a".into()]).unwrap();
        let w = WatchHealth::new(Arc::new(Metrics::new()), health.clone(), &served);
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
}
