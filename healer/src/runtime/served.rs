//! The namespaces the healer serves (`--namespace`): every namespace, or a set.

use std::collections::BTreeSet;
use std::fmt;

use anyhow::Result;
use celld_api::CelldFleet;
use celld_api::healer_flags::{self as flags, Shard, check_namespace};

/// Which namespaces' fleets the healer reconciles and whose objects it watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// Every namespace (one cluster-wide watch per resource).
    All,
    /// These namespaces only (one watch per resource and namespace).
    Only(BTreeSet<String>),
}

impl Served {
    /// From the `--namespace` values (empty: every namespace).
    pub fn new(namespaces: &[String]) -> Result<Served> {
        if namespaces.is_empty() {
            return Ok(Served::All);
        }
        let mut set = BTreeSet::new();
        for ns in namespaces {
            check_namespace(flags::NAMESPACE, ns)?;
            set.insert(ns.trim().to_string());
        }
        Ok(Served::Only(set))
    }

    /// Whether fleets in `namespace` are served.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Served::All => true,
            Served::Only(set) => set.contains(namespace),
        }
    }

    /// Whether this healer acts on `fleet`: in a served namespace and in `shard`. Other
    /// fleets are watched only for the identity check, never acted on.
    pub fn serves(&self, shard: Shard, fleet: &CelldFleet) -> bool {
        self.contains(fleet.metadata.namespace.as_deref().unwrap_or_default())
            && shard.owns(&fleet.spec.identity)
    }

    /// How many of `fleets` this healer serves (`celld_healer_fleets_served`).
    pub fn count(&self, shard: Shard, fleets: &[std::sync::Arc<CelldFleet>]) -> usize {
        fleets.iter().filter(|f| self.serves(shard, f)).count()
    }

    /// The scopes of the namespaced watches: `None` for one cluster-wide watch, else one
    /// per namespace.
    pub fn watch_scopes(&self) -> Vec<Option<String>> {
        match self {
            Served::All => vec![None],
            Served::Only(set) => set.iter().cloned().map(Some).collect(),
        }
    }
}

impl fmt::Display for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Served::All => f.write_str("<all>"),
            Served::Only(set) => {
                let v: Vec<&str> = set.iter().map(String::as_str).collect();
                f.write_str(&v.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testkit::fleet_object;

    /// Served: in a served namespace and in the shard; every fleet is served by exactly
    /// one shard of a count.
    #[test]
    fn count_takes_namespaces_and_shard() {
        let fleets: Vec<Arc<CelldFleet>> = (0..40)
            .map(|i| {
                let ns = if i % 4 == 0 { "other" } else { "apps" };
                let identity = format!("7kq2m9x4c1v8b3n6z5h0j2{i:04}");
                Arc::new(fleet_object(ns, &format!("f{i}"), &identity))
            })
            .collect();
        let all = Served::All;
        let apps = Served::new(&["apps".to_string()]).expect("a namespace");
        assert_eq!(all.count(Shard::ALL, &fleets), 40);
        assert_eq!(apps.count(Shard::ALL, &fleets), 30);
        let halves: Vec<usize> = (0..2)
            .map(|index| apps.count(Shard { index, count: 2 }, &fleets))
            .collect();
        assert_eq!(halves.iter().sum::<usize>(), 30, "{halves:?}");
        assert!(halves.iter().all(|&n| n > 0 && n < 30), "{halves:?}");
    }
}
