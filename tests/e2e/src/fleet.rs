//! Fleet files and applying what `celld_gen` renders from them, as Argo CD does.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use celld_gen::api::CelldFleet;
use celld_gen::api::validate::ValidatedFleet;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::Value;

use crate::*;

/// A fleet file for tests: `members` members over the three kubesim zones, short
/// shutdown and grace, small requests.
#[derive(Clone, Debug)]
pub struct FleetFile {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Identity.
    pub identity: String,
    /// `PersistentFleet` or `Bucket`.
    pub profile: &'static str,
    /// `spec.members`.
    pub members: i32,
    /// `Ordered` for a Bucket StatefulSet.
    pub bucket_workload: Option<&'static str>,
    /// `spec.deletionProtection` (None: left out, which means protected).
    pub deletion_protection: Option<bool>,
    /// `storage.region`.
    pub region: String,
    /// `placement.zones`: the zones of the test's kubesim nodes ([`crate::Env::zones`]).
    pub zones: Vec<String>,
}

impl FleetFile {
    /// A PersistentFleet in the default slot's zones; a test places it on its own
    /// nodes with [`FleetFile::placed`] (or makes it with [`crate::Env::persistent`]).
    pub fn persistent(ns: &str, name: &str, members: i32) -> FleetFile {
        FleetFile {
            namespace: ns.into(),
            name: name.into(),
            identity: new_identity(),
            profile: "PersistentFleet",
            members,
            bucket_workload: None,
            deletion_protection: None,
            region: "us-east-1".into(),
            zones: ZONES.iter().map(|z| z.to_string()).collect(),
        }
    }

    /// The same fleet in `zones` of `region`.
    pub fn placed(mut self, region: &str, zones: &[String]) -> FleetFile {
        self.region = region.into();
        self.zones = zones.to_vec();
        self
    }

    /// A Bucket fleet on a Deployment.
    pub fn bucket(ns: &str, name: &str, members: i32) -> FleetFile {
        FleetFile {
            profile: "Bucket",
            ..FleetFile::persistent(ns, name, members)
        }
    }

    /// The same fleet with `spec.deletionProtection` set.
    pub fn protection(mut self, on: bool) -> FleetFile {
        self.deletion_protection = Some(on);
        self
    }

    /// The fleet file text.
    pub fn yaml(&self) -> String {
        let storage_class = if self.profile == "PersistentFleet" {
            format!("\n    storageClassName: {STORAGE_CLASS}\n    sizeGiB: 1")
        } else {
            String::new()
        };
        let bw = self
            .bucket_workload
            .map(|b| format!("\n  bucketWorkload: {b}"))
            .unwrap_or_default();
        let protection = self
            .deletion_protection
            .map(|p| format!("  deletionProtection: {p}\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: fleet.celld.dev/v1alpha1
kind: CelldFleet
metadata:
  name: {name}
  namespace: {ns}
spec:
  identity: {id}
  profile: {profile}{bw}
  runtimeImage: ghcr.io/ewhauser/celld@sha256:{digest}
  members: {members}
  serviceAccountName: {sa}
  storage:
    bucket: e2e-{ns}-{name}
    region: {region}{storage_class}
  placement:
    zones: [{zones}]
    mode: Strict
  execution:
    cpuRequest: 50m
    memoryRequest: 64Mi
    memoryLimit: 256Mi
  lifecycle:
    shutdownSeconds: 1
    terminationGraceSeconds: {grace}
{protection}",
            name = self.name,
            ns = self.namespace,
            id = self.identity,
            profile = self.profile,
            digest = "ab".repeat(32),
            members = self.members,
            sa = MEMBER_SA,
            region = self.region,
            zones = self.zones.join(", "),
            grace = GRACE_S,
        )
    }
}

/// Parses and validates a fleet file with the generator.
pub fn load_fleet(yaml: &str) -> Result<CelldFleet> {
    validated(yaml).map(ValidatedFleet::into_fleet)
}

/// [`load_fleet`], keeping the proof of validity that rendering asks for.
pub fn validated(yaml: &str) -> Result<ValidatedFleet> {
    celld_gen::load::load_str(Path::new("e2e-fleet.yaml"), yaml).map_err(|d| {
        anyhow!(
            "invalid test fleet:\n{}",
            d.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

/// The rendered objects of a fleet, as JSON, in apply order.
pub fn rendered_objects(fleet: &CelldFleet) -> Result<Vec<Value>> {
    // Rendering takes only a validated fleet: validate this one again, as a file (JSON is
    // YAML), since a test may have changed it after loading.
    let valid = validated(&serde_json::to_string(fleet)?)?;
    let r = celld_gen::render::render_fleet_with(&valid, &crate::render_options()?)
        .map_err(|e| anyhow!("render: {e}"))?;
    r.objects
        .iter()
        .map(|o| serde_saphyr::from_str::<Value>(&o.yaml).map_err(|e| anyhow!("{}: {e}", o.file)))
        .collect()
}

/// Plural of the kinds the generator renders.
pub(crate) fn plural(kind: &str) -> Result<&'static str> {
    Ok(match kind {
        "CelldBucketReservation" => "celldbucketreservations",
        "CelldFleet" => "celldfleets",
        "NetworkPolicy" => "networkpolicies",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "Service" => "services",
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "HTTPRoute" => "httproutes",
        "Ingress" => "ingresses",
        "HorizontalPodAutoscaler" => "horizontalpodautoscalers",
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "CustomResourceDefinition" => "customresourcedefinitions",
        "StorageClass" => "storageclasses",
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
        other => bail!("no plural known for kind {other}"),
    })
}

/// The `Api` for an object given as JSON.
pub fn dynamic_api(client: &Client, obj: &Value) -> Result<(Api<DynamicObject>, String)> {
    let api_version = obj["apiVersion"].as_str().context("apiVersion")?;
    let kind = obj["kind"].as_str().context("kind")?;
    let name = obj["metadata"]["name"]
        .as_str()
        .context("metadata.name")?
        .to_string();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural(kind)?);
    let api = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    Ok((api, name))
}

/// Server-side applies `obj` under `manager` (forced, as Argo CD does); with `dry_run`,
/// returns what the object would become.
pub async fn apply(
    client: &Client,
    obj: &Value,
    manager: &str,
    dry_run: bool,
) -> Result<DynamicObject> {
    let (api, name) = dynamic_api(client, obj)?;
    let mut pp = PatchParams::apply(manager).force();
    if dry_run {
        pp = pp.dry_run();
    }
    api.patch(&name, &pp, &Patch::Apply(obj))
        .await
        .with_context(|| format!("applying {} {name}", obj["kind"]))
}

/// Applies every rendered object of a fleet as Argo CD would, with the Application
/// `celld-gen install` renders ([`as_synced`]).
pub async fn apply_rendered(
    client: &Client,
    fleet: &CelldFleet,
    dry_run: bool,
) -> Result<Vec<DynamicObject>> {
    let mut out = Vec::new();
    for o in rendered_objects(fleet)? {
        let o = as_synced(client, o).await?;
        out.push(apply(client, &o, ARGO, dry_run).await?);
    }
    Ok(out)
}

/// `obj` as an Argo CD sync with `RespectIgnoreDifferences=true` applies it: a rendered
/// `spec.replicas` (before Kubernetes 1.36, `replicas: 0`) takes the live value once
/// the workload exists, so a re-sync never writes Git's 0 back. (Argo CD copies the live
/// value into a workload rendered without the field too; the real code does that in the
/// `gitops_argocd` tests. Here the field is left out then, as before.)
pub async fn as_synced(client: &Client, mut obj: Value) -> Result<Value> {
    let workload = matches!(obj["kind"].as_str(), Some("StatefulSet" | "Deployment"));
    if !workload || obj.pointer("/spec/replicas").is_none() {
        return Ok(obj);
    }
    let (api, name) = dynamic_api(client, &obj)?;
    if let Some(live) = api.get_opt(&name).await?
        && let Some(n) = live.data.pointer("/spec/replicas")
    {
        obj["spec"]["replicas"] = n.clone();
    }
    Ok(obj)
}
