//! A fleet's objects read straight from the API server, bypassing the watch caches, for
//! the confirmation every destructive write needs (see `crate::confirm`).
//!
//! Only `list` is used (with a `metadata.name` field selector where one object is
//! wanted), so the healer's RBAC stays list/watch: no `get`. Per confirmation of one
//! fleet, all at once: one list each of the CelldFleet, the workload of its kind named
//! after it (then of the other kind if there is none: [`Workloads::needs`]), Pods
//! carrying its identity, Pods held by its handoffs and its bucket reservation; the node
//! of each of those Pods that is terminating (rule F2 force-deletes a Pod only if its
//! node is unreachable on this read too: one list per such node, or one of all nodes
//! for more than two, none in the steady state); its
//! claims ([`claims`]: the namespace's claim names and the claims carrying the identity,
//! then any other claim at a member name); plus its ReplicaSets (metadata only) for a
//! Deployment fleet. Unlike the caches, the workloads are read by name whatever their
//! labels, so an unlabelled workload named like the fleet is seen before any of its
//! claims could be deleted; and the reservation is read again so a bucket just reserved
//! to another identity (rule V3) stops growth and healing even while the reservation
//! watch lags (the simulation's `sim_fails_when_the_reservation_is_not_read_fresh` shows
//! what happens otherwise).
//!
//! Fleets of one namespace that ask at the same moment share one read ([`shared`],
//! [`read_many`]): the same requests, each naming all of them, and each fleet keeps what
//! its own read would have selected.
//!
//! Every list is decoded without the objects' managed fields ([`lean`]): most of a listed
//! Pod or StatefulSet, never read by the healer.

mod claims;
mod lean;
mod shared;

pub use shared::{Answer, SharedReads};

use std::collections::HashSet;

use celld_api::labels::{IDENTITY, REPLACEMENT_INDEX, claim_ordinal};
use celld_api::{CelldBucketReservation, CelldFleet, reservation_name};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use std::sync::Arc;

/// Everything of one fleet a snapshot is built from (from the caches or fresh).
pub struct Gathered {
    /// The StatefulSet named after the fleet.
    pub workload_sts: Option<Arc<StatefulSet>>,
    /// The Deployment named after the fleet.
    pub workload_dep: Option<Arc<Deployment>>,
    /// Pods carrying the identity, or held by one of its handoffs.
    pub pods: Vec<Pod>,
    /// Claims carrying the identity, or at a member name of the fleet.
    pub claims: Vec<PersistentVolumeClaim>,
    /// The fleet's ReplicaSets (metadata only; Deployment fleets).
    pub replica_sets: Vec<ReplicaSet>,
    /// The bucket reservation as the fresh read found it (`Some(None)`: there is none);
    /// `None` when gathered from the caches (the reservation cache is used then).
    pub reservation: Option<Option<Arc<CelldBucketReservation>>>,
    /// The nodes of the terminating Pods as the fresh read found them (`None` in a pair:
    /// the node is gone); `None` when gathered from the caches (the nodes watch is used
    /// then).
    pub nodes: Option<Vec<(String, Option<Node>)>>,
}

/// Number of list requests one fresh read of one fleet makes when its workload exists (one
/// more when it does not), no unlabelled claim sits at a member name (up to two add one
/// each, more one list) and no Pod is terminating (up to two nodes under terminating
/// Pods add one each, more one list), for the request-cost figures.
pub fn requests(stateful_set: bool) -> usize {
    if stateful_set { 7 } else { 8 }
}

fn by_name(name: &str) -> ListParams {
    ListParams::default().fields(&format!("metadata.name={name}"))
}

/// Whether a claim concerns fleet `name`: it carries the identity, or sits at one of the
/// fleet's member names (another fleet's disk in the way). The caches and the fresh read
/// gather claims by this one rule.
pub fn concerns(name: &str, identity: &str, c: &PersistentVolumeClaim) -> bool {
    let m = &c.metadata;
    m.labels
        .as_ref()
        .and_then(|l| l.get(IDENTITY))
        .is_some_and(|v| v == identity)
        || m.name
            .as_deref()
            .is_some_and(|n| claim_ordinal(name, n).is_some())
}

/// Where a fresh read looks: one fleet's objects by name, or the whole namespace for
/// several fleets read at once ([`read_many`]).
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// The one fleet named so: its CelldFleet and workloads by name.
    One(&'a str),
    /// Every object of the kind in the namespace (several fleets, one request per kind).
    Namespace,
}

impl Scope<'_> {
    fn params(self) -> ListParams {
        match self {
            Scope::One(name) => by_name(name),
            Scope::Namespace => ListParams::default(),
        }
    }
}

/// A set-based label selector: `key` is one of `values` (sorted, each once).
fn one_of<'a>(key: &str, values: impl IntoIterator<Item = &'a str>) -> String {
    let values: std::collections::BTreeSet<&str> = values.into_iter().collect();
    let list: Vec<&str> = values.into_iter().collect();
    format!("{key} in ({})", list.join(","))
}

/// The objects of kind `K` in `ns` that `scope` selects, whatever their labels.
async fn listed<K>(client: &Client, ns: &str, scope: Scope<'_>) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(lean::namespaced::<K>(client, ns, &scope.params())
        .await?
        .items)
}

/// What the fresh read of a fleet's other objects is keyed by: its identity, its bucket
/// reservation and its workload kind.
#[derive(PartialEq, Eq)]
struct Keys {
    identity: String,
    reservation: String,
    stateful_set: bool,
}

impl Keys {
    fn of(fleet: &CelldFleet) -> Keys {
        Keys {
            identity: fleet.spec.identity.clone(),
            reservation: reservation_name(
                &fleet.spec.storage.bucket,
                fleet.spec.storage.prefix.as_deref(),
            ),
            stateful_set: fleet.spec.is_stateful_set(),
        }
    }
}

/// The objects found by identity and reservation name for some fleets of a namespace
/// (the part of [`Gathered`] that depends on the fleets' specs), before each fleet takes
/// its own ([`Keyed::of`]).
struct Keyed {
    /// Pods carrying one of the identities.
    labelled: Vec<Pod>,
    /// Pods held by a handoff of one of the identities.
    held: Vec<Pod>,
    claims: Vec<PersistentVolumeClaim>,
    reservations: Vec<CelldBucketReservation>,
    replica_sets: Vec<ReplicaSet>,
}

/// One fleet's share of a [`Keyed`] read: what a read of that fleet alone would have
/// brought.
struct Own {
    pods: Vec<Pod>,
    claims: Vec<PersistentVolumeClaim>,
    reservation: Option<Arc<CelldBucketReservation>>,
    replica_sets: Vec<ReplicaSet>,
}

/// Whether `m` carries label `key` with value `value`.
fn labelled(m: &kube::api::ObjectMeta, key: &str, value: &str) -> bool {
    m.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .is_some_and(|v| v == value)
}

impl Keyed {
    /// Reads, for the fleets `fleets` (name, keys) of `ns`: their Pods, claims, bucket
    /// reservations and (for Deployment fleets) ReplicaSets. The Pods, claims and
    /// ReplicaSets by a set-based selector on the identities; the reservations by name
    /// for one fleet, else all of them in one list (they are cluster-scoped).
    async fn read(
        client: &Client,
        ns: &str,
        scope: Scope<'_>,
        fleets: &[(&str, &Keys)],
    ) -> Result<Keyed, kube::Error> {
        let ids = || fleets.iter().map(|(_, k)| k.identity.as_str());
        let identity = ListParams::default().labels(&one_of(IDENTITY, ids()));
        let replacement = ListParams::default().labels(&one_of(REPLACEMENT_INDEX, ids()));
        let reserved = match (scope, fleets) {
            (Scope::One(_), [(_, k)]) => by_name(&k.reservation),
            _ => ListParams::default(),
        };
        let deployments: Vec<&str> = fleets
            .iter()
            .filter(|(_, k)| !k.stateful_set)
            .map(|(_, k)| k.identity.as_str())
            .collect();
        let names: Vec<(&str, &str)> = fleets
            .iter()
            .map(|(n, k)| (*n, k.identity.as_str()))
            .collect();
        let (labelled, held, claims, reservations, replica_sets) = futures::try_join!(
            lean::namespaced::<Pod>(client, ns, &identity),
            lean::namespaced::<Pod>(client, ns, &replacement),
            claims::read(client, ns, &names),
            lean::cluster::<CelldBucketReservation>(client, &reserved),
            async {
                if deployments.is_empty() {
                    return Ok(Vec::new());
                }
                let of = ListParams::default().labels(&one_of(IDENTITY, deployments.clone()));
                Api::<ReplicaSet>::namespaced(client.clone(), ns)
                    .list_metadata(&of)
                    .await
                    .map(|l| l.items)
            },
        )?;
        Ok(Keyed {
            labelled: labelled.items,
            held: held.items,
            claims,
            reservations: reservations.items,
            replica_sets: replica_sets
                .into_iter()
                .map(|r| ReplicaSet {
                    metadata: r.metadata,
                    ..ReplicaSet::default()
                })
                .collect(),
        })
    }

    /// The objects of fleet `name` with keys `k`: each kept by the rule the read of that
    /// fleet alone selects it by (the identity label, the replacement label, `concerns`,
    /// the reservation's name).
    fn of(&self, name: &str, k: &Keys) -> Own {
        let mut seen = HashSet::new();
        let pods = self
            .labelled
            .iter()
            .filter(|p| labelled(&p.metadata, IDENTITY, &k.identity))
            .chain(
                self.held
                    .iter()
                    .filter(|p| labelled(&p.metadata, REPLACEMENT_INDEX, &k.identity)),
            )
            .filter(|p| seen.insert(p.metadata.uid.clone()))
            .cloned()
            .collect();
        Own {
            pods,
            claims: self
                .claims
                .iter()
                .filter(|c| concerns(name, &k.identity, c))
                .cloned()
                .collect(),
            reservation: self
                .reservations
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(k.reservation.as_str()))
                .cloned()
                .map(Arc::new),
            replica_sets: if k.stateful_set {
                Vec::new()
            } else {
                self.replica_sets
                    .iter()
                    .filter(|r| labelled(&r.metadata, IDENTITY, &k.identity))
                    .cloned()
                    .collect()
            },
        }
    }
}

/// The workloads read so far, of each kind (`None`: that kind not read yet).
#[derive(Default)]
struct Workloads {
    stateful_sets: Option<Vec<StatefulSet>>,
    deployments: Option<Vec<Deployment>>,
}

impl Workloads {
    /// Reads the kinds asked for and not read yet.
    async fn complete(
        &mut self,
        client: &Client,
        ns: &str,
        scope: Scope<'_>,
        stateful_sets: bool,
        deployments: bool,
    ) -> Result<(), kube::Error> {
        let (sts, dep) = futures::try_join!(
            async {
                if stateful_sets && self.stateful_sets.is_none() {
                    return listed::<StatefulSet>(client, ns, scope).await.map(Some);
                }
                Ok(None)
            },
            async {
                if deployments && self.deployments.is_none() {
                    return listed::<Deployment>(client, ns, scope).await.map(Some);
                }
                Ok(None)
            },
        )?;
        if sts.is_some() {
            self.stateful_sets = sts;
        }
        if dep.is_some() {
            self.deployments = dep;
        }
        Ok(())
    }

    /// The kinds fleet `name` (of the kind `stateful_set` says) still needs: its own kind,
    /// and the other only when there is none of its own. The snapshot takes the other
    /// kind only then (a workload of the wrong kind named like the fleet, rule W2), so
    /// this is the same snapshot for one list fewer in the common case, at one more
    /// round trip when the fleet's own workload is missing. `(stateful sets,
    /// deployments)`.
    fn needs(&self, name: &str, stateful_set: bool) -> (bool, bool) {
        // (own kind, other kind) as (stateful sets, deployments).
        let kinds = |own: bool| {
            if stateful_set == own {
                (true, false)
            } else {
                (false, true)
            }
        };
        let (own, other_read) = if stateful_set {
            (
                named(&self.stateful_sets, name).map(|o| o.is_some()),
                self.deployments.is_some(),
            )
        } else {
            (
                named(&self.deployments, name).map(|o| o.is_some()),
                self.stateful_sets.is_some(),
            )
        };
        match own {
            None => kinds(true),
            Some(true) => (false, false),
            Some(false) if other_read => (false, false),
            Some(false) => kinds(false),
        }
    }

    /// Fleet `name`'s workloads as the snapshot takes them: its own kind's, else the
    /// other kind's.
    fn of(
        &self,
        name: &str,
        stateful_set: bool,
    ) -> (Option<Arc<StatefulSet>>, Option<Arc<Deployment>>) {
        let sts = || {
            named(&self.stateful_sets, name)
                .flatten()
                .cloned()
                .map(Arc::new)
        };
        let dep = || {
            named(&self.deployments, name)
                .flatten()
                .cloned()
                .map(Arc::new)
        };
        if stateful_set {
            match sts() {
                Some(s) => (Some(s), None),
                None => (None, dep()),
            }
        } else {
            match dep() {
                Some(d) => (None, Some(d)),
                None => (sts(), None),
            }
        }
    }
}

/// The object named `name` among `list`: `None` when the list was not read,
/// `Some(None)` when none is named so.
fn named<'a, K: kube::Resource>(list: &'a Option<Vec<K>>, name: &str) -> Option<Option<&'a K>> {
    list.as_ref()
        .map(|l| l.iter().find(|o| o.meta().name.as_deref() == Some(name)))
}

/// Reads the fleet and its objects from the API server. `Ok(None)` when the CelldFleet
/// is gone (or was replaced: another uid). [`read_many`] for one fleet.
pub async fn read(
    client: &Client,
    fleet: &Arc<CelldFleet>,
) -> Result<Option<(CelldFleet, Gathered)>, kube::Error> {
    Ok(read_many(client, std::slice::from_ref(fleet), &[])
        .await?
        .pop()
        .flatten())
}

/// Reads fleets of one namespace and their objects from the API server, for each what a
/// read of it alone would have brought at that moment (`None`: the CelldFleet is gone,
/// or was replaced: another uid).
///
/// One fleet is read by name: its CelldFleet, its workloads and its reservation. Several
/// are read in one request per kind: the namespace's CelldFleets and workloads, every
/// reservation, and their Pods, claims and ReplicaSets by a selector naming all their
/// identities; each fleet then keeps what the read of it alone selects, by the same
/// rules. So a burst of fleets due together costs a few requests, not seven or more
/// each.
///
/// The lists run at once (one round trip: the confirmation sits between a deadline and
/// its write; two when a fleet's workload is missing, or when a terminating Pod sits on
/// a node not among `nodes`, the nodes the caches showed under the fleets' terminating
/// Pods, which are read with the rest). The ones keyed by a fleet's spec
/// use the cached spec; a fleet whose fresh CelldFleet has other keys has those read
/// again with the fresh keys, so every object read matches the fleet `decide` is given.
pub async fn read_many(
    client: &Client,
    fleets: &[Arc<CelldFleet>],
    nodes: &[String],
) -> Result<Vec<Option<(CelldFleet, Gathered)>>, kube::Error> {
    let Some(first) = fleets.first() else {
        return Ok(Vec::new());
    };
    let ns = first.metadata.namespace.as_deref().unwrap_or_default();
    let name_of = |f: &CelldFleet| f.metadata.name.clone().unwrap_or_default();
    let names: Vec<String> = fleets.iter().map(|f| name_of(f)).collect();
    let scope = match names.as_slice() {
        [one] => Scope::One(one),
        _ => Scope::Namespace,
    };
    let cached: Vec<Keys> = fleets.iter().map(|f| Keys::of(f)).collect();
    let pairs: Vec<(&str, &Keys)> = names.iter().map(String::as_str).zip(&cached).collect();
    let mut workloads = Workloads::default();
    let (any_sts, any_dep) = (
        cached.iter().any(|k| k.stateful_set),
        cached.iter().any(|k| !k.stateful_set),
    );
    let mut expected: Vec<&str> = nodes.iter().map(String::as_str).collect();
    expected.sort_unstable();
    expected.dedup();
    let (listed_fleets, keyed_cached, (), mut node_read) = futures::try_join!(
        listed::<CelldFleet>(client, ns, scope),
        Keyed::read(client, ns, scope, &pairs),
        workloads.complete(client, ns, scope, any_sts, any_dep),
        NodeRead::of(client, &expected),
    )?;
    // Each fleet's fresh CelldFleet (the same uid), and its keys.
    let fresh: Vec<Option<(CelldFleet, Keys)>> = fleets
        .iter()
        .map(|f| {
            listed_fleets
                .iter()
                .find(|l| l.metadata.uid == f.metadata.uid)
                .cloned()
                .map(|l| {
                    let k = Keys::of(&l);
                    (l, k)
                })
        })
        .collect();
    // A fleet whose keys changed has its keyed objects read again with the fresh ones.
    let rekeyed = futures::future::try_join_all(fresh.iter().zip(&cached).zip(&names).map(
        |((f, old), name)| async move {
            match f {
                Some((_, k)) if k != old => {
                    Keyed::read(client, ns, Scope::One(name), &[(name.as_str(), k)])
                        .await
                        .map(Some)
                }
                _ => Ok(None),
            }
        },
    ))
    .await?;
    // The workloads each fleet still needs (its own kind read, else the other kind).
    let (need_sts, need_dep) = fresh
        .iter()
        .zip(&names)
        .fold((false, false), |acc, (f, n)| {
            let Some((_, k)) = f else { return acc };
            let (s, d) = workloads.needs(n, k.stateful_set);
            (acc.0 || s, acc.1 || d)
        });
    workloads
        .complete(client, ns, scope, need_sts, need_dep)
        .await?;
    let mut out: Vec<Option<(CelldFleet, Own, Keys)>> = fresh
        .into_iter()
        .zip(rekeyed)
        .zip(&names)
        .map(|((f, again), name)| {
            let (fleet, k) = f?;
            let own = again.as_ref().unwrap_or(&keyed_cached).of(name, &k);
            Some((fleet, own, k))
        })
        .collect();
    let mut under: Vec<&str> = out
        .iter()
        .flatten()
        .flat_map(|(_, own, _)| node_names(&own.pods))
        .collect();
    under.sort_unstable();
    under.dedup();
    node_read.complete(client, &under).await?;
    let nodes = node_read.found;
    Ok(out
        .drain(..)
        .zip(&names)
        .map(|(f, name)| {
            let (fleet, own, k) = f?;
            let (sts, dep) = workloads.of(name, k.stateful_set);
            let nodes = node_names(&own.pods)
                .into_iter()
                .map(|n| {
                    let node = nodes.get(n).cloned().flatten();
                    (n.to_string(), node)
                })
                .collect();
            Some((
                fleet,
                Gathered {
                    workload_sts: sts,
                    workload_dep: dep,
                    pods: own.pods,
                    claims: own.claims,
                    replica_sets: own.replica_sets,
                    reservation: Some(own.reservation),
                    nodes: Some(nodes),
                },
            ))
        })
        .collect())
}

/// The nodes of the terminating Pods among `pods` (sorted, each once).
fn node_names(pods: &[Pod]) -> Vec<&str> {
    let mut names: Vec<&str> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .filter_map(|p| p.spec.as_ref()?.node_name.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// At most this many nodes are read one by one; more are read in one list of all nodes.
const NODES_BY_NAME_AT_MOST: usize = 2;

/// The nodes read for a fresh read: by name (`None`: gone).
struct NodeRead {
    /// Every node was listed: a name not found is gone.
    all: bool,
    found: std::collections::HashMap<String, Option<Node>>,
}

impl NodeRead {
    /// Reads the nodes `names`: each by name when there are at most
    /// [`NODES_BY_NAME_AT_MOST`], else every node in one list (a burst strands Pods on
    /// many nodes at once).
    async fn of(client: &Client, names: &[&str]) -> Result<NodeRead, kube::Error> {
        let mut read = NodeRead {
            all: false,
            found: std::collections::HashMap::new(),
        };
        read.complete(client, names).await?;
        Ok(read)
    }

    /// Reads those of `names` not read yet (see [`NodeRead::of`]).
    async fn complete(&mut self, client: &Client, names: &[&str]) -> Result<(), kube::Error> {
        let missing: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !self.found.contains_key(*n))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if self.all {
            // Listed whole already: these are gone.
            for n in missing {
                self.found.insert(n.to_string(), None);
            }
            return Ok(());
        }
        let listed: Vec<Node> = if missing.len() > NODES_BY_NAME_AT_MOST {
            self.all = true;
            lean::cluster::<Node>(client, &ListParams::default())
                .await?
                .items
        } else {
            futures::future::try_join_all(missing.iter().map(|n| {
                let params = by_name(n);
                async move { lean::cluster::<Node>(client, &params).await }
            }))
            .await?
            .into_iter()
            .flat_map(|l| l.items)
            .collect()
        };
        if self.all {
            for node in listed {
                if let Some(n) = node.metadata.name.clone() {
                    self.found.insert(n, Some(node));
                }
            }
        } else {
            for n in missing {
                let node = listed
                    .iter()
                    .find(|o| o.metadata.name.as_deref() == Some(n))
                    .cloned();
                self.found.insert(n.to_string(), node);
            }
        }
        for n in names {
            self.found.entry(n.to_string()).or_insert(None);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;

    fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("apps".into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    fn keys(identity: &str, reservation: &str, stateful_set: bool) -> Keys {
        Keys {
            identity: identity.into(),
            reservation: reservation.into(),
            stateful_set,
        }
    }

    fn names<'a>(it: impl IntoIterator<Item = &'a ObjectMeta>) -> Vec<&'a str> {
        it.into_iter().filter_map(|m| m.name.as_deref()).collect()
    }

    #[test]
    fn a_set_selector_names_each_value_once_in_order() {
        assert_eq!(one_of("k", ["b", "a", "b"]), "k in (a,b)");
        assert_eq!(one_of("k", ["a"]), "k in (a)");
    }

    /// Read with others, a fleet keeps exactly what a read of it alone selects: the Pods
    /// labelled with its identity or held by its handoffs (each once), the claims it
    /// `concerns` (another identity's claim at its member name included), its own
    /// reservation, and ReplicaSets only for a Deployment fleet.
    #[test]
    fn each_fleet_keeps_what_its_own_read_selects() {
        let pod = |name: &str, labels: &[(&str, &str)]| Pod {
            metadata: meta(name, labels),
            ..Pod::default()
        };
        let claim = |name: &str, labels: &[(&str, &str)]| PersistentVolumeClaim {
            metadata: meta(name, labels),
            ..PersistentVolumeClaim::default()
        };
        let both = [(IDENTITY, "ida"), (REPLACEMENT_INDEX, "ida")];
        let read = Keyed {
            labelled: vec![
                pod("alpha-0", &[(IDENTITY, "ida")]),
                pod("alpha-1", &both),
                pod("beta-0", &[(IDENTITY, "idb")]),
            ],
            held: vec![
                pod("alpha-1", &both),
                pod("held-for-alpha", &[(REPLACEMENT_INDEX, "ida")]),
                pod("held-for-beta", &[(REPLACEMENT_INDEX, "idb")]),
            ],
            claims: vec![
                claim("data-alpha-0", &[(IDENTITY, "ida")]),
                claim("data-beta-0", &[(IDENTITY, "idb")]),
                // Another identity's disk at alpha's member name.
                claim("data-alpha-2", &[(IDENTITY, "idz")]),
            ],
            reservations: vec![CelldBucketReservation::new(
                "res-a",
                celld_api::CelldBucketReservationSpec {
                    bucket: "a".into(),
                    prefix: None,
                    identity: "ida".into(),
                    fleet_namespace: "apps".into(),
                    fleet_name: "alpha".into(),
                },
            )],
            replica_sets: vec![ReplicaSet {
                metadata: meta("alpha-rs", &[(IDENTITY, "ida")]),
                ..ReplicaSet::default()
            }],
        };
        let alpha = read.of("alpha", &keys("ida", "res-a", false));
        assert_eq!(
            names(alpha.pods.iter().map(|p| &p.metadata)),
            ["alpha-0", "alpha-1", "held-for-alpha"]
        );
        assert_eq!(
            names(alpha.claims.iter().map(|c| &c.metadata)),
            ["data-alpha-0", "data-alpha-2"]
        );
        assert!(alpha.reservation.is_some());
        assert_eq!(
            names(alpha.replica_sets.iter().map(|r| &r.metadata)),
            ["alpha-rs"]
        );
        let beta = read.of("beta", &keys("idb", "res-b", true));
        assert_eq!(
            names(beta.pods.iter().map(|p| &p.metadata)),
            ["beta-0", "held-for-beta"]
        );
        assert_eq!(
            names(beta.claims.iter().map(|c| &c.metadata)),
            ["data-beta-0"]
        );
        assert!(beta.reservation.is_none());
        assert!(beta.replica_sets.is_empty());
    }

    /// A fleet takes the workload of its own kind named after it, and needs the other
    /// kind read only when there is none of its own.
    #[test]
    fn the_other_kind_is_read_only_when_the_own_is_missing() {
        let sts = |name: &str| StatefulSet {
            metadata: meta(name, &[]),
            ..StatefulSet::default()
        };
        let dep = |name: &str| Deployment {
            metadata: meta(name, &[]),
            ..Deployment::default()
        };
        let mut w = Workloads::default();
        assert_eq!(w.needs("alpha", true), (true, false));
        assert_eq!(w.needs("web", false), (false, true));
        w.stateful_sets = Some(vec![sts("alpha")]);
        assert_eq!(w.needs("alpha", true), (false, false));
        assert_eq!(
            w.needs("beta", true),
            (false, true),
            "beta's own is missing"
        );
        w.deployments = Some(vec![dep("beta"), dep("web")]);
        assert_eq!(w.needs("beta", true), (false, false));
        assert_eq!(w.needs("web", false), (false, false));
        let (s, d) = w.of("alpha", true);
        assert!(s.is_some() && d.is_none());
        let (s, d) = w.of("beta", true);
        assert!(
            s.is_none() && d.is_some(),
            "the wrong kind named like the fleet (W2)"
        );
        let (s, d) = w.of("web", false);
        assert!(s.is_none() && d.is_some());
        let (s, d) = w.of("gone", false);
        assert!(s.is_none() && d.is_none());
    }
}
