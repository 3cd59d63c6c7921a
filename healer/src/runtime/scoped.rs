//! A resource's caches when it is watched per served namespace: one reflector store per
//! watch (a reflector store must be fed by exactly one watch, whose initial list replaces
//! the store's contents), each with its index ([`super::index`]), read as one.

use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use super::index::{Index, Key};

/// One watch's cache: the scope it covers (`None`: cluster-wide), its store and the
/// store's index.
pub(super) type Cache<K> = (Option<String>, Store<K>, Arc<Index>);

/// One store per watch scope, read as one cache.
#[derive(Clone)]
pub struct Scoped<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    stores: Vec<Cache<K>>,
}

impl<K> Scoped<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// The caches, by the namespace their watch covers.
    pub(super) fn new(stores: Vec<Cache<K>>) -> Scoped<K> {
        Scoped { stores }
    }

    /// Every cached object.
    pub fn state(&self) -> Vec<Arc<K>> {
        match self.stores.as_slice() {
            [(_, one, _)] => one.state(),
            many => many.iter().flat_map(|(_, s, _)| s.state()).collect(),
        }
    }

    /// The cached objects of `namespace` filed under any of `keys`, each once, by name.
    /// A candidate list: the caller filters them as it would a scan of the namespace
    /// (see [`super::index`]).
    pub(super) fn concerning(&self, namespace: &str, keys: &[Key]) -> Vec<Arc<K>> {
        self.stores
            .iter()
            .filter(|(scope, _, _)| scope.as_deref().is_none_or(|s| s == namespace))
            .flat_map(|(_, store, index)| {
                index
                    .names(namespace, keys)
                    .into_iter()
                    .filter_map(|n| store.get(&ObjectRef::new(&n).within(namespace)))
            })
            .collect()
    }

    /// The cached object `r`, if its namespace is watched and it is there.
    pub fn get(&self, r: &ObjectRef<K>) -> Option<Arc<K>> {
        self.stores
            .iter()
            .filter(|(scope, _, _)| scope.is_none() || *scope == r.namespace)
            .find_map(|(_, s, _)| s.get(r))
    }
}
