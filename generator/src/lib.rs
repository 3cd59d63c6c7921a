//! celld-gen: the fleet API, its validation, and the rendering of fleets into manifests.

pub mod api;
