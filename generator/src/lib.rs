//! celld-gen: the command line over the rendering of fleets into manifests
//! ([`celld_render`], re-exported here under the paths it always had), and the healer's
//! install bundle. The fleet types, their validation, the healer's flags and RBAC live in
//! [`celld_api`].
//!
//! Flow: [`load`] finds and reads fleet files, [`validate`] checks their texts, `render`
//! turns them into objects with the templates, [`patch`] applies the fleets'
//! `CelldFleetPatch`es to them (all four in celld-render), `output` writes them (all or
//! nothing).

/// The shared contract ([`celld_api`]), under the path the generator has always used.
pub use celld_api as api;
pub mod cli;
pub mod install;
pub mod output;
pub mod version;
pub use celld_render::{kubernetes, load, patch, render, validate};
