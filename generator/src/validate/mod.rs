//! Validation of fleet files, in three passes over a located YAML tree:
//! 1. [`yaml`]: syntax, with refusal of anchors, tags and duplicate keys;
//! 2. [`schema`]: shape, against the CRD's own schema: every unknown field and wrong type;
//! 3. [`rules`]: meaning: formats, ranges, combinations, reserved names.
//!
//! Then fleets are checked against each other (identity, bucket, name). Every problem is
//! reported with file, line, column, field, what is wrong and what would be valid.

pub mod formats;
pub mod rules;
pub mod schema;
pub mod yaml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::api::{CelldFleet, labels};
use crate::diagnostic::Diagnostic;
use crate::load::LoadedFleet;
use yaml::{Node, Pos};

/// A problem inside one document; the file is added when it becomes a [`Diagnostic`].
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// Where.
    pub pos: Pos,
    /// Field path.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// What would be valid.
    pub expected: String,
}

impl Problem {
    /// A problem at `pos`.
    pub fn new(pos: Pos, field: &str, message: impl Into<String>, expected: &str) -> Self {
        Problem {
            pos,
            field: field.to_string(),
            message: message.into(),
            expected: expected.to_string(),
        }
    }

    fn into_diagnostic(self, file: &Path) -> Diagnostic {
        Diagnostic {
            file: file.to_path_buf(),
            line: self.pos.line,
            column: self.pos.column,
            field: self.field,
            message: self.message,
            expected: self.expected,
        }
    }
}

fn file_problem(file: &Path, message: impl Into<String>, expected: &str) -> Diagnostic {
    Diagnostic {
        file: file.to_path_buf(),
        line: 0,
        column: 0,
        field: String::new(),
        message: message.into(),
        expected: expected.to_string(),
    }
}

/// A fleet document that validated, with its located tree (for cross-fleet messages).
struct Parsed {
    path: PathBuf,
    doc: Node,
    fleet: CelldFleet,
}

/// Whether a document is a fleet at all (so directories may hold other YAML).
fn is_fleet_doc(doc: &Node) -> bool {
    doc.get("kind").and_then(Node::as_str) == Some("CelldFleet")
}

/// Whether a document is celld-gen's own output (a rendered tree inside the searched
/// directory must not be read back as input).
fn is_rendered(doc: &Node) -> bool {
    doc.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.get(labels::MANAGED_BY))
        .and_then(Node::as_str)
        == Some(labels::MANAGED_BY_VALUE)
}

/// Validates one document already known to be a fleet.
fn validate_doc(doc: &Node) -> Result<CelldFleet, Vec<Problem>> {
    let mut problems = Vec::new();
    schema::check_document(doc, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    let fleet: CelldFleet = serde_json::from_value(doc.to_json()).map_err(|e| {
        vec![Problem::new(
            doc.pos,
            "",
            format!("the fleet could not be read: {e}"),
            "a CelldFleet as `celld-gen schema` describes it",
        )]
    })?;
    let problems = rules::check_fleet(doc, &fleet);
    if problems.is_empty() {
        Ok(fleet)
    } else {
        Err(problems)
    }
}

/// Parses and validates every fleet document in `text`. With `explicit`, a file without
/// any fleet is an error; otherwise (directory search) such files are skipped.
fn parse_file(path: &Path, text: &str, explicit: bool) -> Result<Vec<Parsed>, Vec<Diagnostic>> {
    let docs = yaml::parse(text).map_err(|e| {
        vec![Diagnostic {
            file: path.to_path_buf(),
            line: e.pos.line,
            column: e.pos.column,
            field: String::new(),
            message: format!("invalid YAML: {}", e.message),
            expected: String::new(),
        }]
    })?;
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for doc in docs {
        if !is_fleet_doc(&doc) {
            continue;
        }
        if !explicit && is_rendered(&doc) {
            continue;
        }
        match validate_doc(&doc) {
            Ok(fleet) => out.push(Parsed {
                path: path.to_path_buf(),
                doc,
                fleet,
            }),
            Err(problems) => errors.extend(problems.into_iter().map(|p| p.into_diagnostic(path))),
        }
    }
    if explicit && out.is_empty() && errors.is_empty() {
        errors.push(file_problem(
            path,
            "no CelldFleet found in this file",
            "a document with `kind: CelldFleet` (see `celld-gen init`)",
        ));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// See [`crate::load::load_str`].
pub fn load_str(path: &Path, text: &str) -> Result<CelldFleet, Vec<Diagnostic>> {
    let mut parsed = parse_file(path, text, true)?;
    if parsed.len() != 1 {
        return Err(vec![file_problem(
            path,
            format!("{} fleets in one document stream", parsed.len()),
            "exactly one CelldFleet",
        )]);
    }
    Ok(parsed.remove(0).fleet)
}

/// Expands paths: files as given, directories searched recursively (sorted; hidden
/// entries skipped) for `.yaml` and `.yml` files. Returns (path, named explicitly).
fn expand(paths: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>, Vec<Diagnostic>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for p in paths {
        if p.as_os_str() == STDIN_ARG {
            // Standard input can be read once: naming it twice adds nothing.
            if !out.iter().any(|(o, _)| o == p) {
                out.push((p.clone(), true));
            }
        } else if p.is_dir() {
            walk(p, &mut out, &mut errors);
        } else if p.exists() {
            out.push((p.clone(), true));
        } else {
            errors.push(file_problem(
                p,
                "no such file or directory",
                "a fleet file or a directory of them",
            ));
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, bool)>, errors: &mut Vec<Diagnostic>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(file_problem(dir, format!("cannot read directory: {e}"), ""));
            return;
        }
    };
    let mut children: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    children.sort();
    for child in children {
        let hidden = child
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if child.is_dir() {
            walk(&child, out, errors);
        } else if child
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e == "yaml" || e == "yml")
        {
            out.push((child, false));
        }
    }
}

/// See [`crate::load::load_paths`].
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<LoadedFleet>, Vec<Diagnostic>> {
    let files = expand(paths)?;
    let mut parsed = Vec::new();
    let mut errors = Vec::new();
    for (path, explicit) in files {
        let (path, text) = (display_path(&path), read_input(&path));
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                errors.push(file_problem(&path, format!("cannot read file: {e}"), ""));
                continue;
            }
        };
        match parse_file(&path, &text, explicit) {
            Ok(p) => parsed.extend(p),
            Err(e) => errors.extend(e),
        }
    }
    errors.extend(cross_check(&parsed));
    if !errors.is_empty() {
        errors.sort();
        errors.dedup();
        return Err(errors);
    }
    let mut fleets: Vec<LoadedFleet> = parsed
        .into_iter()
        .map(|p| LoadedFleet {
            path: p.path,
            fleet: p.fleet,
        })
        .collect();
    fleets.sort_by(|a, b| {
        (&a.fleet.metadata.namespace, &a.fleet.metadata.name)
            .cmp(&(&b.fleet.metadata.namespace, &b.fleet.metadata.name))
    });
    Ok(fleets)
}

/// Fleets that would collide in the cluster or in the bucket.
fn cross_check(parsed: &[Parsed]) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    let mut names: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut identities: BTreeMap<&str, usize> = BTreeMap::new();
    let mut buckets: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let here = |i: usize, field: &str| -> (PathBuf, Pos) {
        (parsed[i].path.clone(), rules::locate(&parsed[i].doc, field))
    };
    let mut report = |i: usize, field: &str, message: String, expected: &str| {
        let (file, pos) = here(i, field);
        errors.push(Diagnostic {
            file,
            line: pos.line,
            column: pos.column,
            field: field.to_string(),
            message,
            expected: expected.to_string(),
        });
    };
    for (i, p) in parsed.iter().enumerate() {
        let m = &p.fleet.metadata;
        let key = (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        );
        if let Some(&j) = names.get(&key) {
            report(
                i,
                "metadata.name",
                format!(
                    "fleet {}/{} is also defined in {}",
                    key.0,
                    key.1,
                    parsed[j].path.display()
                ),
                "one file per fleet",
            );
        } else {
            names.insert(key, i);
        }
        let id = p.fleet.spec.identity.as_str();
        if let Some(&j) = identities.get(id) {
            report(
                i,
                "spec.identity",
                format!(
                    "this identity is already used by the fleet in {}",
                    parsed[j].path.display()
                ),
                "a fresh identity from `celld-gen init` for each fleet; never copy one",
            );
        } else {
            identities.insert(id, i);
        }
        let s = &p.fleet.spec.storage;
        let others = buckets.entry(s.bucket.as_str()).or_default();
        for &j in others.iter() {
            let o = &parsed[j].fleet.spec.storage;
            // The whole bucket overlaps every prefix in it; two prefixes overlap if equal.
            let overlap = s.prefix.is_none() || o.prefix.is_none() || s.prefix == o.prefix;
            if overlap {
                report(
                    i,
                    "spec.storage.bucket",
                    format!(
                        "bucket `{}`{} overlaps the storage of the fleet in {}",
                        s.bucket,
                        s.prefix
                            .as_ref()
                            .map(|p| format!(" with prefix `{p}`"))
                            .unwrap_or_default(),
                        parsed[j].path.display()
                    ),
                    "a bucket, or a distinct prefix in a shared bucket, for each fleet",
                );
                break;
            }
        }
        others.push(i);
    }
    errors
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

/// Reads an input file, or standard input for `-` (read once and kept, so a second
/// reader, such as [`fleet_files`], sees the same text).
fn read_input(path: &Path) -> std::io::Result<String> {
    static STDIN: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    if path.as_os_str() != STDIN_ARG {
        return std::fs::read_to_string(path);
    }
    STDIN
        .get_or_init(|| std::io::read_to_string(std::io::stdin()).map_err(|e| e.to_string()))
        .clone()
        .map_err(std::io::Error::other)
}

/// Every input file that holds a fleet document (as diagnostics name it), for reports
/// that list each fleet file, such as `check --format junit`. Files that cannot be read
/// or parsed are left out: they have diagnostics of their own.
pub fn fleet_files(paths: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(files) = expand(paths) else {
        return Vec::new();
    };
    files
        .into_iter()
        .filter(|(path, explicit)| {
            read_input(path)
                .ok()
                .and_then(|text| yaml::parse(&text).ok())
                .is_some_and(|docs| {
                    docs.iter()
                        .any(|d| is_fleet_doc(d) && (*explicit || !is_rendered(d)))
                })
        })
        .map(|(path, _)| display_path(&path))
        .collect()
}

#[cfg(test)]
mod tests;
