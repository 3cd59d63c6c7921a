//! Snapshot fixtures for tests, property tests and benchmarks: a fleet `alpha` whose
//! members have all been ready for an hour, on disks older than their Pods. Tests then
//! change one thing and check one rule.

use celld_api::Profile;
use celld_api::labels::{claim_name, member_name};

use crate::record::HandoffRecord;
use crate::snapshot::*;
use crate::time::{Span, Timestamp};

/// The fleet identity used by the fixtures.
pub const ID: &str = "7kq2m9x4c1v8b3n6z5h0j2w4r8";
/// Another fleet's identity.
pub const OTHER_ID: &str = "0000000000000000000000other";
/// The reference time of the fixtures: 2026-11-29T00:00:00Z.
pub const T0: Timestamp = Timestamp(1_795_910_400_000);

/// `T0` plus `m` minutes (negative for earlier).
pub fn at(m: i64) -> Timestamp {
    T0 + Span::mins(m)
}

/// A CelldFleet object (PersistentFleet of 3) as the runtime's caches hold it, for tests
/// of the runtime's bookkeeping; its uid is `uid-<name>`.
pub fn fleet_object(namespace: &str, name: &str, identity: &str) -> celld_api::CelldFleet {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "fleet.celld.dev/v1alpha1", "kind": "CelldFleet",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                     "resourceVersion": "1", "generation": 1},
        "spec": {"identity": identity, "profile": "PersistentFleet",
                 "runtimeImage": "ghcr.io/ewhauser/celld@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                 "members": 3, "serviceAccountName": "runtime",
                 "storage": {"bucket": format!("{name}-bucket"), "region": "us-east-1", "storageClassName": "gp3"},
                 "placement": {"zones": ["us-east-1a", "us-east-1b", "us-east-1c"]}}
    }))
    .expect("the fixture is a valid CelldFleet")
}

/// The metadata of a cached object in `namespace`, with these labels; its uid is
/// `uid-<namespace>-<name>`.
pub fn object_meta(
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{namespace}-{name}")),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// A healthy PersistentFleet of `n` members, all ready for an hour.
pub fn persistent(n: i32) -> Snapshot {
    fleet_of(Profile::PersistentFleet, true, n)
}

/// A healthy Bucket fleet on a Deployment.
pub fn bucket(n: i32) -> Snapshot {
    let mut s = fleet_of(Profile::Bucket, false, n);
    s.claims.clear();
    s
}

/// A healthy Bucket fleet on a StatefulSet (`Ordered`), without disks.
pub fn bucket_ordered(n: i32) -> Snapshot {
    let mut s = fleet_of(Profile::Bucket, true, n);
    s.claims.clear();
    s
}

fn fleet_of(profile: Profile, sts: bool, n: i32) -> Snapshot {
    let kind = if sts {
        WorkloadKind::StatefulSet
    } else {
        WorkloadKind::Deployment
    };
    let workload = Workload {
        kind,
        name: "alpha".into(),
        uid: "sts-uid".into(),
        resource_version: "100".into(),
        generation: 4,
        observed_generation: Some(4),
        identity: Some(ID.into()),
        has_owner_references: false,
        deleting: false,
        replicas: n,
        status_replicas: n,
        ready_replicas: n,
        updated_replicas: n,
        current_revision: sts.then(|| "rev-1".into()),
        update_revision: sts.then(|| "rev-1".into()),
        claim_retention: Default::default(),
    };
    let pods = (0..n as u32).map(|o| member(o, kind)).collect();
    let claims = (0..n as u32).map(claim).collect();
    Snapshot {
        fleet: Fleet {
            name: "alpha".into(),
            namespace: "apps".into(),
            uid: "fleet-uid".into(),
            resource_version: "7".into(),
            generation: 2,
            identity: ID.into(),
            profile,
            stateful_set: sts,
            members: Some(n),
            zones: 3,
            termination_grace_seconds: 30,
            paused: false,
            deleting: false,
            deletion_protected: false,
            identity_conflict: None,
            accepted_disk_loss: Vec::new(),
            reservation: None,
            invalid: Vec::new(),
            has_finalizer: true,
            capacity: None,
            previous_status: None,
        },
        workload: Some(workload),
        pods,
        claims,
        infrastructure: Infrastructure::default(),
        capacity: CapacitySignal::default(),
        application: None,
        clock_skew: Some(Span(0)),
    }
}

/// A ready member Pod at ordinal `o`, created two hours before `T0`.
pub fn member(o: u32, kind: WorkloadKind) -> Pod {
    let name = match kind {
        WorkloadKind::StatefulSet => member_name("alpha", o),
        WorkloadKind::Deployment => format!("alpha-7d9f8-{o:05}"),
    };
    Pod {
        uid: format!("pod-{o}-uid"),
        resource_version: format!("{}", 200 + o),
        name,
        identity: Some(ID.into()),
        controller: Some(Controller {
            kind: kind.as_str().into(),
            name: "alpha".into(),
            uid: "sts-uid".into(),
        }),
        created: at(-120),
        deletion: None,
        node_name: Some(format!("node-{o}")),
        node: NodeState::Ready,
        zone: Some(format!("zone-{}", o % 3)),
        phase: PodPhase::Running,
        ready: Some(Cond {
            status: CondStatus::True,
            since: Some(at(-60)),
        }),
        unschedulable: None,
        config_wait: None,
        crash_loop_backoff: false,
        last_container_exit: None,
        replacement_finalizer: false,
        replacement_index: None,
        record: None,
        force_deleted: false,
        other_finalizers: Vec::new(),
        force_delete_retry_at: None,
        seen_since: Some(at(-60)),
        recovering_seen: None,
    }
}

/// A Bound claim of ordinal `o`, created three hours before `T0`.
pub fn claim(o: u32) -> Claim {
    Claim {
        name: claim_name("alpha", o),
        uid: format!("claim-{o}-uid"),
        resource_version: format!("{}", 300 + o),
        identity: Some(ID.into()),
        owner: None,
        created: at(-180),
        deletion: None,
        phase: ClaimPhase::Bound,
        lost_since: None,
    }
}

/// Fixture edits.
pub trait Edit {
    /// The member Pod at ordinal `o`.
    fn pod(&mut self, o: u32) -> &mut Pod;
    /// The claim of ordinal `o`.
    fn claim(&mut self, o: u32) -> &mut Claim;
    /// The workload.
    fn sts(&mut self) -> &mut Workload;
    /// Removes the Pod at ordinal `o`.
    fn remove_pod(&mut self, o: u32);
    /// Marks member `o` not ready since `since`.
    fn down(&mut self, o: u32, since: Timestamp);
    /// Puts a handoff record on member `o` (its finalizer and index label too).
    fn hold(&mut self, o: u32, committed: bool);
    /// Marks the claim of ordinal `o` Lost, seen Lost since five minutes before `T0`
    /// (past the confirmation window).
    fn lose(&mut self, o: u32);
    /// Member `o`'s node seen unreachable for ten hours (rule F2: its Pod is stranded).
    fn unreachable(&mut self, o: u32);
}

impl Edit for Snapshot {
    fn unreachable(&mut self, o: u32) {
        self.pod(o).node = NodeState::Unreachable {
            since: Some(at(-600)),
            transition: None,
        };
    }
    fn lose(&mut self, o: u32) {
        let c = self.claim(o);
        c.phase = ClaimPhase::Lost;
        c.lost_since = Some(at(-5));
    }
    fn pod(&mut self, o: u32) -> &mut Pod {
        let name = member_name("alpha", o);
        self.pods
            .iter_mut()
            .find(|p| p.name == name)
            .expect("no such pod")
    }
    fn claim(&mut self, o: u32) -> &mut Claim {
        let name = claim_name("alpha", o);
        self.claims
            .iter_mut()
            .find(|c| c.name == name)
            .expect("no such claim")
    }
    fn sts(&mut self) -> &mut Workload {
        self.workload.as_mut().expect("no workload")
    }
    fn remove_pod(&mut self, o: u32) {
        let name = member_name("alpha", o);
        self.pods.retain(|p| p.name != name);
        let w = self.sts();
        w.ready_replicas -= 1;
        w.status_replicas -= 1;
    }
    fn down(&mut self, o: u32, since: Timestamp) {
        let p = self.pod(o);
        p.ready = Some(Cond {
            status: CondStatus::False,
            since: Some(since),
        });
        // The healer has watched it as long as the kubelet says (the clock tests in
        // `crate::clock` and `decide::tests_clock` tell the two apart).
        p.seen_since = Some(since);
        let w = self.sts();
        w.ready_replicas -= 1;
    }
    fn hold(&mut self, o: u32, committed: bool) {
        let c = self.claim(o).clone();
        let p = self.pod(o);
        p.replacement_finalizer = true;
        p.replacement_index = Some(ID.into());
        p.record = Some(RecordState::Valid(HandoffRecord {
            identity: ID.into(),
            claim_uid: c.uid,
            claim_resource_version: c.resource_version,
            committed,
            cause: Some(crate::record::HandoffCause::DownTooLong),
        }));
    }
}
