//! A fleet's objects read straight from the API server, bypassing the watch caches, for
//! the confirmation every destructive write needs (see `crate::confirm`).
//!
//! Only `list` is used (with a `metadata.name` field selector where one object is
//! wanted), so the healer's RBAC stays list/watch: no `get`. Per confirmation: one list
//! each of the CelldFleet, StatefulSets and Deployments named after it, Pods carrying its
//! identity, Pods held by its handoffs, the namespace's claims, and its bucket
//! reservation; plus its ReplicaSets (metadata only) for a Deployment fleet. Unlike the
//! caches, the workloads are read by name whatever their labels, so an unlabelled
//! workload named like the fleet is seen before any of its claims could be deleted; and
//! the reservation is read again so a bucket just reserved to another identity (rule V3)
//! stops growth and healing even while the reservation watch lags (the simulation's
//! `sim_fails_when_the_reservation_is_not_read_fresh` shows what happens otherwise).

use std::collections::HashSet;

use celld_api::labels::{IDENTITY, REPLACEMENT_INDEX, claim_ordinal};
use celld_api::{CelldBucketReservation, CelldFleet, reservation_name};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
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
}

/// Number of list requests one fresh read makes, for the request-cost figures.
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

/// Reads the fleet and its objects from the API server. `Ok(None)` when the CelldFleet
/// is gone (or was replaced: another uid).
pub async fn read(
    client: &Client,
    fleet: &CelldFleet,
) -> Result<Option<(CelldFleet, Gathered)>, kube::Error> {
    let ns = fleet.metadata.namespace.as_deref().unwrap_or_default();
    let name = fleet.metadata.name.as_deref().unwrap_or_default();
    let fresh = Api::<CelldFleet>::namespaced(client.clone(), ns)
        .list(&by_name(name))
        .await?
        .items
        .into_iter()
        .find(|f| f.metadata.uid == fleet.metadata.uid);
    let Some(fresh) = fresh else {
        return Ok(None);
    };
    let identity = fresh.spec.identity.clone();
    let sts = named::<StatefulSet>(client, ns, name).await?;
    let dep = named::<Deployment>(client, ns, name).await?;
    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    let mut seen = HashSet::new();
    let mut pods = Vec::new();
    for key in [IDENTITY, REPLACEMENT_INDEX] {
        let lp = ListParams::default().labels(&format!("{key}={identity}"));
        for p in pods_api.list(&lp).await?.items {
            if seen.insert(p.metadata.uid.clone()) {
                pods.push(p);
            }
        }
    }
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| concerns(name, &identity, c))
        .collect();
    let reserved = reservation_name(
        &fresh.spec.storage.bucket,
        fresh.spec.storage.prefix.as_deref(),
    );
    let reservation = Api::<CelldBucketReservation>::all(client.clone())
        .list(&by_name(&reserved))
        .await?
        .items
        .into_iter()
        .find(|r| r.metadata.name.as_deref() == Some(reserved.as_str()))
        .map(Arc::new);
    let replica_sets = if fresh.spec.is_stateful_set() {
        Vec::new()
    } else {
        Api::<ReplicaSet>::namespaced(client.clone(), ns)
            .list_metadata(&ListParams::default().labels(&format!("{IDENTITY}={identity}")))
            .await?
            .items
            .into_iter()
            .map(|r| ReplicaSet {
                metadata: r.metadata,
                ..ReplicaSet::default()
            })
            .collect()
    };
    Ok(Some((
        fresh,
        Gathered {
            workload_sts: sts,
            workload_dep: dep,
            pods,
            claims,
            replica_sets,
            reservation: Some(reservation),
        },
    )))
}
