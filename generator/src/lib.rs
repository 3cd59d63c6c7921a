//! celld-gen: the fleet API, its validation, and the rendering of fleets into manifests.
//!
//! Flow: [`load`] reads and [`validate`]s fleet files, `render` turns valid fleets into
//! objects with the templates, `output` writes them (all or nothing).

pub use celld_api as api;
pub mod cli;
pub use celld_api::diagnostic;
pub use celld_api::healer_flags;
pub mod install;
pub mod load;
pub mod output;
pub mod render;
pub mod validate;
pub mod version;
