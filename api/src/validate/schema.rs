//! The structural check: every field known, every value of the right type and enum. It
//! walks the located tree against the CRD's own OpenAPI schema (generated from the Rust
//! types), so the file check and the API server can never disagree on the shape, and it
//! reports every problem rather than stopping at the first like a deserializer would.

use std::sync::OnceLock;

use kube::CustomResourceExt;
use serde_json::Value;

use super::Problem;
use super::yaml::{Kind, Node};
use crate::CelldFleet;

/// The OpenAPI schema of `spec`, from the CRD the healer installs.
fn spec_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd = serde_json::to_value(CelldFleet::crd()).unwrap_or(Value::Null);
        crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
            .cloned()
            .unwrap_or(Value::Null)
    })
}

/// Checks the whole document: `apiVersion`, `kind`, `metadata` and `spec`.
pub fn check_document(doc: &Node, out: &mut Vec<Problem>) {
    let Kind::Map(entries) = &doc.kind else {
        out.push(Problem::new(
            doc.pos,
            "",
            format!(
                "a fleet file must be a mapping, found {}",
                doc.kind.type_name()
            ),
            "a CelldFleet resource with apiVersion, kind, metadata and spec",
        ));
        return;
    };
    for (key, value) in entries {
        match key.name.as_str() {
            "apiVersion" | "kind" => expect_string(value, &key.name, out),
            "metadata" => check_metadata(value, out),
            "spec" => check(value, spec_schema(), "spec", out),
            "status" => out.push(Problem::new(
                key.pos,
                "status",
                "status is written by the healer and cannot be set in a fleet file",
                "no status field",
            )),
            other => out.push(Problem::new(
                key.pos,
                other,
                unknown_field(other, &["apiVersion", "kind", "metadata", "spec"]),
                "one of apiVersion, kind, metadata, spec",
            )),
        }
    }
    for required in ["apiVersion", "kind", "metadata", "spec"] {
        if doc.get(required).is_none() {
            out.push(Problem::new(
                doc.pos,
                required,
                format!("missing required field `{required}`"),
                required_hint(required),
            ));
        }
    }
}

fn required_hint(field: &str) -> &'static str {
    match field {
        "apiVersion" => "apiVersion: fleet.celld.dev/v1alpha1",
        "kind" => "kind: CelldFleet",
        "metadata" => "metadata with name and namespace",
        _ => "the fleet's spec (see `celld-gen init`)",
    }
}

fn expect_string(node: &Node, path: &str, out: &mut Vec<Problem>) {
    if !matches!(node.kind, Kind::Str(_)) {
        out.push(type_problem(node, path, "a string"));
    }
}

fn check_metadata(node: &Node, out: &mut Vec<Problem>) {
    let Kind::Map(entries) = &node.kind else {
        out.push(type_problem(
            node,
            "metadata",
            "a mapping with name and namespace",
        ));
        return;
    };
    for (key, value) in entries {
        let path = format!("metadata.{}", key.name);
        match key.name.as_str() {
            "name" | "namespace" => expect_string(value, &path, out),
            "labels" | "annotations" => match &value.kind {
                Kind::Map(items) => {
                    for (k, v) in items {
                        expect_string(v, &format!("{path}.{}", k.name), out);
                    }
                }
                Kind::Null => {}
                _ => out.push(type_problem(value, &path, "a mapping of strings")),
            },
            other => out.push(Problem::new(
                key.pos,
                &path,
                format!(
                    "{} in metadata",
                    unknown_field(other, &["name", "namespace", "labels", "annotations"])
                ),
                "name, namespace, labels or annotations (the API server sets the rest)",
            )),
        }
    }
    for required in ["name", "namespace"] {
        if node.get(required).is_none() {
            out.push(Problem::new(
                node.pos,
                &format!("metadata.{required}"),
                format!("missing required field `{required}`"),
                "a DNS label; the fleet file names its namespace so output never depends on a kubectl context",
            ));
        }
    }
}

/// Largest edit distance for a "did you mean" suggestion.
const SUGGEST_DISTANCE: usize = 2;

/// "unknown field `x`", with the closest known name when it is a likely typo.
pub fn unknown_field(name: &str, known: &[&str]) -> String {
    let lower = name.to_ascii_lowercase();
    let best = known
        .iter()
        .map(|k| (super::edit_distance(&lower, &k.to_ascii_lowercase()), *k))
        .min();
    match best {
        Some((d, k)) if d <= SUGGEST_DISTANCE => {
            format!("unknown field `{name}`; did you mean `{k}`?")
        }
        _ => format!("unknown field `{name}`"),
    }
}

/// A value of the wrong type: the message says what was found (the expectation says
/// what would do, once).
fn type_problem(node: &Node, path: &str, expected: &str) -> Problem {
    let mut message = match &node.kind {
        Kind::Str(v) => format!("`{v}` is a string"),
        Kind::Int(v) => format!("`{v}` is an integer"),
        Kind::Float(v) => format!("`{v}` is a number"),
        Kind::Bool(v) => format!("`{v}` is a boolean"),
        other => format!("found {}", other.type_name()),
    };
    if expected == "a string" && matches!(node.kind, Kind::Int(_) | Kind::Float(_) | Kind::Bool(_))
    {
        message.push_str("; quote the value to keep it a string");
    }
    Problem::new(node.pos, path, message, expected)
}

fn type_of(schema: &Value) -> Option<&str> {
    schema.get("type").and_then(Value::as_str)
}

/// Checks `node` against `schema`, appending every problem.
fn check(node: &Node, schema: &Value, path: &str, out: &mut Vec<Problem>) {
    if matches!(node.kind, Kind::Null) {
        if schema.get("nullable").and_then(Value::as_bool) == Some(true) {
            return;
        }
        out.push(Problem::new(
            node.pos,
            path,
            "a value is required here",
            &expectation(schema),
        ));
        return;
    }
    match type_of(schema) {
        Some("object") => check_object(node, schema, path, out),
        Some("array") => match &node.kind {
            Kind::Seq(items) => {
                let item_schema = schema.get("items").unwrap_or(&Value::Null);
                for (i, item) in items.iter().enumerate() {
                    check(item, item_schema, &format!("{path}[{i}]"), out);
                }
            }
            _ => out.push(type_problem(node, path, &expectation(schema))),
        },
        Some("string") => match &node.kind {
            Kind::Str(s) => {
                if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
                    let names: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
                    if !names.contains(&s.as_str()) {
                        out.push(Problem::new(
                            node.pos,
                            path,
                            format!("`{s}` is not a valid value"),
                            &format!("one of {}", names.join(", ")),
                        ));
                    }
                }
            }
            _ => out.push(type_problem(node, path, "a string")),
        },
        Some("integer") => match &node.kind {
            Kind::Int(i) => {
                let fits = match schema.get("format").and_then(Value::as_str) {
                    Some("int32") => i32::try_from(*i).is_ok(),
                    _ => true,
                };
                if !fits {
                    out.push(Problem::new(
                        node.pos,
                        path,
                        format!("{i} is out of range"),
                        &expectation(schema),
                    ));
                }
            }
            _ => out.push(type_problem(node, path, &expectation(schema))),
        },
        Some("boolean") if !matches!(node.kind, Kind::Bool(_)) => {
            out.push(type_problem(node, path, "true or false"));
        }
        _ => {}
    }
}

fn check_object(node: &Node, schema: &Value, path: &str, out: &mut Vec<Problem>) {
    let Kind::Map(entries) = &node.kind else {
        out.push(type_problem(node, path, &expectation(schema)));
        return;
    };
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, value) in entries {
            match props.get(&key.name) {
                Some(sub) => check(value, sub, &join(&key.name), out),
                None => {
                    let mut known: Vec<&str> = props.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    out.push(Problem::new(
                        key.pos,
                        &join(&key.name),
                        unknown_field(&key.name, &known),
                        &format!("one of {}", known.join(", ")),
                    ));
                }
            }
        }
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for r in required.iter().filter_map(Value::as_str) {
                if node.get(r).is_none() {
                    let sub = props.get(r).unwrap_or(&Value::Null);
                    out.push(Problem::new(
                        node.pos,
                        &join(r),
                        missing(r, sub),
                        &expectation(sub),
                    ));
                }
            }
        }
    } else if let Some(values) = schema.get("additionalProperties") {
        for (key, value) in entries {
            check(value, values, &join(&key.name), out);
        }
    }
}

/// "missing required field `x`", with the field's own description as an aside (a
/// doc comment reads as a sentence, not as an expectation).
fn missing(name: &str, schema: &Value) -> String {
    match schema.get("description").and_then(Value::as_str) {
        Some(d) if !d.is_empty() => {
            let d = d.trim_end_matches('.');
            let mut chars = d.chars();
            let aside: String = match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => String::new(),
            };
            format!("missing required field `{name}` ({aside})")
        }
        _ => format!("missing required field `{name}`"),
    }
}

/// What a value of `schema` looks like, from its type and bounds: the expectation text.
fn expectation(schema: &Value) -> String {
    // The CRD writes bounds as floats (1.0); they are whole numbers.
    let int = |key: &str| schema.get(key).and_then(Value::as_f64).map(|v| v as i64);
    match type_of(schema) {
        Some("object") => {
            let required: Vec<String> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(|k| format!("`{k}`"))
                        .collect()
                })
                .unwrap_or_default();
            if required.is_empty() {
                "a mapping".to_owned()
            } else {
                format!("a mapping with {}", required.join(", "))
            }
        }
        Some("array") => match (int("minItems"), int("maxItems")) {
            (Some(a), Some(b)) => format!("a list of {a} to {b} items"),
            _ => "a list".to_owned(),
        },
        Some("integer") => match (int("minimum"), int("maximum")) {
            (Some(a), Some(b)) => format!("an integer from {a} to {b}"),
            (Some(a), None) => format!("an integer of at least {a}"),
            _ if schema.get("format").and_then(Value::as_str) == Some("int32") => {
                "a 32-bit integer".to_owned()
            }
            _ => "an integer".to_owned(),
        },
        Some("boolean") => "true or false".to_owned(),
        Some("string") => match schema.get("enum").and_then(Value::as_array) {
            Some(values) => format!(
                "one of {}",
                values
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "a string".to_owned(),
        },
        _ => "a value".to_owned(),
    }
}
