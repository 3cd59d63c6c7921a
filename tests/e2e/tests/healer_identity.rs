//! Healer end-to-end: a fleet's disks are its own names only.
//!
//! A second fleet made by copying a fleet file and renaming it keeps the identity. The
//! healer blocks the newer one (`IdentityConflict`, naming the older), never grows or
//! heals it, and when it is deleted releases it without deleting anything: the original
//! keeps every disk and every member. A claim of ours at an ordinal no member can have
//! is ignored and reported, never sized from or deleted. A fleet whose bucket is reserved
//! to another identity, or to the same identity for a fleet in another namespace (a copy
//! of the file), is neither grown nor healed (`StorageScopeConflict`).

use std::time::Duration;

use anyhow::{Result, ensure};
use celld_e2e::*;
use celld_gen::api::CelldFleet;
use celld_gen::api::labels::IDENTITY;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_fleet_never_touches_the_original() -> Result<()> {
    let Some(mut env) = Env::start("identity").await? else {
        return Ok(());
    };
    let r = identity(&mut env).await;
    env.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_reserved_to_another_identity_is_not_grown() -> Result<()> {
    let Some(mut env) = Env::start("storage-scope").await? else {
        return Ok(());
    };
    let r = storage_scope(&mut env, false).await;
    env.finish(r).await
}

/// The same fleet file applied in a second namespace (a copy: same identity, name and
/// bucket) finds the bucket reserved to the fleet in the first: not its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_in_another_namespace_does_not_hold_the_originals_reservation() -> Result<()> {
    let Some(mut env) = Env::start("scope-copy").await? else {
        return Ok(());
    };
    let r = storage_scope(&mut env, true).await;
    env.finish(r).await
}

/// Rule V3 on the real API server: the fleet's bucket is reserved first, by another
/// identity, or (`copy`) by this identity for the same fleet name in another namespace.
async fn storage_scope(env: &mut Env, copy: bool) -> Result<()> {
    let f = env.persistent(&env.ns, "alpha", 3);
    let fleet = load_fleet(&f.yaml())?;
    // Another fleet reserved this bucket first.
    let mut objects = rendered_objects(&fleet)?;
    let at = objects
        .iter()
        .position(|o| o["kind"] == "CelldBucketReservation")
        .ok_or_else(|| anyhow::anyhow!("no reservation rendered"))?;
    let mut reservation = objects.remove(at);
    let name = reservation["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let holder = if copy {
        reservation["spec"]["fleetNamespace"] = json!("the-original-namespace");
        "(fleet the-original-namespace/alpha)".to_string()
    } else {
        let other = new_identity();
        reservation["spec"]["identity"] = json!(other);
        reservation["spec"]["fleetName"] = json!("someone-else");
        format!("identity {other}")
    };
    apply(&env.client, &reservation, SETUP, false).await?;
    for o in &objects {
        apply(&env.client, o, ARGO, false).await?;
    }
    env.healer(env.healer_options())?;
    let (_, _, msg) = wait_condition(
        env,
        "alpha",
        "Blocked",
        "True",
        Some("StorageScopeConflict"),
        Duration::from_secs(60),
    )
    .await?;
    ensure!(msg.contains(&name) && msg.contains(&holder), "{msg}");
    holds_for("no growth", Duration::from_secs(8), || async {
        Ok(replicas(env, "alpha").await? == Some(0))
    })
    .await?;
    let status = env
        .api::<CelldFleet>()
        .get("alpha")
        .await?
        .status
        .unwrap_or_default();
    ensure!(status.reservation.is_none(), "{:?}", status.reservation);
    // The test's cleanup removes the reservation it finds by name.
    Ok(())
}

async fn members_ready(env: &Env, identity: &str, prefix: &str) -> Result<usize> {
    Ok(member_pods(env, identity)
        .await?
        .iter()
        .filter(|p| {
            p.metadata.name.as_deref().is_some_and(|n| {
                n.strip_prefix(prefix)
                    .is_some_and(|o| o.parse::<u32>().is_ok())
            }) && pod_ready(p)
        })
        .count())
}

async fn identity(env: &mut Env) -> Result<()> {
    let original = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&original.yaml()).await?;
    let _h = env.healer(env.healer_options())?;
    wait_for(
        "alpha's 3 members ready",
        Duration::from_secs(120),
        || async {
            Ok((members_ready(env, &original.identity, "alpha-").await? == 3).then_some(()))
        },
    )
    .await?;

    // A claim of ours at an ordinal no member can have.
    let claims: kube::Api<PersistentVolumeClaim> = env.api();
    let huge = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-alpha-50000000", "labels": {IDENTITY: original.identity}},
        "spec": {"accessModes": ["ReadWriteOncePod"], "storageClassName": STORAGE_CLASS,
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))?;
    claims.create(&PostParams::default(), &huge).await?;
    let ev = wait_event(env, "alpha", "ObjectsIgnored", Duration::from_secs(60)).await?;
    ensure!(ev.note.contains("data-alpha-50000000"), "{ev}");

    // The copy: the same file with another name (and bucket).
    let mut copy = original.clone();
    copy.name = "copy".into();
    env.apply_fleet(&copy.yaml()).await?;
    let (_, _, msg) = wait_condition(
        env,
        "copy",
        "Blocked",
        "True",
        Some("IdentityConflict"),
        Duration::from_secs(60),
    )
    .await?;
    ensure!(msg.contains(&format!("{}/alpha", env.ns)), "{msg}");
    // The healer takes no action for it: no finalizer, no growth from the API default.
    holds_for("the copy left alone", Duration::from_secs(8), || async {
        let f = env.api::<CelldFleet>().get("copy").await?;
        ensure!(
            f.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()),
            "the healer put a finalizer on the copy"
        );
        ensure!(
            replicas(env, "copy").await? == Some(0),
            "the copy was scaled"
        );
        Ok(true)
    })
    .await?;
    let (s, r, _) = condition(env, "alpha", "Ready").await?.unwrap_or_default();
    ensure!(
        s == "True" && r == "Provisioned",
        "the original is not Provisioned: {s} {r}"
    );

    // Deleting the copy (protection turned off on purpose) deletes nothing of either.
    let fleets: kube::Api<CelldFleet> = env.api();
    fleets
        .patch(
            "copy",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deletionProtection": false}})),
        )
        .await?;
    let before = claims_named(env).await?;
    fleets.delete("copy", &DeleteParams::default()).await?;
    wait_for("the copy is gone", Duration::from_secs(60), || async {
        Ok(fleets.get_opt("copy").await?.is_none().then_some(()))
    })
    .await?;
    holds_for("every claim kept", Duration::from_secs(8), || async {
        let now = claims_named(env).await?;
        for name in &before {
            ensure!(now.contains(name), "claim {name} was deleted");
        }
        ensure!(
            members_ready(env, &original.identity, "alpha-").await? == 3,
            "the original lost a member"
        );
        Ok(true)
    })
    .await?;
    for o in 0..3 {
        ensure!(
            before.contains(&format!("data-alpha-{o}")),
            "no data-alpha-{o}"
        );
    }
    ensure!(before.contains(&"data-alpha-50000000".to_string()));
    Ok(())
}

/// Names of the namespace's claims that are not being deleted.
async fn claims_named(env: &Env) -> Result<Vec<String>> {
    Ok(env
        .api::<PersistentVolumeClaim>()
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.metadata.name)
        .collect())
}
