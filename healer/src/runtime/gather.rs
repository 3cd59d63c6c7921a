//! Gathering one fleet's objects from the caches, and turning them (or a fresh read's)
//! into the [`Snapshot`] `decide` reads: the live Services checked against the
//! rendering, the identity owner, the remembered Lost claims and force-delete back-offs,
//! the reservation and the members' application view.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use celld_api::labels::{IDENTITY, REPLACEMENT_INDEX};
use celld_api::{CelldFleet, reservation_name};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::ObjectRef;

use super::clocks::Reading;
use super::context::Reconciler;
use super::fresh::{self, Gathered};
use super::index::Key;
use super::watches::{Stores, label};
use crate::observe::{self, Inputs, ObserveError, WorkloadObject};
use crate::plan::Action;
use crate::snapshot::{ApplicationView, CapacitySignal, NodeState, Snapshot};
use crate::time::Timestamp;
use crate::zone::ZoneLookup;

/// Everything of one fleet from the caches, cloned (the caches keep changing).
pub(super) fn gather(stores: &Stores, fleet: &CelldFleet) -> Gathered {
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
    // The index names the candidates ([`super::index`]); each is kept as a scan of the
    // namespace would keep it.
    let in_fleet_ns = ns.unwrap_or_default();
    let by_identity = [Key::Identity(identity.to_string())];
    let mut pods: Vec<Pod> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in stores
        .pods
        .concerning(in_fleet_ns, &by_identity)
        .iter()
        .chain(
            stores
                .held_pods
                .concerning(in_fleet_ns, &by_identity)
                .iter(),
        )
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
        .concerning(
            in_fleet_ns,
            &[
                Key::Identity(identity.to_string()),
                Key::Fleet(name.to_string()),
            ],
        )
        .iter()
        .filter(|c| in_ns(&c.metadata) && fresh::concerns(name, identity, c))
        .map(|c| (**c).clone())
        .collect();
    let replica_sets = stores
        .replica_sets
        .concerning(in_fleet_ns, &by_identity)
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
        nodes: None,
    }
}

/// Zones from the caches, and the state of the nodes a fresh read brought (those of its
/// terminating Pods) from that read: rule F2's facts confirmed on fresh objects.
#[derive(Debug)]
struct WithFreshNodes<'a> {
    cached: &'a dyn ZoneLookup,
    nodes: &'a [(String, Option<Node>)],
}

impl ZoneLookup for WithFreshNodes<'_> {
    fn node(&self, name: &str) -> Option<String> {
        self.cached.node(name)
    }
    fn volume(&self, name: &str) -> Option<String> {
        self.cached.volume(name)
    }
    fn node_state(&self, name: &str) -> NodeState {
        match self.nodes.iter().find(|(n, _)| n == name) {
            None => self.cached.node_state(name),
            Some((_, None)) => NodeState::Gone,
            Some((_, Some(node))) => crate::zone::node_state_of(crate::zone::ready_condition(node)),
        }
    }
}

/// The snapshot of one fleet from gathered objects (caches or a fresh read).
pub(super) fn snapshot_of(
    ctx: &Reconciler,
    fleet: &CelldFleet,
    g: &Gathered,
    reading: Reading,
    capacity: &CapacitySignal,
    watched: bool,
) -> Result<Snapshot, ObserveError> {
    let clock = reading.now;
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
    let infrastructure = ctx.memory.services.verify(fleet, |n| {
        ctx.stores
            .services
            .get(&ObjectRef::new(n).within(&svc_ns))
            .filter(|s| label(&**s, IDENTITY) == Some(fleet.spec.identity.as_str()))
    });
    let all = ctx.stores.fleets.state();
    // Rule V2 also counts the fleets that did not read, by the identity they carry.
    let unreadable = ctx.stores.unreadable.entries();
    let owner = observe::identity_owner_among(
        fleet,
        all.iter()
            .map(|f| observe::Claimant::of(f))
            .chain(unreadable.iter().filter_map(|e| e.claimant())),
    );
    let force_retry: BTreeMap<String, Timestamp> = ctx
        .memory
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
    let invalid = ctx.memory.validity.problems(fleet);
    let mut snapshot = observe::snapshot(Inputs {
        fleet,
        invalid: &invalid,
        workload,
        pods: &g.pods,
        claims: &g.claims,
        replica_sets: &g.replica_sets,
        zones: &WithFreshNodes {
            cached: &*ctx.zones,
            nodes: g.nodes.as_deref().unwrap_or_default(),
        },
        infrastructure: &infrastructure,
        capacity,
        identity_conflict: owner.as_deref(),
        force_delete_retry: &force_retry,
        reservation: Some(reservation.as_deref()),
    })?;
    snapshot.application = application_view(ctx, fleet);
    // Rules T1 and T2: the API server's timestamps on this process's clock, and what
    // other machines timed replaced by this process's own observation. A change of
    // leadership or a failed watch since the last look starts the observation over.
    crate::clock::to_healer_clock(&mut snapshot, &reading.server, clock);
    {
        let mut observed = ctx.memory.observed.lock().expect("observations");
        observed.epoch(ctx.gate.changes() + ctx.watches.failures());
        observed.observe(&mut snapshot, clock, watched);
    }
    // A Pod this process force-deleted is read as the API server now has it until the
    // Pod watch shows that (`Snapshot::force_deleted`). Otherwise the next decision,
    // made before the watch event arrives, would aim at the same Pod again, and its
    // fresh read (which no longer shows it) would not confirm the fleet's next due Pod.
    // A fresh read already shows it so; this changes nothing there.
    let deleted: Vec<String> = {
        let force_deleted = ctx.memory.force_deleted.lock().expect("force deleted");
        snapshot
            .pods
            .iter()
            .filter(|p| force_deleted.contains_key(&p.uid))
            .map(|p| p.uid.clone())
            .collect()
    };
    for uid in &deleted {
        snapshot.force_deleted(uid);
    }
    Ok(snapshot)
}

/// The members' latest application view, for `decide` to put into the status; none
/// while observation is off (`--application-interval 0s`) or the fleet is being
/// deleted, so the status keeps what it had.
fn application_view(ctx: &Reconciler, fleet: &CelldFleet) -> Option<ApplicationView> {
    if ctx.observing.is_none() || fleet.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let v = ctx.memory.views.view(&ObjectRef::from_obj(fleet))?;
    Some(ApplicationView {
        status: v.status,
        versions: v.versions,
    })
}

/// The cached Pod an action names (for handoff steps and release).
pub(super) fn pod_named(stores: &Stores, fleet: &CelldFleet, action: &Action) -> Option<Arc<Pod>> {
    let name = match action {
        Action::StartHandoff(h) => &h.pod,
        Action::ReleaseHandoff { name, .. } | Action::AbortHandoff { name, .. } => name,
        _ => return None,
    };
    let ns = fleet.metadata.namespace.as_deref().unwrap_or_default();
    let r = ObjectRef::new(name).within(ns);
    stores.pods.get(&r).or_else(|| stores.held_pods.get(&r))
}

/// The fleet's own member Pods: those its workload controls (directly, or through one of
/// its ReplicaSets), never another fleet's that shares the identity, and none this
/// process force-deleted (`force_deleted`, by uid): gone or going, never asked about
/// the application or its load.
pub(super) fn own_members<'g>(
    g: &'g Gathered,
    fleet: &CelldFleet,
    force_deleted: &Mutex<HashMap<String, Timestamp>>,
) -> Vec<&'g Pod> {
    let force_deleted = force_deleted.lock().expect("force deleted");
    let identity = fleet.spec.identity.as_str();
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
    g.pods
        .iter()
        .filter(|p| {
            p.metadata
                .uid
                .as_ref()
                .is_none_or(|u| !force_deleted.contains_key(u))
        })
        .filter(|p| label(*p, IDENTITY) == Some(identity))
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && owners.contains(o.uid.as_str()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use celld_api::labels::claim_name;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::PartialObjectMeta;
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::runtime::index::{Index, Indexed};
    use crate::runtime::scoped::Scoped;

    use crate::testkit::object_meta as meta;

    /// A cache fed like the watches feed theirs: the store, then its index.
    struct Fed<K: kube::Resource + Clone + 'static>
    where
        K::DynamicType: Eq + std::hash::Hash + Clone + Default,
    {
        writer: Writer<K>,
        index: Arc<Index>,
        scoped: Scoped<K>,
    }

    impl<K> Fed<K>
    where
        K: kube::Resource + Indexed + Clone + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Default,
    {
        fn new() -> Fed<K> {
            let (store, writer) = reflector::store::<K>();
            let index = Arc::new(Index::default());
            let scoped = Scoped::new(vec![(None, store, index.clone())]);
            Fed {
                writer,
                index,
                scoped,
            }
        }

        fn add(&mut self, o: K) {
            let ev = Event::Apply(o);
            self.writer.apply_watcher_event(&ev);
            self.index.apply(&ev);
        }
    }

    fn names<K: kube::Resource>(objects: &[K]) -> BTreeSet<String> {
        objects
            .iter()
            .filter_map(|o| o.meta().name.clone())
            .collect()
    }

    /// What the fleet's objects were before the index: a scan of every cached object.
    fn scanned(stores: &Stores, f: &CelldFleet) -> [BTreeSet<String>; 3] {
        let ns = f.metadata.namespace.as_deref();
        let (name, id) = (
            f.metadata.name.as_deref().unwrap(),
            f.spec.identity.as_str(),
        );
        let carries = |o: &ObjectMeta, key: &str| {
            o.labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(String::as_str)
                == Some(id)
        };
        let pods = stores
            .pods
            .state()
            .into_iter()
            .chain(stores.held_pods.state())
            .filter(|p| p.metadata.namespace.as_deref() == ns)
            .filter(|p| carries(&p.metadata, IDENTITY) || carries(&p.metadata, REPLACEMENT_INDEX))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let claims = stores
            .claims
            .state()
            .into_iter()
            .filter(|c| c.metadata.namespace.as_deref() == ns && fresh::concerns(name, id, c))
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        let replica_sets = stores
            .replica_sets
            .state()
            .into_iter()
            .filter(|r| r.metadata.namespace.as_deref() == ns && carries(&r.metadata, IDENTITY))
            .filter_map(|r| r.metadata.name.clone())
            .collect();
        [pods, claims, replica_sets]
    }

    /// Fleets side by side in two namespaces, whose names prefix each other, with a held
    /// Pod that kept only its replacement label, a claim at a member name with no label
    /// (or another fleet's), and objects of no fleet: the index finds for each fleet
    /// exactly what a scan of every cached object kept.
    #[test]
    fn gather_keeps_what_a_scan_of_every_cached_object_keeps() {
        let mut pods = Fed::<Pod>::new();
        let mut held = Fed::<Pod>::new();
        let mut claims = Fed::<PersistentVolumeClaim>::new();
        let mut rs = Fed::<PartialObjectMeta<ReplicaSet>>::new();
        let (fleets, mut fleets_w) = reflector::store::<CelldFleet>();
        let mut all = Vec::new();
        for ns in ["apps", "other"] {
            for (i, name) in ["web", "web-1", "webb", "db"].iter().enumerate() {
                let id = format!("{ns}{i}7kq2m9x4c1v8b3n6z5h0j2w");
                let f = crate::testkit::fleet_object(ns, name, &id);
                fleets_w.apply_watcher_event(&Event::Apply(f.clone()));
                all.push(f);
                for o in 0..3 {
                    let member = format!("{name}-{o}");
                    let l = [(IDENTITY, id.as_str())];
                    pods.add(Pod {
                        metadata: meta(ns, &member, &l),
                        ..Pod::default()
                    });
                    // Labelled, unlabelled (adopted by name), and one labelled for
                    // another fleet at this fleet's member name.
                    let labels: &[(&str, &str)] = match o {
                        0 => &l,
                        1 => &[],
                        _ => &[(IDENTITY, "someone-else")],
                    };
                    claims.add(PersistentVolumeClaim {
                        metadata: meta(ns, &claim_name(name, o), labels),
                        ..PersistentVolumeClaim::default()
                    });
                }
                held.add(Pod {
                    metadata: meta(ns, &format!("{name}-held"), &[(REPLACEMENT_INDEX, &id)]),
                    ..Pod::default()
                });
                rs.add(PartialObjectMeta {
                    metadata: meta(ns, &format!("{name}-abc"), &[(IDENTITY, &id)]),
                    ..PartialObjectMeta::default()
                });
            }
            pods.add(Pod {
                metadata: meta(ns, "stray", &[]),
                ..Pod::default()
            });
            claims.add(PersistentVolumeClaim {
                metadata: meta(ns, "scratch", &[]),
                ..PersistentVolumeClaim::default()
            });
        }
        fn none<K>() -> Scoped<K>
        where
            K: kube::Resource + Clone + 'static,
            K::DynamicType: Eq + std::hash::Hash + Clone + Default,
        {
            Scoped::new(vec![(
                None,
                reflector::store().0,
                Arc::new(Index::default()),
            )])
        }
        let stores = Stores {
            fleets,
            unreadable: Default::default(),
            stateful_sets: none(),
            deployments: none(),
            replica_sets: rs.scoped,
            pods: pods.scoped,
            held_pods: held.scoped,
            claims: claims.scoped,
            services: none(),
            reservations: reflector::store().0,
        };
        for f in &all {
            let g = gather(&stores, f);
            let [p, c, r] = scanned(&stores, f);
            assert_eq!(names(&g.pods), p, "{:?}", f.metadata.name);
            assert_eq!(names(&g.claims), c, "{:?}", f.metadata.name);
            assert_eq!(names(&g.replica_sets), r, "{:?}", f.metadata.name);
            assert_eq!(g.pods.len(), 4, "three members and the held Pod");
            assert_eq!(g.claims.len(), 3, "every claim at a member name");
        }
    }
}
