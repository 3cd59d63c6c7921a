//! Healer end-to-end, scenarios 1 and 2 of issue 5, and the healer's RBAC.
//!
//! 1. A PersistentFleet and a Bucket fleet applied from Git grow from their start (0 for
//!    the StatefulSet, by the start-at-zero admission policy; the API default 1 for the
//!    Deployment) to their members; the PersistentFleet's disks are zonal and bound in three zones.
//! 2. Re-applying Git as Argo CD (manager `argocd-controller`, forced) while the healer
//!    owns replicas: no conflict, replicas untouched, and a server-side dry-run apply of
//!    the Git manifests changes nothing (no OutOfSync caused by the healer).
//!
//! Plus: the healer runs with exactly the RBAC it declares and cannot read Secrets or
//! create workloads; the install bundle's roles match that declaration.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_gen::api::CelldFleet;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growth_from_git_and_git_reapply() -> Result<()> {
    let Some(mut env) = Env::start("growth").await? else {
        return Ok(());
    };
    let r = growth(&mut env).await;
    env.finish(r).await
}

async fn growth(env: &mut Env) -> Result<()> {
    let pf = env.persistent(&env.ns, "alpha", 3);
    let bf = env.bucket(&env.ns, "beta", 3);
    let alpha = env.apply_fleet(&pf.yaml()).await?;
    let beta = env.apply_fleet(&bf.yaml()).await?;
    // Git renders no replicas: the API server defaults them to 1.
    // The start-at-zero admission policy creates the StatefulSet with no member; the
    // Deployment gets the API default.
    ensure!(
        replicas(env, "alpha").await? == Some(0),
        "StatefulSet not created at 0 replicas"
    );
    ensure!(
        replicas(env, "beta").await? == Some(1),
        "Deployment not at the API default"
    );

    let started = std::time::Instant::now();
    let h = env.healer(env.healer_options())?;
    wait_ready_members(env, &pf.identity, 3, Duration::from_secs(120)).await?;
    wait_ready_members(env, &bf.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(
        env,
        "alpha",
        "Ready",
        "True",
        Some("Provisioned"),
        Duration::from_secs(60),
    )
    .await?;
    wait_condition(
        env,
        "beta",
        "Ready",
        "True",
        Some("Provisioned"),
        Duration::from_secs(60),
    )
    .await?;
    eprintln!(
        "[growth] both fleets grew to 3 ready members in {:?}",
        started.elapsed()
    );

    // Growth was written by the healer, one run: 0 -> 3 (all fresh claims).
    let evs = fleet_events(&env.client, &env.ns, Some("alpha")).await?;
    let adds: Vec<&FleetEvent> = evs.iter().filter(|e| e.action == "SetReplicas").collect();
    for e in &evs {
        eprintln!("[growth] alpha event: {e}");
    }
    ensure!(
        adds.len() == 1 && adds[0].note.contains("0 -> 3"),
        "expected one growth run 0 -> 3, got {adds:?}"
    );
    let fleets: Api<CelldFleet> = env.api();
    for f in ["alpha", "beta"] {
        let f = fleets.get(f).await?;
        ensure!(
            f.metadata.finalizers.as_ref().is_some_and(|v| v
                .iter()
                .any(|x| x == "fleet.celld.dev/lifecycle-protection")),
            "fleet finalizer missing on {}",
            f.name_any()
        );
        let st = f.status.context("no status")?;
        ensure!(
            st.desired_members == Some(3)
                && st.applied_members == Some(3)
                && st.ready_members == Some(3)
        );
    }

    // The members' application view (each stub answers a fresh, converged view). An
    // observation made while a member was still starting reports it incomplete; the
    // next one (a minute later, --application-interval) sees all three.
    let app = wait_for(
        "a converged status.application",
        Duration::from_secs(90),
        || async {
            let f = fleets.get("alpha").await?;
            Ok(f.status
                .filter(|s| !s.runtime_versions.is_empty())
                .and_then(|s| s.application.map(|a| (a, s.runtime_versions)))
                .filter(|(a, _)| a.converged == "True" && a.observed_members == 3))
        },
    )
    .await?;
    eprintln!(
        "[growth] alpha application view: {:?}, versions {:?}",
        app.0, app.1
    );
    ensure!(
        app.0.converged == "True" && app.0.observed_members == 3,
        "{app:?}"
    );

    // Each member's zone in status is its node's zone label (kubesim's nodes carry one),
    // for the StatefulSet's and the Deployment's members alike.
    for (fleet, identity) in [("alpha", &pf.identity), ("beta", &bf.identity)] {
        let zones = wait_for(
            &format!("{fleet}: every member's zone in status"),
            Duration::from_secs(60),
            || async {
                let nodes: Api<Node> = Api::all(env.client.clone());
                let mut want = BTreeMap::new();
                for p in member_pods(env, identity).await? {
                    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    let Some(node) = node else { return Ok(None) };
                    let zone = nodes
                        .get(&node)
                        .await?
                        .labels()
                        .get("topology.kubernetes.io/zone")
                        .cloned();
                    want.insert(p.name_any(), zone);
                }
                let states = fleets
                    .get(fleet)
                    .await?
                    .status
                    .map(|s| s.member_states)
                    .unwrap_or_default();
                let got: BTreeMap<String, Option<String>> =
                    states.into_iter().map(|m| (m.name, m.zone)).collect();
                Ok(
                    (got.len() == 3 && got == want && got.values().all(Option::is_some))
                        .then_some(got),
                )
            },
        )
        .await?;
        eprintln!("[growth] {fleet} member zones: {zones:?}");
    }

    // Zonal disks: every claim bound, three distinct zones.
    let pvcs: Api<PersistentVolumeClaim> = env.api();
    let pvs: Api<PersistentVolume> = Api::all(env.client.clone());
    let mut zones = BTreeSet::new();
    for o in 0..3 {
        let c = pvcs.get(&format!("data-alpha-{o}")).await?;
        let st = c.status.as_ref().and_then(|s| s.phase.clone());
        ensure!(st.as_deref() == Some("Bound"), "data-alpha-{o} is {st:?}");
        let pv = pvs
            .get(
                c.spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .context("no volume")?,
            )
            .await?;
        zones.insert(kubesim::objects::pv_zone(&pv).context("PV without zone")?);
    }
    ensure!(zones.len() == 3, "disks in zones {zones:?}");

    // The healer owns spec.replicas by server-side apply; Argo CD does not.
    let sts: StatefulSet = env.api::<StatefulSet>().get("alpha").await?;
    let owners = replica_owners(&sts);
    ensure!(
        owners == vec![("celld-healer".to_string(), "Apply".to_string())],
        "spec.replicas owned by {owners:?}"
    );

    // Endpoints.
    ensure!(env.h(h).http_status("/healthz").await? == 200);
    ensure!(env.h(h).http_status("/readyz").await? == 200);
    let m = env.h(h).metrics_text().await?;
    ensure!(
        sum_metric(
            &m,
            "celld_healer_actions_total{kind=\"SetReplicas\",outcome=\"ok\"}"
        ) >= 2.0,
        "metrics: {m}"
    );
    ensure!(sum_metric(&m, "celld_healer_leader") == 1.0);

    // Scenario 2: Git applied again, as Argo CD does on every sync.
    let rv_before = sts.metadata.resource_version.clone();
    let gen_before = sts.metadata.generation;
    let setreplicas_before = sum_metric(&m, "celld_healer_actions_total{kind=\"SetReplicas\"");
    apply_rendered(&env.client, &alpha, false)
        .await
        .context("re-applying alpha")?;
    apply_rendered(&env.client, &beta, false)
        .await
        .context("re-applying beta")?;
    let sts2: StatefulSet = env.api::<StatefulSet>().get("alpha").await?;
    ensure!(
        sts2.spec.replicas == Some(3),
        "replicas changed by the re-apply"
    );
    ensure!(
        sts2.metadata.generation == gen_before,
        "the re-apply changed the StatefulSet spec"
    );
    eprintln!(
        "[git-reapply] resourceVersion {:?} -> {:?}, generation {:?} -> {:?}",
        rv_before, sts2.metadata.resource_version, gen_before, sts2.metadata.generation
    );
    // Server-side dry-run of the Git manifests: nothing would change.
    for fleet in [&alpha, &beta] {
        for o in rendered_objects(fleet)? {
            let dry = apply(&env.client, &o, ARGO, true).await?;
            let (api, name) = dynamic_api(&env.client, &o)?;
            let live = api.get(&name).await?;
            let mut a = serde_json::to_value(&dry)?;
            let mut b = serde_json::to_value(&live)?;
            normalize(&mut a);
            normalize(&mut b);
            let mut diffs = Vec::new();
            diff(&a, &b, "", &mut diffs);
            ensure!(
                diffs.is_empty(),
                "dry-run apply of {} {name} differs from live: {diffs:?}",
                o["kind"]
            );
        }
    }
    eprintln!("[git-reapply] server-side dry-run of every Git manifest: no difference");
    // And the healer wrote nothing in response. It has no periodic resync and an
    // unchanged apply makes no watch event, so there is no reconcile to wait for: any
    // write of replicas (count or owner) fails at once.
    holds_for(
        "no replicas written after the re-apply",
        Duration::from_secs(3),
        || async {
            let m = env.h(h).metrics_text().await?;
            let sts: StatefulSet = env.api::<StatefulSet>().get("alpha").await?;
            ensure!(
                sum_metric(&m, "celld_healer_actions_total{kind=\"SetReplicas\"")
                    == setreplicas_before,
                "the healer wrote replicas again after the re-apply"
            );
            ensure!(
                replica_owners(&sts) == owners && sts.spec.replicas == Some(3),
                "spec.replicas or its ownership changed after the re-apply"
            );
            Ok(true)
        },
    )
    .await?;
    let m2 = env.h(h).metrics_text().await?;
    ensure!(
        sum_metric(&m2, "celld_healer_actions_total{kind=\"SetReplicas\"") == setreplicas_before,
        "the healer wrote replicas again after the re-apply"
    );
    let sts3: StatefulSet = env.api::<StatefulSet>().get("alpha").await?;
    ensure!(
        replica_owners(&sts3) == owners,
        "ownership of spec.replicas changed"
    );

    // The healer's apply body carries uid and resourceVersion: the API server refuses it
    // when either no longer matches (checked with the healer's own credential).
    let healer = kubesim::testing::client_from_kubeconfig(&env.healer_kubeconfig).await?;
    let as_healer: Api<StatefulSet> = Api::namespaced(healer, &env.ns);
    let body = |uid: &str, rv: &str, n: i32| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "alpha", "namespace": env.ns, "uid": uid, "resourceVersion": rv},
               "spec": {"replicas": n}})
    };
    let pp = kube::api::PatchParams::apply("celld-healer");
    let uid = sts3.metadata.uid.clone().unwrap_or_default();
    let rv = sts3.metadata.resource_version.clone().unwrap_or_default();
    let stale = as_healer
        .patch(
            "alpha",
            &pp,
            &kube::api::Patch::Apply(body(&uid, rv_before.as_deref().unwrap_or("1"), 2)),
        )
        .await;
    ensure!(
        matches!(&stale, Err(kube::Error::Api(s)) if s.code == 409),
        "apply with a stale resourceVersion: {stale:?}"
    );
    let other = as_healer
        .patch(
            "alpha",
            &pp,
            &kube::api::Patch::Apply(body("00000000-0000-0000-0000-000000000000", &rv, 2)),
        )
        .await;
    let other_code = match &other {
        Err(kube::Error::Api(s)) => s.code,
        _ => 0,
    };
    ensure!(
        other_code == 409 || other_code == 422,
        "apply with another uid: {other:?}"
    );
    let same = as_healer
        .patch("alpha", &pp, &kube::api::Patch::Apply(body(&uid, &rv, 3)))
        .await;
    ensure!(
        same.is_ok(),
        "apply with the current uid and resourceVersion: {same:?}"
    );
    ensure!(replicas(env, "alpha").await? == Some(3));
    eprintln!(
        "[git-reapply] preconditions in the apply body: stale resourceVersion -> 409, other uid -> {other_code}, current -> accepted"
    );
    Ok(())
}

/// Zones are status only: a healer whose RBAC lacks the `nodes` and `persistentvolumes`
/// rules (an install from before them, or a cluster that refuses them) starts, becomes
/// ready and grows a fleet; member zones stay empty, and the log (once) and
/// `celld_healer_watch_healthy{resource="nodes"}` say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_zone_rules_the_healer_still_heals() -> Result<()> {
    let Some(mut env) = Env::start("nozones").await? else {
        return Ok(());
    };
    let r = no_zones(&mut env).await;
    env.finish(r).await
}

async fn no_zones(env: &mut Env) -> Result<()> {
    // The healer's RBAC of its own install: the shared one serves the other tests.
    let own = env.own_install().await?;
    apply(
        &env.client,
        &own.cluster_role_without(&["nodes", "persistentvolumes"])?,
        SETUP,
        false,
    )
    .await?;
    let sa = kubesim::testing::client_from_kubeconfig(&own.kubeconfig).await?;
    wait_for("the nodes rule gone", Duration::from_secs(30), || {
        let sa = sa.clone();
        async move {
            let nodes = Api::<Node>::all(sa)
                .list(&ListParams::default().limit(1))
                .await;
            Ok(matches!(nodes, Err(kube::Error::Api(s)) if s.code == 403).then_some(()))
        }
    })
    .await?;
    let f = env.bucket(&env.ns, "nz", 3);
    env.apply_fleet(&f.yaml()).await?;
    let h = env.healer(own.healer_options(env))?;
    wait_condition(
        env,
        "nz",
        "Ready",
        "True",
        Some("Provisioned"),
        Duration::from_secs(120),
    )
    .await?;
    let fleets: Api<CelldFleet> = env.api();
    let states = wait_for("3 ready member states", Duration::from_secs(60), || async {
        let s = fleets
            .get("nz")
            .await?
            .status
            .map(|s| s.member_states)
            .unwrap_or_default();
        Ok((s.len() == 3 && s.iter().all(|m| m.state == "Ready")).then_some(s))
    })
    .await?;
    ensure!(
        states.iter().all(|m| m.zone.is_none()),
        "zones without the rules to read them: {states:?}"
    );
    ensure!(env.h(h).http_status("/readyz").await? == 200);
    let m = env.h(h).metrics_text().await?;
    let log = env.h(h).log_text();
    for r in ["nodes", "persistentvolumes"] {
        let healthy = sum_metric(
            &m,
            &format!("celld_healer_watch_healthy{{resource=\"{r}\"}}"),
        );
        ensure!(healthy == 0.0, "{r} watch reported healthy: {healthy}");
        let said = log
            .lines()
            .filter(|l| l.contains("member zones stay unknown") && l.contains(&format!("\"{r}\"")))
            .count();
        ensure!(said == 1, "the log says it {said} times for {r}");
    }
    eprintln!("[nozones] ready and grown without the zone rules; zones empty: {states:?}");
    Ok(())
}

/// Drops what legitimately differs between a dry-run answer and the live object: the
/// managed-fields timestamps.
fn normalize(v: &mut Value) {
    if let Some(mf) = v
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    {
        for m in mf {
            if let Some(o) = m.as_object_mut() {
                o.remove("time");
            }
        }
    }
}

fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()).collect::<BTreeSet<_>>() {
                diff(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}/{k}"),
                    out,
                );
            }
        }
        (x, y) if x == y => {}
        (x, y) => out.push(format!("{path}: dry-run {x} live {y}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healer_rbac_is_exactly_what_it_declares() -> Result<()> {
    let Some(env) = Env::start("rbac").await? else {
        return Ok(());
    };
    let r = rbac(&env).await;
    env.finish(r).await
}

async fn rbac(env: &Env) -> Result<()> {
    let healer = kubesim::testing::client_from_kubeconfig(&env.healer_kubeconfig).await?;
    // It may list what it watches...
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(healer.clone(), &env.ns);
    pods.list(&ListParams::default())
        .await
        .context("the healer cannot list Pods")?;
    // ...and nothing else.
    let secrets: Api<Secret> = Api::namespaced(healer.clone(), &env.ns);
    match secrets.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => anyhow::bail!("listing Secrets as the healer: expected 403, got {other:?}"),
    }
    match secrets.get("anything").await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => anyhow::bail!("reading a Secret as the healer: expected 403, got {other:?}"),
    }
    let sts: Api<StatefulSet> = Api::namespaced(healer.clone(), &env.ns);
    let body: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "serviceName": "x",
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    }))?;
    match sts.create(&PostParams::default(), &body).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => anyhow::bail!("creating a StatefulSet as the healer: expected 403, got {other:?}"),
    }
    let pods_get = pods.get("anything").await;
    ensure!(
        matches!(&pods_get, Err(kube::Error::Api(s)) if s.code == 403),
        "GET on a Pod should be forbidden (the healer reads from watches): {pods_get:?}"
    );
    eprintln!(
        "[rbac] the healer's ServiceAccount lists Pods, gets 403 on Secrets (list, get), on creating a StatefulSet and on GET of a Pod"
    );
    Ok(())
}

/// The install bundle (`celld-gen install`, as a user runs it) grants exactly what the
/// healer declares, in the right places, as its bindings grant it: everything in the
/// ClusterRole when every namespace is served; with `--watch-namespace`, only
/// cluster-wide reads bound cluster-wide, and the rest bound in each served namespace.
#[test]
fn install_bundle_rbac_matches_the_healer() -> Result<()> {
    use celld_healer::runtime::rbac::{Scope, Triple, triples, triples_of};
    ensure_built_generator()?;
    let bin = kubesim::testing::workspace_bin("celld-gen", "CELLD_GEN_BIN")?;
    // Where granted ("" cluster-wide, else the namespace of a RoleBinding) -> triples.
    let granted = |extra: &[&str]| -> Result<BTreeMap<String, Vec<Triple>>> {
        let out = std::process::Command::new(&bin)
            .args(["install", "--stdout"])
            .args(extra)
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "celld-gen install failed: {stderr}");
        let docs: Vec<Value> = String::from_utf8(out.stdout)?
            .split("\n---")
            .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
            .collect();
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        // (kind, namespace, name) -> rules.
        let roles: BTreeMap<(String, String, String), Vec<Triple>> = docs
            .iter()
            .filter(|v| v["kind"] == "ClusterRole" || v["kind"] == "Role")
            .map(|v| {
                let m = &v["metadata"];
                (
                    (text(&v["kind"]), text(&m["namespace"]), text(&m["name"])),
                    triples_of(&v["rules"]),
                )
            })
            .collect();
        let mut m: BTreeMap<String, Vec<Triple>> = BTreeMap::new();
        for b in docs
            .iter()
            .filter(|v| v["kind"] == "ClusterRoleBinding" || v["kind"] == "RoleBinding")
        {
            let ns = text(&b["metadata"]["namespace"]);
            let r = &b["roleRef"];
            let role_ns = if r["kind"] == "Role" {
                ns.clone()
            } else {
                String::new()
            };
            let rules = roles
                .get(&(text(&r["kind"]), role_ns, text(&r["name"])))
                .with_context(|| format!("a binding of a role the bundle lacks: {b}"))?;
            let e = m.entry(ns).or_default();
            e.extend(rules.iter().cloned());
            e.sort();
            e.dedup();
        }
        Ok(m)
    };
    let lease_ns = celld_gen::api::labels::HEALER_NAMESPACE.to_string();
    let all = granted(&[])?;
    let want: BTreeMap<_, _> = [
        (String::new(), triples(&[Scope::ClusterRead, Scope::Served])),
        (lease_ns.clone(), triples(&[Scope::LeaseNamespace])),
    ]
    .into();
    ensure!(
        all == want,
        "every namespace: rendered {all:#?}\nwanted {want:#?}"
    );
    let some = granted(&["--watch-namespace", "team-b,team-a"])?;
    let served = triples(&[Scope::Served, Scope::ServedBinding]);
    let want: BTreeMap<_, _> = [
        (String::new(), triples(&[Scope::ClusterRead])),
        (lease_ns, triples(&[Scope::LeaseNamespace])),
        ("team-a".to_string(), served.clone()),
        ("team-b".to_string(), served),
    ]
    .into();
    ensure!(
        some == want,
        "served namespaces: rendered {some:#?}\nwanted {want:#?}"
    );
    Ok(())
}

fn ensure_built_generator() -> Result<()> {
    if std::env::var("CELLD_E2E_NO_BUILD").is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = std::process::Command::new(cargo)
        .current_dir(kubesim::testing::repo_root())
        .args(["build", "-q", "-p", "celld-gen", "--bin", "celld-gen"])
        .status()?;
    ensure!(st.success(), "building celld-gen failed");
    Ok(())
}

/// "Never act on a fleet it cannot read completely": with one watch failing (its list is
/// forbidden), the healer is not ready and writes nothing; once the list works again it
/// acts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_action_while_a_watch_fails() -> Result<()> {
    let Some(mut env) = Env::start("watch-fails").await? else {
        return Ok(());
    };
    let r = watch_fails(&mut env).await;
    env.finish(r).await
}

async fn watch_fails(env: &mut Env) -> Result<()> {
    // The healer's RBAC of its own install: the shared one serves the other tests.
    let own = env.own_install().await?;
    apply(
        &env.client,
        &own.cluster_role_without(&["services"])?,
        SETUP,
        false,
    )
    .await?;
    let f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let h = env.healer(own.healer_options(env))?;
    env.h(h)
        .wait_log("watch failed", Duration::from_secs(30))
        .await?;
    holds_for(
        "no write while the Service watch fails",
        Duration::from_secs(8),
        || async {
            let fleet = env.api::<CelldFleet>().get("alpha").await?;
            let untouched = fleet.metadata.finalizers.is_none() && fleet.status.is_none();
            let not_ready = env.h(h).http_status("/readyz").await? == 503;
            Ok(untouched && not_ready && replicas(env, "alpha").await? == Some(0))
        },
    )
    .await?;
    let m = env.h(h).metrics_text().await?;
    ensure!(sum_metric(&m, "celld_healer_actions_total") == 0.0, "{m}");
    ensure!(sum_metric(&m, "celld_healer_watch_healthy{resource=\"services\"}") == 0.0);
    eprintln!(
        "[watch-fails] Service list forbidden: /readyz 503, no finalizer, no status, replicas at 1, no write"
    );
    own.restore(&env.client).await?;
    let t0 = std::time::Instant::now();
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(90)).await?;
    ensure!(env.h(h).http_status("/readyz").await? == 200);
    eprintln!(
        "[watch-fails] RBAC restored: the watch recovered and the fleet grew to 3 in {:?}",
        t0.elapsed()
    );
    Ok(())
}

/// One CelldFleet the healer cannot read (a field of a newer CRD than the healer knows:
/// the test adds one to the CRD) never stops the others: the fleet watch stays healthy,
/// the other fleet grows and becomes ready, and the unreadable one is left alone,
/// reported by an Event on itself and `celld_healer_fleets_unreadable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreadable_fleet_does_not_stop_the_others() -> Result<()> {
    let Some(mut env) = Env::start_with(
        "unreadable",
        EnvOptions::alone(
            "changes the cluster's CelldFleet CRD (a field this healer does not know, as a newer CRD would add)",
        ),
    )
    .await?
    else {
        return Ok(());
    };
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let r = unreadable(&mut env, &crds).await;
    // The CRD is the cluster's: restored whatever happened.
    let restored = newer_crd_field(&crds, false).await;
    let r = r.and(restored);
    env.finish(r).await
}

const CRD: &str = "celldfleets.fleet.celld.dev";
const NEWER_FIELD: &str = "fromANewerCrd";

/// Adds (or removes) a boolean `spec.fromANewerCrd` to the CelldFleet CRD.
async fn newer_crd_field(crds: &Api<CustomResourceDefinition>, add: bool) -> Result<()> {
    // A replace of the whole object: a merge patch would replace the versions list.
    let mut crd = serde_json::to_value(crds.get(CRD).await?)?;
    let props = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .and_then(Value::as_object_mut)
        .context("the CRD has no spec properties")?;
    let changed = if add {
        props
            .insert(NEWER_FIELD.into(), json!({"type": "boolean"}))
            .is_none()
    } else {
        props.remove(NEWER_FIELD).is_some()
    };
    if changed {
        crds.replace(CRD, &PostParams::default(), &serde_json::from_value(crd)?)
            .await?;
    }
    Ok(())
}

async fn unreadable(env: &mut Env, crds: &Api<CustomResourceDefinition>) -> Result<()> {
    newer_crd_field(crds, true).await?;
    let h = env.healer(env.healer_options())?;
    // The unreadable fleet: its file with the newer field (applied again until the API
    // server's handler has the new schema and keeps the field).
    let bad = env.bucket(&env.ns, "newer", 3);
    let mut objects = rendered_objects(&load_fleet(&bad.yaml())?)?;
    for o in objects.iter_mut().filter(|o| o["kind"] == "CelldFleet") {
        o["spec"]["fromANewerCrd"] = json!(true);
        // Deleted at the end; the healer, which never reads it, adds no finalizer.
        o["spec"]["deletionProtection"] = json!(false);
    }
    let fleets: Api<CelldFleet> = env.api();
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &kube::api::ApiResource::erase::<CelldFleet>(&()),
    );
    wait_for(
        "the newer field kept by the API server",
        Duration::from_secs(30),
        || {
            let (objects, raw) = (objects.clone(), raw.clone());
            let client = env.client.clone();
            async move {
                for o in &objects {
                    apply(&client, o, ARGO, false).await?;
                }
                let kept = raw.get("newer").await?.data["spec"]["fromANewerCrd"] == json!(true);
                Ok(kept.then_some(()))
            }
        },
    )
    .await?;
    ensure!(
        fleets.get("newer").await.is_err(),
        "the typed client reads the newer fleet: the test does not make an unreadable one"
    );
    // A fleet beside it is healed as usual.
    let good = env.bucket(&env.ns, "older", 3);
    env.apply_fleet(&good.yaml()).await?;
    wait_condition(
        env,
        "older",
        "Ready",
        "True",
        Some("Provisioned"),
        Duration::from_secs(120),
    )
    .await?;
    let event = wait_event(env, "newer", "FleetUnreadable", Duration::from_secs(30)).await?;
    ensure!(event.note.contains("fromANewerCrd"), "{}", event.note);
    let m = env.h(h).metrics_text().await?;
    ensure!(
        sum_metric(&m, "celld_healer_fleets_unreadable") == 1.0,
        "fleets_unreadable: {m}"
    );
    ensure!(
        sum_metric(&m, "celld_healer_watch_healthy{resource=\"celldfleets\"") >= 1.0,
        "the fleet watch is not healthy"
    );
    // Left alone: no finalizer, no status, its workload not grown.
    let newer = raw.get("newer").await?;
    ensure!(
        newer
            .metadata
            .finalizers
            .as_ref()
            .is_none_or(|f| f.is_empty())
            && newer.data.get("status").is_none_or(|s| s.is_null()),
        "the healer acted on the fleet it cannot read: {:?} {:?}",
        newer.metadata.finalizers,
        newer.data.get("status")
    );
    ensure!(
        replicas(env, "newer").await? == Some(1),
        "the unreadable fleet's workload changed"
    );
    // Gone: forgotten.
    raw.delete("newer", &Default::default()).await?;
    wait_for(
        "fleets_unreadable back to 0",
        Duration::from_secs(30),
        || async {
            let m = env.h(h).metrics_text().await?;
            Ok((sum_metric(&m, "celld_healer_fleets_unreadable") == 0.0).then_some(()))
        },
    )
    .await?;
    Ok(())
}

/// The healer checks its own permissions at start: with exactly its install's RBAC it
/// says so; given one more (a Role left by an older install, say) it reports it, in the
/// log, in `celld_healer_excess_permissions` and by an Event on its Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healer_reports_permissions_beyond_its_table() -> Result<()> {
    let Some(mut env) = Env::start("excess-rbac").await? else {
        return Ok(());
    };
    let r = excess_rbac(&mut env).await;
    env.finish(r).await
}

async fn excess_rbac(env: &mut Env) -> Result<()> {
    // The install for what this healer serves (the test's namespace), as an install's
    // RBAC and its healer's flags always agree.
    let ns = env.ns.clone();
    let own = env.own_install_with(&["--watch-namespace", &ns]).await?;
    let exact = env.healer(own.healer_options(env))?;
    wait_for(
        "the exact healer's review",
        Duration::from_secs(30),
        || async {
            Ok(env
                .h(exact)
                .log_text()
                .contains("permissions are those of its RBAC table")
                .then_some(()))
        },
    )
    .await?;
    let m = env.h(exact).metrics_text().await?;
    ensure!(sum_metric(&m, "celld_healer_excess_permissions") == 0.0);
    // Stopped (it releases the Lease): the next one leads, and only a leader writes
    // the Event.
    env.h_mut(exact).terminate();
    // A left-over grant in the healer's namespace.
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "left-over", "namespace": own.namespace},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "left-over", "namespace": own.namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "left-over"},
        "subjects": [{"kind": "ServiceAccount", "name": "celld-healer", "namespace": own.namespace}]
    });
    apply(&env.client, &role, SETUP, false).await?;
    apply(&env.client, &binding, SETUP, false).await?;
    let mut o = own.healer_options(env);
    o.identity = "healer-b".into();
    let more = env.healer(o)?;
    let expected = format!("core/secrets get in {}", own.namespace);
    wait_for("the excess reported", Duration::from_secs(30), || async {
        let m = env.h(more).metrics_text().await?;
        Ok((sum_metric(&m, "celld_healer_excess_permissions") == 1.0).then_some(()))
    })
    .await?;
    ensure!(
        env.h(more).log_text().contains(&expected),
        "the log does not name {expected}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), &own.namespace);
    let event = wait_for(
        "the ExcessPermissions Event",
        Duration::from_secs(30),
        || {
            let events = events.clone();
            async move {
                Ok(events
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some("ExcessPermissions")))
            }
        },
    )
    .await?;
    let note = event.note.unwrap_or_default();
    ensure!(note.contains(&expected), "{note}");
    ensure!(
        event.regarding.and_then(|r| r.kind).as_deref() == Some("Lease"),
        "the Event is not on the Lease"
    );
    Ok(())
}
