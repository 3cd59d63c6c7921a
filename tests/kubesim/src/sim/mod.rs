//! kubesim's runtime: simulated nodes (kubelets) and the disk provisioner, against a real
//! API server.
//!
//! Everything is driven by watches (reflector stores for Pods, claims, PVs and
//! StorageClasses); the only timers are node heartbeats, readiness probes and the back-off
//! of crash loops. Each Pod bound to one of our nodes gets a worker task (like a kubelet's
//! pod worker) that owns its stub process and writes its status.

pub mod api;
mod container;
mod kubelet;
mod node;
mod provisioner;
pub mod resource_metrics;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::{Notify, RwLock, watch};

use crate::control::{FaultKind, FaultRule, NodeView, PodView, StateView};
use crate::ipalloc::{Cidr, IpAllocator};
use crate::objects::{NodeSpec, glob_match, node_name};

/// Pods a node holds (`--node-pods`), as a kubelet's default `maxPods`; tests size their
/// nodes from it.
pub const DEFAULT_NODE_PODS: u32 = 110;

pub use container::StubRuntime;

/// kubesim: plays every node's kubelet and the disk provisioner against a real API server.
#[derive(Debug, Clone, Parser)]
#[command(name = "kubesim", version, about)]
pub struct Config {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Zones, one group of nodes each.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "us-east-1a,us-east-1b,us-east-1c"
    )]
    pub zones: Vec<String>,
    #[arg(long, default_value_t = 2)]
    pub nodes_per_zone: u32,
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// Node names are `<prefix>-<zone>-<index>`.
    #[arg(long, default_value = "sim")]
    pub node_prefix: String,
    /// Provisioner name StorageClasses must name for kubesim to provision their claims.
    #[arg(long, default_value = "kubesim.celld.dev/disk")]
    pub provisioner: String,
    /// Control API listen address.
    #[arg(long, default_value = "127.0.0.1:7690")]
    pub control_addr: SocketAddr,
    /// Write the bound control address (`host:port`) to this file once listening.
    #[arg(long)]
    pub control_addr_file: Option<PathBuf>,
    /// Pod IPs, on loopback. 127.0.0.1 is never handed out.
    #[arg(long, default_value = "127.20.0.0/16")]
    pub pod_cidr: Cidr,
    /// Node (host) IPs, on loopback.
    #[arg(long, default_value = "127.19.0.0/24")]
    pub node_cidr: Cidr,
    /// Stubs answer health 503 for this long after they start (first-readiness gate).
    #[arg(long, default_value_t = 0)]
    pub readiness_delay_ms: u64,
    /// Seconds between node Lease renewals (the node lifecycle controller's heartbeat).
    #[arg(long, default_value_t = 2)]
    pub lease_seconds: u64,
    /// Seconds between node status reports while nothing changed (the kubelet's
    /// `nodeStatusReportFrequency`, 5 minutes): the Lease is the heartbeat, so, as on a
    /// real cluster, a Node object changes rarely and its watchers get few events.
    #[arg(long, default_value_t = 300)]
    pub node_status_report_seconds: u64,
    /// `leaseDurationSeconds` written into node Leases.
    #[arg(long, default_value_t = 40)]
    pub lease_duration_seconds: i32,
    /// Readiness probe period for Pods without a readinessProbe.
    #[arg(long, default_value_t = 2)]
    pub probe_period_seconds: u32,
    /// First back-off of a crashing container (doubles up to 8x), and the pace of injected
    /// crash loops and image-pull back-offs.
    #[arg(long, default_value_t = 5)]
    pub crash_backoff_seconds: u64,
    /// Cap on a stub's drain time after SIGTERM (celld drains CELLD_SHUTDOWN_TOTAL_MS).
    #[arg(long, default_value_t = 3000)]
    pub stub_max_drain_ms: u64,
    /// How the Pods' stubs run: `process` (one `celld-stub` process each, with its own
    /// pid and log file) or `in-process` (a task inside kubesim each: the same stub, for
    /// scale runs where thousands of processes would take the machine's cores).
    #[arg(long, value_enum, default_value_t = StubRuntime::Process)]
    pub stubs: StubRuntime,
    /// The celld-stub binary (default: `celld-stub` next to this executable).
    #[arg(long)]
    pub stub_bin: Option<PathBuf>,
    /// Root of hostPath volumes and stub logs.
    #[arg(long, default_value = "/tmp/kubesim")]
    pub data_dir: PathBuf,
    #[arg(long, default_value = "8")]
    pub node_cpu: String,
    #[arg(long, default_value = "32Gi")]
    pub node_memory: String,
    #[arg(long, default_value_t = DEFAULT_NODE_PODS)]
    pub node_pods: u32,
    /// Delete Nodes registered by an earlier kubesim with the same prefix that are not in
    /// this configuration.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub prune_nodes: bool,
    /// Port of each node's kubelet resource-metrics endpoint (`/metrics/resource`, on the
    /// node's IP; the port the Node advertises in `daemonEndpoints`); 0 turns it off.
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,
}

impl Config {
    /// The nodes this configuration describes, in order.
    pub fn node_specs(&self) -> Result<Vec<NodeSpec>> {
        let mut out = Vec::new();
        let mut ips = IpAllocator::new(self.node_cidr)?;
        for zone in &self.zones {
            for i in 0..self.nodes_per_zone {
                out.push(NodeSpec {
                    name: node_name(&self.node_prefix, zone, i),
                    zone: zone.clone(),
                    region: self.region.clone(),
                    ip: ips.allocate().context("node CIDR too small")?,
                    prefix: self.node_prefix.clone(),
                    cpu: self.node_cpu.clone(),
                    memory: self.node_memory.clone(),
                    pods: self.node_pods,
                });
            }
        }
        Ok(out)
    }

    pub fn stub_path(&self) -> Result<PathBuf> {
        if let Some(p) = &self.stub_bin {
            return Ok(p.clone());
        }
        let exe = std::env::current_exe()?;
        let p = exe.with_file_name("celld-stub");
        anyhow::ensure!(
            p.exists(),
            "celld-stub not found next to {} (use --stub-bin)",
            exe.display()
        );
        Ok(p)
    }
}

/// One simulated machine.
pub(crate) struct SimNode {
    pub spec: NodeSpec,
    /// Alive flag. Readers (heartbeats, status writes, deletes) hold the read lock during
    /// their API call, so a stop (write lock) returns only once no write is in flight.
    pub gate: RwLock<bool>,
    pub alive: AtomicBool,
    /// Stopped with `keepStubs`: only the kubelet died; the stubs run on as zombies.
    pub keep_stubs: AtomicBool,
    pub uid: Mutex<Option<String>>,
    pub ready_since: Mutex<k8s_openapi::jiff::Timestamp>,
    pub boot_id: Mutex<String>,
}

impl SimNode {
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}

/// What a Pod worker publishes for `/state` and for the control API's waits.
#[derive(Debug, Clone)]
pub(crate) struct WorkerHandle {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub nudge: watch::Sender<u64>,
    pub view: Arc<Mutex<PodView>>,
    /// Stops the running container from outside the worker (set while one runs).
    pub killer: Arc<Mutex<Option<container::Killer>>>,
}

pub(crate) struct Inner {
    pub workers: HashMap<String, WorkerHandle>,
    pub pod_ips: IpAllocator,
    pub faults: Vec<FaultRule>,
    pub next_fault_id: u64,
}

pub struct Sim {
    pub(crate) cfg: Config,
    pub(crate) client: Client,
    pub(crate) nodes: BTreeMap<String, Arc<SimNode>>,
    pub(crate) pods: Store<Pod>,
    pub(crate) claims: Store<PersistentVolumeClaim>,
    pub(crate) volumes: Store<PersistentVolume>,
    pub(crate) classes: Store<StorageClass>,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) provisioned: AtomicU64,
    pub(crate) reclaimed: AtomicU64,
    pub(crate) provision_wake: Notify,
    pub(crate) stub_bin: PathBuf,
    pub(crate) http: crate::http::HttpClient,
    pub(crate) shutting_down: AtomicBool,
    /// Loads tests set for the resource-metrics endpoint.
    pub(crate) loads: resource_metrics::Loads,
}

impl Sim {
    pub(crate) fn node(&self, name: &str) -> Option<&Arc<SimNode>> {
        self.nodes.get(name)
    }

    pub(crate) fn pod(&self, namespace: &str, name: &str, uid: &str) -> Option<Arc<Pod>> {
        self.pods
            .get(&ObjectRef::new(name).within(namespace))
            .filter(|p| p.metadata.uid.as_deref() == Some(uid))
    }

    /// The fault in force for a Pod: the latest matching rule.
    pub(crate) fn fault_for(&self, namespace: &str, name: &str) -> Option<FaultKind> {
        let inner = self.inner.lock().expect("inner lock");
        inner
            .faults
            .iter()
            .rev()
            .find(|r| {
                r.namespace.as_deref().is_none_or(|ns| ns == namespace) && glob_match(&r.pod, name)
            })
            .map(|r| r.fault)
    }

    pub(crate) fn nudge_where(&self, pred: impl Fn(&WorkerHandle) -> bool) {
        let inner = self.inner.lock().expect("inner lock");
        for w in inner.workers.values().filter(|w| pred(w)) {
            w.nudge.send_modify(|n| *n += 1);
        }
    }

    pub fn state(&self) -> StateView {
        let nodes = self
            .nodes
            .values()
            .map(|n| NodeView {
                name: n.spec.name.clone(),
                zone: n.spec.zone.clone(),
                ip: n.spec.ip.to_string(),
                alive: n.is_alive(),
            })
            .collect();
        let inner = self.inner.lock().expect("inner lock");
        let mut pods: Vec<PodView> = inner
            .workers
            .values()
            .map(|w| w.view.lock().expect("view lock").clone())
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));
        StateView {
            nodes,
            pods,
            faults: inner.faults.clone(),
            provisioned: self.provisioned.load(Ordering::SeqCst),
            reclaimed: self.reclaimed.load(Ordering::SeqCst),
        }
    }
}

async fn client_for(cfg: &Config) -> Result<Client> {
    let config = match &cfg.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// Runs kubesim until SIGTERM/SIGINT: registers nodes, starts heartbeats, watches, Pod
/// workers, the provisioner and the control API. On shutdown every stub is killed and the
/// cluster is left as it is.
pub async fn run(cfg: Config) -> Result<()> {
    raise_open_files(cfg.stubs);
    let client = client_for(&cfg).await?;
    let stub_bin = cfg.stub_path()?;
    std::fs::create_dir_all(cfg.data_dir.join("logs"))
        .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
    let specs = cfg.node_specs()?;
    let nodes: BTreeMap<String, Arc<SimNode>> = specs
        .into_iter()
        .map(|spec| {
            let now = k8s_openapi::jiff::Timestamp::now();
            (
                spec.name.clone(),
                Arc::new(SimNode {
                    spec,
                    gate: RwLock::new(true),
                    alive: AtomicBool::new(true),
                    keep_stubs: AtomicBool::new(false),
                    uid: Mutex::new(None),
                    ready_since: Mutex::new(now),
                    boot_id: Mutex::new(format!("{:032x}", rand::random::<u128>())),
                }),
            )
        })
        .collect();

    let (pods, pods_w) = reflector::store::<Pod>();
    let (claims, claims_w) = reflector::store::<PersistentVolumeClaim>();
    let (volumes, volumes_w) = reflector::store::<PersistentVolume>();
    let (classes, classes_w) = reflector::store::<StorageClass>();

    let sim = Arc::new(Sim {
        inner: Mutex::new(Inner {
            workers: HashMap::new(),
            pod_ips: IpAllocator::new(cfg.pod_cidr)?,
            faults: Vec::new(),
            next_fault_id: 1,
        }),
        cfg: cfg.clone(),
        client: client.clone(),
        nodes,
        pods,
        claims,
        volumes,
        classes,
        provisioned: AtomicU64::new(0),
        reclaimed: AtomicU64::new(0),
        provision_wake: Notify::new(),
        stub_bin,
        http: crate::http::HttpClient::new(),
        shutting_down: AtomicBool::new(false),
        loads: resource_metrics::Loads::default(),
    });

    node::register_all(&sim).await?;
    tracing::info!(
        nodes = sim.nodes.len(),
        zones = ?cfg.zones,
        pod_cidr = %cfg.pod_cidr,
        "nodes registered"
    );
    let mut tasks = tokio::task::JoinSet::new();
    let heartbeats = node::spawn_heartbeats(sim.clone())?;
    tasks.spawn(async move {
        let why = heartbeats
            .await
            .unwrap_or_else(|_| "the heartbeat thread panicked".into());
        tracing::error!("{why}");
    });

    // Watches. Pods: only those bound to some node; we keep ours.
    let pod_stream = reflector::reflector(
        pods_w,
        watcher(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().fields("spec.nodeName!="),
        ),
    )
    .default_backoff();
    tasks.spawn(kubelet::dispatch(sim.clone(), pod_stream));

    let claim_stream = reflector::reflector(
        claims_w,
        watcher(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            Default::default(),
        ),
    )
    .default_backoff();
    let sim_c = sim.clone();
    tasks.spawn(async move {
        futures::pin_mut!(claim_stream);
        while let Some(ev) = claim_stream.next().await {
            match ev {
                Ok(
                    watcher::Event::Apply(c)
                    | watcher::Event::Delete(c)
                    | watcher::Event::InitApply(c),
                ) => {
                    let ns = c.metadata.namespace.clone().unwrap_or_default();
                    sim_c.nudge_where(|w| w.namespace == ns);
                    sim_c.provision_wake.notify_one();
                }
                Ok(watcher::Event::InitDone) => {
                    sim_c.nudge_where(|_| true);
                    sim_c.provision_wake.notify_one();
                }
                Ok(watcher::Event::Init) => {}
                Err(e) => tracing::warn!(error = %e, "claim watch"),
            }
        }
    });
    for stream in [
        reflector::reflector(
            volumes_w,
            watcher(
                Api::<PersistentVolume>::all(client.clone()),
                Default::default(),
            ),
        )
        .default_backoff()
        .map(|e| e.map(|_| ()))
        .boxed(),
        reflector::reflector(
            classes_w,
            watcher(Api::<StorageClass>::all(client.clone()), Default::default()),
        )
        .default_backoff()
        .map(|e| e.map(|_| ()))
        .boxed(),
    ] {
        let sim_v = sim.clone();
        tasks.spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(()) => sim_v.provision_wake.notify_one(),
                    Err(e) => tracing::warn!(error = %e, "volume/class watch"),
                }
            }
        });
    }
    tasks.spawn(provisioner::run(sim.clone()));

    if cfg.kubelet_port != 0 {
        resource_metrics::serve_all(sim.clone(), cfg.kubelet_port).await;
    }
    let listener = crate::http::bind(cfg.control_addr).await?;
    let bound = listener.local_addr()?;
    if let Some(path) = &cfg.control_addr_file {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bound.to_string())?;
        std::fs::rename(&tmp, path)?;
    }
    tracing::info!(addr = %bound, "control API listening");
    let (stop_tx, stop_rx) = watch::channel(false);
    let sim_a = sim.clone();
    let mut stop_rx_api = stop_rx.clone();
    tasks.spawn(crate::http::serve(
        listener,
        move |req| {
            let sim = sim_a.clone();
            async move { api::handle(sim, req).await }
        },
        async move {
            let _ = stop_rx_api.wait_for(|s| *s).await;
        },
    ));

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        r = tasks.join_next() => tracing::error!(?r, "a kubesim task ended unexpectedly"),
    }
    sim.shutting_down.store(true, Ordering::SeqCst);
    let _ = stop_tx.send(true);
    // Kill every stub; the cluster state is left as it is.
    let killed = kubelet::kill_all(&sim).await;
    tasks.abort_all();
    tracing::info!(
        stubs_killed = killed,
        provisioned = sim.provisioned.load(Ordering::SeqCst),
        reclaimed = sim.reclaimed.load(Ordering::SeqCst),
        "kubesim stopped"
    );
    Ok(())
}

/// Raises the soft limit on open files to the hard one. In-process stubs hold their
/// listeners (two per Pod) and connections in kubesim itself, so the common soft limit of
/// 1,024 would end at a few hundred Pods, each further stub failing to bind.
fn raise_open_files(stubs: StubRuntime) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0
        }
    };
    if raised {
        tracing::info!(open_files = lim.rlim_cur, ?stubs, "open-file limit");
    } else {
        tracing::warn!(error = %std::io::Error::last_os_error(), ?stubs, "could not raise the open-file limit");
    }
}

/// Time helper for modules.
pub(crate) fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

pub(crate) const API_RETRY: Duration = Duration::from_millis(500);
