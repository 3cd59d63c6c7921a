//! The `CelldFleet` resource: the fleet file users write, and the object the healer reads
//! and reports on. Field names are the contract (DESIGN.md); optional fields stay `None`
//! when the user leaves them out, and the `effective_*` accessors apply the defaults, so
//! rendering the fleet back never adds fields the user did not write.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::status::CelldFleetStatus;

/// Desired state of one celld fleet.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "fleet.celld.dev",
    version = "v1alpha1",
    kind = "CelldFleet",
    namespaced,
    status = "CelldFleetStatus",
    shortname = "cf",
    category = "celld",
    scale(
        spec_replicas_path = ".spec.members",
        status_replicas_path = ".status.members",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn(name = "Profile", type_ = "string", json_path = ".spec.profile"),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".status.desiredMembers"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyMembers"),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 40").message("fleet name must be a DNS label of at most 40 characters"),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("self.identity == oldSelf.identity && self.profile == oldSelf.profile && self.storage == oldSelf.storage && self.placement == oldSelf.placement").message("identity, profile, storage and placement are fixed when the fleet is created")
)]
pub struct CelldFleetSpec {
    /// The fleet's identity: 26 characters of lowercase letters and digits, written once
    /// by `celld-gen init`. It labels every object and disk of the fleet.
    pub identity: String,
    /// `Bucket` (members keep nothing locally) or `PersistentFleet` (each member owns a disk).
    pub profile: Profile,
    /// Bucket profile only: `Deployment` (default) or `Ordered` (a StatefulSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_workload: Option<BucketWorkload>,
    /// The celld image, pinned by digest: `registry/repo@sha256:<64 hex>`.
    pub runtime_image: String,
    /// Number of members, 1..100 (default 3). Leave it out in capacity mode External.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<i32>,
    /// ServiceAccount the members run as (it must exist in the fleet's namespace).
    pub service_account_name: String,
    /// The bucket the fleet shares, and the members' disks.
    pub storage: Storage,
    /// Which zones members run in, and how strictly they spread.
    pub placement: Placement,
    /// Resources and runtime limits of each member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
    /// Shutdown timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Restart and pause switches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// Extra environment variables for celld (names the generator or celld own are refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// OpenTelemetry export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Telemetry>,
    /// Public HTTP routing through a Gateway API Gateway or an Ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Routing>,
    /// Capacity policy; absent means `members` is set by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
    /// Refuse deletion of the fleet (default `true`): the API server's admission policy
    /// and the healer both keep a protected fleet, its workload and every disk when the
    /// CelldFleet is deleted. Set `false` in Git, sync, then delete to remove the fleet
    /// and its disks on purpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_protection: Option<bool>,
}

/// How members keep their data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Profile {
    /// Every write waits for the bucket; members are interchangeable.
    Bucket,
    /// Each member owns a disk; writes are acknowledged by the fleet.
    PersistentFleet,
}

/// Workload kind of a Bucket fleet.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum BucketWorkload {
    /// A Deployment.
    #[default]
    Deployment,
    /// A StatefulSet: stable member names, one at a time.
    Ordered,
}

/// The shared bucket and the members' disks.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Storage {
    /// Bucket name (3..63 lowercase letters, digits or hyphens). Reserved to this fleet for ever.
    pub bucket: String,
    /// Bucket region, e.g. `us-east-1`; zones are this plus one letter.
    pub region: String,
    /// Optional key prefix inside the bucket (a DNS label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// A custom S3-compatible endpoint (MinIO and the like).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<StorageEndpoint>,
    /// StorageClass of member disks: required for PersistentFleet, refused for Bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Disk size (PersistentFleet) or scratch size (Bucket) in GiB, 1..16384 (default 10).
    #[serde(default, rename = "sizeGiB", skip_serializing_if = "Option::is_none")]
    pub size_gib: Option<i32>,
}

/// A custom S3-compatible endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageEndpoint {
    /// HTTP(S) origin, e.g. `http://minio.store:9000` (no path, query or credentials).
    pub url: String,
    /// Secret in the fleet's namespace with keys `accessKeyId` and `secretAccessKey`.
    pub credentials_secret_name: String,
    /// Where the endpoint runs, for the egress rule; absent allows its port to any address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
}

/// A destination for an egress rule: one IP, or Pods by label.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Egress {
    /// One address as a /32 (or /128) CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// Labels of the destination Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,
    /// Namespace of the destination Pods (default: the fleet's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Zones and spread.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Placement {
    /// 1..6 zones of `storage.region`, e.g. `us-east-1a`.
    pub zones: Vec<String>,
    /// `Strict` (default): one member per node, even spread required. `Relaxed`: preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PlacementMode>,
}

/// How strictly members spread over zones and nodes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum PlacementMode {
    /// Required anti-affinity per node and a required even zone spread.
    #[default]
    Strict,
    /// Preferred anti-affinity and spread.
    Relaxed,
}

/// Resources and runtime limits of each member.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Execution {
    /// CPU request (default `250m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<String>,
    /// CPU limit (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<String>,
    /// Memory request (default `512Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_request: Option<String>,
    /// Memory limit (default `1Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
    /// Most cells resident at once, 1..1000000 (default: celld's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_resident_cells: Option<i64>,
    /// Seconds before an idle cell is evicted, 1..86400 (default: celld's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_evict_seconds: Option<i64>,
}

/// Shutdown timing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Lifecycle {
    /// Time celld has to drain on SIGTERM, 1..3600 (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_seconds: Option<i64>,
    /// Pod termination grace, at least shutdownSeconds + 5 (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_seconds: Option<i64>,
}

/// Restart and pause switches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Maintenance {
    /// Any new value rolls every member once (at most 128 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_token: Option<String>,
    /// Stops every lifecycle action of the healer (growth, contraction, healing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// One extra environment variable.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvVar {
    /// Variable name.
    pub name: String,
    /// Literal value (exactly one of value / secretKeyRef).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Value from a Secret key in the fleet's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
}

/// A key of a Secret in the fleet's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key in the Secret.
    pub key: String,
}

/// OpenTelemetry export.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Telemetry {
    /// OTLP/HTTP base URL of the collector, e.g. `http://otel.obs:4318`.
    #[serde(rename = "collectorURL")]
    pub collector_url: String,
    /// Where the collector runs, for the egress rule.
    pub egress: Egress,
    /// Trace sampler name (OTEL_TRACES_SAMPLER).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<Sampler>,
    /// Sampler argument, 0..1, only for the ratio samplers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_arg: Option<String>,
    /// Flush interval in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_milliseconds: Option<i64>,
    /// Flush size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_bytes: Option<i64>,
    /// Secret key holding OTLP headers (OTEL_EXPORTER_OTLP_HEADERS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_secret_key_ref: Option<SecretKeyRef>,
}

/// OpenTelemetry trace samplers celld accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    /// Sample everything.
    AlwaysOn,
    /// Sample nothing.
    AlwaysOff,
    /// Follow the parent, else sample.
    ParentbasedAlwaysOn,
    /// Follow the parent, else drop.
    ParentbasedAlwaysOff,
    /// Sample a ratio (samplerArg).
    Traceidratio,
    /// Follow the parent, else sample a ratio (samplerArg).
    ParentbasedTraceidratio,
}

impl Sampler {
    /// The value celld reads from OTEL_TRACES_SAMPLER.
    pub fn as_str(self) -> &'static str {
        match self {
            Sampler::AlwaysOn => "always_on",
            Sampler::AlwaysOff => "always_off",
            Sampler::ParentbasedAlwaysOn => "parentbased_always_on",
            Sampler::ParentbasedAlwaysOff => "parentbased_always_off",
            Sampler::Traceidratio => "traceidratio",
            Sampler::ParentbasedTraceidratio => "parentbased_traceidratio",
        }
    }

    /// Whether the sampler takes a ratio argument.
    pub fn takes_ratio(self) -> bool {
        matches!(
            self,
            Sampler::Traceidratio | Sampler::ParentbasedTraceidratio
        )
    }
}

/// Public HTTP routing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Routing {
    /// 1..16 unique hostnames (a `*.` wildcard prefix is allowed).
    pub hostnames: Vec<String>,
    /// The data-plane Pods allowed to send traffic to the members.
    pub source: RoutingSource,
    /// Route through a Gateway API Gateway (exactly one of gateway / ingress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayRef>,
    /// Route through an Ingress (exactly one of gateway / ingress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressRoute>,
}

/// The Pods that carry routed traffic.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoutingSource {
    /// Their namespace.
    pub namespace: String,
    /// 1..16 labels that select them.
    pub pod_labels: BTreeMap<String, String>,
}

/// A parent Gateway.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayRef {
    /// Gateway name.
    pub name: String,
    /// Gateway namespace (default: the fleet's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Listener name on the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// An Ingress route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngressRoute {
    /// IngressClass name.
    pub class_name: String,
    /// TLS Secret in the fleet's namespace, covering every hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_name: Option<String>,
    /// At most 16 annotations for the ingress controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Who decides the number of members.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum CapacityMode {
    /// Recommend only; `members` still decides.
    #[default]
    Shadow,
    /// Grow on load, never shrink below `members`.
    ScaleOut,
    /// Grow and shrink between minMembers and maxMembers.
    Automatic,
    /// One `/scale` writer (HPA, KEDA) owns `spec.members`.
    External,
}

/// Capacity policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Capacity {
    /// Policy mode (default Shadow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CapacityMode>,
    /// Fewest members, 1..100, at least the number of zones (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_members: Option<i32>,
    /// Most members, 1..100 (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_members: Option<i32>,
    /// Members added per scale-out, 1..10 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_out_step: Option<i32>,
    /// Seconds between samples, 5..300 (default 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_interval_seconds: Option<i32>,
    /// Oldest usable sample, 10..600 seconds (default 45).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
    /// Shortest averaging window, 1..60 seconds (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_window_seconds: Option<i32>,
    /// Longest averaging window, 5..300 seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_window_seconds: Option<i32>,
    /// Samples needed for a decision, 2..100 (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_samples: Option<i32>,
    /// Load must stay high this long before growth, 10..3600 (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_out_stabilization_seconds: Option<i32>,
    /// Load must stay low this long before contraction, 60..86400 (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in_stabilization_seconds: Option<i32>,
    /// Pause after a growth, 30..86400 (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_out_cooldown_seconds: Option<i32>,
    /// Pause after a contraction, 60..86400 (default 900).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in_cooldown_seconds: Option<i32>,
    /// Time a new member has to become ready, 60..86400 (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_timeout_seconds: Option<i32>,
    /// Time to watch load settle after a change, 30..3600 (default 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redistribution_observation_seconds: Option<i32>,
    /// Per-member CPU above which to grow, millicores, 1..1000000 (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_high_millicores: Option<i32>,
    /// Per-member CPU below which to shrink, millicores (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_low_millicores: Option<i32>,
    /// Per-member memory above which to grow, MiB, 1..1048576 (default 768).
    #[serde(
        default,
        rename = "memoryHighMiB",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory_high_mib: Option<i32>,
    /// Per-member memory below which to shrink, MiB (default 384).
    #[serde(
        default,
        rename = "memoryLowMiB",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory_low_mib: Option<i32>,
}
