//! The two wire formats the collector reads, parsed strictly and purely:
//! a member's `GET :8081/state` and a `metrics.k8s.io/v1beta1` PodMetrics.
//!
//! Strict means: one JSON object, no trailing content, no key twice at any depth, every
//! field we read present and of its type (a missing or null field is never taken as
//! zero), values in range, and no sample taken before the container started.

use std::collections::HashSet;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};

use super::observation::{MetricsSample, Problem, RuntimeSample, Source};
use crate::time::Timestamp;

/// Largest body accepted from a member or the metrics API.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Largest byte count believed (2^50, about a pebibyte).
const MAX_BYTES: u64 = 1 << 50;
/// Largest CPU believed, in millicores (a million cores).
const MAX_MILLICORES: i64 = 1_000_000_000;
const MIB: u64 = 1 << 20;

/// Why a body was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// Not one well-formed JSON value, trailing content, or a key twice.
    #[error("not strict JSON: {0}")]
    Json(String),
    /// A field missing, null, of the wrong type or out of range.
    #[error("invalid {what}: {why}")]
    Invalid {
        /// Which document.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// `/state` without schema 1 and a runtime generation: nothing to identify it by.
    #[error(
        "/state has no usable identity (shutdown.schema_version {schema}, runtime_generation {generation:?})"
    )]
    Unsupported {
        /// schema_version found.
        schema: u32,
        /// runtime_generation found.
        generation: String,
    },
    /// Taken before the running container started: it describes another process.
    #[error("{what} sampled at {sampled} is older than the container (started {started})")]
    BeforeStart {
        /// Which document.
        what: &'static str,
        /// Sample time.
        sampled: Timestamp,
        /// Container start.
        started: Timestamp,
    },
}

impl WireError {
    /// The waiting message's cause: a sample from before the container started is stale
    /// (it describes another process); anything else is malformed.
    pub fn problem(&self, source: Source) -> Problem {
        match self {
            WireError::BeforeStart { .. } => Problem::Stale(source),
            _ => Problem::Malformed(source, self.to_string()),
        }
    }
}

/// Accepts any JSON value, refusing an object that names a key twice (at any depth).
struct Strict;

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut keys = HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            if !keys.insert(k.clone()) {
                return Err(de::Error::custom(format!("duplicate key {k:?}")));
            }
            map.next_value::<Strict>()?;
        }
        Ok(Strict)
    }
}

/// Parses `body` as exactly one JSON object of type `T`, strictly.
fn strict<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, WireError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(WireError::Json(format!("{} bytes, over 1 MiB", body.len())));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    Strict::deserialize(&mut de).map_err(|e| WireError::Json(e.to_string()))?;
    de.end().map_err(|e| WireError::Json(e.to_string()))?;
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(WireError::Json("not a JSON object".to_string()));
    }
    serde_json::from_slice(body).map_err(|e| WireError::Json(e.to_string()))
}

// The `/state` fields the evaluator needs; every one required. Other fields are ignored.
#[derive(Deserialize)]
struct State {
    capacity_waiting: u64,
    activation_waiting: u64,
    restoring: u64,
    #[allow(dead_code)] // required by the contract, not used in a decision
    occupied: u64,
    #[allow(dead_code)]
    owned_cells: u64,
    node_load: NodeLoad,
    shutdown: Shutdown,
}

#[derive(Deserialize)]
struct NodeLoad {
    draining: bool,
    rebalance_paused: bool,
    sampled_ms: u64,
    #[allow(dead_code)]
    resident_cells: u64,
    rss_bytes: u64,
    in_use_bytes: u64,
    pressured: bool,
    memory_headroom: Headroom,
}

/// Released runtimes report headroom as a flag, the stub as the bytes left; both say
/// whether there is any.
#[derive(Deserialize)]
#[serde(untagged)]
enum Headroom {
    Flag(bool),
    Bytes(u64),
}

#[derive(Deserialize)]
struct Shutdown {
    schema_version: u32,
    runtime_generation: String,
}

/// Parses a member's `/state` answer received at `received` from a container started at
/// `started`.
pub fn parse_state(
    body: &[u8],
    started: Timestamp,
    received: Timestamp,
) -> Result<RuntimeSample, WireError> {
    let s: State = strict(body)?;
    if s.shutdown.schema_version != 1 || s.shutdown.runtime_generation.is_empty() {
        return Err(WireError::Unsupported {
            schema: s.shutdown.schema_version,
            generation: s.shutdown.runtime_generation,
        });
    }
    let l = &s.node_load;
    let invalid = |why: String| WireError::Invalid {
        what: "/state",
        why,
    };
    if l.rss_bytes > MAX_BYTES || l.in_use_bytes > MAX_BYTES {
        return Err(invalid("memory beyond 2^50 bytes".to_string()));
    }
    let sampled = i64::try_from(l.sampled_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Timestamp)
        .ok_or_else(|| invalid(format!("node_load.sampled_ms {}", l.sampled_ms)))?;
    if sampled < started {
        return Err(WireError::BeforeStart {
            what: "/state",
            sampled,
            started,
        });
    }
    let headroom = match l.memory_headroom {
        Headroom::Flag(f) => f,
        Headroom::Bytes(b) => b > 0,
    };
    Ok(RuntimeSample {
        sampled,
        received,
        memory_mib: (l.rss_bytes.max(l.in_use_bytes).div_ceil(MIB)) as i64,
        pressured: l.pressured || !headroom,
        backlog: l.draining
            || l.rebalance_paused
            || s.capacity_waiting > 0
            || s.activation_waiting > 0
            || s.restoring > 0,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodMetrics {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    metadata: Meta,
    timestamp: String,
    window: String,
    containers: Vec<Container>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodMetricsList {
    kind: String,
    api_version: String,
    items: Vec<PodMetrics>,
}

#[derive(Deserialize)]
struct Meta {
    name: String,
    namespace: String,
}

#[derive(Deserialize)]
struct Container {
    name: String,
    usage: Usage,
}

#[derive(Deserialize)]
struct Usage {
    cpu: String,
    memory: String,
}

/// Parses a PodMetrics for `namespace/name`, reading the container named `container`.
pub fn parse_pod_metrics(
    body: &[u8],
    namespace: &str,
    name: &str,
    container: &str,
    started: Timestamp,
    received: Timestamp,
) -> Result<MetricsSample, WireError> {
    let m: PodMetrics = strict(body)?;
    if m.kind != "PodMetrics" || m.api_version != API_VERSION {
        return Err(WireError::Invalid {
            what: "PodMetrics",
            why: format!("kind {} apiVersion {}", m.kind, m.api_version),
        });
    }
    item(&m, namespace, name, container, started, received)
}

const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// Parses a PodMetricsList of `namespace` (items carry no kind of their own): each Pod
/// name to its sample or why it has none. A name listed twice is refused for both.
pub fn parse_pod_metrics_list(
    body: &[u8],
    namespace: &str,
    container: &str,
    started: impl Fn(&str) -> Option<Timestamp>,
    received: Timestamp,
) -> Result<std::collections::BTreeMap<String, Result<MetricsSample, WireError>>, WireError> {
    let l: PodMetricsList = strict(body)?;
    if l.kind != "PodMetricsList" || l.api_version != API_VERSION {
        return Err(WireError::Invalid {
            what: "PodMetricsList",
            why: format!("kind {} apiVersion {}", l.kind, l.api_version),
        });
    }
    let mut out = std::collections::BTreeMap::new();
    for m in &l.items {
        let name = m.metadata.name.clone();
        let Some(start) = started(&name) else {
            continue; // not a member we sample
        };
        let parsed = item(m, namespace, &name, container, start, received);
        let dup = out.insert(name.clone(), parsed).is_some();
        if dup {
            out.insert(
                name,
                Err(WireError::Invalid {
                    what: "PodMetricsList",
                    why: "the Pod is listed twice".to_string(),
                }),
            );
        }
    }
    Ok(out)
}

fn item(
    m: &PodMetrics,
    namespace: &str,
    name: &str,
    container: &str,
    started: Timestamp,
    received: Timestamp,
) -> Result<MetricsSample, WireError> {
    let invalid = |why: String| WireError::Invalid {
        what: "PodMetrics",
        why,
    };
    if m.metadata.name != name || m.metadata.namespace != namespace {
        return Err(invalid(format!(
            "for {}/{}, not {namespace}/{name}",
            m.metadata.namespace, m.metadata.name
        )));
    }
    let at = m
        .timestamp
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map(|t| Timestamp(t.as_millisecond()))
        .map_err(|e| invalid(format!("timestamp {:?}: {e}", m.timestamp)))?;
    let window_ms = go_duration_ms(&m.window)
        .filter(|w| *w > 0)
        .ok_or_else(|| invalid(format!("window {:?}", m.window)))?;
    // The window must lie wholly within this container's life.
    if Timestamp(at.0 - window_ms) < started {
        return Err(WireError::BeforeStart {
            what: "PodMetrics window",
            sampled: Timestamp(at.0 - window_ms),
            started,
        });
    }
    let mut ours = m.containers.iter().filter(|c| c.name == container);
    let c = ours
        .next()
        .ok_or_else(|| invalid(format!("no container {container}")))?;
    if ours.next().is_some() {
        return Err(invalid(format!("container {container} listed twice")));
    }
    let cpu = millicores(&c.usage.cpu)
        .filter(|v| (0..=MAX_MILLICORES).contains(v))
        .ok_or_else(|| invalid(format!("cpu {:?}", c.usage.cpu)))?;
    let bytes = bytes(&c.usage.memory)
        .filter(|v| *v <= MAX_BYTES)
        .ok_or_else(|| invalid(format!("memory {:?}", c.usage.memory)))?;
    Ok(MetricsSample {
        at,
        received,
        window_ms,
        cpu_millicores: cpu,
        memory_mib: bytes.div_ceil(MIB) as i64,
    })
}

/// Splits a quantity into its number and suffix.
fn split(q: &str) -> Option<(f64, &str)> {
    let end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let n: f64 = q[..end].parse().ok()?;
    Some((n, &q[end..]))
}

/// A CPU quantity (`250m`, `1`, `123456n`, `5u`) in millicores, rounded up.
pub fn millicores(q: &str) -> Option<i64> {
    let (n, suffix) = split(q)?;
    let per_core = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "u" => 1e-6,
        "n" => 1e-9,
        _ => return None,
    };
    Some((n * per_core * 1000.0).ceil() as i64)
}

/// A memory quantity (`1234`, `512Ki`, `3Mi`, `1G`) in bytes.
pub fn bytes(q: &str) -> Option<u64> {
    let (n, suffix) = split(q)?;
    let unit: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let v = (n * unit).ceil();
    (v.is_finite() && v >= 0.0 && v <= MAX_BYTES as f64).then_some(v as u64)
}

/// A Go duration (`30s`, `10.5s`, `1m0s`, `500ms`) in milliseconds.
pub fn go_duration_ms(s: &str) -> Option<i64> {
    let mut rest = s;
    let mut total = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let (n, tail) = split(rest)?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let ms = match &tail[..unit_len] {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1000.0,
            "ms" => 1.0,
            "us" | "µs" => 1e-3,
            "ns" => 1e-6,
            _ => return None,
        };
        total += n * ms;
        rest = &tail[unit_len..];
    }
    Some(total.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STARTED: Timestamp = Timestamp(1_800_000_000_000);

    fn state(sampled: i64) -> serde_json::Value {
        serde_json::json!({
            "capacity_waiting": 0, "activation_waiting": 0, "restoring": 0, "occupied": 4,
            "owned_cells": 4, "extra": {"ignored": [1, 2]},
            "node_load": {"draining": false, "rebalance_paused": false, "sampled_ms": sampled,
                "resident_cells": 4, "rss_bytes": 100u64 << 20, "in_use_bytes": 64u64 << 20,
                "pressured": false, "memory_headroom": true},
            "shutdown": {"schema_version": 1, "runtime_generation": "g1"}
        })
    }

    fn parse(v: &serde_json::Value) -> Result<RuntimeSample, WireError> {
        parse_state(
            v.to_string().as_bytes(),
            STARTED,
            Timestamp(STARTED.0 + 10_000),
        )
    }

    #[test]
    fn w1_state_reads_load_memory_and_backlog() {
        let s = parse(&state(STARTED.0 + 5_000)).unwrap();
        assert_eq!((s.memory_mib, s.pressured, s.backlog), (100, false, false));
        let mut v = state(STARTED.0 + 5_000);
        v["restoring"] = 2.into();
        v["node_load"]["memory_headroom"] = 0.into();
        let s = parse(&v).unwrap();
        assert!(s.backlog && s.pressured);
    }

    #[test]
    fn w2_state_refuses_duplicates_trailing_data_missing_and_null_fields() {
        let good = state(STARTED.0 + 5_000).to_string();
        let dup = good.replacen("\"occupied\":4", "\"occupied\":4,\"occupied\":5", 1);
        assert!(
            matches!(parse_state(dup.as_bytes(), STARTED, STARTED), Err(WireError::Json(m)) if m.contains("duplicate"))
        );
        let nested = good.replacen("\"ignored\":[1,2]", "\"ignored\":1,\"ignored\":2", 1);
        assert!(matches!(
            parse_state(nested.as_bytes(), STARTED, STARTED),
            Err(WireError::Json(_))
        ));
        let trailing = format!("{good} {{}}");
        assert!(matches!(
            parse_state(trailing.as_bytes(), STARTED, STARTED),
            Err(WireError::Json(_))
        ));
        let mut v = state(STARTED.0 + 5_000);
        v["node_load"]["rss_bytes"] = serde_json::Value::Null;
        assert!(parse(&v).is_err());
        v["node_load"].as_object_mut().unwrap().remove("rss_bytes");
        assert!(parse(&v).is_err());
        assert!(parse_state(b"[1]", STARTED, STARTED).is_err());
        assert!(parse_state(&vec![b' '; MAX_BODY_BYTES + 1], STARTED, STARTED).is_err());
    }

    #[test]
    fn w3_state_refuses_samples_older_than_the_container_and_unknown_schemas() {
        assert!(matches!(
            parse(&state(STARTED.0 - 1)),
            Err(WireError::BeforeStart { .. })
        ));
        assert!(matches!(parse(&state(0)), Err(WireError::Invalid { .. })));
        let mut v = state(STARTED.0 + 5_000);
        v["shutdown"]["schema_version"] = 2.into();
        assert!(matches!(parse(&v), Err(WireError::Unsupported { .. })));
        let mut v = state(STARTED.0 + 5_000);
        v["node_load"]["rss_bytes"] = (1u64 << 51).into();
        assert!(matches!(parse(&v), Err(WireError::Invalid { .. })));
    }

    fn metrics(containers: serde_json::Value) -> Vec<u8> {
        serde_json::json!({
            "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": "f-0", "namespace": "ns", "creationTimestamp": null},
            "timestamp": "2027-01-15T08:00:30Z", "window": "10.5s",
            "containers": containers
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn w4_pod_metrics_reads_the_celld_container_only() {
        let started = Timestamp(1_800_000_000_000);
        let body = metrics(serde_json::json!([
            {"name": "sidecar", "usage": {"cpu": "5", "memory": "1Gi"}},
            {"name": "celld", "usage": {"cpu": "250123456n", "memory": "300Mi"}}
        ]));
        let m = parse_pod_metrics(&body, "ns", "f-0", "celld", started, started).unwrap();
        assert_eq!(
            (m.cpu_millicores, m.memory_mib, m.window_ms),
            (251, 300, 10_500)
        );
        let dup = metrics(serde_json::json!([
            {"name": "celld", "usage": {"cpu": "1m", "memory": "1Mi"}},
            {"name": "celld", "usage": {"cpu": "1m", "memory": "1Mi"}}
        ]));
        assert!(parse_pod_metrics(&dup, "ns", "f-0", "celld", started, started).is_err());
        assert!(parse_pod_metrics(&body, "ns", "f-1", "celld", started, started).is_err());
        // A window reaching back before the container started.
        let late = Timestamp(m.at.0 - 5_000);
        assert!(matches!(
            parse_pod_metrics(&body, "ns", "f-0", "celld", late, started),
            Err(WireError::BeforeStart { .. })
        ));
    }

    #[test]
    fn w4_pod_metrics_list_by_member() {
        let started = Timestamp(1_800_000_000_000);
        let item = |name: &str| {
            serde_json::json!({"metadata": {"name": name, "namespace": "ns"},
                "timestamp": "2027-01-15T08:00:30Z", "window": "15s",
                "containers": [{"name": "celld", "usage": {"cpu": "10m", "memory": "1Mi"}}]})
        };
        let body =
            serde_json::json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {}, "items": [item("f-0"), item("f-1"), item("f-1"), item("other")]})
            .to_string();
        let members = |n: &str| (n != "other").then_some(started);
        let m = parse_pod_metrics_list(body.as_bytes(), "ns", "celld", members, started).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m["f-0"].as_ref().unwrap().cpu_millicores, 10);
        assert!(m["f-1"].is_err());
        let wrong = body.replace("PodMetricsList", "PodList");
        assert!(parse_pod_metrics_list(wrong.as_bytes(), "ns", "celld", members, started).is_err());
    }

    #[test]
    fn w5_quantities_and_durations() {
        assert_eq!(millicores("250m"), Some(250));
        assert_eq!(millicores("2"), Some(2000));
        assert_eq!(millicores("1500u"), Some(2));
        assert_eq!(millicores("-1"), None);
        assert_eq!(bytes("512Ki"), Some(512 * 1024));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1Xi"), None);
        assert_eq!(go_duration_ms("1m0s"), Some(60_000));
        assert_eq!(go_duration_ms("10.5s"), Some(10_500));
        assert_eq!(go_duration_ms("500ms"), Some(500));
        assert_eq!(go_duration_ms("5x"), None);
        assert_eq!(go_duration_ms(""), None);
    }
}
