//! The test environment: the binaries, a test's [`Env`] (cluster, kubesim, namespaces,
//! healers) and its cleanup.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use celld_gen::api::CelldFleet;
use celld_gen::api::labels::{DELETION_ALLOWED, DELETION_ALLOWED_VALUE, IDENTITY};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ServiceAccount};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::*;

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
    /// Cluster-scoped objects of the test's own ([`Env::own_install`]): (kind, name),
    /// deleted when it finishes.
    pub(crate) cluster_objects: Vec<(String, String)>,
    /// The test's share of the cluster and its slot (node names, ranges, zones).
    lock: ClusterLock,
}

/// What [`Env::start`] varies.
#[derive(Clone, Debug)]
pub struct EnvOptions {
    /// Nodes per zone.
    pub nodes_per_zone: u32,
    /// Extra kubesim arguments.
    pub kubesim_args: Vec<String>,
    /// Whether the test shares the cluster ([`Sharing::Shared`], the default) or must
    /// run alone, and why.
    pub sharing: Sharing,
}

impl Default for EnvOptions {
    fn default() -> Self {
        EnvOptions {
            nodes_per_zone: 2,
            kubesim_args: Vec::new(),
            sharing: Sharing::Shared,
        }
    }
}

impl EnvOptions {
    /// The defaults for a test that must have the cluster to itself, for `why`.
    pub fn alone(why: &'static str) -> Self {
        EnvOptions {
            sharing: Sharing::Alone(why),
            ..EnvOptions::default()
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
        let lock = tokio::task::block_in_place(|| cluster.lock(test, opts.sharing))?;
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
                ..KubeSimOptions::for_slot(&lock.slot)
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
            "[{test}] namespace {ns}, slot {}, scratch {}, set up in {:?} (built {built:?}, locked {locked:?}, installed {installed:?})",
            lock.slot.index,
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
            cluster_objects: Vec::new(),
            lock,
        }))
    }

    /// Starts a healer; it is killed when the test ends. Returns its index.
    pub fn healer(&mut self, opts: HealerOptions) -> Result<usize> {
        let h = Healer::spawn(self, opts)?;
        self.healers.push(h);
        Ok(self.healers.len() - 1)
    }

    /// Starts a healer with a command line given whole; killed when the test ends.
    pub fn healer_with_args(&mut self, raw: RawHealer) -> Result<usize> {
        let h = Healer::spawn_raw(self, raw)?;
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
            force_delete_margin: format!("{FORCE_DELETE_MARGIN_S}s"),
            absorb_window: "10s".into(),
            lease_duration: "6s".into(),
            halt_after: None,
            extra: Vec::new(),
            bin: None,
            env: Vec::new(),
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
        let own = std::mem::take(&mut self.cluster_objects);
        delete_cluster_rbac(&self.client, &self.test, own).await;
        let cleanup = self.cleanup().await;
        match &cleanup {
            Err(e) => eprintln!("[{}] cleanup: {e:#}", self.test),
            Ok(()) => eprintln!("[{}] cleanup took {:?}", self.test, t.elapsed()),
        }
        // A passing test's scratch folders (logs, kubeconfig, image layers, kubesim's
        // volumes) go with it; a failing one's stay for diagnosis (paths logged above).
        if result.is_ok() {
            self.sim.stop();
            for dir in [&self.dir, &self.sim.dir] {
                if let Err(e) = std::fs::remove_dir_all(dir) {
                    eprintln!("[{}] removing {}: {e}", self.test, dir.display());
                }
            }
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
        // Held Pods would keep the namespace alive, and so would the healer's access
        // finalizer (--watch-namespace) on its RoleBinding, which waits for fleets a
        // stopped healer no longer releases.
        release_finalizers(&Api::<Pod>::namespaced(self.client.clone(), ns)).await?;
        release_finalizers(&Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(
            self.client.clone(),
            ns,
        ))
        .await?;
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
                let spec = s.spec.replicas;
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
                    d.spec.replicas,
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

    /// The zones of this test's nodes (its slot's).
    pub fn zones(&self) -> [String; 3] {
        self.lock.slot.zones()
    }

    /// The region of [`Env::zones`].
    pub fn region(&self) -> String {
        self.lock.slot.region()
    }

    /// The test's slot number.
    pub fn slot(&self) -> u8 {
        self.lock.slot.index
    }

    /// A PersistentFleet file placed on this test's nodes.
    pub fn persistent(&self, ns: &str, name: &str, members: i32) -> FleetFile {
        FleetFile::persistent(ns, name, members).placed(&self.region(), &self.zones())
    }

    /// A Bucket fleet file (Deployment) placed on this test's nodes.
    pub fn bucket(&self, ns: &str, name: &str, members: i32) -> FleetFile {
        FleetFile::bucket(ns, name, members).placed(&self.region(), &self.zones())
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

pub(crate) fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub(crate) fn reservations(client: &Client) -> Api<celld_gen::api::CelldBucketReservation> {
    Api::all(client.clone())
}

/// Creates a namespace for fleets, with the ServiceAccount their members run as.
pub(crate) async fn fleet_namespace(client: &Client, ns: &str) -> Result<()> {
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

/// Removes every finalizer of the objects `api` lists (test cleanup, no healer running).
async fn release_finalizers<K>(api: &Api<K>) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for o in api.list(&ListParams::default()).await? {
        if o.meta().finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
            let _ = api
                .patch(
                    &o.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
        }
    }
    Ok(())
}
