//! celld-gen: the rendering of fleets into manifests, and of the healer's install bundle.
//! The fleet types, their validation, the healer's flags and RBAC live in [`celld_api`].
//!
//! Flow: [`load`] finds and reads fleet files, [`validate`] checks their texts (each fleet
//! with [`celld_api::validate`], then the fleets together), `render` turns
//! [`ValidatedFleet`](celld_api::validate::ValidatedFleet)s into objects with the
//! templates, [`patch`] applies the fleets' `CelldFleetPatch`es to them, `output` writes
//! them (all or nothing).

/// The shared contract ([`celld_api`]), under the path the generator has always used.
pub use celld_api as api;
pub mod cli;
pub mod install;
pub mod kubernetes;
pub mod load;
pub mod output;
pub mod patch;
pub mod render;
pub mod validate;
pub mod version;
