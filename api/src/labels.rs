//! Every label, annotation and finalizer key the project writes, in one place, so the
//! generator and the healer can never disagree on a spelling.

/// API group of our two custom resources.
pub const GROUP: &str = "fleet.celld.dev";
/// API version of our two custom resources.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` string of our custom resources.
pub const API_VERSION: &str = "fleet.celld.dev/v1alpha1";

/// The fleet's identity label: the only selector, and the ownership proof on disks.
pub const IDENTITY: &str = "fleet.celld.dev/identity";
/// Label client Pods carry to be admitted to a fleet's application port (value: fleet name).
pub const CLIENT_OF: &str = "fleet.celld.dev/client-of";
/// Pod template annotation that carries `maintenance.restartToken`; changing it rolls members.
pub const RESTART_TOKEN: &str = "fleet.celld.dev/restart-token";
/// Claim template annotation naming the bucket reservation the disk belongs to.
pub const STORAGE_RESERVATION: &str = "fleet.celld.dev/storage-reservation";
/// Finalizer the healer puts on a CelldFleet so deletion runs in order.
pub const FLEET_FINALIZER: &str = "fleet.celld.dev/lifecycle-protection";
/// Finalizer the healer puts on a Pod while that member's disk is being replaced.
pub const REPLACEMENT_FINALIZER: &str = "fleet.celld.dev/replacing-disk";
/// Pod annotation that records a disk handoff (JSON: claim uid, resourceVersion, committed).
pub const REPLACEMENT_RECORD: &str = "fleet.celld.dev/replacement-claim";
/// Pod label that indexes Pods with a handoff in progress (value: fleet identity).
pub const REPLACEMENT_INDEX: &str = "fleet.celld.dev/replacement-fleet";
/// Reservation annotation holding capacity-policy history; removed when there is none.
pub const CAPACITY_HISTORY: &str = "fleet.celld.dev/capacity-history";
/// Claim annotation an operator sets (value `"true"`) to delete one fleet disk by hand:
/// the install bundle's disk-protection admission policy refuses deleting a claim that
/// carries [`IDENTITY`] otherwise (unless the healer itself deletes it).
pub const DELETION_ALLOWED: &str = "fleet.celld.dev/deletion-allowed";
/// Value of [`DELETION_ALLOWED`] that allows the deletion.
pub const DELETION_ALLOWED_VALUE: &str = "true";
/// CelldFleet annotation an operator sets to let the healer replace disks of several
/// members Lost at once (rule R8): the uids of exactly those claims, comma-separated. A
/// uid names one claim for ever, so a value left behind authorizes nothing later.
pub const ACCEPT_DISK_LOSS: &str = "fleet.celld.dev/accept-disk-loss";
/// Field manager the healer uses for every server-side apply.
pub const HEALER_FIELD_MANAGER: &str = "celld-healer";

/// Field managers of the GitOps engines, which co-own `spec.replicas` of a fleet workload
/// only at its live value (their ignore rules copy or adopt it; before Kubernetes 1.36
/// Git's `replicas: 0` at creation): Argo CD's server-side apply (`argocd-controller`)
/// and Flux's kustomize-controller. The healer takes the field over from these, and only
/// these ([`HEALER_FIELD_MANAGER`]'s forced apply); any other co-owner (`kubectl scale`, a
/// person's apply) is reported and left alone.
pub const GITOPS_FIELD_MANAGERS: &[&str] = &["argocd-controller", "kustomize-controller"];
/// Label every object rendered by the generator carries, for `kubectl get -l`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY`].
pub const MANAGED_BY_VALUE: &str = "celld-gen";
/// Label and value that select the healer's own Pods (NetworkPolicy admits them to 8081).
pub const HEALER_NAME_LABEL: &str = "app.kubernetes.io/name";
/// Value of [`HEALER_NAME_LABEL`] on healer Pods.
pub const HEALER_NAME: &str = "celld-healer";
/// Label of a sharded healer's Pods naming their shard index (`celld-gen install
/// --shards`), so each shard's Deployment, PodDisruptionBudget and anti-affinity select
/// only its own Pods.
pub const HEALER_SHARD_LABEL: &str = "fleet.celld.dev/healer-shard";
/// Namespace the healer is installed into by default.
pub const HEALER_NAMESPACE: &str = "celld-system";
/// Argo CD: never prune or delete the object carrying this annotation value.
pub const ARGOCD_SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";
/// Flux: never prune the object carrying this annotation with value `disabled`.
pub const FLUX_PRUNE: &str = "kustomize.toolkit.fluxcd.io/prune";
/// Value of [`FLUX_PRUNE`] that stops Flux from pruning the object.
pub const FLUX_PRUNE_DISABLED: &str = "disabled";
/// Annotation celld-gen renders on a CelldFleet whose `spec.members` belongs to a `/scale`
/// writer (capacity mode External), so that GitOps ignore rules can select exactly those
/// fleets (the Flux Kustomization of `celld-gen install` does).
pub const MEMBERS_OWNER: &str = "fleet.celld.dev/members-owner";
/// Value of [`MEMBERS_OWNER`]: the `/scale` subresource's writer.
pub const MEMBERS_OWNER_SCALE: &str = "scale";
/// Argo CD sync options every rendered CelldFleet carries (in [`ARGOCD_SYNC_OPTIONS`]):
/// pruning it (its file removed from Git) or deleting it with its Application waits for a
/// person to confirm in Argo CD, so a GitOps tool never starts a fleet deletion silently.
pub const FLEET_ARGOCD_SYNC_OPTIONS: [&str; 2] = ["Prune=confirm", "Delete=confirm"];
/// Label that names the zone of a node (and of a zonal disk).
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// Name of the claim template, so claims are `data-<fleet>-<ordinal>`.
pub const CLAIM_TEMPLATE: &str = "data";

/// Name of the claim of a member.
pub fn claim_name(fleet: &str, ordinal: u32) -> String {
    format!("{CLAIM_TEMPLATE}-{fleet}-{ordinal}")
}

/// Name of the Pod of a StatefulSet member.
pub fn member_name(fleet: &str, ordinal: u32) -> String {
    format!("{fleet}-{ordinal}")
}

/// Ordinal of a StatefulSet member Pod name, if `pod` is `<fleet>-<n>`.
pub fn member_ordinal(fleet: &str, pod: &str) -> Option<u32> {
    let rest = pod.strip_prefix(fleet)?.strip_prefix('-')?;
    // Leading zeros or signs are not names the StatefulSet controller produces.
    if rest.is_empty() || (rest.len() > 1 && rest.starts_with('0')) {
        return None;
    }
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

/// Ordinal of a member claim name, if `claim` is `data-<fleet>-<n>`.
pub fn claim_ordinal(fleet: &str, claim: &str) -> Option<u32> {
    let rest = claim.strip_prefix(CLAIM_TEMPLATE)?.strip_prefix('-')?;
    member_ordinal(fleet, rest)
}

/// The fleet a member claim name names, if `claim` looks like `data-<fleet>-<n>`: the
/// one fleet for which [`claim_ordinal`] can accept it (an ordinal has no `-`), so a
/// cache can be indexed by it.
pub fn claim_fleet(claim: &str) -> Option<&str> {
    let rest = claim.strip_prefix(CLAIM_TEMPLATE)?.strip_prefix('-')?;
    let (fleet, ordinal) = rest.rsplit_once('-')?;
    let digits = !ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit());
    (!fleet.is_empty() && digits).then_some(fleet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_parse_only_controller_names() {
        assert_eq!(member_ordinal("alpha", "alpha-0"), Some(0));
        assert_eq!(member_ordinal("alpha", "alpha-12"), Some(12));
        assert_eq!(member_ordinal("alpha", "alpha-01"), None);
        assert_eq!(member_ordinal("alpha", "alpha-x"), None);
        assert_eq!(member_ordinal("alpha", "alpha-peers-1"), None);
        assert_eq!(member_ordinal("alpha", "alphabet-1"), None);
        assert_eq!(claim_ordinal("alpha", "data-alpha-3"), Some(3));
        assert_eq!(claim_ordinal("alpha", "data-beta-3"), None);
        assert_eq!(claim_name("alpha", 2), "data-alpha-2");
        assert_eq!(claim_fleet("data-alpha-3"), Some("alpha"));
        assert_eq!(claim_fleet("data-a-b-12"), Some("a-b"));
        assert_eq!(claim_fleet("data-alpha"), None);
        assert_eq!(claim_fleet("data-alpha-"), None);
        assert_eq!(claim_fleet("other-alpha-3"), None);
    }

    /// Every claim some fleet's [`claim_ordinal`] accepts names that fleet by
    /// [`claim_fleet`]: an index by it misses no member claim.
    #[test]
    fn claim_fleet_names_every_fleet_claim_ordinal_accepts() {
        let names = ["a", "alpha", "a-b", "alpha-1", "x-0-y", "data", "data-a"];
        let claims = [
            "data-a-0",
            "data-alpha-3",
            "data-a-b-12",
            "data-alpha-1-2",
            "data-x-0-y-7",
            "data-data-1",
            "data-data-a-01",
            "data-data-a-5",
            "data-alpha-",
            "data--1",
            "data-alpha-x",
            "data-a-b",
            "datum-a-1",
        ];
        for c in claims {
            for f in names {
                if claim_ordinal(f, c).is_some() {
                    assert_eq!(claim_fleet(c), Some(f), "{c} of {f}");
                }
            }
        }
    }
}
