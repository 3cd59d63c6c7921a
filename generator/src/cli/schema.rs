//! `celld-gen schema` (and the hidden `crds`).

use std::io::Write;

use clap::Args;
use kube::CustomResourceExt;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::{FAILED, OK};
use crate::api::defaults::{self as d, CAPACITY_DEFAULTS as CAP};
use crate::api::{
    BucketWorkload, CapacityMode, CelldBucketReservation, CelldFleet, CelldFleetSpec,
    PlacementMode, labels,
};
use celld_api::validate::formats as f;

const EXAMPLES: &str = "\
Examples:
  celld-gen schema > celldfleet.schema.json
  # then, at the top of a fleet file, for editors using yaml-language-server
  # (`celld-gen init` writes this line; point it at where you keep the schema):
  # yaml-language-server: $schema=./celldfleet.schema.json

Every bounded field carries minimum and maximum, every checked format its pattern, and
every defaulted field its default, from the constants `celld-gen check` uses.";

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct SchemaArgs {}

/// The default of every defaulted field below `spec`, from the constants the accessors
/// apply (so the editor shows what the generator will use).
fn spec_defaults() -> Vec<(&'static str, Value)> {
    vec![
        ("members", json!(d::MEMBERS)),
        ("bucketWorkload", json!(BucketWorkload::default())),
        ("deletionProtection", json!(d::DELETION_PROTECTION)),
        ("storage/sizeGiB", json!(d::SIZE_GIB)),
        ("placement/mode", json!(PlacementMode::default())),
        ("execution/cpuRequest", json!(d::CPU_REQUEST)),
        ("execution/memoryRequest", json!(d::MEMORY_REQUEST)),
        ("execution/memoryLimit", json!(d::MEMORY_LIMIT)),
        ("lifecycle/shutdownSeconds", json!(d::SHUTDOWN_SECONDS)),
        (
            "lifecycle/terminationGraceSeconds",
            json!(d::TERMINATION_GRACE_SECONDS),
        ),
        ("capacity/mode", json!(CapacityMode::default())),
        ("capacity/minMembers", json!(CAP.min_members)),
        ("capacity/maxMembers", json!(CAP.max_members)),
        ("capacity/scaleOutStep", json!(CAP.scale_out_step)),
        (
            "capacity/sampleIntervalSeconds",
            json!(CAP.sample_interval_seconds),
        ),
        ("capacity/maxAgeSeconds", json!(CAP.max_age_seconds)),
        ("capacity/minWindowSeconds", json!(CAP.min_window_seconds)),
        ("capacity/maxWindowSeconds", json!(CAP.max_window_seconds)),
        ("capacity/minSamples", json!(CAP.min_samples)),
        (
            "capacity/scaleOutStabilizationSeconds",
            json!(CAP.scale_out_stabilization_seconds),
        ),
        (
            "capacity/scaleInStabilizationSeconds",
            json!(CAP.scale_in_stabilization_seconds),
        ),
        (
            "capacity/scaleOutCooldownSeconds",
            json!(CAP.scale_out_cooldown_seconds),
        ),
        (
            "capacity/scaleInCooldownSeconds",
            json!(CAP.scale_in_cooldown_seconds),
        ),
        (
            "capacity/provisioningTimeoutSeconds",
            json!(CAP.provisioning_timeout_seconds),
        ),
        (
            "capacity/redistributionObservationSeconds",
            json!(CAP.redistribution_observation_seconds),
        ),
        ("capacity/cpuHighMillicores", json!(CAP.cpu_high_millicores)),
        ("capacity/cpuLowMillicores", json!(CAP.cpu_low_millicores)),
        ("capacity/memoryHighMiB", json!(CAP.memory_high_mib)),
        ("capacity/memoryLowMiB", json!(CAP.memory_low_mib)),
    ]
}

/// A Kubernetes CPU quantity as `parse_quantity` reads it (`250m`, `1`, `1.5`).
pub const CPU_QUANTITY_PATTERN: &str = "^[0-9]+(\\.[0-9]+)?m?$";
/// A Kubernetes memory quantity as `parse_quantity` reads it (`512Mi`, `2G`).
pub const MEMORY_QUANTITY_PATTERN: &str = "^[0-9]+(\\.[0-9]+)?([kMGTPE]|[KMGTPE]i)?$";
/// An `http(s)://host[:port]` origin (no path, query, fragment or credentials).
pub const ORIGIN_PATTERN: &str = "^https?://[^/?#@]+/?$";
/// An `http(s)://host[:port][/path]` base URL (no query, fragment or credentials).
pub const BASE_URL_PATTERN: &str = "^https?://[^/?#@]+(/[^?#]*)?$";

/// Patterns for the formats validation checks that the CRD leaves to `celld-gen check`
/// (editor help only: each accepts at least what its check accepts).
fn spec_patterns() -> Vec<(&'static str, &'static str)> {
    vec![
        ("execution/cpuRequest", CPU_QUANTITY_PATTERN),
        ("execution/cpuLimit", CPU_QUANTITY_PATTERN),
        ("execution/memoryRequest", MEMORY_QUANTITY_PATTERN),
        ("execution/memoryLimit", MEMORY_QUANTITY_PATTERN),
        ("storage/endpoint/url", ORIGIN_PATTERN),
        ("telemetry/collectorURL", BASE_URL_PATTERN),
    ]
}

/// JSON pointer of the property at `path` (`/`-separated, below `spec`) in the fleet file
/// schema `root`, following `$ref`s (alone, or in `anyOf`/`allOf`) into `definitions`.
pub fn property_pointer(root: &Value, path: &str) -> Option<String> {
    fn target(v: &Value) -> Option<String> {
        let r = v.get("$ref").or_else(|| {
            ["anyOf", "allOf"].iter().find_map(|k| {
                v.get(*k)?
                    .as_array()?
                    .iter()
                    .find_map(|alt| alt.get("$ref"))
            })
        })?;
        r.as_str()?
            .strip_prefix("#/definitions/")
            .map(|d| format!("/definitions/{d}"))
    }
    let mut at = "/properties/spec".to_owned();
    for part in path.split('/') {
        if let Some(def) = root.pointer(&at).and_then(target) {
            at = def;
        }
        // `[]`: the items of a list (as in the CRD paths of the bounds table).
        at = if part == "[]" {
            format!("{at}/items")
        } else {
            format!("{at}/properties/{part}")
        };
        root.pointer(&at)?;
    }
    Some(at)
}

/// The JSON Schema of a fleet file.
pub fn fleet_file_schema() -> Value {
    let spec: Value = SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<CelldFleetSpec>()
        .into();
    let Value::Object(mut spec) = spec else {
        unreachable!("a struct's schema is an object")
    };
    spec.remove("$schema");
    let definitions = spec.remove("definitions").unwrap_or_else(|| json!({}));
    let spec = Value::Object(spec);
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    let mut root = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://fleet.celld.dev/schemas/v1alpha1/celldfleet.json",
        "title": "CelldFleet",
        "description": "A celld fleet file: a CelldFleet resource (fleet.celld.dev/v1alpha1), rendered by celld-gen into Kubernetes manifests.",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": false,
        "properties": {
            "apiVersion": {"type": "string", "const": labels::API_VERSION},
            "kind": {"type": "string", "const": "CelldFleet"},
            "metadata": {
                "type": "object",
                "required": ["name", "namespace"],
                "additionalProperties": false,
                "properties": {
                    "name": {
                        "description": "Fleet name: a DNS label of at most 40 characters.",
                        "type": "string", "maxLength": d::MAX_NAME_LENGTH,
                        "pattern": f::DNS_LABEL_PATTERN
                    },
                    "namespace": {
                        "description": "Namespace of the fleet.",
                        "type": "string", "maxLength": d::MAX_DNS_LABEL_LENGTH,
                        "pattern": f::DNS_LABEL_PATTERN
                    },
                    "labels": string_map,
                    "annotations": string_map,
                }
            },
            "spec": spec,
        },
        "definitions": definitions,
    });
    for (path, default) in spec_defaults() {
        if let Some(p) = property_pointer(&root, path).and_then(|at| root.pointer_mut(&at)) {
            p["default"] = default;
        }
    }
    for (path, pattern) in spec_patterns() {
        if let Some(p) = property_pointer(&root, path).and_then(|at| root.pointer_mut(&at))
            && p.get("pattern").is_none()
        {
            p["pattern"] = json!(pattern);
        }
    }
    root
}

/// The CRDs of our two resources, as JSON values.
pub fn crd_schemas() -> Value {
    json!([CelldFleet::crd(), CelldBucketReservation::crd()])
}

pub fn run(_args: SchemaArgs) -> u8 {
    print_json(&fleet_file_schema())
}

pub fn run_crds() -> u8 {
    print_json(&crd_schemas())
}

fn print_json(v: &Value) -> u8 {
    let text = serde_json::to_string_pretty(v).expect("JSON values serialize");
    // A closed pipe (`schema | head`) is fine; any other write error fails.
    match super::print(format!("{text}\n").as_bytes()) {
        Ok(_) => OK,
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "error: writing to standard output: {e}");
            FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bounded field validation enforces carries its bounds in the editor schema,
    /// and every default the accessors apply is there too.
    #[test]
    fn editor_schema_has_every_bound_and_default() {
        let root = fleet_file_schema();
        for b in crate::api::bounds_table::bounded() {
            let at = property_pointer(&root, b.schema_path)
                .unwrap_or_else(|| panic!("{} is not in the schema", b.schema_path));
            let p = &root.pointer(&at).cloned().unwrap_or_default();
            assert_eq!(p["minimum"].as_f64(), Some(b.min as f64), "{}", b.field);
            assert_eq!(p["maximum"].as_f64(), Some(b.max as f64), "{}", b.field);
        }
        for (path, default) in spec_defaults() {
            let at = property_pointer(&root, path)
                .unwrap_or_else(|| panic!("{path} is not in the schema"));
            assert_eq!(
                root.pointer(&at).map(|p| &p["default"]),
                Some(&default),
                "{path}"
            );
        }
        for (path, pattern) in spec_patterns() {
            let at = property_pointer(&root, path)
                .unwrap_or_else(|| panic!("{path} is not in the schema"));
            assert_eq!(
                root.pointer(&at).map(|p| &p["pattern"]),
                Some(&json!(pattern)),
                "{path}"
            );
        }
    }

    /// The editor patterns accept every value the checks accept.
    #[test]
    fn editor_patterns_accept_what_validation_accepts() {
        use celld_api::url::{HttpUrl, UrlShape};
        use celld_api::validate::formats::parse_quantity;
        let re = |p: &str| regex::Regex::new(p).expect("pattern compiles");
        let (cpu, mem) = (re(CPU_QUANTITY_PATTERN), re(MEMORY_QUANTITY_PATTERN));
        for q in [
            "250m", "1", "1.5", "0.5m", "512Mi", "2Gi", "1G", "3k", "1.5Ti", "x", "1.", ".5",
            "1m5", "1Mi", "10Ei", "",
        ] {
            assert_eq!(
                cpu.is_match(q),
                parse_quantity(q, false).is_some(),
                "cpu {q}"
            );
            assert_eq!(
                mem.is_match(q),
                parse_quantity(q, true).is_some(),
                "memory {q}"
            );
        }
        let (origin, base) = (re(ORIGIN_PATTERN), re(BASE_URL_PATTERN));
        for u in [
            "http://minio.store:9000",
            "https://s3.example.com/",
            "http://[::1]:9000",
            "http://otel.obs:4318/v1",
            "ftp://x",
            "http://u:p@host",
        ] {
            if HttpUrl::parse(u, UrlShape::Origin).is_ok() {
                assert!(origin.is_match(u), "origin {u}");
            }
            if HttpUrl::parse(u, UrlShape::Base).is_ok() {
                assert!(base.is_match(u), "base URL {u}");
            }
        }
    }
}
