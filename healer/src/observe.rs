//! Building a [`Snapshot`] from Kubernetes objects.
//!
//! The runtime lists (or reads from its watch caches) the objects of one fleet and hands
//! them over as they are. Conversion fails with an [`ObserveError`] naming the object and
//! the missing field when an object the healer might act on cannot be read in full (no
//! uid, no resourceVersion, no creation time...): the healer never acts on partial data.
//! Objects that are not the fleet's are dropped, not refused.

use std::collections::BTreeMap;

use celld_api::labels::{
    FLEET_FINALIZER, IDENTITY, REPLACEMENT_FINALIZER, REPLACEMENT_INDEX, REPLACEMENT_RECORD,
    claim_ordinal,
};
use celld_api::{CelldBucketReservation, CelldFleet, reservation_name};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod as KPod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use crate::record::HandoffRecord;
use crate::snapshot::*;
use crate::time::Timestamp;
use crate::zone::{self, ZoneLookup};

/// Container waiting reasons that mean "waiting on image or configuration".
pub const CONFIG_WAITS: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
];

/// An object the healer cannot read in full.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{kind} {name}: {problem}; the healer does not act on partial data")]
pub struct ObserveError {
    /// Kind of the object.
    pub kind: &'static str,
    /// Its name (or `<unnamed>`).
    pub name: String,
    /// What is missing or wrong.
    pub problem: String,
}

/// The fleet's workload as read from the API.
#[derive(Clone, Copy, Debug)]
pub enum WorkloadObject<'a> {
    /// A StatefulSet.
    StatefulSet(&'a StatefulSet),
    /// A Deployment.
    Deployment(&'a Deployment),
}

/// Everything `observe` needs for one fleet.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The CelldFleet.
    pub fleet: &'a CelldFleet,
    /// Its spec's problems, [`crate::validity::problems`] of `fleet` (the runtime keeps
    /// them per spec: [`crate::validity::Remembered`]); not empty: no lifecycle action.
    pub invalid: &'a [String],
    /// The workload named after the fleet in its namespace, if it exists.
    pub workload: Option<WorkloadObject<'a>>,
    /// Pods labelled with the fleet identity, and Pods labelled
    /// `fleet.celld.dev/replacement-fleet=<identity>` (others are dropped).
    pub pods: &'a [KPod],
    /// Claims labelled with the fleet identity, and claims named `data-<fleet>-<n>`
    /// (others are dropped).
    pub claims: &'a [PersistentVolumeClaim],
    /// For a Deployment: its ReplicaSets, to resolve which Pods it controls.
    pub replica_sets: &'a [ReplicaSet],
    /// Where nodes and volumes are ([`crate::zone`]); only shown in member status.
    pub zones: &'a dyn ZoneLookup,
    /// Result of verifying the prerequisites against the rendering.
    pub infrastructure: &'a Infrastructure,
    /// The capacity evaluator's conclusion.
    pub capacity: &'a CapacitySignal,
    /// The older fleet (`namespace/name`) that carries the same identity, if any: the
    /// runtime finds it among every fleet it serves.
    pub identity_conflict: Option<&'a str>,
    /// Pod uid -> when a failed force delete may be tried again.
    pub force_delete_retry: &'a BTreeMap<String, Timestamp>,
    /// The reservation looked up for the fleet's bucket and prefix: `Some(None)` when
    /// looked up and absent, `None` when not looked up.
    pub reservation: Option<Option<&'a CelldBucketReservation>>,
}

fn err(kind: &'static str, meta: &ObjectMeta, problem: impl Into<String>) -> ObserveError {
    ObserveError {
        kind,
        name: meta.name.clone().unwrap_or_else(|| "<unnamed>".into()),
        problem: problem.into(),
    }
}

fn need<'m>(
    kind: &'static str,
    meta: &'m ObjectMeta,
    field: &'static str,
    v: &'m Option<String>,
) -> Result<String, ObserveError> {
    match v.as_deref() {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(err(kind, meta, format!("metadata.{field} is missing"))),
    }
}

fn ts(t: &Time) -> Timestamp {
    Timestamp(t.0.as_millisecond())
}

fn created(kind: &'static str, meta: &ObjectMeta) -> Result<Timestamp, ObserveError> {
    meta.creation_timestamp
        .as_ref()
        .map(ts)
        .ok_or_else(|| err(kind, meta, "metadata.creationTimestamp is missing"))
}

fn label<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m String> {
    meta.labels.as_ref().and_then(|l| l.get(key))
}

fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()
        .and_then(|o| o.iter().find(|r| r.controller == Some(true)))
}

/// The fleet that owns `me`'s identity when several fleets carry it: the oldest by
/// creationTimestamp, then namespace, then name. Returns its `namespace/name` when that is
/// not `me` (then `me` is the newer one and gets no action), `None` otherwise.
pub fn identity_owner<'a>(
    me: &CelldFleet,
    all: impl IntoIterator<Item = &'a CelldFleet>,
) -> Option<String> {
    identity_owner_among(me, all.into_iter().map(Claimant::of))
}

/// A fleet as rule V2 compares it: also one the runtime could not read whole, whose
/// identity it still knows.
#[derive(Clone, Copy, Debug)]
pub struct Claimant<'a> {
    pub identity: &'a str,
    pub uid: Option<&'a str>,
    pub created: Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl<'a> Claimant<'a> {
    /// A fleet that read.
    pub fn of(f: &'a CelldFleet) -> Claimant<'a> {
        Claimant {
            identity: &f.spec.identity,
            uid: f.metadata.uid.as_deref(),
            created: f.metadata.creation_timestamp.as_ref(),
            namespace: f.metadata.namespace.as_deref().unwrap_or_default(),
            name: f.metadata.name.as_deref().unwrap_or_default(),
        }
    }
}

/// [`identity_owner`] among any claimants of an identity.
pub fn identity_owner_among<'a>(
    me: &CelldFleet,
    all: impl IntoIterator<Item = Claimant<'a>>,
) -> Option<String> {
    let mine = (
        me.metadata.creation_timestamp.as_ref().map(|t| t.0),
        me.metadata.namespace.clone().unwrap_or_default(),
        me.metadata.name.clone().unwrap_or_default(),
    );
    all.into_iter()
        .filter(|c| c.identity == me.spec.identity && c.uid != me.metadata.uid.as_deref())
        .map(|c| {
            (
                c.created.map(|t| t.0),
                c.namespace.to_string(),
                c.name.to_string(),
            )
        })
        // A missing creation time sorts first (None < Some): such a fleet is not one the
        // API server returned, so it is treated as the older, which blocks `me` (safe).
        .filter(|k| *k < mine)
        .min()
        .map(|(_, ns, name)| format!("{ns}/{name}"))
}

/// Builds the snapshot of one fleet.
pub fn snapshot(i: Inputs<'_>) -> Result<Snapshot, ObserveError> {
    let mut fleet = fleet(i.fleet, i.invalid)?;
    fleet.identity_conflict = i.identity_conflict.map(str::to_string);
    fleet.reservation = i.reservation.map(|r| Reservation {
        name: reservation_name(
            &i.fleet.spec.storage.bucket,
            i.fleet.spec.storage.prefix.as_deref(),
        ),
        found: r.map(|r| crate::snapshot::ReservedFor {
            this_fleet: r.spec.held_by(i.fleet),
            holder: r.spec.holder(),
        }),
    });
    let workload = match i.workload {
        None => None,
        Some(WorkloadObject::StatefulSet(s)) => Some(stateful_set(s)?),
        Some(WorkloadObject::Deployment(d)) => Some(deployment(d)?),
    };
    // ReplicaSet uid -> its controller, for Deployment Pods.
    let mut rs_owner: BTreeMap<&str, &OwnerReference> = BTreeMap::new();
    for rs in i.replica_sets {
        if let (Some(uid), Some(c)) = (rs.metadata.uid.as_deref(), controller_of(&rs.metadata)) {
            rs_owner.insert(uid, c);
        }
    }
    let mut pods = Vec::new();
    for p in i.pods {
        let m = &p.metadata;
        let ours = label(m, IDENTITY) == Some(&fleet.identity)
            || label(m, REPLACEMENT_INDEX) == Some(&fleet.identity);
        if ours {
            let kpod = p;
            let mut p = pod(p, &rs_owner)?;
            p.zone = zone::member_zone(kpod, i.claims, i.zones);
            p.node = match &p.node_name {
                None => NodeState::Unbound,
                Some(n) => i.zones.node_state(n),
            };
            p.force_delete_retry_at = i.force_delete_retry.get(&p.uid).copied();
            pods.push(p);
        }
    }
    let mut claims = Vec::new();
    for c in i.claims {
        let m = &c.metadata;
        let ours = label(m, IDENTITY) == Some(&fleet.identity)
            || m.name
                .as_deref()
                .is_some_and(|n| claim_ordinal(&fleet.name, n).is_some());
        if ours {
            // `lost_since` and the Pods' `seen_since` are the runtime's own observation
            // (`crate::clock::Observations`), filled after this.
            claims.push(claim(c)?);
        }
    }
    // One order whatever the source (a cache's hash order, the API's name order), so the
    // decision on the caches and the one on a fresh read pick the same object.
    pods.sort_by(|a, b| (&a.name, &a.uid).cmp(&(&b.name, &b.uid)));
    claims.sort_by(|a, b| (&a.name, &a.uid).cmp(&(&b.name, &b.uid)));
    Ok(Snapshot {
        fleet,
        workload,
        pods,
        claims,
        infrastructure: i.infrastructure.clone(),
        capacity: i.capacity.clone(),
        // Not a Kubernetes object: the runtime adds the members' answers.
        application: None,
        clock_skew: None,
    })
}

fn fleet(f: &CelldFleet, invalid: &[String]) -> Result<Fleet, ObserveError> {
    const K: &str = "CelldFleet";
    let m = &f.metadata;
    let spec = &f.spec;
    let external = spec.capacity_mode() == Some(celld_api::CapacityMode::External);
    Ok(Fleet {
        name: need(K, m, "name", &m.name)?,
        namespace: need(K, m, "namespace", &m.namespace)?,
        uid: need(K, m, "uid", &m.uid)?,
        resource_version: need(K, m, "resourceVersion", &m.resource_version)?,
        generation: m
            .generation
            .ok_or_else(|| err(K, m, "metadata.generation is missing"))?,
        identity: if spec.identity.is_empty() {
            return Err(err(K, m, "spec.identity is empty"));
        } else {
            spec.identity.clone()
        },
        profile: spec.profile,
        stateful_set: spec.is_stateful_set(),
        members: if external {
            spec.members
        } else {
            Some(spec.effective_members())
        },
        zones: spec.placement.zones.len() as i32,
        termination_grace_seconds: spec.termination_grace_seconds(),
        paused: spec.paused(),
        deleting: m.deletion_timestamp.is_some(),
        deletion_protected: spec.deletion_protected(),
        identity_conflict: None,
        reservation: None,
        accepted_disk_loss: m
            .annotations
            .as_ref()
            .and_then(|a| a.get(celld_api::labels::ACCEPT_DISK_LOSS))
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        invalid: invalid.to_vec(),
        has_finalizer: m
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == FLEET_FINALIZER)),
        capacity: spec.capacity.as_ref().map(|c| c.effective()),
        previous_status: f.status.clone(),
    })
}

/// The status fields a workload reports, whichever its kind.
struct WorkloadStatus {
    observed_generation: Option<i64>,
    replicas: i32,
    ready_replicas: Option<i32>,
    updated_replicas: Option<i32>,
    current_revision: Option<String>,
    update_revision: Option<String>,
    claim_retention: ClaimRetention,
}

/// The one builder of both workload kinds: the metadata every rule needs, refused when
/// incomplete, and the kind's status.
fn workload(
    kind: WorkloadKind,
    m: &ObjectMeta,
    spec_replicas: Option<i32>,
    st: WorkloadStatus,
) -> Result<Workload, ObserveError> {
    let k = kind.as_str();
    Ok(Workload {
        kind,
        name: need(k, m, "name", &m.name)?,
        uid: need(k, m, "uid", &m.uid)?,
        resource_version: need(k, m, "resourceVersion", &m.resource_version)?,
        generation: m
            .generation
            .ok_or_else(|| err(k, m, "metadata.generation is missing"))?,
        observed_generation: st.observed_generation,
        identity: label(m, IDENTITY).cloned(),
        has_owner_references: m.owner_references.as_ref().is_some_and(|o| !o.is_empty()),
        deleting: m.deletion_timestamp.is_some(),
        // The API server defaults an absent spec.replicas to 1.
        replicas: spec_replicas.unwrap_or(1),
        status_replicas: st.replicas,
        ready_replicas: st.ready_replicas.unwrap_or(0),
        updated_replicas: st.updated_replicas.unwrap_or(0),
        current_revision: st.current_revision,
        update_revision: st.update_revision,
        claim_retention: st.claim_retention,
    })
}

fn stateful_set(s: &StatefulSet) -> Result<Workload, ObserveError> {
    let st = s.status.clone().unwrap_or_default();
    let policy = s.spec.persistent_volume_claim_retention_policy.as_ref();
    workload(
        WorkloadKind::StatefulSet,
        &s.metadata,
        s.spec.replicas,
        WorkloadStatus {
            observed_generation: st.observed_generation,
            replicas: st.replicas,
            ready_replicas: st.ready_replicas,
            updated_replicas: st.updated_replicas,
            current_revision: st.current_revision,
            update_revision: st.update_revision,
            claim_retention: ClaimRetention::from_fields(
                policy.and_then(|p| p.when_deleted.as_deref()),
                policy.and_then(|p| p.when_scaled.as_deref()),
            ),
        },
    )
}

fn deployment(d: &Deployment) -> Result<Workload, ObserveError> {
    let st = d.status.clone().unwrap_or_default();
    workload(
        WorkloadKind::Deployment,
        &d.metadata,
        d.spec.replicas,
        WorkloadStatus {
            observed_generation: st.observed_generation,
            replicas: st.replicas.unwrap_or(0),
            ready_replicas: st.ready_replicas,
            updated_replicas: st.updated_replicas,
            // Deployments have no revisions of their own (their ReplicaSets do).
            current_revision: None,
            update_revision: None,
            claim_retention: ClaimRetention::default(),
        },
    )
}

fn cond_status(s: &str) -> CondStatus {
    match s {
        "True" => CondStatus::True,
        "False" => CondStatus::False,
        _ => CondStatus::Unknown,
    }
}

fn pod(p: &KPod, rs_owner: &BTreeMap<&str, &OwnerReference>) -> Result<Pod, ObserveError> {
    const K: &str = "Pod";
    let m = &p.metadata;
    let name = need(K, m, "name", &m.name)?;
    let uid = need(K, m, "uid", &m.uid)?;
    let resource_version = need(K, m, "resourceVersion", &m.resource_version)?;
    let created = created(K, m)?;
    let controller = controller_of(m).map(|c| {
        // A Deployment's Pods belong to a ReplicaSet; name the Deployment instead.
        match (c.kind.as_str(), rs_owner.get(c.uid.as_str())) {
            ("ReplicaSet", Some(d)) if d.kind == "Deployment" => Controller {
                kind: d.kind.clone(),
                name: d.name.clone(),
                uid: d.uid.clone(),
            },
            _ => Controller {
                kind: c.kind.clone(),
                name: c.name.clone(),
                uid: c.uid.clone(),
            },
        }
    });
    let spec = p.spec.as_ref();
    let node_name = spec
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let status = p.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let mut ready = None;
    let mut unschedulable = None;
    for c in conditions {
        match c.type_.as_str() {
            "Ready" => {
                ready = Some(Cond {
                    status: cond_status(&c.status),
                    since: c.last_transition_time.as_ref().map(ts),
                })
            }
            "PodScheduled"
                if c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && node_name.is_none() =>
            {
                unschedulable = Some(Unschedulable {
                    since: c.last_transition_time.as_ref().map(ts),
                    message: c.message.clone().unwrap_or_default(),
                })
            }
            _ => {}
        }
    }
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Pending") => PodPhase::Pending,
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        _ => PodPhase::Unknown,
    };
    let containers: Vec<&ContainerStatus> = status
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .collect();
    let mut config_wait = None;
    let mut crash_loop_backoff = false;
    let mut last_container_exit: Option<Timestamp> = None;
    for c in containers {
        if let Some(reason) = c
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref())
        {
            if CONFIG_WAITS.contains(&reason) && config_wait.is_none() {
                config_wait = Some(reason.to_string());
            }
            if reason == "CrashLoopBackOff" {
                crash_loop_backoff = true;
            }
        }
        if let Some(t) = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref())
        {
            let t = ts(t);
            last_container_exit = Some(last_container_exit.map_or(t, |x| x.max(t)));
        }
    }
    let annotations = m.annotations.as_ref();
    let record = annotations
        .and_then(|a| a.get(REPLACEMENT_RECORD))
        .map(|v| match HandoffRecord::parse(v) {
            Ok(r) => RecordState::Valid(r),
            Err(e) => RecordState::Malformed(e),
        });
    Ok(Pod {
        zone: None,
        name,
        uid,
        resource_version,
        identity: label(m, IDENTITY).cloned(),
        controller,
        created,
        deletion: m.deletion_timestamp.as_ref().map(ts),
        node_name,
        node: NodeState::Unknown,
        phase,
        ready,
        unschedulable,
        config_wait,
        crash_loop_backoff,
        last_container_exit,
        replacement_finalizer: m
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == REPLACEMENT_FINALIZER)),
        replacement_index: label(m, REPLACEMENT_INDEX).cloned(),
        record,
        force_deleted: m.deletion_grace_period_seconds == Some(0),
        force_delete_retry_at: None,
        seen_since: None,
        recovering_seen: None,
        other_finalizers: m
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != REPLACEMENT_FINALIZER)
            .cloned()
            .collect(),
    })
}

fn claim(c: &PersistentVolumeClaim) -> Result<Claim, ObserveError> {
    const K: &str = "PersistentVolumeClaim";
    let m = &c.metadata;
    Ok(Claim {
        name: need(K, m, "name", &m.name)?,
        uid: need(K, m, "uid", &m.uid)?,
        resource_version: need(K, m, "resourceVersion", &m.resource_version)?,
        identity: label(m, IDENTITY).cloned(),
        owner: m
            .owner_references
            .iter()
            .flatten()
            .next()
            .map(|o| format!("{}/{}", o.kind, o.name)),
        created: created(K, m)?,
        deletion: m.deletion_timestamp.as_ref().map(ts),
        phase: match c.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Pending") => ClaimPhase::Pending,
            Some("Bound") => ClaimPhase::Bound,
            Some("Lost") => ClaimPhase::Lost,
            _ => ClaimPhase::Unknown,
        },
        lost_since: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fleet() -> CelldFleet {
        serde_json::from_value(json!({
            "apiVersion": "fleet.celld.dev/v1alpha1", "kind": "CelldFleet",
            "metadata": {"name": "alpha", "namespace": "apps", "uid": "f-uid",
                         "resourceVersion": "7", "generation": 2,
                         "finalizers": ["fleet.celld.dev/lifecycle-protection"]},
            "spec": {"identity": "7kq2m9x4c1v8b3n6z5h0j2w4r8", "profile": "PersistentFleet",
                     "runtimeImage": "ghcr.io/ewhauser/celld@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                     "members": 3, "serviceAccountName": "runtime",
                     "storage": {"bucket": "alpha-bucket", "region": "us-east-1", "storageClassName": "gp3"},
                     "placement": {"zones": ["us-east-1a", "us-east-1b", "us-east-1c"]}}
        }))
        .unwrap()
    }

    fn sts() -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "alpha", "uid": "sts-uid", "resourceVersion": "100", "generation": 4,
                         "labels": {"fleet.celld.dev/identity": "7kq2m9x4c1v8b3n6z5h0j2w4r8"}},
            "spec": {"replicas": 3, "selector": {}, "serviceName": "alpha-peers", "template": {}},
            "status": {"observedGeneration": 4, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 3,
                       "currentRevision": "r1", "updateRevision": "r1"}
        }))
        .unwrap()
    }

    fn pod() -> serde_json::Value {
        json!({
            "metadata": {"name": "alpha-1", "uid": "p-uid", "resourceVersion": "201",
                         "creationTimestamp": "2026-11-29T00:00:00Z",
                         "labels": {"fleet.celld.dev/identity": "7kq2m9x4c1v8b3n6z5h0j2w4r8",
                                    "fleet.celld.dev/replacement-fleet": "7kq2m9x4c1v8b3n6z5h0j2w4r8"},
                         "annotations": {"fleet.celld.dev/replacement-claim": "{\"identity\":\"7kq2m9x4c1v8b3n6z5h0j2w4r8\",\"claimUid\":\"c-uid\",\"claimResourceVersion\":\"301\",\"committed\":false}"},
                         "finalizers": ["fleet.celld.dev/replacing-disk"],
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "alpha",
                                              "uid": "sts-uid", "controller": true}]},
            "spec": {"containers": [], "nodeName": "node-1"},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-29T00:05:00Z"}],
                       "containerStatuses": [{"name": "celld", "image": "x", "imageID": "", "ready": false,
                                              "restartCount": 3,
                                              "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                              "lastState": {"terminated": {"exitCode": 3, "finishedAt": "2026-11-29T00:06:00Z"}}}]}
        })
    }

    fn claim() -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data-alpha-1", "uid": "c-uid", "resourceVersion": "301",
                         "creationTimestamp": "2026-11-28T00:00:00Z"},
            "status": {"phase": "Lost"}
        }))
        .unwrap()
    }

    /// Knows one node's zone.
    #[derive(Debug)]
    struct NodeOneInB;

    impl ZoneLookup for NodeOneInB {
        fn node(&self, name: &str) -> Option<String> {
            (name == "node-1").then(|| "us-east-1b".to_string())
        }
        fn volume(&self, _: &str) -> Option<String> {
            None
        }
    }

    fn observe(pods: &[KPod]) -> Result<Snapshot, ObserveError> {
        let f = fleet();
        let s = sts();
        let c = [claim()];
        snapshot(Inputs {
            fleet: &f,
            invalid: &crate::validity::problems(&f),
            workload: Some(WorkloadObject::StatefulSet(&s)),
            pods,
            claims: &c,
            replica_sets: &[],
            zones: &NodeOneInB,
            infrastructure: &Infrastructure::default(),
            capacity: &CapacitySignal::default(),
            identity_conflict: None,
            force_delete_retry: &BTreeMap::new(),
            reservation: None,
        })
    }

    #[test]
    fn converts_every_fact_the_rules_use() {
        let p: KPod = serde_json::from_value(pod()).unwrap();
        let s = observe(&[p]).unwrap();
        assert_eq!(s.fleet.members, Some(3));
        assert!(s.fleet.has_finalizer && s.fleet.stateful_set);
        let w = s.workload.as_ref().unwrap();
        assert!(w.rolled_out());
        let p = &s.pods[0];
        assert_eq!(p.controller.as_ref().unwrap().uid, "sts-uid");
        assert_eq!(p.zone.as_deref(), Some("us-east-1b"));
        assert!(p.crash_loop_backoff && p.replacement_finalizer);
        assert_eq!(p.ready.unwrap().status, CondStatus::False);
        assert_eq!(p.not_ready_since().rfc3339(), "2026-11-29T00:05:00Z");
        assert_eq!(
            p.last_container_exit.unwrap().rfc3339(),
            "2026-11-29T00:06:00Z"
        );
        assert!(
            matches!(&p.record, Some(RecordState::Valid(r)) if !r.committed && r.claim_uid == "c-uid")
        );
        // The claim has no identity label but sits at a member name: kept, as foreign.
        assert_eq!(s.claims[0].identity, None);
        assert_eq!(s.claims[0].phase, ClaimPhase::Lost);
    }

    #[test]
    fn reads_the_claim_retention_policy_and_claim_owners() {
        let f = fleet();
        let observe_with = |policy: serde_json::Value| {
            let mut s = sts();
            let mut spec = serde_json::to_value(std::mem::take(&mut s.spec)).unwrap();
            spec["persistentVolumeClaimRetentionPolicy"] = policy;
            s.spec = serde_json::from_value(spec).unwrap();
            let mut c = claim();
            c.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: "alpha".into(),
                uid: "sts-uid".into(),
                ..OwnerReference::default()
            }]);
            snapshot(Inputs {
                fleet: &f,
                invalid: &[],
                workload: Some(WorkloadObject::StatefulSet(&s)),
                pods: &[],
                claims: &[c],
                replica_sets: &[],
                zones: &NodeOneInB,
                infrastructure: &Infrastructure::default(),
                capacity: &CapacitySignal::default(),
                identity_conflict: None,
                force_delete_retry: &BTreeMap::new(),
                reservation: None,
            })
            .unwrap()
        };
        let s = observe_with(json!({"whenScaled": "Delete"}));
        let r = &s.workload.as_ref().unwrap().claim_retention;
        assert!(!r.keeps_claims());
        assert_eq!(r.describe(), "whenScaled: Delete");
        assert_eq!(s.claims[0].owner.as_deref(), Some("StatefulSet/alpha"));
        // Absent fields are the API server's default, Retain.
        for kept in [
            json!({}),
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
        ] {
            let s = observe_with(kept);
            assert!(s.workload.unwrap().claim_retention.keeps_claims());
        }
        // A value this healer does not know is not taken for Retain.
        let s = observe_with(json!({"whenDeleted": "Archive"}));
        assert_eq!(
            s.workload.unwrap().claim_retention.describe(),
            "whenDeleted: Archive"
        );
    }

    #[test]
    fn refuses_objects_it_cannot_read_in_full() {
        for field in ["uid", "resourceVersion", "creationTimestamp"] {
            let mut v = pod();
            v["metadata"].as_object_mut().unwrap().remove(field);
            let p: KPod = serde_json::from_value(v).unwrap();
            let e = observe(&[p]).unwrap_err();
            assert_eq!(e.kind, "Pod");
            assert!(e.problem.contains(field), "{e}");
            assert!(e.to_string().contains("does not act on partial data"));
        }
    }

    #[test]
    fn a_malformed_record_is_kept_as_such_for_the_rules_to_release() {
        let mut v = pod();
        v["metadata"]["annotations"]["fleet.celld.dev/replacement-claim"] = json!("{not json");
        let p: KPod = serde_json::from_value(v).unwrap();
        let s = observe(&[p]).unwrap();
        assert!(matches!(s.pods[0].record, Some(RecordState::Malformed(_))));
    }

    #[test]
    fn drops_objects_of_other_fleets() {
        let mut v = pod();
        v["metadata"]["labels"] = json!({"fleet.celld.dev/identity": "other"});
        let p: KPod = serde_json::from_value(v).unwrap();
        assert!(observe(&[p]).unwrap().pods.is_empty());
    }
}
