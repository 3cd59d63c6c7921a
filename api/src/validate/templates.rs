//! Fleet files are data, not templates: a Helm-style `{{ }}` left in a value is reported
//! with a hint, so the user does not chase the field's own message.

use std::collections::BTreeSet;

use super::Problem;
use super::yaml::{Kind, Node, Pos};

/// Appended to problems found on a templated value.
pub const HINT: &str = "fleet files are not templates: `{{ }}` is not expanded by celld-gen; write the value itself, or render the template before celld-gen reads the file";

/// Whether `text` holds a Helm/Go template action.
pub fn looks_templated(text: &str) -> bool {
    text.find("{{")
        .is_some_and(|open| text[open..].contains("}}"))
}

/// Positions of every string value that looks templated.
fn templated_positions(node: &Node, out: &mut BTreeSet<Pos>) {
    match &node.kind {
        Kind::Str(s) if looks_templated(s) => {
            out.insert(node.pos);
        }
        Kind::Seq(items) => items.iter().for_each(|i| templated_positions(i, out)),
        Kind::Map(entries) => entries
            .iter()
            .for_each(|(_, v)| templated_positions(v, out)),
        _ => {}
    }
}

/// Adds the hint to every problem that points at a templated value.
pub fn add_hints(doc: &Node, problems: &mut [Problem]) {
    let mut at = BTreeSet::new();
    templated_positions(doc, &mut at);
    if at.is_empty() {
        return;
    }
    for p in problems.iter_mut().filter(|p| at.contains(&p.pos)) {
        p.message.push_str("; ");
        p.message.push_str(HINT);
    }
}
