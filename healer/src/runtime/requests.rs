//! The Kubernetes client, with every request counted by verb and resource
//! (`celld_healer_api_requests_total`), so the healer's own API load is measurable.

use std::sync::Arc;

use anyhow::Result;
use kube::Client;
use kube::client::ClientBuilder;

use super::metrics::{Metrics, RequestLabels};

/// Builds a client from the in-cluster configuration or `KUBECONFIG`, counting requests.
pub async fn client(metrics: Arc<Metrics>) -> Result<Client> {
    let config = kube::Config::infer().await?;
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        let (verb, resource) = classify(req.method(), req.uri());
        metrics
            .api_requests
            .get_or_create(&RequestLabels { verb, resource })
            .inc();
        req
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
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
    use super::*;

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
