//! Data safety on the real API server, with the install bundle as `celld-gen install`
//! renders it (CRD bounds, the two ValidatingAdmissionPolicies). No healer is needed: the
//! API server itself refuses.
//!
//! - The CRD refuses `members` 5000 and -1, through the `/scale` subresource (what
//!   `kubectl scale` and an HPA write) and through a plain patch; fewer members than
//!   zones are refused as validation refuses them.
//! - Deleting a protected CelldFleet is refused with a message that says how to delete it
//!   on purpose; so is the DELETE Argo CD sends when it prunes (foreground propagation).
//!   With `deletionProtection: false` applied from Git the same DELETE goes through.
//! - Deleting the namespace leaves every disk of a protected fleet (and the fleet): the
//!   namespace stays Terminating, the claims keep their uids; a claim that is not a fleet
//!   disk goes (when it comes first: the API server deletes a namespace's claims as one
//!   collection in name order and stops at the first refusal). The healer's own ServiceAccount may delete a fleet disk, an operator only
//!   after marking it. Releasing the fleet and marking its claims lets the namespace go.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use celld_e2e::*;
use celld_gen::api::CelldFleet;
use celld_gen::api::labels::IDENTITY;
use celld_gen::install::admission::{DISK_POLICY, FLEET_POLICY};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The API server's refusal of `r`: (HTTP code, message); an error if `r` succeeded.
fn refusal<T: std::fmt::Debug>(r: kube::Result<T>, what: &str) -> Result<(u16, String)> {
    match r {
        Ok(v) => bail!("{what} was accepted: {v:?}"),
        Err(kube::Error::Api(s)) => Ok((s.code, s.message)),
        Err(e) => Err(anyhow::Error::new(e).context(format!("{what}: not an API refusal"))),
    }
}

/// Waits until the admission policies answer (a new policy is enforced a moment after it
/// is created): a dry-run DELETE of `fleet` is refused.
async fn wait_policies_enforced(env: &Env, fleet: &str) -> Result<()> {
    wait_for(
        "the fleet deletion policy to be enforced",
        Duration::from_secs(30),
        || async move {
            let r = env
                .api::<CelldFleet>()
                .delete(fleet, &DeleteParams::default().dry_run())
                .await;
            Ok(match r {
                Err(kube::Error::Api(s)) if s.code == 403 => Some(()),
                _ => None,
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_bounds_members_on_scale_and_patch() -> Result<()> {
    let Some(env) = Env::start("bounds").await? else {
        return Ok(());
    };
    let r = bounds(&env).await;
    env.finish(r).await
}

async fn bounds(env: &Env) -> Result<()> {
    let f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let fleets = env.api::<CelldFleet>();
    let max = celld_gen::api::defaults::MAX_MEMBERS;
    for (members, expect) in [
        (5000, format!("less than or equal to {max}")),
        (-1, "greater than or equal to 1".to_string()),
    ] {
        // `kubectl scale celldfleet alpha --replicas=N` (and an HPA) write /scale.
        let (code, msg) = refusal(
            fleets
                .patch_scale(
                    "alpha",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": members}})),
                )
                .await,
            &format!("/scale to {members}"),
        )?;
        ensure!(
            code == 422 && msg.contains(&expect),
            "/scale {members}: {code} {msg}"
        );
        eprintln!("[bounds] /scale replicas {members}: {code} {msg}");
        let (code, msg) = refusal(
            fleets
                .patch(
                    "alpha",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"members": members}})),
                )
                .await,
            &format!("patch members {members}"),
        )?;
        ensure!(
            code == 422 && msg.contains(&expect),
            "patch {members}: {code} {msg}"
        );
        eprintln!("[bounds] patch spec.members {members}: {code} {msg}");
    }
    // Fewer members than zones: validation's rule, now the API server's too.
    let (code, msg) = refusal(
        fleets
            .patch_scale(
                "alpha",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 2}})),
            )
            .await,
        "/scale to 2 over 3 zones",
    )?;
    ensure!(
        code == 422 && msg.contains("at least the number of zones"),
        "{code} {msg}"
    );
    eprintln!("[bounds] /scale replicas 2 over 3 zones: {code} {msg}");
    // In range: accepted, and the value is stored.
    let s = fleets
        .patch_scale(
            "alpha",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": max}})),
        )
        .await?;
    ensure!(s.spec.and_then(|s| s.replicas) == Some(max));
    ensure!(fleets.get("alpha").await?.spec.members == Some(max));
    // The policies were type-checked against the CRD without a warning.
    for name in [FLEET_POLICY, DISK_POLICY] {
        let p = Api::<ValidatingAdmissionPolicy>::all(env.client.clone())
            .get(name)
            .await?;
        let warnings = p
            .status
            .and_then(|s| s.type_checking)
            .and_then(|t| t.expression_warnings)
            .unwrap_or_default();
        ensure!(warnings.is_empty(), "{name}: {warnings:?}");
    }
    eprintln!("[bounds] /scale {max} accepted; both policies type-check without warnings");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_fleet_deletion_is_refused_until_protection_is_off() -> Result<()> {
    let Some(env) = Env::start("fleet-deletion").await? else {
        return Ok(());
    };
    let r = fleet_deletion(&env).await;
    env.finish(r).await
}

async fn fleet_deletion(env: &Env) -> Result<()> {
    let fleets = env.api::<CelldFleet>();
    // Absent means protected; `true` is the same.
    let implicit = env.bucket(&env.ns, "implicit", 3);
    let explicit = env.bucket(&env.ns, "explicit", 3).protection(true);
    env.apply_fleet(&implicit.yaml()).await?;
    env.apply_fleet(&explicit.yaml()).await?;
    wait_policies_enforced(env, "implicit").await?;
    for name in ["implicit", "explicit"] {
        let (code, msg) = refusal(
            fleets.delete(name, &DeleteParams::default()).await,
            &format!("deleting {name}"),
        )?;
        ensure!(code == 403, "{code} {msg}");
        for needle in [
            FLEET_POLICY,
            &format!("CelldFleet {}/{name} is protected from deletion", env.ns),
            "set spec.deletionProtection: false in Git",
            &format!("kubectl patch celldfleet {name} -n {}", env.ns),
            "then delete it",
        ] {
            ensure!(msg.contains(needle), "{name}: no {needle:?} in: {msg}");
        }
        eprintln!("[fleet-deletion] kubectl delete {name}: {code} {msg}");
        // What Argo CD sends when it prunes (PrunePropagationPolicy=foreground, its
        // default) or deletes an Application's resources.
        let (code, msg) = refusal(
            fleets.delete(name, &DeleteParams::foreground()).await,
            &format!("deleting {name} as Argo CD prunes"),
        )?;
        ensure!(
            code == 403 && msg.contains("protected from deletion"),
            "{code} {msg}"
        );
        ensure!(
            fleets
                .get(name)
                .await?
                .metadata
                .deletion_timestamp
                .is_none(),
            "{name} is being deleted"
        );
    }
    eprintln!(
        "[fleet-deletion] foreground (Argo CD prune) deletes refused too; both fleets intact"
    );
    // Deliberate deletion: protection off in Git, synced, then the same DELETE.
    let implicit = implicit.protection(false);
    env.apply_fleet(&implicit.yaml()).await?;
    let t0 = Instant::now();
    fleets
        .delete("implicit", &DeleteParams::foreground())
        .await?;
    wait_for("implicit to be gone", Duration::from_secs(30), || async {
        Ok(fleets.get_opt("implicit").await?.is_none().then_some(()))
    })
    .await?;
    eprintln!(
        "[fleet-deletion] after deletionProtection: false from Git the foreground delete went through ({:?})",
        t0.elapsed()
    );
    ensure!(fleets.get_opt("explicit").await?.is_some());
    Ok(())
}

/// A client of a ServiceAccount `celld-healer` in `ns`, allowed by RBAC to delete claims
/// in the test's namespace.
async fn impostor(env: &Env, ns: &str) -> Result<Client> {
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "celld-healer", "namespace": ns}});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "namesake", "namespace": env.ns},
        "rules": [{"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["delete"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "namesake", "namespace": env.ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "namesake"},
        "subjects": [{"kind": "ServiceAccount", "name": "celld-healer", "namespace": ns}]});
    for o in [&sa, &role, &binding] {
        apply(&env.client, o, SETUP, false).await?;
    }
    let path = env.dir.join("namesake.kubeconfig");
    write_sa_kubeconfig(&env.cluster, ns, "celld-healer", &path).await?;
    kubesim::testing::client_from_kubeconfig(&path).await
}

/// A healer-credential client (the ServiceAccount the disk policy exempts).
async fn healer_client(env: &Env) -> Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(&env.healer_kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await?;
    Ok(Client::try_from(cfg)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_deletion_keeps_every_disk() -> Result<()> {
    let Some(mut env) = Env::start("namespace-deletion").await? else {
        return Ok(());
    };
    let r = namespace_deletion(&mut env).await;
    env.finish(r).await
}

async fn namespace_deletion(env: &mut Env) -> Result<()> {
    // A ServiceAccount named like the healer, in a namespace of its own, that may delete
    // claims here: the disk policy asks for the healer's permission, not its name.
    let elsewhere = env.extra_namespace("impostor").await?;
    let namesake = impostor(env, &elsewhere).await?;
    let env: &Env = env;
    let f = env.persistent(&env.ns, "vault", 3);
    env.apply_fleet(&f.yaml()).await?;
    // No healer here: three members by hand, as a human with kubectl would.
    env.api::<StatefulSet>()
        .patch_scale(
            "vault",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    let claims_api: Api<PersistentVolumeClaim> = env.api();
    let claim = |name: &str, labelled: bool| -> Result<PersistentVolumeClaim> {
        let mut labels = json!({});
        if labelled {
            labels[IDENTITY] = json!(f.identity);
        }
        Ok(serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": env.ns, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))?)
    };
    // A claim that is no fleet's disk goes with its namespace as always. (Named to come
    // before the fleet's: the API server deletes a namespace's claims as one collection, in
    // name order, and stops at the first refusal, so claims after a refused one wait too.)
    claims_api
        .create(&PostParams::default(), &claim("cache", false)?)
        .await?;
    // One fleet disk deleted by hand: refused, then allowed once marked.
    claims_api
        .create(&PostParams::default(), &claim("data-vault-7", true)?)
        .await?;
    let (code, msg) = refusal(
        claims_api
            .delete("data-vault-7", &DeleteParams::default())
            .await,
        "deleting a fleet disk by hand",
    )?;
    ensure!(
        code == 403
            && msg.contains(DISK_POLICY)
            && msg.contains(&format!("identity {}", f.identity))
            && msg.contains(&format!(
                "kubectl annotate pvc data-vault-7 -n {} fleet.celld.dev/deletion-allowed=true",
                env.ns
            )),
        "{code} {msg}"
    );
    eprintln!("[namespace-deletion] kubectl delete pvc data-vault-7: {code} {msg}");
    allow_claim_deletion(&claims_api, "data-vault-7").await?;
    claims_api
        .delete("data-vault-7", &DeleteParams::default())
        .await?;
    // The healer's own ServiceAccount deletes a fleet disk without a mark.
    claims_api
        .create(&PostParams::default(), &claim("data-vault-8", true)?)
        .await?;
    Api::<PersistentVolumeClaim>::namespaced(healer_client(env).await?, &env.ns)
        .delete("data-vault-8", &DeleteParams::default())
        .await
        .context("the healer deleting a fleet disk")?;
    claims_api
        .create(&PostParams::default(), &claim("data-vault-9", true)?)
        .await?;
    let (code, msg) = refusal(
        Api::<PersistentVolumeClaim>::namespaced(namesake, &env.ns)
            .delete("data-vault-9", &DeleteParams::default())
            .await,
        "a celld-healer ServiceAccount of another namespace deleting a fleet disk",
    )?;
    ensure!(code == 403 && msg.contains(DISK_POLICY), "{code} {msg}");
    allow_claim_deletion(&claims_api, "data-vault-9").await?;
    claims_api
        .delete("data-vault-9", &DeleteParams::default())
        .await?;
    eprintln!(
        "[namespace-deletion] marked claim deleted by hand; unmarked claim deleted by the healer's ServiceAccount; refused to a celld-healer ServiceAccount of {elsewhere}: {code}"
    );

    let disks: Vec<(String, String)> = claims_api
        .list(&ListParams::default().labels(&format!("{IDENTITY}={}", f.identity)))
        .await?
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| {
            (
                c.metadata.name.unwrap_or_default(),
                c.metadata.uid.unwrap_or_default(),
            )
        })
        .collect();
    let mut names: Vec<&str> = disks.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    ensure!(
        names == ["data-vault-0", "data-vault-1", "data-vault-2"],
        "fleet disks: {names:?}"
    );

    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    let t0 = Instant::now();
    namespaces.delete(&env.ns, &DeleteParams::default()).await?;
    // The namespace controller deletes what it can and reports what it could not: both
    // policies' refusals, once the Pods and the unlabelled claim are gone.
    let failure = wait_for(
        "the namespace controller to report the refused deletions",
        Duration::from_secs(90),
        || async {
            let ns = namespaces.get(&env.ns).await?;
            let pods_gone = member_pods(env, &f.identity).await?.is_empty();
            let cache_gone = claims_api.get_opt("cache").await?.is_none();
            let msg = ns
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "NamespaceDeletionContentFailure" && c.status == "True")
                .and_then(|c| c.message);
            // The controller rewrites its condition on each pass: a message from a pass
            // that still found Pods to delete is not the final report yet.
            Ok(msg.filter(|m| {
                pods_gone && cache_gone && m.contains(FLEET_POLICY) && m.contains(DISK_POLICY)
            }))
        },
    )
    .await?;
    ensure!(
        failure.contains(FLEET_POLICY) && failure.contains(DISK_POLICY),
        "{failure}"
    );
    eprintln!(
        "[namespace-deletion] after {:?}: members and the unlabelled claim gone; the namespace reports: {failure}",
        t0.elapsed()
    );
    holds_for(
        "every fleet disk and the fleet stay while the namespace is Terminating",
        Duration::from_secs(10),
        || async {
            let ns = namespaces.get(&env.ns).await?;
            let terminating = ns.status.and_then(|s| s.phase).as_deref() == Some("Terminating");
            let fleet = env.api::<CelldFleet>().get_opt("vault").await?;
            let mut kept = true;
            for (name, uid) in &disks {
                let c = claims_api.get_opt(name).await?;
                kept &= c.is_some_and(|c| {
                    c.metadata.uid.as_ref() == Some(uid) && c.metadata.deletion_timestamp.is_none()
                });
            }
            Ok(terminating
                && kept
                && fleet.is_some_and(|f| f.metadata.deletion_timestamp.is_none()))
        },
    )
    .await?;
    eprintln!(
        "[namespace-deletion] namespace Terminating; CelldFleet vault and {} disks kept with their uids",
        disks.len()
    );
    // The operator decides: protection off, every disk marked. The namespace goes.
    let t1 = Instant::now();
    release_protection(&env.client, &env.ns).await?;
    wait_for(
        "the namespace to be gone",
        Duration::from_secs(150),
        || async { Ok(namespaces.get_opt(&env.ns).await?.is_none().then_some(())) },
    )
    .await?;
    eprintln!(
        "[namespace-deletion] released (protection off, disks marked): namespace gone {:?} later",
        t1.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_deletion_with_protection_off_lets_the_healer_delete_in_order() -> Result<()> {
    let Some(mut env) = Env::start("namespace-release").await? else {
        return Ok(());
    };
    let r = namespace_release(&mut env).await;
    env.finish(r).await
}

/// The operator's way out of a Terminating namespace with the healer running: protection
/// off on the fleet, no claim marked by hand. The namespace controller's next attempt
/// deletes the fleet, and the healer deletes its disks (its ServiceAccount is exempt).
async fn namespace_release(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "vault", 3);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    let claims_api: Api<PersistentVolumeClaim> = env.api();
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    namespaces.delete(&env.ns, &DeleteParams::default()).await?;
    wait_namespace_deletion_refused(&env.client, &env.ns, FLEET_POLICY).await?;
    let disks = claims_api
        .list(&ListParams::default().labels(&format!("{IDENTITY}={}", f.identity)))
        .await?
        .items
        .len();
    ensure!(disks == 3, "{disks} disks");
    let t0 = Instant::now();
    env.api::<CelldFleet>()
        .patch(
            "vault",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deletionProtection": false}})),
        )
        .await?;
    wait_for(
        "the namespace to be gone",
        Duration::from_secs(150),
        || async { Ok(namespaces.get_opt(&env.ns).await?.is_none().then_some(())) },
    )
    .await?;
    // Unmarked, the disks could only go through the healer (its log names each one).
    let log = env.h(0).log_text();
    for n in 0..3 {
        ensure!(
            log.contains(&format!("DeleteClaim {{ name: \"data-vault-{n}\"")),
            "the healer did not delete data-vault-{n}"
        );
    }
    eprintln!(
        "[namespace-release] protection off: fleet, {disks} unmarked disks (deleted by the healer) and namespace gone {:?} later",
        t0.elapsed()
    );
    Ok(())
}
