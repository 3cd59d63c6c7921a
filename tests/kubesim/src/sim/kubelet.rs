//! The simulated kubelet: one worker task per Pod bound to one of our nodes. A worker owns
//! the Pod's stub ([`Container`]: a `celld-stub` process or a task), probes its
//! readiness, writes the Pod status through the status subresource, and finalizes
//! graceful deletions.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use super::container::{Container, Exit, Killer, StubRuntime};
use super::{API_RETRY, Sim, SimNode, WorkerHandle, now};
use crate::control::{FaultKind, PodView};
use crate::objects::{
    self, ContainerView, EnvData, PodStatusInput, ReadinessProbe, STUB_MODE_ANNOTATION,
    StatusSignature, Terminated,
};

/// Consumes the Pod watch: starts a worker for each new Pod on one of our nodes and wakes
/// the worker of every Pod that changed or went away.
pub(crate) async fn dispatch(
    sim: Arc<Sim>,
    stream: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
) {
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => on_pod(&sim, &p),
            Ok(watcher::Event::Delete(p)) => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                sim.nudge_where(|w| w.view.lock().expect("view").uid == uid);
            }
            Ok(watcher::Event::InitDone) => sim.nudge_where(|_| true),
            Ok(watcher::Event::Init) => {}
            Err(e) => tracing::warn!(error = %e, "pod watch"),
        }
    }
}

fn on_pod(sim: &Arc<Sim>, pod: &Pod) {
    let Some(node_name) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
        return;
    };
    let Some(node) = sim.node(&node_name).cloned() else {
        return;
    };
    let (Some(uid), Some(ns), Some(name)) = (
        pod.metadata.uid.clone(),
        pod.metadata.namespace.clone(),
        pod.metadata.name.clone(),
    ) else {
        return;
    };
    let mut inner = sim.inner.lock().expect("inner lock");
    if let Some(w) = inner.workers.get(&uid) {
        w.nudge.send_modify(|n| *n += 1);
        return;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) || sim.shutting_down.load(Ordering::SeqCst) {
        return;
    }
    // Keep the IP a Pod already shows (kubesim restarted), else a fresh one.
    let previous: Option<Ipv4Addr> = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok());
    let ip = match previous {
        Some(ip) if inner.pod_ips.reserve(ip) => ip,
        _ => match inner.pod_ips.allocate() {
            Some(ip) => ip,
            None => {
                tracing::error!(pod = %name, "pod CIDR exhausted");
                return;
            }
        },
    };
    let (tx, rx) = watch::channel(0u64);
    let killer = Arc::new(Mutex::new(None));
    let view = Arc::new(Mutex::new(PodView {
        namespace: ns.clone(),
        name: name.clone(),
        uid: uid.clone(),
        node: node_name.clone(),
        ip: ip.to_string(),
        container: "Waiting:ContainerCreating".into(),
        ready: false,
        restart_count: 0,
        fault: None,
        stub_pid: None,
        applied_fault: None,
    }));
    inner.workers.insert(
        uid.clone(),
        WorkerHandle {
            namespace: ns.clone(),
            name: name.clone(),
            node: node_name.clone(),
            nudge: tx,
            view: view.clone(),
            killer: killer.clone(),
        },
    );
    drop(inner);
    tracing::info!(pod = %format!("{ns}/{name}"), node = %node_name, %ip, "pod bound to a sim node");

    // Resume counts from an existing status (kubesim restarted while the Pod lived).
    let cs = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first());
    let ever_started = cs.is_some_and(|c| {
        c.state.as_ref().is_some_and(|s| s.running.is_some())
            || c.last_state
                .as_ref()
                .is_some_and(|s| s.terminated.is_some())
            || c.restart_count > 0
    });
    let worker = Worker {
        sim: sim.clone(),
        ns,
        name,
        uid,
        node,
        ip,
        rx,
        view,
        killer,
        child: None,
        child_started: None,
        container_id: None,
        container_seq: 0,
        ever_started,
        restart_count: cs.map_or(0, |c| c.restart_count),
        last_state: None,
        waiting: ("ContainerCreating".into(), String::new()),
        ready: false,
        probe: objects::readiness_probe(pod, sim.cfg.probe_period_seconds),
        probe_ok: 0,
        probe_fail: 0,
        next_probe: None,
        restart_at: None,
        consecutive_crashes: 0,
        fault: None,
        fault_tick: None,
        image_backoff: false,
        sandbox: false,
        terminating: false,
        deleted: false,
        written: None,
        applied: None,
        retry_at: None,
    };
    tokio::spawn(worker.run());
}

struct Worker {
    sim: Arc<Sim>,
    ns: String,
    name: String,
    uid: String,
    node: Arc<SimNode>,
    ip: Ipv4Addr,
    rx: watch::Receiver<u64>,
    view: Arc<Mutex<PodView>>,
    /// The running container's [`Killer`], shared with the [`WorkerHandle`].
    killer: Arc<Mutex<Option<Killer>>>,
    child: Option<Container>,
    child_started: Option<(Timestamp, Instant)>,
    container_id: Option<String>,
    container_seq: u32,
    ever_started: bool,
    restart_count: i32,
    last_state: Option<Terminated>,
    /// Waiting reason and message while no container runs.
    waiting: (String, String),
    ready: bool,
    probe: ReadinessProbe,
    probe_ok: u32,
    probe_fail: u32,
    next_probe: Option<Instant>,
    /// A crashed container may start again from then on (back-off).
    restart_at: Option<Instant>,
    consecutive_crashes: u32,
    /// Fault in force (as last reconciled) and its next tick (crash-loop restart, image
    /// pull back-off).
    fault: Option<FaultKind>,
    fault_tick: Option<Instant>,
    image_backoff: bool,
    /// Volumes mounted and sandbox up: the Pod has its IP.
    sandbox: bool,
    terminating: bool,
    /// Delete with grace 0 sent; waiting for the object to go.
    deleted: bool,
    /// resourceVersion and signature of our last status write (the store may lag).
    written: Option<(u64, StatusSignature)>,
    /// Fault whose status is written (None = running normally or not yet synced).
    applied: Option<Option<FaultKind>>,
    retry_at: Option<Instant>,
}

enum Wake {
    Nudge,
    Exit(Exit),
    Probe,
    Timer,
}

async fn wait_child(child: &mut Option<Container>) -> Exit {
    match child.as_mut() {
        Some(c) => c.wait().await,
        None => std::future::pending().await,
    }
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn rv(pod: &Pod) -> u64 {
    pod.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The write was for a Pod that is gone: 404, a failed precondition (409), or the uid
/// in a status patch refused as immutable (422), which is what the API server answers
/// when a successor Pod took the name. Retrying would only write onto the successor's
/// name again and again (at 1,000 fleets these retries starved the node's other Pods).
fn pod_gone(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            matches!(s.code, 404 | 409)
                || (s.code == 422
                    && s.message.contains("metadata.uid")
                    && s.message.contains("immutable"))
        }
        _ => false,
    }
}

impl Worker {
    fn key(&self) -> String {
        format!("{}/{}", self.ns, self.name)
    }

    fn backoff(&self) -> Duration {
        Duration::from_secs(self.sim.cfg.crash_backoff_seconds.max(1))
    }

    async fn run(mut self) {
        loop {
            if !self.node.is_alive() {
                // The machine is gone (its processes with it), or only its kubelet is,
                // and the stub runs on unsupervised until the node starts again.
                let keep = self.node.keep_stubs.load(Ordering::SeqCst);
                if !keep {
                    self.kill_now().await;
                }
                self.ready = false;
                self.publish("NodeDown");
                if !keep && self.sim.pod(&self.ns, &self.name, &self.uid).is_none() {
                    // Removed from the API while its machine is down: nothing left to stop.
                    self.gone().await;
                    return;
                }
                if self.rx.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let Some(pod) = self.sim.pod(&self.ns, &self.name, &self.uid) else {
                self.gone().await;
                return;
            };
            if pod.metadata.deletion_timestamp.is_some() {
                self.terminate(&pod).await;
                continue;
            }
            self.reconcile(&pod).await;
            self.sync_status(&pod).await;
            let label = if self.child.is_some() {
                "Running".to_string()
            } else {
                format!("Waiting:{}", self.waiting.0)
            };
            self.publish(&label);
            self.wait_next().await;
        }
    }

    fn publish(&self, container: &str) {
        let mut v = self.view.lock().expect("view lock");
        v.container = container.to_string();
        v.ready = self.ready;
        v.restart_count = self.restart_count;
        v.fault = self.fault;
        v.stub_pid = self.child.as_ref().map(Container::id);
        v.applied_fault = self.applied.flatten();
        if self.applied.is_none() {
            v.applied_fault = None;
        }
    }

    async fn wait_next(&mut self) {
        let probe_at = if self.child.is_some() {
            self.next_probe
        } else {
            None
        };
        let timers = [self.fault_tick, self.restart_at, self.retry_at];
        let timer = timers.into_iter().flatten().min();
        let wake = tokio::select! {
            r = self.rx.changed() => { let _ = r; Wake::Nudge }
            st = wait_child(&mut self.child) => Wake::Exit(st),
            _ = sleep_opt(probe_at) => Wake::Probe,
            _ = sleep_opt(timer) => Wake::Timer,
        };
        match wake {
            Wake::Nudge => {}
            Wake::Exit(st) => self.on_exit(st),
            Wake::Probe => self.probe_once().await,
            Wake::Timer => self.on_timer(),
        }
    }

    fn on_timer(&mut self) {
        let now_i = Instant::now();
        if self.retry_at.is_some_and(|t| t <= now_i) {
            self.retry_at = None;
        }
        if self.restart_at.is_some_and(|t| t <= now_i) {
            self.restart_at = None;
        }
        if self.fault_tick.is_some_and(|t| t <= now_i) {
            self.fault_tick = None;
            match self.fault {
                Some(FaultKind::CrashLoop) => {
                    // One more restart that crashed at once.
                    let t = now();
                    self.restart_count += 1;
                    self.container_seq += 1;
                    self.last_state = Some(Terminated {
                        exit_code: 1,
                        signal: None,
                        reason: "Error".into(),
                        started_at: t,
                        finished_at: t,
                        container_id: self.next_container_id(),
                    });
                    self.fault_tick = Some(now_i + self.backoff());
                }
                Some(FaultKind::ImagePull) => self.image_backoff = true,
                _ => {}
            }
        }
    }

    fn next_container_id(&self) -> String {
        format!(
            "kubesim://{}-{}",
            &self.uid[..8.min(self.uid.len())],
            self.container_seq
        )
    }

    fn on_exit(&mut self, st: Exit) {
        let (code, sig) = (st.code, st.signal);
        let exit_code = code.unwrap_or(128 + sig.unwrap_or(9));
        let (started_at, started_i) = self.child_started.take().unwrap_or((now(), Instant::now()));
        self.last_state = Some(Terminated {
            exit_code,
            signal: sig,
            reason: if exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            },
            started_at,
            finished_at: now(),
            container_id: self.container_id.clone().unwrap_or_default(),
        });
        self.child = None;
        *self.killer.lock().expect("killer") = None;
        self.ready = false;
        self.probe_ok = 0;
        self.probe_fail = 0;
        if started_i.elapsed() > Duration::from_secs(10) {
            self.consecutive_crashes = 0;
        }
        self.consecutive_crashes += 1;
        let delay = if self.consecutive_crashes <= 1 {
            Duration::from_secs(1)
        } else {
            let shift = (self.consecutive_crashes - 2).min(3);
            self.backoff() * (1u32 << shift)
        };
        self.restart_at = Some(Instant::now() + delay);
        if !self.terminating && self.node.is_alive() {
            tracing::warn!(pod = %self.key(), exit_code, restart_in = ?delay, "stub exited");
        }
    }

    async fn probe_once(&mut self) {
        let url = format!("http://{}:{}{}", self.ip, self.probe.port, self.probe.path);
        let timeout = Duration::from_secs(u64::from(self.probe.timeout_s));
        let ok = match self.sim.http.get(&url, timeout).await {
            Ok(r) => r.status.as_u16() >= 200 && r.status.as_u16() < 400,
            Err(_) => false,
        };
        if ok {
            self.probe_ok += 1;
            self.probe_fail = 0;
            if !self.ready && self.probe_ok >= self.probe.success_threshold {
                self.ready = true;
                tracing::info!(pod = %self.key(), "ready");
            }
        } else {
            self.probe_fail += 1;
            self.probe_ok = 0;
            if self.ready && self.probe_fail >= self.probe.failure_threshold {
                self.ready = false;
                tracing::info!(pod = %self.key(), "not ready (readiness probe failing)");
            }
        }
        self.next_probe =
            Some(Instant::now() + Duration::from_secs(u64::from(self.probe.period_s)));
    }

    /// Volumes a kubelet would have to mount first: every claim Bound. Returns the claims'
    /// hostPath directories for the stub.
    fn volumes(&self, pod: &Pod) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(out);
        };
        for v in spec.volumes.iter().flatten() {
            let claim_name = if let Some(c) = &v.persistent_volume_claim {
                c.claim_name.clone()
            } else if v.ephemeral.is_some() {
                format!("{}-{}", self.name, v.name)
            } else {
                continue;
            };
            let claim = self
                .sim
                .claims
                .get(&kube::runtime::reflector::ObjectRef::new(&claim_name).within(&self.ns));
            let bound = claim.as_ref().and_then(|c| {
                let phase = c.status.as_ref().and_then(|s| s.phase.as_deref());
                (phase == Some("Bound"))
                    .then(|| c.spec.as_ref().and_then(|s| s.volume_name.clone()))
            });
            match bound {
                Some(pv) => {
                    let path = pv
                        .and_then(|pv| {
                            self.sim
                                .volumes
                                .get(&kube::runtime::reflector::ObjectRef::new(&pv))
                        })
                        .and_then(|pv| pv.spec.as_ref()?.host_path.as_ref().map(|h| h.path.clone()))
                        .unwrap_or_default();
                    out.push((v.name.clone(), path));
                }
                None => {
                    return Err(format!(
                        "unbound immediate PersistentVolumeClaims: waiting for claim {claim_name} to be Bound"
                    ));
                }
            }
        }
        Ok(out)
    }

    async fn reconcile(&mut self, pod: &Pod) {
        let fault = self.sim.fault_for(&self.ns, &self.name);
        if fault != self.fault {
            if fault == Some(FaultKind::HangTermination) {
                // Only a deletion shows it; the container runs on.
                tracing::warn!(pod = %self.key(), "fault injected: termination will hang");
                self.fault_tick = None;
            } else if let Some(f) = fault {
                tracing::warn!(pod = %self.key(), fault = ?f, "fault injected");
                if self.child.is_some() {
                    self.kill_now().await;
                    if let Some(t) = self.last_state.as_mut() {
                        t.exit_code = 1;
                        t.signal = None;
                        t.reason = "Error".into();
                    }
                }
                self.image_backoff = false;
                self.fault_tick = match f {
                    FaultKind::CrashLoop | FaultKind::ImagePull => {
                        Some(Instant::now() + self.backoff())
                    }
                    FaultKind::ConfigError | FaultKind::HangTermination => None,
                };
            } else {
                tracing::info!(pod = %self.key(), "fault removed");
                self.fault_tick = None;
                self.restart_at = None;
                self.consecutive_crashes = 0;
            }
            self.fault = fault;
            self.applied = None;
            if fault == Some(FaultKind::HangTermination) {
                self.applied = Some(fault);
            }
        }
        if self.child.is_some() {
            return;
        }
        let volumes = match self.volumes(pod) {
            Ok(v) => v,
            Err(_) if !self.sandbox => {
                self.waiting = ("ContainerCreating".into(), String::new());
                return;
            }
            Err(_) => Vec::new(),
        };
        self.sandbox = true;
        let image = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        match self.fault {
            Some(FaultKind::CrashLoop) => {
                self.waiting = (
                    "CrashLoopBackOff".into(),
                    format!(
                        "back-off {}s restarting failed container={} pod={}_{}({})",
                        self.backoff().as_secs(),
                        container_name(pod),
                        self.name,
                        self.ns,
                        self.uid
                    ),
                );
                return;
            }
            Some(FaultKind::ImagePull) => {
                self.waiting = if self.image_backoff {
                    (
                        "ImagePullBackOff".into(),
                        format!("Back-off pulling image \"{image}\""),
                    )
                } else {
                    (
                        "ErrImagePull".into(),
                        format!(
                            "failed to pull and unpack image \"{image}\": kubesim: injected pull failure"
                        ),
                    )
                };
                return;
            }
            Some(FaultKind::ConfigError) => {
                self.waiting = (
                    "CreateContainerConfigError".into(),
                    "kubesim: injected configuration error".into(),
                );
                return;
            }
            Some(FaultKind::HangTermination) | None => {}
        }
        if self.restart_at.is_some_and(|t| t > Instant::now()) {
            self.waiting = (
                "CrashLoopBackOff".into(),
                format!(
                    "back-off restarting failed container={} pod={}_{}({})",
                    container_name(pod),
                    self.name,
                    self.ns,
                    self.uid
                ),
            );
            return;
        }
        if self.sim.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        match self.start_stub(pod, &volumes, &image).await {
            Ok(()) => {}
            Err(StartError::Config(msg)) => {
                tracing::warn!(pod = %self.key(), error = %msg, "container config error");
                self.waiting = ("CreateContainerConfigError".into(), msg);
                self.retry_at = Some(Instant::now() + self.backoff());
            }
            Err(StartError::Run(msg)) => {
                tracing::error!(pod = %self.key(), error = %msg, "could not start stub");
                self.waiting = ("RunContainerError".into(), msg);
                self.retry_at = Some(Instant::now() + self.backoff());
            }
        }
    }

    async fn fetch_env_data(&self, pod: &Pod) -> EnvData {
        let mut data = EnvData::default();
        let Some(c) = pod.spec.as_ref().and_then(|s| s.containers.first()) else {
            return data;
        };
        for (is_secret, name) in objects::env_sources(c) {
            if is_secret {
                let api: Api<Secret> = Api::namespaced(self.sim.client.clone(), &self.ns);
                if let Ok(Some(s)) = api.get_opt(&name).await {
                    let mut m: BTreeMap<String, String> = s
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                        .collect();
                    m.extend(s.string_data.unwrap_or_default());
                    data.secrets.insert(name, m);
                }
            } else {
                let api: Api<ConfigMap> = Api::namespaced(self.sim.client.clone(), &self.ns);
                if let Ok(Some(cm)) = api.get_opt(&name).await {
                    data.config_maps.insert(name, cm.data.unwrap_or_default());
                }
            }
        }
        data
    }

    async fn start_stub(
        &mut self,
        pod: &Pod,
        volumes: &[(String, String)],
        image: &str,
    ) -> Result<(), StartError> {
        let Some(container) = pod.spec.as_ref().and_then(|s| s.containers.first()) else {
            return Err(StartError::Run("pod has no containers".into()));
        };
        let data = self.fetch_env_data(pod).await;
        let env = objects::container_env(pod, container, self.ip, self.node.spec.ip, &data)
            .map_err(StartError::Config)?;
        let cfg = &self.sim.cfg;
        // The environment the stub's process gets (an in-process stub reads the same).
        let mut vars: BTreeMap<String, String> = BTreeMap::new();
        vars.insert(
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        );
        vars.insert("RUST_LOG".into(), "info".into());
        if let Some(mode) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STUB_MODE_ANNOTATION))
        {
            vars.insert("CELLD_STUB_MODE".into(), mode.clone());
        }
        if cfg.readiness_delay_ms > 0 {
            vars.insert(
                "CELLD_STUB_READY_DELAY_MS".into(),
                cfg.readiness_delay_ms.to_string(),
            );
        }
        vars.insert(
            "CELLD_STUB_MAX_DRAIN_MS".into(),
            cfg.stub_max_drain_ms.to_string(),
        );
        vars.extend(env);
        let volumes_env = volumes
            .iter()
            .map(|(n, p)| format!("{n}={p}"))
            .collect::<Vec<_>>()
            .join(",");
        for (k, v) in [
            ("KUBESIM_POD_IP", self.ip.to_string()),
            ("KUBESIM_POD_NAME", self.name.clone()),
            ("KUBESIM_POD_NAMESPACE", self.ns.clone()),
            ("KUBESIM_POD_UID", self.uid.clone()),
            ("KUBESIM_NODE_NAME", self.node.spec.name.clone()),
            ("KUBESIM_ZONE", self.node.spec.zone.clone()),
            ("KUBESIM_IMAGE", image.to_string()),
            ("KUBESIM_VOLUMES", volumes_env),
        ] {
            vars.insert(k.into(), v);
        }
        let child = match cfg.stubs {
            StubRuntime::InProcess => Container::task(vars, &self.key()),
            StubRuntime::Process => self.spawn_process(&vars)?,
        };
        if self.ever_started {
            self.restart_count += 1;
        }
        self.ever_started = true;
        self.container_seq += 1;
        self.container_id = Some(self.next_container_id());
        *self.killer.lock().expect("killer") = Some(child.killer());
        self.child = Some(child);
        self.child_started = Some((now(), Instant::now()));
        self.restart_at = None;
        self.retry_at = None;
        self.ready = false;
        self.probe_ok = 0;
        self.probe_fail = 0;
        self.probe = objects::readiness_probe(pod, self.sim.cfg.probe_period_seconds);
        let first = Duration::from_secs(u64::from(self.probe.initial_delay_s))
            .max(Duration::from_millis(300));
        self.next_probe = Some(Instant::now() + first);
        tracing::info!(pod = %self.key(), ip = %self.ip, pid = ?self.child.as_ref().map(Container::id), restarts = self.restart_count, "stub started");
        Ok(())
    }

    /// Starts `celld-stub` with exactly `vars` as its environment, logging to its own file;
    /// it dies with kubesim.
    fn spawn_process(&self, vars: &BTreeMap<String, String>) -> Result<Container, StartError> {
        let cfg = &self.sim.cfg;
        let log_path = cfg
            .data_dir
            .join("logs")
            .join(format!("{}_{}_{}.log", self.ns, self.name, self.uid));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| StartError::Run(format!("opening {}: {e}", log_path.display())))?;
        let log2 = log
            .try_clone()
            .map_err(|e| StartError::Run(format!("log file: {e}")))?;
        let mut cmd = tokio::process::Command::new(&self.sim.stub_bin);
        cmd.env_clear()
            .envs(vars)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe; the stub dies with kubesim.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            StartError::Run(format!("spawning {}: {e}", self.sim.stub_bin.display()))
        })?;
        Container::process(child)
            .ok_or_else(|| StartError::Run("the stub exited before it was seen".into()))
    }

    /// SIGKILL the stub (the machine died, or a fault killed the container) and reap it.
    async fn kill_now(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill();
            let st = child.wait().await;
            self.child = None;
            // Keep the record of the container that died.
            self.on_exit(st);
            self.restart_at = None;
        }
        *self.killer.lock().expect("killer") = None;
        self.ready = false;
    }

    async fn sync_status(&mut self, pod: &Pod) {
        let container = match (&self.child, &self.child_started) {
            (Some(_), Some((t, _))) => ContainerView::Running { started_at: *t },
            _ => ContainerView::Waiting {
                reason: self.waiting.0.clone(),
                message: self.waiting.1.clone(),
            },
        };
        let input = PodStatusInput {
            pod,
            host_ip: self.node.spec.ip,
            pod_ip: self.sandbox.then_some(self.ip),
            container,
            ever_started: self.ever_started,
            restart_count: self.restart_count,
            last_state: self.last_state.clone(),
            container_id: self.child.as_ref().and(self.container_id.clone()),
            ready: self.ready && self.child.is_some() && !self.terminating,
            now: now(),
        };
        let desired = objects::pod_status(&input);
        let want = objects::desired_signature(&desired);
        let have = match &self.written {
            Some((wrv, sig)) if rv(pod) < *wrv => sig.clone(),
            _ => objects::status_signature(pod.status.as_ref()),
        };
        if want == have {
            self.applied = Some(self.fault);
            return;
        }
        let gate = self.node.gate.read().await;
        if !*gate {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.sim.client.clone(), &self.ns);
        // The uid in the patch is a precondition: never write onto a successor Pod.
        let patch = json!({"metadata": {"uid": self.uid}, "status": desired});
        match api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(p) => {
                self.written = Some((rv(&p), want));
                self.applied = Some(self.fault);
                self.retry_at = None;
            }
            Err(e) if pod_gone(&e) => {}
            Err(e) => {
                tracing::warn!(pod = %self.key(), error = %e, "status write failed; retrying");
                self.retry_at = Some(Instant::now() + API_RETRY);
            }
        }
        drop(gate);
    }

    /// Graceful deletion while the node is alive: SIGTERM, wait for exit (at most the
    /// grace period, then SIGKILL), then delete with grace 0 and a uid precondition.
    async fn terminate(&mut self, pod: &Pod) {
        if self.deleted {
            let _ = self.rx.changed().await;
            return;
        }
        if self.sim.fault_for(&self.ns, &self.name) == Some(FaultKind::HangTermination) {
            // Hung: no signal, the process runs on, the Pod is never finished; the node
            // stays Ready. Looked at again when the rule goes (or the Pod does).
            if self.ready {
                tracing::warn!(pod = %self.key(), "terminating: hung (fault injected)");
                self.ready = false;
                self.sync_status(pod).await;
                self.publish("Terminating");
            }
            let _ = self.rx.changed().await;
            return;
        }
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30)
            .max(0) as u64;
        if let Some(child) = &self.child {
            if !self.terminating {
                tracing::info!(pod = %self.key(), grace_s = grace, "terminating: SIGTERM to stub");
                child.killer().terminate();
                self.terminating = true;
                self.ready = false;
                self.sync_status(pod).await;
                self.publish("Terminating");
            }
            let started = Instant::now();
            let mut deadline = started + Duration::from_secs(grace);
            loop {
                let wake = tokio::select! {
                    st = wait_child(&mut self.child) => Wake::Exit(st),
                    _ = tokio::time::sleep_until(deadline) => Wake::Timer,
                    r = self.rx.changed() => { let _ = r; Wake::Nudge }
                };
                match wake {
                    Wake::Exit(st) => {
                        self.on_exit(st);
                        break;
                    }
                    Wake::Timer => {
                        tracing::warn!(pod = %self.key(), "grace period over: SIGKILL");
                        self.kill_now().await;
                        break;
                    }
                    _ => {
                        if !self.node.is_alive() {
                            return; // the machine died mid-drain; run() kills the stub
                        }
                        match self.sim.pod(&self.ns, &self.name, &self.uid) {
                            None => {
                                deadline = deadline.min(Instant::now() + Duration::from_secs(2))
                            }
                            Some(p) => {
                                if let Some(g) = p.metadata.deletion_grace_period_seconds {
                                    deadline = deadline
                                        .min(started + Duration::from_secs(g.max(0) as u64));
                                }
                            }
                        }
                    }
                }
            }
            self.restart_at = None;
            self.publish("Terminated");
        }
        if self.sim.pod(&self.ns, &self.name, &self.uid).is_none() {
            return;
        }
        let gate = self.node.gate.read().await;
        if !*gate {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.sim.client.clone(), &self.ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&self.name, &dp).await {
            Ok(_) => {
                tracing::info!(pod = %self.key(), "pod finalized (deleted with grace 0)");
                self.deleted = true;
            }
            Err(e) if pod_gone(&e) => self.deleted = true,
            Err(e) => {
                tracing::warn!(pod = %self.key(), error = %e, "final delete failed; retrying");
                drop(gate);
                tokio::time::sleep(API_RETRY).await;
                return;
            }
        }
        drop(gate);
        self.publish("Finalized");
    }

    /// The Pod is gone from the API (deleted for good, maybe force-deleted): stop the stub
    /// as a kubelet does (SIGTERM, 2 s, SIGKILL), free the IP, remove the worker.
    async fn gone(&mut self) {
        self.terminating = true;
        if let (Some(child), true) = (self.child.as_mut(), self.node.is_alive()) {
            child.killer().terminate();
            if tokio::time::timeout(Duration::from_secs(2), child.wait())
                .await
                .is_err()
            {
                child.start_kill();
                let _ = child.wait().await;
            }
        }
        self.kill_now().await;
        let mut inner = self.sim.inner.lock().expect("inner lock");
        inner.workers.remove(&self.uid);
        inner.pod_ips.release(self.ip);
        drop(inner);
        tracing::info!(pod = %self.key(), uid = %self.uid, "pod gone; worker done");
    }
}

enum StartError {
    Config(String),
    Run(String),
}

fn container_name(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

/// SIGKILLs the stub of the live Pod `namespace/name` (the container dies; the kubelet
/// restarts it with restartCount + 1). Returns the killed container's id (a pid, or an
/// in-process stub's id) once the worker has seen the exit.
pub(crate) async fn kill_stub(sim: &Arc<Sim>, namespace: &str, name: &str) -> Result<u32, String> {
    // The running container as its worker last set it (its id and its killer together).
    let running = {
        let inner = sim.inner.lock().expect("inner lock");
        inner
            .workers
            .values()
            .filter(|w| w.namespace == namespace && w.name == name)
            .find_map(|w| {
                let killer = w.killer.lock().expect("killer").clone()?;
                Some((w.killer.clone(), w.view.clone(), killer))
            })
    };
    let Some((slot, view, killer)) = running else {
        return Err(format!("no running stub for {namespace}/{name}"));
    };
    let pid = killer.id();
    killer.kill();
    // Dead once the worker has seen the exit (the slot) and published it (the view).
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = || {
        slot.lock().expect("killer").as_ref().map(Killer::id) != Some(pid)
            && view.lock().expect("view").stub_pid != Some(pid)
    };
    while !seen() {
        if Instant::now() > deadline {
            return Err(format!("stub {pid} of {namespace}/{name} did not die"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::warn!(pod = %format!("{namespace}/{name}"), pid, "stub SIGKILLed (fault injected)");
    Ok(pid)
}

/// Kills every stub of the workers `pick` selects and returns their views and how many
/// were running.
fn kill_where(
    sim: &Sim,
    pick: impl Fn(&WorkerHandle) -> bool,
) -> (Vec<Arc<Mutex<PodView>>>, usize) {
    let inner = sim.inner.lock().expect("inner lock");
    let mut killed = 0;
    let views = inner
        .workers
        .values()
        .filter(|w| pick(w))
        .map(|w| {
            if let Some(k) = w.killer.lock().expect("killer").as_ref() {
                k.kill();
                killed += 1;
            }
            w.view.clone()
        })
        .collect();
    (views, killed)
}

/// Kills every stub on a node (the machine is gone) and waits until all are reaped.
pub(crate) async fn kill_node(sim: &Arc<Sim>, node: &str) {
    let (views, _) = kill_where(sim, |w| w.node == node);
    let n = node.to_string();
    sim.nudge_where(|w| w.node == n);
    wait_no_stubs(&views, Duration::from_secs(10)).await;
}

async fn wait_no_stubs(views: &[Arc<Mutex<PodView>>], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if views
            .iter()
            .all(|v| v.lock().expect("view").stub_pid.is_none())
        {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills every stub (kubesim shutting down). Returns how many were running.
pub(crate) async fn kill_all(sim: &Arc<Sim>) -> usize {
    let (views, n) = kill_where(sim, |_| true);
    sim.nudge_where(|_| true);
    wait_no_stubs(&views, Duration::from_secs(3)).await;
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": code, "message": message
            }))
            .expect("a Status"),
        )
    }

    /// What kube-apiserver 1.36 answered to a status patch carrying an old uid once a
    /// successor Pod had the name.
    #[test]
    fn a_write_for_a_replaced_pod_is_not_retried() {
        let successor = status(
            422,
            "Pod \"f0828-2\" is invalid: metadata.uid: Invalid value: \"ecfc28cb\": field is immutable",
        );
        assert!(pod_gone(&successor));
        assert!(pod_gone(&status(404, "not found")));
        assert!(pod_gone(&status(
            409,
            "Precondition failed: UID in precondition"
        )));
        // Another invalid status is a real error, retried and logged.
        assert!(!pod_gone(&status(
            422,
            "Pod \"a\" is invalid: status.phase: Unsupported value"
        )));
        assert!(!pod_gone(&status(500, "etcd timeout")));
    }
}
