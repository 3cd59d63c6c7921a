//! kubesim against the real control plane (tests/controlplane): a zone-spread StatefulSet
//! with WaitForFirstConsumer disks runs on simulated nodes, then node loss, graceful
//! deletion, a lost volume and container faults are injected.
//!
//! Runs when `tests/.cluster/run/kubeconfig` answers; with `CELLD_E2E=1` an unreachable
//! cluster is a failure, without it a loud notice is printed (see `kubesim::testing`).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use kubesim::control::FaultKind;
use kubesim::http::HttpClient;
use kubesim::objects::{PROVISIONED_BY_ANNOTATION, ZONE_LABEL, pv_zone};
use kubesim::testing::{
    Cluster, KubeSim, KubeSimOptions, Sharing, create_namespace, delete_namespace, e2e_cluster,
    pod_ready, unique_name, wait_for,
};

const PROVISIONER: &str = "kubesim.celld.dev/disk";
const GRACE_S: i64 = 5;

fn statefulset(ns: &str, class: &str, zones: &[String]) -> Result<StatefulSet> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "m", "namespace": ns},
        "spec": {
            "serviceName": "m",
            "replicas": 3,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "m"}},
            "template": {
                "metadata": {"labels": {"app": "m"}},
                "spec": {
                    "terminationGracePeriodSeconds": GRACE_S,
                    "automountServiceAccountToken": false,
                    // The test's own zones: other tests' nodes share the cluster.
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": ZONE_LABEL, "operator": "In", "values": zones},
                        ]}],
                    }}},
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": ZONE_LABEL,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "m"}},
                    }],
                    "containers": [{
                        "name": "celld",
                        "image": format!("ghcr.io/ewhauser/celld@sha256:{}", "ab".repeat(32)),
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "CELLD_NODE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "CELLD_ADVERTISE", "value": "$(CELLD_NODE).m.$(POD_IP):8081"},
                            {"name": "CELLD_ADDR", "value": "0.0.0.0:8080"},
                            {"name": "CELLD_INTERNAL_ADDR", "value": "0.0.0.0:8081"},
                            {"name": "CELLD_SHUTDOWN_TOTAL_MS", "value": "1000"},
                        ],
                        "ports": [
                            {"name": "public", "containerPort": 8080, "protocol": "TCP"},
                            {"name": "internal", "containerPort": 8081, "protocol": "TCP"},
                        ],
                        "readinessProbe": {
                            "httpGet": {"path": "/.well-known/celld/health", "port": 8080},
                            "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 3,
                        },
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        "volumeMounts": [{"name": "data", "mountPath": "/work"}],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOncePod"],
                    "storageClassName": class,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }],
        },
    }))?)
}

async fn get_pod(pods: &Api<Pod>, name: &str) -> Result<Option<Pod>> {
    Ok(pods.get_opt(name).await?)
}

async fn node_zone(client: &Client, node: &str) -> Result<String> {
    let n = Api::<Node>::all(client.clone()).get(node).await?;
    n.metadata
        .labels
        .and_then(|l| l.get(ZONE_LABEL).cloned())
        .context("node without zone label")
}

fn waiting_reason(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

/// Waits until `name` is Ready; returns it.
async fn wait_ready(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<Pod> {
    wait_for(&format!("pod {name} Ready"), timeout, || async {
        Ok(get_pod(pods, name)
            .await?
            .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubesim_runs_zone_spread_statefulset_and_injects_faults() -> Result<()> {
    run(
        "kubesim_runs_zone_spread_statefulset_and_injects_faults",
        "process",
    )
    .await
}

/// The same scenario with every stub a task inside kubesim (`--stubs in-process`, what
/// the scale runs use): a container's start, drain, SIGKILL, crash loop, node loss and
/// zombie must look the same from the cluster and from the stubs' addresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_stubs_behave_like_stub_processes() -> Result<()> {
    run("in_process_stubs_behave_like_stub_processes", "in-process").await
}

async fn run(test: &str, stubs: &str) -> Result<()> {
    let Some(cluster) = e2e_cluster(test).await else {
        return Ok(());
    };
    let lock = tokio::task::block_in_place(|| cluster.lock(test, Sharing::Shared))?;
    let sim = KubeSim::spawn(
        &cluster,
        KubeSimOptions {
            kubesim_bin: Some(env!("CARGO_BIN_EXE_kubesim").into()),
            stub_bin: Some(env!("CARGO_BIN_EXE_celld-stub").into()),
            extra_args: vec!["--stubs".into(), stubs.into()],
            ..KubeSimOptions::for_slot(&lock.slot)
        },
    )
    .await?;
    let ns = unique_name("kubesim-it");
    let class = ns.clone();
    create_namespace(&cluster.client, &ns).await?;
    let sc: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": class},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))?;
    Api::<StorageClass>::all(cluster.client.clone())
        .create(&PostParams::default(), &sc)
        .await?;

    let result = scenario(&cluster, &sim, &ns, &class, stubs).await;
    if let Err(e) = &result {
        eprintln!(
            "scenario failed: {e:#}\n{}\n{}",
            diagnostics(&cluster.client, &ns).await,
            sim.log_tail(120)
        );
    }
    let cleanup = cleanup(&cluster, &sim, &ns, &class).await;
    result?;
    cleanup?;
    let state = sim.control.state().await?;
    eprintln!(
        "kubesim totals: provisioned={} reclaimed={}",
        state.provisioned, state.reclaimed
    );
    // SIGTERM: kubesim stops cleanly.
    let mut sim = sim;
    let status = sim.stop().context("kubesim already gone")?;
    ensure!(status.success(), "kubesim exited with {status} on SIGTERM");
    Ok(())
}

/// Pods, claims and events of the test namespace, for a failure message.
async fn diagnostics(client: &Client, ns: &str) -> String {
    let mut out = String::from("--- cluster state ---\n");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for p in list {
            let st = p.status.as_ref();
            out.push_str(&format!(
                "pod {} node={:?} phase={:?} deleting={} waiting={:?} conditions={:?}\n",
                p.metadata.name.as_deref().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                st.and_then(|s| s.phase.clone()),
                p.metadata.deletion_timestamp.is_some(),
                waiting_reason(&p),
                st.and_then(|s| s.conditions.as_ref()).map(|c| c
                    .iter()
                    .map(|c| format!(
                        "{}={}:{}",
                        c.type_,
                        c.status,
                        c.message.clone().unwrap_or_default()
                    ))
                    .collect::<Vec<_>>()),
            ));
        }
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = claims.list(&ListParams::default()).await {
        for c in list {
            out.push_str(&format!(
                "claim {} phase={:?} volume={:?} annotations={:?}\n",
                c.metadata.name.as_deref().unwrap_or_default(),
                c.status.as_ref().and_then(|s| s.phase.clone()),
                c.spec.as_ref().and_then(|s| s.volume_name.clone()),
                c.metadata.annotations,
            ));
        }
    }
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = events.list(&ListParams::default()).await {
        for e in list {
            out.push_str(&format!(
                "event {} {}: {}\n",
                e.involved_object.name.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            ));
        }
    }
    out
}

async fn scenario(
    cluster: &Cluster,
    sim: &KubeSim,
    ns: &str,
    class: &str,
    stubs: &str,
) -> Result<()> {
    let client = &cluster.client;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let http = HttpClient::new();
    Api::<StatefulSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &statefulset(ns, class, &sim.zones)?)
        .await?;

    // 1. Three members Ready, one per zone, each on a disk pinned to its zone.
    let mut zones = BTreeSet::new();
    let mut member_zone = Vec::new();
    for i in 0..3 {
        let name = format!("m-{i}");
        let pod = wait_ready(&pods, &name, Duration::from_secs(180)).await?;
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .context("unbound")?;
        let zone = node_zone(client, &node).await?;
        let claim = claims.get(&format!("data-m-{i}")).await?;
        let phase = claim.status.as_ref().and_then(|s| s.phase.clone());
        ensure!(
            phase.as_deref() == Some("Bound"),
            "claim data-m-{i} is {phase:?}"
        );
        let pv_name = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .context("no PV")?;
        let pv = pvs.get(&pv_name).await?;
        ensure!(
            pv.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(PROVISIONED_BY_ANNOTATION))
                .map(String::as_str)
                == Some(PROVISIONER),
            "PV {pv_name} not provisioned by kubesim"
        );
        ensure!(
            pv_zone(&pv).as_deref() == Some(zone.as_str()),
            "PV {pv_name} pinned to {:?}, member {name} runs in {zone}",
            pv_zone(&pv)
        );
        eprintln!("{name}: node {node}, zone {zone}, claim Bound to {pv_name} (zone {zone})");
        zones.insert(zone.clone());
        member_zone.push((name, node, zone, pv_name));
    }
    ensure!(
        zones.len() == 3,
        "members not spread over three zones: {member_zone:?}"
    );

    // 2. The stubs answer on their Pod IPs with the member's identity and disk.
    let state = sim.control.state().await?;
    for (name, _, _, pv_name) in &member_zone {
        let view = state
            .pod(ns, name)
            .context("kubesim does not list the pod")?;
        let pod = pods.get(name).await?;
        let pod_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        ensure!(
            pod_ip.as_deref() == Some(view.ip.as_str()),
            "podIP {pod_ip:?} != {}",
            view.ip
        );
        let st: serde_json::Value = http
            .get(
                &format!("http://{}:8081/state", view.ip),
                Duration::from_secs(2),
            )
            .await?
            .ok()?
            .json()?;
        ensure!(st["shutdown"]["schema_version"] == 1, "bad /state: {st}");
        let info: serde_json::Value = http
            .get(
                &format!("http://{}:8081/__stub/info", view.ip),
                Duration::from_secs(2),
            )
            .await?
            .ok()?
            .json()?;
        ensure!(info["member"] == json!(name), "member id {info}");
        // The stub kubesim runs is the kind asked for: a process (a real pid), or a task
        // (an id above any Linux pid).
        let id = view.stub_pid.context("no stub running")?;
        ensure!(
            info["pid"] == json!(id) && (id >= 1 << 24) == (stubs == "in-process"),
            "stub id {id} (info {info}) for --stubs {stubs}"
        );
        let disk = info["disks"]["data"]["diskId"].as_str().unwrap_or_default();
        ensure!(
            disk.starts_with(pv_name.as_str()),
            "disk id {disk:?} is not {pv_name}"
        );
    }

    // Stub answers set through kubesim's client: an unhealthy member goes not-Ready.
    let mode = sim
        .control
        .set_stub_mode(ns, "m-1", &json!({"health": "unhealthy", "version": "v2"}))
        .await?;
    ensure!(mode["version"] == "v2", "mode {mode}");
    wait_for(
        "m-1 not Ready while unhealthy",
        Duration::from_secs(30),
        || async { Ok(get_pod(&pods, "m-1").await?.filter(|p| !pod_ready(p))) },
    )
    .await?;
    sim.control
        .set_stub_mode(ns, "m-1", &json!({"health": "healthy"}))
        .await?;
    wait_ready(&pods, "m-1", Duration::from_secs(30)).await?;
    eprintln!("readiness: m-1 went not-Ready while its stub said unhealthy, Ready again after");

    // 3. Graceful deletion on a live node: SIGTERM, drain, finalize; the StatefulSet
    //    brings m-2 back on the same disk.
    let old = pods.get("m-2").await?;
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    pods.delete("m-2", &DeleteParams::default()).await?;
    let back = wait_for(
        "m-2 replaced by a new Ready pod",
        Duration::from_secs(120),
        || async {
            Ok(get_pod(&pods, "m-2")
                .await?
                .filter(|p| p.metadata.uid.as_deref() != Some(old_uid.as_str()) && pod_ready(p)))
        },
    )
    .await?;
    let back_zone = node_zone(
        client,
        back.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default(),
    )
    .await?;
    ensure!(
        back_zone == member_zone[2].2,
        "m-2 came back in {back_zone}, its disk is in {}",
        member_zone[2].2
    );
    eprintln!("graceful delete: m-2 finalized and recreated in {back_zone}");

    // 4. Crash loop and image pull faults on m-2, then undone.
    let applied = sim
        .control
        .set_pod_fault(ns, "m-2", FaultKind::CrashLoop)
        .await?;
    ensure!(
        applied.pods == vec![format!("{ns}/m-2")],
        "fault applied to {:?}",
        applied.pods
    );
    let p = pods.get("m-2").await?;
    ensure!(
        waiting_reason(&p).as_deref() == Some("CrashLoopBackOff"),
        "m-2 waiting {:?}",
        waiting_reason(&p)
    );
    ensure!(!pod_ready(&p), "crash-looping m-2 is Ready");
    let rc = restart_count(&p);
    wait_for(
        "m-2 restartCount to grow",
        Duration::from_secs(30),
        || async {
            Ok(get_pod(&pods, "m-2")
                .await?
                .filter(|p| restart_count(p) > rc))
        },
    )
    .await?;
    sim.control
        .set_pod_fault(ns, "m-2", FaultKind::ImagePull)
        .await?;
    let p = pods.get("m-2").await?;
    let reason = waiting_reason(&p);
    ensure!(
        matches!(reason.as_deref(), Some("ErrImagePull" | "ImagePullBackOff")),
        "m-2 waiting {reason:?}"
    );
    sim.control.clear_pod_fault(ns, "m-2").await?;
    wait_ready(&pods, "m-2", Duration::from_secs(30)).await?;
    eprintln!(
        "faults: crash loop (restartCount grew past {rc}) and image pull shown, then cleared"
    );

    // 4a. SIGKILL of the stub: same Pod, restartCount + 1, Ready again.
    let before = restart_count(&pods.get("m-2").await?);
    let uid = pods.get("m-2").await?.metadata.uid;
    sim.control.kill_stub(ns, "m-2").await?;
    let p = wait_for(
        "m-2 restarted after SIGKILL",
        Duration::from_secs(60),
        || async {
            Ok(get_pod(&pods, "m-2")
                .await?
                .filter(|p| restart_count(p) > before && pod_ready(p)))
        },
    )
    .await?;
    ensure!(p.metadata.uid == uid, "SIGKILL replaced the Pod");
    eprintln!(
        "SIGKILL: m-2 restarted in place (restartCount {before} -> {})",
        restart_count(&p)
    );

    // 4b. A fault keyed by name before the Pod exists: m-3 never pulls its image.
    let rule = sim
        .control
        .add_fault(Some(ns), "*-3", FaultKind::ImagePull)
        .await;
    ensure!(rule.is_ok(), "glob rule refused: {rule:?}");
    let rule = rule?.rule.context("no rule")?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let scale = |n: i32| json!({"spec": {"replicas": n}});
    sts.patch(
        "m",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&scale(4)),
    )
    .await?;
    let p = wait_for(
        "m-3 waiting on its image",
        Duration::from_secs(120),
        || async {
            Ok(get_pod(&pods, "m-3").await?.filter(|p| {
                matches!(
                    waiting_reason(p).as_deref(),
                    Some("ErrImagePull" | "ImagePullBackOff")
                )
            }))
        },
    )
    .await?;
    ensure!(!pod_ready(&p), "m-3 Ready without its image");
    ensure!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"),
        "m-3 not Pending"
    );
    sim.control.delete_fault(rule.id).await?;
    wait_ready(&pods, "m-3", Duration::from_secs(60)).await?;
    sts.patch(
        "m",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&scale(3)),
    )
    .await?;
    wait_for(
        "m-3 gone after scale-in",
        Duration::from_secs(60),
        || async { Ok(get_pod(&pods, "m-3").await?.is_none().then_some(())) },
    )
    .await?;
    eprintln!(
        "name-keyed fault: m-3 stuck on its image until the rule went, then Ready; scaled back to 3"
    );

    // 5. Node loss: stop m-0's node, delete m-0. Nobody finalizes it: it stays Terminating
    //    past its grace period, as on a real cluster.
    let (_, node0, zone0, _) = member_zone[0].clone();
    let stopped = sim.control.stop_node(&node0).await?;
    ensure!(!stopped.alive, "node still alive");
    let view = sim.control.state().await?;
    let ip0 = view.pod(ns, "m-0").context("m-0 not listed")?.ip.clone();
    ensure!(
        http.get(
            &format!("http://{ip0}:8080/.well-known/celld/health"),
            Duration::from_secs(1)
        )
        .await
        .is_err(),
        "m-0's stub still answers on a stopped node"
    );
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(
        &format!("node {node0} no longer Ready"),
        Duration::from_secs(90),
        || async {
            let n = nodes.get(&node0).await?;
            Ok((!kubesim::testing::node_ready(&n)).then_some(()))
        },
    )
    .await?;
    let m0 = pods.get("m-0").await?;
    let m0_uid = m0.metadata.uid.clone().unwrap_or_default();
    pods.delete("m-0", &DeleteParams::default()).await?;
    // Its deletionTimestamp is the deletion plus the grace: wait until the API server's
    // clock is 10 s past it.
    let grace_end = get_pod(&pods, "m-0")
        .await?
        .and_then(|p| p.metadata.deletion_timestamp)
        .context("m-0 not terminating right after its delete")?
        .0;
    let past = grace_end + k8s_openapi::jiff::SignedDuration::from_secs(10);
    wait_for(
        &format!("the API server's clock at {past}"),
        Duration::from_secs(GRACE_S as u64 + 60),
        || async { Ok((kubesim::testing::server_now(client, ns).await? >= past).then_some(())) },
    )
    .await?;
    let still = get_pod(&pods, "m-0")
        .await?
        .context("m-0 vanished while its node is down")?;
    ensure!(
        still.metadata.uid.as_deref() == Some(m0_uid.as_str()),
        "m-0 was replaced"
    );
    ensure!(
        still.metadata.deletion_timestamp.is_some(),
        "m-0 not terminating"
    );
    eprintln!(
        "node loss: m-0 still Terminating 10s past its deletionTimestamp {grace_end} (grace {GRACE_S}s)"
    );

    // 6. Lost volume: delete m-1's PV; the PV controller marks the claim Lost.
    let deleted = sim.control.delete_claim_volume(ns, "data-m-1").await?;
    ensure!(pvs.get_opt(&deleted.pv).await?.is_none(), "PV still there");
    wait_for("claim data-m-1 Lost", Duration::from_secs(60), || async {
        let c = claims.get("data-m-1").await?;
        Ok((c.status.and_then(|s| s.phase).as_deref() == Some("Lost")).then_some(()))
    })
    .await?;
    eprintln!("lost volume: {} deleted, claim data-m-1 Lost", deleted.pv);

    // 7. The node comes back: the Terminating m-0 is finalized, the StatefulSet recreates
    //    it, and its zone-pinned disk brings it back to the same zone.
    sim.control.start_node(&node0).await?;
    let back = wait_for(
        "m-0 recreated and Ready",
        Duration::from_secs(180),
        || async {
            Ok(get_pod(&pods, "m-0")
                .await?
                .filter(|p| p.metadata.uid.as_deref() != Some(m0_uid.as_str()) && pod_ready(p)))
        },
    )
    .await?;
    let z = node_zone(
        client,
        back.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default(),
    )
    .await?;
    ensure!(z == zone0, "m-0 came back in {z}, its disk is in {zone0}");
    eprintln!("node back: old m-0 finalized, new m-0 Ready in {z}");

    // 8. Only the kubelet dies (the stub runs on, a zombie): the force-deleted Pod's stub
    //    keeps answering until the node starts again and its kubelet stops it.
    let (_, node2, _, _) = member_zone[2].clone();
    let node2 = get_pod(&pods, "m-2")
        .await?
        .and_then(|p| p.spec?.node_name)
        .unwrap_or(node2);
    let view = sim.control.state().await?;
    let ip2 = view.pod(ns, "m-2").context("m-2 not listed")?.ip.clone();
    let health2 = format!("http://{ip2}:8080/.well-known/celld/health");
    sim.control.stop_kubelet_keep_stubs(&node2).await?;
    let m2_uid = pods.get("m-2").await?.metadata.uid.unwrap_or_default();
    pods.delete(
        "m-2",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await?;
    wait_for(
        "force-deleted m-2 gone from the API",
        Duration::from_secs(30),
        || async {
            Ok(get_pod(&pods, "m-2")
                .await?
                .is_none_or(|p| p.metadata.uid.as_deref() != Some(m2_uid.as_str()))
                .then_some(()))
        },
    )
    .await?;
    let r = http.get(&health2, Duration::from_secs(1)).await?;
    ensure!(
        r.status.as_u16() == 200,
        "zombie stub of m-2 not answering: {}",
        r.status
    );
    sim.control.start_node(&node2).await?;
    wait_for(
        "the zombie stub to be stopped",
        Duration::from_secs(30),
        || async {
            Ok(http
                .get(&health2, Duration::from_secs(1))
                .await
                .is_err()
                .then_some(()))
        },
    )
    .await?;
    wait_ready(&pods, "m-2", Duration::from_secs(120)).await?;
    eprintln!("kubelet loss: zombie stub of m-2 answered until {node2} came back; m-2 Ready again");

    // Scale-in keeps claims (Retain): m-3's claim is still there.
    let pvc_count = claims.list(&ListParams::default()).await?.items.len();
    if pvc_count != 4 {
        bail!("expected 4 claims, found {pvc_count}");
    }
    Ok(())
}

async fn cleanup(cluster: &Cluster, sim: &KubeSim, ns: &str, class: &str) -> Result<()> {
    // Every node up, so every Pod can be finalized.
    if let Ok(state) = sim.control.state().await {
        for n in state.nodes.iter().filter(|n| !n.alive) {
            let _ = sim.control.start_node(&n.name).await;
        }
    }
    delete_namespace(&cluster.client, ns, Duration::from_secs(180)).await?;
    // Released volumes (policy Delete) are deleted by kubesim's provisioner.
    let pvs: Api<PersistentVolume> = Api::all(cluster.client.clone());
    wait_for(
        "the test's volumes to be reclaimed",
        Duration::from_secs(120),
        || async {
            let left: Vec<String> = pvs
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|pv| {
                    pv.spec
                        .as_ref()
                        .and_then(|s| s.storage_class_name.as_deref())
                        == Some(class)
                })
                .filter_map(|pv| pv.metadata.name)
                .collect();
            Ok(left.is_empty().then_some(()))
        },
    )
    .await?;
    Api::<StorageClass>::all(cluster.client.clone())
        .delete(class, &DeleteParams::default())
        .await?;
    Ok(())
}
