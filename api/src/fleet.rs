//! The `CelldFleet` resource: the fleet file users write, and the object the healer reads
//! and reports on. Field names are the contract between Git, `celld-gen` and the healer
//! (`docs/architecture.md`; who writes which field: `docs/field-ownership.md`); optional
//! fields stay `None` when the user leaves them out, and the `effective_*` accessors
//! apply the defaults, so rendering the fleet back never adds fields the user did not
//! write.
//!
//! Over 500 lines on purpose: the whole fleet file, section by section, in one place, so
//! it reads as the schema users write against.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cel;
use super::defaults as d;
use super::status::CelldFleetStatus;
use crate::validate::formats as f;

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
    validation = cel::name_length(),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("self.identity == oldSelf.identity && self.profile == oldSelf.profile && self.storage == oldSelf.storage && self.placement == oldSelf.placement").message("identity, profile, storage and placement are fixed when the fleet is created"),
    validation = cel::members_cover_zones(),
    validation = cel::capacity_min_covers_zones(),
    validation = cel::bucket_workload_only_for_bucket(),
    validation = cel::storage_class_iff_persistent(),
    validation = cel::zones_of_region(),
    validation = cel::aws_region_without_endpoint()
)]
pub struct CelldFleetSpec {
    /// The fleet's identity: 26 characters of lowercase letters and digits, written once
    /// by `celld-gen init`. It labels every object and disk of the fleet.
    #[schemars(length(equal = d::IDENTITY_LENGTH), pattern(f::identity_pattern()))]
    pub identity: String,
    /// `Bucket` (members keep nothing locally) or `PersistentFleet` (each member owns a disk).
    pub profile: Profile,
    /// Bucket profile only: `Deployment` (default) or `Ordered` (a StatefulSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_workload: Option<BucketWorkload>,
    /// The celld image, pinned by digest: `registry/repo@sha256:<64 hex>`, or
    /// `registry/repo:tag@sha256:<64 hex>` (the tag is kept here for people and update
    /// bots; the members run the digest alone).
    #[schemars(pattern(f::IMAGE_DIGEST_PATTERN))]
    pub runtime_image: String,
    /// Number of members, 1..100 (default 3). Leave it out in capacity mode External: the
    /// healer sets the first value (minMembers) so `/scale` works, then the `/scale`
    /// writer owns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::MEMBERS_BOUNDS.min, max = d::MEMBERS_BOUNDS.max))]
    pub members: Option<i32>,
    /// ServiceAccount the members run as (it must exist in the fleet's namespace).
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
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
    #[schemars(length(max = d::MAX_ENV))]
    #[x_kube(validation = cel::unique_env_names())]
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
    /// Egress to the node-local agent that hands out bucket credentials (default: the EKS
    /// Pod Identity agent, `169.254.170.23/32` port 80). Change it for another agent,
    /// or set `enabled: false` where members get credentials otherwise (a Secret with
    /// `storage.endpoint`, GKE or AKS workload identity over HTTPS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_agent: Option<CredentialsAgent>,
    /// Refuse deletion of the fleet (default `true`): the API server's admission policy
    /// and the healer both keep a protected fleet, its workload and every disk when the
    /// CelldFleet is deleted. Set `false` in Git, sync, then delete to remove the fleet
    /// and its disks on purpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_protection: Option<bool>,
    /// What the platform needs on every member Pod: labels and annotations, a
    /// nodeSelector, tolerations, extra node affinity (added to the zone placement, never
    /// replacing it), a priority class, image pull Secrets and a runtime class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodSettings>,
}

/// How members keep their data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = cel::enum_max_length)]
pub enum Profile {
    /// Every write waits for the bucket; members are interchangeable.
    Bucket,
    /// Each member owns a disk; writes are acknowledged by the fleet.
    PersistentFleet,
}

/// Workload kind of a Bucket fleet.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
#[schemars(transform = cel::enum_max_length)]
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
    #[schemars(
        length(min = d::BUCKET_LENGTH_BOUNDS.min, max = d::BUCKET_LENGTH_BOUNDS.max),
        pattern(f::BUCKET_PATTERN)
    )]
    pub bucket: String,
    /// Bucket region: AWS (`us-east-1`), or with `endpoint` also Google Cloud
    /// (`us-central1`) or Azure (`eastus`) names. Zones are named after it unless
    /// `placement.zoneFormat` is `Any`.
    #[schemars(length(max = d::MAX_REGION_LENGTH), pattern(f::REGION_PATTERN))]
    pub region: String,
    /// Optional key prefix inside the bucket (a DNS label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_DNS_LABEL_LENGTH), pattern(f::DNS_LABEL_PATTERN))]
    pub prefix: Option<String>,
    /// A custom S3-compatible endpoint (MinIO and the like).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<StorageEndpoint>,
    /// StorageClass of member disks: required for PersistentFleet, refused for Bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub storage_class_name: Option<String>,
    /// Disk size (PersistentFleet) or scratch size (Bucket) in GiB, 1..16384 (default 10).
    #[serde(default, rename = "sizeGiB", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::SIZE_GIB_BOUNDS.min, max = d::SIZE_GIB_BOUNDS.max))]
    pub size_gib: Option<i32>,
}

/// A custom S3-compatible endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageEndpoint {
    /// HTTP(S) origin, e.g. `http://minio.store:9000` (no path, query or credentials).
    pub url: String,
    /// Secret in the fleet's namespace with keys `accessKeyId` and `secretAccessKey`.
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub credentials_secret_name: String,
    /// Where the endpoint runs, for the egress rule; absent allows its port to any address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
}

/// A destination for an egress rule: one IP, or Pods by label.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = cel::one_egress_destination(),
    validation = cel::egress_namespace_with_labels()
)]
pub struct Egress {
    /// One address as a /32 (or /128) CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// Labels of the destination Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "minProperties" = d::POD_LABELS_BOUNDS.min,
        "maxProperties" = d::POD_LABELS_BOUNDS.max
    ))]
    pub pod_labels: Option<BTreeMap<String, String>>,
    /// Namespace of the destination Pods (default: the fleet's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_DNS_LABEL_LENGTH), pattern(f::DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
}

/// Zones and spread.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Placement {
    /// 1..6 zones, as the `topology.kubernetes.io/zone` node label names them, e.g.
    /// `us-east-1a`, `us-central1-a`, `eastus-1`; see `zoneFormat`.
    #[schemars(
        length(min = d::ZONES_BOUNDS.min, max = d::ZONES_BOUNDS.max),
        inner(length(max = d::MAX_ZONE_LENGTH), pattern(f::ZONE_PATTERN))
    )]
    #[x_kube(validation = cel::unique_strings("zone"))]
    pub zones: Vec<String>,
    /// How zones are named: `Cloud` (default) or `Any`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(description = f::ZONE_FORMATS)]
    pub zone_format: Option<ZoneFormat>,
    /// `Strict` (default): one member per node, even spread required. `Relaxed`: preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PlacementMode>,
}

/// The node-local credentials agent members may reach.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = cel::agent_disabled_alone())]
pub struct CredentialsAgent {
    /// `false`: no egress rule for an agent (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The agent's address as a /32 (or /128) CIDR (default `169.254.170.23/32`; the EKS
    /// Pod Identity agent is `fd00:ec2::23/128` on IPv6 clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// TCP port, 1..65535 (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::PORT_BOUNDS.min, max = d::PORT_BOUNDS.max))]
    pub port: Option<i32>,
}

/// How zones are named. The schema's description is [`f::ZONE_FORMATS`] (the CRD takes
/// an optional enum's description from its type, the JSON Schema from the field).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
#[schemars(transform = cel::enum_max_length, description = f::ZONE_FORMATS)]
pub enum ZoneFormat {
    /// Zones of `storage.region`, named as AWS, Google Cloud or Azure name them; each is
    /// checked to belong to the region.
    #[default]
    Cloud,
    /// Any label value (on premises, fault domains, a bucket outside the cluster's
    /// region); not checked against `storage.region`.
    Any,
}

/// How strictly members spread over zones and nodes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
#[schemars(transform = cel::enum_max_length)]
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
    #[schemars(range(
        min = d::MAX_RESIDENT_CELLS_BOUNDS.min,
        max = d::MAX_RESIDENT_CELLS_BOUNDS.max
    ))]
    pub max_resident_cells: Option<i64>,
    /// Seconds before an idle cell is evicted, 1..86400 (default: celld's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(
        min = d::IDLE_EVICT_SECONDS_BOUNDS.min,
        max = d::IDLE_EVICT_SECONDS_BOUNDS.max
    ))]
    pub idle_evict_seconds: Option<i64>,
}

/// Shutdown timing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = cel::grace_covers_drain())]
pub struct Lifecycle {
    /// Time celld has to drain on SIGTERM, 1..3600 (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(
        min = d::SHUTDOWN_SECONDS_BOUNDS.min,
        max = d::SHUTDOWN_SECONDS_BOUNDS.max
    ))]
    pub shutdown_seconds: Option<i64>,
    /// Pod termination grace, at least shutdownSeconds + 5 (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(
        min = d::TERMINATION_GRACE_SECONDS_BOUNDS.min,
        max = d::TERMINATION_GRACE_SECONDS_BOUNDS.max
    ))]
    pub termination_grace_seconds: Option<i64>,
}

/// Restart and pause switches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Maintenance {
    /// Any new value rolls every member once (at most 128 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_RESTART_TOKEN_CHARS))]
    pub restart_token: Option<String>,
    /// Stops every lifecycle action of the healer (growth, contraction, healing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// One extra environment variable.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = cel::one_env_source())]
pub struct EnvVar {
    /// Variable name.
    #[schemars(length(max = d::MAX_ENV_NAME_LENGTH), pattern(f::ENV_NAME_PATTERN))]
    pub name: String,
    /// Literal value (exactly one of value / secretKeyRef).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_ENV_VALUE_BYTES))]
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
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub name: String,
    /// Key in the Secret.
    #[schemars(length(max = d::MAX_SECRET_KEY_LENGTH), pattern(f::SECRET_KEY_PATTERN))]
    pub key: String,
}

/// OpenTelemetry export.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = cel::sampler_arg_with_ratio())]
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
    #[schemars(range(
        min = d::FLUSH_MILLISECONDS_BOUNDS.min,
        max = d::FLUSH_MILLISECONDS_BOUNDS.max
    ))]
    pub flush_milliseconds: Option<i64>,
    /// Flush size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::FLUSH_BYTES_BOUNDS.min, max = d::FLUSH_BYTES_BOUNDS.max))]
    pub flush_bytes: Option<i64>,
    /// Secret key holding OTLP headers (OTEL_EXPORTER_OTLP_HEADERS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_secret_key_ref: Option<SecretKeyRef>,
}

/// OpenTelemetry trace samplers celld accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = cel::enum_max_length)]
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
    /// Every sampler.
    pub const ALL: [Sampler; 6] = [
        Sampler::AlwaysOn,
        Sampler::AlwaysOff,
        Sampler::ParentbasedAlwaysOn,
        Sampler::ParentbasedAlwaysOff,
        Sampler::Traceidratio,
        Sampler::ParentbasedTraceidratio,
    ];

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
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = cel::one_route())]
pub struct Routing {
    /// 1..16 unique hostnames (a `*.` wildcard prefix is allowed).
    #[schemars(
        length(min = d::HOSTNAMES_BOUNDS.min, max = d::HOSTNAMES_BOUNDS.max),
        inner(
            length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
            pattern(f::ROUTE_HOSTNAME_PATTERN)
        )
    )]
    #[x_kube(validation = cel::unique_strings("hostname"))]
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
    #[schemars(length(max = d::MAX_DNS_LABEL_LENGTH), pattern(f::DNS_LABEL_PATTERN))]
    pub namespace: String,
    /// 1..16 labels that select them.
    #[schemars(extend(
        "minProperties" = d::POD_LABELS_BOUNDS.min,
        "maxProperties" = d::POD_LABELS_BOUNDS.max
    ))]
    pub pod_labels: BTreeMap<String, String>,
}

/// A parent Gateway.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayRef {
    /// Gateway name.
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub name: String,
    /// Gateway namespace (default: the fleet's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_DNS_LABEL_LENGTH), pattern(f::DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
    /// Listener name on the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub section_name: Option<String>,
}

/// An Ingress route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngressRoute {
    /// IngressClass name.
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub class_name: String,
    /// TLS Secret in the fleet's namespace, covering every hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub tls_secret_name: Option<String>,
    /// At most 16 annotations for the ingress controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = d::MAX_INGRESS_ANNOTATIONS))]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Who decides the number of members.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
#[schemars(transform = cel::enum_max_length)]
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
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = cel::capacity_members_ordered(),
    validation = cel::capacity_cpu_ordered(),
    validation = cel::capacity_memory_ordered(),
    validation = cel::capacity_windows_ordered(),
    validation = cel::capacity_samples_fresh()
)]
pub struct Capacity {
    /// Policy mode (default Shadow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CapacityMode>,
    /// Fewest members, 1..100, at least the number of zones (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::MEMBERS_BOUNDS.min, max = d::MEMBERS_BOUNDS.max))]
    pub min_members: Option<i32>,
    /// Most members, 1..100 (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::MEMBERS_BOUNDS.min, max = d::MEMBERS_BOUNDS.max))]
    pub max_members: Option<i32>,
    /// Members added per scale-out, 1..10 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::SCALE_OUT_STEP_BOUNDS.min, max = d::SCALE_OUT_STEP_BOUNDS.max))]
    pub scale_out_step: Option<i32>,
    /// Seconds between samples, 5..300 (default 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::SAMPLE_INTERVAL_SECONDS_BOUNDS.min, max = d::SAMPLE_INTERVAL_SECONDS_BOUNDS.max))]
    pub sample_interval_seconds: Option<i32>,
    /// Oldest usable sample, 10..600 seconds (default 45).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::MAX_AGE_SECONDS_BOUNDS.min, max = d::MAX_AGE_SECONDS_BOUNDS.max))]
    pub max_age_seconds: Option<i32>,
    /// Shortest averaging window, 1..60 seconds (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::MIN_WINDOW_SECONDS_BOUNDS.min, max = d::MIN_WINDOW_SECONDS_BOUNDS.max))]
    pub min_window_seconds: Option<i32>,
    /// Longest averaging window, 5..300 seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::MAX_WINDOW_SECONDS_BOUNDS.min, max = d::MAX_WINDOW_SECONDS_BOUNDS.max))]
    pub max_window_seconds: Option<i32>,
    /// Samples needed for a decision, 2..100 (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::MIN_SAMPLES_BOUNDS.min, max = d::MIN_SAMPLES_BOUNDS.max))]
    pub min_samples: Option<i32>,
    /// Load must stay high this long before growth, 10..3600 (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::SCALE_OUT_STABILIZATION_SECONDS_BOUNDS.min, max = d::SCALE_OUT_STABILIZATION_SECONDS_BOUNDS.max))]
    pub scale_out_stabilization_seconds: Option<i32>,
    /// Load must stay low this long before contraction, 60..86400 (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::SCALE_IN_STABILIZATION_SECONDS_BOUNDS.min, max = d::SCALE_IN_STABILIZATION_SECONDS_BOUNDS.max))]
    pub scale_in_stabilization_seconds: Option<i32>,
    /// Pause after a growth, 30..86400 (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::SCALE_OUT_COOLDOWN_SECONDS_BOUNDS.min, max = d::SCALE_OUT_COOLDOWN_SECONDS_BOUNDS.max))]
    pub scale_out_cooldown_seconds: Option<i32>,
    /// Pause after a contraction, 60..86400 (default 900).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::SCALE_IN_COOLDOWN_SECONDS_BOUNDS.min, max = d::SCALE_IN_COOLDOWN_SECONDS_BOUNDS.max))]
    pub scale_in_cooldown_seconds: Option<i32>,
    /// Time a new member has to become ready, 60..86400 (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::PROVISIONING_TIMEOUT_SECONDS_BOUNDS.min, max = d::PROVISIONING_TIMEOUT_SECONDS_BOUNDS.max))]
    pub provisioning_timeout_seconds: Option<i32>,
    /// Time to watch load settle after a change, 30..3600 (default 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::REDISTRIBUTION_OBSERVATION_SECONDS_BOUNDS.min, max = d::REDISTRIBUTION_OBSERVATION_SECONDS_BOUNDS.max))]
    pub redistribution_observation_seconds: Option<i32>,
    /// Per-member CPU above which to grow, millicores, 1..1000000 (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::CPU_HIGH_MILLICORES_BOUNDS.min, max = d::CPU_HIGH_MILLICORES_BOUNDS.max))]
    pub cpu_high_millicores: Option<i32>,
    /// Per-member CPU below which to shrink, millicores (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = d::CPU_LOW_MILLICORES_BOUNDS.min, max = d::CPU_LOW_MILLICORES_BOUNDS.max))]
    pub cpu_low_millicores: Option<i32>,
    /// Per-member memory above which to grow, MiB, 1..1048576 (default 768).
    #[serde(
        default,
        rename = "memoryHighMiB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = d::MEMORY_HIGH_MIB_BOUNDS.min, max = d::MEMORY_HIGH_MIB_BOUNDS.max))]
    pub memory_high_mib: Option<i32>,
    /// Per-member memory below which to shrink, MiB (default 384).
    #[serde(
        default,
        rename = "memoryLowMiB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = d::MEMORY_LOW_MIB_BOUNDS.min, max = d::MEMORY_LOW_MIB_BOUNDS.max))]
    pub memory_low_mib: Option<i32>,
}

/// Settings of the member Pods that a platform requires: dedicated node pools (a
/// nodeSelector, tolerations, node affinity), priority classes, private registries,
/// sandboxed runtimes, and labels and annotations for tooling. Everything the fleet
/// computes itself (zone spread, host anti-affinity, the security context, the
/// container) stays the fleet's; these are added to it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSettings {
    /// Labels added to every member Pod. Keys under `fleet.celld.dev/` and the keys the
    /// StatefulSet and Deployment controllers write are reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = d::MAX_POD_METADATA))]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations added to every member Pod (mesh opt-outs, log and metrics agents,
    /// backup hooks). Keys under `fleet.celld.dev/` are reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = d::MAX_POD_METADATA))]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Node labels every member's node must carry, e.g. `node-pool: celld`. It must leave
    /// every zone of `placement.zones` possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = d::MAX_NODE_SELECTOR))]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Taints the members tolerate, as in a Pod spec. Tolerating
    /// `node.kubernetes.io/unreachable` or `not-ready` with effect NoExecute needs
    /// `tolerationSeconds`: a member kept for ever on a lost node is never healed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_TOLERATIONS))]
    pub tolerations: Option<Vec<Toleration>>,
    /// Node affinity added to the fleet's own: each required term is joined with the
    /// zone placement (a member's node must match the term and one of the fleet's
    /// zones), preferred terms are added as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    /// PriorityClass of the members (it must exist in the cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub priority_class_name: Option<String>,
    /// RuntimeClass of the members (gVisor, Kata and the like; it must exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub runtime_class_name: Option<String>,
    /// Secrets in the fleet's namespace to pull `runtimeImage` with, each once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_IMAGE_PULL_SECRETS))]
    #[x_kube(validation = cel::unique_names("image pull Secret"))]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// How the kubelet hands the disk to the members' group: `Always` (the Kubernetes
    /// default) or `OnRootMismatch`, which skips the walk over a large disk on every
    /// start when its top folder already belongs to the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group_change_policy: Option<FsGroupChangePolicy>,
}

/// A reference to an object in the fleet's namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalObjectReference {
    /// Its name.
    #[schemars(
        length(max = d::MAX_DNS_SUBDOMAIN_LENGTH),
        pattern(f::DNS_SUBDOMAIN_PATTERN)
    )]
    pub name: String,
}

/// A taint the members tolerate (the Kubernetes `Toleration`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = cel::toleration_exists_without_value(),
    validation = cel::toleration_keyless_exists(),
    validation = cel::toleration_seconds_no_execute()
)]
pub struct Toleration {
    /// Taint key; empty or absent with `operator: Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_QUALIFIED_NAME_LENGTH))]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// Taint value, with `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_DNS_LABEL_LENGTH))]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; absent matches every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// With `NoExecute`: how long a member stays on a node after the taint appears,
    /// 0..86400 seconds (absent: for ever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(
        min = d::TOLERATION_SECONDS_BOUNDS.min,
        max = d::TOLERATION_SECONDS_BOUNDS.max
    ))]
    pub toleration_seconds: Option<i64>,
}

/// How a toleration matches a taint's value.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
#[schemars(transform = cel::enum_max_length)]
pub enum TolerationOperator {
    /// The taint's value must equal `value`.
    #[default]
    Equal,
    /// Any value (leave `value` out).
    Exists,
}

/// A taint's effect.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = cel::enum_max_length)]
pub enum TaintEffect {
    /// New members are not scheduled there.
    NoSchedule,
    /// New members avoid it when they can.
    PreferNoSchedule,
    /// Running members are evicted.
    NoExecute,
}

/// Extra node affinity (the Kubernetes `NodeAffinity` shape, so it can be copied from a
/// Pod spec).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAffinity {
    /// Terms a member's node must match (any one of them), each joined with the zone
    /// placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
    /// Weighted terms the scheduler prefers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_NODE_SELECTOR_TERMS))]
    pub preferred_during_scheduling_ignored_during_execution: Option<Vec<PreferredSchedulingTerm>>,
}

/// Required node terms: a node matches if it matches any one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelector {
    /// 1..8 terms.
    #[schemars(length(min = 1, max = d::MAX_NODE_SELECTOR_TERMS))]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

/// A weighted preferred term.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreferredSchedulingTerm {
    /// 1..100.
    #[schemars(range(min = d::AFFINITY_WEIGHT_BOUNDS.min, max = d::AFFINITY_WEIGHT_BOUNDS.max))]
    pub weight: i32,
    /// The term.
    pub preference: NodeSelectorTerm,
}

/// One node term: every requirement must hold.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorTerm {
    /// Requirements on node labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_NODE_SELECTOR_REQUIREMENTS))]
    pub match_expressions: Option<Vec<NodeSelectorRequirement>>,
    /// Requirements on node fields (only `metadata.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_NODE_SELECTOR_REQUIREMENTS))]
    pub match_fields: Option<Vec<NodeSelectorRequirement>>,
}

/// One requirement on a node label (or field).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorRequirement {
    /// Label key (or `metadata.name` in matchFields).
    #[schemars(length(max = d::MAX_QUALIFIED_NAME_LENGTH))]
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt`.
    pub operator: NodeSelectorOperator,
    /// Values: some for In/NotIn, none for Exists/DoesNotExist, one integer for Gt/Lt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = d::MAX_NODE_SELECTOR_VALUES), inner(length(max = d::MAX_DNS_LABEL_LENGTH)))]
    pub values: Option<Vec<String>>,
}

/// How a node requirement compares.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = cel::enum_max_length)]
pub enum NodeSelectorOperator {
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label's value, an integer, is greater than the one value.
    Gt,
    /// The label's value, an integer, is less than the one value.
    Lt,
}

/// The kubelet's ownership change of a member's disk.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = cel::enum_max_length)]
pub enum FsGroupChangePolicy {
    /// Change every file's group on every mount.
    Always,
    /// Only when the disk's top folder does not already belong to the group.
    OnRootMismatch,
}
