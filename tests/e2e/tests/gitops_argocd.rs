//! Our manifests and health check under the real Argo CD code (module
//! `github.com/argoproj/argo-cd/v3`, built by `tests/gitops/build.sh`; see
//! `celld_e2e::gitops`), configured by what `celld-gen install` renders: its Application
//! (ServerSideApply=true, ignoreDifferences) and its `argocd-cm` patch merged onto the
//! `argocd-cm` Argo CD ships.
//!
//! - every case of `generator/install/argocd/health_test.yaml` through Argo CD's own Lua
//!   runner (`lua.ResourceHealthOverrides.GetResourceHealth`), no cluster needed;
//! - every golden example synced through Argo CD's server-side dry-run and apply path;
//!   `argodiff.StateDiffs` with server-side diff then reports every object in sync, and a
//!   label changed in Git OutOfSync;
//! - with the healer running: in sync after growth, after an External `/scale` write and
//!   the healer's growth, after a commit lowering members and the healer's contraction,
//!   after a disk handoff, after a force-delete, and after a celld-gen upgrade that
//!   changes templates is synced (the healer's fields kept);
//!   the live CelldFleets Healthy at each step, Suspended when paused, Progressing while
//!   being deleted; a label edited on a live object is OutOfSync.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::gitops::{self, Argo, HealerFleets};
use celld_e2e::{Env, GOLDEN, wait_for};
use celld_gen::api::CelldFleet;
use kube::api::{DeleteParams, Patch, PatchParams};
use kubesim::testing::{e2e_cluster, repo_root};
use serde_json::{Value, json};

fn argo(test: &str, kubeconfig: &std::path::Path) -> Result<Option<Argo>> {
    Argo::for_test(test, kubeconfig)
}

#[test]
fn health_check_cases_run_by_argocds_lua_runner() -> Result<()> {
    let Some(argo) = argo(
        "health_check_cases_run_by_argocds_lua_runner",
        std::path::Path::new("/nonexistent"),
    )?
    else {
        return Ok(());
    };
    let dir = repo_root().join("generator/install/argocd");
    let cases = gitops::yaml(
        &std::fs::read_to_string(dir.join("health_test.yaml"))?,
        "health_test.yaml",
    )?;
    let cases = cases["tests"]
        .as_array()
        .context("no tests in health_test.yaml")?;
    ensure!(cases.len() >= 7, "only {} cases", cases.len());
    let mut objs = Vec::new();
    for case in cases {
        let input = case["inputPath"].as_str().context("inputPath")?;
        objs.push(gitops::yaml(
            &std::fs::read_to_string(dir.join(input)).with_context(|| input.to_string())?,
            input,
        )?);
    }
    let got = argo.health(&objs)?;
    for (case, got) in cases.iter().zip(got) {
        let want = &case["healthStatus"];
        let (status, message) = got.with_context(|| {
            format!(
                "{}: Argo CD found no health check for CelldFleet",
                case["inputPath"]
            )
        })?;
        ensure!(
            want["status"] == status.as_str() && want["message"] == message.as_str(),
            "{}: Argo CD says {status} {message:?}, the case wants {want}",
            case["inputPath"]
        );
        eprintln!("[health] {}: {status} {message:?}", case["inputPath"]);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_examples_synced_by_argocd_stay_in_sync() -> Result<()> {
    let test = "golden_examples_synced_by_argocd_stay_in_sync";
    let Some(cluster) = e2e_cluster(test).await else {
        return Ok(());
    };
    let Some(argo) = argo(test, &cluster.kubeconfig)? else {
        return Ok(());
    };
    let _lock = tokio::task::block_in_place(|| cluster.lock(test, GOLDEN))?;
    gitops::golden_scenario(&cluster, &argo).await
}

/// Argo CD's health of the live CelldFleet `name`.
async fn live_health(argo: &Argo, env: &Env, name: &str) -> Result<(String, String)> {
    // As stored (dynamic, so no field is lost to our own types).
    let (api, _) = celld_e2e::dynamic_api(
        &env.client,
        &json!({"apiVersion": "fleet.celld.dev/v1alpha1", "kind": "CelldFleet",
                "metadata": {"name": name, "namespace": env.ns}}),
    )?;
    let obj: Value = serde_json::to_value(api.get(name).await?)?;
    let mut h = tokio::task::block_in_place(|| argo.health(&[obj]))?;
    h.pop()
        .flatten()
        .with_context(|| format!("no health for the live fleet {name}"))
}

/// Waits until Argo CD's health of the live fleet is `want`.
async fn wait_health(argo: &Argo, env: &Env, name: &str, want: &str) -> Result<(String, String)> {
    wait_for(
        &format!("{name} {want} to Argo CD"),
        Duration::from_secs(60),
        || async {
            let h = live_health(argo, env, name).await?;
            Ok((h.0 == want).then_some(h))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argocd_keeps_fleets_in_sync_through_healer_actions() -> Result<()> {
    let test = "argocd_keeps_fleets_in_sync_through_healer_actions";
    let Some(mut env) = Env::start("argocd-healer").await? else {
        return Ok(());
    };
    let Some(argo) = argo(test, &env.cluster.kubeconfig)? else {
        return env.finish(Ok(())).await;
    };
    let r = scenario(&mut env, &argo).await;
    env.finish(r).await
}

/// After each healer action: Argo CD finds both live fleets Healthy.
struct Healthy<'x>(&'x Argo);

impl gitops::AfterStep for Healthy<'_> {
    fn after<'a>(&'a self, env: &'a Env, step: &'a str, _: &'a [Value]) -> gitops::Step<'a> {
        Box::pin(async move {
            for name in ["alpha", "ext"] {
                let (status, message) = wait_health(self.0, env, name, "Healthy").await?;
                eprintln!("[argocd] {step}: {name} is {status}: {message}");
            }
            Ok(())
        })
    }
}

async fn scenario(env: &mut Env, argo: &Argo) -> Result<()> {
    let fleets = HealerFleets::new(env)?;
    gitops::healer_scenario(env, argo, &fleets, &Healthy(argo)).await?;

    // Paused (as an operator pauses it), then deleted: Argo CD's view of the live fleet.
    env.api::<CelldFleet>()
        .patch(
            "ext",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maintenance": {"paused": true}}})),
        )
        .await?;
    let (_, message) = wait_health(argo, env, "ext", "Suspended").await?;
    eprintln!("[argocd] paused: ext is Suspended: {message}");
    env.api::<CelldFleet>()
        .delete("alpha", &DeleteParams::default())
        .await
        .context("deleting alpha")?;
    let (status, message) = live_health(argo, env, "alpha").await?;
    ensure!(
        status == "Progressing" && message.contains("being deleted"),
        "alpha while deleted: {status} {message}"
    );
    eprintln!("[argocd] deleting: alpha is {status}: {message}");
    Ok(())
}

/// A protected fleet's folder removed from Git and synced with pruning: its workload,
/// Services, PodDisruptionBudget and NetworkPolicies stay and its members keep running;
/// an unprotected fleet's workload is pruned ([`gitops::prune_scenario`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_prune_keeps_a_protected_fleet_running() -> Result<()> {
    let test = "argo_prune_keeps_a_protected_fleet_running";
    let Some(mut env) = Env::start("argo-prune").await? else {
        return Ok(());
    };
    let Some(engine) = argo(test, &env.cluster.kubeconfig)? else {
        return env.finish(Ok(())).await;
    };
    let r = async {
        env.healer(env.healer_options())?;
        gitops::prune_scenario(&env, &engine).await
    }
    .await;
    env.finish(r).await
}

/// External fleets written as the docs show (no `spec.members`), each with an HPA in Git,
/// synced by Argo CD: the real HPA controller reads `/scale`, holds `minReplicas`, raises
/// the fleets under load, and Argo CD reports everything in sync throughout
/// ([`celld_e2e::autoscaler::hpa_scenario`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argocd_external_fleets_follow_a_real_hpa() -> Result<()> {
    let test = "argocd_external_fleets_follow_a_real_hpa";
    let Some(mut env) = Env::start("argo-hpa").await? else {
        return Ok(());
    };
    let Some(engine) = argo(test, &env.cluster.kubeconfig)? else {
        return env.finish(Ok(())).await;
    };
    let r = celld_e2e::autoscaler::hpa_scenario(&mut env, &engine).await;
    env.finish(r).await
}
