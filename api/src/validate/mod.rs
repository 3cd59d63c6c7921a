//! Validation of one fleet document, in three passes over a located YAML tree:
//! 1. [`yaml`]: syntax, with refusal of anchors, tags and duplicate keys;
//! 2. [`schema`]: shape, against the CRD's own schema: every unknown field and wrong type;
//! 3. [`rules`]: meaning: formats, ranges, combinations, reserved names.

pub mod formats;
pub mod rules;
pub mod schema;
pub mod templates;
mod validated;
pub mod yaml;

use std::path::Path;

use crate::diagnostic::Diagnostic;
use crate::{CapacityMode, CelldFleet, labels};
pub use validated::ValidatedFleet;
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

    /// This problem in `file`.
    pub fn into_diagnostic(self, file: &Path) -> Diagnostic {
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

/// Edit distance between two strings (Levenshtein, by characters).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Validates one document already known to be a fleet.
pub fn validate_doc(doc: &Node) -> Result<ValidatedFleet, Vec<Problem>> {
    validate_doc_inner(doc).map_err(|mut problems| {
        templates::add_hints(doc, &mut problems);
        problems
    })
}

fn validate_doc_inner(doc: &Node) -> Result<ValidatedFleet, Vec<Problem>> {
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
    if !problems.is_empty() {
        return Err(problems);
    }
    ValidatedFleet::new(fleet).map_err(|(field, e)| {
        vec![Problem::new(
            rules::locate(doc, field),
            field,
            e.to_string(),
            "a URL the rules accept",
        )]
    })
}

/// A YAML syntax error, with the duplicate key's name and first place, or a hint when
/// the text looks like a Helm template.
pub fn syntax_diagnostic(path: &Path, text: &str, e: &yaml::SyntaxError) -> Diagnostic {
    let mut message = format!("invalid YAML: {}", e.message);
    let mut expected = String::new();
    if let Some(dup) = yaml::find_duplicate_key(text) {
        return Diagnostic {
            file: path.to_path_buf(),
            line: dup.second.line,
            column: dup.second.column,
            field: dup.path.clone(),
            message: format!(
                "duplicate key `{}`: it first appears at line {}, column {}",
                dup.name, dup.first.line, dup.first.column
            ),
            expected: "each key once per mapping; keep one of the two".to_owned(),
        };
    }
    let line_text = text.lines().nth(e.pos.line.saturating_sub(1)).unwrap_or("");
    if templates::looks_templated(line_text) {
        message.push_str(&format!("; {}", templates::HINT));
        expected = "plain YAML values".to_owned();
    }
    Diagnostic {
        file: path.to_path_buf(),
        line: e.pos.line.max(1),
        column: e.pos.column.max(1),
        field: String::new(),
        message,
        expected,
    }
}

/// A live CelldFleet, checked by exactly the rules a fleet file passes, so the healer
/// reports the same messages and never acts on a fleet the generator would refuse (the
/// CRD schema cannot express every rule, and a fleet may predate a rule). Only what a
/// fleet file holds is checked: name, namespace and spec (server-set metadata and the
/// status are not the user's to write). In External capacity mode the file leaves
/// `members` out and the `/scale` writer sets it live (the CRD bounds it there), so a
/// live value is not a problem. The result holds the name, namespace and whole spec.
pub fn validate_live(f: &CelldFleet) -> Result<ValidatedFleet, Vec<Diagnostic>> {
    let mut doc = serde_json::json!({
        "apiVersion": labels::API_VERSION,
        "kind": "CelldFleet",
        "metadata": {
            "name": f.metadata.name,
            "namespace": f.metadata.namespace,
        },
        "spec": f.spec,
    });
    if f.spec.capacity_mode() == Some(CapacityMode::External)
        && let Some(spec) = doc["spec"].as_object_mut()
    {
        spec.remove("members");
    }
    let path = Path::new(LIVE);
    // JSON is YAML: the same reader as for files, so positions and messages match.
    let text = doc.to_string();
    let mut docs = yaml::parse(&text).map_err(|e| vec![syntax_diagnostic(path, &text, &e)])?;
    let doc = match docs.len() {
        1 => docs.remove(0),
        n => {
            return Err(vec![Diagnostic::whole_file(
                path,
                format!("{n} documents"),
                "exactly one CelldFleet",
            )]);
        }
    };
    validate_doc(&doc).map_err(|problems| {
        problems
            .into_iter()
            .map(|p| p.into_diagnostic(path))
            .collect::<Vec<_>>()
    })?;
    let mut clean = CelldFleet::new(
        f.metadata.name.as_deref().unwrap_or_default(),
        f.spec.clone(),
    );
    clean.metadata.namespace = f.metadata.namespace.clone();
    ValidatedFleet::new(clean).map_err(|(field, e)| {
        vec![Diagnostic::whole_file(
            path,
            format!("{field}: {e}"),
            "a URL the rules accept",
        )]
    })
}

/// How diagnostics of [`validate_live`] name the object.
pub const LIVE: &str = "live";
