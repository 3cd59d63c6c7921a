//! The real Argo CD and Flux code, for the GitOps end-to-end tests
//! (`tests/e2e/tests/gitops_*.rs`).
//!
//! `tests/gitops/build.sh` builds two Go programs from the Go module proxy into
//! `tests/.cluster/gitops/bin/`: `celld-argocd` (Argo CD's server-side apply path,
//! `argodiff.StateDiffs` with server-side diff, its SettingsManager and Lua health runner)
//! and `celld-flux` (Flux's `ssa.ResourceManager`: `ApplyAllStaged` and `Diff` with
//! kustomize-controller's options). Each reads one JSON request on stdin and answers JSON
//! on stdout; [`Argo`] and [`Flux`] drive them. The Argo CD Application, the `argocd-cm`
//! patch and the Flux Kustomization are those `celld-gen install` renders ([`Bundle`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use kubesim::testing::{e2e_required, repo_root, workspace_bin};
use serde_json::{Value, json};

/// Where `tests/gitops/build.sh` puts the binaries and the files of the module versions.
pub fn gitops_dir() -> PathBuf {
    repo_root().join("tests/.cluster/gitops")
}

/// A binary built by `tests/gitops/build.sh`; `None` (after a loud notice) when it is
/// missing and `CELLD_E2E` is not `1`, an error when it is.
pub fn engine(name: &str, test: &str) -> Result<Option<PathBuf>> {
    let p = gitops_dir().join("bin").join(name);
    if p.is_file() {
        return Ok(Some(p));
    }
    if e2e_required() {
        bail!("{} is not built: run tests/gitops/build.sh", p.display());
    }
    let bar = "!".repeat(78);
    eprintln!(
        "\n{bar}\n!! GITOPS TEST NOT RUN: {test}\n!! {} is not built: run tests/gitops/build.sh\n{bar}\n",
        p.display()
    );
    Ok(None)
}

/// Runs `bin sub` with `req` on stdin (and `KUBECONFIG` when given); returns its JSON.
pub fn run(bin: &Path, sub: &str, kubeconfig: Option<&Path>, req: &Value) -> Result<Value> {
    use std::io::Write;
    let mut cmd = Command::new(bin);
    cmd.arg(sub)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let body = serde_json::to_vec(req)?;
    child
        .stdin
        .take()
        .context("no stdin")?
        .write_all(&body)
        .with_context(|| format!("writing the request to {} {sub}", bin.display()))?;
    let out = child
        .wait_with_output()
        .with_context(|| format!("running {} {sub}", bin.display()))?;
    ensure!(
        out.status.success(),
        "{} {sub} failed ({}): {}",
        bin.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading the answer of {} {sub}", bin.display()))
}

/// Parses one YAML document.
pub fn yaml(text: &str, what: &str) -> Result<Value> {
    serde_saphyr::from_str(text).with_context(|| format!("parsing {what}"))
}

/// The files of `celld-gen install` (the binary, as a user runs it).
pub struct Bundle {
    dir: PathBuf,
}

impl Bundle {
    /// Runs `celld-gen install --output <scratch dir>`.
    pub fn render() -> Result<Bundle> {
        let bin = workspace_bin("celld-gen", "CELLD_GEN_BIN")?;
        let dir = std::env::temp_dir()
            .join(kubesim::testing::unique_name("celld-gitops-bundle"))
            .join("install");
        let out = Command::new(&bin)
            .args(["install", "--output"])
            .arg(&dir)
            .output()
            .with_context(|| format!("running {} install", bin.display()))?;
        ensure!(
            out.status.success(),
            "celld-gen install failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Bundle { dir })
    }

    /// One file of the bundle, parsed.
    pub fn file(&self, path: &str) -> Result<Value> {
        let p = self.dir.join(path);
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        yaml(&text, path)
    }

    /// The rendered Argo CD Application.
    pub fn application(&self) -> Result<Value> {
        self.file("argocd/application.yaml")
    }

    /// `argocd-cm` as Argo CD ships it (from the module built), then our rendered patch.
    pub fn argocd_config_maps(&self) -> Result<Vec<Value>> {
        let shipped = gitops_dir().join("argocd/argocd-cm.yaml");
        let text = std::fs::read_to_string(&shipped).with_context(|| {
            format!("reading {} (run tests/gitops/build.sh)", shipped.display())
        })?;
        Ok(vec![
            yaml(&text, "argocd-cm.yaml")?,
            self.file("argocd/argocd-cm-health.yaml")?,
        ])
    }

    /// The rendered Flux Kustomization.
    pub fn kustomization(&self) -> Result<Value> {
        self.file("flux/kustomization.yaml")
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }
}

/// `Kind namespace/name` of an object.
pub fn id(o: &Value) -> String {
    format!(
        "{} {}/{}",
        o["kind"].as_str().unwrap_or("?"),
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// A GitOps engine as the tests see it: sync Git to the cluster, then report what is out
/// of sync.
pub trait Engine {
    /// Its name in messages.
    fn name(&self) -> &'static str;
    /// Syncs `objs` (Git) to the cluster.
    fn sync(&self, objs: &[Value]) -> Result<()>;
    /// Every object the engine reports out of sync (drifted), with its evidence.
    fn out_of_sync(&self, objs: &[Value]) -> Result<Vec<String>>;
}

/// Argo CD: Application, settings and the `celld-argocd` binary.
pub struct Argo {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub application: Value,
    pub config_maps: Vec<Value>,
}

impl Argo {
    /// The health Argo CD's Lua runner gives each object (`None`: no health check).
    pub fn health(&self, objs: &[Value]) -> Result<Vec<Option<(String, String)>>> {
        let out = run(
            &self.bin,
            "health",
            None,
            &json!({"configMaps": self.config_maps, "objects": objs}),
        )?;
        out["results"]
            .as_array()
            .context("no results")?
            .iter()
            .map(|r| {
                Ok(if r.is_null() {
                    None
                } else {
                    Some((
                        r["status"].as_str().context("status")?.to_string(),
                        r["message"].as_str().unwrap_or("").to_string(),
                    ))
                })
            })
            .collect()
    }

    fn request(&self, objs: &[Value]) -> Value {
        json!({"application": self.application, "configMaps": self.config_maps, "objects": objs})
    }
}

impl Engine for Argo {
    fn name(&self) -> &'static str {
        "Argo CD"
    }

    fn sync(&self, objs: &[Value]) -> Result<()> {
        let out = run(
            &self.bin,
            "sync",
            Some(&self.kubeconfig),
            &self.request(objs),
        )?;
        let applied = out["applied"].as_array().map_or(0, Vec::len);
        ensure!(
            applied == objs.len(),
            "Argo CD applied {applied} of {} objects: {out}",
            objs.len()
        );
        Ok(())
    }

    fn out_of_sync(&self, objs: &[Value]) -> Result<Vec<String>> {
        let out = run(
            &self.bin,
            "diff",
            Some(&self.kubeconfig),
            &self.request(objs),
        )?;
        let results = out["results"].as_array().context("no results")?;
        ensure!(results.len() == objs.len(), "diff answered {out}");
        Ok(results
            .iter()
            .filter(|r| r["modified"] == true)
            .map(|r| {
                format!(
                    "{} {}/{}: live {} predicted {}",
                    r["kind"].as_str().unwrap_or("?"),
                    r["namespace"].as_str().unwrap_or(""),
                    r["name"].as_str().unwrap_or("?"),
                    r["normalizedLive"],
                    r["predictedLive"]
                )
            })
            .collect())
    }
}

/// Flux: the Kustomization and the `celld-flux` binary.
pub struct Flux {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub kustomization: Value,
}

impl Flux {
    /// `ApplyAllStaged` as kustomize-controller runs it; (subject, action) per object.
    pub fn apply(&self, objs: &[Value]) -> Result<Vec<(String, String)>> {
        let out = run(
            &self.bin,
            "apply",
            Some(&self.kubeconfig),
            &json!({"kustomization": self.kustomization, "objects": objs}),
        )?;
        entries(&out)
    }
}

fn entries(out: &Value) -> Result<Vec<(String, String)>> {
    out["entries"]
        .as_array()
        .context("no entries")?
        .iter()
        .map(|e| {
            Ok((
                e["subject"].as_str().context("subject")?.to_string(),
                e["action"].as_str().context("action")?.to_string(),
            ))
        })
        .collect()
}

impl Engine for Flux {
    fn name(&self) -> &'static str {
        "Flux"
    }

    fn sync(&self, objs: &[Value]) -> Result<()> {
        let entries = self.apply(objs)?;
        ensure!(
            entries.len() == objs.len(),
            "Flux applied {} of {} objects: {entries:?}",
            entries.len(),
            objs.len()
        );
        Ok(())
    }

    fn out_of_sync(&self, objs: &[Value]) -> Result<Vec<String>> {
        let out = run(
            &self.bin,
            "diff",
            Some(&self.kubeconfig),
            &json!({"kustomization": self.kustomization, "objects": objs}),
        )?;
        let all = out["entries"].as_array().context("no entries")?;
        ensure!(all.len() == objs.len(), "diff answered {out}");
        Ok(all
            .iter()
            .filter(|e| e["action"] != "unchanged")
            .map(|e| {
                format!(
                    "{} {}: live {} merged {}",
                    e["subject"].as_str().unwrap_or("?"),
                    e["action"].as_str().unwrap_or("?"),
                    e["live"],
                    e["merged"]
                )
            })
            .collect())
    }
}

/// Every object of the golden tree (one per YAML file, kustomizations left out), sorted
/// by path.
pub fn golden_objects() -> Result<Vec<Value>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|x| x == "yaml")
                && p.file_name().is_some_and(|f| f != "kustomization.yaml")
            {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(&repo_root().join("golden"), &mut files)?;
    files.sort();
    ensure!(!files.is_empty(), "golden/ has no manifests");
    files
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            yaml(&text, &p.display().to_string())
        })
        .collect()
}

/// Asserts `engine` reports every object in sync; `when` names the moment.
pub fn ensure_in_sync(engine: &dyn Engine, objs: &[Value], when: &str) -> Result<()> {
    let drift = engine.out_of_sync(objs)?;
    ensure!(
        drift.is_empty(),
        "{} reports {} of {} objects out of sync {when}:\n{}",
        engine.name(),
        drift.len(),
        objs.len(),
        drift.join("\n")
    );
    eprintln!(
        "[{}] {when}: all {} objects in sync",
        engine.name(),
        objs.len()
    );
    Ok(())
}

/// Negative control: with one label changed in Git, `engine` reports exactly that object.
pub fn ensure_label_change_detected(engine: &dyn Engine, objs: &[Value], i: usize) -> Result<()> {
    let mut changed = objs.to_vec();
    changed[i]["metadata"]["labels"]["celld.dev/negative-control"] = json!("changed");
    let drift = engine.out_of_sync(&changed)?;
    let who = id(&objs[i]);
    let (kind, rest) = who.split_once(' ').unwrap_or((&who, ""));
    ensure!(
        drift.len() == 1 && drift[0].contains(kind) && drift[0].contains(rest),
        "{} with a changed label on {who}: expected exactly that object out of sync, got {drift:#?}",
        engine.name()
    );
    eprintln!(
        "[{}] negative control: a changed label on {who} is out of sync",
        engine.name()
    );
    Ok(())
}

/// The sync/diff calls are blocking subprocesses: run them off the async workers.
fn blocking<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    tokio::task::block_in_place(f)
}

/// Every golden example synced by `engine`: the first sync applies every object, the
/// engine then reports every object in sync, and a changed label in Git is out of sync.
/// The golden namespaces are recreated first and deleted afterwards.
pub async fn golden_scenario(
    cluster: &kubesim::testing::Cluster,
    engine: &dyn Engine,
) -> Result<()> {
    use std::collections::BTreeSet;
    use std::time::Duration;
    let client = &cluster.client;
    crate::install(client)
        .await
        .context("installing CRDs and admission policies")?;
    let objs = golden_objects()?;
    let namespaces: BTreeSet<String> = objs
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str().map(str::to_string))
        .collect();
    let clear = |ns: String| async move {
        crate::release_protection(client, &ns).await?;
        kubesim::testing::delete_namespace(client, &ns, Duration::from_secs(120)).await
    };
    for ns in &namespaces {
        clear(ns.clone()).await?;
        kubesim::testing::create_namespace(client, ns).await?;
    }
    let result = async {
        blocking(|| engine.sync(&objs))?;
        eprintln!("[{}] golden: {} objects synced", engine.name(), objs.len());
        blocking(|| {
            ensure_in_sync(
                engine,
                &objs,
                "after the first sync of every golden example",
            )
        })?;
        let sts = objs
            .iter()
            .position(|o| o["kind"] == "StatefulSet")
            .context("no StatefulSet in golden/")?;
        blocking(|| ensure_label_change_detected(engine, &objs, sts))
    }
    .await;
    for ns in &namespaces {
        clear(ns.clone()).await?;
    }
    let reservations: kube::Api<celld_gen::api::CelldBucketReservation> =
        kube::Api::all(client.clone());
    for o in objs
        .iter()
        .filter(|o| o["kind"] == "CelldBucketReservation")
    {
        if let Some(name) = o["metadata"]["name"].as_str() {
            let _ = reservations
                .delete(name, &kube::api::DeleteParams::default())
                .await;
        }
    }
    result
}

/// An External-capacity Bucket fleet (its members are written through `/scale`).
pub fn external_fleet_yaml(f: &crate::FleetFile) -> Result<String> {
    let y = f.yaml();
    let members = format!("  members: {}\n", f.members);
    ensure!(y.contains(&members), "fleet file without members: {y}");
    Ok(y.replace(
        &members,
        &format!(
            "  capacity:\n    mode: External\n    minMembers: {}\n    maxMembers: 6\n",
            f.members
        ),
    ))
}

/// Waits until the fleet's workload has `n` replicas and `n` Ready members.
async fn settle(env: &crate::Env, name: &str, identity: &str, n: i32) -> Result<()> {
    use std::time::Duration;
    kubesim::testing::wait_for(
        &format!("{name} at {n} replicas"),
        Duration::from_secs(120),
        || async { Ok((crate::replicas(env, name).await? == Some(n)).then_some(())) },
    )
    .await?;
    let want = usize::try_from(n).context("negative member count")?;
    crate::wait_ready_members(env, identity, want, Duration::from_secs(120)).await?;
    Ok(())
}

/// Git of the healer scenario: a PersistentFleet of 4 members, an External Bucket fleet
/// (its members are written through `/scale`), and the same Git with the PersistentFleet
/// at 3 members (a later commit).
pub struct HealerFleets {
    pub persistent: crate::FleetFile,
    pub external: crate::FleetFile,
    pub objects: Vec<Value>,
    pub contracted: Vec<Value>,
}

impl HealerFleets {
    pub fn new(ns: &str) -> Result<HealerFleets> {
        let persistent = crate::FleetFile::persistent(ns, "alpha", 4).protection(false);
        let external = crate::FleetFile::bucket(ns, "ext", 3).protection(false);
        let ext = crate::rendered_objects(&crate::load_fleet(&external_fleet_yaml(&external)?)?)?;
        let render = |members: i32| -> Result<Vec<Value>> {
            let f = crate::FleetFile {
                members,
                ..persistent.clone()
            };
            let mut objs = crate::rendered_objects(&crate::load_fleet(&f.yaml())?)?;
            objs.extend(ext.iter().cloned());
            Ok(objs)
        };
        Ok(HealerFleets {
            objects: render(4)?,
            contracted: render(3)?,
            persistent,
            external,
        })
    }
}

/// What [`healer_scenario`] runs after each step.
pub type Step<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + 'a>>;

/// A check [`healer_scenario`] runs after each in-sync check.
pub trait AfterStep {
    /// Runs after `step` (a short name of the healer action), with Git's objects.
    fn after<'a>(&'a self, env: &'a crate::Env, step: &'a str, objs: &'a [Value]) -> Step<'a>;
}

/// Git synced by `engine`, then the healer acts; after each action the engine reports
/// every object in sync: growth (0 -> 4 members of a PersistentFleet, the Bucket
/// Deployment to the External fleet's count), an External `/scale` write to 3 and the
/// healer's growth, and a later commit with the PersistentFleet at 3 synced and the
/// healer's contraction 4 -> 3. Negative control: a label
/// changed on the live StatefulSet is out of sync. `after_each` runs after each in-sync
/// check.
pub async fn healer_scenario(
    env: &mut crate::Env,
    engine: &dyn Engine,
    fleets: &HealerFleets,
    after_each: &dyn AfterStep,
) -> Result<()> {
    use kube::api::{Patch, PatchParams};
    let (alpha, ext) = (&fleets.persistent, &fleets.external);
    let objs = &fleets.objects;
    blocking(|| engine.sync(objs))?;
    blocking(|| ensure_in_sync(engine, objs, "after the first sync"))?;

    env.healer(env.healer_options())?;
    settle(env, "alpha", &alpha.identity, 4).await?;
    // An External fleet starts at the CRD's default count until its /scale writer acts.
    settle(env, "ext", &ext.identity, 1).await?;
    blocking(|| ensure_in_sync(engine, objs, "after growth by the healer (alpha 0 -> 4)"))?;
    after_each.after(env, "growth", objs).await?;

    let api: kube::Api<celld_gen::api::CelldFleet> = env.api();
    api.patch_scale(
        "ext",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .context("/scale of ext to 3")?;
    settle(env, "ext", &ext.identity, 3).await?;
    blocking(|| {
        ensure_in_sync(
            engine,
            objs,
            "after an External /scale write to 3 and the healer's growth 1 -> 3",
        )
    })?;
    after_each.after(env, "/scale", objs).await?;

    let objs = &fleets.contracted;
    blocking(|| engine.sync(objs))?;
    settle(env, "alpha", &alpha.identity, 3).await?;
    blocking(|| {
        ensure_in_sync(
            engine,
            objs,
            "after Git lowered alpha to 3 and the healer's contraction 4 -> 3",
        )
    })?;
    after_each.after(env, "contraction", objs).await?;
    label_edit_detected(env, engine, objs).await
}

/// Negative control: a label edited by hand on the live StatefulSet is out of sync.
async fn label_edit_detected(env: &crate::Env, engine: &dyn Engine, objs: &[Value]) -> Result<()> {
    use kube::api::{Patch, PatchParams};
    let sts: kube::Api<k8s_openapi::api::apps::v1::StatefulSet> = env.api();
    sts.patch(
        "alpha",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "kubectl"}}})),
    )
    .await
    .context("editing a label of the live StatefulSet")?;
    let drift = blocking(|| engine.out_of_sync(objs))?;
    ensure!(
        drift.len() == 1 && drift[0].starts_with("StatefulSet"),
        "{} after a label edit on StatefulSet alpha: expected it alone out of sync, got {drift:#?}",
        engine.name()
    );
    eprintln!(
        "[{}] negative control: a label edited on the live StatefulSet is out of sync",
        engine.name()
    );
    Ok(())
}
