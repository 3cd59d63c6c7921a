//! Validation of fleet files' texts: each document is classified (a fleet, a near miss
//! that would drop a fleet, or other YAML), each fleet is validated by
//! [`celld_api::validate`] (the checks the healer also runs on live objects), then fleets
//! are checked against each other (identity, bucket, name). Every problem is reported
//! with file, line, column, field, what is wrong and what would be valid. Reading files
//! is [`crate::load`]'s job; this module never touches the file system.

use celld_api::validate::{Problem, edit_distance, rules, yaml};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::api::labels;
use crate::api::validate::ValidatedFleet;
use crate::api::validate::{syntax_diagnostic, validate_doc};
use crate::patch::PatchSet;
use celld_api::diagnostic::Diagnostic;
use yaml::{Node, Pos};

/// A fleet file that parsed and passed validation.
#[derive(Clone, Debug)]
pub struct LoadedFleet {
    /// Where it came from.
    pub path: PathBuf,
    /// The fleet, exactly as written (defaults are applied by accessors, not stored).
    pub fleet: ValidatedFleet,
    /// Its `CelldFleetPatch` documents, in file and document order.
    pub patches: Vec<crate::patch::PatchSet>,
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

fn file_problem(file: &Path, message: impl Into<String>, expected: &str) -> Diagnostic {
    Diagnostic::whole_file(file, message, expected)
}

/// A fleet document that validated, with its located tree (for cross-fleet messages).
struct Parsed {
    path: PathBuf,
    doc: Node,
    fleet: ValidatedFleet,
}

/// Whether a document is a fleet at all (so directories may hold other YAML).
fn is_fleet_doc(doc: &Node) -> bool {
    doc.get("kind").and_then(Node::as_str) == Some("CelldFleet")
}

/// What a document that is not a `kind: CelldFleet` is: a near miss that would silently
/// drop a fleet (an error), or other YAML (skipped, with a reason).
enum NotAFleet {
    NearMiss(Problem),
    Other(String),
}

/// Largest edit distance still taken for a typo of `CelldFleet` (case aside).
const KIND_TYPO_DISTANCE: usize = 2;

/// Fields only a fleet's spec has together; two of them make a document without `kind`
/// look like a fleet.
const FLEET_SPEC_MARKERS: [&str; 5] = [
    "identity",
    "profile",
    "runtimeImage",
    "storage",
    "placement",
];

fn classify(doc: &Node) -> NotAFleet {
    let api_version = doc.get("apiVersion").and_then(Node::as_str);
    let in_group = api_version.is_some_and(|v| {
        v == labels::GROUP
            || v.strip_prefix(labels::GROUP)
                .is_some_and(|r| r.starts_with('/'))
    });
    let kind_node = doc.get("kind");
    let kind = kind_node.and_then(Node::as_str);
    let at = kind_node.map_or(doc.pos, |k| k.pos);
    if let Some(k) = kind {
        let near = edit_distance(&k.to_ascii_lowercase(), "celldfleet") <= KIND_TYPO_DISTANCE;
        if near {
            return NotAFleet::NearMiss(Problem::new(
                at,
                "kind",
                format!(
                    "kind `{k}` is not `CelldFleet`, so this fleet would be skipped (and deleted from the output)"
                ),
                "kind: CelldFleet",
            ));
        }
        if in_group {
            return NotAFleet::NearMiss(Problem::new(
                at,
                "kind",
                format!(
                    "a `{}` document of kind `{k}` is not a fleet file; celld-gen reads only kind CelldFleet (it renders the other fleet.celld.dev objects itself)",
                    labels::GROUP
                ),
                "kind: CelldFleet, or move the file out of the fleet directory",
            ));
        }
        return NotAFleet::Other(format!("kind `{k}` is not CelldFleet"));
    }
    let markers: Vec<&str> = doc
        .get("spec")
        .map(|spec| {
            FLEET_SPEC_MARKERS
                .iter()
                .copied()
                .filter(|m| spec.get(m).is_some())
                .collect()
        })
        .unwrap_or_default();
    if in_group || markers.len() >= 2 {
        let why = if in_group {
            format!("its apiVersion is `{}`", api_version.unwrap_or_default())
        } else {
            format!(
                "its spec has {}",
                markers
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let problem = match kind_node {
            Some(k) => Problem::new(
                k.pos,
                "kind",
                format!(
                    "`kind` must be the string CelldFleet, found {}",
                    k.kind.type_name()
                ),
                "kind: CelldFleet",
            ),
            None => Problem::new(
                doc.pos,
                "kind",
                format!("no `kind`, but this looks like a fleet ({why}), so it would be skipped"),
                "kind: CelldFleet",
            ),
        };
        return NotAFleet::NearMiss(problem);
    }
    match kind_node {
        Some(k) => NotAFleet::Other(format!("kind is {}, not CelldFleet", k.kind.type_name())),
        None if matches!(doc.kind, yaml::Kind::Map(_)) => NotAFleet::Other("no `kind`".to_owned()),
        None => NotAFleet::Other(format!("not a mapping ({})", doc.kind.type_name())),
    }
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

/// Whether a file holds nothing but whitespace, comments and document markers.
fn is_blank(docs: &[Node]) -> bool {
    docs.iter().all(|d| matches!(d.kind, yaml::Kind::Null))
}

/// Parses and validates every fleet document in `text`. With `explicit`, a file without
/// any fleet is an error; otherwise (directory search) a file of other YAML is skipped
/// (the reason is returned), but a near miss (a kind typo, another fleet.celld.dev
/// kind, a fleet without `kind`, an empty file) is an error: skipping it would drop a
/// fleet without a word.
fn parse_file(path: &Path, text: &str, explicit: bool) -> Result<FileDocs, Vec<Diagnostic>> {
    let docs = yaml::parse(text).map_err(|e| vec![syntax_diagnostic(path, text, &e)])?;
    if is_blank(&docs) {
        return Err(vec![file_problem(
            path,
            "the file is empty (nothing but whitespace or comments); an interrupted `celld-gen init > file` leaves one behind",
            "a CelldFleet (see `celld-gen init`), or delete the file",
        )]);
    }
    let mut out = Vec::new();
    let mut patches = Vec::new();
    let mut errors = Vec::new();
    let mut others = Vec::new();
    for doc in docs {
        if matches!(doc.kind, yaml::Kind::Null) {
            continue;
        }
        if crate::patch::is_patch_doc(&doc) {
            match crate::patch::parse_patch_doc(path, text, &doc) {
                Ok(set) => patches.push(set),
                Err(e) => errors.extend(e),
            }
            continue;
        }
        if !is_fleet_doc(&doc) {
            match classify(&doc) {
                NotAFleet::NearMiss(p) => errors.push(p.into_diagnostic(path)),
                NotAFleet::Other(reason) => others.push(reason),
            }
            continue;
        }
        if !explicit && is_rendered(&doc) {
            others.push("a CelldFleet rendered by celld-gen (managed-by label)".to_owned());
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
    if explicit && out.is_empty() && patches.is_empty() && errors.is_empty() {
        errors.push(file_problem(
            path,
            format!("no CelldFleet found in this file ({})", others.join("; ")),
            "a document with `kind: CelldFleet` (see `celld-gen init`)",
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    others.dedup();
    let skipped = (out.is_empty() && patches.is_empty()).then(|| others.join("; "));
    Ok(FileDocs {
        fleets: out,
        patches,
        skipped,
    })
}

/// What one file holds: its fleets, its patch documents, and why it was skipped when it
/// holds neither.
struct FileDocs {
    fleets: Vec<Parsed>,
    patches: Vec<PatchSet>,
    skipped: Option<String>,
}

/// See [`crate::load::load_str`].
pub fn load_str(path: &Path, text: &str) -> Result<ValidatedFleet, Vec<Diagnostic>> {
    let mut parsed = parse_file(path, text, true)?.fleets;
    if parsed.len() != 1 {
        return Err(vec![file_problem(
            path,
            format!("{} fleets in one document stream", parsed.len()),
            "exactly one CelldFleet",
        )]);
    }
    Ok(parsed.remove(0).fleet)
}

/// Validates every source, then checks fleets against each other. Files of other YAML
/// found in directories are added to `skipped`.
pub fn load_sources(
    sources: &[Source],
    skipped: &mut Vec<Skipped>,
) -> Result<Vec<LoadedFleet>, Vec<Diagnostic>> {
    load_sources_with(sources, &[], skipped, &Default::default())
}

/// [`load_sources`], reporting a collision between fleets on the one that is new or
/// changed against `established` (the fleets already rendered, by
/// `<namespace>/<name>`), whatever the file order: the file a pull request adds or
/// changes is the one blamed, not an untouched one that happens to sort after it.
///
/// `siblings` are the other files beside a fleet file named on the command line: only
/// their `CelldFleetPatch` documents for the fleets read are taken (a patch file beside
/// its fleet file applies whether the folder or the file is named); anything else in
/// them, or a file that does not parse, is left alone.
pub fn load_sources_with(
    sources: &[Source],
    siblings: &[Source],
    skipped: &mut Vec<Skipped>,
    established: &BTreeMap<String, crate::api::CelldFleet>,
) -> Result<Vec<LoadedFleet>, Vec<Diagnostic>> {
    let mut parsed = Vec::new();
    let mut patch_sets = Vec::new();
    let mut errors = Vec::new();
    for s in sources {
        match parse_file(&s.path, &s.text, s.explicit) {
            Ok(FileDocs {
                fleets: p,
                patches: sets,
                skipped: reason,
            }) => {
                parsed.extend(p);
                patch_sets.extend(sets);
                if let Some(reason) = reason {
                    skipped.push(Skipped {
                        path: s.path.clone(),
                        reason,
                    });
                }
            }
            Err(e) => errors.extend(e),
        }
    }
    // Unchanged fleets first (a stable sort keeps file order otherwise): a collision is
    // reported on the later of two fleets.
    parsed.sort_by_key(|p| {
        let m = &p.fleet.metadata;
        let folder = format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or(""),
            m.name.as_deref().unwrap_or("")
        );
        established
            .get(&folder)
            .is_none_or(|was| was.spec != p.fleet.spec)
    });
    errors.extend(cross_check(&parsed));
    let named = |set: &PatchSet| {
        parsed.iter().any(|p| {
            p.fleet.metadata.namespace.as_deref() == Some(set.namespace.as_str())
                && p.fleet.metadata.name.as_deref() == Some(set.name.as_str())
        })
    };
    for s in siblings {
        let Ok(docs) = yaml::parse(&s.text) else {
            continue;
        };
        for doc in docs.iter().filter(|d| crate::patch::is_patch_doc(d)) {
            match crate::patch::parse_patch_doc(&s.path, &s.text, doc) {
                Ok(set) if named(&set) => patch_sets.push(set),
                Ok(_) => {}
                Err(e) => errors.extend(e),
            }
        }
    }
    // Every patch names a fleet among the inputs: one for a fleet that is not there
    // (renamed, or its file left out) is an error, never dropped.
    let mut by_fleet: BTreeMap<(String, String), Vec<PatchSet>> = BTreeMap::new();
    for set in patch_sets {
        let known = parsed.iter().any(|p| {
            p.fleet.metadata.namespace.as_deref() == Some(set.namespace.as_str())
                && p.fleet.metadata.name.as_deref() == Some(set.name.as_str())
        });
        if known {
            by_fleet
                .entry((set.namespace.clone(), set.name.clone()))
                .or_default()
                .push(set);
        } else {
            errors.push(Diagnostic {
                file: set.path.clone(),
                line: set.pos.line,
                column: set.pos.column,
                field: "metadata.name".into(),
                message: format!(
                    "this CelldFleetPatch is for {}/{}, which is not among the fleets read",
                    set.namespace, set.name
                ),
                expected: "the name and namespace of a fleet in the same run (render, check and diff read the patches with the fleets)".into(),
            });
        }
    }
    if !errors.is_empty() {
        errors.sort();
        errors.dedup();
        return Err(errors);
    }
    let mut fleets: Vec<LoadedFleet> = parsed
        .into_iter()
        .map(|p| {
            let key = (
                p.fleet.metadata.namespace.clone().unwrap_or_default(),
                p.fleet.metadata.name.clone().unwrap_or_default(),
            );
            LoadedFleet {
                path: p.path,
                fleet: p.fleet,
                patches: by_fleet.remove(&key).unwrap_or_default(),
            }
        })
        .collect();
    fleets.sort_by(|a, b| {
        (&a.fleet.metadata.namespace, &a.fleet.metadata.name)
            .cmp(&(&b.fleet.metadata.namespace, &b.fleet.metadata.name))
    });
    Ok(fleets)
}

/// Fleets that would collide in the cluster, in the bucket or on a routed hostname.
fn cross_check(parsed: &[Parsed]) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    let mut names: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut identities: BTreeMap<&str, usize> = BTreeMap::new();
    let mut buckets: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut hosts: BTreeMap<&str, usize> = BTreeMap::new();
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
        // A hostname routed to two fleets sends some of its traffic to each (Gateway and
        // Ingress controllers merge or pick one): each hostname to one fleet.
        for (h, host) in p
            .fleet
            .spec
            .routing
            .iter()
            .flat_map(|r| r.hostnames.iter())
            .enumerate()
        {
            if let Some(&j) = hosts.get(host.as_str()) {
                report(
                    i,
                    &format!("spec.routing.hostnames[{h}]"),
                    format!(
                        "hostname `{host}` is already routed to the fleet in {}",
                        parsed[j].path.display()
                    ),
                    "each hostname routed to one fleet",
                );
            } else {
                hosts.insert(host.as_str(), i);
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests;
