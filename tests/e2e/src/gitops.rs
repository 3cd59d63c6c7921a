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

/// The variable `scripts/test-all.sh` sets to the file its background GitOps build
/// writes when it ends ("ok", or the failure).
pub const BUILD_DONE_ENV: &str = "CELLD_GITOPS_BUILD_DONE";

/// Waits for a GitOps build running beside the tests, if there is one
/// (`$CELLD_GITOPS_BUILD_DONE`): a test that uses the engines outside the `gitops_*`
/// files (which the runner starts only once the build is done) must not read its
/// outputs half-written. Fails when that build failed.
pub fn wait_for_build() -> Result<()> {
    let Some(done) = std::env::var_os(BUILD_DONE_ENV).map(PathBuf::from) else {
        return Ok(());
    };
    let start = std::time::Instant::now();
    loop {
        // Written by `echo`: an empty file is one being written.
        if let Ok(text) = std::fs::read_to_string(&done)
            && !text.trim().is_empty()
        {
            let text = text.trim();
            ensure!(
                text == "ok",
                "the GitOps build beside the tests failed: {text}"
            );
            return Ok(());
        }
        ensure!(
            start.elapsed() < std::time::Duration::from_secs(3_600),
            "the GitOps build beside the tests did not end within an hour ({} missing)",
            done.display()
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// A binary built by `tests/gitops/build.sh`; `None` (after a loud notice) when it is
/// missing and `CELLD_E2E` is not `1`, an error when it is.
pub fn engine(name: &str, test: &str) -> Result<Option<PathBuf>> {
    wait_for_build()?;
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
    let env: Vec<(&str, std::ffi::OsString)> = kubeconfig
        .map(|k| ("KUBECONFIG", k.as_os_str().to_owned()))
        .into_iter()
        .collect();
    run_with_env(bin, sub, &env, req)
}

/// [`run`] with these environment variables set.
pub fn run_with_env(
    bin: &Path,
    sub: &str,
    env: &[(&str, std::ffi::OsString)],
    req: &Value,
) -> Result<Value> {
    use std::io::Write;
    let mut cmd = Command::new(bin);
    cmd.arg(sub)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
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
        Self::render_with(&[])
    }

    /// Runs `celld-gen install <args> --output <scratch dir>`.
    pub fn render_with(args: &[&str]) -> Result<Bundle> {
        let bin = workspace_bin("celld-gen", "CELLD_GEN_BIN")?;
        let dir = std::env::temp_dir()
            .join(kubesim::testing::unique_name("celld-gitops-bundle"))
            .join("install");
        let out = Command::new(&bin)
            .arg("install")
            .args(args)
            .arg("--output")
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
        wait_for_build()?;
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
    /// Prunes `gone` (objects the engine synced that left Git), as a sync with pruning
    /// on does; returns each object's `Kind/namespace/name` and whether it was deleted.
    fn prune(&self, gone: &[Value]) -> Result<Vec<(String, bool)>>;
}

/// Argo CD: Application, settings and the `celld-argocd` binary.
pub struct Argo {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub application: Value,
    pub config_maps: Vec<Value>,
}

impl Argo {
    /// Argo CD as `celld-gen install` configures it (its Application and `argocd-cm`
    /// patch), against the cluster of `kubeconfig`; `None` (after a notice) when
    /// `celld-argocd` is not built.
    pub fn for_test(test: &str, kubeconfig: &Path) -> Result<Option<Argo>> {
        let Some(bin) = engine("celld-argocd", test)? else {
            return Ok(None);
        };
        let bundle = Bundle::render()?;
        Ok(Some(Argo {
            bin,
            kubeconfig: kubeconfig.to_path_buf(),
            application: bundle.application()?,
            config_maps: bundle.argocd_config_maps()?,
        }))
    }

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

    /// gitops-engine's sync context with pruning on (and the prune the CelldFleet's
    /// `Prune=confirm` asks for confirmed, as a person would): `Pruned` or not, per object.
    fn prune(&self, gone: &[Value]) -> Result<Vec<(String, bool)>> {
        let out = run(
            &self.bin,
            "prune",
            Some(&self.kubeconfig),
            &self.request(gone),
        )?;
        out["results"]
            .as_array()
            .context("no results")?
            .iter()
            .map(|r| {
                Ok((
                    format!(
                        "{}/{}/{}",
                        r["kind"].as_str().context("kind")?,
                        r["namespace"].as_str().unwrap_or_default(),
                        r["name"].as_str().context("name")?
                    ),
                    r["status"] == "Pruned",
                ))
            })
            .collect()
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

    /// kustomize-controller's garbage collection (`DeleteAll` with its options).
    fn prune(&self, gone: &[Value]) -> Result<Vec<(String, bool)>> {
        let out = run(
            &self.bin,
            "prune",
            Some(&self.kubeconfig),
            &json!({"kustomization": self.kustomization, "objects": gone}),
        )?;
        Ok(entries(&out)?
            .into_iter()
            .map(|(subject, action)| (subject, action == "deleted"))
            .collect())
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
    tree_objects(&repo_root().join("golden"))
}

/// Every manifest file of a tree `celld-gen render -o` wrote (kustomizations left out),
/// sorted.
pub fn tree_files(root: &Path) -> Result<Vec<PathBuf>> {
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
    walk(root, &mut files)?;
    files.sort();
    Ok(files)
}

/// Every object of a tree `celld-gen render -o` wrote (one per YAML file, kustomizations
/// left out), sorted by path.
pub fn tree_objects(root: &Path) -> Result<Vec<Value>> {
    let files = tree_files(root)?;
    ensure!(!files.is_empty(), "{} has no manifests", root.display());
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
pub(crate) fn blocking<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
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

/// Waits until the fleet's workload has `n` replicas and `n` Ready members, and the
/// healer has caught up: the fleet's status reports `n` desired, applied and ready. The
/// healer writes what it owns on Git's objects (the capacity history on the reservation)
/// in the reconcile before that status, so an engine asked after this compares objects
/// the healer has stopped writing; asked earlier, it can read an object before a healer
/// write and dry-run after it, and report a drift that is only the race.
pub(crate) async fn settle(env: &crate::Env, name: &str, identity: &str, n: i32) -> Result<()> {
    use std::time::Duration;
    kubesim::testing::wait_for(
        &format!("{name} at {n} replicas"),
        Duration::from_secs(120),
        || async { Ok((crate::replicas(env, name).await? == Some(n)).then_some(())) },
    )
    .await?;
    let want = usize::try_from(n).context("negative member count")?;
    crate::wait_ready_members(env, identity, want, Duration::from_secs(120)).await?;
    let fleets: kube::Api<celld_gen::api::CelldFleet> = env.api();
    kubesim::testing::wait_for(
        &format!("{name}'s status at {n} desired, applied and ready"),
        Duration::from_secs(60),
        || async {
            let st = fleets.get(name).await?.status;
            Ok(st
                .filter(|s| {
                    s.desired_members == Some(n)
                        && s.applied_members == Some(n)
                        && s.ready_members == Some(n)
                })
                .map(|_| ()))
        },
    )
    .await?;
    Ok(())
}

/// Git of the healer scenario: a PersistentFleet of 4 members, an External Bucket fleet
/// (its members are written through `/scale`), the same Git with the PersistentFleet at
/// 3 members (a later commit), and that Git rendered by a celld-gen whose templates
/// changed (an upgrade).
pub struct HealerFleets {
    pub persistent: crate::FleetFile,
    pub external: crate::FleetFile,
    pub objects: Vec<Value>,
    pub contracted: Vec<Value>,
    pub upgraded: Vec<Value>,
}

/// The label and annotation the upgraded templates add.
pub const UPGRADE_KEY: &str = "celld.dev/template-revision";

/// celld-gen's templates with one change each for the CelldFleet (a new annotation) and
/// the workloads (a new label on the StatefulSet and Deployment), as a new version of
/// celld-gen may bring. The sources live as long as the test.
fn upgraded_templates() -> Result<Vec<(&'static str, &'static str)>> {
    use celld_gen::render::templates::TEMPLATES;
    let add = |name: &str, src: &str, after: &str| -> Result<String> {
        let line = format!("{after}    {UPGRADE_KEY}: \"2\"\n");
        let out = src.replacen(after, &line, 1);
        ensure!(out != src, "template {name} has no `{}`", after.trim());
        Ok(out)
    };
    TEMPLATES
        .iter()
        .map(|&(name, src)| {
            let changed = match name {
                "celldfleet.yaml.j2" => add(name, src, "  annotations:\n")?,
                "statefulset.yaml.j2" | "deployment.yaml.j2" => add(name, src, "  labels:\n")?,
                _ => return Ok((name, src)),
            };
            Ok((name, &*Box::leak(changed.into_boxed_str())))
        })
        .collect()
}

/// The objects of a fleet file rendered with the templates of `env`.
fn render_in(env: &celld_gen::render::templates::Templates, file: &str) -> Result<Vec<Value>> {
    let fleet = crate::fleet::validated(file)?;
    let r = celld_gen::render::render_fleet_in(env, &fleet, &crate::render_options()?)
        .map_err(|e| anyhow::anyhow!("render: {e}"))?;
    r.objects.iter().map(|o| yaml(&o.yaml, o.file)).collect()
}

impl HealerFleets {
    pub fn new(env: &crate::Env) -> Result<HealerFleets> {
        let ns = env.ns.as_str();
        let persistent = env.persistent(ns, "alpha", 4).protection(false);
        let external = env.bucket(ns, "ext", 3).protection(false);
        let ext_yaml = external_fleet_yaml(&external)?;
        let ext = crate::rendered_objects(&crate::load_fleet(&ext_yaml)?)?;
        let render = |members: i32| -> Result<Vec<Value>> {
            let f = crate::FleetFile {
                members,
                ..persistent.clone()
            };
            let mut objs = crate::rendered_objects(&crate::load_fleet(&f.yaml())?)?;
            objs.extend(ext.iter().cloned());
            Ok(objs)
        };
        let env = celld_gen::render::templates::environment(&upgraded_templates()?)
            .map_err(|e| anyhow::anyhow!("the upgraded templates: {e:#}"))?;
        let contracted = crate::FleetFile {
            members: 3,
            ..persistent.clone()
        };
        let mut upgraded = render_in(&env, &contracted.yaml())?;
        upgraded.extend(render_in(&env, &ext_yaml)?);
        Ok(HealerFleets {
            objects: render(4)?,
            contracted: render(3)?,
            upgraded,
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
/// every object in sync: growth (0 -> 4 members of a PersistentFleet, the healer's first
/// `spec.members` of the External fleet and the Bucket Deployment to it), an External
/// `/scale` write to 4 and the healer's growth, a later commit with the PersistentFleet at 3 synced and the
/// healer's contraction 4 -> 3, a disk handoff, a force-delete, and Git rendered by an
/// upgraded celld-gen (changed templates) synced, the healer's fields kept. Negative control: a label
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
    // An External fleet without spec.members gets its first count from the healer
    // (minMembers, rule K6), so /scale answers before any writer acted.
    settle(env, "ext", &ext.identity, 3).await?;
    let api: kube::Api<celld_gen::api::CelldFleet> = env.api();
    let members = api.get("ext").await?.spec.members;
    ensure!(members == Some(3), "ext's first spec.members: {members:?}");
    blocking(|| {
        ensure_in_sync(
            engine,
            objs,
            "after growth by the healer (alpha 0 -> 4) and ext's first spec.members",
        )
    })?;
    after_each.after(env, "growth", objs).await?;

    api.patch_scale(
        "ext",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .context("/scale of ext to 4")?;
    settle(env, "ext", &ext.identity, 4).await?;
    blocking(|| {
        ensure_in_sync(
            engine,
            objs,
            "after an External /scale write to 4 and the healer's growth 3 -> 4",
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

    disk_handoff(env, &alpha.identity).await?;
    blocking(|| {
        ensure_in_sync(
            engine,
            objs,
            "after a disk handoff (alpha-1's volume lost, a fresh disk)",
        )
    })?;
    after_each.after(env, "disk handoff", objs).await?;

    force_delete(env, alpha, ext).await?;
    blocking(|| {
        ensure_in_sync(
            engine,
            objs,
            "after a force-delete (alpha-2's node stopped, back on its disk)",
        )
    })?;
    after_each.after(env, "force-delete", objs).await?;

    let objs = &fleets.upgraded;
    blocking(|| engine.sync(objs))?;
    healer_fields_survive(env, alpha, ext).await?;
    blocking(|| {
        ensure_in_sync(
            engine,
            objs,
            "after a celld-gen upgrade that changed templates, synced",
        )
    })?;
    after_each.after(env, "upgrade", objs).await?;
    label_edit_detected(env, engine, objs).await
}

/// The healer's handoff: alpha-1's volume is deleted (its claim goes Lost); the healer
/// gives the member a fresh disk and it is ready again on it.
async fn disk_handoff(env: &crate::Env, identity: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use std::time::Duration;
    let t0 = std::time::Instant::now();
    let old = crate::claims(env)
        .await?
        .get("data-alpha-1")
        .map(|c| c.0.clone())
        .context("no claim data-alpha-1")?;
    let gone = env
        .sim
        .control
        .delete_claim_volume(&env.ns, "data-alpha-1")
        .await?;
    eprintln!("[handoff] deleted {} (data-alpha-1)", gone.pv);
    crate::wait_event(env, "alpha", "MemberDiskLost", Duration::from_secs(60)).await?;
    let pods: kube::Api<Pod> = env.api();
    kubesim::testing::wait_for(
        "data-alpha-1 replaced and alpha-1 ready",
        Duration::from_secs(120),
        || async {
            let fresh = crate::claims(env)
                .await?
                .get("data-alpha-1")
                .is_some_and(|(uid, phase, del)| *uid != old && phase == "Bound" && !del);
            let ready = pods
                .get_opt("alpha-1")
                .await?
                .is_some_and(|p| crate::pod_ready(&p) && p.metadata.deletion_timestamp.is_none());
            Ok((fresh && ready).then_some(()))
        },
    )
    .await?;
    crate::wait_ready_members(env, identity, 3, Duration::from_secs(60)).await?;
    eprintln!(
        "[handoff] alpha-1 ready on a fresh disk {:?} after its volume went",
        t0.elapsed()
    );
    Ok(())
}

/// The healer's force-delete: alpha-2's node stops, the node lifecycle controller evicts
/// its Pods, no kubelet confirms, and the healer force-deletes alpha-2 past grace and
/// margin; it comes back on its own disk. The node then starts again and both fleets are
/// whole.
async fn force_delete(
    env: &crate::Env,
    alpha: &crate::FleetFile,
    ext: &crate::FleetFile,
) -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use std::time::Duration;
    let t0 = std::time::Instant::now();
    let pods: kube::Api<Pod> = env.api();
    let victim = pods.get("alpha-2").await?;
    let node = crate::node_of(&victim);
    let claims = crate::claims(env).await?;
    env.sim.control.stop_node(&node).await?;
    eprintln!("[force-delete] stopped {node}, running alpha-2");
    let (_, _, ev) = crate::wait_evicted_then_force_deleted(env, "alpha", "alpha-2").await?;
    eprintln!("[force-delete] {}", ev.note);
    let old_uid = victim.metadata.uid.clone();
    kubesim::testing::wait_for(
        "alpha-2 back and ready",
        Duration::from_secs(90),
        || async {
            Ok(pods
                .get_opt("alpha-2")
                .await?
                .filter(|p| p.metadata.uid != old_uid && crate::pod_ready(p))
                .map(|_| ()))
        },
    )
    .await?;
    let after = crate::claims(env).await?;
    ensure!(
        claims.get("data-alpha-2").map(|c| &c.0) == after.get("data-alpha-2").map(|c| &c.0),
        "alpha-2 came back on another disk"
    );
    env.sim.control.start_node(&node).await?;
    settle(env, "alpha", &alpha.identity, 3).await?;
    settle(env, "ext", &ext.identity, 4).await?;
    eprintln!(
        "[force-delete] both fleets whole {:?} after the node stopped",
        t0.elapsed()
    );
    Ok(())
}

/// After the upgrade is synced: the new label reached the live workload, and the fields
/// the healer and the `/scale` writer own kept their values.
async fn healer_fields_survive(
    env: &crate::Env,
    alpha: &crate::FleetFile,
    ext: &crate::FleetFile,
) -> Result<()> {
    let sts: kube::Api<k8s_openapi::api::apps::v1::StatefulSet> = env.api();
    let live = sts.get("alpha").await?;
    ensure!(
        live.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(UPGRADE_KEY))
            .is_some_and(|v| v == "2"),
        "the upgrade's label is not on the live StatefulSet: {:?}",
        live.metadata.labels
    );
    let fleets: kube::Api<celld_gen::api::CelldFleet> = env.api();
    let members = fleets.get("ext").await?.spec.members;
    ensure!(
        members == Some(4),
        "ext's members after the upgrade: {members:?}, the /scale writer set 4"
    );
    ensure!(
        crate::replicas(env, "alpha").await? == Some(3)
            && crate::replicas(env, "ext").await? == Some(4),
        "the healer's replicas changed with the upgrade"
    );
    settle(env, "alpha", &alpha.identity, 3).await?;
    settle(env, "ext", &ext.identity, 4).await?;
    eprintln!("[upgrade] synced: the new label is live, replicas and ext's members kept");
    Ok(())
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

/// Issue "protection keeps the fleet running": two fleets synced by `engine`, one
/// protected from deletion (the default) and one not, with the healer running; then
/// both fleets' folders leave Git and the engine syncs with pruning. The protected
/// fleet's workload, Services, PodDisruptionBudget and NetworkPolicies are kept and
/// every member keeps running; the unprotected one's workload is pruned (what the
/// annotations change).
pub async fn prune_scenario(env: &crate::Env, engine: &dyn Engine) -> Result<()> {
    use crate::{load_fleet, rendered_objects};
    let kept = env.persistent(&env.ns, "kept", 3);
    let free = env.persistent(&env.ns, "free", 3).protection(false);
    let mut objs = rendered_objects(&load_fleet(&kept.yaml())?)?;
    let kept_count = objs.len();
    objs.extend(rendered_objects(&load_fleet(&free.yaml())?)?);
    blocking(|| engine.sync(&objs))?;
    settle(env, "kept", &kept.identity, 3).await?;
    settle(env, "free", &free.identity, 3).await?;
    let name = engine.name();
    // Both folders removed from Git: every object is stale.
    let pruned = blocking(|| engine.prune(&objs))?;
    eprintln!("[{name} prune] {pruned:?}");
    let running = [
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ];
    for o in &objs[..kept_count] {
        let kind = o["kind"].as_str().unwrap_or_default();
        if !running.contains(&kind) {
            continue;
        }
        let id = format!(
            "{kind}/{}/{}",
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        );
        ensure!(
            !pruned.iter().any(|(s, deleted)| *deleted && *s == id),
            "{name} pruned {id} of a protected fleet"
        );
        let (api, n) = crate::dynamic_api(&env.client, o)?;
        let live = api.get_opt(&n).await?;
        ensure!(
            live.is_some_and(|l| l.metadata.deletion_timestamp.is_none()),
            "{id} of a protected fleet is gone or going after {name}'s prune"
        );
    }
    crate::holds_for(
        "the protected fleet's members keep running",
        std::time::Duration::from_secs(10),
        || async {
            Ok(crate::member_pods(env, &kept.identity)
                .await?
                .iter()
                .filter(|p| crate::pod_ready(p) && p.metadata.deletion_timestamp.is_none())
                .count()
                == 3)
        },
    )
    .await?;
    let free_sts = format!("StatefulSet/{}/free", env.ns);
    ensure!(
        pruned.iter().any(|(s, deleted)| *deleted && *s == free_sts),
        "{name} did not prune {free_sts} of the unprotected fleet: {pruned:?}"
    );
    eprintln!(
        "[{name} prune] the protected fleet's running parts kept, its members running; the unprotected fleet's workload pruned"
    );
    Ok(())
}
