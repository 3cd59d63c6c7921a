//! celld-render: a fleet file's text to the Kubernetes objects it renders, the library
//! behind `celld-gen render` and the healer's comparison of live Services with their
//! rendering. The fleet types, their validation, the healer's flags and RBAC live in
//! [`celld_api`]; the command line, the output writer and the install bundle in celld-gen.
//!
//! Flow: [`load`] finds and reads fleet files, [`validate`] checks their texts (each fleet
//! with [`celld_api::validate`], then the fleets together), [`render`] turns
//! [`ValidatedFleet`](celld_api::validate::ValidatedFleet)s into objects with the
//! templates (`templates/` at the repository root, compiled in), and [`patch`] applies
//! the fleets' `CelldFleetPatch`es to them. [`kubernetes`] holds the Kubernetes minors a
//! rendering can be made for.

/// The shared contract ([`celld_api`]), under the path the renderer has always used.
pub use celld_api as api;
pub mod kubernetes;
pub mod load;
pub mod patch;
pub mod render;
pub mod validate;
