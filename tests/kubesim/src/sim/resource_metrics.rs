//! The kubelet resource-metrics endpoint (`GET /metrics/resource`, Prometheus text) that
//! metrics-server scrapes, one listener per simulated node at `<node IP>:<kubelet port>`
//! (the port the Node's `daemonEndpoints` advertise). Loads come from the control API
//! (`PUT /pods/{ns}/{pod glob}/load`); CPU is reported as a cumulative counter that
//! integrates the load set over time, as a real kubelet's cAdvisor does, so
//! metrics-server's rate over two scrapes is the load a test set.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hyper::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use super::Sim;
use crate::http::{self, Req, Resp};
use crate::objects::glob_match;

/// The load a test sets on matching Pods' containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Load {
    pub cpu_millicores: u64,
    pub memory_mib: u64,
}

/// Without a rule: a quiet member.
pub const DEFAULT_LOAD: Load = Load {
    cpu_millicores: 20,
    memory_mib: 64,
};

/// A container's CPU counter: when last integrated, CPU seconds so far, the load then.
type Counter = (Instant, f64, Load);

#[derive(Default)]
pub(crate) struct Loads {
    /// (namespace, Pod glob, load); the latest matching rule wins.
    rules: Mutex<Vec<(String, String, Load)>>,
    /// Per (Pod uid, container): when last integrated, CPU seconds so far, the load then.
    counters: Mutex<HashMap<(String, String), Counter>>,
}

impl Loads {
    pub(crate) fn set(&self, namespace: &str, pod: &str, load: Load) {
        let mut rules = self.rules.lock().expect("loads");
        rules.retain(|(ns, p, _)| !(ns == namespace && p == pod));
        rules.push((namespace.to_string(), pod.to_string(), load));
    }

    fn for_pod(&self, namespace: &str, name: &str) -> Load {
        self.rules
            .lock()
            .expect("loads")
            .iter()
            .rev()
            .find(|(ns, p, _)| ns == namespace && glob_match(p, name))
            .map_or(DEFAULT_LOAD, |(_, _, l)| *l)
    }

    /// Cumulative CPU seconds of a container: integrates the previous load up to now,
    /// then continues with `load`.
    fn cpu_seconds(&self, uid: &str, container: &str, load: Load) -> f64 {
        let mut c = self.counters.lock().expect("counters");
        let now = Instant::now();
        let e = c
            .entry((uid.to_string(), container.to_string()))
            // Start from one second of work: metrics-server ignores a zero counter.
            .or_insert((now, 1.0, load));
        e.1 += e.2.cpu_millicores as f64 / 1000.0 * now.duration_since(e.0).as_secs_f64();
        e.0 = now;
        e.2 = load;
        e.1
    }
}

/// `PUT /pods/{ns}/{pod}/load` on the control API.
pub(crate) fn set_load(sim: &Sim, ns: &str, pod: &str, req: &Req) -> Resp {
    match req.json::<Load>() {
        Ok(load) => {
            sim.loads.set(ns, pod, load);
            http::json(
                StatusCode::OK,
                &serde_json::json!({"namespace": ns, "pod": pod, "load": load}),
            )
        }
        Err(r) => *r,
    }
}

/// The Prometheus text of one node: every running container of the Pods bound to it.
pub(crate) fn render(sim: &Sim, node: &str) -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut cpu = String::new();
    let mut mem = String::new();
    let mut start = String::new();
    let (mut node_cpu, mut node_mem) = (1.0f64, 256u64 << 20);
    for pod in sim.pods.state() {
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node) {
            continue;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let load = sim.loads.for_pod(&ns, &name);
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default();
        for c in statuses {
            let Some(started) = c
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
            else {
                continue;
            };
            let labels = format!("container=\"{}\",namespace=\"{ns}\",pod=\"{name}\"", c.name);
            let secs = sim.loads.cpu_seconds(&uid, &c.name, load);
            let bytes = load.memory_mib << 20;
            node_cpu += secs;
            node_mem += bytes;
            cpu.push_str(&format!(
                "container_cpu_usage_seconds_total{{{labels}}} {secs:.6} {now_ms}\n"
            ));
            mem.push_str(&format!(
                "container_memory_working_set_bytes{{{labels}}} {bytes} {now_ms}\n"
            ));
            start.push_str(&format!(
                "container_start_time_seconds{{{labels}}} {:.3} {now_ms}\n",
                started.0.as_millisecond() as f64 / 1000.0
            ));
        }
    }
    format!(
        "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds\n\
         # TYPE container_cpu_usage_seconds_total counter\n{cpu}\
         # HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes\n\
         # TYPE container_memory_working_set_bytes gauge\n{mem}\
         # HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds\n\
         # TYPE container_start_time_seconds gauge\n{start}\
         # HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds\n\
         # TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total {node_cpu:.6} {now_ms}\n\
         # HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes\n\
         # TYPE node_memory_working_set_bytes gauge\nnode_memory_working_set_bytes {node_mem} {now_ms}\n"
    )
}

/// Serves `/metrics/resource` for every node on `<node IP>:<port>`. A node whose address
/// cannot be bound is skipped with a warning (metrics-server then reports it unavailable).
pub(crate) async fn serve_all(sim: Arc<Sim>, port: u16) {
    for node in sim.nodes.values() {
        let addr = std::net::SocketAddr::new(node.spec.ip.into(), port);
        let listener = match http::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, node = %node.spec.name, "no resource metrics for this node");
                continue;
            }
        };
        let name = node.spec.name.clone();
        let sim = sim.clone();
        tokio::spawn(async move {
            let handler = move |req: Req| {
                let sim = sim.clone();
                let name = name.clone();
                async move {
                    let alive = sim.node(&name).is_some_and(|n| n.is_alive());
                    match (req.method.clone(), req.path.as_str()) {
                        _ if !alive => http::error(StatusCode::SERVICE_UNAVAILABLE, "node down"),
                        (Method::GET, "/metrics/resource") => http::raw(
                            StatusCode::OK,
                            "text/plain; version=0.0.4",
                            render(&sim, &name),
                        ),
                        _ => http::error(StatusCode::NOT_FOUND, "try GET /metrics/resource"),
                    }
                }
            };
            http::serve(listener, handler, std::future::pending()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_counter_integrates_the_load_set_and_rules_match_by_glob() {
        let loads = Loads::default();
        assert_eq!(loads.for_pod("ns", "f-0"), DEFAULT_LOAD);
        let busy = Load {
            cpu_millicores: 2000,
            memory_mib: 900,
        };
        loads.set("ns", "f-*", busy);
        assert_eq!(loads.for_pod("ns", "f-1"), busy);
        assert_eq!(loads.for_pod("other", "f-1"), DEFAULT_LOAD);
        let first = loads.cpu_seconds("u", "celld", busy);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let second = loads.cpu_seconds("u", "celld", busy);
        // 2 cores for ~0.2 s.
        assert!((0.3..1.0).contains(&(second - first)), "{first} {second}");
    }
}
