//! The fresh confirmation of a destructive write: the fleet read again from the API
//! server ([`super::fresh`], shared with the namespace's other fleets asking at once),
//! decided again on that read, and the two decisions compared
//! (`crate::confirm`). A write is made only if the fresh decision reaches it too.

use std::sync::Arc;

use celld_api::CelldFleet;
use k8s_openapi::api::core::v1::Pod;

use super::clocks::Reading;
use super::context::Reconciler;
use super::fresh::Gathered;
use super::gather::{own_members, snapshot_of};
use crate::confirm::{self, Confirmation};
use crate::plan::{Action, Plan};
use crate::snapshot::{CapacitySignal, Snapshot};

/// What a fresh read showed: the CelldFleet, the snapshot built from it and the plan
/// `decide` made on that.
pub(super) struct FreshRead {
    pub(super) fleet: Arc<CelldFleet>,
    pub(super) snapshot: Snapshot,
    pub(super) plan: Plan,
}

/// Reads the fleet fresh from the API server, decides again and compares (see
/// `crate::confirm`). Also returns the fresh Pod a confirmed handoff step needs.
pub(super) async fn confirm_fresh(
    ctx: &Reconciler,
    fleet: &Arc<CelldFleet>,
    cached: &Gathered,
    action: &Action,
    reading: Reading,
    capacity: &CapacitySignal,
) -> Result<(Confirmation, Option<Arc<Pod>>, Option<FreshRead>), Arc<kube::Error>> {
    let now = reading.now.wall;
    ctx.metrics.fresh_reads.inc();
    // Rule F2 reads the node of every terminating Pod again: those the caches show are
    // read in the same round trip as the rest.
    let nodes = cached
        .pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    let Some((fresh_fleet, g)) = ctx.fresh.read(fleet.clone(), nodes).await? else {
        return Ok((
            Confirmation::Hold("the CelldFleet is gone from the API server".into()),
            None,
            None,
        ));
    };
    // Rule R9 on fresh facts: the member a fresh disk is for is asked again now.
    if let Action::StartHandoff(h) = action {
        let target: Vec<&Pod> = own_members(&g, &fresh_fleet, &ctx.memory.force_deleted)
            .into_iter()
            .filter(|p| p.metadata.name.as_deref() == Some(h.pod.as_str()))
            .collect();
        super::recovery::listen(ctx, &target).await;
    }
    // The fresh read is compared with what the watches observed; it starts no
    // observation of its own (`crate::clock::Observations`).
    let snapshot = match snapshot_of(ctx, &fresh_fleet, &g, reading, capacity, false) {
        Ok(s) => s,
        Err(e) => return Ok((Confirmation::Hold(e.to_string()), None, None)),
    };
    let plan = crate::decide(&snapshot, now, &ctx.config);
    let c = confirm::confirm(action, &plan);
    let pod_name = match &c {
        Confirmation::Confirmed(a) | Confirmation::Instead(a) => match a {
            Action::StartHandoff(h) => Some(h.pod.clone()),
            Action::ReleaseHandoff { name, .. } | Action::AbortHandoff { name, .. } => {
                Some(name.clone())
            }
            _ => None,
        },
        Confirmation::Hold(_) => None,
    };
    let pod = pod_name.and_then(|n| {
        g.pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(n.as_str()))
            .cloned()
            .map(Arc::new)
    });
    let read = FreshRead {
        fleet: Arc::new(fresh_fleet),
        snapshot,
        plan,
    };
    Ok((c, pod, Some(read)))
}
