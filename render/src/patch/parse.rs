//! Reading a `CelldFleetPatch` document from its located YAML tree: every problem with
//! file, line, column and field, and what would be valid; unknown fields are refused
//! with the nearest known name.

use std::path::Path;

use celld_api::validate::yaml::{Kind, Node};

use super::json::{OpKind, Operation};
use super::{Change, Patch, PatchSet};
use crate::api::labels;
use celld_api::diagnostic::Diagnostic;

/// The kind of a patch document.
pub const PATCH_KIND: &str = "CelldFleetPatch";

/// Most patches in one document.
const MAX_PATCHES: usize = 64;

/// Whether a document is a `CelldFleetPatch`.
pub fn is_patch_doc(doc: &Node) -> bool {
    doc.get("kind").and_then(Node::as_str) == Some(PATCH_KIND)
}

struct Reader<'a> {
    path: &'a Path,
    /// The file's text, to read a number as it was written.
    text: &'a str,
    errors: Vec<Diagnostic>,
}

impl Reader<'_> {
    fn fail(&mut self, node: &Node, field: &str, message: impl Into<String>, expected: &str) {
        self.errors.push(Diagnostic {
            file: self.path.to_path_buf(),
            line: node.pos.line,
            column: node.pos.column,
            field: field.to_string(),
            message: message.into(),
            expected: expected.to_string(),
        });
    }

    /// The entries of a mapping, refusing keys outside `known` (with a suggestion).
    fn map<'n>(&mut self, node: &'n Node, field: &str, known: &[&str]) -> Vec<(&'n str, &'n Node)> {
        let Kind::Map(entries) = &node.kind else {
            self.fail(
                node,
                field,
                format!("expected a mapping, found {}", node.kind.type_name()),
                &format!("a mapping with {}", known.join(", ")),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in entries {
            if known.contains(&k.name.as_str()) {
                out.push((k.name.as_str(), v));
                continue;
            }
            let message = celld_api::validate::schema::unknown_field(&k.name, known);
            let f = join(field, &k.name);
            self.errors.push(Diagnostic {
                file: self.path.to_path_buf(),
                line: k.pos.line,
                column: k.pos.column,
                field: f,
                message,
                expected: format!("one of {}", known.join(", ")),
            });
        }
        out
    }

    /// Refuses numbers in a patch value that YAML 1.2 (this parser) and YAML 1.1
    /// (kubectl and most Kubernetes tools) read differently: `0644` is 644 here and 420
    /// there, `0o644` an octal here and a string there. A patched `defaultMode` would
    /// otherwise change without a word.
    fn plain_numbers(&mut self, node: &Node, field: &str) {
        match &node.kind {
            Kind::Int(_) | Kind::Float(_) => {
                let token: String = self
                    .text
                    .lines()
                    .nth(node.pos.line.saturating_sub(1))
                    .unwrap_or("")
                    .chars()
                    .skip(node.pos.column.saturating_sub(1))
                    .take_while(|c| !matches!(c, ',' | ']' | '}' | ' ' | '#'))
                    .collect();
                let digits = token.trim_start_matches(['-', '+']);
                let ambiguous = digits.starts_with("0o")
                    || (digits.len() > 1
                        && digits.starts_with('0')
                        && digits[1..].bytes().all(|b| b.is_ascii_digit() || b == b'_'));
                if ambiguous {
                    self.fail(
                        node,
                        field,
                        format!("`{token}` is read as a different number by kubectl (YAML 1.1) than here"),
                        "the number in decimal (an octal file mode 0644 is 420), or quoted if a string is meant",
                    );
                }
            }
            Kind::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.plain_numbers(item, &format!("{field}[{i}]"));
                }
            }
            Kind::Map(entries) => {
                for (k, v) in entries {
                    self.plain_numbers(v, &join(field, &k.name));
                }
            }
            _ => {}
        }
    }

    fn string(&mut self, node: &Node, field: &str, expected: &str) -> Option<String> {
        match node.as_str() {
            Some(s) if !s.is_empty() => Some(s.to_string()),
            _ => {
                self.fail(node, field, "expected a non-empty string", expected);
                None
            }
        }
    }
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

/// Reads one `CelldFleetPatch` document of `path`, whose text is `text`.
pub fn parse_patch_doc(path: &Path, text: &str, doc: &Node) -> Result<PatchSet, Vec<Diagnostic>> {
    let mut r = Reader {
        path,
        text,
        errors: Vec::new(),
    };
    let top = r.map(doc, "", &["apiVersion", "kind", "metadata", "patches"]);
    let get = |k: &str| top.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    match get("apiVersion") {
        Some(v) if v.as_str() == Some(labels::API_VERSION) => {}
        Some(v) => r.fail(
            v,
            "apiVersion",
            "not the fleet API version",
            labels::API_VERSION,
        ),
        None => r.fail(doc, "apiVersion", "missing", labels::API_VERSION),
    }
    let (mut name, mut namespace, mut pos) = (None, None, doc.pos);
    match get("metadata") {
        Some(m) => {
            for (k, v) in r.map(m, "metadata", &["name", "namespace"]) {
                let value = r.string(
                    v,
                    &format!("metadata.{k}"),
                    "the fleet's name and namespace",
                );
                if k == "name" {
                    name = value;
                    pos = v.pos;
                } else {
                    namespace = value;
                }
            }
            if name.is_none() || namespace.is_none() {
                r.fail(
                    m,
                    "metadata",
                    "a patch names its fleet by name and namespace",
                    "metadata: {name: <fleet>, namespace: <namespace>}",
                );
            }
        }
        None => r.fail(
            doc,
            "metadata",
            "missing",
            "metadata: {name: <fleet>, namespace: <namespace>}",
        ),
    }
    let mut patches = Vec::new();
    match get("patches").map(|p| (p, &p.kind)) {
        Some((p, Kind::Seq(items))) if !items.is_empty() && items.len() <= MAX_PATCHES => {
            for (i, item) in items.iter().enumerate() {
                if let Some(patch) = read_patch(&mut r, item, &format!("patches[{i}]")) {
                    patches.push(patch);
                }
            }
            let _ = p;
        }
        Some((p, _)) => r.fail(
            p,
            "patches",
            "expected a list of 1 to 64 patches",
            "patches: [{target: {kind: StatefulSet}, jsonPatch: [...]}]",
        ),
        None => r.fail(doc, "patches", "missing", "patches: a list of patches"),
    }
    if !r.errors.is_empty() {
        return Err(r.errors);
    }
    Ok(PatchSet {
        path: path.to_path_buf(),
        pos,
        namespace: namespace.unwrap_or_default(),
        name: name.unwrap_or_default(),
        patches,
    })
}

fn read_patch(r: &mut Reader<'_>, node: &Node, field: &str) -> Option<Patch> {
    let entries = r.map(node, field, &["target", "jsonPatch", "strategicMerge"]);
    let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let before = r.errors.len();
    let (mut kind, mut name) = (None, None);
    match get("target") {
        Some(t) => {
            for (k, v) in r.map(t, &format!("{field}.target"), &["kind", "name"]) {
                let value = r.string(
                    v,
                    &format!("{field}.target.{k}"),
                    "a kind such as StatefulSet, and optionally a name",
                );
                if k == "kind" {
                    kind = value;
                } else {
                    name = value;
                }
            }
            if kind.is_none() && r.errors.len() == before {
                r.fail(
                    t,
                    &format!("{field}.target"),
                    "the target needs a kind",
                    "target: {kind: StatefulSet}",
                );
            }
        }
        None => r.fail(
            node,
            &format!("{field}.target"),
            "missing",
            "target: {kind: <kind>, name: <name, default the fleet's>}",
        ),
    }
    let change = match (get("jsonPatch"), get("strategicMerge")) {
        (Some(ops), None) => read_ops(r, ops, &format!("{field}.jsonPatch")).map(Change::Json),
        (None, Some(m)) if matches!(m.kind, Kind::Map(_)) => {
            r.plain_numbers(m, &format!("{field}.strategicMerge"));
            Some(Change::Merge(m.to_json()))
        }
        (None, Some(m)) => {
            r.fail(
                m,
                &format!("{field}.strategicMerge"),
                "expected a mapping",
                "the fields to merge into the object, as in the object",
            );
            None
        }
        _ => {
            r.fail(
                node,
                field,
                "a patch needs exactly one of jsonPatch or strategicMerge",
                "jsonPatch: [RFC 6902 operations], or strategicMerge: {fields}",
            );
            None
        }
    };
    if r.errors.len() != before {
        return None;
    }
    Some(Patch {
        field: field.to_string(),
        pos: node.pos,
        kind: kind?,
        name,
        change: change?,
    })
}

fn read_ops(
    r: &mut Reader<'_>,
    node: &Node,
    field: &str,
) -> Option<Vec<(String, celld_api::validate::yaml::Pos, Operation)>> {
    let Kind::Seq(items) = &node.kind else {
        r.fail(
            node,
            field,
            "expected a list of operations",
            "[{op: add, path: /spec/..., value: ...}]",
        );
        return None;
    };
    if items.is_empty() {
        r.fail(node, field, "no operations", "at least one operation");
        return None;
    }
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let entries = r.map(item, &f, &["op", "path", "from", "value"]);
        let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let names: Vec<&str> = OpKind::ALL.iter().map(|(n, _)| *n).collect();
        let op = match get("op") {
            Some(o) => match OpKind::ALL.iter().find(|(n, _)| Some(*n) == o.as_str()) {
                Some((_, k)) => Some(*k),
                None => {
                    r.fail(
                        o,
                        &format!("{f}.op"),
                        format!(
                            "`{}` is not an RFC 6902 operation",
                            o.as_str().unwrap_or("?")
                        ),
                        &format!("one of {}", names.join(", ")),
                    );
                    None
                }
            },
            None => {
                r.fail(
                    item,
                    &format!("{f}.op"),
                    "missing",
                    &format!("one of {}", names.join(", ")),
                );
                None
            }
        };
        let pointer = |r: &mut Reader<'_>, key: &str| -> Option<String> {
            let n = get(key)?;
            let s = r.string(
                n,
                &format!("{f}.{key}"),
                "a JSON pointer such as /spec/template/spec/dnsConfig",
            )?;
            if let Err(e) = super::json::tokens(&s) {
                r.fail(
                    n,
                    &format!("{f}.{key}"),
                    e,
                    "a JSON pointer such as /spec/template/spec/dnsConfig",
                );
                return None;
            }
            Some(s)
        };
        let path = pointer(r, "path");
        let from = pointer(r, "from");
        let Some(op) = op else { continue };
        if get("path").is_none() {
            r.fail(item, &format!("{f}.path"), "missing", "a JSON pointer");
        }
        if op.takes_value() != get("value").is_some() {
            r.fail(
                item,
                &format!("{f}.value"),
                format!(
                    "`{}` {} a value",
                    names[OpKind::ALL.iter().position(|(_, k)| *k == op).unwrap_or(0)],
                    if op.takes_value() {
                        "needs"
                    } else {
                        "takes no"
                    }
                ),
                "value with add, replace and test only",
            );
        }
        if op.takes_from() != get("from").is_some() {
            r.fail(
                item,
                &format!("{f}.from"),
                "`from` goes with move and copy, and only with them",
                "from: a JSON pointer, with move or copy",
            );
        }
        if let Some(v) = get("value") {
            r.plain_numbers(v, &format!("{f}.value"));
        }
        if let Some(path) = path {
            out.push((
                f,
                item.pos,
                Operation {
                    op,
                    path,
                    from,
                    value: get("value").map(Node::to_json),
                },
            ));
        }
    }
    Some(out)
}
