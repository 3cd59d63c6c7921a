//! Finding and reading fleet files: paths and directories in, validated fleets or every
//! problem out.

use std::path::{Path, PathBuf};

use crate::api::CelldFleet;
use crate::diagnostic::Diagnostic;

/// A fleet file that parsed and passed validation.
#[derive(Clone, Debug)]
pub struct LoadedFleet {
    /// Where it came from.
    pub path: PathBuf,
    /// The fleet, exactly as written (defaults are applied by accessors, not stored).
    pub fleet: CelldFleet,
}

/// Reads every fleet file named by `paths` (files, or directories searched recursively
/// for `*.yaml`/`*.yml` files whose `kind` is `CelldFleet`), validates each, and checks
/// fleets against each other (duplicate identity, bucket and prefix, or name). Returns the
/// fleets sorted by namespace and name, or every problem found, sorted by file and line.
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<LoadedFleet>, Vec<Diagnostic>> {
    crate::validate::load_paths(paths)
}

/// Parses and validates one fleet file from text (`path` is used in diagnostics only).
pub fn load_str(path: &Path, text: &str) -> Result<CelldFleet, Vec<Diagnostic>> {
    crate::validate::load_str(path, text)
}
