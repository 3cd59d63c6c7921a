//! `/metrics`, `/healthz` and `/readyz` on one small HTTP/1 listener.
//!
//! - `/healthz`: 200 while the process serves requests (a liveness probe).
//! - `/readyz`: 200 once every watch has listed its objects (both replicas, leader or
//!   not, become ready: the standby keeps its caches warm); 503 before that and while
//!   shutting down, with the reason in the body.
//! - `/metrics`: the Prometheus/OpenMetrics text exposition of [`super::metrics`]; with
//!   `--metrics-auth kubernetes`, over HTTPS and only to a reader the API server
//!   authenticates and authorizes ([`super::metrics_auth`]). The probes stay open.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tracing::{debug, info};

use super::metrics::Metrics;
use super::metrics_auth::{Authorizer, tls_acceptor};
use celld_api::healer_flags::METRICS_PATH;

/// Connections served at once (Prometheus, the kubelet's probes, a person with curl).
const MAX_CONNECTIONS: usize = 64;

/// How long a client has for its TLS handshake and for each request's headers.
const CLIENT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// What `/readyz` reports.
#[derive(Default)]
pub struct Health {
    synced: AtomicBool,
    shutting_down: AtomicBool,
}

impl Health {
    /// Every watch has listed its objects once.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// A signal arrived.
    pub fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Whether every watch has listed its objects once.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn ready(&self) -> Result<(), &'static str> {
        if self.shutting_down.load(Ordering::SeqCst) {
            Err("shutting down\n")
        } else if !self.synced() {
            Err("watch caches not synced yet\n")
        } else {
            Ok(())
        }
    }
}

/// Serves until the task is aborted: plain HTTP, or HTTPS with `/metrics` behind `auth`.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    auth: Option<Arc<Authorizer>>,
) -> Result<()> {
    let tls = auth.as_ref().map(|_| tls_acceptor()).transpose()?;
    // A slow or idle client cannot hold the listener the probes share: a bounded number
    // of connections, each with a deadline for its handshake and its request headers.
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics listener on {addr}"))?;
    info!(addr = %listener.local_addr()?, tls = tls.is_some(), "serving /metrics, /healthz, /readyz");
    loop {
        let (stream, _) = listener.accept().await?;
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            debug!("metrics listener full: connection dropped");
            continue;
        };
        let (metrics, health, auth, tls) =
            (metrics.clone(), health.clone(), auth.clone(), tls.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req: Request<Incoming>| {
                let (metrics, health, auth) = (metrics.clone(), health.clone(), auth.clone());
                async move { Ok::<_, Infallible>(answer(req, &metrics, &health, auth.as_deref()).await) }
            });
            let mut http = http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(CLIENT_DEADLINE);
            let served = match tls {
                None => http.serve_connection(TokioIo::new(stream), svc).await,
                Some(tls) => {
                    match tokio::time::timeout(CLIENT_DEADLINE, tls.accept(stream)).await {
                        Ok(Ok(s)) => http.serve_connection(TokioIo::new(s), svc).await,
                        Ok(Err(e)) => {
                            debug!(error = %e, "metrics TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            debug!("metrics TLS handshake timed out");
                            return;
                        }
                    }
                }
            };
            if let Err(e) = served {
                debug!(error = %e, "metrics connection ended");
            }
        });
    }
}

/// `/metrics` behind `auth` (when set); everything else as [`route`] answers it.
async fn answer(
    req: Request<Incoming>,
    metrics: &Metrics,
    health: &Health,
    auth: Option<&Authorizer>,
) -> Response<Full<Bytes>> {
    if let Some(auth) = auth
        && req.method() == hyper::Method::GET
        && req.uri().path() == METRICS_PATH
    {
        let header = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if let Err(refusal) = auth.check(header).await {
            debug!(%refusal, "refused a /metrics request");
            let mut r = text(
                refusal.status(),
                "text/plain; charset=utf-8",
                format!("{refusal}\n"),
            );
            if refusal.status() == StatusCode::UNAUTHORIZED {
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer"),
                );
            }
            return r;
        }
    }
    route(&req, metrics, health)
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a static response is valid")
}

fn route(req: &Request<Incoming>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != hyper::Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "GET only\n".into());
    }
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, PLAIN, "ok\n".into()),
        "/readyz" => match health.ready() {
            Ok(()) => text(StatusCode::OK, PLAIN, "ok\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, why.into()),
        },
        "/metrics" => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            PLAIN,
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}
