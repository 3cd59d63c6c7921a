//! A resource's caches when it is watched per served namespace: one reflector store per
//! watch (a reflector store must be fed by exactly one watch, whose initial list replaces
//! the store's contents), read as one.

use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

/// One store per watch scope (`None`: a cluster-wide watch), read as one cache.
#[derive(Clone)]
pub struct Scoped<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    stores: Vec<(Option<String>, Store<K>)>,
}

impl<K> Scoped<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// The stores, by the namespace their watch covers.
    pub fn new(stores: Vec<(Option<String>, Store<K>)>) -> Scoped<K> {
        Scoped { stores }
    }

    /// Every cached object.
    pub fn state(&self) -> Vec<Arc<K>> {
        match self.stores.as_slice() {
            [(_, one)] => one.state(),
            many => many.iter().flat_map(|(_, s)| s.state()).collect(),
        }
    }

    /// The cached objects of one namespace.
    pub fn state_in(&self, namespace: &str) -> Vec<Arc<K>> {
        self.stores
            .iter()
            .filter(|(scope, _)| scope.as_deref().is_none_or(|s| s == namespace))
            .flat_map(|(_, s)| s.state())
            .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
            .collect()
    }

    /// The cached object `r`, if its namespace is watched and it is there.
    pub fn get(&self, r: &ObjectRef<K>) -> Option<Arc<K>> {
        self.stores
            .iter()
            .filter(|(scope, _)| scope.is_none() || *scope == r.namespace)
            .find_map(|(_, s)| s.get(r))
    }
}
