//! Node registration, Lease renewal and Ready heartbeats; stopping and starting machines.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use super::{Sim, SimNode, now};
use crate::objects::{self, SIM_NODE_LABEL};

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

/// Creates (or adopts) every configured Node, writes its full status and first Lease, and
/// prunes Nodes of an earlier kubesim with the same prefix that are no longer configured.
pub(crate) async fn register_all(sim: &Arc<Sim>) -> Result<()> {
    let api: Api<Node> = Api::all(sim.client.clone());
    for node in sim.nodes.values() {
        register(&api, node).await?;
        heartbeat(sim, &sim.client, node, Report::Full).await?;
    }
    if sim.cfg.prune_nodes {
        let selector = format!("{SIM_NODE_LABEL}={}", sim.cfg.node_prefix);
        let existing = api.list(&ListParams::default().labels(&selector)).await?;
        for n in existing {
            let name = n.name_any();
            if !sim.nodes.contains_key(&name) {
                tracing::info!(node = %name, "pruning node of an earlier kubesim configuration");
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e).context("pruning node"),
                }
            }
        }
    }
    Ok(())
}

async fn register(api: &Api<Node>, node: &SimNode) -> Result<()> {
    let obj = objects::node_object(&node.spec);
    let created: Node = match api
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj.clone())?,
        )
        .await
    {
        Ok(n) => {
            tracing::info!(node = %node.spec.name, zone = %node.spec.zone, ip = %node.spec.ip, "node registered");
            n
        }
        Err(kube::Error::Api(s)) if s.is_already_exists() => {
            // Adopt: make labels and provider ID match our configuration.
            let n = api
                .patch(
                    &node.spec.name,
                    &PatchParams::default(),
                    &Patch::Merge(&obj),
                )
                .await
                .context("updating existing node")?;
            tracing::info!(node = %node.spec.name, "node re-registered (existed)");
            n
        }
        Err(e) => return Err(e).context("creating node"),
    };
    *node.uid.lock().expect("uid lock") = created.metadata.uid.clone();
    let status = objects::node_status(
        &node.spec,
        &node.boot_id.lock().expect("boot id").clone(),
        now(),
        *node.ready_since.lock().expect("ready since"),
    );
    api.patch_status(
        &node.spec.name,
        &PatchParams::default(),
        &Patch::Strategic(&status),
    )
    .await
    .with_context(|| format!("writing status of node {}", node.spec.name))?;
    Ok(())
}

/// What a heartbeat writes besides renewing the Lease.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Report {
    /// The Lease only.
    LeaseOnly,
    /// The Ready condition's heartbeat (the periodic status report).
    Conditions,
    /// The whole node status (after registration or a restart).
    Full,
}

/// One heartbeat: renew the Lease, and post the node status as `report` says. Runs under
/// the node's gate so a stop never races a heartbeat.
pub(crate) async fn heartbeat(
    sim: &Sim,
    client: &kube::Client,
    node: &SimNode,
    report: Report,
) -> Result<()> {
    let gate = node.gate.read().await;
    if !*gate {
        return Ok(());
    }
    let t = now();
    let since = *node.ready_since.lock().expect("ready since");
    let api: Api<Node> = Api::all(client.clone());
    let body = match report {
        Report::Full => Some(objects::node_status(
            &node.spec,
            &node.boot_id.lock().expect("boot id").clone(),
            t,
            since,
        )),
        Report::Conditions => Some(objects::node_heartbeat(t, since)),
        Report::LeaseOnly => None,
    };
    if let Some(body) = body {
        match api
            .patch_status(
                &node.spec.name,
                &PatchParams::default(),
                &Patch::Strategic(&body),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {
                // Someone deleted the Node object: a kubelet registers again.
                tracing::warn!(node = %node.spec.name, "node object gone; registering again");
                register(&api, node).await?;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("node {} status heartbeat", node.spec.name));
            }
        }
    }

    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let uid = node.uid.lock().expect("uid lock").clone();
    let lease = objects::node_lease(
        &node.spec.name,
        uid.as_deref(),
        sim.cfg.lease_duration_seconds,
        t,
    );
    let renew = serde_json::json!({"spec": lease["spec"].clone()});
    match leases
        .patch(
            &node.spec.name,
            &PatchParams::default(),
            &Patch::Merge(&renew),
        )
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {
            leases
                .create(&PostParams::default(), &serde_json::from_value(lease)?)
                .await
                .with_context(|| format!("creating lease of node {}", node.spec.name))?;
        }
        Err(e) => {
            return Err(e).with_context(|| format!("renewing lease of node {}", node.spec.name));
        }
    }
    drop(gate);
    Ok(())
}

/// The configured nodes whose status a kubelet would post now, as it does when its Node
/// differs from what it reports: the Node is gone, or its Ready condition is not True
/// (the node lifecycle controller set it Unknown after a late renewal, say). One list
/// of kubesim's Nodes; if it fails, every node posts.
async fn differing(sim: &Sim, client: &kube::Client) -> std::collections::HashSet<String> {
    let api: Api<Node> = Api::all(client.clone());
    let selector = format!("{SIM_NODE_LABEL}={}", sim.cfg.node_prefix);
    let listed = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l.items,
        Err(e) => {
            tracing::warn!(error = %e, "listing nodes for the heartbeat; posting every status");
            return sim.nodes.keys().cloned().collect();
        }
    };
    let ready: std::collections::HashSet<String> = listed
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|n| n.name_any())
        .collect();
    sim.nodes
        .keys()
        .filter(|n| !ready.contains(*n))
        .cloned()
        .collect()
}

/// Runs [`heartbeats`] on a thread of its own, with its own runtime and API client, as a
/// kubelet's node status loop does not wait on its Pod workers: thousands of workers
/// busy on kubesim's runtime must not make a Lease renewal late, or the node lifecycle
/// controller takes a healthy node for lost and evicts its Pods. Resolves if the loop
/// ever ends (it does not, unless its client cannot be built).
pub(crate) fn spawn_heartbeats(sim: Arc<Sim>) -> Result<tokio::sync::oneshot::Receiver<String>> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("kubesim-heartbeats".into())
        .spawn(move || {
            let why = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(async {
                    match super::client_for(&sim.cfg).await {
                        Ok(client) => {
                            heartbeats(sim, client).await;
                            "the heartbeat loop ended".to_string()
                        }
                        Err(e) => format!("the heartbeats' API client: {e:#}"),
                    }
                }),
                Err(e) => format!("the heartbeats' runtime: {e}"),
            };
            let _ = done_tx.send(why);
        })
        .context("starting the heartbeat thread")?;
    Ok(done_rx)
}

/// Renews every live node's Lease every `lease_seconds`, and posts its Ready heartbeat
/// every `node_status_report_seconds`, or at once when its Node differs from what it
/// reports (see [`differing`]).
async fn heartbeats(sim: Arc<Sim>, client: kube::Client) {
    let lease = sim.cfg.lease_seconds.max(1);
    let period = Duration::from_secs(lease);
    // Renewals per status report, rounded up.
    let per_report = sim.cfg.node_status_report_seconds.div_ceil(lease).max(1);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures: u64 = 0;
    for beat in 1u64.. {
        tick.tick().await;
        let due = beat % per_report == 0;
        let differing = if due {
            Default::default()
        } else {
            differing(&sim, &client).await
        };
        let beats = sim.nodes.values().filter(|n| n.is_alive()).map(|n| {
            let (sim, client) = (sim.clone(), client.clone());
            let n = n.clone();
            let report = if due || differing.contains(&n.spec.name) {
                Report::Conditions
            } else {
                Report::LeaseOnly
            };
            async move {
                (
                    n.spec.name.clone(),
                    heartbeat(&sim, &client, &n, report).await,
                )
            }
        });
        for (name, r) in futures::future::join_all(beats).await {
            if let Err(e) = r {
                failures += 1;
                tracing::warn!(node = %name, failures, error = %format!("{e:#}"), "heartbeat failed");
            }
        }
    }
}

/// Stops a machine: no more heartbeats or Pod writes, every stub on it killed. Returns once
/// that is in effect.
///
/// With `keep_stubs`, only the kubelet stops: the stubs keep running unsupervised (a
/// "zombie" celld on a node that lost its kubelet), until the node starts again and the
/// kubelet stops the stubs of Pods deleted meanwhile.
pub(crate) async fn stop(sim: &Arc<Sim>, name: &str, keep_stubs: bool) -> Result<()> {
    let node = sim
        .node(name)
        .ok_or_else(|| anyhow!("no node {name}"))?
        .clone();
    {
        let mut gate = node.gate.write().await;
        *gate = false;
        node.keep_stubs.store(keep_stubs, Ordering::SeqCst);
        node.alive.store(false, Ordering::SeqCst);
    }
    if keep_stubs {
        tracing::warn!(node = %name, "kubelet stopped, stubs left running (fault injected)");
        let n = name.to_string();
        sim.nudge_where(|w| w.node == n);
    } else {
        tracing::warn!(node = %name, "node stopped (fault injected)");
        super::kubelet::kill_node(sim, name).await;
    }
    Ok(())
}

/// Starts a stopped machine: new boot, heartbeats resume (first one written before this
/// returns), its Pods are reconciled by their workers.
pub(crate) async fn start(sim: &Arc<Sim>, name: &str) -> Result<()> {
    let node = sim
        .node(name)
        .ok_or_else(|| anyhow!("no node {name}"))?
        .clone();
    {
        let mut gate = node.gate.write().await;
        if !*gate {
            *node.ready_since.lock().expect("ready since") = now();
            *node.boot_id.lock().expect("boot id") = format!("{:032x}", rand::random::<u128>());
        }
        *gate = true;
        node.alive.store(true, Ordering::SeqCst);
    }
    heartbeat(sim, &sim.client, &node, Report::Full).await?;
    tracing::warn!(node = %name, "node started again");
    let n = name.to_string();
    sim.nudge_where(|w| w.node == n);
    Ok(())
}
