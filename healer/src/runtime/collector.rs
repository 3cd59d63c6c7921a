//! The capacity collector: one [`Observation`] of a fleet's members for the pure
//! evaluator ([`crate::capacity`]).
//!
//! For each member Pod, under a bounded number of concurrent members and one overall
//! deadline:
//! 1. `GET http://<exact Pod IP>:8081/state` (the member HTTP of [`super::members`]:
//!    1 s connect, 2 s in all, 1 MiB, GET only, never through a Service), parsed strictly;
//! 2. one list of the fleet's PodMetrics from `metrics.k8s.io` (2 s, 1 MiB), by the
//!    fleet's identity label;
//! 3. the fleet's Pods are listed again, and a member's sample is dropped if the member
//!    changed meanwhile (container identity, IP, readiness or fleet label).
//!
//! A source that fails leaves the sample without it and says why ([`Problem`]: missing,
//! stale, malformed, too large, slow, or the member changed meanwhile); the evaluator
//! then waits and names the member and the cause. Nothing is ever guessed, and nothing but GET is sent.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use celld_api::labels::IDENTITY;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

use super::members::{self, MEMBER_PORT};
use crate::application::Answer;
use crate::capacity::wire::{self, MAX_BODY_BYTES};
use crate::capacity::{MetricsSample, Observation, Problem, Sample, Source};
use crate::time::Timestamp;

/// Most member Pods one observation covers; a longer list is not an observation.
pub const MAX_MEMBERS: usize = 100;
/// The container whose load counts.
const CONTAINER: &str = "celld";

/// Collects observations; cheap to clone.
#[derive(Clone)]
pub struct Collector {
    client: Client,
    /// Member port (8081; tests use a local server).
    port: u16,
    /// Members sampled at once.
    concurrency: usize,
    /// Budget for the whole observation.
    deadline: Duration,
    /// Timeout of one metrics or Pod read.
    call_timeout: Duration,
}

impl Collector {
    /// A collector with the production settings: port 8081, 8 members at once, 10 s.
    pub fn new(client: Client) -> Collector {
        Collector {
            client,
            port: MEMBER_PORT,
            concurrency: 8,
            deadline: Duration::from_secs(10),
            call_timeout: Duration::from_secs(2),
        }
    }

    /// Overrides the member port (tests).
    pub fn with_port(mut self, port: u16) -> Collector {
        self.port = port;
        self
    }

    /// Overrides the overall deadline (tests).
    pub fn with_deadline(mut self, deadline: Duration) -> Collector {
        self.deadline = deadline;
        self
    }

    /// Observes `pods`, the fleet's member Pods as the caller's cache has them (all in
    /// `namespace`), for the fleet whose identity label value is `identity`.
    ///
    /// Requests: one PodMetrics list and one Pod list for the fleet (by its identity
    /// label), and one `/state` GET per member.
    pub async fn collect(
        &self,
        namespace: &str,
        identity: &str,
        mut pods: Vec<Pod>,
    ) -> Observation {
        let at = now();
        if pods.len() > MAX_MEMBERS {
            return Observation::empty(at);
        }
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let deadline = tokio::time::Instant::now() + self.deadline;
        let selector = format!("{IDENTITY}={identity}");
        let (metrics, runtime) = tokio::join!(
            tokio::time::timeout_at(deadline, self.metrics(namespace, &selector, &pods)),
            // Owned Pods and collector per member: a stream of futures borrowing them
            // would not be `Send` for every lifetime, as the controller's future must be.
            futures::stream::iter(pods.clone().into_iter().map(|p| {
                let this = self.clone();
                async move {
                    tokio::time::timeout_at(deadline, this.runtime(&p))
                        .await
                        .unwrap_or(Err(Problem::Slow(Source::State)))
                }
            }))
            .buffered(self.concurrency)
            .collect::<Vec<_>>()
        );
        let mut metrics = metrics.unwrap_or(Err(Problem::Slow(Source::Metrics)));
        // Both reads done: each member must still be the one we asked.
        let fresh = match tokio::time::timeout_at(deadline, self.reread(namespace, &selector)).await
        {
            Ok(r) => r,
            Err(_) => Err(Problem::Slow(Source::Pods)),
        };
        let samples = pods
            .iter()
            .zip(runtime)
            .map(|(p, runtime)| {
                let name = p.metadata.name.clone().unwrap_or_default();
                let mut s = Sample {
                    member: name.clone(),
                    identity: pod_identity(p),
                    ready: members::ready(p),
                    ..Sample::default()
                };
                match &fresh {
                    Ok(list) => match list.iter().find(|f| f.metadata.name == p.metadata.name) {
                        Some(f) if same_member(p, f, identity) => {}
                        _ => {
                            s.problem = Some(Problem::Changed);
                            return s;
                        }
                    },
                    Err(e) => {
                        s.problem = Some(e.clone());
                        return s;
                    }
                }
                match runtime {
                    Ok(r) => s.runtime = Some(r),
                    Err(e) => s.problem = Some(e),
                }
                let m = match &mut metrics {
                    Ok(map) => map.remove(&name).unwrap_or_else(|| {
                        Err(Problem::Missing(
                            Source::Metrics,
                            "no PodMetrics for the member".to_string(),
                        ))
                    }),
                    Err(e) => Err(e.clone()),
                };
                match m {
                    Ok(m) => s.metrics = Some(m),
                    Err(e) => {
                        s.problem.get_or_insert(e);
                    }
                }
                s
            })
            .collect();
        Observation {
            at,
            complete: true,
            samples,
        }
    }

    async fn runtime(&self, p: &Pod) -> Result<crate::capacity::RuntimeSample, Problem> {
        let ip = p.status.as_ref().and_then(|st| st.pod_ip.clone());
        let (Some(started), Some(ip), false) =
            (members::started(p), ip, pod_identity(p).is_empty())
        else {
            return Err(Problem::Missing(
                Source::State,
                "no running celld container with a Pod IP".to_string(),
            ));
        };
        match members::fetch(&ip, self.port, "/state").await {
            Answer::Body(b) => {
                wire::parse_state(&b, started, now()).map_err(|e| e.problem(Source::State))
            }
            Answer::Status(code) => Err(Problem::Missing(Source::State, format!("HTTP {code}"))),
            Answer::Recovering => Err(Problem::Missing(
                Source::State,
                "recovering its predecessor's log".to_string(),
            )),
            Answer::Failed(e) => Err(Problem::Missing(Source::State, e)),
            Answer::Slow => Err(Problem::Slow(Source::State)),
            Answer::TooLarge => Err(Problem::TooLarge(Source::State)),
        }
    }

    /// One PodMetrics list for the fleet (`list` is all the RBAC grants: no `get`).
    async fn metrics(
        &self,
        namespace: &str,
        selector: &str,
        pods: &[Pod],
    ) -> Result<BTreeMap<String, Result<MetricsSample, Problem>>, Problem> {
        let missing = |e: String| Problem::Missing(Source::Metrics, e);
        let url = format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods?labelSelector={}",
            encode(selector)
        );
        let req = http::Request::get(url)
            .body(Vec::new())
            .map_err(|e| missing(e.to_string()))?;
        let text = tokio::time::timeout(self.call_timeout, self.client.request_text(req))
            .await
            .map_err(|_| Problem::Slow(Source::Metrics))?
            .map_err(|e| missing(e.to_string()))?;
        // kube reads the whole body; the limit is checked on what arrived (a list for 100
        // members is tens of KiB).
        if text.len() > MAX_BODY_BYTES {
            return Err(Problem::TooLarge(Source::Metrics));
        }
        let started = |name: &str| {
            pods.iter()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .and_then(members::started)
        };
        let map =
            wire::parse_pod_metrics_list(text.as_bytes(), namespace, CONTAINER, started, now())
                .map_err(|e| e.problem(Source::Metrics))?;
        Ok(map
            .into_iter()
            .map(|(k, v)| (k, v.map_err(|e| e.problem(Source::Metrics))))
            .collect())
    }

    /// The fleet's Pods again, by list (the healer has no `get` on Pods).
    async fn reread(&self, namespace: &str, selector: &str) -> Result<Vec<Pod>, Problem> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        tokio::time::timeout(
            self.call_timeout,
            api.list(&ListParams::default().labels(selector)),
        )
        .await
        .map_err(|_| Problem::Slow(Source::Pods))?
        .map(|l| l.items)
        .map_err(|e| Problem::Missing(Source::Pods, e.to_string()))
    }
}

/// Percent-encodes a label selector for a query string.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn now() -> Timestamp {
    Timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    )
}

/// `<pod uid>/<container id>/<restart count>` of the running `celld` container; empty
/// when the Pod is terminating or the container is not running.
pub fn pod_identity(p: &Pod) -> String {
    if p.metadata.deletion_timestamp.is_some() {
        return String::new();
    }
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let c = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == CONTAINER));
    match c {
        Some(c)
            if !uid.is_empty()
                && c.state.as_ref().is_some_and(|s| s.running.is_some())
                && c.container_id.as_deref().is_some_and(|id| !id.is_empty()) =>
        {
            format!(
                "{uid}/{}/{}",
                c.container_id.as_deref().unwrap_or_default(),
                c.restart_count
            )
        }
        _ => String::new(),
    }
}

/// The member is unchanged: same container identity, IP, readiness and fleet label.
fn same_member(before: &Pod, after: &Pod, identity: &str) -> bool {
    let ip = |p: &Pod| p.status.as_ref().and_then(|s| s.pod_ip.clone());
    let label = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(IDENTITY))
            .is_some_and(|v| v == identity)
    };
    pod_identity(before) == pod_identity(after)
        && ip(before) == ip(after)
        && members::ready(before) == members::ready(after)
        && label(before)
        && label(after)
}

#[cfg(test)]
mod tests;
