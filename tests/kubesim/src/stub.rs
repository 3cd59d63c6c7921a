//! The stub celld: serves what the healer reads from a member, with answers a test can set.
//!
//! Public listener (8080): `GET /.well-known/celld/health` answers `200 {"ok":true}` when
//! healthy, `503 {"ok":false}` when unhealthy, draining or still inside its readiness delay;
//! every other path answers 404, or 503 `{"ok":false,"draining":true}` while draining.
//!
//! Internal listener (8081):
//! - `GET /state`: the node snapshot (load fields, `node_load`, `shutdown`, `deployment`),
//!   shaped after celld v0.5's fixture.
//! - `GET /state?view=application`: deployment convergence, schema_version 1.
//! - `POST /shutdown`: starts the same drain as SIGTERM.
//! - `GET /__stub/info`: who this stub is (member id, Pod, IP, disks, runtime version).
//! - `GET /__stub/mode`, `PUT /__stub/mode`: read or change the answers (partial JSON merged
//!   onto the current [`StubMode`]).
//!
//! While `recovering` (celld recovering its predecessor's log at start), health answers
//! 503 and the internal port answers every call but `/peer/log/seal`, `/peer/log/tail`
//! and `/__stub/*` with 503 "predecessor recovery in progress", as celld does.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use hyper::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::http::{self, Req, Resp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum Health {
    #[default]
    Healthy,
    Unhealthy,
}

/// How `/state` and `/state?view=application` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum Observation {
    /// Valid, current samples.
    #[default]
    Fresh,
    /// Valid JSON whose sample and target timestamps are `staleSeconds` old.
    Stale,
    /// Invalid JSON (a truncated object) with status 200.
    Malformed,
    /// A runtime without the application view: `?view=application` answers 404 and
    /// `/state` has no `deployment` object.
    Unsupported,
    /// `/state` (both views) answers 503.
    Unavailable,
    /// `/state` (both views) answers only after [`SLOW_STATE`] (past a 2 s client timeout).
    Slow,
    /// `/state` (both views) answers 200 with a valid JSON object over 1 MiB.
    Huge,
}

/// How long a `slow` stub waits before it answers `/state`.
pub const SLOW_STATE: Duration = Duration::from_secs(5);

/// Everything a test can set on a stub. `PUT /__stub/mode` merges a partial object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StubMode {
    pub health: Health,
    /// Forces draining (health 503) without exiting; SIGTERM sets it too.
    pub draining: bool,
    pub observation: Observation,
    pub stale_seconds: u64,
    /// Runtime version this stub claims to be (shown in `/__stub/info` and as the readable
    /// part of the opaque `runtime_generation`). Defaults to the Pod's image.
    pub runtime_version: String,
    /// The loaded deployment version and prefix.
    pub version: String,
    pub prefix: String,
    /// The deployment pointer's target; defaults to the loaded version and prefix.
    pub target_version: Option<String>,
    pub target_prefix: Option<String>,
    pub generation: u64,
    pub pointer_status: String,
    pub adoption_status: String,
    pub resident_cells: u64,
    pub pending_cells: u64,
    pub swapping_cells: u64,
    pub owned_cells: u64,
    pub restoring: u64,
    pub pressured: bool,
    /// Health stays 503 for this long after start (celld's first-readiness gate).
    pub ready_delay_ms: u64,
    /// Recovering its predecessor's log: not healthy, and the internal port answers
    /// 503 "predecessor recovery in progress".
    pub recovering: bool,
    /// Drain time after SIGTERM; default min(CELLD_SHUTDOWN_TOTAL_MS, max drain).
    pub drain_ms: Option<u64>,
}

impl Default for StubMode {
    fn default() -> Self {
        Self {
            health: Health::Healthy,
            draining: false,
            observation: Observation::Fresh,
            stale_seconds: 600,
            runtime_version: "celld-stub".to_string(),
            version: "v1".to_string(),
            prefix: "deploy-blobs/v1".to_string(),
            target_version: None,
            target_prefix: None,
            generation: 1,
            pointer_status: "observed".to_string(),
            adoption_status: "adopted".to_string(),
            resident_cells: 4,
            pending_cells: 0,
            swapping_cells: 0,
            owned_cells: 4,
            restoring: 0,
            pressured: false,
            ready_delay_ms: 0,
            recovering: false,
            drain_ms: None,
        }
    }
}

impl StubMode {
    /// Merges a partial JSON object onto this mode (unknown keys are errors).
    pub fn merged(&self, patch: &Value) -> Result<StubMode> {
        let Value::Object(patch) = patch else {
            bail!("mode must be a JSON object");
        };
        let mut current = serde_json::to_value(self)?;
        let obj = current
            .as_object_mut()
            .expect("struct serializes to an object");
        for (k, v) in patch {
            if !obj.contains_key(k) {
                bail!(
                    "unknown mode field {k:?} (known: {})",
                    obj.keys().cloned().collect::<Vec<_>>().join(", ")
                );
            }
            obj.insert(k.clone(), v.clone());
        }
        serde_json::from_value(current).context("invalid mode")
    }
}

/// Static facts about the stub process.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StubIdentity {
    /// `CELLD_NODE`: the member id.
    pub member: String,
    pub pod: Option<String>,
    pub namespace: Option<String>,
    pub pod_uid: Option<String>,
    pub node: Option<String>,
    pub zone: Option<String>,
    pub ip: IpAddr,
    pub public_port: u16,
    pub internal_port: u16,
    pub image: Option<String>,
    /// Opaque per-process id, new on every start.
    pub runtime_generation: String,
    pub started_at_ms: u64,
    /// Volume name -> {path, diskId} for the Pod's provisioned disks.
    pub disks: BTreeMap<String, Value>,
    pub pid: u32,
}

pub struct Stub {
    pub identity: StubIdentity,
    mode: Mutex<StubMode>,
    draining: AtomicBool,
    started: std::time::Instant,
    default_drain_ms: u64,
    shutdown_tx: tokio::sync::watch::Sender<bool>,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Variables celld refuses at startup (removed from the runtime).
const REMOVED_VARS: [&str; 6] = [
    "CELLD_SHUTDOWN_DRAIN_MS",
    "CELLD_DRAIN_TOKEN_WAIT_MS",
    "CELLD_PACED_HANDOFF",
    "CELLD_OUTPUT_GATE",
    "CELLD_STORAGE_PROBE",
    "CELLD_EVICTIONS",
];

/// Validates the environment as celld would: removed variables and an invalid
/// `CELLD_SHUTDOWN_TOTAL_MS` or `CELLD_NODE` stop startup.
pub fn validate_env(env: &BTreeMap<String, String>) -> Result<()> {
    for k in env.keys() {
        if REMOVED_VARS.contains(&k.as_str())
            || k.starts_with("CELLD_VAR_")
            || k == "CELLD_VARS_FILE"
        {
            bail!("{k} was removed from celld; set CELLD_SHUTDOWN_TOTAL_MS only / remove it");
        }
    }
    if let Some(v) = env.get("CELLD_SHUTDOWN_TOTAL_MS") {
        match v.parse::<u64>() {
            Ok(n) if n > 0 => {}
            _ => bail!("CELLD_SHUTDOWN_TOTAL_MS must be a positive integer, got {v:?}"),
        }
    }
    if let Some(n) = env.get("CELLD_NODE") {
        let ok = (1..=128).contains(&n.len())
            && n != "."
            && n != ".."
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !ok {
            bail!("CELLD_NODE {n:?} must be 1-128 characters of [A-Za-z0-9._-]");
        }
    }
    Ok(())
}

/// Drain time after SIGTERM: celld's total budget, capped for tests.
pub fn drain_ms(env: &BTreeMap<String, String>, cap_ms: u64) -> u64 {
    let total = env
        .get("CELLD_SHUTDOWN_TOTAL_MS")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(40_000);
    total.min(cap_ms)
}

fn port_of(addr: Option<&String>, default: u16) -> u16 {
    addr.and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(default)
}

/// Options for [`Stub::new`], normally read from the environment by the binary.
#[derive(Debug, Clone)]
pub struct StubConfig {
    pub ip: IpAddr,
    pub public_port: u16,
    pub internal_port: u16,
    pub mode: StubMode,
    pub max_drain_ms: u64,
    pub env: BTreeMap<String, String>,
    /// The id `/__stub/info` shows as `pid`: the process's, or the id kubesim gave an
    /// in-process stub (the one its control API shows as the Pod's `stubPid`).
    pub pid: u32,
}

impl StubConfig {
    /// Reads the configuration the way kubesim passes it: `KUBESIM_POD_IP`, the ports of
    /// `CELLD_ADDR` / `CELLD_INTERNAL_ADDR`, the initial mode from `CELLD_STUB_MODE` (JSON)
    /// or the file `CELLD_STUB_MODE_FILE`, the drain cap from `CELLD_STUB_MAX_DRAIN_MS`.
    pub fn from_env(env: BTreeMap<String, String>) -> Result<Self> {
        let ip: IpAddr = match env.get("KUBESIM_POD_IP") {
            Some(ip) => ip.parse().context("KUBESIM_POD_IP")?,
            None => "127.0.0.1".parse().expect("valid"),
        };
        let public_port = port_of(env.get("CELLD_ADDR"), 8080);
        let internal_port = port_of(env.get("CELLD_INTERNAL_ADDR"), 8081);
        let mut mode = StubMode {
            runtime_version: env
                .get("KUBESIM_IMAGE")
                .cloned()
                .unwrap_or_else(|| "celld-stub".to_string()),
            ..StubMode::default()
        };
        if let Some(ms) = env.get("CELLD_STUB_READY_DELAY_MS") {
            mode.ready_delay_ms = ms.parse().context("CELLD_STUB_READY_DELAY_MS")?;
        }
        if let Some(path) = env.get("CELLD_STUB_MODE_FILE") {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
            let patch: Value =
                serde_json::from_str(&text).with_context(|| format!("parsing {path}"))?;
            mode = mode.merged(&patch)?;
        }
        if let Some(json) = env.get("CELLD_STUB_MODE").filter(|s| !s.trim().is_empty()) {
            let patch: Value = serde_json::from_str(json).context("parsing CELLD_STUB_MODE")?;
            mode = mode.merged(&patch)?;
        }
        let max_drain_ms = match env.get("CELLD_STUB_MAX_DRAIN_MS") {
            Some(v) => v.parse().context("CELLD_STUB_MAX_DRAIN_MS")?,
            None => 3000,
        };
        Ok(Self {
            ip,
            public_port,
            internal_port,
            mode,
            max_drain_ms,
            env,
            pid: std::process::id(),
        })
    }
}

fn read_disks(env: &BTreeMap<String, String>) -> BTreeMap<String, Value> {
    // KUBESIM_VOLUMES=name=path,name2=path2
    let mut out = BTreeMap::new();
    if let Some(spec) = env.get("KUBESIM_VOLUMES") {
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            if let Some((name, path)) = item.split_once('=') {
                let disk_id = std::fs::read_to_string(format!("{path}/disk-id"))
                    .ok()
                    .map(|s| s.trim().to_string());
                out.insert(name.to_string(), json!({"path": path, "diskId": disk_id}));
            }
        }
    }
    out
}

impl Stub {
    pub fn new(cfg: StubConfig) -> Arc<Self> {
        let env = &cfg.env;
        let generation = format!(
            "{}/{:016x}",
            cfg.mode.runtime_version,
            rand::random::<u64>()
        );
        let identity = StubIdentity {
            member: env
                .get("CELLD_NODE")
                .cloned()
                .or_else(|| env.get("KUBESIM_POD_NAME").cloned())
                .unwrap_or_else(|| format!("stub-{}", std::process::id())),
            pod: env.get("KUBESIM_POD_NAME").cloned(),
            namespace: env.get("KUBESIM_POD_NAMESPACE").cloned(),
            pod_uid: env.get("KUBESIM_POD_UID").cloned(),
            node: env.get("KUBESIM_NODE_NAME").cloned(),
            zone: env.get("KUBESIM_ZONE").cloned(),
            ip: cfg.ip,
            public_port: cfg.public_port,
            internal_port: cfg.internal_port,
            image: env.get("KUBESIM_IMAGE").cloned(),
            runtime_generation: generation,
            started_at_ms: now_ms(),
            disks: read_disks(env),
            pid: cfg.pid,
        };
        let (shutdown_tx, _) = tokio::sync::watch::channel(false);
        Arc::new(Self {
            identity,
            mode: Mutex::new(cfg.mode),
            draining: AtomicBool::new(false),
            started: std::time::Instant::now(),
            default_drain_ms: drain_ms(&cfg.env, cfg.max_drain_ms),
            shutdown_tx,
        })
    }

    pub fn mode(&self) -> StubMode {
        self.mode.lock().expect("mode lock").clone()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst) || self.mode().draining
    }

    pub fn healthy(&self) -> bool {
        let mode = self.mode();
        !self.is_draining()
            && mode.health == Health::Healthy
            && !mode.recovering
            && self.started.elapsed() >= Duration::from_millis(mode.ready_delay_ms)
    }

    /// Starts draining (health 503) and signals [`Stub::run`] to exit after the drain time.
    pub fn begin_drain(&self) {
        if !self.draining.swap(true, Ordering::SeqCst) {
            tracing::info!("draining");
            self.shutdown_tx.send_replace(true);
        }
    }

    pub fn drain_duration(&self) -> Duration {
        Duration::from_millis(self.mode().drain_ms.unwrap_or(self.default_drain_ms))
    }

    fn sampled_ms(&self, mode: &StubMode) -> u64 {
        match mode.observation {
            Observation::Stale => now_ms().saturating_sub(mode.stale_seconds * 1000),
            _ => now_ms(),
        }
    }

    fn shutdown_object(&self) -> Value {
        json!({
            "schema_version": 1,
            "runtime_generation": self.identity.runtime_generation,
            "capabilities": {"strict_disk_removal": false},
            "control_only": false,
            "operation": null,
        })
    }

    /// Body of `GET /state` for the current mode.
    pub fn state_json(&self) -> Value {
        let mode = self.mode();
        let sampled = self.sampled_ms(&mode);
        let draining = self.is_draining();
        let rss: u64 = 96 << 20;
        let in_use: u64 = 64 << 20;
        let cgroup: u64 = 128 << 20;
        let mut state = json!({
            "activating": 0,
            "activation_waiting": 0,
            "adopting": 0,
            "capacity_waiting": 0,
            "cgroup_current_bytes": cgroup,
            "cgroup_working_set_bytes": cgroup,
            "evicting": 0,
            "handed_off": 0,
            "handoff_failed": 0,
            "in_use_bytes": in_use,
            "node_load": {
                "bucket_format": 1,
                "cgroup_current_bytes": cgroup,
                "cgroup_working_set_bytes": cgroup,
                "cpu_percent_x100": 150,
                "draining": draining,
                "fd_limit": 65536,
                "host_websockets": 0,
                "in_use_bytes": in_use,
                "memory_headroom": 896u64 << 20,
                "open_fds": 64,
                "owned_cells": mode.owned_cells,
                "placement_weight": 2,
                "pressured": mode.pressured,
                "rebalance_paused": false,
                "resident_cells": mode.resident_cells,
                "restoring": mode.restoring,
                "rss_bytes": rss,
                "sampled_ms": sampled,
                "shed_cells": 0,
            },
            "occupied": mode.resident_cells,
            "owned_cells": mode.owned_cells,
            "ownership": "s3",
            "phases": {"resident": mode.resident_cells},
            "publishes": 0,
            "quiescing": 0,
            "rebalance_failed": 0,
            "rebalanced": 0,
            "releasing": 0,
            "remote_route_refreshes": 0,
            "restoring": mode.restoring,
            "rss_bytes": rss,
            "shedding": 0,
            "stops": 0,
            "shutdown": self.shutdown_object(),
        });
        if mode.observation != Observation::Unsupported {
            // Cells: the first `pending_cells` are one generation behind the node's.
            let mut cells = serde_json::Map::new();
            for i in 0..mode.resident_cells {
                let g = if i < mode.pending_cells {
                    mode.generation.saturating_sub(1)
                } else {
                    mode.generation
                };
                cells.insert(format!("cell-{i}"), json!(g));
            }
            state["deployment"] = json!({
                "version": mode.version,
                "prefix": mode.prefix,
                "generation": mode.generation,
                "swapping": mode.swapping_cells,
                "isolates": 1,
                "draining": [],
                "cells": cells,
            });
        }
        state
    }

    /// Body of `GET /state?view=application` for the current mode.
    pub fn application_json(&self) -> Value {
        let mode = self.mode();
        let sampled = self.sampled_ms(&mode);
        json!({
            "schema_version": 1,
            "runtime_generation": self.identity.runtime_generation,
            "sampled_at_ms": sampled,
            "snapshot_valid": true,
            "loaded": {"version": mode.version, "prefix": mode.prefix},
            "local_generation": mode.generation,
            "target": {
                "version": mode.target_version.clone().unwrap_or_else(|| mode.version.clone()),
                "prefix": mode.target_prefix.clone().unwrap_or_else(|| mode.prefix.clone()),
                "observed_at_ms": sampled,
            },
            "pointer_status": mode.pointer_status,
            "adoption_status": mode.adoption_status,
            "resident_cells": mode.resident_cells,
            "pending_cells": mode.pending_cells,
            "swapping_cells": mode.swapping_cells,
        })
    }

    pub fn handle_public(&self, req: &Req) -> Resp {
        if req.path == "/.well-known/celld/health" {
            return if self.healthy() {
                http::json(StatusCode::OK, &json!({"ok": true}))
            } else {
                http::json(StatusCode::SERVICE_UNAVAILABLE, &json!({"ok": false}))
            };
        }
        if self.is_draining() {
            let mut r = http::json(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"ok": false, "draining": true}),
            );
            r.headers_mut()
                .insert("retry-after", "1".parse().expect("valid"));
            r.headers_mut()
                .insert("connection", "close".parse().expect("valid"));
            return r;
        }
        http::json(StatusCode::NOT_FOUND, &json!({"error": "not_found"}))
    }

    pub fn handle_internal(&self, req: &Req) -> Resp {
        let segs = req.segments();
        let recovery_calls = matches!(
            segs.as_slice(),
            ["__stub", ..] | ["peer", "log", "seal" | "tail"]
        );
        if self.mode().recovering && !recovery_calls {
            return http::raw(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "predecessor recovery in progress",
            );
        }
        match (req.method.clone(), segs.as_slice()) {
            (Method::GET, ["state"]) => {
                let mode = self.mode();
                let application = req.query_param("view") == Some("application");
                match mode.observation {
                    Observation::Unavailable => {
                        return http::json(
                            StatusCode::SERVICE_UNAVAILABLE,
                            &json!({"error": "unavailable"}),
                        );
                    }
                    Observation::Malformed => {
                        return http::raw(
                            StatusCode::OK,
                            "application/json",
                            "{\"schema_version\":1,\"runtime_generation\":",
                        );
                    }
                    Observation::Unsupported if application => {
                        return http::json(StatusCode::NOT_FOUND, &json!({"error": "not_found"}));
                    }
                    _ => {}
                }
                let mut body = if application {
                    self.application_json()
                } else {
                    self.state_json()
                };
                if mode.observation == Observation::Huge {
                    // Valid JSON, but 2 MiB: a reader must refuse it by size alone.
                    body["padding"] = Value::String("x".repeat(2 << 20));
                }
                http::json(StatusCode::OK, &body)
            }
            (_, ["state"]) => http::json(
                StatusCode::METHOD_NOT_ALLOWED,
                &json!({"error": "method_not_allowed"}),
            ),
            (Method::POST, ["shutdown"]) => {
                self.begin_drain();
                http::json(StatusCode::OK, &json!({"ok": true}))
            }
            (_, ["shutdown"]) => http::json(
                StatusCode::METHOD_NOT_ALLOWED,
                &json!({"error": "method_not_allowed"}),
            ),
            (Method::GET, ["__stub", "info"]) => {
                let mut info = serde_json::to_value(&self.identity).expect("serializable");
                info["runtimeVersion"] = json!(self.mode().runtime_version);
                info["draining"] = json!(self.is_draining());
                info["healthy"] = json!(self.healthy());
                http::json(StatusCode::OK, &info)
            }
            (Method::GET, ["__stub", "mode"]) => http::json(StatusCode::OK, &self.mode()),
            (Method::PUT | Method::POST | Method::PATCH, ["__stub", "mode"]) => {
                let patch: Value = match req.json() {
                    Ok(v) => v,
                    Err(r) => return *r,
                };
                let mut guard = self.mode.lock().expect("mode lock");
                match guard.merged(&patch) {
                    Ok(m) => {
                        tracing::info!(mode = %serde_json::to_string(&patch).unwrap_or_default(), "mode changed");
                        *guard = m.clone();
                        http::json(StatusCode::OK, &m)
                    }
                    Err(e) => http::error(StatusCode::BAD_REQUEST, &format!("{e:#}")),
                }
            }
            _ => http::json(StatusCode::NOT_FOUND, &json!({"error": "not_found"})),
        }
    }

    /// Serves both listeners until SIGTERM/SIGINT or `POST /shutdown`, then drains (health
    /// 503) for the drain time and returns (the `celld-stub` process).
    pub async fn run(self: Arc<Self>) -> Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        self.run_until(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = int.recv() => tracing::info!("SIGINT"),
            }
        })
        .await
    }

    /// Serves both listeners until `stop` resolves or [`Stub::begin_drain`] is called (what
    /// SIGTERM and `POST /shutdown` do), then drains like [`Stub::run`]. Kubesim runs
    /// stubs inside its own process this way (`--stubs in-process`): dropping the future
    /// is the SIGKILL, closing both listeners and every open connection.
    pub async fn run_until(
        self: Arc<Self>,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<()> {
        let public =
            http::bind(SocketAddr::new(self.identity.ip, self.identity.public_port)).await?;
        let internal = http::bind(SocketAddr::new(
            self.identity.ip,
            self.identity.internal_port,
        ))
        .await?;
        tracing::info!(
            ip = %self.identity.ip,
            public = self.identity.public_port,
            internal = self.identity.internal_port,
            member = %self.identity.member,
            generation = %self.identity.runtime_generation,
            "celld-stub serving"
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        // Both listeners are polled inside this future, not spawned: dropping it closes
        // them and their connections at once.
        let s1 = self.clone();
        let public = http::serve(
            public,
            move |req| {
                let s = s1.clone();
                async move { s.handle_public(&req) }
            },
            stopped(stop_rx.clone()),
        );
        let s2 = self.clone();
        let internal = http::serve(
            internal,
            move |req| {
                let s = s2.clone();
                async move {
                    let slow = req.path == "/state" && s.mode().observation == Observation::Slow;
                    if slow {
                        tokio::time::sleep(SLOW_STATE).await;
                    }
                    s.handle_internal(&req)
                }
            },
            stopped(stop_rx.clone()),
        );
        // Fused: it is polled again after each phase below.
        let serving = futures::FutureExt::fuse(async {
            tokio::join!(public, internal);
        });
        tokio::pin!(serving);

        let mut shutdown_rx = self.shutdown_tx.subscribe();
        tokio::select! {
            _ = &mut serving => {}
            _ = stop => {}
            _ = shutdown_rx.wait_for(|s| *s) => tracing::info!("shutdown requested"),
        }
        self.begin_drain();
        let drain = self.drain_duration();
        tracing::info!(drain_ms = drain.as_millis() as u64, "draining before exit");
        // A second SIGTERM/SIGINT does not cut the drain short, as in celld.
        tokio::select! {
            _ = &mut serving => {}
            _ = tokio::time::sleep(drain) => {}
        }
        let _ = stop_tx.send(true);
        let _ = tokio::time::timeout(Duration::from_millis(200), &mut serving).await;
        tracing::info!("exiting");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stub(env: &[(&str, &str)]) -> Arc<Stub> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Stub::new(StubConfig::from_env(env).unwrap())
    }

    fn get(path: &str, query: Option<&str>) -> Req {
        Req {
            method: Method::GET,
            path: path.into(),
            query: query.map(str::to_string),
            body: Default::default(),
        }
    }

    fn put_mode(s: &Stub, v: Value) -> Resp {
        s.handle_internal(&Req {
            method: Method::PUT,
            path: "/__stub/mode".into(),
            query: None,
            body: serde_json::to_vec(&v).unwrap().into(),
        })
    }

    #[test]
    fn config_from_env() {
        let env: BTreeMap<String, String> = [
            ("KUBESIM_POD_IP", "127.20.0.5"),
            ("CELLD_ADDR", "0.0.0.0:9080"),
            (
                "CELLD_STUB_MODE",
                r#"{"version":"v7","health":"unhealthy"}"#,
            ),
            ("KUBESIM_IMAGE", "ghcr.io/ewhauser/celld:0.6.0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let cfg = StubConfig::from_env(env).unwrap();
        assert_eq!(cfg.ip.to_string(), "127.20.0.5");
        assert_eq!(cfg.public_port, 9080);
        assert_eq!(cfg.internal_port, 8081);
        assert_eq!(cfg.mode.version, "v7");
        assert_eq!(cfg.mode.health, Health::Unhealthy);
        assert_eq!(cfg.mode.runtime_version, "ghcr.io/ewhauser/celld:0.6.0");
    }

    #[test]
    fn env_validation_refuses_removed_variables() {
        let env = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(validate_env(&env("CELLD_SHUTDOWN_DRAIN_MS", "100")).is_err());
        assert!(validate_env(&env("CELLD_VAR_X", "1")).is_err());
        assert!(validate_env(&env("CELLD_SHUTDOWN_TOTAL_MS", "0")).is_err());
        assert!(validate_env(&env("CELLD_SHUTDOWN_TOTAL_MS", "20000")).is_ok());
        assert!(validate_env(&env("CELLD_NODE", "alpha-0")).is_ok());
        assert!(validate_env(&env("CELLD_NODE", "a/b")).is_err());
    }

    #[test]
    fn drain_time_is_capped() {
        let env = BTreeMap::from([("CELLD_SHUTDOWN_TOTAL_MS".to_string(), "20000".to_string())]);
        assert_eq!(drain_ms(&env, 3000), 3000);
        let env = BTreeMap::from([("CELLD_SHUTDOWN_TOTAL_MS".to_string(), "500".to_string())]);
        assert_eq!(drain_ms(&env, 3000), 500);
        assert_eq!(drain_ms(&BTreeMap::new(), 3000), 3000);
    }

    #[test]
    fn health_follows_mode_and_draining() {
        let s = stub(&[("CELLD_NODE", "alpha-1")]);
        let health = |s: &Stub| {
            s.handle_public(&get("/.well-known/celld/health", None))
                .status()
        };
        assert_eq!(health(&s), StatusCode::OK);
        assert_eq!(
            put_mode(&s, json!({"health": "unhealthy"})).status(),
            StatusCode::OK
        );
        assert_eq!(health(&s), StatusCode::SERVICE_UNAVAILABLE);
        put_mode(&s, json!({"health": "healthy"}));
        assert_eq!(health(&s), StatusCode::OK);
        s.begin_drain();
        assert_eq!(health(&s), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            s.handle_public(&get("/anything", None)).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(s.state_json()["node_load"]["draining"], json!(true));
    }

    #[test]
    fn a_recovering_stub_answers_like_celld_recovering_its_predecessor() {
        let s = stub(&[("CELLD_NODE", "alpha-1")]);
        put_mode(&s, json!({"recovering": true}));
        assert!(!s.healthy());
        let r = s.handle_internal(&get("/state", None));
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = futures::executor::block_on(http_body_util::BodyExt::collect(r.into_body()))
            .expect("body")
            .to_bytes();
        assert_eq!(&body[..], b"predecessor recovery in progress");
        // The stub's own controls still answer, so a test can end the recovery.
        assert_eq!(
            s.handle_internal(&get("/__stub/mode", None)).status(),
            StatusCode::OK
        );
        put_mode(&s, json!({"recovering": false}));
        assert!(s.healthy());
        assert_eq!(
            s.handle_internal(&get("/state", None)).status(),
            StatusCode::OK
        );
    }

    #[test]
    fn unknown_mode_fields_are_refused() {
        let s = stub(&[]);
        assert_eq!(
            put_mode(&s, json!({"helth": "x"})).status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            put_mode(&s, json!({"health": "sick"})).status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            s.mode(),
            StubMode {
                runtime_version: "celld-stub".into(),
                ..StubMode::default()
            }
        );
    }

    #[test]
    fn state_has_the_fields_the_operator_requires() {
        let s = stub(&[("CELLD_NODE", "alpha-0")]);
        let st = s.state_json();
        for k in [
            "capacity_waiting",
            "activation_waiting",
            "restoring",
            "occupied",
            "owned_cells",
        ] {
            assert!(st[k].is_u64(), "{k}");
        }
        for k in [
            "draining",
            "rebalance_paused",
            "sampled_ms",
            "resident_cells",
            "rss_bytes",
            "in_use_bytes",
            "pressured",
            "memory_headroom",
        ] {
            assert!(!st["node_load"][k].is_null(), "node_load.{k}");
        }
        assert_eq!(st["shutdown"]["schema_version"], json!(1));
        assert!(
            !st["shutdown"]["runtime_generation"]
                .as_str()
                .unwrap()
                .is_empty()
        );
        let d = &st["deployment"];
        assert_eq!(d["version"], json!("v1"));
        assert!(d["generation"].as_u64().unwrap() > 0);
        assert_eq!(d["cells"].as_object().unwrap().len(), 4);
        let age = now_ms() - st["node_load"]["sampled_ms"].as_u64().unwrap();
        assert!(age < 5000);
    }

    #[test]
    fn application_view_modes() {
        let s = stub(&[]);
        let app = |s: &Stub| s.handle_internal(&get("/state", Some("view=application")));
        let r = app(&s);
        assert_eq!(r.status(), StatusCode::OK);
        let v = s.application_json();
        assert_eq!(v["schema_version"], json!(1));
        assert_eq!(v["snapshot_valid"], json!(true));
        assert_eq!(v["pointer_status"], json!("observed"));
        assert_eq!(v["loaded"]["version"], json!("v1"));
        assert_eq!(v["target"]["version"], json!("v1"));

        put_mode(
            &s,
            json!({"version": "v2", "targetVersion": "v3", "pendingCells": 2}),
        );
        let v = s.application_json();
        assert_eq!(v["loaded"]["version"], json!("v2"));
        assert_eq!(v["target"]["version"], json!("v3"));
        assert_eq!(v["pending_cells"], json!(2));
        let cells = s.state_json()["deployment"]["cells"].clone();
        assert_eq!(
            cells["cell-0"],
            json!(0),
            "a pending cell lags the node generation"
        );

        put_mode(&s, json!({"observation": "stale"}));
        let age = now_ms() - s.application_json()["sampled_at_ms"].as_u64().unwrap();
        assert!(age >= 599_000, "stale sample is old: {age}");

        put_mode(&s, json!({"observation": "unsupported"}));
        assert_eq!(app(&s).status(), StatusCode::NOT_FOUND);
        assert!(s.state_json().get("deployment").is_none());

        put_mode(&s, json!({"observation": "malformed"}));
        let r = app(&s);
        assert_eq!(r.status(), StatusCode::OK);

        put_mode(&s, json!({"observation": "unavailable"}));
        assert_eq!(app(&s).status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn mutations_need_post() {
        let s = stub(&[]);
        let r = s.handle_internal(&Req {
            method: Method::POST,
            path: "/state".into(),
            query: None,
            body: Default::default(),
        });
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            s.handle_internal(&get("/shutdown", None)).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            s.handle_internal(&get("/nope", None)).status(),
            StatusCode::NOT_FOUND
        );
    }
}
