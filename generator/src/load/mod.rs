//! Finding and reading fleet files: paths and directories in, validated fleets or every
//! problem out. Discovery ([`discover`]) decides which files are read; validation
//! ([`crate::validate`]) decides what each file holds.

pub mod discover;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::api::CelldFleet;
use crate::diagnostic::Diagnostic;

pub use discover::Options;

/// A fleet file that parsed and passed validation.
#[derive(Clone, Debug)]
pub struct LoadedFleet {
    /// Where it came from.
    pub path: PathBuf,
    /// The fleet, exactly as written (defaults are applied by accessors, not stored).
    pub fleet: CelldFleet,
}

/// A file or folder that was found but not read as a fleet, and why (shown with `-v` and
/// in `check --format json`, so skipping is never silent).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Skipped {
    /// The file or folder.
    pub path: PathBuf,
    /// Why it was not read as a fleet.
    pub reason: String,
}

/// Everything a load found: the fleets (or every problem) and what was skipped.
#[derive(Debug)]
pub struct Loaded {
    /// The fleets sorted by namespace and name, or every problem sorted by file and line.
    pub result: Result<Vec<LoadedFleet>, Vec<Diagnostic>>,
    /// Files and folders passed over, sorted by path.
    pub skipped: Vec<Skipped>,
}

/// Reads every fleet file named by `paths` (files, or directories searched recursively
/// for `*.yaml`/`*.yml` files whose `kind` is `CelldFleet`), validates each, and checks
/// fleets against each other (duplicate identity, bucket and prefix, or name). Returns the
/// fleets sorted by namespace and name, or every problem found, sorted by file and line.
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<LoadedFleet>, Vec<Diagnostic>> {
    load(paths, &Options::default()).result
}

/// [`load_paths`] with options (folders to leave out), also reporting what was skipped.
pub fn load(paths: &[PathBuf], options: &Options) -> Loaded {
    let found = discover::discover(paths, options);
    let mut skipped = found.skipped;
    let mut errors = found.errors;
    let mut texts = Vec::with_capacity(found.files.len());
    for file in found.files {
        match read_text(&file.path) {
            Ok(text) => texts.push(Source {
                path: file.path,
                text,
                explicit: file.explicit,
            }),
            Err(d) => errors.push(d),
        }
    }
    let mut result = crate::validate::load_sources(&texts, &mut skipped);
    if !errors.is_empty() {
        if let Err(more) = result {
            errors.extend(more);
        }
        errors.sort();
        errors.dedup();
        result = Err(errors);
    }
    skipped.sort();
    skipped.dedup();
    Loaded { result, skipped }
}

/// A file's text, and whether it was named on the command line (a named file must hold a
/// fleet; a file found in a directory may hold other YAML).
#[derive(Clone, Debug)]
pub struct Source {
    /// The path as the user wrote it, or as found below a directory they named.
    pub path: PathBuf,
    /// The contents.
    pub text: String,
    /// Named on the command line.
    pub explicit: bool,
}

/// Reads a file as UTF-8; invalid UTF-8 is reported at its line, column and byte offset.
fn read_text(path: &Path) -> Result<String, Diagnostic> {
    let bytes = std::fs::read(path).map_err(|e| {
        Diagnostic::whole_file(path, format!("cannot read file: {e}"), "a readable file")
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        // Columns count characters, as the YAML positions do; the prefix is valid UTF-8.
        let column = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        Diagnostic {
            file: path.to_path_buf(),
            line,
            column,
            field: String::new(),
            message: format!(
                "invalid UTF-8 at byte offset {offset} (byte 0x{:02x})",
                e.as_bytes()[offset]
            ),
            expected: "a UTF-8 text file; re-save it as UTF-8".to_owned(),
        }
    })
}

/// Parses and validates one fleet file from text (`path` is used in diagnostics only).
pub fn load_str(path: &Path, text: &str) -> Result<CelldFleet, Vec<Diagnostic>> {
    crate::validate::load_str(path, text)
}
