//! `celld-gen schema` (and the hidden `crds`).

use std::io::Write;

use clap::Args;
use kube::CustomResourceExt;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::{FAILED, OK};
use crate::api::{CelldBucketReservation, CelldFleet, CelldFleetSpec, labels};

const EXAMPLES: &str = "\
Examples:
  celld-gen schema > celldfleet.schema.json
  # then, at the top of a fleet file, for editors using yaml-language-server:
  # yaml-language-server: $schema=./celldfleet.schema.json";

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct SchemaArgs {}

const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

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
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
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
                        "type": "string", "maxLength": 40, "pattern": DNS_LABEL
                    },
                    "namespace": {
                        "description": "Namespace of the fleet.",
                        "type": "string", "maxLength": 63, "pattern": DNS_LABEL
                    },
                    "labels": string_map,
                    "annotations": string_map,
                }
            },
            "spec": Value::Object(spec),
        },
        "definitions": definitions,
    })
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
