//! The control API's JSON types and a client for it. The server side lives in
//! [`crate::sim::api`]; tests use [`ControlClient`].

use std::time::Duration;

use anyhow::Result;
use hyper::Method;
use serde::{Deserialize, Serialize};

use crate::http::HttpClient;

/// Faults kubesim can inject into a Pod's container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FaultKind {
    /// The stub is killed and every restart "crashes": waiting `CrashLoopBackOff`,
    /// restartCount increasing, never Ready.
    CrashLoop,
    /// The image never pulls: waiting `ErrImagePull`, then `ImagePullBackOff`.
    ImagePull,
    /// The container's configuration cannot be built: waiting `CreateContainerConfigError`.
    ConfigError,
    /// The container runs on, but once the Pod is deleted the kubelet never finishes it
    /// (a container that ignores its kill, a volume that will not unmount): the Pod stays
    /// terminating on a Ready node, its process still running, until the rule goes.
    HangTermination,
}

impl FaultKind {
    /// The waiting reasons a Pod shows under this fault.
    pub fn reasons(self) -> &'static [&'static str] {
        match self {
            FaultKind::CrashLoop => &["CrashLoopBackOff"],
            FaultKind::ImagePull => &["ErrImagePull", "ImagePullBackOff"],
            FaultKind::ConfigError => &["CreateContainerConfigError"],
            FaultKind::HangTermination => &[],
        }
    }
}

/// A fault rule: applies to every Pod whose name matches `pod` (a glob with `*` and `?`),
/// in `namespace` if given, including Pods created later, until deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    #[serde(default)]
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub pod: String,
    pub fault: FaultKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub name: String,
    pub zone: String,
    pub ip: String,
    pub alive: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// The Pod's loopback IP (the stub listens on :8080 and :8081 there).
    pub ip: String,
    /// What the simulated container is doing: `Waiting:<reason>`, `Running`,
    /// `Terminating`, `Finalized`, `NodeDown`.
    pub container: String,
    pub ready: bool,
    pub restart_count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stub_pid: Option<u32>,
    /// Fault whose status the worker has written (for the control API's waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_fault: Option<FaultKind>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateView {
    pub nodes: Vec<NodeView>,
    pub pods: Vec<PodView>,
    pub faults: Vec<FaultRule>,
    pub provisioned: u64,
    pub reclaimed: u64,
}

impl StateView {
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodView> {
        self.pods
            .iter()
            .find(|p| p.namespace == namespace && p.name == name)
    }

    pub fn node(&self, name: &str) -> Option<&NodeView> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// Body of `POST /volumes/delete`: either a PV name, or a claim whose PV to delete.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeDelete {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeDeleted {
    pub pv: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

/// Body of `PUT /pods/{namespace}/{name}/fault`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRequest {
    pub fault: FaultKind,
}

/// Answer of the fault endpoints: the rule and the Pods whose status now shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultApplied {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<FaultRule>,
    /// `namespace/name` of existing Pods the fault (or its removal) is in effect on.
    pub pods: Vec<String>,
}

/// Client for kubesim's control API (`http://127.0.0.1:<port>`).
#[derive(Clone)]
pub struct ControlClient {
    base: String,
    http: HttpClient,
}

const CALL_TIMEOUT: Duration = Duration::from_secs(90);

impl ControlClient {
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_string(),
            http: HttpClient::new(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    async fn call<B: Serialize, T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T> {
        let url = format!("{}{}", self.base, path);
        let resp = match body {
            Some(b) => self.http.send_json(method, &url, b, CALL_TIMEOUT).await?,
            None => self.http.request(method, &url, None, CALL_TIMEOUT).await?,
        };
        resp.ok()?.json()
    }

    pub async fn healthz(&self) -> Result<()> {
        let url = format!("{}/healthz", self.base);
        self.http.get(&url, Duration::from_secs(2)).await?.ok()?;
        Ok(())
    }

    pub async fn state(&self) -> Result<StateView> {
        self.call::<(), _>(Method::GET, "/state", None).await
    }

    /// Stops a node: no more heartbeats or status writes, its stubs killed.
    pub async fn stop_node(&self, node: &str) -> Result<NodeView> {
        self.call::<(), _>(Method::POST, &format!("/nodes/{node}/stop"), None)
            .await
    }

    /// Stops only the node's kubelet: no heartbeats or status writes, but its stubs keep
    /// running unsupervised (zombies) until the node starts again.
    pub async fn stop_kubelet_keep_stubs(&self, node: &str) -> Result<NodeView> {
        self.call(
            Method::POST,
            &format!("/nodes/{node}/stop"),
            Some(&serde_json::json!({"keepStubs": true})),
        )
        .await
    }

    /// Sets the CPU and memory the resource-metrics endpoint reports for every container
    /// of the Pods matching `pod` (a glob) in `namespace`, from now on.
    pub async fn set_load(
        &self,
        namespace: &str,
        pod: &str,
        cpu_millicores: u64,
        memory_mib: u64,
    ) -> Result<serde_json::Value> {
        self.call(
            Method::PUT,
            &format!("/pods/{namespace}/{pod}/load"),
            Some(&serde_json::json!({"cpuMillicores": cpu_millicores, "memoryMib": memory_mib})),
        )
        .await
    }

    /// SIGKILLs a Pod's stub (the container restarts, restartCount + 1); returns its pid.
    pub async fn kill_stub(&self, namespace: &str, name: &str) -> Result<u32> {
        let v: serde_json::Value = self
            .call::<(), _>(
                Method::POST,
                &format!("/pods/{namespace}/{name}/kill"),
                None,
            )
            .await?;
        v["pid"]
            .as_u64()
            .map(|p| p as u32)
            .ok_or_else(|| anyhow::anyhow!("no pid in {v}"))
    }

    /// The IP of the running Pod `namespace/name` as kubesim knows it.
    pub async fn pod_ip(&self, namespace: &str, name: &str) -> Result<String> {
        let state = self.state().await?;
        state
            .pods
            .iter()
            .find(|p| p.namespace == namespace && p.name == name && p.container != "Finalized")
            .map(|p| p.ip.clone())
            .ok_or_else(|| anyhow::anyhow!("kubesim runs no Pod {namespace}/{name}"))
    }

    /// Merges `patch` into the mode of the Pod's stub (`PUT :8081/__stub/mode`); returns
    /// the whole mode. Lasts until the stub restarts (use the Pod annotation
    /// `kubesim.celld.dev/stub-mode` for a mode that survives restarts).
    pub async fn set_stub_mode(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let ip = self.pod_ip(namespace, name).await?;
        let url = format!("http://{ip}:8081/__stub/mode");
        self.http
            .send_json(Method::PUT, &url, patch, Duration::from_secs(5))
            .await?
            .ok()?
            .json()
    }

    /// The stub's `GET :8081/__stub/info` (member id, disks, runtime version, ...).
    pub async fn stub_info(&self, namespace: &str, name: &str) -> Result<serde_json::Value> {
        let ip = self.pod_ip(namespace, name).await?;
        let url = format!("http://{ip}:8081/__stub/info");
        self.http
            .get(&url, Duration::from_secs(5))
            .await?
            .ok()?
            .json()
    }

    /// Starts a stopped node again.
    pub async fn start_node(&self, node: &str) -> Result<NodeView> {
        self.call::<(), _>(Method::POST, &format!("/nodes/{node}/start"), None)
            .await
    }

    /// Deletes a PV (and strips its protection finalizer): the disk is gone.
    pub async fn delete_volume(&self, req: &VolumeDelete) -> Result<VolumeDeleted> {
        self.call(Method::POST, "/volumes/delete", Some(req)).await
    }

    /// Deletes the PV bound to `namespace/claim`.
    pub async fn delete_claim_volume(&self, namespace: &str, claim: &str) -> Result<VolumeDeleted> {
        self.delete_volume(&VolumeDelete {
            pv: None,
            namespace: Some(namespace.into()),
            claim: Some(claim.into()),
        })
        .await
    }

    /// Puts a fault on the Pod named `namespace/name` (and on later Pods of that name).
    pub async fn set_pod_fault(
        &self,
        namespace: &str,
        name: &str,
        fault: FaultKind,
    ) -> Result<FaultApplied> {
        self.call(
            Method::PUT,
            &format!("/pods/{namespace}/{name}/fault"),
            Some(&FaultRequest { fault }),
        )
        .await
    }

    /// Removes faults on `namespace/name`; returns once the container runs again.
    pub async fn clear_pod_fault(&self, namespace: &str, name: &str) -> Result<FaultApplied> {
        self.call::<(), _>(
            Method::DELETE,
            &format!("/pods/{namespace}/{name}/fault"),
            None,
        )
        .await
    }

    /// Adds a fault rule by name pattern.
    pub async fn add_fault(
        &self,
        namespace: Option<&str>,
        pod_glob: &str,
        fault: FaultKind,
    ) -> Result<FaultApplied> {
        let rule = FaultRule {
            id: 0,
            namespace: namespace.map(str::to_string),
            pod: pod_glob.to_string(),
            fault,
        };
        self.call(Method::POST, "/faults", Some(&rule)).await
    }

    pub async fn delete_fault(&self, id: u64) -> Result<FaultApplied> {
        self.call::<(), _>(Method::DELETE, &format!("/faults/{id}"), None)
            .await
    }
}
