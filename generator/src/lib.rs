//! Fleet API, validation and rendering for celld-gen.
