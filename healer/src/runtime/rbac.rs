//! The healer's permissions, re-exported: the table itself is `celld_api::rbac`
//! (explained in `rbac.md` beside it), which `celld-gen install` renders into the
//! ClusterRole and Roles. The end-to-end tests run the healer with exactly that RBAC.

pub use celld_api::rbac::{RULES, Rule, Scope, Triple, rules_json, triples, triples_of};
