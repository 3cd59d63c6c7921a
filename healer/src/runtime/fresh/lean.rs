//! Fresh lists decoded without their objects' `metadata.managedFields`.
//!
//! A fresh read decodes whole objects, and much of each is its managed fields: a member
//! Pod of the tests' clusters is 9.4 KB of JSON, 4.3 KB of it `managedFields`, whose
//! `fieldsV1` k8s-openapi decodes into a `serde_json::Value` tree of maps. The healer
//! never reads them (every write names its own fields). A heap profile at 200 fleets put
//! 17.6 MB of the healer's 49 MB peak in decoding them, inside one shared fresh read.
//!
//! The list's text goes through [`crate::lean_json::without_managed_fields`] before it
//! is decoded, so each object is the one a whole decode gives with every ObjectMeta's
//! `managed_fields` set to `None`; text that scan cannot follow is decoded as it came,
//! and the decoder reports it as it would have. The kinds passed are namespaced with
//! `Some(namespace)` and cluster-scoped with `None`, as `Api::namespaced` and `Api::all`
//! would build them (checked by the kind's scope); metadata-only lists
//! (`PartialObjectMeta`) still go through `Api`. `cargo bench -p celld-healer --bench fresh_decode` compares the
//! two decodes of a shared read's Pods.

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{ListParams, ObjectList};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::lean_json::without_managed_fields;

/// Lists namespaced `K` in `namespace`, as `Api::namespaced(..).list` does.
pub(super) async fn namespaced<K>(
    client: &Client,
    namespace: &str,
    params: &ListParams,
) -> Result<ObjectList<K>, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope> + DeserializeOwned + Clone,
    K::DynamicType: Default,
{
    list(client, Some(namespace), params).await
}

/// Lists cluster-scoped `K`, as `Api::all(..).list` does.
pub(super) async fn cluster<K>(
    client: &Client,
    params: &ListParams,
) -> Result<ObjectList<K>, kube::Error>
where
    K: Resource<Scope = ClusterResourceScope> + DeserializeOwned + Clone,
    K::DynamicType: Default,
{
    list(client, None, params).await
}

/// The same request `Api::list` sends (counted as a `list`), decoded without managed
/// fields.
async fn list<K>(
    client: &Client,
    namespace: Option<&str>,
    params: &ListParams,
) -> Result<ObjectList<K>, kube::Error>
where
    K: Resource + DeserializeOwned + Clone,
    K::DynamicType: Default,
{
    let url = K::url_path(&K::DynamicType::default(), namespace);
    let mut req = kube::core::Request::new(url)
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("list");
    let text = client.request_text(req).await?;
    serde_json::from_str(&without_managed_fields(&text)).map_err(kube::Error::SerdeError)
}
