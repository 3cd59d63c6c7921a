//! Healer end-to-end: a healer installed with `celld-gen install --watch-namespace a,b`
//! serves those two namespaces with exactly the RBAC the bundle renders (a RoleBinding
//! per served namespace to the served ClusterRole, a read-only ClusterRole) and writes
//! nowhere else.
//!
//! Its own install (ServiceAccount, ClusterRoles, bindings, and the admission policies with
//! its own start-at-zero binding) sits beside the shared one that every other test uses:
//! the cluster-scoped names must not clash, and applying it must take nothing from the
//! first install (its disk deletions pass the same disk-protection policy).
//!
//! Then a served namespace is deleted while a protected fleet lives there: the healer's
//! RoleBinding holds (its access finalizer), so turning protection off still lets the
//! healer delete the fleet's workload and disks in order, and the namespace goes.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_gen::api::CelldFleet;
use celld_gen::api::labels::IDENTITY;
use celld_gen::api::rbac::{ACCESS_BINDING, ACCESS_FINALIZER};
use celld_gen::install::SERVED_ROLE;
use celld_gen::install::admission::FLEET_POLICY;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healer_serving_two_namespaces_writes_nowhere_else() -> Result<()> {
    let Some(mut env) = Env::start("namespaces").await? else {
        return Ok(());
    };
    let mut installed = Vec::new();
    let r = served(&mut env, &mut installed).await;
    // The second install's cluster-scoped RBAC (its namespaced objects go with the
    // test's namespaces).
    delete_cluster_rbac(&env.client, "namespaces", installed).await;
    env.finish(r).await
}

fn status_of(f: &CelldFleet) -> Option<(String, String, String)> {
    f.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Blocked")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn forbidden<T: std::fmt::Debug>(what: &str, r: kube::Result<T>) -> Result<()> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(()),
        other => anyhow::bail!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

async fn served(env: &mut Env, installed: &mut Vec<(String, String)>) -> Result<()> {
    let a = env.ns.clone();
    let b = env.extra_namespace("b").await?;
    let c = env.extra_namespace("c").await?;
    let inst = env.extra_namespace("healer").await?;

    // 1. The second install's RBAC, exactly as `celld-gen install` renders it.
    let watch = format!("{a},{b}");
    let bundle = install_bundle_with(&["--namespace", &inst, "--watch-namespace", &watch])?;
    let (mut roles, mut bindings) = (0, 0);
    for o in bundle.iter().filter(|o| {
        matches!(
            o["kind"].as_str(),
            Some(
                "ServiceAccount"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "Role"
                    | "RoleBinding"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
                    | "MutatingAdmissionPolicy"
                    | "MutatingAdmissionPolicyBinding"
            )
        )
    }) {
        apply(&env.client, o, SETUP, false).await?;
        let kind = o["kind"].as_str().unwrap_or_default().to_string();
        // Cluster-scoped objects only this install made (its RBAC and its own
        // start-at-zero binding; the policies are the shared install's, unchanged).
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        // The served ClusterRole is every install's (and grants nothing unbound): kept.
        if (kind.starts_with("Cluster") && name != SERVED_ROLE)
            || kind == "MutatingAdmissionPolicyBinding"
        {
            installed.push((
                kind,
                o["metadata"]["name"].as_str().unwrap_or_default().into(),
            ));
        } else if kind == "Role" {
            roles += 1;
        } else if kind == "RoleBinding" {
            bindings += 1;
        }
    }
    ensure!(
        roles == 1 && bindings == 3,
        "expected the lease Role, and a RoleBinding in {a}, {b} and for the lease: {roles} Roles, {bindings} RoleBindings"
    );
    let kubeconfig = env.dir.join("served.kubeconfig");
    write_sa_kubeconfig(&env.cluster, &inst, HEALER_SA, &kubeconfig).await?;

    // 2. The API server grants it the served namespaces, and only reads elsewhere.
    let sa = kubesim::testing::client_from_kubeconfig(&kubeconfig).await?;
    wait_for("the Roles in effect", Duration::from_secs(30), || {
        let sa = sa.clone();
        let (a, b) = (a.clone(), b.clone());
        async move {
            let ok = Api::<Pod>::namespaced(sa.clone(), &a)
                .list(&ListParams::default())
                .await
                .is_ok()
                && Api::<Pod>::namespaced(sa, &b)
                    .list(&ListParams::default())
                    .await
                    .is_ok();
            Ok(ok.then_some(()))
        }
    })
    .await?;
    forbidden(
        "listing Pods in an unserved namespace",
        Api::<Pod>::namespaced(sa.clone(), &c)
            .list(&ListParams::default())
            .await,
    )
    .await?;
    forbidden(
        "listing Pods cluster-wide",
        Api::<Pod>::all(sa.clone())
            .list(&ListParams::default())
            .await,
    )
    .await?;
    Api::<CelldFleet>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .context("the identity check needs every CelldFleet of the cluster")?;

    // 3. Fleets: `original` in the unserved namespace, `copy` (same identity, newer) and
    //    `beta` in served ones.
    let original = env.persistent(&c, "original", 3);
    env.apply_fleet(&original.yaml()).await?;
    // creationTimestamp has one-second resolution: make `original` strictly older, by
    // the API server's clock.
    let made = Api::<CelldFleet>::namespaced(env.client.clone(), &c)
        .get("original")
        .await?
        .metadata
        .creation_timestamp
        .context("original without creationTimestamp")?
        .0;
    wait_server_time(
        env,
        made + k8s_openapi::jiff::SignedDuration::from_secs(1),
        Duration::from_secs(30),
    )
    .await?;
    let mut copy = original.clone();
    copy.namespace = b.clone();
    copy.name = "copy".into();
    env.apply_fleet(&copy.yaml()).await?;
    let beta = env.persistent(&a, "beta", 3).protection(false);
    env.apply_fleet(&beta.yaml()).await?;

    let mut o = env.healer_options();
    o.namespace = Some(watch.clone());
    o.kubeconfig = Some(kubeconfig.clone());
    o.lease_namespace = Some(inst.clone());
    let h = env.healer(o)?;

    // 4. beta grows in a served namespace; copy is blocked by a fleet the healer may
    //    only read; original is never touched.
    wait_ready_members(env, &beta.identity, 3, Duration::from_secs(150)).await?;
    let fleets_b: Api<CelldFleet> = Api::namespaced(env.client.clone(), &b);
    let (_, _, msg) = wait_for(
        "copy Blocked by IdentityConflict",
        Duration::from_secs(60),
        || {
            let fleets_b = fleets_b.clone();
            async move {
                let f = fleets_b.get("copy").await?;
                Ok(status_of(&f).filter(|(s, r, _)| s == "True" && r == "IdentityConflict"))
            }
        },
    )
    .await?;
    ensure!(msg.contains(&format!("{c}/original")), "{msg}");
    let fleets_c: Api<CelldFleet> = Api::namespaced(env.client.clone(), &c);
    let sts_c: Api<StatefulSet> = Api::namespaced(env.client.clone(), &c);
    let sts_b: Api<StatefulSet> = Api::namespaced(env.client.clone(), &b);
    holds_for(
        "the unserved fleet untouched; the copy without finalizer and not grown",
        Duration::from_secs(6),
        || {
            let (fleets_c, fleets_b) = (fleets_c.clone(), fleets_b.clone());
            let (sts_c, sts_b) = (sts_c.clone(), sts_b.clone());
            async move {
                let f = fleets_c.get("original").await?;
                let untouched = f.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty())
                    && f.status.is_none();
                let copy = fleets_b.get("copy").await?;
                let copy_untouched = copy
                    .metadata
                    .finalizers
                    .as_ref()
                    .is_none_or(|f| f.is_empty());
                let at_zero = |s: StatefulSet| s.spec.replicas == Some(0);
                Ok(untouched
                    && copy_untouched
                    && at_zero(sts_c.get("original").await?)
                    && at_zero(sts_b.get("copy").await?))
            }
        },
    )
    .await?;
    let events_c = fleet_events(&env.client, &c, None).await?;
    ensure!(
        events_c.is_empty(),
        "Events in the unserved namespace: {events_c:?}"
    );
    eprintln!(
        "[namespaces] served {a},{b}: beta grew to 3; copy Blocked (IdentityConflict with {c}/original); {c} untouched"
    );

    // 5. Deleting beta: workload and claims go, under the Role's delete verbs. Only the
    //    fleet's protection is turned off: its claims are not marked deletable, so the
    //    disk-protection policy (the same objects both installs render) must let this
    //    second healer through as it lets the first.
    let fleets_a: Api<CelldFleet> = Api::namespaced(env.client.clone(), &a);
    fleets_a
        .patch(
            "beta",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"deletionProtection": false}})),
        )
        .await?;
    fleets_a.delete("beta", &DeleteParams::default()).await?;
    let claims_a: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), &a);
    wait_for(
        "beta and its disks deleted",
        Duration::from_secs(120),
        || {
            let (fleets_a, claims_a) = (fleets_a.clone(), claims_a.clone());
            let id = beta.identity.clone();
            async move {
                let fleet_gone = fleets_a.get_opt("beta").await?.is_none();
                let claims = claims_a
                    .list(&ListParams::default().labels(&format!("{IDENTITY}={id}")))
                    .await?;
                Ok((fleet_gone && claims.items.is_empty()).then_some(()))
            }
        },
    )
    .await?;
    ensure!(env.h(h).http_status("/readyz").await? == 200);
    eprintln!("[namespaces] beta deleted with its workload and claims by the Role-bound healer");

    // 6. The served namespace deleted while a protected fleet lives there. Its
    //    RoleBinding goes with the namespace like everything else, but it holds (the
    //    healer's finalizer while a fleet lives there), so the way out still works:
    //    protection off, and the healer deletes the fleet's workload and disks in order
    //    with its rights there; then it lets the binding go and the namespace is gone.
    let gamma = env.persistent(&a, "gamma", 3);
    env.apply_fleet(&gamma.yaml()).await?;
    wait_ready_members(env, &gamma.identity, 3, Duration::from_secs(150)).await?;
    let bindings_a: Api<RoleBinding> = Api::namespaced(env.client.clone(), &a);
    let holds = |b: &RoleBinding| {
        b.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == ACCESS_FINALIZER)
    };
    wait_for(
        "the healer's RoleBinding holds while gamma lives",
        Duration::from_secs(30),
        || async { Ok(holds(&bindings_a.get(ACCESS_BINDING).await?).then_some(())) },
    )
    .await?;
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    namespaces.delete(&a, &DeleteParams::default()).await?;
    wait_namespace_deletion_refused(&env.client, &a, FLEET_POLICY).await?;
    let binding = bindings_a
        .get_opt(ACCESS_BINDING)
        .await?
        .context("the healer's RoleBinding is gone while gamma lives")?;
    ensure!(
        binding.metadata.deletion_timestamp.is_some() && holds(&binding),
        "the namespace deletion did not reach the binding, or it does not hold: {:?}",
        binding.metadata
    );
    let t0 = std::time::Instant::now();
    Api::<CelldFleet>::namespaced(env.client.clone(), &a)
        .patch(
            "gamma",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"deletionProtection": false}})),
        )
        .await?;
    wait_for(
        "the namespace to be gone",
        Duration::from_secs(180),
        || async { Ok(namespaces.get_opt(&a).await?.is_none().then_some(())) },
    )
    .await?;
    // Unmarked, the disks could only go through the healer, under the binding's rights.
    let log = env.h(h).log_text();
    for n in 0..3 {
        ensure!(
            log.contains(&format!("DeleteClaim {{ name: \"data-gamma-{n}\"")),
            "the healer did not delete data-gamma-{n}"
        );
    }
    eprintln!(
        "[namespaces] {a} deleted with protected gamma: the RoleBinding held; protection off: gamma's workload and disks deleted by the healer, binding released, namespace gone {:?} later",
        t0.elapsed()
    );
    Ok(())
}
