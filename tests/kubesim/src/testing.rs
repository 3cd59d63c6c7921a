//! Helpers for end-to-end tests against the real control plane.
//!
//! The rule of this project: **no end-to-end test skips silently.** Call [`e2e_cluster`]
//! first. If the cluster answers, the test runs. If it does not: with `CELLD_E2E=1` the
//! test fails; without it, a loud notice is printed and the test returns (a plain unit-test
//! run on a machine without a cluster).
//!
//! ```no_run
//! # async fn t() -> anyhow::Result<()> {
//! use kubesim::testing::*;
//! let Some(cluster) = e2e_cluster("my_test").await else { return Ok(()) };
//! let lock = cluster.lock("my_test", Sharing::Shared)?; // a slot of its own
//! let sim = KubeSim::spawn(&cluster, KubeSimOptions::for_slot(&lock.slot)).await?;
//! let state = sim.control.state().await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

use crate::control::ControlClient;

/// Root of the workspace (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("workspace root")
        .to_path_buf()
}

/// Kubeconfig of the test cluster: `$CELLD_KUBECONFIG`, else
/// `tests/.cluster/run/kubeconfig` (written by `tests/controlplane/start.sh`).
pub fn kubeconfig_path() -> PathBuf {
    std::env::var_os("CELLD_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("tests/.cluster/run/kubeconfig"))
}

/// Whether `CELLD_E2E=1` demands that end-to-end tests run.
pub fn e2e_required() -> bool {
    std::env::var("CELLD_E2E").is_ok_and(|v| v == "1")
}

/// A reachable test cluster.
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    /// Takes this test's share of the cluster and a [`Slot`] of its own: hold the guard
    /// for the whole test.
    ///
    /// Most tests share the cluster: each has its own slot (node names, loopback ranges,
    /// zones) and its own namespaces, so several run at once. A test that cannot share
    /// (it stops a control-plane component, changes what every test relies on, or
    /// measures cost) passes [`Sharing::Alone`] with the reason; it waits until the
    /// tests running now finish, and tests that start later wait for it. The lock is fair
    /// to a waiting alone test: once it waits, no new test starts before it.
    ///
    /// File locks in the temp dir, one set per cluster (kubeconfig path), so they work
    /// across test binaries and processes, and independent clusters don't serialize.
    pub fn lock(&self, test: &str, sharing: Sharing) -> Result<ClusterLock> {
        let key =
            std::fs::canonicalize(&self.kubeconfig).unwrap_or_else(|_| self.kubeconfig.clone());
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.to_string_lossy().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let base = std::env::temp_dir().join(format!("celld-fleet-e2e-{h:016x}"));
        // A group is taken first, so that a test waiting for its group holds nothing an
        // alone test waits for.
        let group = match sharing {
            Sharing::Group(name) => {
                let f = lock_file(&base.with_extension(format!("group-{name}")))?;
                flock(&f, libc::LOCK_EX)?;
                Some(f)
            }
            _ => None,
        };
        // A waiting alone test holds the gate, so tests that come after it queue behind
        // it instead of overtaking it through the shared lock forever.
        let gate = lock_file(&base.with_extension("gate"))?;
        flock(&gate, libc::LOCK_EX)?;
        let main = lock_file(&base.with_extension("lock"))?;
        match sharing {
            Sharing::Shared | Sharing::Group(_) => flock(&main, libc::LOCK_SH)?,
            Sharing::Alone(why) => {
                flock(&main, libc::LOCK_EX)?;
                // The runner (scripts/run-tests.py) reads this to start alone tests
                // first next time.
                eprintln!("{ALONE_MARKER} {test}: {why}");
            }
        }
        drop(gate);
        let slot = Slot::take()?;
        Ok(ClusterLock {
            _main: main,
            _group: group,
            slot,
        })
    }
}

/// Printed by a test that holds the cluster alone.
pub const ALONE_MARKER: &str = "[e2e-lock] alone:";

/// How a test uses the shared cluster ([`Cluster::lock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Beside other tests, each in its own slot and namespaces.
    Shared,
    /// Beside other tests, but one at a time among the tests of the named group: they
    /// use the same fixed names (the golden examples' namespaces and reservations).
    Group(&'static str),
    /// No other test on the cluster meanwhile; the reason is printed.
    Alone(&'static str),
}

/// Held while a test uses the cluster; released on drop.
pub struct ClusterLock {
    _main: std::fs::File,
    _group: Option<std::fs::File>,
    /// The test's own names and address ranges.
    pub slot: Slot,
}

/// What keeps tests that run at once apart: a small number, unique on this machine while
/// held, from which a test's kubesim takes its node names, loopback ranges and zones.
/// Machine-wide (not per cluster): two clusters on one machine share the loopback.
pub struct Slot {
    /// 0..[`Slot::COUNT`].
    pub index: u8,
    _file: std::fs::File,
}

impl Slot {
    /// Slots on one machine: more tests than this at once wait for one.
    pub const COUNT: u8 = 32;

    /// The first free slot; waits (polling) while all are taken.
    pub fn take() -> Result<Slot> {
        loop {
            for index in 0..Slot::COUNT {
                let path = std::env::temp_dir().join(format!("celld-fleet-e2e-slot-{index}.lock"));
                let file = lock_file(&path)?;
                // SAFETY: flock on a file descriptor we own.
                if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                    return Ok(Slot { index, _file: file });
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Node names start with this (`s<index>`); kubesim labels its Nodes with it.
    pub fn node_prefix(&self) -> String {
        format!("s{}", self.index)
    }

    /// The region of this slot's zones: `us-west-<index + 1>` (never kubesim's default
    /// `us-east-1`, so nodes of a kubesim started with the defaults never share a zone
    /// with a slot's).
    pub fn region(&self) -> String {
        format!("us-west-{}", u32::from(self.index) + 1)
    }

    /// Three zones of [`Slot::region`], named like AWS zones (`us-west-1a`): Pods of a
    /// fleet placed in them can only land on this slot's nodes, and the node lifecycle
    /// controller judges each slot's zones apart (its disruption modes and eviction rate
    /// are per zone).
    pub fn zones(&self) -> [String; 3] {
        let r = self.region();
        [format!("{r}a"), format!("{r}b"), format!("{r}c")]
    }

    /// Loopback range of this slot's node IPs: `127.19.<index>.0/24`.
    pub fn node_cidr(&self) -> String {
        format!("127.19.{}.0/24", self.index)
    }

    /// Loopback range of this slot's Pod IPs: `127.<20 + index>.0.0/16`.
    pub fn pod_cidr(&self) -> String {
        format!("127.{}.0.0/16", 20 + u32::from(self.index))
    }
}

fn lock_file(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

fn flock(file: &std::fs::File, op: i32) -> Result<()> {
    // SAFETY: flock on a file descriptor we own; blocks until the lock is ours.
    if unsafe { libc::flock(file.as_raw_fd(), op) } != 0 {
        bail!("flock: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// A kube client for a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Whether the cluster answers `/readyz`, and why not.
pub async fn probe_cluster(path: &Path) -> Result<Cluster> {
    if !path.exists() {
        bail!(
            "{} does not exist (is tests/controlplane/start.sh running?)",
            path.display()
        );
    }
    let client = client_from_kubeconfig(path).await?;
    let req = http_req("/readyz")?;
    let text = tokio::time::timeout(Duration::from_secs(10), client.request_text(req))
        .await
        .map_err(|_| anyhow!("/readyz timed out"))?
        .context("GET /readyz")?;
    if text.trim() != "ok" {
        bail!("/readyz answered {text:?}");
    }
    Ok(Cluster {
        client,
        kubeconfig: path.to_path_buf(),
    })
}

fn http_req(path: &str) -> Result<hyper::Request<Vec<u8>>> {
    Ok(hyper::Request::get(path).body(Vec::new())?)
}

/// The gate every e2e test starts with (see the module docs). Returns None only when the
/// cluster is unreachable and `CELLD_E2E` is not `1`, after printing a loud notice.
pub async fn e2e_cluster(test: &str) -> Option<Cluster> {
    let path = kubeconfig_path();
    match probe_cluster(&path).await {
        Ok(c) => Some(c),
        Err(e) if e2e_required() => {
            panic!("CELLD_E2E=1 but the test cluster is unreachable for {test}: {e:#}")
        }
        Err(e) => {
            let bar = "!".repeat(78);
            let banner = format!(
                "\n{bar}\n!! E2E TEST NOT RUN: {test}\n!! no reachable cluster: {e:#}\n!! \
                 start tests/controlplane/start.sh, or set CELLD_E2E=1 to make this a failure\n{bar}\n\n"
            );
            // Straight to the stderr handle: libtest's output capture only catches the
            // print macros, and this notice must be seen.
            use std::io::Write;
            let _ = std::io::stderr().write_all(banner.as_bytes());
            None
        }
    }
}

/// Polls `f` every 250 ms until it yields `Some`, failing after `timeout` with `what` and
/// the last error `f` returned.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err: Option<anyhow::Error> = None;
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() >= deadline {
            return Err(match last_err {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The API server's clock as it stamps objects (whole seconds, truncated): the
/// creationTimestamp it gives a ConfigMap created in `ns` with server-side dry run
/// (nothing is stored). Tests wait on it where a rule compares API timestamps.
pub async fn server_now(client: &Client, ns: &str) -> Result<k8s_openapi::jiff::Timestamp> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cm: ConfigMap = serde_json::from_value(
        serde_json::json!({"metadata": {"generateName": "celld-e2e-clock-"}}),
    )?;
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&pp, &cm)
        .await?
        .metadata
        .creation_timestamp
        .map(|t| t.0)
        .context("a dry-run create without creationTimestamp")
}

/// A name unlikely to collide with an earlier run's: `<prefix>-<6 hex>`.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// Creates a namespace.
pub async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))?;
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Deletes a namespace and waits until it is gone (needs kubesim running to finalize its
/// Pods).
pub async fn delete_namespace(client: &Client, name: &str, timeout: Duration) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    wait_for(&format!("namespace {name} to be deleted"), timeout, || {
        let api = api.clone();
        async move { Ok(api.get_opt(name).await?.is_none().then_some(())) }
    })
    .await
}

/// Path of a binary built by this workspace: `$<ENV>` if set, else next to the running
/// test executable's directory (`target/<profile>/<name>`).
pub fn workspace_bin(name: &str, env: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    for dir in exe.ancestors().skip(1).take(3) {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "{name} not found near {} (run `cargo build -p kubesim --bins` first, or set {env})",
        exe.display()
    )
}

/// Options for [`KubeSim::spawn`]; `extra_args` are passed to kubesim as they are.
#[derive(Debug, Clone)]
pub struct KubeSimOptions {
    pub zones: Vec<String>,
    pub nodes_per_zone: u32,
    /// Node names are `<node_prefix>-<zone>-<i>`.
    pub node_prefix: String,
    /// The nodes' region label.
    pub region: String,
    /// Loopback ranges of node and Pod IPs.
    pub node_cidr: String,
    pub pod_cidr: String,
    pub lease_seconds: u64,
    pub crash_backoff_seconds: u64,
    pub extra_args: Vec<String>,
    /// kubesim binary; default: `$KUBESIM_BIN` or `target/<profile>/kubesim`.
    pub kubesim_bin: Option<PathBuf>,
    /// celld-stub binary; default: `$CELLD_STUB_BIN` or next to kubesim.
    pub stub_bin: Option<PathBuf>,
    /// How long to wait for every node to be Ready in the API.
    pub ready_timeout: Duration,
}

impl Default for KubeSimOptions {
    fn default() -> Self {
        Self {
            zones: vec![
                "us-east-1a".into(),
                "us-east-1b".into(),
                "us-east-1c".into(),
            ],
            nodes_per_zone: 2,
            node_prefix: "sim".into(),
            region: "us-east-1".into(),
            node_cidr: "127.19.0.0/24".into(),
            pod_cidr: "127.20.0.0/16".into(),
            lease_seconds: 2,
            crash_backoff_seconds: 3,
            extra_args: Vec::new(),
            kubesim_bin: None,
            stub_bin: None,
            ready_timeout: Duration::from_secs(60),
        }
    }
}

impl KubeSimOptions {
    /// The defaults, with the names and ranges of `slot` ([`Slot`]): what a test that
    /// shares the cluster runs.
    pub fn for_slot(slot: &Slot) -> Self {
        let prefix = slot.node_prefix();
        Self {
            zones: slot.zones().to_vec(),
            node_prefix: prefix,
            region: slot.region(),
            node_cidr: slot.node_cidr(),
            pod_cidr: slot.pod_cidr(),
            ..Self::default()
        }
    }
}

/// A running kubesim child process. Dropping it sends SIGTERM (stubs die with it).
pub struct KubeSim {
    child: Option<Child>,
    pub control: ControlClient,
    pub dir: PathBuf,
    pub log: PathBuf,
    pub node_names: Vec<String>,
    /// Its zones.
    pub zones: Vec<String>,
}

impl KubeSim {
    /// Starts kubesim against `cluster` on a free control port, waits for its control API
    /// and for every node to be Ready in the API.
    pub async fn spawn(cluster: &Cluster, opts: KubeSimOptions) -> Result<KubeSim> {
        let bin = match &opts.kubesim_bin {
            Some(b) => b.clone(),
            None => workspace_bin("kubesim", "KUBESIM_BIN")?,
        };
        let stub = match &opts.stub_bin {
            Some(b) => b.clone(),
            None => match std::env::var_os("CELLD_STUB_BIN") {
                Some(p) => PathBuf::from(p),
                None => bin.with_file_name("celld-stub"),
            },
        };
        let dir = std::env::temp_dir().join(unique_name("kubesim-e2e"));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("kubesim.log");
        let addr_file = dir.join("control-addr");
        let logf = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&bin);
        cmd.arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .arg("--zones")
            .arg(opts.zones.join(","))
            .arg("--nodes-per-zone")
            .arg(opts.nodes_per_zone.to_string())
            .arg("--node-prefix")
            .arg(&opts.node_prefix)
            .arg("--region")
            .arg(&opts.region)
            .arg("--node-cidr")
            .arg(&opts.node_cidr)
            .arg("--pod-cidr")
            .arg(&opts.pod_cidr)
            .arg("--lease-seconds")
            .arg(opts.lease_seconds.to_string())
            .arg("--crash-backoff-seconds")
            .arg(opts.crash_backoff_seconds.to_string())
            .arg("--control-addr")
            .arg("127.0.0.1:0")
            .arg("--control-addr-file")
            .arg(&addr_file)
            .arg("--stub-bin")
            .arg(&stub)
            .arg("--data-dir")
            .arg(&dir)
            .args(&opts.extra_args)
            .env(
                "RUST_LOG",
                std::env::var("KUBESIM_LOG")
                    .unwrap_or_else(|_| "info,kube_client=warn,kube_runtime=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf);
        // SAFETY: prctl is async-signal-safe; kubesim dies with the test process.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let prefix = opts.node_prefix.as_str();
        let mut sim = KubeSim {
            child: Some(child),
            control: ControlClient::new("http://127.0.0.1:0"),
            dir,
            log,
            node_names: opts
                .zones
                .iter()
                .flat_map(|z| {
                    (0..opts.nodes_per_zone).map(move |i| crate::objects::node_name(prefix, z, i))
                })
                .collect(),
            zones: opts.zones.clone(),
        };
        let addr = wait_for("kubesim control address", Duration::from_secs(30), || {
            let exited = sim.exited();
            let addr_file = addr_file.clone();
            async move {
                if let Some(st) = exited {
                    bail!("kubesim exited early: {st}");
                }
                Ok(std::fs::read_to_string(&addr_file).ok())
            }
        })
        .await
        .map_err(|e| e.context(sim.log_tail(40)))?;
        sim.control = ControlClient::new(format!("http://{}", addr.trim()));
        wait_for("kubesim /healthz", Duration::from_secs(10), || {
            let c = sim.control.clone();
            async move { Ok(c.healthz().await.ok()) }
        })
        .await?;
        let nodes: Api<Node> = Api::all(cluster.client.clone());
        for name in sim.node_names.clone() {
            wait_for(&format!("node {name} Ready"), opts.ready_timeout, || {
                let nodes = nodes.clone();
                let name = name.clone();
                async move { Ok(node_ready(&nodes.get(&name).await?).then_some(())) }
            })
            .await
            .map_err(|e| e.context(sim.log_tail(40)))?;
        }
        Ok(sim)
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The last `n` lines of kubesim's log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(n);
        format!(
            "--- kubesim log ({}) ---\n{}",
            self.log.display(),
            lines[start..].join("\n")
        )
    }

    /// The log of a Pod's stub (all its restarts).
    pub fn stub_log(&self, namespace: &str, pod: &str) -> String {
        let mut out = String::new();
        if let Ok(rd) = std::fs::read_dir(self.dir.join("logs")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&format!("{namespace}_{pod}_")) {
                    out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
                }
            }
        }
        out
    }

    /// SIGTERM and wait (at most 10 s, then SIGKILL).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: kill(2) on our own child process.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a Node's Ready condition is True.
pub fn node_ready(node: &Node) -> bool {
    condition_status(
        node.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|c| {
                c.iter()
                    .map(|c| (c.type_.as_str(), c.status.as_str()))
                    .collect::<Vec<_>>()
            }),
        "Ready",
    ) == Some("True".into())
}

fn condition_status(conds: Option<Vec<(&str, &str)>>, ty: &str) -> Option<String> {
    conds?
        .into_iter()
        .find(|(t, _)| *t == ty)
        .map(|(_, s)| s.to_string())
}

/// Whether a Pod's Ready condition is True.
pub fn pod_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
