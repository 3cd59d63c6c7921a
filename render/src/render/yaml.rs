//! The two ways a value gets into rendered YAML: [`quote`] for every string that comes
//! from the fleet file or is computed from it, and [`block`] for whole maps and lists
//! (user labels, annotations, the CelldFleet spec).
//!
//! Strings are always written double-quoted with JSON-compatible escapes, so no value can
//! be retyped by a YAML parser (`"on"`, `"0755"`, `"1e3"`, `"null"` stay strings) and no
//! value can break out of its line. Numbers and booleans are written plain. Map keys are
//! written plain only when they are unambiguous identifiers or label keys, else quoted.

use std::fmt::Write as _;

use serde_json::Value;

/// `s` as a YAML double-quoted scalar. The escapes used (`\"`, `\\`, `\n`, `\t`, `\r`,
/// `\uXXXX`) mean the same in JSON and YAML, so the result is also a JSON string.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    quote_into(s, &mut out);
    out
}

fn quote_into(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            // C0 and C1 controls, DEL, the Unicode line and paragraph separators, a BOM
            // and the non-characters YAML refuses: escaped, never written raw.
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn needs_escape(c: char) -> bool {
    let n = c as u32;
    n < 0x20
        || (0x7f..=0x9f).contains(&n)
        || matches!(n, 0x2028 | 0x2029 | 0xfeff | 0xfffe | 0xffff)
}

/// Words a YAML 1.1 parser reads as booleans or null: never written as plain keys.
const AMBIGUOUS_WORDS: &[&str] = &["y", "yes", "n", "no", "on", "off", "true", "false", "null"];

/// `key` as a mapping key: plain when it is a letter followed by letters, digits and
/// `. _ / -` (label keys, field names) and no YAML 1.1 keyword; quoted otherwise.
pub fn key(key: &str) -> String {
    let plain = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
        && !AMBIGUOUS_WORDS.iter().any(|w| w.eq_ignore_ascii_case(key));
    if plain { key.to_owned() } else { quote(key) }
}

/// A scalar as YAML; `None` for maps and lists.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("null".to_owned()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(quote(s)),
        Value::Array(a) if a.is_empty() => Some("[]".to_owned()),
        Value::Object(o) if o.is_empty() => Some("{}".to_owned()),
        _ => None,
    }
}

/// A Kubernetes object as a YAML document: `apiVersion`, `kind`, `metadata` and `spec`
/// first, as objects are read, then any other field; keys below them sorted
/// ([`block`]). Ends with a newline.
pub fn object(v: &Value) -> String {
    const HEAD: [&str; 4] = ["apiVersion", "kind", "metadata", "spec"];
    let Value::Object(map) = v else {
        return format!("{}\n", block(v, 0));
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by_key(|k| (HEAD.iter().position(|h| h == k).unwrap_or(HEAD.len()), *k));
    let mut out = String::new();
    for k in keys {
        let one = Value::Object(serde_json::Map::from_iter([(k.clone(), map[k].clone())]));
        out.push_str(&block(&one, 0));
        out.push('\n');
    }
    out
}

/// A map or list as block YAML, every line indented by `indent` spaces, lines separated by
/// `\n`, no trailing newline. Map keys are written sorted, whatever the map's own order,
/// so the output never depends on how the value was built. List items are written at the
/// indentation of their parent key (`key:\n- item`), as kubectl does. A scalar is
/// written as itself on one line.
pub fn block(v: &Value, indent: usize) -> String {
    let mut lines = Vec::new();
    emit(v, indent, &mut lines);
    lines.join("\n")
}

fn emit(v: &Value, indent: usize, lines: &mut Vec<String>) {
    if let Some(s) = scalar(v) {
        lines.push(format!("{:indent$}{s}", ""));
        return;
    }
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for k in keys {
                let child = &map[k];
                let head = format!("{:indent$}{}:", "", key(k));
                match (scalar(child), child) {
                    (Some(s), _) => lines.push(format!("{head} {s}")),
                    (None, Value::Array(_)) => {
                        lines.push(head);
                        emit(child, indent, lines);
                    }
                    (None, _) => {
                        lines.push(head);
                        emit(child, indent + 2, lines);
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                if let Some(s) = scalar(item) {
                    lines.push(format!("{:indent$}- {s}", ""));
                    continue;
                }
                // Render the item two columns in, then turn the first line's indentation
                // into the `- ` marker.
                let start = lines.len();
                emit(item, indent + 2, lines);
                let first = &mut lines[start];
                first.replace_range(..indent + 2, &format!("{:indent$}- ", ""));
            }
        }
        _ => unreachable!("scalars are handled above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_quoted_and_escaped() {
        assert_eq!(quote("plain"), r#""plain""#);
        assert_eq!(quote("on"), r#""on""#);
        assert_eq!(quote("a\"b\\c\nd\te"), r#""a\"b\\c\nd\te""#);
        assert_eq!(quote("\u{1}\u{85}\u{2028}é"), "\"\\u0001\\u0085\\u2028é\"");
    }

    #[test]
    fn quoted_strings_parse_back_as_the_same_string_in_yaml_and_json() {
        for s in [
            "yes",
            "0755",
            "1e3",
            "null",
            "~",
            "- a",
            "a: b",
            "#x",
            "'q'",
            "\"",
            "é\u{7f}",
            "line\nbreak",
            "tab\there",
            "",
            " lead",
            "trail ",
            "*alias",
            "&anchor",
            "!tag",
            "%",
            "@",
            "`",
            "{a}",
            "[a]",
            "\u{feff}bom",
        ] {
            let q = quote(s);
            let y: String = serde_saphyr::from_str(&format!("v: {q}\n"))
                .map(|m: std::collections::BTreeMap<String, String>| m["v"].clone())
                .unwrap_or_else(|e| panic!("{q}: {e}"));
            assert_eq!(y, s);
            let j: String = serde_json::from_str(&q).unwrap();
            assert_eq!(j, s);
        }
    }

    #[test]
    fn keys_are_plain_only_when_unambiguous() {
        assert_eq!(key("app.kubernetes.io/name"), "app.kubernetes.io/name");
        assert_eq!(key("bucketWorkload"), "bucketWorkload");
        assert_eq!(key("on"), r#""on""#);
        assert_eq!(key("No"), r#""No""#);
        assert_eq!(key("1a"), r#""1a""#);
        assert_eq!(key("a b"), r#""a b""#);
        assert_eq!(key(""), r#""""#);
    }

    #[test]
    fn blocks_nest_maps_and_lists() {
        let v = json!({
            "b": [1, {"x": "y", "a": true}, [], {}, ["n"]],
            "a": {"c": null, "d": {}},
        });
        let expected = [
            "  a:",
            "    c: null",
            "    d: {}",
            "  b:",
            "  - 1",
            "  - a: true",
            "    x: \"y\"",
            "  - []",
            "  - {}",
            "  - - \"n\"",
        ]
        .join("\n");
        assert_eq!(block(&v, 2), expected);
        let back: Value = serde_saphyr::from_str(&format!("root:\n{expected}\n")).unwrap();
        assert_eq!(back["root"], v);
    }
}
