//! Who may read `/metrics` with `--metrics-auth kubernetes`: the caller's bearer token
//! is authenticated by the API server (TokenReview), and its user must be allowed to
//! `get` the non-resource URL [`METRICS_PATH`] (SubjectAccessReview), as kube-rbac-proxy
//! and controller-runtime do. The listener then speaks HTTPS with a certificate made at
//! start ([`tls_acceptor`]), so the token never crosses the network in clear.
//!
//! Decisions are cached per token (by its SHA-256, never the token itself): an allowed
//! token for [`CACHE_TTL`], so a scrape every 30 s costs the API server two reviews a
//! minute per scraper; a refusal for [`REFUSAL_TTL`], in a cache of its own. A review
//! that could not be made (the API server unreachable) answers 503 and is not cached. At most [`REVIEWS_IN_FLIGHT`] reviews run at
//! once; beyond that, 429.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use celld_api::healer_flags::METRICS_PATH;
use hyper::StatusCode;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tracing::warn;

/// How long a token found allowed stays allowed.
pub const CACHE_TTL: Duration = Duration::from_secs(60);

/// How long a refusal holds (a binding just created is honoured within it).
pub const REFUSAL_TTL: Duration = Duration::from_secs(30);

/// At most this many tokens are remembered per cache (each is emptied when full). The
/// refusals have a cache of their own, so a flood of made-up tokens never evicts the
/// decisions of real scrapers.
const CACHE_MAX: usize = 1024;

/// At most this many reviews in flight: a flood of made-up tokens gets 429s instead of
/// turning into TokenReviews that would queue beside the healer's own requests (its
/// Lease renewals) at the API server.
const REVIEWS_IN_FLIGHT: usize = 4;

/// Why a request for `/metrics` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No `Authorization: Bearer <token>` header.
    #[error("401: send a bearer token (Authorization: Bearer <token>)")]
    NoToken,
    /// The API server does not know the token.
    #[error("401: the API server did not authenticate this token")]
    Unauthenticated,
    /// The token's user may not `get` `/metrics`.
    #[error(
        "403: {user} may not get {METRICS_PATH}: bind it a ClusterRole allowing `get` on the nonResourceURL {METRICS_PATH}"
    )]
    Forbidden {
        /// The authenticated user.
        user: String,
    },
    /// A review failed: nothing is decided.
    #[error("503: could not review the token with the API server: {0}")]
    Unavailable(String),
    /// Too many reviews in flight.
    #[error("429: too many tokens under review; try again")]
    Busy,
}

impl Refusal {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::NoToken | Refusal::Unauthenticated => StatusCode::UNAUTHORIZED,
            Refusal::Forbidden { .. } => StatusCode::FORBIDDEN,
            Refusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::Busy => StatusCode::TOO_MANY_REQUESTS,
        }
    }
}

/// The bearer token of an `Authorization` header value, if it is one.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Decisions by token hash, with when each was made.
type Cache<T> = Mutex<HashMap<[u8; 32], (Instant, T)>>;

/// Reviews tokens with the API server and remembers the decisions.
pub struct Authorizer {
    client: Client,
    allowed: Cache<()>,
    refused: Cache<Refusal>,
    reviews: tokio::sync::Semaphore,
}

fn remember<T>(cache: &Cache<T>, key: [u8; 32], value: T) {
    let mut c = cache.lock().expect("metrics auth cache");
    if c.len() >= CACHE_MAX {
        c.clear();
    }
    c.insert(key, (Instant::now(), value));
}

fn recall<T: Clone>(cache: &Cache<T>, key: &[u8; 32], ttl: Duration) -> Option<T> {
    let c = cache.lock().expect("metrics auth cache");
    let (at, v) = c.get(key)?;
    (at.elapsed() < ttl).then(|| v.clone())
}

impl Authorizer {
    /// An authorizer asking the API server `client` talks to.
    pub fn new(client: Client) -> Arc<Authorizer> {
        Arc::new(Authorizer {
            client,
            allowed: Mutex::default(),
            refused: Mutex::default(),
            reviews: tokio::sync::Semaphore::new(REVIEWS_IN_FLIGHT),
        })
    }

    /// Whether the holder of the `Authorization` header `header` may read `/metrics`.
    pub async fn check(&self, header: Option<&str>) -> Result<(), Refusal> {
        let token = bearer(header).ok_or(Refusal::NoToken)?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if recall(&self.allowed, &key, CACHE_TTL).is_some() {
            return Ok(());
        }
        if let Some(r) = recall(&self.refused, &key, REFUSAL_TTL) {
            return Err(r);
        }
        let Ok(_permit) = self.reviews.try_acquire() else {
            return Err(Refusal::Busy);
        };
        let decision = self.review(token).await;
        match &decision {
            Ok(()) => remember(&self.allowed, key, ()),
            Err(Refusal::Unavailable(_) | Refusal::Busy) => {}
            Err(r) => remember(&self.refused, key, r.clone()),
        }
        decision
    }

    async fn review(&self, token: &str) -> Result<(), Refusal> {
        let unavailable = |e: kube::Error| {
            warn!(error = %e, "could not review a /metrics token");
            Refusal::Unavailable(e.to_string())
        };
        let tr = Api::<TokenReview>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &TokenReview {
                    spec: TokenReviewSpec {
                        token: token.to_string(),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .map_err(unavailable)?;
        let status = tr.status.unwrap_or_default();
        // Not authenticated is a refusal whatever `status.error` says: the API server
        // sets it for a plain unknown token too.
        if status.authenticated != Some(true) {
            return Err(Refusal::Unauthenticated);
        }
        let user = status.user.unwrap_or_default();
        let name = user.username.clone().unwrap_or_default();
        let sar = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: user.username,
                        groups: user.groups,
                        uid: user.uid,
                        extra: user.extra,
                        non_resource_attributes: Some(NonResourceAttributes {
                            path: Some(METRICS_PATH.to_string()),
                            verb: Some("get".to_string()),
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .map_err(unavailable)?;
        // Denied is denied, `evaluationError` or not: RBAC reports a binding to a missing
        // role there, which is common and decides nothing for this user.
        if sar.status.is_some_and(|s| s.allowed) {
            Ok(())
        } else {
            Err(Refusal::Forbidden { user: name })
        }
    }
}

/// A TLS acceptor with a self-signed certificate made now (for `localhost` and this
/// host's name). Scrapers skip its verification (`insecureSkipVerify`, as for
/// kube-rbac-proxy's own certificate): the point is that the token is not sent in clear.
pub fn tls_acceptor() -> Result<tokio_rustls::TlsAcceptor> {
    let mut names = vec!["localhost".to_string()];
    if let Ok(host) = std::env::var("HOSTNAME")
        && !host.is_empty()
    {
        names.push(host);
    }
    let certified =
        rcgen::generate_simple_self_signed(names).context("making the metrics certificate")?;
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS protocol versions")?
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .context("the metrics certificate")?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_header_carries_a_token() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("Bearer")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn refusals_answer_401_403_or_503() {
        assert_eq!(Refusal::NoToken.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(Refusal::Unauthenticated.status(), StatusCode::UNAUTHORIZED);
        let f = Refusal::Forbidden { user: "u".into() };
        assert_eq!(f.status(), StatusCode::FORBIDDEN);
        assert!(f.to_string().contains("nonResourceURL /metrics"), "{f}");
        assert_eq!(
            Refusal::Unavailable("x".into()).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(Refusal::Busy.status(), StatusCode::TOO_MANY_REQUESTS);
    }

    /// Made-up tokens fill the refusals' cache only: a real scraper's decision stays.
    #[test]
    fn a_flood_of_refusals_never_evicts_an_allowed_token() {
        let (allowed, refused): (Cache<()>, Cache<Refusal>) = Default::default();
        remember(&allowed, [0; 32], ());
        for i in 0..(CACHE_MAX * 3) {
            let mut key = [1; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            remember(&refused, key, Refusal::Unauthenticated);
            assert!(refused.lock().unwrap().len() <= CACHE_MAX);
        }
        assert!(recall(&allowed, &[0; 32], CACHE_TTL).is_some());
        assert!(
            recall(&allowed, &[0; 32], Duration::ZERO).is_none(),
            "expired"
        );
    }

    #[test]
    fn a_certificate_is_made_at_start() {
        assert!(tls_acceptor().is_ok());
    }
}
