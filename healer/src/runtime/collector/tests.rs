//! The collector against one local HTTP server that plays the member (`/state`) and the
//! API server (PodMetrics and the Pod re-read).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::net::TcpListener;

use super::Collector;
use crate::capacity::{Problem, Source};

/// What the fake answers.
struct Fake {
    state: Mutex<Vec<u8>>,
    state_delay: Mutex<Duration>,
    metrics: Mutex<Vec<u8>>,
    /// Pod JSON for the re-read.
    pod: Mutex<serde_json::Value>,
    /// Every request: "METHOD path".
    seen: Mutex<Vec<String>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn rfc3339(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .unwrap()
        .to_string()
}

fn pod_json(ip: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "f-0", "namespace": "ns", "uid": "u0",
            "labels": {"fleet.celld.dev/identity": "fid"}},
        "spec": {"containers": [{"name": "celld", "image": "x"}]},
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "celld", "image": "x", "imageID": "", "ready": true,
                "restartCount": 0, "containerID": "containerd://c0",
                "state": {"running": {"startedAt": rfc3339(now_ms() - 60_000)}}}]
        }
    })
}

fn state_json() -> Vec<u8> {
    json!({
        "capacity_waiting": 0, "activation_waiting": 0, "restoring": 0, "occupied": 1,
        "owned_cells": 1,
        "node_load": {"draining": false, "rebalance_paused": false, "sampled_ms": now_ms() - 1000,
            "resident_cells": 1, "rss_bytes": 10u64 << 20, "in_use_bytes": 5u64 << 20,
            "pressured": false, "memory_headroom": true},
        "shutdown": {"schema_version": 1, "runtime_generation": "g"}
    })
    .to_string()
    .into_bytes()
}

fn metrics_json() -> Vec<u8> {
    json!({
        "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": "f-0", "namespace": "ns"},
        "timestamp": rfc3339(now_ms() - 2000), "window": "15s",
        "containers": [{"name": "celld", "usage": {"cpu": "120m", "memory": "64Mi"}}]
    })
    .to_string()
    .into_bytes()
}

async fn serve(fake: Arc<Fake>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let fake = fake.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let fake = fake.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        fake.seen
                            .lock()
                            .unwrap()
                            .push(format!("{} {path}", req.method()));
                        let body = match path.as_str() {
                            "/apis/metrics.k8s.io/v1beta1/namespaces/ns/pods" => {
                                let item: serde_json::Value =
                                    serde_json::from_slice(&fake.metrics.lock().unwrap()).unwrap();
                                json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
                                    "metadata": {}, "items": [item]}).to_string().into_bytes()
                            }
                            "/api/v1/namespaces/ns/pods" => {
                                json!({"kind": "PodList", "apiVersion": "v1",
                                "metadata": {"resourceVersion": "1"},
                                "items": [fake.pod.lock().unwrap().clone()]})
                                .to_string()
                                .into_bytes()
                            }
                            "/state" => {
                                let delay = *fake.state_delay.lock().unwrap();
                                tokio::time::sleep(delay).await;
                                fake.state.lock().unwrap().clone()
                            }
                            "/apis/metrics.k8s.io/v1beta1/namespaces/ns/pods/f-0" => {
                                fake.metrics.lock().unwrap().clone()
                            }
                            "/api/v1/namespaces/ns/pods/f-0" => {
                                fake.pod.lock().unwrap().to_string().into_bytes()
                            }
                            _ => b"{}".to_vec(),
                        };
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    port
}

async fn setup() -> (Arc<Fake>, Collector, Pod) {
    let fake = Arc::new(Fake {
        state: Mutex::new(state_json()),
        state_delay: Mutex::new(Duration::ZERO),
        metrics: Mutex::new(metrics_json()),
        pod: Mutex::new(pod_json("127.0.0.1")),
        seen: Mutex::new(Vec::new()),
    });
    let port = serve(fake.clone()).await;
    let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let pod: Pod = serde_json::from_value(pod_json("127.0.0.1")).unwrap();
    (fake, Collector::new(client).with_port(port), pod)
}

#[tokio::test]
async fn c1_a_fresh_member_yields_both_sources() {
    let (fake, c, pod) = setup().await;
    let o = c.collect("ns", "fid", vec![pod]).await;
    assert!(o.complete);
    let s = &o.samples[0];
    assert_eq!(s.problem, None);
    assert_eq!(s.identity, "u0/containerd://c0/0");
    assert_eq!(s.runtime.as_ref().unwrap().memory_mib, 10);
    assert_eq!(s.metrics.as_ref().unwrap().cpu_millicores, 120);
    // C5 (GET only): nothing but GET reached the member or the API, and the API only
    // saw the two fleet-wide lists.
    let seen = fake.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|r| r.starts_with("GET ")), "{seen:?}");
    assert_eq!(seen.len(), 3, "{seen:?}");
}

#[tokio::test]
async fn c2_malformed_duplicate_trailing_huge_or_stale_state_names_the_member() {
    let (fake, c, pod) = setup().await;
    let good = String::from_utf8(state_json()).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{\"capacity_waiting\":".to_vec(), "strict JSON"),
        (
            good.replacen("\"occupied\":1", "\"occupied\":1,\"occupied\":2", 1)
                .into_bytes(),
            "duplicate",
        ),
        (format!("{good}{{}}").into_bytes(), "trailing"),
        (vec![b' '; (1 << 20) + 10], "over 1 MiB"),
        (
            good.replace(
                &format!(
                    "\"sampled_ms\":{}",
                    &good.split("\"sampled_ms\":").nth(1).unwrap()[..13]
                ),
                "\"sampled_ms\":1000",
            )
            .into_bytes(),
            "is stale",
        ),
    ];
    for (body, why) in cases {
        *fake.state.lock().unwrap() = body;
        let o = c.collect("ns", "fid", vec![pod.clone()]).await;
        let s = &o.samples[0];
        assert!(s.runtime.is_none(), "{why}");
        let problem = s
            .problem
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default();
        assert!(problem.contains("/state"), "{why}: {problem}");
        assert!(problem.contains(why), "{why}: {problem}");
        assert_eq!(s.member, "f-0");
    }
}

#[tokio::test]
async fn c3_a_member_that_changed_meanwhile_is_dropped() {
    let (fake, c, pod) = setup().await;
    *fake.pod.lock().unwrap() = pod_json("127.0.0.2");
    let o = c.collect("ns", "fid", vec![pod]).await;
    let s = &o.samples[0];
    assert!(s.runtime.is_none() && s.metrics.is_none());
    assert_eq!(s.problem, Some(Problem::Changed));
}

#[tokio::test]
async fn c4_a_slow_member_is_cut_off_by_the_timeout() {
    let (fake, c, pod) = setup().await;
    // 30 s late: returning well before shows the 2 s member timeout cut it off.
    *fake.state_delay.lock().unwrap() = Duration::from_secs(30);
    let start = Instant::now();
    let o = c.collect("ns", "fid", vec![pod]).await;
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(o.samples[0].problem, Some(Problem::Slow(Source::State)));
}

#[tokio::test]
async fn c4_one_overall_deadline() {
    let (fake, c, pod) = setup().await;
    let c = c.with_deadline(Duration::from_millis(300));
    // The member would answer after 30 s: returning well before that shows the deadline
    // cut it off, with a margin no loaded machine eats (not a speed check).
    *fake.state_delay.lock().unwrap() = Duration::from_secs(30);
    let start = Instant::now();
    let o = c.collect("ns", "fid", vec![pod]).await;
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(o.samples[0].problem, Some(Problem::Slow(_))),
        "{:?}",
        o.samples[0].problem
    );
}

#[tokio::test]
async fn c6_more_than_100_members_is_no_observation() {
    let (_fake, c, pod) = setup().await;
    let o = c
        .collect("ns", "fid", vec![pod; super::MAX_MEMBERS + 1])
        .await;
    assert!(!o.complete && o.samples.is_empty());
}
