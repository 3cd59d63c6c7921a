//! One fleet's claims, read fresh without reading every claim of the namespace.
//!
//! A fleet's claims are those carrying its identity and those at its member names
//! whatever their labels (another fleet's disk in the way, a claim made by hand;
//! [`super::concerns`]). The second kind can be found only by name, and no selector
//! matches a name pattern. Listing the namespace's claims whole made each confirmation
//! cost as much as the namespace: every claim with its `managedFields`, 3,000 claims for
//! 1,000 fleets of 3 in one namespace, decoded for each write. So, at once:
//! - the namespace's claim *names*, as a server-side Table without objects (a few short
//!   cells per claim);
//! - the claims carrying the identity (a label selector);
//!
//! then each claim at a member name that the label did not bring (normally none): by
//! name when there are at most [`BY_NAME_AT_MOST`], else the namespace's claims in one
//! list, so that a namespace full of unlabelled claims at member names (made by hand, or
//! by someone trying) costs one request more, never one per claim. Nothing the whole
//! list would have shown at that moment is missed: every name is there, and each claim
//! read afterwards is at least as new as the names.

use std::collections::HashSet;

use celld_api::labels::{IDENTITY, claim_ordinal};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::ListParams;
use kube::{Api, Client};
use serde::Deserialize;

use super::by_name;

/// The part of a `meta.k8s.io/v1` Table read here.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Table {
    column_definitions: Vec<Column>,
    /// Absent or null when the namespace has no claims.
    #[serde(default)]
    rows: Option<Vec<Row>>,
}

#[derive(Deserialize)]
struct Column {
    name: String,
}

#[derive(Deserialize)]
struct Row {
    cells: Vec<serde_json::Value>,
}

/// What the API server sends for a Table of claims is not one (nothing is acted on).
fn malformed(why: String) -> kube::Error {
    kube::Error::SerdeError(<serde_json::Error as serde::de::Error>::custom(format!(
        "the claim names Table: {why}"
    )))
}

/// The claim names of a Table, from its `Name` column.
fn names(t: Table) -> Result<Vec<String>, kube::Error> {
    let col = t
        .column_definitions
        .iter()
        .position(|c| c.name == "Name")
        .ok_or_else(|| malformed("no Name column".into()))?;
    t.rows
        .unwrap_or_default()
        .into_iter()
        .map(|r| match r.cells.into_iter().nth(col) {
            Some(serde_json::Value::String(n)) => Ok(n),
            other => Err(malformed(format!("a row's name is {other:?}"))),
        })
        .collect()
}

/// Every claim name in namespace `ns` (consistent read, no objects).
async fn all_names(client: &Client, ns: &str) -> Result<Vec<String>, kube::Error> {
    let api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
    let mut req = kube::core::Request::new(api.resource_url())
        .list(&ListParams::default())
        .map_err(kube::Error::BuildRequest)?;
    // `includeObject=None`: the rows carry their cells only.
    let sep = if req.uri().query().is_some() {
        '&'
    } else {
        '?'
    };
    let uri = format!("{}{sep}includeObject=None", req.uri());
    *req.uri_mut() = uri
        .parse()
        .map_err(|e: http::uri::InvalidUri| malformed(e.to_string()))?;
    req.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static("application/json;as=Table;v=v1;g=meta.k8s.io"),
    );
    names(client.request::<Table>(req).await?)
}

/// The claims of the fleets `fleets` (name, identity) of namespace `ns`, as
/// [`super::concerns`] defines them for each, read from the API server: the claims
/// carrying any of the identities (one set-based selector), then the claims at their
/// member names that the label did not bring. Each fleet's own are those it
/// `concerns`; a fleet read alone gets exactly what this read of several gives it.
pub(super) async fn read(
    client: &Client,
    ns: &str,
    fleets: &[(&str, &str)],
) -> Result<Vec<PersistentVolumeClaim>, kube::Error> {
    let labelled =
        ListParams::default().labels(&super::one_of(IDENTITY, fleets.iter().map(|f| f.1)));
    let (all, labelled) = futures::try_join!(
        all_names(client, ns),
        super::lean::namespaced::<PersistentVolumeClaim>(client, ns, &labelled)
    )?;
    let mut claims = labelled.items;
    let found: HashSet<String> = claims
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let missing: HashSet<&String> = all
        .iter()
        .filter(|n| {
            !found.contains(*n)
                && fleets
                    .iter()
                    .any(|(name, _)| claim_ordinal(name, n).is_some())
        })
        .collect();
    if missing.len() > BY_NAME_AT_MOST {
        let every =
            super::lean::namespaced::<PersistentVolumeClaim>(client, ns, &ListParams::default())
                .await?;
        claims.extend(every.items.into_iter().filter(|c| {
            c.metadata
                .name
                .as_ref()
                .is_some_and(|n| missing.contains(n))
        }));
        return Ok(claims);
    }
    let by_names: Vec<ListParams> = missing.iter().map(|n| by_name(n)).collect();
    let more = futures::future::try_join_all(
        by_names
            .iter()
            .map(|lp| super::lean::namespaced::<PersistentVolumeClaim>(client, ns, lp)),
    )
    .await?;
    claims.extend(more.into_iter().flat_map(|l| l.items));
    Ok(claims)
}

/// Most unlabelled claims at member names read one by one; more are read in one list of
/// the namespace.
pub(super) const BY_NAME_AT_MOST: usize = 2;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The Table the API server sends for `kubectl get pvc` without objects.
    #[test]
    fn the_names_come_from_the_name_column() {
        let t: Table = serde_json::from_value(json!({
            "kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "columnDefinitions": [
                {"name": "Name", "type": "string", "format": "name"},
                {"name": "Status", "type": "string", "format": ""}
            ],
            "rows": [{"cells": ["data-alpha-0", "Bound"]}, {"cells": ["other", "Pending"]}]
        }))
        .expect("a Table");
        assert_eq!(names(t).expect("names"), ["data-alpha-0", "other"]);
        let empty: Table = serde_json::from_value(json!({"columnDefinitions": [{"name": "Name"}]}))
            .expect("an empty Table");
        assert!(names(empty).expect("no names").is_empty());
        let null: Table =
            serde_json::from_value(json!({"columnDefinitions": [{"name": "Name"}], "rows": null}))
                .expect("a Table without rows");
        assert!(names(null).expect("no names").is_empty());
    }

    /// A Table that does not name every claim is refused, never read as fewer claims.
    #[test]
    fn a_table_without_every_name_is_an_error() {
        let no_column: Table = serde_json::from_value(json!({
            "columnDefinitions": [{"name": "Status"}], "rows": [{"cells": ["Bound"]}]
        }))
        .expect("a Table");
        assert!(names(no_column).is_err());
        let short_row: Table = serde_json::from_value(json!({
            "columnDefinitions": [{"name": "Status"}, {"name": "Name"}], "rows": [{"cells": ["Bound"]}]
        }))
        .expect("a Table");
        assert!(names(short_row).is_err());
    }
}
