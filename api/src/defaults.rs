//! Defaults and limits of the fleet file, and the accessors that apply them. Where the
//! operator celld-fleet replaces had a default, the same value is kept here, so moving a
//! fleet over changes nothing it did not write. Every bound is also in
//! [`super::bounds_table`], which the tests use to check that the CRD, the editor schema
//! and validation agree; `docs/adding-a-field.md` shows where a new one goes.

use super::fleet::*;

/// Members when `spec.members` is absent and the mode is not External.
pub const MEMBERS: i32 = 3;
/// Largest fleet.
pub const MAX_MEMBERS: i32 = 100;
/// Largest number of zones.
pub const MAX_ZONES: usize = 6;
/// Disk or scratch size when `storage.sizeGiB` is absent.
pub const SIZE_GIB: i32 = 10;
/// Largest disk.
pub const MAX_SIZE_GIB: i32 = 16384;
/// Default CPU request.
pub const CPU_REQUEST: &str = "250m";
/// Default memory request.
pub const MEMORY_REQUEST: &str = "512Mi";
/// Default memory limit.
pub const MEMORY_LIMIT: &str = "1Gi";
/// Default drain time.
pub const SHUTDOWN_SECONDS: i64 = 20;
/// Longest drain time.
pub const MAX_SHUTDOWN_SECONDS: i64 = 3600;
/// Default Pod termination grace.
pub const TERMINATION_GRACE_SECONDS: i64 = 30;
/// Headroom between drain and grace, so the kubelet never kills a draining member.
pub const GRACE_HEADROOM_SECONDS: i64 = 5;
/// Most extra env entries.
pub const MAX_ENV: usize = 32;
/// Most routing hostnames.
pub const MAX_HOSTNAMES: usize = 16;
/// Whether a fleet refuses deletion when `spec.deletionProtection` is absent.
pub const DELETION_PROTECTION: bool = true;
/// Longest fleet name (a DNS label), leaving room for `-peers`, `-routing` and
/// `data-<name>-<n>`.
pub const MAX_NAME_LENGTH: usize = 40;
/// Length of `spec.identity` (lowercase letters and digits).
pub const IDENTITY_LENGTH: usize = 26;
/// Longest `storage.region`.
pub const MAX_REGION_LENGTH: usize = 32;
/// Address of the default credentials agent: the EKS Pod Identity agent (link-local,
/// on every node of an EKS cluster with the add-on).
pub const CREDENTIALS_AGENT_CIDR: &str = "169.254.170.23/32";
/// Port of the default credentials agent.
pub const CREDENTIALS_AGENT_PORT: i32 = 80;
/// `credentialsAgent.port`.
pub const PORT_BOUNDS: Bounds<i32> = b(1, 65535);
/// Longest zone: a label value.
pub const MAX_ZONE_LENGTH: usize = 63;
/// Most labels in a Pod selector (`routing.source.podLabels`, `egress.podLabels`).
pub const MAX_POD_LABELS: usize = 16;
/// Most Ingress controller annotations.
pub const MAX_INGRESS_ANNOTATIONS: usize = 16;
/// Longest `maintenance.restartToken`, in characters.
pub const MAX_RESTART_TOKEN_CHARS: usize = 128;
/// Longest literal `env[].value`, in bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 4096;
/// Longest environment variable name.
pub const MAX_ENV_NAME_LENGTH: usize = 128;
/// Longest DNS subdomain (names of Secrets, classes, ServiceAccounts, hostnames).
pub const MAX_DNS_SUBDOMAIN_LENGTH: usize = 253;
/// Longest DNS label (namespaces, prefixes).
pub const MAX_DNS_LABEL_LENGTH: usize = 63;
/// Longest Secret key.
pub const MAX_SECRET_KEY_LENGTH: usize = 253;
/// Longest label or annotation key (a 253-character prefix, `/`, a 63-character name).
pub const MAX_QUALIFIED_NAME_LENGTH: usize = 317;
/// Most `pod.labels`, and most `pod.annotations`.
pub const MAX_POD_METADATA: usize = 32;
/// Most bytes in all of `pod.annotations`, keys and values (the API server's limit on a
/// Pod's annotations is 256 KiB; the rest is left to tools that annotate Pods).
pub const MAX_POD_ANNOTATION_BYTES: usize = 64 * 1024;
/// Most `pod.nodeSelector` entries.
pub const MAX_NODE_SELECTOR: usize = 16;
/// Most `pod.tolerations`.
pub const MAX_TOLERATIONS: usize = 16;
/// Most `pod.imagePullSecrets`.
pub const MAX_IMAGE_PULL_SECRETS: usize = 8;
/// Most terms in `pod.nodeAffinity` (required, and preferred).
pub const MAX_NODE_SELECTOR_TERMS: usize = 8;
/// Most requirements in one node term.
pub const MAX_NODE_SELECTOR_REQUIREMENTS: usize = 16;
/// Most values in one node requirement.
pub const MAX_NODE_SELECTOR_VALUES: usize = 32;

/// The whole numbers a field accepts, both ends included. Validation
/// ([`crate::validate`]), the CRD schema (`minimum`/`maximum`, so the API server and the
/// `/scale` subresource refuse the same values) and the editor schema all read these
/// constants; no limit is written twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds<T> {
    /// Smallest accepted value.
    pub min: T,
    /// Largest accepted value.
    pub max: T,
}

impl<T: PartialOrd + Copy> Bounds<T> {
    /// Whether `v` is accepted.
    pub fn contains(&self, v: T) -> bool {
        self.min <= v && v <= self.max
    }
}

const fn b<T>(min: T, max: T) -> Bounds<T> {
    Bounds { min, max }
}

/// `spec.members`, and `capacity.minMembers` / `capacity.maxMembers`.
pub const MEMBERS_BOUNDS: Bounds<i32> = b(1, MAX_MEMBERS);
/// Length of `storage.bucket`.
pub const BUCKET_LENGTH_BOUNDS: Bounds<usize> = b(3, 63);
/// `storage.sizeGiB`.
pub const SIZE_GIB_BOUNDS: Bounds<i32> = b(1, MAX_SIZE_GIB);
/// Number of `placement.zones`.
pub const ZONES_BOUNDS: Bounds<usize> = b(1, MAX_ZONES);
/// Number of `routing.hostnames`.
pub const HOSTNAMES_BOUNDS: Bounds<usize> = b(1, MAX_HOSTNAMES);
/// Number of labels in a Pod selector.
pub const POD_LABELS_BOUNDS: Bounds<usize> = b(1, MAX_POD_LABELS);
/// `pod.tolerations[].tolerationSeconds`.
pub const TOLERATION_SECONDS_BOUNDS: Bounds<i64> = b(0, 86_400);
/// `pod.nodeAffinity.preferred…[].weight`.
pub const AFFINITY_WEIGHT_BOUNDS: Bounds<i32> = b(1, 100);
/// `execution.maxResidentCells`.
pub const MAX_RESIDENT_CELLS_BOUNDS: Bounds<i64> = b(1, 1_000_000);
/// `execution.idleEvictSeconds`.
pub const IDLE_EVICT_SECONDS_BOUNDS: Bounds<i64> = b(1, 86_400);
/// `lifecycle.shutdownSeconds`.
pub const SHUTDOWN_SECONDS_BOUNDS: Bounds<i64> = b(1, MAX_SHUTDOWN_SECONDS);
/// `lifecycle.terminationGraceSeconds`: the drain's range plus the headroom.
pub const TERMINATION_GRACE_SECONDS_BOUNDS: Bounds<i64> = b(
    SHUTDOWN_SECONDS_BOUNDS.min + GRACE_HEADROOM_SECONDS,
    SHUTDOWN_SECONDS_BOUNDS.max + GRACE_HEADROOM_SECONDS,
);
/// `telemetry.flushMilliseconds`.
pub const FLUSH_MILLISECONDS_BOUNDS: Bounds<i64> = b(1, 3_600_000);
/// `telemetry.flushBytes`.
pub const FLUSH_BYTES_BOUNDS: Bounds<i64> = b(1, 1 << 30);
/// `capacity.scaleOutStep`.
pub const SCALE_OUT_STEP_BOUNDS: Bounds<i32> = b(1, 10);
/// `capacity.sampleIntervalSeconds`.
pub const SAMPLE_INTERVAL_SECONDS_BOUNDS: Bounds<i32> = b(5, 300);
/// `capacity.maxAgeSeconds`.
pub const MAX_AGE_SECONDS_BOUNDS: Bounds<i32> = b(10, 600);
/// `capacity.minWindowSeconds`.
pub const MIN_WINDOW_SECONDS_BOUNDS: Bounds<i32> = b(1, 60);
/// `capacity.maxWindowSeconds`.
pub const MAX_WINDOW_SECONDS_BOUNDS: Bounds<i32> = b(5, 300);
/// `capacity.minSamples`.
pub const MIN_SAMPLES_BOUNDS: Bounds<i32> = b(2, 100);
/// `capacity.scaleOutStabilizationSeconds`.
pub const SCALE_OUT_STABILIZATION_SECONDS_BOUNDS: Bounds<i32> = b(10, 3600);
/// `capacity.scaleInStabilizationSeconds`.
pub const SCALE_IN_STABILIZATION_SECONDS_BOUNDS: Bounds<i32> = b(60, 86_400);
/// `capacity.scaleOutCooldownSeconds`.
pub const SCALE_OUT_COOLDOWN_SECONDS_BOUNDS: Bounds<i32> = b(30, 86_400);
/// `capacity.scaleInCooldownSeconds`.
pub const SCALE_IN_COOLDOWN_SECONDS_BOUNDS: Bounds<i32> = b(60, 86_400);
/// `capacity.provisioningTimeoutSeconds`.
pub const PROVISIONING_TIMEOUT_SECONDS_BOUNDS: Bounds<i32> = b(60, 86_400);
/// `capacity.redistributionObservationSeconds`.
pub const REDISTRIBUTION_OBSERVATION_SECONDS_BOUNDS: Bounds<i32> = b(30, 3600);
/// `capacity.cpuHighMillicores`.
pub const CPU_HIGH_MILLICORES_BOUNDS: Bounds<i32> = b(1, 1_000_000);
/// `capacity.cpuLowMillicores`.
pub const CPU_LOW_MILLICORES_BOUNDS: Bounds<i32> = b(0, 1_000_000);
/// `capacity.memoryHighMiB`.
pub const MEMORY_HIGH_MIB_BOUNDS: Bounds<i32> = b(1, 1_048_576);
/// `capacity.memoryLowMiB`.
pub const MEMORY_LOW_MIB_BOUNDS: Bounds<i32> = b(0, 1_048_576);

/// The capacity policy's defaults (what [`Capacity::effective`] fills in).
pub const CAPACITY_DEFAULTS: CapacityPolicy = CapacityPolicy {
    mode: CapacityMode::Shadow,
    min_members: 3,
    max_members: 10,
    scale_out_step: 1,
    sample_interval_seconds: 15,
    max_age_seconds: 45,
    min_window_seconds: 5,
    max_window_seconds: 60,
    min_samples: 3,
    scale_out_stabilization_seconds: 30,
    scale_in_stabilization_seconds: 600,
    scale_out_cooldown_seconds: 300,
    scale_in_cooldown_seconds: 900,
    provisioning_timeout_seconds: 600,
    redistribution_observation_seconds: 120,
    cpu_high_millicores: 200,
    cpu_low_millicores: 80,
    memory_high_mib: 768,
    memory_low_mib: 384,
};

/// Effective capacity policy values, defaults applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapacityPolicy {
    /// Mode.
    pub mode: CapacityMode,
    /// Fewest members.
    pub min_members: i32,
    /// Most members.
    pub max_members: i32,
    /// Growth step.
    pub scale_out_step: i32,
    /// Sample interval.
    pub sample_interval_seconds: i32,
    /// Oldest usable sample.
    pub max_age_seconds: i32,
    /// Shortest window.
    pub min_window_seconds: i32,
    /// Longest window.
    pub max_window_seconds: i32,
    /// Samples needed.
    pub min_samples: i32,
    /// Growth stabilization.
    pub scale_out_stabilization_seconds: i32,
    /// Contraction stabilization.
    pub scale_in_stabilization_seconds: i32,
    /// Growth cooldown.
    pub scale_out_cooldown_seconds: i32,
    /// Contraction cooldown.
    pub scale_in_cooldown_seconds: i32,
    /// Provisioning timeout.
    pub provisioning_timeout_seconds: i32,
    /// Redistribution observation.
    pub redistribution_observation_seconds: i32,
    /// CPU high threshold.
    pub cpu_high_millicores: i32,
    /// CPU low threshold.
    pub cpu_low_millicores: i32,
    /// Memory high threshold.
    pub memory_high_mib: i32,
    /// Memory low threshold.
    pub memory_low_mib: i32,
}

impl Capacity {
    /// The policy with every default applied.
    pub fn effective(&self) -> CapacityPolicy {
        let d = CAPACITY_DEFAULTS;
        CapacityPolicy {
            mode: self.mode.unwrap_or(d.mode),
            min_members: self.min_members.unwrap_or(d.min_members),
            max_members: self.max_members.unwrap_or(d.max_members),
            scale_out_step: self.scale_out_step.unwrap_or(d.scale_out_step),
            sample_interval_seconds: self
                .sample_interval_seconds
                .unwrap_or(d.sample_interval_seconds),
            max_age_seconds: self.max_age_seconds.unwrap_or(d.max_age_seconds),
            min_window_seconds: self.min_window_seconds.unwrap_or(d.min_window_seconds),
            max_window_seconds: self.max_window_seconds.unwrap_or(d.max_window_seconds),
            min_samples: self.min_samples.unwrap_or(d.min_samples),
            scale_out_stabilization_seconds: self
                .scale_out_stabilization_seconds
                .unwrap_or(d.scale_out_stabilization_seconds),
            scale_in_stabilization_seconds: self
                .scale_in_stabilization_seconds
                .unwrap_or(d.scale_in_stabilization_seconds),
            scale_out_cooldown_seconds: self
                .scale_out_cooldown_seconds
                .unwrap_or(d.scale_out_cooldown_seconds),
            scale_in_cooldown_seconds: self
                .scale_in_cooldown_seconds
                .unwrap_or(d.scale_in_cooldown_seconds),
            provisioning_timeout_seconds: self
                .provisioning_timeout_seconds
                .unwrap_or(d.provisioning_timeout_seconds),
            redistribution_observation_seconds: self
                .redistribution_observation_seconds
                .unwrap_or(d.redistribution_observation_seconds),
            cpu_high_millicores: self.cpu_high_millicores.unwrap_or(d.cpu_high_millicores),
            cpu_low_millicores: self.cpu_low_millicores.unwrap_or(d.cpu_low_millicores),
            memory_high_mib: self.memory_high_mib.unwrap_or(d.memory_high_mib),
            memory_low_mib: self.memory_low_mib.unwrap_or(d.memory_low_mib),
        }
    }
}

impl CelldFleetSpec {
    /// Workload layout of a Bucket fleet (PersistentFleet is always a StatefulSet).
    pub fn effective_bucket_workload(&self) -> BucketWorkload {
        self.bucket_workload.unwrap_or_default()
    }

    /// Whether the workload is a StatefulSet.
    pub fn is_stateful_set(&self) -> bool {
        self.profile == Profile::PersistentFleet
            || self.effective_bucket_workload() == BucketWorkload::Ordered
    }

    /// Capacity mode; `None` means members are set by hand.
    pub fn capacity_mode(&self) -> Option<CapacityMode> {
        self.capacity.as_ref().map(|c| c.mode.unwrap_or_default())
    }

    /// Members written in the fleet file, default applied (External mode has none: the
    /// `/scale` writer sets it live, and the healer reads the live value).
    pub fn effective_members(&self) -> i32 {
        self.members.unwrap_or(MEMBERS)
    }

    /// Placement mode.
    pub fn placement_mode(&self) -> PlacementMode {
        self.placement.mode.unwrap_or_default()
    }

    /// The credentials agent the NetworkPolicy lets members reach, as (CIDR, port), or
    /// `None` when `credentialsAgent.enabled` is false. Default: the EKS Pod Identity
    /// agent.
    pub fn credentials_agent(&self) -> Option<(&str, i32)> {
        let a = self.credentials_agent.as_ref();
        if a.and_then(|a| a.enabled) == Some(false) {
            return None;
        }
        Some((
            a.and_then(|a| a.cidr.as_deref())
                .unwrap_or(CREDENTIALS_AGENT_CIDR),
            a.and_then(|a| a.port).unwrap_or(CREDENTIALS_AGENT_PORT),
        ))
    }

    /// How zones are named (default Cloud).
    pub fn zone_format(&self) -> ZoneFormat {
        self.placement.zone_format.unwrap_or_default()
    }

    /// Disk or scratch size in GiB.
    pub fn size_gib(&self) -> i32 {
        self.storage.size_gib.unwrap_or(SIZE_GIB)
    }

    /// CPU request.
    pub fn cpu_request(&self) -> &str {
        self.execution
            .as_ref()
            .and_then(|e| e.cpu_request.as_deref())
            .unwrap_or(CPU_REQUEST)
    }

    /// CPU limit, if any.
    pub fn cpu_limit(&self) -> Option<&str> {
        self.execution.as_ref().and_then(|e| e.cpu_limit.as_deref())
    }

    /// Memory request.
    pub fn memory_request(&self) -> &str {
        self.execution
            .as_ref()
            .and_then(|e| e.memory_request.as_deref())
            .unwrap_or(MEMORY_REQUEST)
    }

    /// Memory limit.
    pub fn memory_limit(&self) -> &str {
        self.execution
            .as_ref()
            .and_then(|e| e.memory_limit.as_deref())
            .unwrap_or(MEMORY_LIMIT)
    }

    /// Drain time in seconds.
    pub fn shutdown_seconds(&self) -> i64 {
        self.lifecycle
            .as_ref()
            .and_then(|l| l.shutdown_seconds)
            .unwrap_or(SHUTDOWN_SECONDS)
    }

    /// Pod termination grace in seconds.
    pub fn termination_grace_seconds(&self) -> i64 {
        self.lifecycle
            .as_ref()
            .and_then(|l| l.termination_grace_seconds)
            .unwrap_or(TERMINATION_GRACE_SECONDS)
    }

    /// Whether the healer is paused for this fleet.
    pub fn paused(&self) -> bool {
        self.maintenance
            .as_ref()
            .and_then(|m| m.paused)
            .unwrap_or(false)
    }

    /// Whether deleting the fleet is refused (default true).
    pub fn deletion_protected(&self) -> bool {
        self.deletion_protection.unwrap_or(DELETION_PROTECTION)
    }

    /// The restart token, if any.
    pub fn restart_token(&self) -> Option<&str> {
        self.maintenance
            .as_ref()
            .and_then(|m| m.restart_token.as_deref())
            .filter(|t| !t.is_empty())
    }

    /// `s3://bucket[/prefix]`.
    pub fn bucket_url(&self) -> String {
        match &self.storage.prefix {
            Some(p) => format!("s3://{}/{}", self.storage.bucket, p),
            None => format!("s3://{}", self.storage.bucket),
        }
    }
}
