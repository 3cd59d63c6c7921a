//! The healer's access to each namespace it serves with `--watch-namespace`.
//!
//! There its rights come from one RoleBinding, [`ACCESS_BINDING`], to the install's served
//! ClusterRole: a ClusterRole, so that the binding is the only namespaced object they
//! depend on. A namespace deletion deletes that binding with everything else, while a
//! protected fleet and its disks stay (the admission policies refuse their deletion).
//! The way out, protection off and then the healer deleting the fleet's workload and
//! disks in order, needs the healer's rights until the last fleet is gone. So while any
//! CelldFleet lives in a served namespace, the leader keeps the finalizer
//! [`ACCESS_FINALIZER`] on the binding there, and removes it once none is left,
//! confirmed by a fresh list. A binding removed from Git while fleets remain waits for
//! them the same way.
//!
//! Watching every namespace, the rights come from a ClusterRoleBinding that no namespace
//! deletion touches, and nothing here runs.
//!
//! Not a rule of `decide`: the finalizer destroys nothing and protects nothing of a
//! fleet; it only keeps the healer able to finish what the rules decide.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use celld_api::CelldFleet;
use celld_api::labels::HEALER_FIELD_MANAGER;
use celld_api::rbac::{ACCESS_BINDING, ACCESS_FINALIZER};
use futures::StreamExt;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{info, warn};

use super::leader::Gate;
use super::served::Served;
use super::unreadable::Unreadable;

/// How soon a failed write, or a leader not yet allowed to act, looks again.
const RETRY: Duration = Duration::from_secs(5);

/// What the binding of a namespace needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A fleet lives in the namespace and the binding does not hold it yet.
    Add,
    /// No fleet is left and the binding still holds.
    Remove,
}

/// The change `binding` needs while fleets do (`fleets`) or do not live in its
/// namespace. A binding already being deleted cannot gain a finalizer (the API server
/// refuses new ones), so it is left as it is until its fleets are gone.
pub fn change(binding: &ObjectMeta, fleets: bool) -> Option<Change> {
    let holds = binding
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == ACCESS_FINALIZER);
    match (fleets, holds) {
        (true, false) if binding.deletion_timestamp.is_none() => Some(Change::Add),
        (false, true) => Some(Change::Remove),
        _ => None,
    }
}

/// The binding's finalizers after `change`, the others kept in their order.
pub fn finalizers_after(binding: &ObjectMeta, change: Change) -> Vec<String> {
    let mut fins: Vec<String> = binding.finalizers.clone().unwrap_or_default();
    match change {
        Change::Add => fins.push(ACCESS_FINALIZER.to_string()),
        Change::Remove => fins.retain(|f| f != ACCESS_FINALIZER),
    }
    fins
}

/// Keeps the finalizer on the healer's RoleBinding in each served namespace.
struct Access {
    client: Client,
    bindings: BTreeMap<String, Store<PartialObjectMeta<RoleBinding>>>,
    fleets: Store<CelldFleet>,
    unreadable: Arc<Unreadable>,
    gate: Gate,
    wake: Arc<Notify>,
}

/// Starts watching the healer's RoleBinding in each served namespace and keeping its
/// finalizer; `wake` is notified on every change of the fleet cache. Nothing when every
/// namespace is served.
pub(super) fn start(
    client: &Client,
    served: &Served,
    fleets: Store<CelldFleet>,
    unreadable: Arc<Unreadable>,
    gate: Gate,
    wake: Arc<Notify>,
) {
    let Served::Only(namespaces) = served else {
        return;
    };
    let mut bindings = BTreeMap::new();
    let mut streams = Vec::new();
    for ns in namespaces {
        let (store, writer) = reflector::store();
        // One object, by name: the install grants list and watch on it alone.
        let config = watcher::Config::default().fields(&format!("metadata.name={ACCESS_BINDING}"));
        let (wake, namespace, logged) = (wake.clone(), ns.clone(), ns.clone());
        streams.push(
            watcher(
                Api::<PartialObjectMeta<RoleBinding>>::namespaced(client.clone(), ns),
                config,
            )
                .default_backoff()
                .reflect(writer)
                // Forbidden: the healer's rights here do not come from the access binding
                // (a cluster-wide role, or the binding is gone with its namespace). Then
                // there is nothing to keep, and retrying would send a request a second.
                .take_while(move |ev| {
                    let go_on = !ev.as_ref().is_err_and(forbidden);
                    if !go_on {
                        info!(namespace = %namespace, "the healer may not read its RoleBinding here: its rights do not come from it, so its access finalizer is not kept in this namespace");
                    }
                    std::future::ready(go_on)
                })
                .map(move |ev| match ev {
                    Ok(_) => wake.notify_one(),
                    Err(e) => warn!(
                        namespace = %logged,
                        error = %e,
                        "watch of the healer's RoleBinding failed: its finalizer is not kept up to date until it recovers"
                    ),
                })
                .boxed(),
        );
        bindings.insert(ns.clone(), store);
    }
    tokio::spawn(futures::stream::select_all(streams).for_each(|()| std::future::ready(())));
    tokio::spawn(
        Access {
            client: client.clone(),
            bindings,
            fleets,
            unreadable,
            gate,
            wake,
        }
        .run(),
    );
}

/// Whether a watch error is the API server's 403: not permitted at all, not a passing
/// failure.
fn forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

impl Access {
    async fn run(self) {
        let mut leading = self.gate.subscribe();
        loop {
            let mut again = None;
            if self.gate.may_act() {
                let lived = self.namespaces_with_fleets();
                for ns in self.bindings.keys() {
                    if let Err(e) = self.keep(ns, lived.contains(ns.as_str())).await {
                        warn!(namespace = %ns, error = %e, "could not keep the healer's access finalizer on its RoleBinding; trying again");
                        again = Some(RETRY);
                    }
                }
            } else if *leading.borrow() {
                // Leading, but not yet allowed to write: look again soon.
                again = Some(RETRY);
            }
            tokio::select! {
                () = self.wake.notified() => {}
                r = leading.changed() => {
                    if r.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep(again.unwrap_or(RETRY)), if again.is_some() => {}
            }
        }
    }

    /// The namespaces where the caches hold a CelldFleet, readable or not (one pass over
    /// the fleet cache per wake, whatever the number of namespaces).
    fn namespaces_with_fleets(&self) -> BTreeSet<String> {
        self.fleets
            .state()
            .iter()
            .filter_map(|f| f.metadata.namespace.clone())
            .chain(self.unreadable.entries().into_iter().map(|e| e.namespace))
            .collect()
    }

    /// Keeps the finalizer of the binding in `ns`, where fleets do (`fleets`) or do not
    /// live by the caches.
    async fn keep(&self, ns: &str, fleets: bool) -> Result<(), kube::Error> {
        let Some(binding) = self
            .bindings
            .get(ns)
            .and_then(|s| s.state().into_iter().next())
        else {
            return Ok(());
        };
        let Some(change) = change(&binding.metadata, fleets) else {
            return Ok(());
        };
        if change == Change::Remove {
            // On fresh facts: a fleet the cache has not listed yet (at start, say) keeps
            // the binding.
            let live = Api::<CelldFleet>::namespaced(self.client.clone(), ns)
                .list_metadata(&ListParams::default().limit(1))
                .await?;
            if !live.items.is_empty() {
                return Ok(());
            }
        }
        let m = &binding.metadata;
        let patch = super::act::json_patch(json!([
            {"op": "test", "path": "/metadata/uid", "value": m.uid},
            {"op": "test", "path": "/metadata/resourceVersion", "value": m.resource_version},
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers_after(m, change)},
        ]));
        let pp = PatchParams {
            field_manager: Some(HEALER_FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        match Api::<RoleBinding>::namespaced(self.client.clone(), ns)
            .patch(ACCESS_BINDING, &pp, &patch)
            .await
        {
            Ok(_) => {
                info!(namespace = %ns, ?change, finalizer = ACCESS_FINALIZER, "the healer's RoleBinding: finalizer {}", if change == Change::Add { "added (a fleet lives here)" } else { "removed (no fleet is left)" });
                Ok(())
            }
            // Changed or gone since the watch showed it: the watch brings the new state.
            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn binding(finalizers: &[&str], deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some(ACCESS_BINDING.into()),
            finalizers: (!finalizers.is_empty())
                .then(|| finalizers.iter().map(|f| f.to_string()).collect()),
            deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn held_while_a_fleet_lives_in_the_namespace() {
        assert_eq!(change(&binding(&[], false), true), Some(Change::Add));
        assert_eq!(change(&binding(&[ACCESS_FINALIZER], false), true), None);
        // Being deleted (the namespace goes) with fleets left: held as it is.
        assert_eq!(change(&binding(&[ACCESS_FINALIZER], true), true), None);
        // Too late to add one: the API server refuses new finalizers then.
        assert_eq!(change(&binding(&[], true), true), None);
    }

    #[test]
    fn released_once_no_fleet_is_left() {
        assert_eq!(
            change(&binding(&[ACCESS_FINALIZER], true), false),
            Some(Change::Remove)
        );
        assert_eq!(
            change(&binding(&[ACCESS_FINALIZER], false), false),
            Some(Change::Remove)
        );
        assert_eq!(change(&binding(&[], false), false), None);
    }

    #[test]
    fn other_finalizers_are_kept() {
        let b = binding(&["example.com/keep", ACCESS_FINALIZER], false);
        assert_eq!(finalizers_after(&b, Change::Remove), ["example.com/keep"]);
        let b = binding(&["example.com/keep"], false);
        assert_eq!(
            finalizers_after(&b, Change::Add),
            ["example.com/keep", ACCESS_FINALIZER]
        );
    }
}
