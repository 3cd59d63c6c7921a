//! The rendered manifests against the real control plane, applied the way Argo CD does:
//! `kubectl apply --server-side --field-manager=argocd-controller` over the kustomization
//! tree (Argo CD runs kubectl's server-side apply with that manager).
//!
//! - every golden example applies with no error and no warning;
//! - zero drift on first sync: `kubectl diff --server-side` reports nothing, and a real
//!   re-apply leaves every object's resourceVersion untouched;
//! - with replicas set by hand (no healer), a PersistentFleet's members get disks in their
//!   own zones and become Ready, and a Bucket fleet's members become Ready.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::GOLDEN;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use kubesim::objects::pv_zone;
use kubesim::testing::{
    Cluster, KubeSim, KubeSimOptions, create_namespace, delete_namespace, e2e_cluster, pod_ready,
    repo_root, wait_for,
};
use serde_json::Value;

const MANAGER: &str = "argocd-controller";

/// The kubectl built with the control plane, for the pinned version.
fn kubectl() -> Result<PathBuf> {
    let env = std::fs::read_to_string(repo_root().join("tests/k8s-version.env"))?;
    let version = env
        .lines()
        .find_map(|l| l.strip_prefix("K8S_VERSION="))
        .context("K8S_VERSION missing from tests/k8s-version.env")?;
    let p = repo_root().join(format!("tests/.cluster/bin/{}/kubectl", version.trim()));
    ensure!(
        p.is_file(),
        "{} not built (run tests/controlplane/build.sh)",
        p.display()
    );
    Ok(p)
}

async fn run_kubectl(cluster: &Cluster, args: &[&str]) -> Result<Output> {
    let out = tokio::process::Command::new(kubectl()?)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(args)
        .output()
        .await
        .context("running kubectl")?;
    Ok(out)
}

/// Runs kubectl, requiring success and no `Warning:` on stderr. Returns stdout.
async fn kubectl_clean(cluster: &Cluster, args: &[&str]) -> Result<String> {
    let out = run_kubectl(cluster, args).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "kubectl {} failed: {stderr}",
        args.join(" ")
    );
    ensure!(
        !stderr.contains("Warning:"),
        "kubectl {} warned: {stderr}",
        args.join(" ")
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Renders the install bundle and applies its CRDs, waiting until they are Established.
async fn install_crds(cluster: &Cluster, dir: &Path) -> Result<()> {
    let crds = dir.join("crds");
    std::fs::create_dir_all(&crds)?;
    for f in celld_gen::install::render(&celld_gen::install::InstallOptions::default()) {
        if let Some(name) = f.path.strip_prefix("crds/") {
            std::fs::write(crds.join(name), f.text)?;
        }
    }
    let crds = crds.to_string_lossy().into_owned();
    kubectl_clean(
        cluster,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            MANAGER,
            "-f",
            &crds,
        ],
    )
    .await?;
    kubectl_clean(
        cluster,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &crds,
        ],
    )
    .await?;
    Ok(())
}

/// Applies a kustomization as Argo CD syncs it; returns kubectl's output.
async fn argo_apply(cluster: &Cluster, kustomization: &str) -> Result<String> {
    kubectl_clean(
        cluster,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            MANAGER,
            "-k",
            kustomization,
        ],
    )
    .await
}

/// The golden tree's fleet namespaces.
fn golden_namespaces() -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(repo_root().join("golden"))? {
        let e = e?;
        if e.file_type()?.is_dir() {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    ensure!(!out.is_empty(), "golden/ has no fleets");
    Ok(out)
}

/// Deletes a namespace of golden fleets. The fleets are protected (the examples leave
/// `deletionProtection` out) and their claims are fleet disks: when the install bundle's
/// admission policies are in the cluster (another test installed them), both are released
/// first, as an operator would.
async fn delete_golden_namespace(client: &Client, ns: &str) -> Result<()> {
    celld_e2e::release_protection(client, ns).await?;
    delete_namespace(client, ns, Duration::from_secs(120)).await
}

async fn recreate_namespace(client: &Client, ns: &str) -> Result<()> {
    delete_golden_namespace(client, ns).await?;
    create_namespace(client, ns).await
}

/// Every object of a kustomization as (kind/namespace/name, resourceVersion, generation).
async fn versions(cluster: &Cluster, kustomization: &str) -> Result<Vec<(String, String, i64)>> {
    let text = kubectl_clean(cluster, &["get", "-k", kustomization, "-o", "json"]).await?;
    let list: Value = serde_json::from_str(&text)?;
    let items = list["items"]
        .as_array()
        .context("kubectl get returned no items")?;
    let mut out: Vec<(String, String, i64)> = items
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            (
                format!(
                    "{}/{}/{}",
                    o["kind"].as_str().unwrap_or(""),
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap_or("")
                ),
                m["resourceVersion"].as_str().unwrap_or("").to_string(),
                m["generation"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Deletes what a kustomization created (namespaced objects go with their namespace; the
/// cluster-scoped reservations are deleted here: the examples' own, by name, since other
/// tests' reservations live beside them).
async fn delete_reservations(cluster: &Cluster) -> Result<()> {
    let mut args = vec![
        "delete".to_string(),
        "celldbucketreservations.fleet.celld.dev".to_string(),
        "--ignore-not-found".to_string(),
        "--wait=true".to_string(),
    ];
    let before = args.len();
    for o in celld_e2e::gitops::golden_objects()? {
        if o["kind"] == "CelldBucketReservation"
            && let Some(name) = o["metadata"]["name"].as_str()
        {
            args.push(name.to_string());
        }
    }
    ensure!(args.len() > before, "no CelldBucketReservation in golden/");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _ = run_kubectl(cluster, &args).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_examples_apply_like_argocd_without_warnings_or_drift() -> Result<()> {
    let Some(cluster) =
        e2e_cluster("golden_examples_apply_like_argocd_without_warnings_or_drift").await
    else {
        return Ok(());
    };
    let _lock = tokio::task::block_in_place(|| {
        cluster.lock(
            "golden_examples_apply_like_argocd_without_warnings_or_drift",
            GOLDEN,
        )
    })?;
    let tmp = tempdir("golden-apply")?;
    install_crds(&cluster, &tmp).await?;
    let namespaces = golden_namespaces()?;
    for ns in &namespaces {
        recreate_namespace(&cluster.client, ns).await?;
    }
    let golden = repo_root().join("golden").to_string_lossy().into_owned();
    let result = async {
        // First sync: no error, no warning.
        let out = argo_apply(&cluster, &golden).await?;
        let applied = out
            .lines()
            .filter(|l| l.contains("serverside-applied"))
            .count();
        let files = count_objects(&repo_root().join("golden"))?;
        ensure!(
            applied == files,
            "{applied} objects applied, {files} rendered:\n{out}"
        );
        // Zero drift: a server-side dry-run diff finds nothing (exit 0 means no difference).
        let diff = run_kubectl(
            &cluster,
            &[
                "diff",
                "--server-side",
                "--field-manager",
                MANAGER,
                "-k",
                &golden,
            ],
        )
        .await?;
        ensure!(
            diff.status.success(),
            "kubectl diff after the first sync (exit {:?}):\n{}{}",
            diff.status.code(),
            String::from_utf8_lossy(&diff.stdout),
            String::from_utf8_lossy(&diff.stderr)
        );
        // And a real second sync changes nothing: every resourceVersion stays.
        let before = versions(&cluster, &golden).await?;
        argo_apply(&cluster, &golden).await?;
        let after = versions(&cluster, &golden).await?;
        ensure!(
            before == after,
            "re-apply changed objects:\nbefore {before:#?}\nafter {after:#?}"
        );
        eprintln!("golden: {applied} objects applied, no warning, no drift");
        Ok(())
    }
    .await;
    for ns in &namespaces {
        delete_golden_namespace(&cluster.client, ns).await?;
    }
    delete_reservations(&cluster).await?;
    result
}

/// Objects in the golden tree: every YAML file except the kustomizations.
fn count_objects(dir: &Path) -> Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            n += count_objects(&p)?;
        } else if p.extension().is_some_and(|x| x == "yaml")
            && p.file_name().is_some_and(|f| f != "kustomization.yaml")
        {
            n += 1;
        }
    }
    Ok(n)
}

fn tempdir(prefix: &str) -> Result<PathBuf> {
    let d = std::env::temp_dir().join(kubesim::testing::unique_name(prefix));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// Zone label of the node a Pod runs on.
async fn pod_zone(client: &Client, pod: &Pod) -> Result<String> {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("pod not bound")?;
    let n = Api::<Node>::all(client.clone()).get(&node).await?;
    n.metadata
        .labels
        .and_then(|l| l.get("topology.kubernetes.io/zone").cloned())
        .context("node without zone")
}

async fn ready_pods(client: &Client, ns: &str, want: usize) -> Result<Vec<Pod>> {
    ready_members(client, ns, "fleet.celld.dev/identity", want).await
}

/// Waits for `want` Ready Pods matching `selector` in `ns`.
async fn ready_members(client: &Client, ns: &str, selector: &str, want: usize) -> Result<Vec<Pod>> {
    wait_for(
        &format!("{want} Ready members ({selector}) in {ns}"),
        Duration::from_secs(120),
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), ns)
                .list(&ListParams::default().labels(selector))
                .await?;
            let ready: Vec<Pod> = pods.items.into_iter().filter(pod_ready).collect();
            Ok((ready.len() == want).then_some(ready))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_scaled_fleets_get_zonal_disks_and_become_ready() -> Result<()> {
    let Some(cluster) = e2e_cluster("hand_scaled_fleets_get_zonal_disks_and_become_ready").await
    else {
        return Ok(());
    };
    let lock = tokio::task::block_in_place(|| {
        cluster.lock(
            "hand_scaled_fleets_get_zonal_disks_and_become_ready",
            GOLDEN,
        )
    })?;
    let client = cluster.client.clone();
    // The slot's node names and address ranges, in the zones the examples name (kubesim's
    // defaults, us-east-1a..c, which no slot uses).
    let defaults = KubeSimOptions::default();
    let sim = KubeSim::spawn(
        &cluster,
        KubeSimOptions {
            zones: defaults.zones,
            region: defaults.region,
            ..KubeSimOptions::for_slot(&lock.slot)
        },
    )
    .await?;
    let tmp = tempdir("golden-scale")?;
    install_crds(&cluster, &tmp).await?;
    // The examples name their StorageClass gp3 and their ServiceAccounts; here gp3 is
    // kubesim's zonal disk, as EBS gp3 would be on AWS.
    let setup = tmp.join("setup.yaml");
    std::fs::write(
        &setup,
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gp3}\n\
         provisioner: kubesim.celld.dev/disk\nvolumeBindingMode: WaitForFirstConsumer\nreclaimPolicy: Delete\n",
    )?;
    recreate_namespace(&client, "ledger").await?;
    recreate_namespace(&client, "shop").await?;
    let result = async {
        kubectl_clean(
            &cluster,
            &["apply", "--server-side", "-f", &setup.to_string_lossy()],
        )
        .await?;
        kubectl_clean(
            &cluster,
            &["-n", "ledger", "create", "serviceaccount", "ledger"],
        )
        .await?;
        kubectl_clean(
            &cluster,
            &["-n", "shop", "create", "serviceaccount", "storefront"],
        )
        .await?;
        // persistent-platform runs on a dedicated pool: one node per zone labelled
        // and tainted for it, with the classes and the pull Secret it names.
        let pool = dedicate_pool(&client, &lock.slot.node_prefix()).await?;
        let platform = tmp.join("platform.yaml");
        std::fs::write(&platform, PLATFORM_SETUP)?;
        kubectl_clean(
            &cluster,
            &["apply", "--server-side", "-f", &platform.to_string_lossy()],
        )
        .await?;
        for fleet in [
            "ledger/persistent",
            "shop/bucket-deployment",
            "ledger/persistent-platform",
        ] {
            let dir = repo_root().join("golden").join(fleet);
            argo_apply(&cluster, &dir.to_string_lossy()).await?;
        }
        // No healer here: replicas by hand, as a human with kubectl would.
        kubectl_clean(
            &cluster,
            &[
                "-n",
                "ledger",
                "scale",
                "statefulset/persistent",
                "--replicas=3",
            ],
        )
        .await?;
        kubectl_clean(
            &cluster,
            &[
                "-n",
                "shop",
                "scale",
                "deployment/bucket-deployment",
                "--replicas=3",
            ],
        )
        .await?;
        kubectl_clean(
            &cluster,
            &[
                "-n",
                "ledger",
                "scale",
                "statefulset/persistent-platform",
                "--replicas=3",
            ],
        )
        .await?;

        let pods = ready_members(&client, "ledger", PERSISTENT, 3).await?;
        let mut zones = Vec::new();
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let zone = pod_zone(&client, pod).await?;
            let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "ledger")
                .get(&format!("data-{name}"))
                .await?;
            let phase = claim
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            ensure!(phase == "Bound", "claim data-{name} is {phase}");
            let pv_name = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .unwrap_or_default();
            let pv = Api::<PersistentVolume>::all(client.clone())
                .get(&pv_name)
                .await?;
            ensure!(
                pv_zone(&pv).as_deref() == Some(zone.as_str()),
                "{name} runs in {zone} but its disk {pv_name} is pinned to {:?}",
                pv_zone(&pv)
            );
            let modes = claim
                .spec
                .as_ref()
                .and_then(|s| s.access_modes.clone())
                .unwrap_or_default();
            ensure!(
                modes == ["ReadWriteOncePod"],
                "claim access modes {modes:?}"
            );
            eprintln!("{name}: Ready in {zone}, disk {pv_name} Bound in {zone}");
            zones.push(zone);
        }
        zones.sort();
        zones.dedup();
        ensure!(
            zones.len() == 3,
            "members are not spread over 3 zones: {zones:?}"
        );
        let bucket = ready_pods(&client, "shop", 3).await?;
        ensure!(bucket.len() == 3);
        eprintln!("shop/bucket-deployment: 3 members Ready");
        for pod in pods.iter().chain(&bucket) {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            ensure!(
                !node.as_ref().is_some_and(|n| pool.contains(n)),
                "{} does not tolerate the pool's taint but runs on {node:?}",
                pod.metadata.name.as_deref().unwrap_or("")
            );
        }
        check_platform_members(&client, &pool).await?;
        Ok(())
    }
    .await;
    let cleanup = async {
        delete_golden_namespace(&client, "ledger").await?;
        delete_golden_namespace(&client, "shop").await?;
        delete_reservations(&cluster).await?;
        let _ = Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
            .delete("gp3", &DeleteParams::default())
            .await;
        let platform = tmp.join("platform.yaml");
        let _ = run_kubectl(
            &cluster,
            &[
                "delete",
                "--ignore-not-found",
                "-f",
                &platform.to_string_lossy(),
            ],
        )
        .await;
        release_pool(&client, &lock.slot.node_prefix()).await?;
        Ok::<(), anyhow::Error>(())
    }
    .await;
    if result.is_err() {
        eprintln!("kubesim log tail:\n{}", sim.log_tail(40));
    }
    drop(sim);
    result?;
    cleanup
}

/// The identity label of `examples/persistent.yaml`'s members.
const PERSISTENT: &str = "fleet.celld.dev/identity=ylwg20pyt4vrb3ipxmqm77b6in";
/// The identity label of `examples/persistent-platform.yaml`'s members.
const PLATFORM: &str = "fleet.celld.dev/identity=ujzde8gxd6ncf10epf91dhodzd";
/// The node label and taint of the dedicated pool `persistent-platform` selects and
/// tolerates.
const POOL_LABEL: &str = "node-pool";
const POOL_TAINT: &str = "dedicated";
/// The PriorityClass's value, which admission copies into each member's `priority`.
const PLATFORM_PRIORITY: i32 = 1_000_000;
/// What `persistent-platform` names and the cluster must hold (the namespace's
/// ServiceAccount, the classes, the pull Secret).
const PLATFORM_SETUP: &str = "\
apiVersion: v1
kind: ServiceAccount
metadata: {name: ledger-platform, namespace: ledger}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: celld-critical}
value: 1000000
description: celld members (golden_apply e2e)
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: sandboxed}
handler: runsc
---
apiVersion: v1
kind: Secret
metadata: {name: registry-credentials, namespace: ledger}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{\"auths\": {}}'
";

/// The slot's nodes (by kubesim's prefix label), sorted by name.
async fn slot_nodes(client: &Client, prefix: &str) -> Result<Vec<Node>> {
    let mut nodes = Api::<Node>::all(client.clone())
        .list(
            &ListParams::default()
                .labels(&format!("{}={prefix}", kubesim::objects::SIM_NODE_LABEL)),
        )
        .await?
        .items;
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(nodes)
}

/// Labels and taints the first node of each zone as the dedicated pool; returns their
/// names.
async fn dedicate_pool(client: &Client, prefix: &str) -> Result<Vec<String>> {
    let api = Api::<Node>::all(client.clone());
    let mut zones = Vec::new();
    let mut pool = Vec::new();
    for node in slot_nodes(client, prefix).await? {
        let zone = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("topology.kubernetes.io/zone").cloned())
            .context("node without zone")?;
        if zones.contains(&zone) {
            continue;
        }
        let name = node.metadata.name.clone().context("node without name")?;
        api.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "metadata": {"labels": {POOL_LABEL: "celld"}},
                "spec": {"taints": [{"key": POOL_TAINT, "value": "celld", "effect": "NoSchedule"}]},
            })),
        )
        .await?;
        zones.push(zone);
        pool.push(name);
    }
    ensure!(pool.len() == 3, "pool nodes {pool:?} do not cover 3 zones");
    Ok(pool)
}

/// Removes the pool's label and taint again (the slot's nodes outlive this test).
async fn release_pool(client: &Client, prefix: &str) -> Result<()> {
    let api = Api::<Node>::all(client.clone());
    for node in slot_nodes(client, prefix).await? {
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == POOL_TAINT));
        let labelled = node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(POOL_LABEL));
        if tainted || labelled {
            let name = node.metadata.name.clone().unwrap_or_default();
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({
                    "metadata": {"labels": {POOL_LABEL: null}},
                    "spec": {"taints": null},
                })),
            )
            .await?;
        }
    }
    Ok(())
}

/// `persistent-platform`'s members: Ready, one per zone, each on a pool node, and
/// carrying every Pod setting of the fleet file as the API server admitted it, and what
/// its patches add.
async fn check_platform_members(client: &Client, pool: &[String]) -> Result<()> {
    let pods = ready_members(client, "ledger", PLATFORM, 3).await?;
    let mut zones = Vec::new();
    for pod in &pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref().context("pod without spec")?;
        let node = spec.node_name.clone().unwrap_or_default();
        ensure!(
            pool.contains(&node),
            "{name} runs on {node}, outside the pool {pool:?}"
        );
        zones.push(pod_zone(client, pod).await?);
        ensure!(
            spec.priority_class_name.as_deref() == Some("celld-critical")
                && spec.priority == Some(PLATFORM_PRIORITY),
            "{name}: priority class {:?}, priority {:?}",
            spec.priority_class_name,
            spec.priority
        );
        ensure!(
            spec.runtime_class_name.as_deref() == Some("sandboxed"),
            "{name}: runtime class {:?}",
            spec.runtime_class_name
        );
        let secrets: Vec<&str> = spec
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|s| s.name.as_str())
            .collect();
        ensure!(
            secrets == ["registry-credentials"],
            "{name}: pull Secrets {secrets:?}"
        );
        ensure!(
            spec.node_selector
                .as_ref()
                .and_then(|s| s.get(POOL_LABEL))
                .map(String::as_str)
                == Some("celld"),
            "{name}: nodeSelector {:?}",
            spec.node_selector
        );
        let tolerations = spec.tolerations.clone().unwrap_or_default();
        ensure!(
            tolerations
                .iter()
                .any(|t| t.key.as_deref() == Some(POOL_TAINT)
                    && t.effect.as_deref() == Some("NoSchedule"))
                && tolerations.iter().any(|t| t.key.as_deref()
                    == Some("node.kubernetes.io/unreachable")
                    && t.toleration_seconds == Some(120)),
            "{name}: tolerations {tolerations:?}"
        );
        let fs_policy = spec
            .security_context
            .as_ref()
            .and_then(|s| s.fs_group_change_policy.clone());
        ensure!(
            fs_policy.as_deref() == Some("OnRootMismatch"),
            "{name}: fsGroupChangePolicy {fs_policy:?}"
        );
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            labels.get("team").map(String::as_str) == Some("payments")
                && labels.get("cost-center").map(String::as_str) == Some("4711"),
            "{name}: labels {labels:?}"
        );
        ensure!(
            annotations
                .get("sidecar.istio.io/inject")
                .map(String::as_str)
                == Some("false")
                && annotations
                    .get("backup.velero.io/backup-volumes")
                    .map(String::as_str)
                    == Some("data"),
            "{name}: annotations {annotations:?}"
        );
        // The example's patches (applied after rendering) reached the members too.
        let ndots = spec
            .dns_config
            .as_ref()
            .and_then(|d| d.options.as_ref())
            .and_then(|o| o.iter().find(|o| o.name.as_deref() == Some("ndots")))
            .and_then(|o| o.value.clone());
        let scratch = spec
            .volumes
            .iter()
            .flatten()
            .any(|v| v.name == "scratch" && v.empty_dir.is_some());
        ensure!(
            ndots.as_deref() == Some("2") && scratch,
            "{name}: the patches are missing: ndots {ndots:?}, scratch volume {scratch}"
        );
        eprintln!("{name}: Ready on pool node {node} with every Pod setting and patch");
    }
    zones.sort();
    zones.dedup();
    ensure!(
        zones.len() == 3,
        "platform members not spread over 3 zones: {zones:?}"
    );
    Ok(())
}
