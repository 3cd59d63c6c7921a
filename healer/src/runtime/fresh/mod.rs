//! A fleet's objects read straight from the API server, bypassing the watch caches, for
//! the confirmation every destructive write needs (see `crate::confirm`).
//!
//! Only `list` is used (with a `metadata.name` field selector where one object is
//! wanted), so the healer's RBAC stays list/watch: no `get`. Per confirmation, all at
//! once: one list each of the CelldFleet, the workload of its kind named after it (then
//! of the other kind if there is none: [`workloads`]), Pods carrying its identity, Pods
//! held by its handoffs and its bucket reservation; the node of each of those Pods that
//! is terminating (rule F2 force-deletes a Pod only if its node is unreachable on this
//! read too: one list per such node, none in the steady state); its
//! claims ([`claims`]: the namespace's claim names and the claims carrying the identity,
//! then any other claim at a member name); plus its ReplicaSets (metadata only) for a
//! Deployment fleet. Unlike the caches, the workloads are read by name whatever their
//! labels, so an unlabelled workload named like the fleet is seen before any of its
//! claims could be deleted; and the reservation is read again so a bucket just reserved
//! to another identity (rule V3) stops growth and healing even while the reservation
//! watch lags (the simulation's `sim_fails_when_the_reservation_is_not_read_fresh` shows
//! what happens otherwise).

mod claims;

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

/// Number of list requests one fresh read makes when the fleet's workload exists (one
/// more when it does not), no claim of another identity sits at a member name (each
/// such claim adds one) and no Pod is terminating (each node under one adds one), for
/// the request-cost figures.
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

/// The object of kind `K` named `name`, whatever its labels.
async fn named<K>(client: &Client, ns: &str, name: &str) -> Result<Option<Arc<K>>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(Api::<K>::namespaced(client.clone(), ns)
        .list(&by_name(name))
        .await?
        .items
        .into_iter()
        .next()
        .map(Arc::new))
}

/// The workloads named after the fleet, whatever their labels: the fleet's own kind, and
/// the other kind only when there is none of its own. The snapshot takes the other kind
/// only then (a workload of the wrong kind named like the fleet, rule W2), so this is
/// the same snapshot for one list fewer in the common case, at one more round trip when
/// the fleet's own workload is missing.
async fn workloads(
    client: &Client,
    ns: &str,
    name: &str,
    stateful_set: bool,
) -> Result<(Option<Arc<StatefulSet>>, Option<Arc<Deployment>>), kube::Error> {
    if stateful_set {
        let sts = named::<StatefulSet>(client, ns, name).await?;
        let dep = match sts {
            Some(_) => None,
            None => named::<Deployment>(client, ns, name).await?,
        };
        Ok((sts, dep))
    } else {
        let dep = named::<Deployment>(client, ns, name).await?;
        let sts = match dep {
            Some(_) => None,
            None => named::<StatefulSet>(client, ns, name).await?,
        };
        Ok((sts, dep))
    }
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

/// The objects found by identity, reservation name and kind (the part of [`Gathered`]
/// that depends on the fleet's spec).
struct Keyed {
    pods: Vec<Pod>,
    claims: Vec<PersistentVolumeClaim>,
    reservation: Option<Arc<CelldBucketReservation>>,
    replica_sets: Vec<ReplicaSet>,
}

async fn keyed(client: &Client, ns: &str, name: &str, k: &Keys) -> Result<Keyed, kube::Error> {
    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    let reservations_api = Api::<CelldBucketReservation>::all(client.clone());
    let by_label = |key: &str| ListParams::default().labels(&format!("{key}={}", k.identity));
    let (identity, replacement) = (by_label(IDENTITY), by_label(REPLACEMENT_INDEX));
    let reserved = by_name(&k.reservation);
    let (labelled, held, claims, reservation, replica_sets) = futures::try_join!(
        pods_api.list(&identity),
        pods_api.list(&replacement),
        claims::read(client, ns, name, &k.identity),
        reservations_api.list(&reserved),
        async {
            if k.stateful_set {
                return Ok(Vec::new());
            }
            Api::<ReplicaSet>::namespaced(client.clone(), ns)
                .list_metadata(&identity)
                .await
                .map(|l| l.items)
        },
    )?;
    let mut seen = HashSet::new();
    let pods = labelled
        .items
        .into_iter()
        .chain(held.items)
        .filter(|p| seen.insert(p.metadata.uid.clone()))
        .collect();
    Ok(Keyed {
        pods,
        claims: claims
            .into_iter()
            .filter(|c| concerns(name, &k.identity, c))
            .collect(),
        reservation: reservation
            .items
            .into_iter()
            .find(|r| r.metadata.name.as_deref() == Some(k.reservation.as_str()))
            .map(Arc::new),
        replica_sets: replica_sets
            .into_iter()
            .map(|r| ReplicaSet {
                metadata: r.metadata,
                ..ReplicaSet::default()
            })
            .collect(),
    })
}

/// Reads the fleet and its objects from the API server. `Ok(None)` when the CelldFleet
/// is gone (or was replaced: another uid).
///
/// The lists run at once (one round trip, not seven: the confirmation sits between a
/// deadline and its write; two when the fleet's workload is missing). The ones keyed by
/// the fleet's spec use the cached spec; if
/// the fresh CelldFleet's keys differ, those are read again with the fresh keys, so every
/// object read matches the fleet `decide` is given.
pub async fn read(
    client: &Client,
    fleet: &CelldFleet,
) -> Result<Option<(CelldFleet, Gathered)>, kube::Error> {
    let ns = fleet.metadata.namespace.as_deref().unwrap_or_default();
    let name = fleet.metadata.name.as_deref().unwrap_or_default();
    let cached = Keys::of(fleet);
    let fleets_api = Api::<CelldFleet>::namespaced(client.clone(), ns);
    let this_fleet = by_name(name);
    let (fleets, named_cached, keyed_cached) = futures::try_join!(
        fleets_api.list(&this_fleet),
        workloads(client, ns, name, cached.stateful_set),
        keyed(client, ns, name, &cached),
    )?;
    let Some(fresh) = fleets
        .items
        .into_iter()
        .find(|f| f.metadata.uid == fleet.metadata.uid)
    else {
        return Ok(None);
    };
    let keys = Keys::of(&fresh);
    let ((sts, dep), k) = if keys == cached {
        (named_cached, keyed_cached)
    } else {
        futures::try_join!(
            workloads(client, ns, name, keys.stateful_set),
            keyed(client, ns, name, &keys),
        )?
    };
    let nodes = nodes_under_terminating(client, &k.pods).await?;
    Ok(Some((
        fresh,
        Gathered {
            workload_sts: sts,
            workload_dep: dep,
            pods: k.pods,
            claims: k.claims,
            replica_sets: k.replica_sets,
            reservation: Some(k.reservation),
            nodes: Some(nodes),
        },
    )))
}

/// The nodes of the terminating Pods among `pods`, each read by name (`None`: gone).
async fn nodes_under_terminating(
    client: &Client,
    pods: &[Pod],
) -> Result<Vec<(String, Option<Node>)>, kube::Error> {
    let mut names: Vec<&str> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .filter_map(|p| p.spec.as_ref()?.node_name.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    let api = Api::<Node>::all(client.clone());
    let lists = futures::future::try_join_all(names.iter().map(|n| {
        let api = api.clone();
        let params = by_name(n);
        async move { api.list(&params).await }
    }))
    .await?;
    Ok(names
        .into_iter()
        .zip(lists)
        .map(|(n, l)| {
            let node = l
                .items
                .into_iter()
                .find(|o| o.metadata.name.as_deref() == Some(n));
            (n.to_string(), node)
        })
        .collect())
}
