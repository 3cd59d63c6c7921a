//! How a fleet starts and who changes `spec.replicas`, on the Kubernetes minor the tests
//! run against (`CELLD_GEN_KUBERNETES_VERSION`; `scripts/test-oldest.sh` runs this file on
//! the oldest supported line too):
//!
//! - a fleet applied the Argo CD way is created with no member (1.36 on: the mutating
//!   policy; before: Git's `replicas: 0`, which Argo CD then owns);
//! - the healer grows it, taking `spec.replicas` over from any co-owner holding its live
//!   value, and owns it alone afterwards;
//! - after an Argo CD re-sync with `RespectIgnoreDifferences=true` (which applies the live
//!   value and so co-owns it again) the healer still grows the fleet;
//! - the replicas policy refuses an engine's forced apply of a stale count;
//! - before 1.36, it also refuses an engine that would write Git's 0 back (no ignore
//!   rules), and a StatefulSet rendered for a newer minor (no `replicas`, so the API
//!   default of 1); nothing changes.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_gen::kubernetes::StartGuard;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::{Value, json};

/// Managers owning `spec.replicas`, sorted.
fn replica_owners(sts: &StatefulSet) -> Vec<String> {
    let mut v: Vec<String> = celld_e2e::replica_owners(sts)
        .into_iter()
        .map(|(manager, _)| manager)
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_fleet_starts_at_zero_and_only_the_healer_moves_its_replicas() -> Result<()> {
    let Some(mut env) = Env::start("start-guard").await? else {
        return Ok(());
    };
    let r = scenario(&mut env).await;
    env.finish(r).await
}

async fn scenario(env: &mut Env) -> Result<()> {
    let minor = kubernetes()?;
    let guard = minor.start_guard();
    let sets: Api<StatefulSet> = env.api();
    let f = env.persistent(&env.ns, "sg", 3);
    let fleet = env.apply_fleet(&f.yaml()).await?;

    // Created with no member, and no Pod before the healer runs.
    let sts = sets.get("sg").await?;
    ensure!(
        sts.spec.replicas == Some(0),
        "{minor}: created with {:?} replicas",
        sts.spec.replicas
    );
    let owners = replica_owners(&sts);
    let git_owns = owners.iter().any(|m| m == ARGO);
    ensure!(
        git_owns == (guard == StartGuard::RenderedZero),
        "{minor}: spec.replicas owned by {owners:?} at creation"
    );
    let pods: Api<Pod> = env.api();
    ensure!(pods.list(&Default::default()).await?.items.is_empty());
    eprintln!("[start-guard] {minor}: created at 0 ({guard:?}), owners {owners:?}");

    let h = env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(90)).await?;
    let owners = replica_owners(&sets.get("sg").await?);
    ensure!(
        owners == ["celld-healer"],
        "{minor}: after growth spec.replicas is owned by {owners:?}"
    );
    let taken = || async {
        let m = env.h(h).metrics_text().await?;
        Ok::<f64, anyhow::Error>(sum_metric(
            &m,
            "celld_healer_actions_total{kind=\"SetReplicas\",outcome=\"taken_over\"}",
        ))
    };
    let first = taken().await?;
    ensure!(
        (first >= 1.0) == git_owns,
        "{minor}: {first} take-overs for the first growth"
    );

    // An Argo CD re-sync with RespectIgnoreDifferences: the live count applied by
    // argocd-controller, which co-owns it again; the healer's next growth takes it over.
    // (Argo CD copies the live value in whether Git renders the field or not.)
    let mut sync: Value = rendered_objects(&fleet)?
        .into_iter()
        .find(|o| o["kind"] == "StatefulSet")
        .context("no rendered StatefulSet")?;
    sync["spec"]["replicas"] = json!(3);
    apply(&env.client, &sync, ARGO, false)
        .await
        .context("Argo CD's re-sync of the live count")?;
    ensure!(
        replica_owners(&sets.get("sg").await?) == [ARGO, "celld-healer"],
        "argocd-controller does not co-own spec.replicas after the re-sync"
    );
    // Git raises the members to 4 (the next commit; only the CelldFleet changed, and a
    // re-sync of the StatefulSet would carry the live count again, as above).
    let mut four = f.clone();
    four.members = 4;
    let fleet_object = rendered_objects(&load_fleet(&four.yaml())?)?
        .into_iter()
        .find(|o| o["kind"] == "CelldFleet")
        .context("no rendered CelldFleet")?;
    apply(&env.client, &fleet_object, ARGO, false)
        .await
        .context("Git raising members to 4")?;
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(90)).await?;
    let after = taken().await?;
    ensure!(
        after >= first + 1.0,
        "{minor}: the growth after the re-sync did not take spec.replicas over ({first} -> {after})"
    );
    ensure!(replica_owners(&sets.get("sg").await?) == ["celld-healer"]);
    eprintln!("[start-guard] {minor}: grown 0 -> 3 -> 4 through Argo CD's co-ownership");

    // An engine's forced apply of a count it read before the healer changed it (Argo CD
    // copies ignored fields from its cache): refused on every minor, nothing changes.
    let mut stale = sync.clone();
    stale["spec"]["replicas"] = json!(3);
    let refused = apply(&env.client, &stale, ARGO, false)
        .await
        .err()
        .context("a stale count of 3 was applied over the healer's 4")?;
    let why = format!("{refused:#}");
    ensure!(
        why.contains("is the healer's") && why.contains("from 4 to 3"),
        "{why}"
    );
    ensure!(sets.get("sg").await?.spec.replicas == Some(4));
    eprintln!("[start-guard] {minor}: a stale count from an engine is refused");

    if guard != StartGuard::RenderedZero {
        return Ok(());
    }
    // Before 1.36: an engine without the ignore rules writes Git's 0: refused.
    let rendered: Value = rendered_objects(&fleet)?
        .into_iter()
        .find(|o| o["kind"] == "StatefulSet")
        .context("no rendered StatefulSet")?;
    ensure!(rendered["spec"]["replicas"] == 0);
    let refused = apply(&env.client, &rendered, "kustomize-controller", false)
        .await
        .err()
        .context("Git's replicas: 0 was applied over the healer's 4")?;
    let why = format!("{refused:#}");
    ensure!(
        why.contains("spec.replicas of fleet StatefulSet")
            && why.contains("is the healer's")
            && why.contains("from 4 to 0")
            && why.contains("ignoreDifferences"),
        "{why}"
    );
    ensure!(sets.get("sg").await?.spec.replicas == Some(4));
    eprintln!("[start-guard] an engine without ignore rules is refused: {why}");

    // A StatefulSet rendered for 1.36 or newer (no replicas) would start at 1: refused.
    let other = env.persistent(&env.ns, "sg-new", 3);
    let newer = celld_gen::render::render_fleet_with(
        &validated(&other.yaml())?,
        &celld_gen::render::RenderOptions::default(),
    )?;
    let sts_yaml = newer
        .objects
        .iter()
        .find(|o| o.file == "statefulset.yaml")
        .context("no statefulset.yaml")?;
    let sts_new: Value = serde_saphyr::from_str(&sts_yaml.yaml)?;
    ensure!(sts_new["spec"].get("replicas").is_none());
    let refused = apply(&env.client, &sts_new, ARGO, false)
        .await
        .err()
        .context(
            "a StatefulSet without replicas was created on a cluster without the mutating policy",
        )?;
    let why = format!("{refused:#}");
    ensure!(
        why.contains("would start a member before the healer vetted the fleet")
            && why.contains("--kubernetes-version"),
        "{why}"
    );
    ensure!(sets.get_opt("sg-new").await?.is_none());
    eprintln!("[start-guard] a StatefulSet rendered for a newer minor is refused: {why}");
    Ok(())
}
