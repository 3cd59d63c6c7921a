//! One repository, a folder per team, as the guide lays it out: two teams' fleet files
//! rendered by the real `celld-gen render` into `deploy/<namespace>/`, and the per-team
//! objects of `celld-gen install --team`. Each team's folder is a complete unit (its
//! `kustomization.yaml` lists exactly the files in it, and only objects its AppProject
//! admits), and each syncs alone: team A's with the real Argo CD code under its own
//! Application, team B's with the real Flux code under its own Kustomization. Syncing one
//! team creates nothing of the other; after the healer grew both fleets, each engine still
//! reports its team's folder in sync.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::gitops::{self, Argo, Bundle, Engine, Flux};
use celld_e2e::*;
use celld_gen::api::CelldFleet;
use celld_gen::api::labels::IDENTITY;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_team_folder_syncs_alone_and_stays_in_sync() -> Result<()> {
    let test = "each_team_folder_syncs_alone_and_stays_in_sync";
    let Some(mut env) = Env::start("teams").await? else {
        return Ok(());
    };
    let (Some(argo), Some(flux)) = (
        gitops::engine("celld-argocd", test)?,
        gitops::engine("celld-flux", test)?,
    ) else {
        return env.finish(Ok(())).await;
    };
    let r = teams(&mut env, argo, flux).await;
    env.finish(r).await
}

/// The files a kustomization at `dir` builds from, following folder resources to their
/// own `kustomization.yaml` (what `kubectl kustomize dir` reads).
fn kustomized(dir: &Path, out: &mut BTreeSet<PathBuf>) -> Result<()> {
    let k = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&k).with_context(|| format!("reading {}", k.display()))?;
    let v = gitops::yaml(&text, &k.display().to_string())?;
    for r in v["resources"].as_array().context("resources")? {
        let p = dir.join(r.as_str().context("a resource that is not a path")?);
        if p.is_dir() {
            kustomized(&p, out)?;
        } else {
            ensure!(
                p.is_file(),
                "{} lists {} which does not exist",
                k.display(),
                p.display()
            );
            out.insert(p);
        }
    }
    Ok(())
}

/// The `group/kind` names of an AppProject whitelist.
fn whitelist(project: &Value, field: &str) -> BTreeSet<String> {
    project["spec"][field]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            format!(
                "{}/{}",
                g["group"].as_str().unwrap_or_default(),
                g["kind"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn group_kind(o: &Value) -> String {
    let api = o["apiVersion"].as_str().unwrap_or_default();
    let group = api.rsplit_once('/').map_or("", |(g, _)| g);
    format!("{group}/{}", o["kind"].as_str().unwrap_or_default())
}

/// The team's folder is a complete unit that its AppProject admits whole.
fn check_folder(deploy: &Path, ns: &str, bundle: &Bundle) -> Result<Vec<Value>> {
    let dir = deploy.join(ns);
    let mut built = BTreeSet::new();
    kustomized(&dir, &mut built)?;
    let files: BTreeSet<PathBuf> = gitops::tree_files(&dir)?.into_iter().collect();
    ensure!(
        built == files,
        "deploy/{ns}/kustomization.yaml builds {built:?}, the folder holds {files:?}"
    );
    let objs = gitops::tree_objects(&dir)?;
    let project = bundle.file(&format!("argocd/teams/{ns}/appproject.yaml"))?;
    let (cluster, namespaced) = (
        whitelist(&project, "clusterResourceWhitelist"),
        whitelist(&project, "namespaceResourceWhitelist"),
    );
    ensure!(
        project["spec"]["destinations"][0]["namespace"] == ns,
        "AppProject of {ns}: {project}"
    );
    for o in &objs {
        let gk = group_kind(o);
        match o["metadata"]["namespace"].as_str() {
            Some(n) => ensure!(
                n == ns && namespaced.contains(&gk),
                "{} in deploy/{ns} is not admitted by its AppProject",
                gitops::id(o)
            ),
            None => ensure!(
                cluster.contains(&gk),
                "cluster-scoped {gk} in deploy/{ns} is not admitted by its AppProject"
            ),
        }
    }
    let app = bundle.file(&format!("argocd/teams/{ns}/application.yaml"))?;
    ensure!(
        app["spec"]["source"]["path"] == format!("deploy/{ns}").as_str()
            && app["spec"]["project"] == project["metadata"]["name"],
        "the Application of {ns}: {app}"
    );
    let k = bundle.file(&format!("flux/teams/{ns}.yaml"))?;
    ensure!(
        k["spec"]["path"] == format!("./deploy/{ns}").as_str(),
        "the Kustomization of {ns}: {k}"
    );
    eprintln!(
        "[teams] deploy/{ns}: {} objects, its kustomization builds the folder, its AppProject admits them",
        objs.len()
    );
    Ok(objs)
}

async fn teams(env: &mut Env, argo_bin: PathBuf, flux_bin: PathBuf) -> Result<()> {
    let a = env.ns.clone();
    let b = env.extra_namespace("b").await?;
    let alpha = env.persistent(&a, "alpha", 3).protection(false);
    let beta = env.persistent(&b, "beta", 3).protection(false);

    // The repository: fleet files in, `deploy/` out, by the real CLI.
    let repo = env.dir.join("repo");
    std::fs::create_dir_all(repo.join("fleets"))?;
    std::fs::write(repo.join("fleets/alpha.yaml"), alpha.yaml())?;
    std::fs::write(repo.join("fleets/beta.yaml"), beta.yaml())?;
    let celld_gen = kubesim::testing::workspace_bin("celld-gen", "CELLD_GEN_BIN")?;
    let out = Command::new(&celld_gen)
        .current_dir(&repo)
        .args(["render", "fleets", "-o", "deploy"])
        .env("NO_COLOR", "1")
        .output()?;
    ensure!(
        out.status.success(),
        "celld-gen render: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundle = Bundle::render_with(&["--team", &format!("{a},{b}"), "--repo-path", "deploy"])?;
    let deploy = repo.join("deploy");
    let objs_a = check_folder(&deploy, &a, &bundle)?;
    let objs_b = check_folder(&deploy, &b, &bundle)?;

    let argo = Argo {
        bin: argo_bin,
        kubeconfig: env.cluster.kubeconfig.clone(),
        application: bundle.file(&format!("argocd/teams/{a}/application.yaml"))?,
        config_maps: bundle.argocd_config_maps()?,
    };
    let flux = Flux {
        bin: flux_bin,
        kubeconfig: env.cluster.kubeconfig.clone(),
        kustomization: bundle.file(&format!("flux/teams/{b}.yaml"))?,
    };

    // Team A alone: nothing of team B appears.
    tokio::task::block_in_place(|| argo.sync(&objs_a))?;
    let fleets_b: Api<CelldFleet> = Api::namespaced(env.client.clone(), &b);
    ensure!(
        fleets_b.get_opt("beta").await?.is_none(),
        "syncing team {a}'s folder created team {b}'s fleet"
    );
    tokio::task::block_in_place(|| gitops::ensure_in_sync(&argo, &objs_a, "team A synced alone"))?;
    tokio::task::block_in_place(|| flux.sync(&objs_b))?;

    // The healer grows both fleets; each engine still finds its team's folder in sync.
    let mut o = env.healer_options();
    o.namespace = Some(format!("{a},{b}"));
    env.healer(o)?;
    for (ns, name, identity) in [(&a, "alpha", &alpha.identity), (&b, "beta", &beta.identity)] {
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), ns);
        let selector = ListParams::default().labels(&format!("{IDENTITY}={identity}"));
        wait_for(
            &format!("3 ready members of {name}"),
            Duration::from_secs(120),
            || async {
                let ready = pods
                    .list(&selector)
                    .await?
                    .items
                    .iter()
                    .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
                    .count();
                Ok((ready == 3).then_some(()))
            },
        )
        .await?;
        let api: Api<CelldFleet> = Api::namespaced(env.client.clone(), ns);
        wait_for(
            &format!("{name} Ready"),
            Duration::from_secs(60),
            || async {
                let f = api.get(name).await?;
                let ready = f.status.is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                Ok(ready.then_some(()))
            },
        )
        .await?;
    }
    tokio::task::block_in_place(|| {
        gitops::ensure_in_sync(&argo, &objs_a, "team A after the healer grew alpha")?;
        gitops::ensure_in_sync(&flux, &objs_b, "team B after the healer grew beta")?;
        // Negative control: a change in team A's folder is seen by team A's sync.
        gitops::ensure_label_change_detected(&argo, &objs_a, 0)
    })?;
    Ok(())
}
