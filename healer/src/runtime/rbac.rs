//! Every verb on every resource the healer's requests use, and nothing else: the one
//! table that `celld-gen install` renders into the ClusterRole and Roles
//! (`celld_gen::install::rbac`, explained in `rbac.md` beside it). The end-to-end tests
//! run the healer with exactly that RBAC.

pub use celld_gen::install::rbac::{RULES, Rule, Scope, Triple, rules_json, triples, triples_of};
