//! What the watch caches keep of each object: the fields the healer reads, and no more.
//!
//! At a few hundred fleets whole Pods, claims and workloads were most of the healer's
//! memory, and most of each was never read: Pod specs (containers, volumes, affinity),
//! the workloads' Pod templates, claim specs. Each cached kind is cut down here as its
//! watch event arrives, before the reflector stores it.
//!
//! What is kept, and who reads it:
//! - every kind: all of `metadata` but `managedFields` (labels, annotations, owners,
//!   finalizers, uid, resourceVersion and deletion are what `observe` and the event
//!   mapping read);
//! - Pod: `spec.nodeName` and its claim-backed volumes (name and claim); `status.phase`, `conditions`, `podIP` and the container
//!   statuses' name, state, last state, container id, restart count, readiness and
//!   image (`observe`, [`super::members`], [`super::collector`]);
//! - StatefulSet and Deployment: `spec.replicas` and `spec.selector`, and the whole
//!   status (`observe`, [`super::capacity`]); a StatefulSet's
//!   `spec.persistentVolumeClaimRetentionPolicy` too (rule W5);
//! - PersistentVolumeClaim: `spec.volumeName` (the member's zone falls back to its
//!   volume's) and `status.phase` (`observe`; the claim is matched by name and label);
//! - CelldFleet, Service, reservation and ReplicaSet metadata: whole, since their specs
//!   are compared or read in full.
//!
//! Only watch caches are trimmed. Every write is a patch that names its own fields with
//! preconditions, never the cached object sent back, and the fresh read that confirms a
//! destructive write reads whole objects from the API server. A reader of a new field
//! must keep that field here first: the tests below compare what is observed of a
//! trimmed object with what is observed of the whole one.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    ContainerStatus, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
    Pod, PodSpec, PodStatus, Service, Volume,
};
use kube::Resource;

/// Cuts a cached object down to what the healer reads (see the module documentation).
pub(super) trait Trim {
    fn trim(&mut self);
}

fn container(c: ContainerStatus) -> ContainerStatus {
    ContainerStatus {
        name: c.name,
        state: c.state,
        last_state: c.last_state,
        container_id: c.container_id,
        restart_count: c.restart_count,
        ready: c.ready,
        started: c.started,
        image: c.image,
        image_id: c.image_id,
        ..ContainerStatus::default()
    }
}

impl Trim for Pod {
    fn trim(&mut self) {
        self.meta_mut().managed_fields = None;
        if let Some(spec) = self.spec.take() {
            // The claim-backed volumes, by name and claim only: the member's zone falls
            // back to its disk's when it is on no node.
            let volumes = spec.volumes.map(|v| {
                v.into_iter()
                    .filter(|v| v.persistent_volume_claim.is_some())
                    .map(|v| Volume {
                        name: v.name,
                        persistent_volume_claim: v.persistent_volume_claim,
                        ..Volume::default()
                    })
                    .collect()
            });
            self.spec = Some(PodSpec {
                node_name: spec.node_name,
                volumes,
                ..PodSpec::default()
            });
        }
        if let Some(st) = self.status.take() {
            let containers =
                |v: Option<Vec<ContainerStatus>>| v.map(|v| v.into_iter().map(container).collect());
            self.status = Some(PodStatus {
                phase: st.phase,
                conditions: st.conditions,
                pod_ip: st.pod_ip,
                container_statuses: containers(st.container_statuses),
                init_container_statuses: containers(st.init_container_statuses),
                ..PodStatus::default()
            });
        }
    }
}

impl Trim for StatefulSet {
    fn trim(&mut self) {
        self.meta_mut().managed_fields = None;
        let spec = std::mem::take(&mut self.spec);
        self.spec = StatefulSetSpec {
            replicas: spec.replicas,
            selector: spec.selector,
            persistent_volume_claim_retention_policy: spec.persistent_volume_claim_retention_policy,
            ..StatefulSetSpec::default()
        };
    }
}

impl Trim for Deployment {
    fn trim(&mut self) {
        self.meta_mut().managed_fields = None;
        let spec = std::mem::take(&mut self.spec);
        self.spec = DeploymentSpec {
            replicas: spec.replicas,
            selector: spec.selector,
            ..DeploymentSpec::default()
        };
    }
}

impl Trim for PersistentVolumeClaim {
    fn trim(&mut self) {
        self.meta_mut().managed_fields = None;
        if let Some(spec) = self.spec.take() {
            self.spec = Some(PersistentVolumeClaimSpec {
                volume_name: spec.volume_name,
                ..PersistentVolumeClaimSpec::default()
            });
        }
        if let Some(st) = self.status.take() {
            self.status = Some(PersistentVolumeClaimStatus {
                phase: st.phase,
                ..PersistentVolumeClaimStatus::default()
            });
        }
    }
}

/// Kinds kept whole but for `managedFields`.
macro_rules! whole {
    ($($k:ty),*) => {$(
        impl Trim for $k {
            fn trim(&mut self) {
                self.meta_mut().managed_fields = None;
            }
        }
    )*};
}
whole!(
    Service,
    celld_api::CelldFleet,
    celld_api::CelldBucketReservation,
    kube::core::PartialObjectMeta<k8s_openapi::api::apps::v1::ReplicaSet>
);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::observe::{self, Inputs, WorkloadObject};
    use crate::runtime::{collector, members};
    use crate::snapshot::{CapacitySignal, Infrastructure, Snapshot};
    use crate::zone::ZoneLookup;
    use celld_api::CelldFleet;
    use serde_json::json;

    const IDENTITY: &str = "7kq2m9x4c1v8b3n6z5h0j2w4r8";

    fn fleet(profile: &str) -> CelldFleet {
        serde_json::from_value(json!({
            "apiVersion": "fleet.celld.dev/v1alpha1", "kind": "CelldFleet",
            "metadata": {"name": "alpha", "namespace": "apps", "uid": "f-uid",
                         "resourceVersion": "7", "generation": 2,
                         "finalizers": ["fleet.celld.dev/lifecycle-protection"]},
            "spec": {"identity": IDENTITY, "profile": profile,
                     "runtimeImage": "ghcr.io/ewhauser/celld@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                     "members": 3, "serviceAccountName": "runtime",
                     "storage": {"bucket": "alpha-bucket", "region": "us-east-1", "storageClassName": "gp3"},
                     "placement": {"zones": ["us-east-1a", "us-east-1b", "us-east-1c"]}}
        }))
        .expect("a fleet")
    }

    /// A member Pod as the API server returns it, with everything a kubelet and the
    /// admission chain add.
    fn pod(name: &str, ready: &str) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "apps", "uid": format!("{name}-uid"), "resourceVersion": "42",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"fleet.celld.dev/identity": IDENTITY, "apps.kubernetes.io/pod-index": "1"},
                "annotations": {"fleet.celld.dev/config-checksum": "abc"},
                "finalizers": ["example.com/keep"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "alpha",
                                     "uid": "s-uid", "controller": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                   "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}}]
            },
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "celld", "image": "ghcr.io/ewhauser/celld:1",
                                "env": [{"name": "CELLD_BUCKET", "value": "b"}],
                                "ports": [{"containerPort": 8081}],
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-alpha-1"}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                 "effect": "NoExecute", "tolerationSeconds": 300}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname",
                     "labelSelector": {"matchLabels": {"fleet.celld.dev/identity": IDENTITY}}}]}}
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}],
                "hostIP": "192.168.0.1", "qosClass": "BestEffort", "startTime": "2026-01-01T00:00:01Z",
                "conditions": [
                    {"type": "Ready", "status": ready, "lastTransitionTime": "2026-01-01T00:00:05Z"},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"}
                ],
                "containerStatuses": [{
                    "name": "celld", "image": "ghcr.io/ewhauser/celld:1", "imageID": "sha256:1",
                    "containerID": "sim://c1", "restartCount": 2, "ready": true, "started": true,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:04Z"}},
                    "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:00:03Z"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "resources": {"limits": {"cpu": "1"}}
                }]
            }
        }))
        .expect("a Pod")
    }

    fn sts() -> StatefulSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "alpha", "namespace": "apps", "uid": "s-uid", "resourceVersion": "9",
                         "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"fleet.celld.dev/identity": IDENTITY}},
            "spec": {"replicas": 4, "serviceName": "alpha-peers",
                     "selector": {"matchLabels": {"fleet.celld.dev/identity": IDENTITY}},
                     "template": {"metadata": {"labels": {"fleet.celld.dev/identity": IDENTITY}},
                                  "spec": {"containers": [{"name": "celld", "image": "i"}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
                     // Drifted, so that losing it in the trim would change what is observed.
                     "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Delete"}},
            "status": {"replicas": 4, "readyReplicas": 3, "updatedReplicas": 4, "observedGeneration": 3,
                       "currentRevision": "alpha-1", "updateRevision": "alpha-2"}
        }))
        .expect("a StatefulSet")
    }

    fn dep() -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "alpha", "namespace": "apps", "uid": "d-uid", "resourceVersion": "9",
                         "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"fleet.celld.dev/identity": IDENTITY}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"fleet.celld.dev/identity": IDENTITY}},
                     "template": {"spec": {"containers": [{"name": "celld", "image": "i"}]}}},
            "status": {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2, "observedGeneration": 1}
        }))
        .expect("a Deployment")
    }

    fn claim(phase: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-alpha-1", "namespace": "apps", "uid": "c-uid",
                         "resourceVersion": "5", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"fleet.celld.dev/identity": IDENTITY}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                     "resources": {"requests": {"storage": "10Gi"}}, "volumeName": "pv-1"},
            "status": {"phase": phase, "capacity": {"storage": "10Gi"}}
        }))
        .expect("a claim")
    }

    /// Node `node-1` is in us-east-1b; volume `pv-1` is pinned to us-east-1c.
    #[derive(Debug)]
    struct Zones;

    impl ZoneLookup for Zones {
        fn node(&self, name: &str) -> Option<String> {
            (name == "node-1").then(|| "us-east-1b".to_string())
        }
        fn volume(&self, name: &str) -> Option<String> {
            (name == "pv-1").then(|| "us-east-1c".to_string())
        }
    }

    fn trimmed<T: Trim + Clone>(o: &T) -> T {
        let mut o = o.clone();
        o.trim();
        o
    }

    fn observe(
        fleet: &CelldFleet,
        workload: Option<WorkloadObject<'_>>,
        pods: &[Pod],
        claims: &[PersistentVolumeClaim],
    ) -> Snapshot {
        observe::snapshot(Inputs {
            fleet,
            invalid: &crate::validity::problems(fleet),
            workload,
            pods,
            claims,
            replica_sets: &[],
            zones: &Zones,
            infrastructure: &Infrastructure::default(),
            capacity: &CapacitySignal::default(),
            identity_conflict: None,
            force_delete_retry: &BTreeMap::new(),
            reservation: None,
        })
        .expect("observable")
    }

    /// What the healer observes of trimmed objects is what it observes of whole ones,
    /// for a StatefulSet fleet with ready and unready members and a Lost claim.
    #[test]
    fn a_statefulset_fleet_observes_the_same_trimmed() {
        let f = fleet("PersistentFleet");
        let mut pending = pod("alpha-1", "False");
        pending.spec.as_mut().expect("spec").node_name = None;
        let (s, pods) = (sts(), [pod("alpha-0", "True"), pending]);
        let claims = [claim("Lost")];
        let whole = observe(&f, Some(WorkloadObject::StatefulSet(&s)), &pods, &claims);
        let (ts, tp, tc) = (
            trimmed(&s),
            pods.iter().map(trimmed).collect::<Vec<_>>(),
            claims.iter().map(trimmed).collect::<Vec<_>>(),
        );
        let cut = observe(&f, Some(WorkloadObject::StatefulSet(&ts)), &tp, &tc);
        assert_eq!(cut, whole);
        let zones: Vec<_> = cut.pods.iter().map(|p| p.zone.as_deref()).collect();
        assert_eq!(zones, [Some("us-east-1b"), Some("us-east-1c")]);
        assert!(ts.spec.template.spec.is_none());
        assert!(tc[0].spec.as_ref().is_some_and(|s| s.resources.is_none()));
    }

    #[test]
    fn a_deployment_fleet_observes_the_same_trimmed() {
        let f = fleet("Bucket");
        let d = dep();
        let whole = observe(&f, Some(WorkloadObject::Deployment(&d)), &[], &[]);
        let td = trimmed(&d);
        let cut = observe(&f, Some(WorkloadObject::Deployment(&td)), &[], &[]);
        assert_eq!(cut, whole);
        assert!(td.spec.template.spec.is_none());
    }

    /// The member readers (application view, capacity collector) answer the same, and
    /// the metadata is whole but for `managedFields`.
    #[test]
    fn a_trimmed_pod_keeps_what_the_member_readers_use() {
        let whole = pod("alpha-1", "True");
        let cut = trimmed(&whole);
        assert_eq!(members::ready(&cut), members::ready(&whole));
        assert!(members::started(&cut).is_some());
        assert_eq!(members::started(&cut), members::started(&whole));
        assert!(!collector::pod_identity(&cut).is_empty());
        assert_eq!(
            collector::pod_identity(&cut),
            collector::pod_identity(&whole)
        );
        let mut meta = whole.metadata.clone();
        meta.managed_fields = None;
        assert_eq!(cut.metadata, meta);
        let size = |p: &Pod| serde_json::to_vec(p).expect("json").len();
        assert!(
            size(&cut) * 3 < size(&whole) * 2,
            "{} vs {} bytes",
            size(&cut),
            size(&whole)
        );
    }
}
