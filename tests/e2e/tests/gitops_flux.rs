//! Our manifests under the real Flux code (`github.com/fluxcd/pkg/ssa` with
//! kustomize-controller's apply options, built by `tests/gitops/build.sh`; see
//! `celld_e2e::gitops`), with the drift ignore rules of the Flux Kustomization that
//! `celld-gen install` renders (its `spec.ignore`).
//!
//! - every golden example applied by `ApplyAllStaged`; `Diff` then reports every object
//!   unchanged, and a label changed in Git drifted;
//! - with the healer running: after growth, and after an External `/scale` write and the
//!   healer's growth, after a commit lowering `members` and the healer's contraction
//!   (the ignore rule for `/spec/members` selects only External fleets), after a disk
//!   handoff, after a force-delete, and after a celld-gen upgrade that changes templates
//!   is synced, `Diff` reports
//!   every object unchanged, and the periodic
//!   reconcile (`ApplyAllStaged` again, as kustomize-controller runs it every interval)
//!   changes nothing, so it never undoes the healer; a label edited on a live object
//!   drifted.

use anyhow::{Result, ensure};
use celld_e2e::gitops::{self, Bundle, Flux, HealerFleets};
use celld_e2e::{Env, GOLDEN};
use kubesim::testing::e2e_cluster;

fn flux(test: &str, kubeconfig: &std::path::Path) -> Result<Option<Flux>> {
    let Some(bin) = gitops::engine("celld-flux", test)? else {
        return Ok(None);
    };
    Ok(Some(Flux {
        bin,
        kubeconfig: kubeconfig.to_path_buf(),
        kustomization: Bundle::render()?.kustomization()?,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_examples_applied_by_flux_stay_in_sync() -> Result<()> {
    let test = "golden_examples_applied_by_flux_stay_in_sync";
    let Some(cluster) = e2e_cluster(test).await else {
        return Ok(());
    };
    let Some(flux) = flux(test, &cluster.kubeconfig)? else {
        return Ok(());
    };
    let _lock = tokio::task::block_in_place(|| cluster.lock(test, GOLDEN))?;
    gitops::golden_scenario(&cluster, &flux).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_keeps_fleets_in_sync_through_healer_actions() -> Result<()> {
    let test = "flux_keeps_fleets_in_sync_through_healer_actions";
    let Some(mut env) = Env::start("flux-healer").await? else {
        return Ok(());
    };
    let Some(flux) = flux(test, &env.cluster.kubeconfig)? else {
        return env.finish(Ok(())).await;
    };
    let r = scenario(&mut env, &flux).await;
    env.finish(r).await
}

/// After each healer action: Flux's periodic reconcile (`ApplyAllStaged` again, as
/// kustomize-controller runs it every interval) changes nothing.
struct Reconcile<'x>(&'x Flux);

impl gitops::AfterStep for Reconcile<'_> {
    fn after<'a>(
        &'a self,
        _: &'a Env,
        step: &'a str,
        objs: &'a [serde_json::Value],
    ) -> gitops::Step<'a> {
        Box::pin(async move {
            let entries = tokio::task::block_in_place(|| self.0.apply(objs))?;
            let changed: Vec<_> = entries.iter().filter(|(_, a)| a != "unchanged").collect();
            ensure!(
                entries.len() == objs.len() && changed.is_empty(),
                "Flux's periodic reconcile after {step} would change {changed:?}"
            );
            eprintln!(
                "[Flux] {step}: the periodic reconcile (ApplyAllStaged) leaves all {} objects unchanged",
                entries.len()
            );
            Ok(())
        })
    }
}

async fn scenario(env: &mut Env, flux: &Flux) -> Result<()> {
    let fleets = HealerFleets::new(env)?;
    gitops::healer_scenario(env, flux, &fleets, &Reconcile(flux)).await
}

/// A protected fleet's folder removed from Git and synced with pruning: its workload,
/// Services, PodDisruptionBudget and NetworkPolicies stay and its members keep running;
/// an unprotected fleet's workload is pruned ([`gitops::prune_scenario`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_prune_keeps_a_protected_fleet_running() -> Result<()> {
    let test = "flux_prune_keeps_a_protected_fleet_running";
    let Some(mut env) = Env::start("flux-prune").await? else {
        return Ok(());
    };
    let Some(engine) = flux(test, &env.cluster.kubeconfig)? else {
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
/// applied by Flux: the real HPA controller reads `/scale`, holds `minReplicas`, raises
/// the fleets under load, and Flux reports everything in sync throughout
/// ([`celld_e2e::autoscaler::hpa_scenario`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_external_fleets_follow_a_real_hpa() -> Result<()> {
    let test = "flux_external_fleets_follow_a_real_hpa";
    let Some(mut env) = Env::start("flux-hpa").await? else {
        return Ok(());
    };
    let Some(engine) = flux(test, &env.cluster.kubeconfig)? else {
        return env.finish(Ok(())).await;
    };
    let r = celld_e2e::autoscaler::hpa_scenario(&mut env, &engine).await;
    env.finish(r).await
}
