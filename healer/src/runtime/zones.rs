//! Where members are, for `status.memberStates[].zone` ([`crate::zone`]), and whether
//! their nodes are up (rule F2): two small cluster-wide watches that keep only a name and
//! a value.
//!
//! | watch | kept | from |
//! | --- | --- | --- |
//! | Nodes | node name -> `topology.kubernetes.io/zone`; node name -> Ready status | the label; the Ready condition |
//! | PersistentVolumes | volume name -> zone | a required node affinity naming one zone |
//!
//! Objects without a zone are not kept in the zone tables, so memory stays small at
//! hundreds of nodes and thousands of volumes; every node's Ready status is (one short
//! string each). Zones are status only. Node readiness gates only rule F2: a node the
//! healer has not listed is never taken for unreachable, so a failing nodes watch holds
//! force deletes (reported) and nothing else. Neither watch gates a reconcile or
//! `/readyz`. A watch that cannot list (its RBAC rule missing, say) leaves zones unknown
//! (the field stays empty), says so once in the log, and shows 0 in
//! `celld_healer_watch_healthy{resource="nodes"}` (or `"persistentvolumes"`); the zones
//! it had listed before stay as they were last seen.
//!
//! A zone that appears or changes requeues the fleets it concerns (the fleets with a
//! member Pod on that node, or with a claim bound to that volume), so a relabelled node
//! reaches the status without any periodic read.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use celld_api::CelldFleet;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, PersistentVolume, PersistentVolumeClaim, Pod,
};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_fn};
use kube::{Api, Client};
use tracing::{info, warn};

use super::metrics::{Metrics, ResourceLabel};
use super::scoped::Scoped;
use super::watches::{Obj, Stores, by_identity};
use crate::snapshot::NodeState;
use crate::zone::{ZONE_LABEL, ZoneLookup, node_state_of, ready_condition, volume_zone};

/// The two watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Which {
    Nodes,
    Volumes,
    /// The nodes watch's second table: node name -> Ready status. Its events are the
    /// nodes watch's, counted there.
    Readiness,
}

impl Which {
    fn resource(self) -> &'static str {
        match self {
            Which::Nodes | Which::Readiness => "nodes",
            Which::Volumes => "persistentvolumes",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Listing,
    Ok,
    Failed,
}

/// One watch's zones: what is live, and what a (re-)list in progress has gathered.
#[derive(Default)]
struct Table {
    live: HashMap<String, String>,
    listing: Option<HashMap<String, String>>,
}

/// Node and volume zones, as the two watches last saw them.
pub(super) struct Zones {
    tables: Mutex<BTreeMap<Which, (Table, State)>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Zones {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.tables.lock().expect("zones");
        let mut d = f.debug_struct("zones");
        for (w, (table, state)) in t.iter() {
            d.field(w.resource(), &(table.live.len(), state));
        }
        d.finish()
    }
}

impl ZoneLookup for Zones {
    fn node(&self, name: &str) -> Option<String> {
        self.get(Which::Nodes, name)
    }
    fn volume(&self, name: &str) -> Option<String> {
        self.get(Which::Volumes, name)
    }
    fn node_state(&self, name: &str) -> NodeState {
        let tables = self.tables.lock().expect("zones");
        let Some((table, State::Ok)) = tables.get(&Which::Readiness) else {
            return NodeState::Unknown;
        };
        match table.live.get(name) {
            None => NodeState::Gone,
            Some(kept) => {
                let ready = serde_json::from_str::<NodeCondition>(kept).ok();
                node_state_of(ready.as_ref())
            }
        }
    }
}

impl Zones {
    pub(super) fn new(metrics: Arc<Metrics>) -> Zones {
        let mut tables = BTreeMap::new();
        for w in [Which::Nodes, Which::Volumes] {
            metrics
                .watch_healthy
                .get_or_create(&ResourceLabel {
                    resource: w.resource(),
                })
                .set(0);
        }
        for w in [Which::Nodes, Which::Volumes, Which::Readiness] {
            tables.insert(w, (Table::default(), State::Listing));
        }
        Zones {
            tables: Mutex::new(tables),
            metrics,
        }
    }

    fn get(&self, w: Which, name: &str) -> Option<String> {
        self.tables
            .lock()
            .expect("zones")
            .get(&w)
            .and_then(|(t, _)| t.live.get(name).cloned())
    }

    /// Takes one watch event (`entry`: an object's name and zone) and returns the names
    /// whose zone appeared, changed or went.
    fn record<K>(
        &self,
        w: Which,
        ev: &Result<Event<K>, watcher::Error>,
        entry: impl Fn(&K) -> (String, Option<String>),
    ) -> Vec<String> {
        // The readiness table is fed by the nodes watch's events, counted once.
        let metered = w != Which::Readiness;
        if metered {
            self.metrics.watch_event(w.resource(), ev);
        }
        let mut tables = self.tables.lock().expect("zones");
        let Some((table, state)) = tables.get_mut(&w) else {
            return Vec::new();
        };
        let mut changed = Vec::new();
        let next = match ev {
            Err(e) => {
                if *state != State::Failed && metered {
                    match w {
                        Which::Nodes => {
                            warn!(watch = w.resource(), error = %e, "watch failed: member zones stay unknown in status, and no stranded Pod is force-deleted meanwhile")
                        }
                        _ => {
                            warn!(watch = w.resource(), error = %e, "watch failed: member zones stay unknown in status")
                        }
                    }
                }
                State::Failed
            }
            Ok(Event::Init) => {
                table.listing = Some(HashMap::new());
                state.clone()
            }
            Ok(Event::InitApply(o)) => {
                if let (name, Some(zone)) = entry(o) {
                    table.listing.get_or_insert_default().insert(name, zone);
                }
                state.clone()
            }
            Ok(Event::InitDone) => {
                let listed = table.listing.take().unwrap_or_default();
                for (name, zone) in &listed {
                    if table.live.get(name) != Some(zone) {
                        changed.push(name.clone());
                    }
                }
                changed.extend(
                    table
                        .live
                        .keys()
                        .filter(|n| !listed.contains_key(*n))
                        .cloned(),
                );
                table.live = listed;
                State::Ok
            }
            Ok(Event::Apply(o)) => {
                let (name, zone) = entry(o);
                let old = match &zone {
                    Some(z) => table.live.insert(name.clone(), z.clone()),
                    None => table.live.remove(&name),
                };
                if old != zone {
                    changed.push(name);
                }
                State::Ok
            }
            Ok(Event::Delete(o)) => {
                let (name, _) = entry(o);
                if table.live.remove(&name).is_some() {
                    changed.push(name);
                }
                State::Ok
            }
        };
        if *state != next && !metered {
            *state = next;
            return changed;
        }
        if *state != next {
            if next == State::Ok {
                info!(
                    watch = w.resource(),
                    known = table.live.len(),
                    "watch listed: member zones known"
                );
            }
            self.metrics
                .watch_healthy
                .get_or_create(&ResourceLabel {
                    resource: w.resource(),
                })
                .set(i64::from(next == State::Ok));
            *state = next;
        }
        changed
    }
}

/// An object's name and zone, as a watch's objects are kept.
type Entry<K> = fn(&K) -> (String, Option<String>);

/// A Node's name and zone label.
fn node_entry(n: &Node) -> (String, Option<String>) {
    let m = &n.metadata;
    (
        m.name.clone().unwrap_or_default(),
        m.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)).cloned(),
    )
}

/// A Node's name and its Ready condition's status and transition time (as JSON; `-`:
/// it has none yet). Not its heartbeat times: a heartbeat is not a change.
fn readiness_entry(n: &Node) -> (String, Option<String>) {
    let kept = ready_condition(n).map_or_else(
        || "-".to_string(),
        |c| {
            serde_json::to_string(&NodeCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                last_transition_time: c.last_transition_time.clone(),
                ..NodeCondition::default()
            })
            .unwrap_or_default()
        },
    );
    (n.metadata.name.clone().unwrap_or_default(), Some(kept))
}

/// A PersistentVolume's name and the zone its node affinity pins it to.
fn volume_entry(pv: &PersistentVolume) -> (String, Option<String>) {
    (
        pv.metadata.name.clone().unwrap_or_default(),
        volume_zone(pv),
    )
}

/// Opens both watches (nothing is listed until the stream is polled) and returns the
/// stream of fleets to reconcile because a zone of theirs appeared or changed.
pub(super) fn open(
    client: &Client,
    zones: &Arc<Zones>,
    stores: &Stores,
) -> BoxStream<'static, ObjectRef<CelldFleet>> {
    let config = watcher::Config::default();
    let fleets = by_identity(stores.fleets.clone());
    // Whole Nodes (their Ready condition is in the status); nothing of them is stored
    // but the two tables' strings.
    let nodes = requeues(
        watch_fn(Api::<Node>::all(client.clone()), config.clone()),
        (
            zones.clone(),
            &[
                (Which::Nodes, node_entry),
                (Which::Readiness, readiness_entry),
            ],
        ),
        stores.pods.clone(),
        |p: &Pod| p.spec.as_ref()?.node_name.as_ref(),
        {
            let fleets = fleets.clone();
            move |p: &Pod| fleets(&Obj::labelled(p))
        },
    );
    let volumes = requeues(
        watch_fn(Api::<PersistentVolume>::all(client.clone()), config),
        (zones.clone(), &[(Which::Volumes, volume_entry)]),
        stores.claims.clone(),
        |c: &PersistentVolumeClaim| c.spec.as_ref()?.volume_name.as_ref(),
        move |c: &PersistentVolumeClaim| fleets(&Obj::claim(c)),
    );
    futures::stream::select(nodes, volumes)
        .flat_map(|refs: Vec<ObjectRef<CelldFleet>>| {
            let unique: HashSet<ObjectRef<CelldFleet>> = refs.into_iter().collect();
            futures::stream::iter(unique)
        })
        .boxed()
}

/// One watch, recorded into `zones` (into each table it feeds), as the fleets to
/// reconcile after each event: those of the cached objects (`cached`: Pods, claims) that
/// are `on` a node or volume whose zone or readiness appeared, changed or went.
fn requeues<K, O>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    (zones, tables): (Arc<Zones>, &'static [(Which, Entry<K>)]),
    cached: Scoped<O>,
    on: fn(&O) -> Option<&String>,
    fleets_of: impl Fn(&O) -> Vec<ObjectRef<CelldFleet>> + Send + 'static,
) -> impl Stream<Item = Vec<ObjectRef<CelldFleet>>> + Send + 'static
where
    K: Send + 'static,
    O: kube::Resource + Clone + Send + Sync + 'static,
    O::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    events.default_backoff().map(move |ev| {
        let changed: HashSet<String> = tables
            .iter()
            .flat_map(|(which, entry)| zones.record(*which, &ev, *entry))
            .collect();
        if changed.is_empty() {
            return Vec::new();
        }
        cached
            .state()
            .iter()
            .filter(|o| on(o).is_some_and(|n| changed.contains(n)))
            .flat_map(|o| fleets_of(o.as_ref()))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::http::Health;
    use crate::runtime::served::Served;
    use crate::runtime::watches::WatchHealth;
    use crate::time::Timestamp;

    fn node(name: &str, zone: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.to_string());
        if let Some(z) = zone {
            n.metadata.labels = Some([(ZONE_LABEL.to_string(), z.to_string())].into());
        }
        n
    }

    fn ev(e: Event<Node>) -> Result<Event<Node>, watcher::Error> {
        Ok(e)
    }

    fn with_ready(mut n: Node, status: &str, since: &str) -> Node {
        n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    since.parse().expect("a time"),
                )),
                last_heartbeat_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                )),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n
    }

    /// Rule F2's view of nodes: unknown until the watch listed; then Ready (True or
    /// False: a kubelet that reports), unreachable (Unknown, keyed by its transition time)
    /// or gone; unknown again once the watch fails.
    #[test]
    fn node_readiness_is_known_only_from_a_listing() {
        let metrics = Arc::new(Metrics::new());
        let z = Zones::new(metrics.clone());
        let rec = |e: Event<Node>| {
            let e = ev(e);
            let mut c = z.record(Which::Nodes, &e, node_entry);
            c.extend(z.record(Which::Readiness, &e, readiness_entry));
            c.sort();
            c.dedup();
            c
        };
        let t1 = "2026-12-05T10:00:00Z";
        let t2 = "2026-12-05T10:05:00Z";
        rec(Event::Init);
        rec(Event::InitApply(with_ready(
            node("a", Some("z1")),
            "True",
            t1,
        )));
        rec(Event::InitApply(node("b", None)));
        rec(Event::InitApply(with_ready(node("d", None), "True", t1)));
        assert_eq!(z.node_state("a"), NodeState::Unknown, "not listed yet");
        rec(Event::InitDone);
        assert_eq!(z.node_state("a"), NodeState::Ready);
        assert_eq!(z.node_state("b"), NodeState::Unknown, "no Ready condition");
        assert_eq!(z.node_state("c"), NodeState::Gone);
        // A heartbeat alone is no change: nothing requeues.
        assert!(rec(Event::Apply(with_ready(node("a", Some("z1")), "True", t1))).is_empty());
        // A kubelet that reports NotReady is alive: not unreachable.
        assert_eq!(
            rec(Event::Apply(with_ready(node("a", Some("z1")), "False", t2))),
            ["a"]
        );
        assert_eq!(z.node_state("a"), NodeState::Ready);
        // The kubelet stops: the node controller sets Unknown; the Pods on it requeue.
        assert_eq!(
            rec(Event::Apply(with_ready(
                node("a", Some("z1")),
                "Unknown",
                t2
            ))),
            ["a"]
        );
        let at = |t: &str| {
            Some(Timestamp(
                t.parse::<k8s_openapi::jiff::Timestamp>()
                    .unwrap()
                    .as_millisecond(),
            ))
        };
        assert_eq!(
            z.node_state("a"),
            NodeState::Unreachable {
                since: None,
                transition: at(t2)
            }
        );
        rec(Event::Delete(node("a", Some("z1"))));
        assert_eq!(z.node_state("a"), NodeState::Gone);
        // One event counted once, for the two tables it feeds.
        let events = metrics
            .watch_events
            .get_or_create(&ResourceLabel { resource: "nodes" })
            .get();
        assert_eq!(events, 4);
        // A failed watch: a node known Ready before is unknown now.
        assert_eq!(z.node_state("d"), NodeState::Ready);
        let failed: Result<Event<Node>, watcher::Error> = Err(watcher::Error::NoResourceVersion);
        z.record(Which::Nodes, &failed, node_entry);
        z.record(Which::Readiness, &failed, readiness_entry);
        assert_eq!(z.node_state("d"), NodeState::Unknown);
        assert_eq!(z.node_state("c"), NodeState::Unknown, "not gone either");
    }

    fn healthy(m: &Metrics, resource: &'static str) -> i64 {
        m.watch_healthy
            .get_or_create(&ResourceLabel { resource })
            .get()
    }

    #[test]
    fn a_listing_then_label_changes_report_each_changed_node() {
        let metrics = Arc::new(Metrics::new());
        let z = Zones::new(metrics.clone());
        let rec = |e| {
            let mut c = z.record(Which::Nodes, &ev(e), node_entry);
            c.sort();
            c
        };
        assert!(rec(Event::Init).is_empty());
        assert!(rec(Event::InitApply(node("a", Some("z1")))).is_empty());
        assert!(rec(Event::InitApply(node("b", None))).is_empty());
        assert_eq!(z.node("a"), None, "nothing is live before the listing ends");
        assert_eq!(rec(Event::InitDone), ["a"]);
        assert_eq!(z.node("a").as_deref(), Some("z1"));
        assert_eq!(healthy(&metrics, "nodes"), 1);
        // A heartbeat (same zone) changes nothing; a new label, a relabel and a removal do.
        assert!(rec(Event::Apply(node("a", Some("z1")))).is_empty());
        assert_eq!(rec(Event::Apply(node("b", Some("z2")))), ["b"]);
        assert_eq!(rec(Event::Apply(node("a", Some("z3")))), ["a"]);
        assert_eq!(rec(Event::Apply(node("a", None))), ["a"]);
        assert_eq!(z.node("a"), None);
        assert!(rec(Event::Delete(node("a", None))).is_empty());
        assert_eq!(rec(Event::Delete(node("b", Some("z2")))), ["b"]);
        // A re-list replaces everything: what it no longer has is gone.
        rec(Event::Apply(node("c", Some("z1"))));
        rec(Event::Init);
        rec(Event::InitApply(node("d", Some("z2"))));
        assert_eq!(rec(Event::InitDone), ["c", "d"]);
        assert_eq!((z.node("c"), z.node("d").as_deref()), (None, Some("z2")));
        assert_eq!(z.volume("d"), None, "nodes and volumes are apart");
    }

    /// A nodes watch that cannot list (its rule missing from the RBAC) leaves zones
    /// unknown and is reported, but the healer stays ready and acts: the watches a
    /// reconcile waits for do not include it.
    #[test]
    fn a_failing_zone_watch_gates_nothing() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::default());
        let watches = WatchHealth::new(metrics.clone(), health.clone(), &Served::All);
        watches.all_listed_for_tests();
        let z = Zones::new(metrics.clone());
        let forbidden: Result<Event<Node>, watcher::Error> = Err(watcher::Error::NoResourceVersion);
        assert!(z.record(Which::Nodes, &forbidden, node_entry).is_empty());
        assert!(z.record(Which::Nodes, &forbidden, node_entry).is_empty());
        assert_eq!(z.node("a"), None);
        assert_eq!(healthy(&metrics, "nodes"), 0);
        assert_eq!(watches.ready_for("any"), Ok(()));
        assert!(health.synced());
    }
}
