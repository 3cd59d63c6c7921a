//! One fresh read for several fleets of a namespace at once ([`read_many`]).
//!
//! When a node or zone is lost, many fleets fall due together, and a read of each (seven
//! lists) put hundreds of lists in front of the API server before the first write. Here
//! the fleets waiting at the same moment share one read: the label-selected lists select
//! every waiting identity at once (`identity in (a,b,...)`), and the objects read by
//! name (the CelldFleet, its workload, its reservation) are listed by name per fleet, or,
//! when the fleets waiting are a large share of the namespace's (of the cluster's, for
//! the cluster-scoped reservations), listed whole and picked by name ([`Listing`]). Each fleet then takes out of what was read exactly the objects the read of
//! that fleet alone would have brought ([`part`]): the same rules, by name, identity,
//! replacement label and [`super::concerns`].
//!
//! A fleet whose fresh CelldFleet has other keys than the cached one (identity, bucket
//! or kind changed) was read with the wrong keys; it is read again alone ([`super::read`]),
//! as the read of one fleet does in that case.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use celld_api::labels::{IDENTITY, REPLACEMENT_INDEX, claim_ordinal};
use celld_api::{CelldBucketReservation, CelldFleet};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::ListParams;
use kube::{Api, Client};

use super::{Gathered, Keys, by_name, claims, concerns, metadata_only};

/// What one shared read brought back: the objects of every fleet read, and some others
/// (a whole namespace's workloads, say). Each fleet's part is taken out by [`part`].
#[derive(Default)]
pub(super) struct Found {
    pub(super) fleets: Vec<CelldFleet>,
    pub(super) stateful_sets: HashMap<String, Arc<StatefulSet>>,
    pub(super) deployments: HashMap<String, Arc<Deployment>>,
    /// Pods carrying one of the identities read, or held by one of their handoffs.
    pub(super) pods: Vec<Pod>,
    /// Claims carrying one of the identities read, or at a member name of a fleet read.
    pub(super) claims: Vec<PersistentVolumeClaim>,
    pub(super) reservations: HashMap<String, Arc<CelldBucketReservation>>,
    /// ReplicaSets (metadata only) carrying one of the Deployment fleets' identities.
    pub(super) replica_sets: Vec<ReplicaSet>,
}

/// Fleet `fresh`'s part of `found`: what a read of that fleet alone, keyed by `fresh`'s
/// own keys, brings back (see [`super::read`]): the workload of its kind named after it
/// (the other kind only when there is none), the Pods carrying its identity or held by
/// its handoffs (each once), the claims that concern it, its reservation, and for a
/// Deployment fleet the ReplicaSets carrying its identity, metadata only. `found` must
/// hold at least what that read would have brought.
pub(super) fn part(found: &Found, fresh: &CelldFleet) -> Gathered {
    let name = fresh.metadata.name.as_deref().unwrap_or_default();
    let k = Keys::of(fresh);
    let sts = found.stateful_sets.get(name).cloned();
    let dep = found.deployments.get(name).cloned();
    let (workload_sts, workload_dep) = match (k.stateful_set, sts, dep) {
        (true, Some(s), _) => (Some(s), None),
        (false, _, Some(d)) => (None, Some(d)),
        (_, s, d) => (s, d),
    };
    let label_is = |labels: &Option<std::collections::BTreeMap<String, String>>, key: &str| {
        labels
            .as_ref()
            .and_then(|l| l.get(key))
            .is_some_and(|v| *v == k.identity)
    };
    let mut seen = HashSet::new();
    let pods = found
        .pods
        .iter()
        .filter(|p| {
            label_is(&p.metadata.labels, IDENTITY)
                || label_is(&p.metadata.labels, REPLACEMENT_INDEX)
        })
        .filter(|p| seen.insert(p.metadata.uid.clone()))
        .cloned()
        .collect();
    let replica_sets = if k.stateful_set {
        Vec::new()
    } else {
        found
            .replica_sets
            .iter()
            .filter(|r| label_is(&r.metadata.labels, IDENTITY))
            .map(|r| metadata_only(r.metadata.clone()))
            .collect()
    };
    Gathered {
        workload_sts,
        workload_dep,
        pods,
        claims: found
            .claims
            .iter()
            .filter(|c| concerns(name, &k.identity, c))
            .cloned()
            .collect(),
        replica_sets,
        reservation: Some(found.reservations.get(&k.reservation).cloned()),
    }
}

/// `key in (v1,v2,...)` over `values` (identities: lowercase letters and digits only,
/// so nothing in them can change the selector's meaning; see [`super::shared`]).
fn any_of(key: &str, values: &BTreeSet<&str>) -> ListParams {
    let list: Vec<&str> = values.iter().copied().collect();
    ListParams::default().labels(&format!("{key} in ({})", list.join(",")))
}

/// The objects of kind `K` named one of `names`, whatever their labels: one list of the
/// whole scope when `whole`, otherwise one list by name each.
async fn named_many<K>(
    api: &Api<K>,
    names: &BTreeSet<String>,
    whole: bool,
) -> Result<HashMap<String, Arc<K>>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let items: Vec<K> = if names.is_empty() {
        Vec::new()
    } else if whole {
        api.list(&ListParams::default()).await?.items
    } else {
        futures::future::try_join_all(
            names
                .iter()
                .map(|n| async move { api.list(&by_name(n)).await.map(|l| l.items) }),
        )
        .await?
        .into_iter()
        .flatten()
        .collect()
    };
    Ok(items
        .into_iter()
        .filter_map(|o| {
            let n = o.meta().name.clone()?;
            names.contains(&n).then(|| (n, Arc::new(o)))
        })
        .collect())
}

/// How a shared read finds the objects it reads by name: one list by name each, or one
/// list of the whole scope, picked by name (cheaper when the fleets read are a large
/// share of the scope's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The namespace's CelldFleets, StatefulSets and Deployments listed whole.
    pub namespace_whole: bool,
    /// Every bucket reservation of the cluster (they are cluster-scoped) listed whole.
    pub reservations_whole: bool,
}

/// Reads the fleets `cached` (all in namespace `ns`, each identity a valid one) and their
/// objects from the API server in one shared read; for each, in order, what
/// [`super::read`] would return for it alone. The healer reads through
/// [`super::Reads`]; this is public for the end-to-end test that holds it to
/// [`super::read`] on a real API server.
pub async fn read_many(
    client: &Client,
    ns: &str,
    cached: &[Arc<CelldFleet>],
    listing: Listing,
) -> Result<Vec<Option<(CelldFleet, Gathered)>>, kube::Error> {
    let whole = listing.namespace_whole;
    let keys: Vec<Keys> = cached.iter().map(|f| Keys::of(f)).collect();
    let name_of = |f: &Arc<CelldFleet>| f.metadata.name.clone().unwrap_or_default();
    let names: BTreeSet<String> = cached.iter().map(name_of).collect();
    let of_kind = |sts: bool| -> BTreeSet<String> {
        cached
            .iter()
            .zip(&keys)
            .filter(|(_, k)| k.stateful_set == sts)
            .map(|(f, _)| name_of(f))
            .collect()
    };
    let identities: BTreeSet<&str> = keys.iter().map(|k| k.identity.as_str()).collect();
    let deployment_identities: BTreeSet<&str> = keys
        .iter()
        .filter(|k| !k.stateful_set)
        .map(|k| k.identity.as_str())
        .collect();
    let reservations: BTreeSet<String> = keys.iter().map(|k| k.reservation.clone()).collect();

    let (own_sts, own_dep) = (of_kind(true), of_kind(false));
    let labelled_claims = any_of(IDENTITY, &identities);
    let fleets_api = Api::<CelldFleet>::namespaced(client.clone(), ns);
    let sts_api = Api::<StatefulSet>::namespaced(client.clone(), ns);
    let dep_api = Api::<Deployment>::namespaced(client.clone(), ns);
    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    let res_api = Api::<CelldBucketReservation>::all(client.clone());
    let (fleets, mut stateful_sets, mut deployments, labelled, held, claims, reservations, rs) = futures::try_join!(
        named_many(&fleets_api, &names, whole),
        named_many(&sts_api, &own_sts, whole),
        named_many(&dep_api, &own_dep, whole),
        async { Ok(pods_api.list(&any_of(IDENTITY, &identities)).await?.items) },
        async {
            Ok(pods_api
                .list(&any_of(REPLACEMENT_INDEX, &identities))
                .await?
                .items)
        },
        claims::read_of(client, ns, &labelled_claims, |n| {
            names.iter().any(|f| claim_ordinal(f, n).is_some())
        }),
        named_many(&res_api, &reservations, listing.reservations_whole),
        async {
            if deployment_identities.is_empty() {
                return Ok(Vec::new());
            }
            Api::<ReplicaSet>::namespaced(client.clone(), ns)
                .list_metadata(&any_of(IDENTITY, &deployment_identities))
                .await
                .map(|l| l.items)
        },
    )?;
    // The other kind, by name, for the fleets without a workload of their own kind.
    let without_own = |sts: bool| -> BTreeSet<String> {
        (if sts { &own_sts } else { &own_dep })
            .iter()
            .filter(|n| {
                if sts {
                    !stateful_sets.contains_key(*n)
                } else {
                    !deployments.contains_key(*n)
                }
            })
            .cloned()
            .collect()
    };
    let (no_sts, no_dep) = (without_own(true), without_own(false));
    let (more_dep, more_sts) = futures::try_join!(
        named_many(&dep_api, &no_sts, false),
        named_many(&sts_api, &no_dep, false),
    )?;
    deployments.extend(more_dep);
    stateful_sets.extend(more_sts);

    let found = Found {
        fleets: fleets.into_values().map(|f| (*f).clone()).collect(),
        stateful_sets,
        deployments,
        pods: labelled.into_iter().chain(held).collect(),
        claims,
        reservations,
        replica_sets: rs.into_iter().map(|r| metadata_only(r.metadata)).collect(),
    };
    let mut out = Vec::with_capacity(cached.len());
    for (fleet, k) in cached.iter().zip(&keys) {
        let Some(fresh) = found.fleets.iter().find(|f| {
            f.metadata.name == fleet.metadata.name && f.metadata.uid == fleet.metadata.uid
        }) else {
            out.push(None);
            continue;
        };
        if Keys::of(fresh) != *k {
            // Read with the cached keys, which are no longer the fleet's: alone again.
            out.push(super::read(client, fleet).await?);
            continue;
        }
        out.push(Some((fresh.clone(), part(&found, fresh))));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use celld_api::Profile;
    use celld_api::labels::claim_name;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::testkit::{fleet_object, object_meta};

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        object_meta("ns", name, labels)
    }

    fn names<K: kube::Resource>(objects: &[K]) -> Vec<String> {
        let mut n: Vec<String> = objects
            .iter()
            .filter_map(|o| o.meta().name.clone())
            .collect();
        n.sort();
        n
    }

    /// Fleet `a` (a PersistentFleet on a StatefulSet) and fleet `b` (a Bucket fleet on
    /// a Deployment), and what a read of both brought.
    fn two_fleets() -> (CelldFleet, CelldFleet, Found) {
        let a = fleet_object("ns", "a", A);
        let mut b = fleet_object("ns", "b", B);
        b.spec.profile = Profile::Bucket;
        let (ka, kb) = (Keys::of(&a), Keys::of(&b));
        assert!(ka.stateful_set && !kb.stateful_set);
        let pod = |name: &str, labels: &[(&str, &str)]| Pod {
            metadata: meta(name, labels),
            ..Pod::default()
        };
        let claim = |name: &str, labels: &[(&str, &str)]| PersistentVolumeClaim {
            metadata: meta(name, labels),
            ..PersistentVolumeClaim::default()
        };
        let found = Found {
            fleets: vec![a.clone(), b.clone()],
            stateful_sets: [("a", "a"), ("b", "b")]
                .map(|(k, n)| {
                    let s = StatefulSet {
                        metadata: meta(n, &[]),
                        ..StatefulSet::default()
                    };
                    (k.to_string(), Arc::new(s))
                })
                .into(),
            deployments: [(
                "a".to_string(),
                Arc::new(Deployment {
                    metadata: meta("a", &[]),
                    ..Deployment::default()
                }),
            )]
            .into(),
            pods: vec![
                pod("a-0", &[(IDENTITY, A)]),
                pod("b-x", &[(IDENTITY, B)]),
                // A replacement held by a's handoff, listed by both selectors.
                pod("a-1", &[(IDENTITY, A), (REPLACEMENT_INDEX, A)]),
                pod("a-1", &[(IDENTITY, A), (REPLACEMENT_INDEX, A)]),
                pod("spare", &[(REPLACEMENT_INDEX, B)]),
            ],
            claims: vec![
                claim(&claim_name("a", 0), &[(IDENTITY, A)]),
                // Another identity's disk at a's member name: a's concern, not b's.
                claim(&claim_name("a", 2), &[(IDENTITY, B)]),
                claim("unrelated", &[(IDENTITY, B)]),
                claim(&claim_name("c", 0), &[]),
            ],
            reservations: [(ka, "a"), (kb, "b")]
                .map(|(k, fleet)| {
                    let spec = celld_api::CelldBucketReservationSpec {
                        bucket: format!("{fleet}-bucket"),
                        prefix: None,
                        identity: k.identity,
                        fleet_namespace: "ns".into(),
                        fleet_name: fleet.into(),
                    };
                    let o = CelldBucketReservation::new(&k.reservation, spec);
                    (k.reservation, Arc::new(o))
                })
                .into(),
            replica_sets: vec![
                ReplicaSet {
                    metadata: meta("b-1234", &[(IDENTITY, B)]),
                    spec: Some(Default::default()),
                    ..ReplicaSet::default()
                },
                ReplicaSet {
                    metadata: meta("a-1234", &[(IDENTITY, A)]),
                    ..ReplicaSet::default()
                },
            ],
        };
        (a, b, found)
    }

    /// Each fleet takes out of a shared read only what a read of it alone would bring.
    #[test]
    fn each_fleet_gets_exactly_its_own_part() {
        let (a, b, found) = two_fleets();
        let pa = part(&found, &a);
        assert_eq!(
            pa.workload_sts.as_ref().map(|s| names(&[(**s).clone()])),
            Some(vec!["a".into()])
        );
        assert!(
            pa.workload_dep.is_none(),
            "the other kind only when its own is missing"
        );
        assert_eq!(names(&pa.pods), ["a-0", "a-1"], "each Pod once");
        assert_eq!(names(&pa.claims), [claim_name("a", 0), claim_name("a", 2)]);
        assert!(
            pa.replica_sets.is_empty(),
            "no ReplicaSets for a StatefulSet fleet"
        );
        let res = pa.reservation.expect("read").expect("found");
        assert_eq!(res.metadata.name, Some(Keys::of(&a).reservation));

        let pb = part(&found, &b);
        assert!(pb.workload_dep.is_none());
        assert_eq!(
            pb.workload_sts
                .as_ref()
                .and_then(|s| s.metadata.name.clone())
                .as_deref(),
            Some("b"),
            "no Deployment named b: the StatefulSet named b is its (wrong-kind) workload"
        );
        assert_eq!(names(&pb.pods), ["b-x", "spare"]);
        assert_eq!(
            names(&pb.claims),
            [claim_name("a", 2).as_str(), "unrelated"],
            "b's label wherever it is; nothing unlabelled elsewhere"
        );
        assert_eq!(names(&pb.replica_sets), ["b-1234"]);
        assert!(
            pb.replica_sets.iter().all(|r| r.spec.is_none()),
            "metadata only"
        );
    }

    /// A fleet whose reservation was not found gets "read, none there", never "not read".
    #[test]
    fn a_missing_reservation_is_read_as_absent() {
        let (a, _, mut found) = two_fleets();
        found.reservations.clear();
        found.stateful_sets.clear();
        let pa = part(&found, &a);
        assert!(matches!(pa.reservation, Some(None)));
        assert_eq!(
            pa.workload_dep
                .and_then(|d| d.metadata.name.clone())
                .as_deref(),
            Some("a"),
            "its own kind missing: the Deployment named like it"
        );
    }

    #[test]
    fn identities_are_selected_as_one_set() {
        let ids: BTreeSet<&str> = [B, A, A].into();
        let lp = any_of(IDENTITY, &ids);
        assert_eq!(lp.label_selector, Some(format!("{IDENTITY} in ({A},{B})")));
    }
}
