//! The Kubernetes client, with every request counted by verb and resource
//! (`celld_healer_api_requests_total`) and timed to its response
//! (`celld_healer_api_request_duration_seconds`), so the healer's own API load, and how
//! long the API server makes it wait, are measurable; and every response's `Date` read
//! into [`Clocks`], so the API server's clock is measured at no cost of its own.
//!
//! Every write (POST, PUT, PATCH, DELETE) is bounded by [`WRITE_TIMEOUT`], on both
//! sides: the request carries `timeout=` (the API server gives up on it at that deadline,
//! so it cannot be applied later), and the healer stops waiting for it then. kube-rs
//! would wait 295 s, the bound of its watches: a write of a replica that lost the Lease
//! meanwhile could then land minutes after a new leader acted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::Client;
use kube::client::ClientBuilder;

use super::clocks::Clocks;
use super::metrics::{Metrics, RequestLabels};

/// The longest a write may take, from the healer's sending it to the API server's
/// deadline for it. The simulation's late writes of a deposed replica land within it.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A write given up after [`WRITE_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
#[error("the API server did not answer the write within {WRITE_TIMEOUT:?}")]
pub struct WriteTimedOut;

/// Builds a client from the in-cluster configuration or `KUBECONFIG`, counting and
/// timing requests.
pub async fn client(metrics: Arc<Metrics>, clocks: Arc<Clocks>) -> Result<Client> {
    let config = kube::Config::infer().await?;
    let layer = Timed::new(metrics, clocks);
    Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

/// Counts each request and times it to its response's headers (a watch's response is
/// a stream that lasts minutes: counted, not timed).
#[derive(Clone)]
struct Timed<S = ()> {
    metrics: Arc<Metrics>,
    clocks: Arc<Clocks>,
    inner: S,
}

impl Timed {
    fn new(metrics: Arc<Metrics>, clocks: Arc<Clocks>) -> Self {
        Timed {
            metrics,
            clocks,
            inner: (),
        }
    }
}

impl<S> tower::Layer<S> for Timed {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            metrics: self.metrics.clone(),
            clocks: self.clocks.clone(),
            inner,
        }
    }
}

impl<S, B, RB> tower::Service<http::Request<B>> for Timed<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: From<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri());
        let write = is_write(req.method());
        if write {
            *req.uri_mut() = with_deadline(req.uri(), WRITE_TIMEOUT);
        }
        let labels = RequestLabels { verb, resource };
        self.metrics.api_requests.get_or_create(&labels).inc();
        let sent = Instant::now();
        let response = self.inner.call(req);
        let metrics = self.metrics.clone();
        let clocks = self.clocks.clone();
        Box::pin(async move {
            let r = if write {
                match tokio::time::timeout(WRITE_TIMEOUT, response).await {
                    Ok(r) => r,
                    Err(_) => Err(S::Error::from(Box::new(WriteTimedOut))),
                }
            } else {
                response.await
            };
            if let Ok(resp) = &r {
                clocks.record(resp.headers().get(http::header::DATE), sent, Instant::now());
            }
            if labels.verb != "watch" {
                metrics
                    .api_request_seconds
                    .get_or_create(&labels)
                    .observe(sent.elapsed().as_secs_f64());
            }
            r
        })
    }
}

/// A request that changes something.
fn is_write(m: &http::Method) -> bool {
    matches!(
        *m,
        http::Method::POST | http::Method::PUT | http::Method::PATCH | http::Method::DELETE
    )
}

/// `uri` with the API server's request deadline `timeout=<secs>s` (replacing one it has).
fn with_deadline(uri: &http::Uri, d: Duration) -> http::Uri {
    let mut query: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with("timeout="))
        .collect();
    let deadline = format!("timeout={}s", d.as_secs());
    query.push(&deadline);
    let pq = format!("{}?{}", uri.path(), query.join("&"));
    let mut parts = uri.clone().into_parts();
    match pq.parse() {
        Ok(pq) => {
            parts.path_and_query = Some(pq);
            http::Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
        }
        Err(_) => uri.clone(),
    }
}

/// The API group of resource metrics (the capacity collector's PodMetrics list).
const METRICS_GROUP: &str = "metrics.k8s.io";

/// The Kubernetes verb and resource of a request.
pub fn classify(method: &http::Method, uri: &http::Uri) -> (&'static str, String) {
    let segs: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segs.as_slice() {
        ["api", _v, rest @ ..] => rest,
        ["apis", _g, _v, rest @ ..] => rest,
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _ns, r, tail @ ..] => {
            let mut v = vec![*r];
            v.extend_from_slice(tail);
            v
        }
        r => r.to_vec(),
    };
    let mut resource = match rest.as_slice() {
        [] => uri.path().to_string(),
        [r] | [r, _] => r.to_string(),
        [r, _, sub, ..] => format!("{r}/{sub}"),
    };
    // PodMetrics share the resource name `pods`: name their group, so a PodMetrics list
    // is not counted as a Pod list.
    if let ["apis", METRICS_GROUP, ..] = segs.as_slice() {
        resource = format!("{resource}.{METRICS_GROUP}");
    }
    let named = rest.len() >= 2;
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

#[cfg(test)]
mod tests {
    use tower::{Layer, Service, ServiceExt};

    use super::*;

    /// Every request is counted; all but watches are timed to their response.
    #[tokio::test]
    async fn requests_are_counted_and_timed_but_watches_only_counted() {
        let metrics = Arc::new(Metrics::new());
        let clocks = Arc::new(Clocks::new(metrics.clone(), crate::time::Span::secs(30)));
        let mut svc = Timed::new(metrics.clone(), clocks).layer(tower::service_fn(
            |_: http::Request<()>| async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(http::Response::new(()))
            },
        ));
        for uri in [
            "/api/v1/namespaces/a/pods",
            "/api/v1/namespaces/a/pods?watch=true",
        ] {
            let req = http::Request::get(uri).body(()).expect("a request");
            svc.ready()
                .await
                .expect("ready")
                .call(req)
                .await
                .expect("a response");
        }
        let text = metrics.encode();
        assert!(text.contains(r#"celld_healer_api_requests_total{verb="list",resource="pods"} 1"#));
        assert!(
            text.contains(r#"celld_healer_api_requests_total{verb="watch",resource="pods"} 1"#)
        );
        assert!(text.contains(
            r#"celld_healer_api_request_duration_seconds_count{verb="list",resource="pods"} 1"#
        ));
        // At least the 20 ms the response took.
        assert!(text.contains(
            r#"celld_healer_api_request_duration_seconds_bucket{le="0.016",verb="list",resource="pods"} 0"#
        ), "{text}");
        assert!(!text.contains(r#"celld_healer_api_request_duration_seconds_count{verb="watch""#));
    }

    /// A write carries the API server's deadline and is given up at it; a read waits.
    #[tokio::test(start_paused = true)]
    async fn writes_carry_a_deadline_and_are_given_up_at_it() {
        let metrics = Arc::new(Metrics::new());
        let clocks = Arc::new(Clocks::new(metrics.clone(), crate::time::Span::secs(30)));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let mut svc =
            Timed::new(metrics, clocks).layer(tower::service_fn(move |r: http::Request<()>| {
                log.lock().unwrap().push(r.uri().to_string());
                async {
                    // An API server that never answers.
                    std::future::pending::<()>().await;
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(http::Response::new(()))
                }
            }));
        let req = http::Request::delete("/api/v1/namespaces/a/pods/p?timeout=60s&dryRun=All")
            .body(())
            .expect("a request");
        let started = tokio::time::Instant::now();
        let e = svc
            .ready()
            .await
            .expect("ready")
            .call(req)
            .await
            .expect_err("given up");
        assert!(e.is::<WriteTimedOut>(), "{e}");
        assert_eq!(started.elapsed(), WRITE_TIMEOUT);
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            ["/api/v1/namespaces/a/pods/p?dryRun=All&timeout=10s"]
        );
        // A read is not bounded here (a watch lasts minutes).
        let req = http::Request::get("/api/v1/namespaces/a/pods?watch=true")
            .body(())
            .expect("a request");
        let read = svc.ready().await.expect("ready").call(req);
        assert!(
            tokio::time::timeout(WRITE_TIMEOUT * 3, read).await.is_err(),
            "a read was given up"
        );
        assert_eq!(
            seen.lock().unwrap()[1],
            "/api/v1/namespaces/a/pods?watch=true"
        );
    }

    fn c(m: http::Method, u: &str) -> (&'static str, String) {
        classify(&m, &u.parse().unwrap())
    }

    #[test]
    fn classifies_requests() {
        use http::Method as M;
        assert_eq!(
            c(M::GET, "/api/v1/pods?labelSelector=x"),
            ("list", "pods".into())
        );
        assert_eq!(
            c(
                M::GET,
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion=1"
            ),
            ("watch", "pods".into())
        );
        assert_eq!(
            c(
                M::PATCH,
                "/apis/apps/v1/namespaces/a/statefulsets/x?fieldManager=celld-healer"
            ),
            ("patch", "statefulsets".into())
        );
        assert_eq!(
            c(
                M::PATCH,
                "/apis/fleet.celld.dev/v1alpha1/namespaces/a/celldfleets/x/status"
            ),
            ("patch", "celldfleets/status".into())
        );
        assert_eq!(
            c(
                M::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/celld-system/leases/h"
            ),
            ("update", "leases".into())
        );
        assert_eq!(
            c(M::DELETE, "/api/v1/namespaces/a/pods/p"),
            ("delete", "pods".into())
        );
        assert_eq!(
            c(
                M::GET,
                "/apis/metrics.k8s.io/v1beta1/namespaces/a/pods?labelSelector=x"
            ),
            ("list", "pods.metrics.k8s.io".into())
        );
        assert_eq!(
            c(M::POST, "/apis/events.k8s.io/v1/namespaces/a/events"),
            ("create", "events".into())
        );
    }
}
