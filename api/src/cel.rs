//! The CRD's cross-field rules (CEL `x-kubernetes-validations`), built from the same
//! constants and conditions the file validation uses ([`crate::validate::rules`]), so the
//! API server refuses what `celld-gen check` refuses, and nothing more: every rule here
//! copies a check of the validation, defaults included (an absent field counts as its
//! default, as validation counts it).
//!
//! The one deliberate difference: in capacity mode External, validation refuses
//! `spec.members` in the fleet file (Git must not own it), but in the cluster the
//! `/scale` writer sets it, so the CRD accepts it there (bounded like every other
//! `members`, by the schema's `minimum`/`maximum`).
//!
//! Cost: every rule reads scalars, or walks a list that has `maxItems` and strings that
//! have `maxLength`, so the API server's static cost estimate stays small (checked on a
//! real kube-apiserver by the end-to-end tests).

use kube::core::Rule;
use schemars::Schema;
use serde_json::Value;

use super::defaults::{self, CAPACITY_DEFAULTS as CAP};
use super::{CapacityMode, Profile, Sampler, ZoneFormat};

/// `(has(self.<path>) ? self.<path> : <default>)`: a field with its default applied.
fn or_default(path: &str, default: impl std::fmt::Display) -> String {
    format!("(has(self.{path}) ? self.{path} : {default})")
}

/// The JSON spelling of a unit enum value (what the API server stores).
fn json_name<T: serde::Serialize>(v: T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => unreachable!("unit enum variants serialize as strings"),
    }
}

fn is_external() -> String {
    format!(
        "(has(self.capacity) && has(self.capacity.mode) && self.capacity.mode == '{}')",
        json_name(CapacityMode::External)
    )
}

/// `metadata.name`: at most [`defaults::MAX_NAME_LENGTH`] characters.
pub fn name_length() -> Rule {
    Rule::new(format!(
        "size(self.metadata.name) <= {}",
        defaults::MAX_NAME_LENGTH
    ))
    .message(
        format!(
            "fleet name must be a DNS label of at most {} characters",
            defaults::MAX_NAME_LENGTH
        )
        .as_str(),
    )
}

/// `spec`: members (default [`defaults::MEMBERS`]) cover every zone, unless capacity
/// mode External hands members to a `/scale` writer (validation's `spec.members` rule).
pub fn members_cover_zones() -> Rule {
    Rule::new(format!(
        "{} || {} >= size(self.placement.zones)",
        is_external(),
        or_default("members", defaults::MEMBERS)
    ))
    .message(
        format!(
            "members (default {}) must be at least the number of zones, one member per zone",
            defaults::MEMBERS
        )
        .as_str(),
    )
    .field_path(".members")
}

/// `spec`: capacity.minMembers (default [`CAP`]) covers every zone.
pub fn capacity_min_covers_zones() -> Rule {
    Rule::new(format!(
        "!has(self.capacity) || {} >= size(self.placement.zones)",
        or_default("capacity.minMembers", CAP.min_members)
    ))
    .message(
        format!(
            "capacity.minMembers (default {}) must be at least the number of zones",
            CAP.min_members
        )
        .as_str(),
    )
    .field_path(".capacity.minMembers")
}

/// `spec`: bucketWorkload only with the Bucket profile.
pub fn bucket_workload_only_for_bucket() -> Rule {
    Rule::new(format!(
        "!has(self.bucketWorkload) || self.profile == '{}'",
        json_name(Profile::Bucket)
    ))
    .message("bucketWorkload applies to the Bucket profile only")
    .field_path(".bucketWorkload")
}

/// `spec`: a StorageClass exactly for PersistentFleet.
pub fn storage_class_iff_persistent() -> Rule {
    Rule::new(format!(
        "has(self.storage.storageClassName) == (self.profile == '{}')",
        json_name(Profile::PersistentFleet)
    ))
    .message("storage.storageClassName is required for PersistentFleet and refused for Bucket")
    .field_path(".storage.storageClassName")
}

/// `spec`: with `placement.zoneFormat` Cloud (the default), every zone is named after
/// `storage.region`. Looser than validation (which checks each cloud's suffix, see
/// [`crate::validate::formats::is_zone_of_region`]) so the API server never refuses a
/// fleet `check` accepts, and cheap for its CEL cost limit.
pub fn zones_of_region() -> Rule {
    Rule::new(format!(
        "(has(self.placement.zoneFormat) && self.placement.zoneFormat == '{}') || \
         self.placement.zones.all(z, size(z) > size(self.storage.region) && \
         z.startsWith(self.storage.region))",
        json_name(ZoneFormat::Any)
    ))
    .message(
        "every zone must be a zone of storage.region (us-east-1a, us-central1-a, eastus-1), \
         unless placement.zoneFormat is Any",
    )
    .field_path(".placement.zones")
}

/// `spec`: without `storage.endpoint` the bucket is on Amazon S3, whose regions are
/// AWS-shaped.
pub fn aws_region_without_endpoint() -> Rule {
    Rule::new(format!(
        "has(self.storage.endpoint) || self.storage.region.matches('{}')",
        crate::validate::formats::AWS_REGION_PATTERN
    ))
    .message("without storage.endpoint the bucket is on Amazon S3: the region must be an AWS region such as us-east-1")
    .field_path(".storage.region")
}

/// `spec.credentialsAgent`: an agent turned off has no address or port.
pub fn agent_disabled_alone() -> Rule {
    Rule::new("!has(self.enabled) || self.enabled || (!has(self.cidr) && !has(self.port))")
        .message("cidr and port describe an agent; with enabled: false leave them out")
}

/// A list of strings (`self`) without duplicates.
pub fn unique_strings(what: &str) -> Rule {
    Rule::new("self.all(x, self.exists_one(y, y == x))")
        .message(format!("each {what} once").as_str())
}

/// A list of objects (`self`) with a `name`, each name once.
pub fn unique_names(what: &str) -> Rule {
    Rule::new("self.all(x, self.exists_one(y, y.name == x.name))")
        .message(format!("each {what} once").as_str())
}

/// A toleration with `operator: Exists` has no value.
pub fn toleration_exists_without_value() -> Rule {
    Rule::new(
        "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
    )
    .message("a toleration with operator Exists takes no value")
    .field_path(".value")
}

/// A toleration without a key tolerates every taint, which only `Exists` says.
pub fn toleration_keyless_exists() -> Rule {
    Rule::new(
        "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
    )
    .message("a toleration without a key needs operator Exists")
    .field_path(".operator")
}

/// `tolerationSeconds` only applies to NoExecute.
pub fn toleration_seconds_no_execute() -> Rule {
    Rule::new("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')")
        .message("tolerationSeconds needs effect NoExecute")
        .field_path(".tolerationSeconds")
}

/// `spec.env`: each variable name once.
pub fn unique_env_names() -> Rule {
    Rule::new("self.all(e, self.exists_one(f, f.name == e.name))").message("each variable once")
}

/// Two capacity fields in order (`op` is `<` or `<=`), defaults applied.
fn ordered(low: &str, low_default: i32, op: &str, high: &str, high_default: i32) -> Rule {
    let word = if op == "<" { "below" } else { "at most" };
    Rule::new(format!(
        "{} {op} {}",
        or_default(low, low_default),
        or_default(high, high_default)
    ))
    .message(
        format!("{low} must be {word} {high} (defaults {low_default} and {high_default})").as_str(),
    )
    .field_path(format!(".{low}"))
}

/// `capacity`: minMembers at most maxMembers.
pub fn capacity_members_ordered() -> Rule {
    ordered(
        "minMembers",
        CAP.min_members,
        "<=",
        "maxMembers",
        CAP.max_members,
    )
}

/// `capacity`: the CPU thresholds in order.
pub fn capacity_cpu_ordered() -> Rule {
    ordered(
        "cpuLowMillicores",
        CAP.cpu_low_millicores,
        "<",
        "cpuHighMillicores",
        CAP.cpu_high_millicores,
    )
}

/// `capacity`: the memory thresholds in order.
pub fn capacity_memory_ordered() -> Rule {
    ordered(
        "memoryLowMiB",
        CAP.memory_low_mib,
        "<",
        "memoryHighMiB",
        CAP.memory_high_mib,
    )
}

/// `capacity`: the averaging windows in order.
pub fn capacity_windows_ordered() -> Rule {
    ordered(
        "minWindowSeconds",
        CAP.min_window_seconds,
        "<=",
        "maxWindowSeconds",
        CAP.max_window_seconds,
    )
}

/// `capacity`: samples come more often than they go stale.
pub fn capacity_samples_fresh() -> Rule {
    ordered(
        "sampleIntervalSeconds",
        CAP.sample_interval_seconds,
        "<=",
        "maxAgeSeconds",
        CAP.max_age_seconds,
    )
}

/// `lifecycle`: a grace of at least the drain plus the headroom, when the drain is in
/// range (validation's condition).
pub fn grace_covers_drain() -> Rule {
    let shutdown = or_default("shutdownSeconds", defaults::SHUTDOWN_SECONDS);
    let grace = or_default(
        "terminationGraceSeconds",
        defaults::TERMINATION_GRACE_SECONDS,
    );
    let b = defaults::SHUTDOWN_SECONDS_BOUNDS;
    Rule::new(format!(
        "!({shutdown} >= {} && {shutdown} <= {}) || {grace} >= {shutdown} + {}",
        b.min,
        b.max,
        defaults::GRACE_HEADROOM_SECONDS
    ))
    .message(
        format!(
            "terminationGraceSeconds (default {}) must be at least shutdownSeconds (default {}) + {}",
            defaults::TERMINATION_GRACE_SECONDS,
            defaults::SHUTDOWN_SECONDS,
            defaults::GRACE_HEADROOM_SECONDS
        )
        .as_str(),
    )
    .field_path(".terminationGraceSeconds")
}

/// `routing`: exactly one of gateway / ingress.
pub fn one_route() -> Rule {
    Rule::new("has(self.gateway) != has(self.ingress)")
        .message("routing needs exactly one of gateway or ingress")
}

/// `env[]`: exactly one of value / secretKeyRef.
pub fn one_env_source() -> Rule {
    Rule::new("has(self.value) != has(self.secretKeyRef)")
        .message("each variable needs exactly one of value or secretKeyRef")
}

/// An egress destination: exactly one of cidr / podLabels.
pub fn one_egress_destination() -> Rule {
    Rule::new("has(self.cidr) != has(self.podLabels)")
        .message("the egress destination needs exactly one of cidr or podLabels")
}

/// An egress destination: a namespace only with podLabels.
pub fn egress_namespace_with_labels() -> Rule {
    Rule::new("!has(self.namespace) || has(self.podLabels)")
        .message("namespace only applies with podLabels")
        .field_path(".namespace")
}

/// `telemetry`: samplerArg exactly with the ratio samplers.
pub fn sampler_arg_with_ratio() -> Rule {
    let ratio: Vec<String> = Sampler::ALL
        .iter()
        .filter(|s| s.takes_ratio())
        .map(|s| format!("self.sampler == '{}'", s.as_str()))
        .collect();
    Rule::new(format!(
        "has(self.samplerArg) == (has(self.sampler) && ({}))",
        ratio.join(" || ")
    ))
    .message("samplerArg is required with, and only with, the ratio samplers")
    .field_path(".samplerArg")
}

/// Schema transform for unit enums: `maxLength` of the longest value, so rules comparing
/// it stay cheap in the API server's cost estimate (the enum already bounds it).
pub fn enum_max_length(schema: &mut Schema) {
    let longest = schema
        .get("enum")
        .and_then(Value::as_array)
        .map(|values| {
            values
                .iter()
                .filter_map(Value::as_str)
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .or_else(|| {
            // Variants with doc comments are written as oneOf of consts.
            schema.get("oneOf").and_then(Value::as_array).map(|alts| {
                alts.iter()
                    .filter_map(|a| a.get("const").and_then(Value::as_str))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
        });
    if let Some(n) = longest.filter(|n| *n > 0) {
        schema.insert("maxLength".into(), n.into());
    }
}
