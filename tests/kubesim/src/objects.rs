//! Pure construction of the objects kubesim writes: Nodes, node Leases, node status,
//! PersistentVolumes, Pod status, plus the container environment a kubelet would hand to a
//! process. No I/O here, so everything is unit-tested.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    Container, PersistentVolume, PersistentVolumeClaim, Pod, PodStatus,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
pub const OS_LABEL: &str = "kubernetes.io/os";
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
/// Marks Nodes kubesim registered; the value is the node-name prefix of that kubesim.
pub const SIM_NODE_LABEL: &str = "kubesim.celld.dev/node-prefix";
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
pub const STORAGE_PROVISIONER_ANNOTATION: &str = "volume.kubernetes.io/storage-provisioner";
pub const BETA_STORAGE_PROVISIONER_ANNOTATION: &str =
    "volume.beta.kubernetes.io/storage-provisioner";
pub const PROVISIONED_BY_ANNOTATION: &str = "pv.kubernetes.io/provisioned-by";
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";
/// Pod annotation: initial stub mode (JSON) passed to the stub as `CELLD_STUB_MODE`.
pub const STUB_MODE_ANNOTATION: &str = "kubesim.celld.dev/stub-mode";
pub const DEFAULT_HEALTH_PATH: &str = "/.well-known/celld/health";
pub const KUBELET_VERSION: &str = "v1.37.2";

/// Formats a timestamp the way the API server does (RFC 3339, seconds precision).
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// RFC 3339 with microseconds, for `MicroTime` fields such as a Lease's `renewTime`.
pub fn rfc3339_micro(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// What kubesim knows about one simulated machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub zone: String,
    pub region: String,
    pub ip: Ipv4Addr,
    pub prefix: String,
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
}

/// Node names: `<prefix>-<zone>-<index>`, e.g. `sim-us-east-1a-0`.
pub fn node_name(prefix: &str, zone: &str, index: u32) -> String {
    format!("{prefix}-{zone}-{index}")
}

/// The Node object kubesim registers (metadata and spec; status goes through the status
/// subresource, see [`node_status`]).
pub fn node_object(n: &NodeSpec) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n.name,
            "labels": {
                ZONE_LABEL: n.zone,
                REGION_LABEL: n.region,
                HOSTNAME_LABEL: n.name,
                OS_LABEL: "linux",
                ARCH_LABEL: "amd64",
                "node.kubernetes.io/instance-type": "kubesim",
                SIM_NODE_LABEL: n.prefix,
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {
            "providerID": format!("kubesim://{}/{}", n.zone, n.name),
        },
    })
}

fn node_conditions(now: Timestamp, ready_since: Timestamp) -> Value {
    let now = rfc3339(now);
    let since = rfc3339(ready_since);
    let pressure = |ty: &str, reason: &str, msg: &str| {
        json!({
            "type": ty, "status": "False", "reason": reason, "message": msg,
            "lastHeartbeatTime": now, "lastTransitionTime": since,
        })
    };
    json!([
        pressure("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        pressure("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        pressure("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        {
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": since,
        },
    ])
}

/// Full node status: capacity, conditions, addresses, node info. Written on registration
/// and whenever a stopped node starts again.
pub fn node_status(n: &NodeSpec, boot_id: &str, now: Timestamp, ready_since: Timestamp) -> Value {
    let resources = json!({
        "cpu": n.cpu,
        "memory": n.memory,
        "pods": n.pods.to_string(),
        "ephemeral-storage": "100Gi",
    });
    json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": node_conditions(now, ready_since),
            "addresses": [
                {"type": "InternalIP", "address": n.ip.to_string()},
                {"type": "Hostname", "address": n.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("kubesim-{}", n.name),
                "systemUUID": format!("kubesim-{}", n.name),
                "bootID": boot_id,
                "kernelVersion": "kubesim",
                "osImage": "kubesim",
                "containerRuntimeVersion": "kubesim://1",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    })
}

/// The periodic node status heartbeat: conditions only (strategic merge by type).
pub fn node_heartbeat(now: Timestamp, ready_since: Timestamp) -> Value {
    json!({ "status": { "conditions": node_conditions(now, ready_since) } })
}

/// The node Lease in `kube-node-lease`, owned by its Node so it goes with it.
pub fn node_lease(name: &str, node_uid: Option<&str>, duration_s: i32, now: Timestamp) -> Value {
    let mut lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration_s,
            "renewTime": rfc3339_micro(now),
        },
    });
    if let Some(uid) = node_uid {
        lease["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "Node", "name": name, "uid": uid,
        }]);
    }
    lease
}

/// A claim kubesim should provision now: both annotations present and naming us, and the
/// class ours with `WaitForFirstConsumer`. Returns the selected node.
pub fn claim_wants_volume<'a>(
    claim: &'a PersistentVolumeClaim,
    class: Option<&StorageClass>,
    provisioner: &str,
) -> Option<&'a str> {
    let annotations = claim.metadata.annotations.as_ref()?;
    let selected = annotations.get(SELECTED_NODE_ANNOTATION)?;
    let named = annotations
        .get(STORAGE_PROVISIONER_ANNOTATION)
        .or_else(|| annotations.get(BETA_STORAGE_PROVISIONER_ANNOTATION))?;
    if named != provisioner || claim.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let spec = claim.spec.as_ref()?;
    if spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()) {
        return None;
    }
    if let Some(status) = &claim.status
        && status.phase.as_deref().is_some_and(|p| p != "Pending")
    {
        return None;
    }
    let class = class?;
    if class.provisioner != provisioner
        || class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer")
    {
        return None;
    }
    Some(selected)
}

/// PV name for a claim: `pvc-<claim uid>`, as external provisioners name them.
pub fn pv_name(claim: &PersistentVolumeClaim) -> Option<String> {
    claim.metadata.uid.as_ref().map(|u| format!("pvc-{u}"))
}

/// The PersistentVolume for `claim`, pinned to `zone` (as EBS pins a volume to its AZ),
/// pre-bound to the claim so the real PV controller completes the binding.
pub fn persistent_volume(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    zone: &str,
    provisioner: &str,
    node_prefix: &str,
    data_dir: &str,
) -> Option<PersistentVolume> {
    let name = pv_name(claim)?;
    let spec = claim.spec.as_ref()?;
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "1Gi".to_string());
    let access_modes = spec
        .access_modes
        .clone()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| vec!["ReadWriteOnce".to_string()]);
    let reclaim = class
        .reclaim_policy
        .clone()
        .unwrap_or_else(|| "Delete".to_string());
    let mut pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "annotations": { PROVISIONED_BY_ANNOTATION: provisioner },
            "labels": { ZONE_LABEL: zone, SIM_NODE_LABEL: node_prefix },
        },
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": access_modes,
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": claim.metadata.namespace,
                "name": claim.metadata.name,
                "uid": claim.metadata.uid,
            },
            "storageClassName": class.metadata.name,
            "persistentVolumeReclaimPolicy": reclaim,
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "hostPath": {"path": format!("{}/{}", data_dir.trim_end_matches('/'), name)},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]
            }]}},
        },
    });
    if let Some(opts) = &class.mount_options {
        pv["spec"]["mountOptions"] = json!(opts);
    }
    serde_json::from_value(pv).ok()
}

/// Zone a PV is pinned to by its node affinity (first `In` term on the zone label).
pub fn pv_zone(pv: &PersistentVolume) -> Option<String> {
    let terms = &pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_expressions.as_ref()?.iter().find_map(|e| {
            (e.key == ZONE_LABEL && e.operator == "In")
                .then(|| e.values.as_ref()?.first().cloned())
                .flatten()
        })
    })
}

/// A PV kubesim provisioned that the real PV controller released and whose policy says
/// delete: the external provisioner deletes it.
pub fn pv_reclaimable(pv: &PersistentVolume, provisioner: &str) -> bool {
    let ours = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONED_BY_ANNOTATION))
        .is_some_and(|p| p == provisioner);
    let released = pv
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Released" || p == "Failed");
    let delete = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    ours && released && delete && pv.metadata.deletion_timestamp.is_none()
}

// ---------------------------------------------------------------------------------------
// Pod status

/// The state of the Pod's (single, simulated) container.
#[derive(Debug, Clone, PartialEq)]
pub enum ContainerView {
    /// Waiting, with a kubelet reason: `ContainerCreating`, `ErrImagePull`,
    /// `ImagePullBackOff`, `CreateContainerConfigError`, `CrashLoopBackOff`.
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started_at: Timestamp,
    },
}

/// How the previous container instance ended (`lastState.terminated`).
#[derive(Debug, Clone, PartialEq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub container_id: String,
}

#[derive(Debug, Clone)]
pub struct PodStatusInput<'a> {
    pub pod: &'a Pod,
    pub host_ip: Ipv4Addr,
    /// None until the sandbox exists (volumes mounted).
    pub pod_ip: Option<Ipv4Addr>,
    pub container: ContainerView,
    /// Whether a container of this Pod ever started (phase Running from then on).
    pub ever_started: bool,
    pub restart_count: i32,
    pub last_state: Option<Terminated>,
    pub container_id: Option<String>,
    pub ready: bool,
    pub now: Timestamp,
}

/// Image ID a runtime would report: the image itself when digest-pinned, else a stable
/// made-up digest of its name.
pub fn image_id(image: &str) -> String {
    if image.contains("@sha256:") {
        return image.to_string();
    }
    let repo = image
        .rsplit_once(':')
        .map_or(image, |(r, t)| if t.contains('/') { image } else { r });
    let mut hex = String::new();
    for round in 0u64..4 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ round;
        for b in image.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        hex.push_str(&format!("{h:016x}"));
    }
    format!("{repo}@sha256:{hex}")
}

fn existing_transition(pod: &Pod, ty: &str, status: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty && c.status == status)
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| rfc3339(t.0))
}

fn condition(
    pod: &Pod,
    ty: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: &str,
) -> Value {
    let status = if ok { "True" } else { "False" };
    let since = existing_transition(pod, ty, status).unwrap_or_else(|| now.to_string());
    let mut c =
        json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// Pod status as a kubelet would write it, as a JSON object for a strategic-merge patch of
/// the status subresource (conditions merge by type, container statuses by name).
pub fn pod_status(input: &PodStatusInput<'_>) -> Value {
    let pod = input.pod;
    let now = rfc3339(input.now);
    let spec = pod.spec.as_ref();
    let containers: Vec<&Container> = spec
        .map(|s| s.containers.iter().collect())
        .unwrap_or_default();
    let init_containers: Vec<&Container> = spec
        .and_then(|s| s.init_containers.as_ref())
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    let sandbox = input.pod_ip.is_some();
    let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    let unready_msg = format!("containers with unready status: [{}]", names.join(" "));

    let start_time = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| rfc3339(t.0))
        .unwrap_or_else(|| now.clone());

    let (ready_reason, ready_msg) = if input.ready {
        (None, None)
    } else {
        (Some("ContainersNotReady"), Some(unready_msg))
    };
    let conditions = json!([
        condition(pod, "PodReadyToStartContainers", sandbox, None, None, &now),
        condition(pod, "Initialized", true, None, None, &now),
        condition(
            pod,
            "ContainersReady",
            input.ready,
            ready_reason,
            ready_msg.clone(),
            &now
        ),
        condition(pod, "Ready", input.ready, ready_reason, ready_msg, &now),
        condition(pod, "PodScheduled", true, None, None, &now),
    ]);

    let state = match &input.container {
        ContainerView::Waiting { reason, message } => {
            json!({"waiting": {"reason": reason, "message": message}})
        }
        ContainerView::Running { started_at } => {
            json!({"running": {"startedAt": rfc3339(*started_at)}})
        }
    };
    let running = matches!(input.container, ContainerView::Running { .. });
    let last_state = match &input.last_state {
        Some(t) => {
            let mut term = json!({
                "exitCode": t.exit_code,
                "reason": t.reason,
                "startedAt": rfc3339(t.started_at),
                "finishedAt": rfc3339(t.finished_at),
                "containerID": t.container_id,
            });
            if let Some(sig) = t.signal {
                term["signal"] = json!(sig);
            }
            json!({"terminated": term})
        }
        None => json!({}),
    };
    let container_statuses: Vec<Value> = containers
        .iter()
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            let mut s = json!({
                "name": c.name,
                "image": image,
                "imageID": if input.ever_started || running { image_id(&image) } else { String::new() },
                "ready": input.ready,
                "started": running,
                "restartCount": input.restart_count,
                "state": state,
                "lastState": last_state,
            });
            if let Some(id) = &input.container_id {
                s["containerID"] = json!(format!("{id}-{}", c.name));
            }
            s
        })
        .collect();
    let init_statuses: Vec<Value> = init_containers
        .iter()
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            let state = if sandbox {
                json!({"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": start_time, "finishedAt": start_time}})
            } else {
                json!({"waiting": {"reason": "PodInitializing"}})
            };
            json!({
                "name": c.name, "image": image, "imageID": image_id(&image),
                "ready": sandbox, "started": false, "restartCount": 0,
                "state": state, "lastState": {},
            })
        })
        .collect();

    let mut status = json!({
        "phase": if input.ever_started || running { "Running" } else { "Pending" },
        "hostIP": input.host_ip.to_string(),
        "hostIPs": [{"ip": input.host_ip.to_string()}],
        "startTime": start_time,
        "qosClass": pod.status.as_ref().and_then(|s| s.qos_class.clone()),
        "conditions": conditions,
        "containerStatuses": container_statuses,
    });
    if !init_statuses.is_empty() {
        status["initContainerStatuses"] = json!(init_statuses);
    }
    if let Some(ip) = input.pod_ip {
        status["podIP"] = json!(ip.to_string());
        status["podIPs"] = json!([{"ip": ip.to_string()}]);
    }
    if let Some(g) = pod.metadata.generation {
        status["observedGeneration"] = json!(g);
    }
    status
}

/// The part of a Pod status kubesim owns, for deciding whether a write is needed. Two
/// statuses with the same signature need no write; timestamps are left out on purpose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSignature {
    pub phase: Option<String>,
    pub pod_ip: Option<String>,
    pub host_ip: Option<String>,
    pub conditions: Vec<(String, String)>,
    pub containers: Vec<(String, bool, bool, i32, String)>,
}

const OWNED_CONDITIONS: [&str; 5] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodScheduled",
];

pub fn status_signature(status: Option<&PodStatus>) -> StatusSignature {
    let Some(s) = status else {
        return StatusSignature {
            phase: None,
            pod_ip: None,
            host_ip: None,
            conditions: vec![],
            containers: vec![],
        };
    };
    let mut conditions: Vec<(String, String)> = s
        .conditions
        .iter()
        .flatten()
        .filter(|c| OWNED_CONDITIONS.contains(&c.type_.as_str()))
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect();
    conditions.sort();
    let mut containers: Vec<_> = s
        .container_statuses
        .iter()
        .flatten()
        .map(|c| {
            let state = c
                .state
                .as_ref()
                .map(|st| {
                    if st.running.is_some() {
                        "running".to_string()
                    } else if let Some(w) = &st.waiting {
                        format!("waiting:{}", w.reason.clone().unwrap_or_default())
                    } else if st.terminated.is_some() {
                        "terminated".to_string()
                    } else {
                        String::new()
                    }
                })
                .unwrap_or_default();
            (
                c.name.clone(),
                c.ready,
                c.started.unwrap_or(false),
                c.restart_count,
                state,
            )
        })
        .collect();
    containers.sort();
    StatusSignature {
        phase: s.phase.clone(),
        pod_ip: s.pod_ip.clone(),
        host_ip: s.host_ip.clone(),
        conditions,
        containers,
    }
}

/// Signature of a status built by [`pod_status`].
pub fn desired_signature(status: &Value) -> StatusSignature {
    let parsed: Option<PodStatus> = serde_json::from_value(status.clone()).ok();
    status_signature(parsed.as_ref())
}

// ---------------------------------------------------------------------------------------
// Readiness probe

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessProbe {
    pub path: String,
    pub port: u16,
    pub initial_delay_s: u32,
    pub period_s: u32,
    pub timeout_s: u32,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

/// The readiness probe kubesim runs for a Pod: the first container's `readinessProbe`
/// `httpGet` if present (named ports resolved against its ports), else celld's health
/// endpoint on 8080 every `default_period_s`.
pub fn readiness_probe(pod: &Pod, default_period_s: u32) -> ReadinessProbe {
    let fallback = ReadinessProbe {
        path: DEFAULT_HEALTH_PATH.to_string(),
        port: 8080,
        initial_delay_s: 0,
        period_s: default_period_s.max(1),
        timeout_s: 1,
        success_threshold: 1,
        failure_threshold: 3,
    };
    let Some(c) = pod.spec.as_ref().and_then(|s| s.containers.first()) else {
        return fallback;
    };
    let Some(p) = c.readiness_probe.as_ref() else {
        return fallback;
    };
    let Some(get) = p.http_get.as_ref() else {
        return fallback;
    };
    let port = match &get.port {
        IntOrString::Int(i) => u16::try_from(*i).unwrap_or(8080),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|cp| cp.name.as_deref() == Some(name.as_str()))
            .and_then(|cp| u16::try_from(cp.container_port).ok())
            .unwrap_or(8080),
    };
    let pos = |v: Option<i32>, d: u32| {
        v.and_then(|x| u32::try_from(x).ok())
            .filter(|x| *x > 0)
            .unwrap_or(d)
    };
    ReadinessProbe {
        path: get.path.clone().unwrap_or_else(|| "/".to_string()),
        port,
        initial_delay_s: p
            .initial_delay_seconds
            .and_then(|x| u32::try_from(x).ok())
            .unwrap_or(0),
        period_s: pos(p.period_seconds, 10),
        timeout_s: pos(p.timeout_seconds, 1),
        success_threshold: pos(p.success_threshold, 1),
        failure_threshold: pos(p.failure_threshold, 3),
    }
}

// ---------------------------------------------------------------------------------------
// Container environment

/// Secrets and ConfigMaps the container's env refers to, to be fetched before
/// [`container_env`] runs: (is_secret, name).
pub fn env_sources(c: &Container) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    for e in c.env.iter().flatten() {
        if let Some(vf) = &e.value_from {
            if let Some(s) = &vf.secret_key_ref {
                out.push((true, s.name.clone()));
            }
            if let Some(m) = &vf.config_map_key_ref {
                out.push((false, m.name.clone()));
            }
        }
    }
    for ef in c.env_from.iter().flatten() {
        if let Some(s) = &ef.secret_ref {
            out.push((true, s.name.clone()));
        }
        if let Some(m) = &ef.config_map_ref {
            out.push((false, m.name.clone()));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Expands `$(VAR)` references against earlier variables, as the kubelet does; `$$` is a
/// literal `$`, unknown references stay as written.
pub fn expand(value: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn field_ref(pod: &Pod, path: &str, pod_ip: Ipv4Addr, host_ip: Ipv4Addr) -> Option<String> {
    let md = &pod.metadata;
    let spec = pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .and_then(|k| map.and_then(|m| m.get(k).cloned()))
    };
    match path {
        "metadata.name" => md.name.clone(),
        "metadata.namespace" => md.namespace.clone(),
        "metadata.uid" => md.uid.clone(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" | "status.podIPs" => Some(pod_ip.to_string()),
        "status.hostIP" | "status.hostIPs" => Some(host_ip.to_string()),
        p if p.starts_with("metadata.labels['") => keyed("metadata.labels['", md.labels.as_ref()),
        p if p.starts_with("metadata.annotations['") => {
            keyed("metadata.annotations['", md.annotations.as_ref())
        }
        _ => None,
    }
}

/// Secret and ConfigMap contents fetched for [`container_env`]; a missing one is absent.
#[derive(Debug, Default, Clone)]
pub struct EnvData {
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
}

/// The environment of the first container as the kubelet would build it. A reference to a
/// missing Secret, ConfigMap or key that is not optional fails with the kubelet's message
/// (the Pod then waits in `CreateContainerConfigError`).
pub fn container_env(
    pod: &Pod,
    c: &Container,
    pod_ip: Ipv4Addr,
    host_ip: Ipv4Addr,
    data: &EnvData,
) -> Result<Vec<(String, String)>, String> {
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |vars: &mut BTreeMap<String, String>, k: String, v: String| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    for ef in c.env_from.iter().flatten() {
        let prefix = ef.prefix.clone().unwrap_or_default();
        let (src, name, optional, kind) = if let Some(s) = &ef.secret_ref {
            (
                data.secrets.get(&s.name),
                &s.name,
                s.optional.unwrap_or(false),
                "secret",
            )
        } else if let Some(m) = &ef.config_map_ref {
            (
                data.config_maps.get(&m.name),
                &m.name,
                m.optional.unwrap_or(false),
                "configmap",
            )
        } else {
            continue;
        };
        match src {
            Some(map) => {
                for (k, v) in map {
                    set(&mut vars, format!("{prefix}{k}"), v.clone());
                }
            }
            None if optional => {}
            None => return Err(format!("{kind} \"{name}\" not found")),
        }
    }
    for e in c.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            expand(v, &vars)
        } else if let Some(vf) = &e.value_from {
            if let Some(f) = &vf.field_ref {
                field_ref(pod, &f.field_path, pod_ip, host_ip).unwrap_or_default()
            } else if let Some(s) = &vf.secret_key_ref {
                match data.secrets.get(&s.name).map(|m| m.get(&s.key)) {
                    Some(Some(v)) => v.clone(),
                    _ if s.optional.unwrap_or(false) => continue,
                    Some(None) => {
                        return Err(format!("couldn't find key {} in Secret {}", s.key, s.name));
                    }
                    None => return Err(format!("secret \"{}\" not found", s.name)),
                }
            } else if let Some(m) = &vf.config_map_key_ref {
                match data.config_maps.get(&m.name).map(|cm| cm.get(&m.key)) {
                    Some(Some(v)) => v.clone(),
                    _ if m.optional.unwrap_or(false) => continue,
                    Some(None) => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {}",
                            m.key, m.name
                        ));
                    }
                    None => return Err(format!("configmap \"{}\" not found", m.name)),
                }
            } else if let Some(r) = &vf.resource_field_ref {
                resource_value(c, &r.resource)
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        set(&mut vars, e.name.clone(), value);
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = vars.get(&k).cloned().unwrap_or_default();
            (k, v)
        })
        .collect())
}

fn resource_value(c: &Container, resource: &str) -> String {
    let (kind, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let res = c.resources.as_ref();
    let map = if kind == "requests" {
        res.and_then(|r| r.requests.as_ref())
    } else {
        res.and_then(|r| r.limits.as_ref())
    };
    map.and_then(|m| m.get(name))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "0".into())
}

/// `*` and `?` glob match (used for fault rules keyed by Pod name pattern).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    fn rec(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => rec(&p[1..], n) || (!n.is_empty() && rec(p, &n[1..])),
            (Some(b'?'), Some(_)) => rec(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => rec(&p[1..], &n[1..]),
            _ => false,
        }
    }
    rec(pattern.as_bytes(), name.as_bytes())
}

#[cfg(test)]
mod tests;
