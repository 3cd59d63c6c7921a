//! CelldFleets the healer cannot read, kept apart so that one of them never stops the
//! healing of the others.
//!
//! The fleet watch lists and watches CelldFleets as untyped objects and reads each one
//! into the typed [`CelldFleet`] on its own ([`Unreadable::read`]). A typed watch would
//! fail its whole list on one object it cannot read (a field from a newer CRD than this
//! healer knows, say), and then no fleet would be healed at all. An object that does not
//! read is recorded here instead, with why, and:
//! - is never acted on: one never read is not in the fleet cache, so never reconciled;
//!   one read before keeps its older version in the cache, and the reconcile refuses a
//!   fleet recorded here ([`Unreadable::problem`]);
//! - still counts for rule V2: its identity, when `spec.identity` is a string, makes a
//!   newer fleet with that identity a copy ([`Entry::claimant`]);
//! - is reported on itself by the leader (an Event, `FleetUnreadable`, once per version),
//!   in the log, and in `celld_healer_fleets_unreadable`.
//!
//! A deletion that does not read is passed on as the deletion of the cached version,
//! so the cache forgets it. Each relist starts the record over.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use celld_api::CelldFleet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tracing::warn;

/// One CelldFleet that did not read.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub created: Option<Time>,
    /// `spec.identity`, when it is a string.
    pub identity: Option<String>,
    /// What did not read.
    pub error: String,
    /// The leader published its Event (for this resourceVersion).
    pub reported: bool,
}

impl Entry {
    /// It as rule V2 compares it, when its identity is known.
    pub fn claimant(&self) -> Option<crate::observe::Claimant<'_>> {
        Some(crate::observe::Claimant {
            identity: self.identity.as_deref()?,
            uid: Some(&self.uid),
            created: self.created.as_ref(),
            namespace: &self.namespace,
            name: &self.name,
        })
    }
}

/// The record of unreadable fleets, by uid.
#[derive(Debug, Default)]
pub struct Unreadable {
    entries: Mutex<HashMap<String, Entry>>,
    /// The uids of a relist in progress.
    listing: Mutex<Option<HashSet<String>>>,
    /// Woken when an entry needs reporting.
    pub(super) changed: tokio::sync::Notify,
}

/// A CelldFleet read from an untyped one, or why not.
pub fn typed(o: &DynamicObject) -> Result<CelldFleet, String> {
    let v = serde_json::to_value(o).map_err(|e| e.to_string())?;
    serde_json::from_value(v).map_err(|e| e.to_string())
}

impl Unreadable {
    /// One event of the untyped fleet watch as the typed fleet cache takes it, or
    /// nothing (see the module comment). `cache` is that cache.
    pub fn read(
        &self,
        ev: Result<Event<DynamicObject>, watcher::Error>,
        cache: &Store<CelldFleet>,
    ) -> Option<Result<Event<CelldFleet>, watcher::Error>> {
        let ev = match ev {
            Err(e) => return Some(Err(e)),
            Ok(ev) => ev,
        };
        Some(Ok(match ev {
            Event::Init => {
                *self.listing.lock().expect("listing") = Some(HashSet::new());
                Event::Init
            }
            Event::InitApply(o) => {
                if let Some(l) = self.listing.lock().expect("listing").as_mut() {
                    l.insert(o.metadata.uid.clone().unwrap_or_default());
                }
                Event::InitApply(self.apply(&o)?)
            }
            Event::InitDone => {
                if let Some(listed) = self.listing.lock().expect("listing").take() {
                    self.entries
                        .lock()
                        .expect("unreadable")
                        .retain(|uid, _| listed.contains(uid));
                    self.changed.notify_one();
                }
                Event::InitDone
            }
            Event::Apply(o) => Event::Apply(self.apply(&o)?),
            Event::Delete(o) => {
                if self
                    .entries
                    .lock()
                    .expect("unreadable")
                    .remove(o.metadata.uid.as_deref().unwrap_or_default())
                    .is_some()
                {
                    self.changed.notify_one();
                }
                match typed(&o) {
                    Ok(f) => Event::Delete(f),
                    Err(_) => {
                        let key = ObjectRef::<CelldFleet>::new(
                            o.metadata.name.as_deref().unwrap_or_default(),
                        )
                        .within(o.metadata.namespace.as_deref().unwrap_or_default());
                        Event::Delete((*cache.get(&key)?).clone())
                    }
                }
            }
        }))
    }

    fn apply(&self, o: &DynamicObject) -> Option<CelldFleet> {
        let uid = o.metadata.uid.clone().unwrap_or_default();
        match typed(o) {
            Ok(f) => {
                if self
                    .entries
                    .lock()
                    .expect("unreadable")
                    .remove(&uid)
                    .is_some()
                {
                    self.changed.notify_one();
                }
                Some(f)
            }
            Err(error) => {
                let e = Entry {
                    namespace: o.metadata.namespace.clone().unwrap_or_default(),
                    name: o.metadata.name.clone().unwrap_or_default(),
                    uid: uid.clone(),
                    resource_version: o.metadata.resource_version.clone().unwrap_or_default(),
                    created: o.metadata.creation_timestamp.clone(),
                    identity: o.data["spec"]["identity"].as_str().map(str::to_string),
                    error,
                    reported: false,
                };
                let mut entries = self.entries.lock().expect("unreadable");
                let same = entries
                    .get(&uid)
                    .is_some_and(|old| old.resource_version == e.resource_version);
                if !same {
                    warn!(fleet = %format!("{}/{}", e.namespace, e.name), error = %e.error, "cannot read this CelldFleet: it is not acted on; the other fleets are");
                    entries.insert(uid, e);
                    self.changed.notify_one();
                }
                None
            }
        }
    }

    /// Why the fleet with this uid cannot be read, if it cannot.
    pub fn problem(&self, uid: &str) -> Option<String> {
        self.entries
            .lock()
            .expect("unreadable")
            .get(uid)
            .map(|e| e.error.clone())
    }

    /// How many fleets do not read.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("unreadable").len()
    }

    /// Whether every fleet reads.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every unreadable fleet, for rule V2 ([`Entry::claimant`]: those whose identity
    /// is known).
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .expect("unreadable")
            .values()
            .cloned()
            .collect()
    }

    /// Keeps `celld_healer_fleets_unreadable` and reports each new entry by an Event on
    /// its object, from the leader only (a standby writes nothing; a new leader reports
    /// what is still unreported). Runs until the process ends.
    pub(super) async fn report(
        self: std::sync::Arc<Self>,
        events: super::events::Events,
        metrics: std::sync::Arc<super::metrics::Metrics>,
        gate: super::leader::Gate,
    ) {
        loop {
            metrics.fleets_unreadable.set(self.len() as i64);
            if self.has_unreported() && gate.may_act() {
                for e in self.unreported() {
                    use kube::Resource;
                    let regarding = k8s_openapi::api::core::v1::ObjectReference {
                        api_version: Some(CelldFleet::api_version(&()).into_owned()),
                        kind: Some(CelldFleet::kind(&()).into_owned()),
                        namespace: Some(e.namespace.clone()),
                        name: Some(e.name.clone()),
                        uid: Some(e.uid.clone()),
                        resource_version: Some(e.resource_version.clone()),
                        ..Default::default()
                    };
                    let note = format!(
                        "The healer cannot read this CelldFleet, so it makes no change to it, its members or its disks until it can: {}. Other fleets are healed as usual. A field the healer does not know comes from a newer CRD: upgrade the healer with it.",
                        e.error
                    );
                    events
                        .publish_regarding(regarding, true, "FleetUnreadable", "Report", note)
                        .await;
                }
            }
            if self.has_unreported() {
                // Not leading: look again soon (only while something waits to be said).
                let _ = tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    self.changed.notified(),
                )
                .await;
            } else {
                self.changed.notified().await;
            }
        }
    }

    fn has_unreported(&self) -> bool {
        self.entries
            .lock()
            .expect("unreadable")
            .values()
            .any(|e| !e.reported)
    }

    /// Takes the entries not reported yet, marking them reported.
    pub fn unreported(&self) -> Vec<Entry> {
        let mut entries = self.entries.lock().expect("unreadable");
        entries
            .values_mut()
            .filter(|e| !e.reported)
            .map(|e| {
                e.reported = true;
                e.clone()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use serde_json::json;

    use super::*;

    fn object(name: &str, uid: &str, rv: &str, spec: serde_json::Value) -> DynamicObject {
        let mut f = serde_json::to_value(crate::testkit::fleet_object("apps", name, "id-of-x"))
            .expect("a fleet");
        f["metadata"]["uid"] = json!(uid);
        f["metadata"]["resourceVersion"] = json!(rv);
        f["metadata"]["creationTimestamp"] = json!("2026-12-01T00:00:00Z");
        if !spec.is_null() {
            f["spec"] = spec;
        }
        serde_json::from_value(f).expect("an object")
    }

    #[test]
    fn one_unreadable_fleet_is_kept_apart_and_the_others_go_on() {
        let u = Unreadable::default();
        let (cache, mut writer) = reflector::store::<CelldFleet>();
        let mut feed = |ev: Event<DynamicObject>| {
            let out = u.read(Ok(ev), &cache);
            if let Some(Ok(ev)) = &out {
                writer.apply_watcher_event(ev);
            }
            out.map(|r| r.map(|ev| matches!(ev, Event::Init | Event::InitDone)))
        };
        let good = object("good", "u1", "1", serde_json::Value::Null);
        let mut bad_spec = serde_json::to_value(&good).expect("json")["spec"].clone();
        bad_spec["fromANewerCrd"] = json!(true);
        let bad = object("bad", "u2", "1", bad_spec.clone());
        feed(Event::Init);
        assert!(matches!(
            feed(Event::InitApply(good.clone())),
            Some(Ok(false))
        ));
        assert!(feed(Event::InitApply(bad)).is_none(), "not passed on");
        feed(Event::InitDone);
        assert_eq!(cache.state().len(), 1);
        assert!(u.problem("u2").is_some_and(|e| e.contains("fromANewerCrd")));
        assert_eq!(
            u.entries()[0].claimant().map(|c| c.identity),
            Some("id-of-x")
        );
        assert_eq!(u.unreported().len(), 1);
        assert!(u.unreported().is_empty(), "reported once");

        // A fleet read before turns unreadable: its cached version stays, recorded here
        // so that the reconcile refuses it.
        let broken = object("good", "u1", "2", bad_spec);
        assert!(feed(Event::Apply(broken.clone())).is_none());
        assert_eq!(cache.state().len(), 1);
        assert!(u.problem("u1").is_some());
        // Its deletion, unreadable too, removes the cached version.
        assert!(matches!(feed(Event::Delete(broken)), Some(Ok(false))));
        assert!(cache.state().is_empty());
        assert!(u.problem("u1").is_none());
        // A relist forgets what it no longer lists.
        feed(Event::Init);
        feed(Event::InitDone);
        assert!(u.is_empty());
    }
}
