//! A typed Gateway API `HTTPRoute` (`gateway.networking.k8s.io/v1`), covering the fields
//! the generator writes. Unknown fields are refused, so a misspelt key in the template
//! fails the parse-back check instead of being dropped by the API server.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// `apiVersion` of the HTTPRoute we render.
pub const API_VERSION: &str = "gateway.networking.k8s.io/v1";
/// `kind` of the HTTPRoute.
pub const KIND: &str = "HTTPRoute";

/// An HTTPRoute.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRoute {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// Name, namespace, labels.
    pub metadata: ObjectMeta,
    /// The route.
    pub spec: HttpRouteSpec,
}

/// `spec` of an HTTPRoute.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRouteSpec {
    /// The Gateways (listeners) the route attaches to.
    pub parent_refs: Vec<ParentReference>,
    /// Host names the route matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostnames: Option<Vec<String>>,
    /// Matching rules and their backends.
    pub rules: Vec<HttpRouteRule>,
}

/// A reference to a parent Gateway.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParentReference {
    /// API group of the parent (`gateway.networking.k8s.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the parent (`Gateway`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the parent.
    pub name: String,
    /// Listener name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// Listener port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// One rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRouteRule {
    /// Request matches (any of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<HttpRouteMatch>>,
    /// Where matching requests go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_refs: Option<Vec<HttpBackendRef>>,
}

/// A request match.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRouteMatch {
    /// Path match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPathMatch>,
}

/// A path match.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpPathMatch {
    /// `Exact`, `PathPrefix` or `RegularExpression`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The path.
    pub value: String,
}

/// A backend.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpBackendRef {
    /// API group of the backend (`""` for a Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the backend.
    pub name: String,
    /// Namespace of the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Port of the Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Relative weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}
