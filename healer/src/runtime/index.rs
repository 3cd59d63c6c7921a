//! The watch caches indexed by the fleet each object may belong to, so that gathering
//! one fleet's objects costs what the fleet has, not what its namespace has.
//!
//! At 1,000 fleets in one namespace, a reconcile that scanned every cached Pod, claim
//! and ReplicaSet to keep its fleet's spent more time scanning than deciding. Each cache
//! now carries an index from a [`Key`] (an identity or a fleet name, in a namespace) to
//! the names of the objects that carry it. The index only narrows: a reader takes the
//! objects it names from the reflector store and filters them exactly as a whole scan
//! would ([`super::gather`]), so an index that named too much would cost time, never
//! correctness. It must never name too little: [`Indexed::keys`] gives every key a
//! reader may look an object up by.
//!
//! The index follows the same watch events as its store, right after the store took
//! each one, and before the watch counts as listed or the event's object triggers a
//! reconcile. A relist replaces its entries at the end, as the store does. A reader
//! takes each candidate from the store on its own, so one read may mix versions across
//! objects, as the caches always lag: every destructive write is confirmed on a fresh
//! read.

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;

use celld_api::labels::{IDENTITY, REPLACEMENT_INDEX, claim_fleet};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;

/// What an object is looked up by, within its namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Key {
    /// A fleet identity, from the identity label (or, on a held Pod, the replacement
    /// label, which carries the identity too).
    Identity(String),
    /// A fleet name, from a member claim's name (`data-<fleet>-<n>`): another fleet's
    /// claim at a member name carries no label of ours.
    Fleet(String),
}

/// The keys a cached object is found by: every one a reader of its kind looks up.
pub(super) trait Indexed {
    fn keys(&self) -> Vec<Key>;
}

fn label_keys<K: Resource>(o: &K, labels: &[&str]) -> Vec<Key> {
    let Some(l) = o.meta().labels.as_ref() else {
        return Vec::new();
    };
    let mut keys: Vec<Key> = labels
        .iter()
        .filter_map(|k| l.get(*k))
        .map(|v| Key::Identity(v.clone()))
        .collect();
    keys.dedup();
    keys
}

impl Indexed for Pod {
    /// A member carries the identity label; a Pod held for a handoff may carry only the
    /// replacement label.
    fn keys(&self) -> Vec<Key> {
        label_keys(self, &[IDENTITY, REPLACEMENT_INDEX])
    }
}

impl Indexed for PersistentVolumeClaim {
    /// Its identity label, and the fleet its name names (labelled or not).
    fn keys(&self) -> Vec<Key> {
        let mut keys = label_keys(self, &[IDENTITY]);
        if let Some(fleet) = self.metadata.name.as_deref().and_then(claim_fleet) {
            keys.push(Key::Fleet(fleet.to_string()));
        }
        keys
    }
}

impl Indexed for PartialObjectMeta<ReplicaSet> {
    fn keys(&self) -> Vec<Key> {
        label_keys(self, &[IDENTITY])
    }
}

// Read by name, never through the index; indexed by identity all the same, so that
// every cache is built one way.
impl Indexed for StatefulSet {
    fn keys(&self) -> Vec<Key> {
        label_keys(self, &[IDENTITY])
    }
}

impl Indexed for Deployment {
    fn keys(&self) -> Vec<Key> {
        label_keys(self, &[IDENTITY])
    }
}

impl Indexed for Service {
    fn keys(&self) -> Vec<Key> {
        label_keys(self, &[IDENTITY])
    }
}

/// (namespace, key) -> object names, and what each object is filed under.
#[derive(Default)]
struct Entries {
    names: HashMap<(String, Key), BTreeSet<String>>,
    filed: HashMap<(String, String), Vec<Key>>,
}

impl Entries {
    fn remove(&mut self, ns: &str, name: &str) {
        let Some(keys) = self.filed.remove(&(ns.to_string(), name.to_string())) else {
            return;
        };
        for k in keys {
            let at = (ns.to_string(), k);
            if let Some(set) = self.names.get_mut(&at) {
                set.remove(name);
                if set.is_empty() {
                    self.names.remove(&at);
                }
            }
        }
    }

    fn insert(&mut self, ns: String, name: String, keys: Vec<Key>) {
        self.remove(&ns, &name);
        if keys.is_empty() {
            return;
        }
        for k in &keys {
            self.names
                .entry((ns.clone(), k.clone()))
                .or_default()
                .insert(name.clone());
        }
        self.filed.insert((ns, name), keys);
    }
}

/// The index of one watch's store.
#[derive(Default)]
pub(super) struct Index {
    live: RwLock<Entries>,
    /// A relist in progress: what it has listed so far.
    relist: RwLock<Option<Entries>>,
}

fn place<K: Resource>(o: &K) -> (String, String) {
    let m = o.meta();
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

impl Index {
    /// Follows one watch event, as the reflector store does.
    pub(super) fn apply<K: Resource + Indexed>(&self, ev: &Event<K>) {
        match ev {
            Event::Apply(o) => {
                let (ns, name) = place(o);
                self.live.write().expect("index").insert(ns, name, o.keys());
            }
            Event::Delete(o) => {
                let (ns, name) = place(o);
                self.live.write().expect("index").remove(&ns, &name);
            }
            Event::Init => *self.relist.write().expect("index") = Some(Entries::default()),
            Event::InitApply(o) => {
                let (ns, name) = place(o);
                self.relist
                    .write()
                    .expect("index")
                    .get_or_insert_with(Entries::default)
                    .insert(ns, name, o.keys());
            }
            Event::InitDone => {
                if let Some(listed) = self.relist.write().expect("index").take() {
                    *self.live.write().expect("index") = listed;
                }
            }
        }
    }

    /// The names of the objects in `namespace` filed under any of `keys`, each once,
    /// sorted.
    pub(super) fn names(&self, namespace: &str, keys: &[Key]) -> BTreeSet<String> {
        let live = self.live.read().expect("index");
        let mut out = BTreeSet::new();
        for k in keys {
            if let Some(set) = live.names.get(&(namespace.to_string(), k.clone())) {
                out.extend(set.iter().cloned());
            }
        }
        out
    }

    /// How many objects are filed (for the tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.read().expect("index").filed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;

    fn pod(ns: &str, name: &str, labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: crate::testkit::object_meta(ns, name, labels),
            ..Pod::default()
        }
    }

    fn id(v: &str) -> Key {
        Key::Identity(v.into())
    }

    #[test]
    fn an_object_is_filed_under_its_labels_and_moves_with_them() {
        let i = Index::default();
        i.apply(&Event::Apply(pod("a", "p", &[(IDENTITY, "x")])));
        assert_eq!(i.names("a", &[id("x")]), BTreeSet::from(["p".to_string()]));
        assert!(i.names("b", &[id("x")]).is_empty(), "namespaces are apart");
        i.apply(&Event::Apply(pod("a", "p", &[(IDENTITY, "y")])));
        assert!(i.names("a", &[id("x")]).is_empty());
        assert_eq!(i.names("a", &[id("y")]).len(), 1);
        i.apply(&Event::Apply(pod("a", "p", &[(REPLACEMENT_INDEX, "y")])));
        assert_eq!(i.names("a", &[id("y")]).len(), 1, "a held Pod");
        i.apply(&Event::Apply(pod("a", "p", &[])));
        assert!(i.names("a", &[id("y")]).is_empty());
        assert_eq!(i.len(), 0, "an object with no key is not filed");
        i.apply(&Event::Apply(pod("a", "p", &[(IDENTITY, "y")])));
        i.apply(&Event::Delete(pod("a", "p", &[(IDENTITY, "y")])));
        assert_eq!(i.len(), 0);
    }

    #[test]
    fn a_claim_is_found_by_its_label_and_by_the_fleet_its_name_names() {
        let c = |name: &str, labels: &[(&str, &str)]| PersistentVolumeClaim {
            metadata: pod("a", name, labels).metadata,
            ..PersistentVolumeClaim::default()
        };
        assert_eq!(
            c("data-web-2", &[(IDENTITY, "x")]).keys(),
            vec![id("x"), Key::Fleet("web".into())]
        );
        assert_eq!(c("data-web-2", &[]).keys(), vec![Key::Fleet("web".into())]);
        assert_eq!(c("scratch", &[(IDENTITY, "x")]).keys(), vec![id("x")]);
    }

    #[test]
    fn a_relist_replaces_the_entries_when_it_is_done() {
        let i = Index::default();
        i.apply(&Event::Apply(pod("a", "old", &[(IDENTITY, "x")])));
        i.apply(&Event::<Pod>::Init);
        i.apply(&Event::InitApply(pod("a", "new", &[(IDENTITY, "x")])));
        assert_eq!(
            i.names("a", &[id("x")]),
            BTreeSet::from(["old".to_string()]),
            "until the relist is done, the entries stay as they were"
        );
        i.apply(&Event::<Pod>::InitDone);
        assert_eq!(
            i.names("a", &[id("x")]),
            BTreeSet::from(["new".to_string()])
        );
    }

    /// Random watch events fed to a reflector store and to its index: for every key,
    /// the objects the index names, filtered as a reader filters them, are exactly the
    /// store's objects that a whole scan keeps.
    #[test]
    fn the_index_names_every_object_a_whole_scan_would_keep() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (store, mut writer) = reflector::store::<Pod>();
        let index = Index::default();
        let (namespaces, names, values) = (["a", "b"], ["p0", "p1", "p2", "p3"], ["x", "y"]);
        let mut relisting = false;
        for _ in 0..5_000 {
            let ns = namespaces[next(2) as usize];
            let name = names[next(4) as usize];
            let mut labels = Vec::new();
            if next(3) > 0 {
                labels.push((IDENTITY, values[next(2) as usize]));
            }
            if next(4) == 0 {
                labels.push((REPLACEMENT_INDEX, values[next(2) as usize]));
            }
            let p = pod(ns, name, &labels);
            let ev = match (relisting, next(20)) {
                (false, 0) => {
                    relisting = true;
                    Event::Init
                }
                (false, 1..=5) => Event::Delete(p),
                (false, _) => Event::Apply(p),
                (true, 0..=2) => {
                    relisting = false;
                    Event::InitDone
                }
                (true, _) => Event::InitApply(p),
            };
            writer.apply_watcher_event(&ev);
            index.apply(&ev);
            for ns in namespaces {
                for v in values {
                    let keeps = |p: &Pod| {
                        p.metadata.namespace.as_deref() == Some(ns)
                            && p.metadata.labels.as_ref().is_some_and(|l| {
                                l.get(IDENTITY).map(String::as_str) == Some(v)
                                    || l.get(REPLACEMENT_INDEX).map(String::as_str) == Some(v)
                            })
                    };
                    let scanned: BTreeSet<String> = store
                        .state()
                        .iter()
                        .filter(|p| keeps(p))
                        .filter_map(|p| p.metadata.name.clone())
                        .collect();
                    let indexed: BTreeSet<String> = index
                        .names(ns, &[id(v)])
                        .into_iter()
                        .filter(|n| {
                            store
                                .get(&reflector::ObjectRef::new(n).within(ns))
                                .is_some_and(|p| keeps(&p))
                        })
                        .collect();
                    assert_eq!(indexed, scanned, "{ns}/{v}");
                }
            }
        }
    }
}
