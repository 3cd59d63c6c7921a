//! The disk provisioner: PVs for claims of our WaitForFirstConsumer classes, pinned to the
//! selected node's zone; released PVs with policy Delete are deleted. Woken by the claim,
//! PV and StorageClass watches; it scans the in-memory stores, never the API.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;

use super::Sim;
use crate::objects::{self, SIM_NODE_LABEL, ZONE_LABEL};

pub(crate) async fn run(sim: Arc<Sim>) {
    let mut creating: HashSet<String> = HashSet::new();
    let mut deleting: HashSet<String> = HashSet::new();
    loop {
        sim.provision_wake.notified().await;
        provision(&sim, &mut creating).await;
        reclaim(&sim, &mut deleting).await;
    }
}

enum NotHere {
    /// The selected node does not exist.
    Gone,
    /// It is another kubesim's node (another test sharing the cluster): that kubesim
    /// provisions the claim.
    Theirs,
}

/// Zone of a node: ours from the configuration, others from their label.
async fn zone_of(sim: &Sim, node: &str) -> Result<Option<String>, NotHere> {
    if let Some(n) = sim.node(node) {
        return Ok(Some(n.spec.zone.clone()));
    }
    let api: Api<Node> = Api::all(sim.client.clone());
    match api.get_opt(node).await {
        Ok(Some(n)) => {
            let labels = n.metadata.labels.unwrap_or_default();
            if labels
                .get(SIM_NODE_LABEL)
                .is_some_and(|p| *p != sim.cfg.node_prefix)
            {
                return Err(NotHere::Theirs);
            }
            Ok(labels.get(ZONE_LABEL).cloned())
        }
        Ok(None) => Err(NotHere::Gone),
        Err(e) => {
            tracing::warn!(node, error = %e, "reading node");
            Ok(None)
        }
    }
}

async fn unselect(sim: &Sim, claim: &PersistentVolumeClaim) {
    let (Some(ns), Some(name)) = (&claim.metadata.namespace, &claim.metadata.name) else {
        return;
    };
    let api: Api<PersistentVolumeClaim> = Api::namespaced(sim.client.clone(), ns);
    let patch = serde_json::json!({
        "metadata": {
            "uid": claim.metadata.uid,
            "annotations": { objects::SELECTED_NODE_ANNOTATION: null },
        }
    });
    if let Err(e) = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(claim = %format!("{ns}/{name}"), error = %e, "removing selected-node");
    }
}

async fn provision(sim: &Sim, creating: &mut HashSet<String>) {
    let provisioner = &sim.cfg.provisioner;
    for claim in sim.claims.state() {
        let class_name = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        let class = sim.classes.get(&ObjectRef::new(&class_name));
        let Some(selected) = objects::claim_wants_volume(&claim, class.as_deref(), provisioner)
        else {
            continue;
        };
        let Some(pv_name) = objects::pv_name(&claim) else {
            continue;
        };
        if sim.volumes.get(&ObjectRef::new(&pv_name)).is_some() || creating.contains(&pv_name) {
            continue;
        }
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        let zone = match zone_of(sim, selected).await {
            Ok(Some(zone)) => zone,
            Ok(None) => {
                tracing::warn!(claim = %key, node = %selected, "selected node has no zone label; not provisioning");
                continue;
            }
            Err(NotHere::Theirs) => continue,
            Err(NotHere::Gone) => {
                // As the CSI external-provisioner does: hand the claim back to the
                // scheduler by removing the annotation, so it picks a node that exists.
                tracing::warn!(claim = %key, node = %selected, "selected node does not exist; asking the scheduler to reschedule");
                unselect(sim, &claim).await;
                continue;
            }
        };
        let class = class.expect("checked by claim_wants_volume");
        let data_dir = sim.cfg.data_dir.join("volumes");
        let Some(pv) = objects::persistent_volume(
            &claim,
            &class,
            &zone,
            provisioner,
            &sim.cfg.node_prefix,
            &data_dir.to_string_lossy(),
        ) else {
            tracing::warn!(claim = %key, "cannot build a PV for this claim");
            continue;
        };
        // The disk's contents: a directory with an identity file the stub reports.
        let dir = data_dir.join(&pv_name);
        if std::fs::create_dir_all(&dir).is_ok() {
            let _ = std::fs::write(
                dir.join("disk-id"),
                format!("{pv_name} zone={zone} claim={key}\n"),
            );
        }
        let api: Api<PersistentVolume> = Api::all(sim.client.clone());
        match api.create(&PostParams::default(), &pv).await {
            Ok(_) => {
                let n = sim.provisioned.fetch_add(1, Ordering::SeqCst) + 1;
                creating.insert(pv_name.clone());
                tracing::info!(pv = %pv_name, claim = %key, %zone, node = %selected, provisioned = n, "volume provisioned");
            }
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                creating.insert(pv_name.clone());
            }
            Err(e) => {
                tracing::warn!(pv = %pv_name, claim = %key, error = %e, "provisioning failed")
            }
        }
    }
    // Forget names the store has caught up with.
    creating.retain(|n| sim.volumes.get(&ObjectRef::new(n)).is_none());
}

async fn reclaim(sim: &Sim, deleting: &mut HashSet<String>) {
    let api: Api<PersistentVolume> = Api::all(sim.client.clone());
    for pv in sim.volumes.state() {
        // Only the volumes this kubesim's prefix made: another test's kubesim reclaims
        // its own, and counts them.
        let ours = pv
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SIM_NODE_LABEL))
            .is_some_and(|p| *p == sim.cfg.node_prefix);
        if !ours || !objects::pv_reclaimable(&pv, &sim.cfg.provisioner) {
            continue;
        }
        let name = pv.metadata.name.clone().unwrap_or_default();
        if deleting.contains(&name) {
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                let n = sim.reclaimed.fetch_add(1, Ordering::SeqCst) + 1;
                deleting.insert(name.clone());
                let _ = std::fs::remove_dir_all(sim.cfg.data_dir.join("volumes").join(&name));
                tracing::info!(pv = %name, reclaimed = n, "released volume deleted (reclaim policy Delete)");
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => tracing::warn!(pv = %name, error = %e, "reclaim failed"),
        }
    }
    deleting.retain(|n| sim.volumes.get(&ObjectRef::new(n)).is_some());
}
