//! The namespaces the healer serves (`--namespace`): every namespace, or a set.

use std::collections::BTreeSet;
use std::fmt;

use anyhow::Result;
use celld_api::healer_flags::{self as flags, check_namespace};

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
