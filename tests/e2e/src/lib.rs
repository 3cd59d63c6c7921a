//! Shared helpers of the healer's end-to-end tests (`tests/e2e/tests/*.rs`).
//!
//! Every test: [`Env::start`] (cluster gate, cluster lock, the one-time install, a fresh
//! kubesim, a namespace of its own), then fleets rendered by `celld_gen` and applied the
//! way Argo CD applies them (server-side apply, field manager `argocd-controller`,
//! conflicts forced), then the real `celld-healer` binary ([`Env::healer`]) running with a
//! kubeconfig for its own ServiceAccount, bound to exactly the RBAC `celld-gen install`
//! renders (which a test compares with `celld_healer::runtime::rbac::RULES`), with
//! shortened delays. [`Env::finish`] prints
//! diagnostics when the test failed and cleans up.
//!
//! Binaries: [`ensure_built`] runs `cargo build -p celld-healer -p kubesim --bins` once per
//! test process (skipped with `CELLD_E2E_NO_BUILD=1`, or when `CELLD_HEALER_BIN`,
//! `KUBESIM_BIN` and `CELLD_STUB_BIN` name the binaries), because a test crate cannot
//! depend on another package's binary target.

pub mod gitops;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use celld_gen::api::CelldFleet;
use celld_gen::api::labels::{
    DELETION_ALLOWED, DELETION_ALLOWED_VALUE, HEALER_NAMESPACE, IDENTITY,
};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event as KEvent;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub use kubesim::testing::{
    Cluster, ClusterLock, KubeSim, KubeSimOptions, pod_ready, unique_name, wait_for,
};

/// Field manager Argo CD applies with.
pub const ARGO: &str = "argocd-controller";
/// Field manager of the test's own setup writes.
pub const SETUP: &str = "celld-e2e";
/// StorageClass kubesim provisions (WaitForFirstConsumer, zonal disks).
pub const STORAGE_CLASS: &str = "celld-e2e-disk";
/// kubesim's provisioner name.
pub const PROVISIONER: &str = "kubesim.celld.dev/disk";
/// The healer's ServiceAccount.
pub const HEALER_SA: &str = "celld-healer";
/// ServiceAccount fleet members run as.
pub const MEMBER_SA: &str = "celld";
/// kubesim's zones.
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// Termination grace of the test fleets (seconds).
pub const GRACE_S: i64 = 6;

/// Builds the binaries the tests run, once per process.
pub fn ensure_built() -> Result<()> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if std::env::var("CELLD_E2E_NO_BUILD").is_ok_and(|v| v == "1") {
                return Ok(());
            }
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let release = std::env::current_exe()
                .ok()
                .is_some_and(|p| p.components().any(|c| c.as_os_str() == "release"));
            let mut cmd = Command::new(cargo);
            cmd.current_dir(kubesim::testing::repo_root()).args([
                "build",
                "-q",
                "-p",
                "celld-healer",
                "-p",
                "kubesim",
                "-p",
                "celld-gen",
                "--bins",
            ]);
            if release {
                cmd.arg("--release");
            }
            let out = cmd
                .output()
                .map_err(|e| format!("running cargo build: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "cargo build -p celld-healer -p kubesim -p celld-gen --bins failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Path of the `celld-healer` binary.
pub fn healer_bin() -> Result<PathBuf> {
    kubesim::testing::workspace_bin("celld-healer", "CELLD_HEALER_BIN")
}

/// A random fleet identity (26 lowercase letters and digits, like `celld-gen init`).
pub fn new_identity() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..26)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// A free loopback port.
pub fn free_port() -> Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

/// One test's world.
pub struct Env {
    /// The test's name.
    pub test: String,
    /// Admin access.
    pub cluster: Cluster,
    /// Admin client.
    pub client: Client,
    /// kubesim.
    pub sim: KubeSim,
    /// The test's namespace.
    pub ns: String,
    /// Kubeconfig of the healer's ServiceAccount.
    pub healer_kubeconfig: PathBuf,
    /// Scratch directory (healer logs).
    pub dir: PathBuf,
    /// Healers started by this test (killed on drop).
    healers: Vec<Healer>,
    /// Namespaces made by [`Env::extra_namespace`], deleted with the test's own.
    extra_namespaces: Vec<String>,
    _lock: ClusterLock,
}

/// What [`Env::start`] varies.
#[derive(Clone, Debug)]
pub struct EnvOptions {
    /// Nodes per zone.
    pub nodes_per_zone: u32,
    /// Extra kubesim arguments.
    pub kubesim_args: Vec<String>,
}

impl Default for EnvOptions {
    fn default() -> Self {
        EnvOptions {
            nodes_per_zone: 2,
            // `CELLD_E2E_KUBESIM_ARGS` (whitespace-separated) lets two clusters with their
            // own kubesims share one machine, e.g. `--pod-cidr 127.21.0.0/16 --node-cidr
            // 127.18.0.0/24`.
            kubesim_args: std::env::var("CELLD_E2E_KUBESIM_ARGS")
                .map(|a| a.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
        }
    }
}

impl Env {
    /// Starts a test; `None` when the cluster is unreachable and `CELLD_E2E` is not `1`
    /// (after a loud notice).
    pub async fn start(test: &str) -> Result<Option<Env>> {
        Env::start_with(test, EnvOptions::default()).await
    }

    /// [`Env::start`] with options.
    pub async fn start_with(test: &str, opts: EnvOptions) -> Result<Option<Env>> {
        let Some(cluster) = kubesim::testing::e2e_cluster(test).await else {
            return Ok(None);
        };
        let t0 = Instant::now();
        ensure_built()?;
        let built = t0.elapsed();
        let lock = tokio::task::block_in_place(|| cluster.lock())?;
        let locked = t0.elapsed();
        let client = cluster.client.clone();
        install(&client)
            .await
            .context("installing CRDs, StorageClass and healer RBAC")?;
        let installed = t0.elapsed();
        let sim = KubeSim::spawn(
            &cluster,
            KubeSimOptions {
                nodes_per_zone: opts.nodes_per_zone,
                extra_args: opts.kubesim_args.clone(),
                ..KubeSimOptions::default()
            },
        )
        .await
        .context("starting kubesim")?;
        let ns = unique_name(&format!(
            "e2e-{}",
            test.replace('_', "-").chars().take(30).collect::<String>()
        ));
        fleet_namespace(&client, &ns).await?;
        let dir = std::env::temp_dir().join(unique_name(&format!("celld-e2e-{test}")));
        std::fs::create_dir_all(&dir)?;
        let healer_kubeconfig = dir.join("healer.kubeconfig");
        write_healer_kubeconfig(&cluster, &healer_kubeconfig).await?;
        eprintln!(
            "[{test}] namespace {ns}, scratch {}, set up in {:?} (built {built:?}, locked {locked:?}, installed {installed:?})",
            dir.display(),
            t0.elapsed()
        );
        Ok(Some(Env {
            test: test.to_string(),
            cluster,
            client,
            sim,
            ns,
            healer_kubeconfig,
            dir,
            healers: Vec::new(),
            extra_namespaces: Vec::new(),
            _lock: lock,
        }))
    }

    /// Starts a healer; it is killed when the test ends. Returns its index.
    pub fn healer(&mut self, opts: HealerOptions) -> Result<usize> {
        let h = Healer::spawn(self, opts)?;
        self.healers.push(h);
        Ok(self.healers.len() - 1)
    }

    /// A healer started by this test.
    pub fn h(&self, i: usize) -> &Healer {
        &self.healers[i]
    }

    /// A healer started by this test, to stop or kill it.
    pub fn h_mut(&mut self, i: usize) -> &mut Healer {
        &mut self.healers[i]
    }

    /// The default healer options for this test (namespace, lease name, short delays).
    pub fn healer_options(&self) -> HealerOptions {
        HealerOptions {
            namespace: Some(self.ns.clone()),
            kubeconfig: None,
            lease_namespace: None,
            lease_name: format!("celld-healer-{}", self.ns),
            identity: "healer-a".into(),
            replacement_delay: "20s".into(),
            force_delete_margin: "5s".into(),
            absorb_window: "10s".into(),
            lease_duration: "6s".into(),
            halt_after: None,
            extra: Vec::new(),
        }
    }

    /// Ends the test: on failure prints diagnostics; stops healers; deletes the namespace
    /// (protection released and fleet finalizers removed first, since no healer runs any
    /// more).
    pub async fn finish(mut self, result: Result<()>) -> Result<()> {
        if let Err(e) = &result {
            eprintln!(
                "\n===== {} FAILED: {e:#}\n{}",
                self.test,
                self.diagnostics().await
            );
        }
        for h in &mut self.healers {
            h.terminate();
        }
        let t = Instant::now();
        let cleanup = self.cleanup().await;
        match &cleanup {
            Err(e) => eprintln!("[{}] cleanup: {e:#}", self.test),
            Ok(()) => eprintln!("[{}] cleanup took {:?}", self.test, t.elapsed()),
        }
        result
    }

    /// Another namespace for this test's fleets (with the members' ServiceAccount),
    /// deleted when the test ends. Its name starts with the test's namespace.
    pub async fn extra_namespace(&mut self, suffix: &str) -> Result<String> {
        let ns = format!("{}-{suffix}", self.ns);
        fleet_namespace(&self.client, &ns).await?;
        self.extra_namespaces.push(ns.clone());
        Ok(ns)
    }

    async fn cleanup(&self) -> Result<()> {
        let mut first_err = None;
        for ns in self.extra_namespaces.iter().chain([&self.ns]) {
            if let Err(e) = self.cleanup_namespace(ns).await {
                eprintln!("[{}] cleanup of {ns}: {e:#}", self.test);
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    async fn cleanup_namespace(&self, ns: &str) -> Result<()> {
        // The install bundle's admission policies refuse deleting a protected fleet and
        // any fleet disk: release both, as an operator would, before the namespace goes.
        release_protection(&self.client, ns).await?;
        let fleets: Api<CelldFleet> = Api::namespaced(self.client.clone(), ns);
        for f in fleets.list(&ListParams::default()).await? {
            let _ = fleets
                .patch(
                    &f.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
            if let Some(r) = f.status.as_ref().and_then(|s| s.reservation.clone()) {
                let _ = reservations(&self.client)
                    .delete(&r, &DeleteParams::default())
                    .await;
            }
            let r = celld_gen::api::reservation_name(
                &f.spec.storage.bucket,
                f.spec.storage.prefix.as_deref(),
            );
            let _ = reservations(&self.client)
                .delete(&r, &DeleteParams::default())
                .await;
        }
        // Held Pods would keep the namespace alive.
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        for p in pods.list(&ListParams::default()).await? {
            if p.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
            {
                let _ = pods
                    .patch(
                        &p.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
        }
        // A namespace whose deletion was refused for a while is retried by the namespace
        // controller with a back-off of up to a minute.
        kubesim::testing::delete_namespace(&self.client, ns, Duration::from_secs(90)).await
    }

    /// Fleets, workloads, Pods, claims, Events and the healers' and kubesim's logs.
    pub async fn diagnostics(&self) -> String {
        let mut out = String::new();
        let c = &self.client;
        let ns = &self.ns;
        if let Ok(l) = Api::<CelldFleet>::namespaced(c.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            for f in l {
                let st = f.status.clone().unwrap_or_default();
                let ready = st.conditions.iter().find(|c| c.type_ == "Ready");
                let blocked = st.conditions.iter().find(|c| c.type_ == "Blocked");
                out += &format!(
                    "--- CelldFleet {} finalizers={:?} deleting={} desired={:?} applied={:?} ready={:?}\n    Ready={:?} Blocked={:?} reason={:?}: {}\n    members: {:?}\n",
                    f.name_any(),
                    f.metadata.finalizers,
                    f.metadata.deletion_timestamp.is_some(),
                    st.desired_members,
                    st.applied_members,
                    st.ready_members,
                    ready.map(|c| c.status.clone()),
                    blocked.map(|c| c.status.clone()),
                    ready.map(|c| c.reason.clone()),
                    ready.map(|c| c.message.clone()).unwrap_or_default(),
                    st.member_states
                        .iter()
                        .map(|m| format!(
                            "{}={}{}",
                            m.name,
                            m.state,
                            m.replace_at
                                .as_ref()
                                .map(|t| format!("(replace at {t})"))
                                .unwrap_or_default()
                        ))
                        .collect::<Vec<_>>()
                );
            }
        }
        if let Ok(l) = Api::<StatefulSet>::namespaced(c.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            for s in l {
                let spec = s.spec.as_ref().and_then(|s| s.replicas);
                let st = s.status.as_ref();
                out += &format!(
                    "--- StatefulSet {} replicas={spec:?} ready={:?} gen={:?} observed={:?}\n",
                    s.name_any(),
                    st.and_then(|s| s.ready_replicas),
                    s.metadata.generation,
                    st.and_then(|s| s.observed_generation)
                );
            }
        }
        if let Ok(l) = Api::<Deployment>::namespaced(c.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            for d in l {
                out += &format!(
                    "--- Deployment {} replicas={:?} ready={:?}\n",
                    d.name_any(),
                    d.spec.as_ref().and_then(|s| s.replicas),
                    d.status.as_ref().and_then(|s| s.ready_replicas)
                );
            }
        }
        if let Ok(l) = Api::<Pod>::namespaced(c.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            for p in l {
                out += &format!(
                    "--- Pod {} uid={} node={:?} phase={:?} ready={} deleting={:?} finalizers={:?}\n",
                    p.name_any(),
                    p.metadata.uid.clone().unwrap_or_default(),
                    p.spec.as_ref().and_then(|s| s.node_name.clone()),
                    p.status.as_ref().and_then(|s| s.phase.clone()),
                    pod_ready(&p),
                    p.metadata
                        .deletion_timestamp
                        .as_ref()
                        .map(|t| t.0.to_string()),
                    p.metadata.finalizers
                );
            }
        }
        if let Ok(l) = Api::<PersistentVolumeClaim>::namespaced(c.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            for p in l {
                out += &format!(
                    "--- Claim {} uid={} phase={:?} deleting={}\n",
                    p.name_any(),
                    p.metadata.uid.clone().unwrap_or_default(),
                    p.status.as_ref().and_then(|s| s.phase.clone()),
                    p.metadata.deletion_timestamp.is_some()
                );
            }
        }
        if let Ok(evs) = fleet_events(c, ns, None).await {
            out += "--- Events\n";
            for e in evs {
                out += &format!("{e}\n");
            }
        }
        for h in &self.healers {
            out += &format!(
                "--- healer {} log (tail)\n{}\n",
                h.identity,
                tail(&h.log_text(), 60)
            );
        }
        out += &self.sim.log_tail(40);
        out
    }

    /// Renders `fleet_yaml` (a fleet file) and applies every object as Argo CD would.
    pub async fn apply_fleet(&self, fleet_yaml: &str) -> Result<CelldFleet> {
        let fleet = load_fleet(fleet_yaml)?;
        apply_rendered(&self.client, &fleet, false).await?;
        Ok(fleet)
    }

    /// Client for the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for h in &mut self.healers {
            h.kill();
        }
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn reservations(client: &Client) -> Api<celld_gen::api::CelldBucketReservation> {
    Api::all(client.clone())
}

/// Creates a namespace for fleets, with the ServiceAccount their members run as.
async fn fleet_namespace(client: &Client, ns: &str) -> Result<()> {
    kubesim::testing::create_namespace(client, ns).await?;
    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": MEMBER_SA, "namespace": ns},
    }))?;
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await?;
    Ok(())
}

/// Lifts the install bundle's deletion guards in `ns`, as an operator who means it would:
/// `spec.deletionProtection: false` on every CelldFleet, and the
/// `fleet.celld.dev/deletion-allowed: "true"` mark on every claim carrying a fleet
/// identity. Afterwards the namespace (and its fleets and disks) can be deleted.
pub async fn release_protection(client: &Client, ns: &str) -> Result<()> {
    let fleets: Api<CelldFleet> = Api::namespaced(client.clone(), ns);
    for f in fleets.list(&ListParams::default()).await? {
        if f.spec.deletion_protection != Some(false) {
            fleets
                .patch(
                    &f.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"deletionProtection": false}})),
                )
                .await
                .with_context(|| format!("turning protection off on {}", f.name_any()))?;
        }
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for c in claims.list(&ListParams::default().labels(IDENTITY)).await? {
        allow_claim_deletion(&claims, &c.name_any()).await?;
    }
    Ok(())
}

/// Marks one fleet disk as deletable by hand (`fleet.celld.dev/deletion-allowed: "true"`),
/// what the disk-protection admission policy asks of an operator.
pub async fn allow_claim_deletion(claims: &Api<PersistentVolumeClaim>, name: &str) -> Result<()> {
    claims
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {DELETION_ALLOWED: DELETION_ALLOWED_VALUE}}}),
            ),
        )
        .await
        .with_context(|| format!("marking claim {name} deletable"))?;
    Ok(())
}

/// A fleet file for tests: `members` members over the three kubesim zones, short
/// shutdown and grace, small requests.
#[derive(Clone, Debug)]
pub struct FleetFile {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Identity.
    pub identity: String,
    /// `PersistentFleet` or `Bucket`.
    pub profile: &'static str,
    /// `spec.members`.
    pub members: i32,
    /// `Ordered` for a Bucket StatefulSet.
    pub bucket_workload: Option<&'static str>,
    /// `spec.deletionProtection` (None: left out, which means protected).
    pub deletion_protection: Option<bool>,
}

impl FleetFile {
    /// A PersistentFleet.
    pub fn persistent(ns: &str, name: &str, members: i32) -> FleetFile {
        FleetFile {
            namespace: ns.into(),
            name: name.into(),
            identity: new_identity(),
            profile: "PersistentFleet",
            members,
            bucket_workload: None,
            deletion_protection: None,
        }
    }

    /// A Bucket fleet on a Deployment.
    pub fn bucket(ns: &str, name: &str, members: i32) -> FleetFile {
        FleetFile {
            profile: "Bucket",
            ..FleetFile::persistent(ns, name, members)
        }
    }

    /// The same fleet with `spec.deletionProtection` set.
    pub fn protection(mut self, on: bool) -> FleetFile {
        self.deletion_protection = Some(on);
        self
    }

    /// The fleet file text.
    pub fn yaml(&self) -> String {
        let storage_class = if self.profile == "PersistentFleet" {
            format!("\n    storageClassName: {STORAGE_CLASS}\n    sizeGiB: 1")
        } else {
            String::new()
        };
        let bw = self
            .bucket_workload
            .map(|b| format!("\n  bucketWorkload: {b}"))
            .unwrap_or_default();
        let protection = self
            .deletion_protection
            .map(|p| format!("  deletionProtection: {p}\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: fleet.celld.dev/v1alpha1
kind: CelldFleet
metadata:
  name: {name}
  namespace: {ns}
spec:
  identity: {id}
  profile: {profile}{bw}
  runtimeImage: ghcr.io/ewhauser/celld@sha256:{digest}
  members: {members}
  serviceAccountName: {sa}
  storage:
    bucket: e2e-{ns}-{name}
    region: us-east-1{storage_class}
  placement:
    zones: [{z0}, {z1}, {z2}]
    mode: Strict
  execution:
    cpuRequest: 50m
    memoryRequest: 64Mi
    memoryLimit: 256Mi
  lifecycle:
    shutdownSeconds: 1
    terminationGraceSeconds: {grace}
{protection}",
            name = self.name,
            ns = self.namespace,
            id = self.identity,
            profile = self.profile,
            digest = "ab".repeat(32),
            members = self.members,
            sa = MEMBER_SA,
            z0 = ZONES[0],
            z1 = ZONES[1],
            z2 = ZONES[2],
            grace = GRACE_S,
        )
    }
}

/// Parses and validates a fleet file with the generator.
pub fn load_fleet(yaml: &str) -> Result<CelldFleet> {
    celld_gen::load::load_str(Path::new("e2e-fleet.yaml"), yaml).map_err(|d| {
        anyhow!(
            "invalid test fleet:\n{}",
            d.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

/// The rendered objects of a fleet, as JSON, in apply order.
pub fn rendered_objects(fleet: &CelldFleet) -> Result<Vec<Value>> {
    let r = celld_gen::render::render_fleet(fleet).map_err(|e| anyhow!("render: {e}"))?;
    r.objects
        .iter()
        .map(|o| serde_saphyr::from_str::<Value>(&o.yaml).map_err(|e| anyhow!("{}: {e}", o.file)))
        .collect()
}

/// Plural of the kinds the generator renders.
fn plural(kind: &str) -> Result<&'static str> {
    Ok(match kind {
        "CelldBucketReservation" => "celldbucketreservations",
        "CelldFleet" => "celldfleets",
        "NetworkPolicy" => "networkpolicies",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "Service" => "services",
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "HTTPRoute" => "httproutes",
        "Ingress" => "ingresses",
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "CustomResourceDefinition" => "customresourcedefinitions",
        "StorageClass" => "storageclasses",
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
        other => bail!("no plural known for kind {other}"),
    })
}

/// The `Api` for an object given as JSON.
pub fn dynamic_api(client: &Client, obj: &Value) -> Result<(Api<DynamicObject>, String)> {
    let api_version = obj["apiVersion"].as_str().context("apiVersion")?;
    let kind = obj["kind"].as_str().context("kind")?;
    let name = obj["metadata"]["name"]
        .as_str()
        .context("metadata.name")?
        .to_string();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural(kind)?);
    let api = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    Ok((api, name))
}

/// Server-side applies `obj` under `manager` (forced, as Argo CD does); with `dry_run`,
/// returns what the object would become.
pub async fn apply(
    client: &Client,
    obj: &Value,
    manager: &str,
    dry_run: bool,
) -> Result<DynamicObject> {
    let (api, name) = dynamic_api(client, obj)?;
    let mut pp = PatchParams::apply(manager).force();
    if dry_run {
        pp = pp.dry_run();
    }
    api.patch(&name, &pp, &Patch::Apply(obj))
        .await
        .with_context(|| format!("applying {} {name}", obj["kind"]))
}

/// Applies every rendered object of a fleet as Argo CD would.
pub async fn apply_rendered(
    client: &Client,
    fleet: &CelldFleet,
    dry_run: bool,
) -> Result<Vec<DynamicObject>> {
    let mut out = Vec::new();
    for o in rendered_objects(fleet)? {
        out.push(apply(client, &o, ARGO, dry_run).await?);
    }
    Ok(out)
}

/// The one-time (idempotent) install: the CRDs, the admission policies (fleet and disk
/// deletion protection) and the healer's namespace, ServiceAccount and RBAC exactly as
/// `celld-gen install` renders them (its Deployment, Service, PDB and NetworkPolicy are
/// left out: the tests run the healer binary themselves), and a StorageClass for kubesim's
/// provisioner.
pub async fn install(client: &Client) -> Result<()> {
    let bundle = install_bundle()?;
    for o in &bundle {
        apply(client, o, SETUP, false).await?;
    }
    let sc = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    });
    apply(client, &sc, SETUP, false).await?;
    start_at_zero_in_effect(client).await?;
    for crd in bundle
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
    {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        wait_for(&format!("CRD {name} established"), Duration::from_secs(30), || {
            let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
                Api::all(client.clone());
            let name = name.clone();
            async move {
                let c = api.get(&name).await?;
                Ok(c.status
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
                    .then_some(()))
            }
        })
        .await?;
    }
    // The policies are type-checked against the CRDs once the API server has seen them.
    for p in bundle
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
    {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        wait_for(
            &format!("ValidatingAdmissionPolicy {name} observed"),
            Duration::from_secs(30),
            || {
                let api: Api<
                    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
                > = Api::all(client.clone());
                let name = name.clone();
                async move {
                    let p = api.get(&name).await?;
                    let observed = p.status.as_ref().and_then(|s| s.observed_generation);
                    Ok((observed.is_some() && observed == p.metadata.generation).then_some(()))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// Waits until the API server enforces the start-at-zero admission policy (a new policy
/// takes a moment to load): a server-side dry-run create of a celld-gen StatefulSet must
/// come back with `replicas: 0`. Without this wait, the first test on a fresh cluster
/// could create its StatefulSet at the API default of 1.
async fn start_at_zero_in_effect(client: &Client) -> Result<()> {
    let probe: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "celld-e2e-start-probe", "namespace": HEALER_NAMESPACE,
                     "labels": {IDENTITY: "probe", celld_gen::api::labels::MANAGED_BY:
                                celld_gen::api::labels::MANAGED_BY_VALUE}},
        "spec": {"serviceName": "probe", "selector": {"matchLabels": {"probe": "x"}},
                 "template": {"metadata": {"labels": {"probe": "x"}},
                              "spec": {"containers": [{"name": "c", "image": "probe"}]}}},
    }))?;
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), HEALER_NAMESPACE);
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        "the start-at-zero admission policy in effect",
        Duration::from_secs(60),
        || {
            let (api, probe, pp) = (api.clone(), probe.clone(), pp.clone());
            async move {
                let made = api.create(&pp, &probe).await?;
                Ok((made.spec.and_then(|s| s.replicas) == Some(0)).then_some(()))
            }
        },
    )
    .await
}

/// Kinds of `celld-gen install --stdout` the tests apply.
const BUNDLE_KINDS: [&str; 11] = [
    "CustomResourceDefinition",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The CRDs, the admission policies and the healer's namespace, ServiceAccount and RBAC
/// from `celld-gen install --stdout`, in its order.
pub fn install_bundle() -> Result<Vec<Value>> {
    install_bundle_with(&[])
}

/// [`install_bundle`] of `celld-gen install --stdout <args>`.
pub fn install_bundle_with(args: &[&str]) -> Result<Vec<Value>> {
    let bin = kubesim::testing::workspace_bin("celld-gen", "CELLD_GEN_BIN")?;
    let out = Command::new(&bin)
        .args(["install", "--stdout"])
        .args(args)
        .output()
        .with_context(|| format!("running {} install --stdout", bin.display()))?;
    ensure!(
        out.status.success(),
        "celld-gen install --stdout failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let mut objects = Vec::new();
    for doc in text.split("\n---") {
        if doc
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            continue;
        }
        let v: Value = serde_saphyr::from_str(doc).context("a document of the install bundle")?;
        if v["kind"]
            .as_str()
            .is_some_and(|k| BUNDLE_KINDS.contains(&k))
        {
            objects.push(v);
        }
    }
    ensure!(
        objects.iter().any(|o| o["kind"] == "ClusterRole"),
        "the install bundle has no ClusterRole"
    );
    Ok(objects)
}

/// The healer's namespace, ServiceAccount and RBAC from the install bundle.
pub fn healer_rbac_objects() -> Vec<Value> {
    const KINDS: [&str; 6] = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    install_bundle()
        .unwrap_or_default()
        .into_iter()
        .filter(|o| o["kind"].as_str().is_some_and(|k| KINDS.contains(&k)))
        .collect()
}

/// Writes a kubeconfig for the healer's ServiceAccount, from a TokenRequest.
pub async fn write_healer_kubeconfig(cluster: &Cluster, path: &Path) -> Result<()> {
    write_sa_kubeconfig(cluster, HEALER_NAMESPACE, HEALER_SA, path).await
}

/// Writes a kubeconfig for ServiceAccount `ns/sa`, from a TokenRequest.
pub async fn write_sa_kubeconfig(cluster: &Cluster, ns: &str, sa: &str, path: &Path) -> Result<()> {
    let sas: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns);
    let tr: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 7200},
    }))?;
    let tr = sas
        .create_token_request(sa, &PostParams::default(), &tr)
        .await
        .with_context(|| format!("TokenRequest for ServiceAccount {ns}/{sa}"))?;
    let token = tr.status.context("TokenRequest without status")?.token;
    let admin = kube::config::Kubeconfig::read_from(&cluster.kubeconfig)?;
    let cl = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("admin kubeconfig has no cluster")?;
    let server = cl.server.context("no server")?;
    let ca = cl.certificate_authority_data.clone();
    let ca_file = cl.certificate_authority.clone();
    let mut cluster_entry = json!({"server": server});
    if let Some(ca) = ca {
        cluster_entry["certificate-authority-data"] = json!(ca);
    }
    if let Some(f) = ca_file {
        cluster_entry["certificate-authority"] = json!(f);
    }
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster_entry}],
        "users": [{"name": "celld-healer", "user": {"token": token}}],
        "contexts": [{"name": "healer", "context": {"cluster": "e2e", "user": "celld-healer"}}],
        "current-context": "healer",
    });
    std::fs::write(path, serde_json::to_string_pretty(&kc)?)?;
    Ok(())
}

/// Options of one healer process.
#[derive(Clone, Debug)]
pub struct HealerOptions {
    /// `--namespace` (None: every namespace; several comma-separated).
    pub namespace: Option<String>,
    /// The kubeconfig it runs with (None: the shared install's ServiceAccount).
    pub kubeconfig: Option<PathBuf>,
    /// `--lease-namespace` (None: the shared install's namespace).
    pub lease_namespace: Option<String>,
    /// `--lease-name`.
    pub lease_name: String,
    /// `--identity`.
    pub identity: String,
    /// `--member-replacement-delay`.
    pub replacement_delay: String,
    /// `--force-delete-margin`.
    pub force_delete_margin: String,
    /// `--absorb-window`.
    pub absorb_window: String,
    /// `--lease-duration`.
    pub lease_duration: String,
    /// `--test-halt-after`.
    pub halt_after: Option<String>,
    /// More arguments.
    pub extra: Vec<String>,
}

/// A running `celld-healer`.
pub struct Healer {
    child: Option<Child>,
    /// Its log file (text format).
    pub log: PathBuf,
    /// Its metrics address.
    pub metrics: SocketAddr,
    /// Its identity.
    pub identity: String,
}

impl Healer {
    fn spawn(env: &Env, o: HealerOptions) -> Result<Healer> {
        let bin = healer_bin()?;
        let metrics = free_port()?;
        let log = (1..)
            .map(|n| env.dir.join(format!("healer-{}-{n}.log", o.identity)))
            .find(|p| !p.exists())
            .expect("a free log name");
        let logf = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&bin);
        cmd.env(
            "KUBECONFIG",
            o.kubeconfig.as_ref().unwrap_or(&env.healer_kubeconfig),
        )
        .env(
            "RUST_LOG",
            std::env::var("HEALER_LOG").unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .env_remove("POD_NAME")
        .args(["--log-format", "text"])
        .args(["--metrics-addr", &metrics.to_string()])
        .args([
            "--lease-namespace",
            o.lease_namespace.as_deref().unwrap_or(HEALER_NAMESPACE),
        ])
        .args(["--lease-name", &o.lease_name])
        .args(["--lease-duration", &o.lease_duration])
        .args(["--identity", &o.identity])
        .args(["--member-replacement-delay", &o.replacement_delay])
        .args(["--force-delete-margin", &o.force_delete_margin])
        .args(["--absorb-window", &o.absorb_window])
        // A Lost claim is replaced only once it stayed Lost this long (default 1m).
        .args(["--lost-claim-confirmation", "10s"])
        .arg("--allow-short-delays")
        .args(&o.extra)
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf);
        if let Some(ns) = &o.namespace {
            cmd.args(["--namespace", ns]);
        }
        if let Some(h) = &o.halt_after {
            cmd.args(["--test-halt-after", h]);
        }
        // SAFETY: prctl is async-signal-safe; the healer dies with the test process.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        Ok(Healer {
            child: Some(child),
            log,
            metrics,
            identity: o.identity,
        })
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, no cleanup (as a crash or an OOM kill).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (at most 30 s, then SIGKILL); the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        if let Ok(pid) = i32::try_from(c.id()) {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) -> Result<()> {
        wait_for(&format!("healer log line {needle:?}"), timeout, || {
            let text = self.log_text();
            async move { Ok(text.contains(needle).then_some(())) }
        })
        .await
    }

    /// GET /metrics.
    pub async fn metrics_text(&self) -> Result<String> {
        let http = kubesim::http::HttpClient::new();
        Ok(http
            .get(
                &format!("http://{}/metrics", self.metrics),
                Duration::from_secs(5),
            )
            .await?
            .ok()?
            .text())
    }

    /// GET a path; the status code.
    pub async fn http_status(&self, path: &str) -> Result<u16> {
        let http = kubesim::http::HttpClient::new();
        Ok(http
            .get(
                &format!("http://{}{path}", self.metrics),
                Duration::from_secs(5),
            )
            .await?
            .status
            .as_u16())
    }

    /// Sum of every sample of a metric whose line starts with `prefix` (a name, or a
    /// name with the opening of its labels).
    pub async fn metric(&self, prefix: &str) -> Result<f64> {
        Ok(sum_metric(&self.metrics_text().await?, prefix))
    }

    /// Resident memory (KiB) from /proc.
    pub fn rss_kib(&self) -> Option<u64> {
        let pid = self.pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for Healer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sum of every sample whose line starts with `prefix`.
pub fn sum_metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Parsed `celld_healer_api_requests_total` samples: (verb, resource) -> count.
pub fn api_requests(text: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("celld_healer_api_requests_total{"))
    {
        let (labels, value) = l.rsplit_once(' ').unwrap_or((l, "0"));
        let get = |k: &str| {
            labels
                .split(&format!("{k}=\""))
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        out.insert((get("verb"), get("resource")), value.parse().unwrap_or(0.0));
    }
    out
}

/// One Event on a fleet, reduced.
#[derive(Clone, Debug)]
pub struct FleetEvent {
    /// The fleet.
    pub fleet: String,
    /// Normal / Warning.
    pub type_: String,
    /// Reason.
    pub reason: String,
    /// Action.
    pub action: String,
    /// Note.
    pub note: String,
    /// Event time.
    pub time: Option<k8s_openapi::jiff::Timestamp>,
    /// Series count (1 when not a series).
    pub count: i32,
}

impl std::fmt::Display for FleetEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {}/{} x{}: {}",
            self.time.map(|t| t.to_string()).unwrap_or_default(),
            self.fleet,
            self.type_,
            self.reason,
            self.action,
            self.count,
            self.note
        )
    }
}

/// Events regarding CelldFleets in `ns` (one fleet if named), oldest first.
pub async fn fleet_events(
    client: &Client,
    ns: &str,
    fleet: Option<&str>,
) -> Result<Vec<FleetEvent>> {
    let api: Api<KEvent> = Api::namespaced(client.clone(), ns);
    let mut out: Vec<FleetEvent> = api
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|e| {
            let r = e.regarding.as_ref()?;
            if r.kind.as_deref() != Some("CelldFleet") {
                return None;
            }
            let name = r.name.clone().unwrap_or_default();
            if fleet.is_some_and(|f| f != name) {
                return None;
            }
            Some(FleetEvent {
                fleet: name,
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                action: e.action.clone().unwrap_or_default(),
                note: e.note.clone().unwrap_or_default(),
                time: e.event_time.as_ref().map(|t| t.0),
                count: e.series.as_ref().map_or(1, |s| s.count),
            })
        })
        .collect();
    out.sort_by_key(|e| e.time);
    Ok(out)
}

/// Waits for an Event with `reason` on `fleet`; returns it.
pub async fn wait_event(
    env: &Env,
    fleet: &str,
    reason: &str,
    timeout: Duration,
) -> Result<FleetEvent> {
    wait_for(
        &format!("Event {reason} on {fleet}"),
        timeout,
        || async move {
            Ok(fleet_events(&env.client, &env.ns, Some(fleet))
                .await?
                .into_iter()
                .find(|e| e.reason == reason))
        },
    )
    .await
}

/// The fleet's condition `type_`: (status, reason, message).
pub async fn condition(
    env: &Env,
    fleet: &str,
    type_: &str,
) -> Result<Option<(String, String, String)>> {
    let f = env.api::<CelldFleet>().get(fleet).await?;
    Ok(f.status.and_then(|s| {
        s.conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason, c.message))
    }))
}

/// Waits until the fleet's condition `type_` has `status` and `reason`.
pub async fn wait_condition(
    env: &Env,
    fleet: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    timeout: Duration,
) -> Result<(String, String, String)> {
    wait_for(
        &format!("{fleet} condition {type_}={status} reason {reason:?}"),
        timeout,
        || async move {
            Ok(condition(env, fleet, type_)
                .await?
                .filter(|(s, r, _)| s == status && reason.is_none_or(|x| x == r)))
        },
    )
    .await
}

/// spec.replicas of the workload named `name` (StatefulSet, else Deployment).
pub async fn replicas(env: &Env, name: &str) -> Result<Option<i32>> {
    if let Some(s) = env.api::<StatefulSet>().get_opt(name).await? {
        return Ok(Some(s.spec.and_then(|s| s.replicas).unwrap_or(1)));
    }
    Ok(env
        .api::<Deployment>()
        .get_opt(name)
        .await?
        .map(|d| d.spec.and_then(|s| s.replicas).unwrap_or(1)))
}

/// Waits until `n` member Pods of the fleet (by identity) are Ready and not terminating.
pub async fn wait_ready_members(
    env: &Env,
    identity: &str,
    n: usize,
    timeout: Duration,
) -> Result<Vec<Pod>> {
    wait_for(&format!("{n} ready members"), timeout, || async move {
        let pods = member_pods(env, identity).await?;
        let ready: Vec<Pod> = pods
            .into_iter()
            .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
            .collect();
        Ok((ready.len() == n).then_some(ready))
    })
    .await
}

/// Pods labelled with the fleet identity.
pub async fn member_pods(env: &Env, identity: &str) -> Result<Vec<Pod>> {
    Ok(env
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{IDENTITY}={identity}")))
        .await?
        .items)
}

/// Claims of the namespace: name -> (uid, phase, deleting).
pub async fn claims(env: &Env) -> Result<BTreeMap<String, (String, String, bool)>> {
    Ok(env
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|c| {
            (
                c.name_any(),
                (
                    c.metadata.uid.clone().unwrap_or_default(),
                    c.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default(),
                    c.metadata.deletion_timestamp.is_some(),
                ),
            )
        })
        .collect())
}

/// Asserts that `f` stays true for `dur` (checked every 500 ms).
pub async fn holds_for<F, Fut>(what: &str, dur: Duration, mut f: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let end = Instant::now() + dur;
    while Instant::now() < end {
        ensure!(f().await?, "{what} stopped holding");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Sets a stub's answers (`PUT http://<podIP>:8081/__stub/mode`).
pub async fn set_stub_mode(pod: &Pod, mode: Value) -> Result<()> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("Pod has no IP")?;
    let http = kubesim::http::HttpClient::new();
    http.send_json(
        http::Method::PUT,
        &format!("http://{ip}:8081/__stub/mode"),
        &mode,
        Duration::from_secs(5),
    )
    .await?
    .ok()?;
    Ok(())
}

/// The node a Pod is bound to (empty when unscheduled).
pub fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// The zone label of a node.
pub async fn zone_of(env: &Env, node: &str) -> Result<String> {
    let n = Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .get(node)
        .await?;
    n.metadata
        .labels
        .and_then(|l| l.get(celld_gen::api::labels::ZONE).cloned())
        .context("node without zone")
}

/// After a member's node stopped: waits until the node lifecycle controller evicts `pod`
/// (its deletionTimestamp is set), then until the healer records `MemberForceDeleted` on
/// `fleet`. Returns the deletionTimestamp, the force-delete deadline (it plus the tests'
/// `--force-delete-margin` of 5 s) and the Event.
pub async fn wait_evicted_then_force_deleted(
    env: &Env,
    fleet: &str,
    pod: &str,
) -> Result<(
    k8s_openapi::jiff::Timestamp,
    k8s_openapi::jiff::Timestamp,
    FleetEvent,
)> {
    let pods: Api<Pod> = env.api();
    let deleting = wait_for(
        &format!("{pod} terminating"),
        Duration::from_secs(90),
        || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .get_opt(pod)
                    .await?
                    .and_then(|p| p.metadata.deletion_timestamp.clone()))
            }
        },
    )
    .await?;
    let deadline = deleting.0 + k8s_openapi::jiff::SignedDuration::from_secs(5);
    let ev = wait_event(env, fleet, "MemberForceDeleted", Duration::from_secs(60)).await?;
    Ok((deleting.0, deadline, ev))
}
