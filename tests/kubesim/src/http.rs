//! A minimal HTTP/1.1 server and client on hyper, shared by the control API, the stub's
//! listeners, the readiness prober and the test helpers.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;

pub type Body = Full<Bytes>;
pub type Resp = Response<Body>;

/// Largest request or response body read, as celld's operator client does (1 MiB).
pub const MAX_BODY: usize = 1 << 20;

/// A request as the handlers see it: method, path split into segments, query, body.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub body: Bytes,
}

impl Req {
    /// Path segments without empty ones: `/a/b/` -> `["a", "b"]`.
    pub fn segments(&self) -> Vec<&str> {
        self.path.split('/').filter(|s| !s.is_empty()).collect()
    }

    /// Value of a query parameter (no percent-decoding; our parameters are plain).
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query.as_deref().and_then(|q| {
            q.split('&').find_map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k == key).then_some(v)
            })
        })
    }

    /// The body as JSON (an empty body reads as `{}`); the error is a 400 response.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Box<Resp>> {
        let bytes: &[u8] = if self.body.is_empty() {
            b"{}"
        } else {
            &self.body
        };
        serde_json::from_slice(bytes).map_err(|e| {
            Box::new(error(
                StatusCode::BAD_REQUEST,
                &format!("invalid JSON body: {e}"),
            ))
        })
    }
}

pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Resp {
    let body = serde_json::to_vec(value).expect("serializable");
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(body.into()))
        .expect("valid response")
}

pub fn raw(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .expect("valid response")
}

pub fn error(status: StatusCode, message: &str) -> Resp {
    json(status, &serde_json::json!({ "error": message }))
}

/// Serves `handler` on `listener` until `shutdown` resolves. The connections are polled
/// inside this future, not spawned: when it returns or is dropped, the listener and every
/// open connection are closed right then, as when a process exits (a stub served inside
/// kubesim must not accept or answer, even on a kept-alive connection, once its
/// container is dead).
pub async fn serve<H, Fut, S>(listener: TcpListener, handler: H, shutdown: S)
where
    H: Fn(Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Resp> + Send + 'static,
    S: Future<Output = ()>,
{
    use futures::StreamExt;
    let handler = Arc::new(handler);
    let mut connections = futures::stream::FuturesUnordered::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            Some(()) = connections.next(), if !connections.is_empty() => continue,
            _ = &mut shutdown => return,
        };
        let (stream, _) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        connections.push(connection(stream, handler.clone()));
    }
}

/// One HTTP/1.1 connection (kept alive) of [`serve`].
async fn connection<H, Fut>(stream: tokio::net::TcpStream, handler: Arc<H>)
where
    H: Fn(Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Resp> + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let handler = handler.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = match Limited::new(body, MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return Ok::<_, Infallible>(error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "body too large or unreadable",
                    ));
                }
            };
            let req = Req {
                method: parts.method,
                path: parts.uri.path().to_string(),
                query: parts.uri.query().map(str::to_string),
                body,
            };
            Ok::<_, Infallible>(handler(req).await)
        }
    });
    let _ = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Binds a listener, with a clear error naming the address.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))
}

/// A small HTTP client. Connections are not pooled: every call dials anew, as a kubelet
/// probe does, so a killed process never answers through a stale connection.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Body>,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self::new()
    }
}

/// Response of [`HttpClient`]: status and body bytes.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: StatusCode,
    pub body: Bytes,
}

impl HttpResponse {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body)
            .with_context(|| format!("decoding JSON response: {}", self.text()))
    }

    /// Fails unless the status is 2xx, quoting the body.
    pub fn ok(self) -> Result<Self> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(anyhow!("HTTP {}: {}", self.status, self.text()))
        }
    }
}

impl HttpClient {
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        connector.set_nodelay(true);
        let inner = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);
        Self { inner }
    }

    /// Sends one request; `timeout` bounds the whole exchange including the body.
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<HttpResponse> {
        let mut builder = Request::builder().method(method.clone()).uri(url);
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let req = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .with_context(|| format!("building request {method} {url}"))?;
        let fut = async {
            let resp = self.inner.request(req).await?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| anyhow!("reading body: {e}"))?
                .to_bytes();
            Ok::<_, anyhow::Error>(HttpResponse { status, body })
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r.with_context(|| format!("{method} {url}")),
            Err(_) => Err(anyhow!("{method} {url}: timed out after {timeout:?}")),
        }
    }

    pub async fn get(&self, url: &str, timeout: Duration) -> Result<HttpResponse> {
        self.request(Method::GET, url, None, timeout).await
    }

    pub async fn send_json<T: Serialize>(
        &self,
        method: Method,
        url: &str,
        body: &T,
        timeout: Duration,
    ) -> Result<HttpResponse> {
        let bytes = serde_json::to_vec(body)?;
        self.request(method, url, Some(bytes), timeout).await
    }
}
