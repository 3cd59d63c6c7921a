//! Finding and reading fleet files: paths and directories in, validated fleets or every
//! problem out. Discovery ([`discover`]) decides which files are read and this module
//! reads them; validation ([`crate::validate`], which knows nothing of files) decides
//! what each text holds.

pub mod discover;

use std::path::{Path, PathBuf};

use crate::api::validate::ValidatedFleet;
pub use crate::validate::{LoadedFleet, Skipped, Source};
use celld_api::diagnostic::Diagnostic;

pub use discover::Options;

/// Everything a load found: the fleets (or every problem) and what was skipped.
#[derive(Debug)]
pub struct Loaded {
    /// The fleets sorted by namespace and name, or every problem sorted by file and line.
    pub result: Result<Vec<LoadedFleet>, Vec<Diagnostic>>,
    /// Files and folders passed over, sorted by path.
    pub skipped: Vec<Skipped>,
    /// Every file read, as diagnostics name it (`<stdin>` for `-`), sorted.
    pub files: Vec<PathBuf>,
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
    let mut files = Vec::with_capacity(found.files.len());
    for file in found.files {
        let shown = display_path(&file.path);
        files.push(shown.clone());
        match read_text(&file.path, &shown) {
            Ok(text) => texts.push(Source {
                path: shown,
                text,
                explicit: file.explicit,
            }),
            Err(d) => errors.push(d),
        }
    }
    // The files beside a fleet file named on the command line may hold its patches.
    let mut siblings = Vec::new();
    let read: std::collections::BTreeSet<PathBuf> = texts.iter().map(|t| t.path.clone()).collect();
    let folders: std::collections::BTreeSet<PathBuf> = texts
        .iter()
        .filter(|t| t.explicit && !is_stdin_name(&t.path))
        .filter_map(|t| t.path.parent().map(Path::to_path_buf))
        .collect();
    for folder in folders {
        let listing = if folder.as_os_str().is_empty() {
            Path::new(".")
        } else {
            folder.as_path()
        };
        let Ok(entries) = std::fs::read_dir(listing) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| folder.join(e.file_name()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .filter(|p| !read.contains(p))
            .collect();
        paths.sort();
        for path in paths {
            if let Ok(text) = std::fs::read_to_string(&path) {
                siblings.push(Source {
                    path,
                    text,
                    explicit: false,
                });
            }
        }
    }
    let mut result =
        crate::validate::load_sources_with(&texts, &siblings, &mut skipped, &options.established);
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
    files.sort();
    Loaded {
        result,
        skipped,
        files,
    }
}

/// The path argument that stands for standard input.
pub const STDIN_ARG: &str = "-";
/// How diagnostics name standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// Whether a diagnostic's file is standard input.
pub fn is_stdin_name(path: &Path) -> bool {
    path.as_os_str() == STDIN_NAME
}

/// The path diagnostics show for an input: `<stdin>` for `-`.
fn display_path(path: &Path) -> PathBuf {
    if path.as_os_str() == STDIN_ARG {
        PathBuf::from(STDIN_NAME)
    } else {
        path.to_path_buf()
    }
}

/// The bytes of an input file, or of standard input for `-` (read once and kept).
fn read_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    static STDIN: std::sync::OnceLock<Result<Vec<u8>, String>> = std::sync::OnceLock::new();
    if path.as_os_str() != STDIN_ARG {
        return std::fs::read(path);
    }
    STDIN
        .get_or_init(|| {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
                .map(|_| buf)
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(std::io::Error::other)
}

/// Reads a file (or standard input) as UTF-8; invalid UTF-8 is reported at its line,
/// column and byte offset. `shown` names it in diagnostics.
fn read_text(arg: &Path, shown: &Path) -> Result<String, Diagnostic> {
    let path = shown;
    let bytes = read_bytes(arg).map_err(|e| {
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
pub fn load_str(path: &Path, text: &str) -> Result<ValidatedFleet, Vec<Diagnostic>> {
    crate::validate::load_str(path, text)
}
