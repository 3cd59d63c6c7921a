//! A fleet file parsed into a tree that remembers where every node came from, so each
//! problem found later can point at its line and column.

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

/// A position in the source: 1-based line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

/// A YAML node with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Where the node starts.
    pub pos: Pos,
    /// What it holds.
    pub kind: Kind,
}

/// The value of a node, with YAML 1.2 core-schema scalars already resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// `~`, `null` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string (quoted, or plain that is no other type).
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping with string keys, in file order.
    Map(Vec<(Key, Node)>),
}

/// A mapping key with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    /// The key text.
    pub name: String,
    /// Where the key starts.
    pub pos: Pos,
}

/// Why a file could not be read as YAML at all.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntaxError {
    /// Where.
    pub pos: Pos,
    /// What.
    pub message: String,
}

impl Kind {
    /// Short name of the type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool(_) => "a boolean",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }
}

impl Node {
    /// The value of `key` if this is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            Kind::Map(entries) => entries.iter().find(|(k, _)| k.name == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string value, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Converts to JSON for typed deserialization. Floats that are whole stay floats, so a
    /// `members: 3.0` is still refused by the schema check before it gets here.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Int(i) => Value::from(*i),
            Kind::Float(f) => serde_json::Number::from_f64(*f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            Kind::Str(s) => Value::String(s.clone()),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.name.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

fn pos_of(m: &saphyr::Marker) -> Pos {
    Pos {
        line: m.line(),
        column: m.col() + 1,
    }
}

/// Parses every document in `text`. Tags, unresolved aliases and non-string keys are
/// refused with a located error: fleet files are plain data.
pub fn parse(text: &str) -> Result<Vec<Node>, SyntaxError> {
    let docs = MarkedYaml::load_from_str(text).map_err(|e| SyntaxError {
        pos: pos_of(e.marker()),
        message: e.info().to_string(),
    })?;
    docs.iter().map(convert).collect()
}

fn convert(y: &MarkedYaml<'_>) -> Result<Node, SyntaxError> {
    let pos = pos_of(&y.span.start);
    let err = |message: &str| SyntaxError {
        pos,
        message: message.to_string(),
    };
    let kind = match &y.data {
        YamlData::Value(s) => match s {
            Scalar::Null => Kind::Null,
            Scalar::Boolean(b) => Kind::Bool(*b),
            Scalar::Integer(i) => Kind::Int(*i),
            Scalar::FloatingPoint(f) => Kind::Float(f.into_inner()),
            Scalar::String(s) => Kind::Str(s.to_string()),
        },
        YamlData::Representation(text, _, _) => Kind::Str(text.to_string()),
        YamlData::Sequence(items) => {
            Kind::Seq(items.iter().map(convert).collect::<Result<_, _>>()?)
        }
        YamlData::Mapping(map) => {
            let mut entries = Vec::with_capacity(map.len());
            for (k, v) in map.iter() {
                let key_pos = pos_of(&k.span.start);
                let name = match &k.data {
                    YamlData::Value(Scalar::String(s)) => s.to_string(),
                    YamlData::Value(Scalar::Integer(i)) => i.to_string(),
                    YamlData::Value(Scalar::Boolean(b)) => b.to_string(),
                    _ => {
                        return Err(SyntaxError {
                            pos: key_pos,
                            message: "mapping keys must be plain strings".to_string(),
                        });
                    }
                };
                entries.push((Key { name, pos: key_pos }, convert(v)?));
            }
            Kind::Map(entries)
        }
        YamlData::Tagged(_, _) => return Err(err("YAML tags are not supported in fleet files")),
        YamlData::Alias(_) => {
            return Err(err(
                "YAML anchors and aliases are not supported in fleet files",
            ));
        }
        YamlData::BadValue => return Err(err("this value could not be read")),
    };
    Ok(Node { pos, kind })
}

/// A key written twice in one mapping.
#[derive(Clone, Debug, PartialEq)]
pub struct DuplicateKey {
    /// The key.
    pub name: String,
    /// Path of the mapping's field, e.g. `spec.storage.bucket`.
    pub path: String,
    /// Where it first appears.
    pub first: Pos,
    /// Where it appears again.
    pub second: Pos,
}

/// Finds the first duplicate key in `text`, walking the parser's events (the tree loader
/// only says that a key is duplicated, not which one nor where it was first).
pub fn find_duplicate_key(text: &str) -> Option<DuplicateKey> {
    use saphyr_parser::{Event, Parser};
    use std::collections::BTreeMap;

    enum Frame {
        Map {
            keys: BTreeMap<String, Pos>,
            /// The next node is a key (not a value).
            at_key: bool,
            /// The key whose value is being read.
            current: Option<String>,
        },
        Seq(usize),
    }
    let path_of = |stack: &[Frame], leaf: &str| -> String {
        let mut path = String::new();
        for f in stack {
            match f {
                Frame::Map {
                    current: Some(k), ..
                } => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                }
                Frame::Seq(i) => path.push_str(&format!("[{}]", i.saturating_sub(1))),
                Frame::Map { .. } => {}
            }
        }
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(leaf);
        path
    };
    let mut stack: Vec<Frame> = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.ok()?;
        let pos = pos_of(&span.start);
        // A node starts: if the enclosing mapping expects a key, this is a key.
        let starts_node = matches!(
            event,
            Event::Scalar(..)
                | Event::MappingStart(..)
                | Event::SequenceStart(..)
                | Event::Alias(_)
        );
        if starts_node {
            let len = stack.len();
            match stack.last_mut() {
                Some(Frame::Map {
                    keys,
                    at_key,
                    current,
                }) => {
                    if *at_key {
                        if let Event::Scalar(ref name, ..) = event {
                            let name = name.to_string();
                            if let Some(&first) = keys.get(&name) {
                                let leaf = name.clone();
                                let frames = &stack[..len - 1];
                                return Some(DuplicateKey {
                                    path: path_of(frames, &leaf),
                                    name,
                                    first,
                                    second: pos,
                                });
                            }
                            keys.insert(name.clone(), pos);
                            *current = Some(name);
                        } else {
                            *current = None;
                        }
                    }
                    *at_key = !*at_key;
                }
                Some(Frame::Seq(i)) => *i += 1,
                None => {}
            }
        }
        match event {
            Event::MappingStart(..) => stack.push(Frame::Map {
                keys: BTreeMap::new(),
                at_key: true,
                current: None,
            }),
            Event::SequenceStart(..) => stack.push(Frame::Seq(0)),
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
            }
            // A key that is itself a collection: its events are skipped by the stack.
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_scalars_resolved() {
        let docs = parse("a: 1\nb:\n  - \"2\"\n  - no\n").unwrap_or_default();
        assert_eq!(docs.len(), 1);
        let a = docs[0].get("a").map(|n| (n.pos, n.kind.clone()));
        assert_eq!(a, Some((Pos { line: 1, column: 4 }, Kind::Int(1))));
        let b = docs[0].get("b").map(|n| n.kind.clone());
        match b {
            Some(Kind::Seq(items)) => {
                assert_eq!(items[0].kind, Kind::Str("2".into()));
                // YAML 1.2: `no` is a string, not a boolean.
                assert_eq!(items[1].kind, Kind::Str("no".into()));
                assert_eq!(items[1].pos, Pos { line: 4, column: 5 });
            }
            other => panic!("expected a list, got {other:?}"),
        }
    }

    #[test]
    fn duplicate_keys_are_named_with_their_first_place() {
        let d = find_duplicate_key("a: 1\nb:\n  c: [1, {x: 1}]\n  c: 2\n");
        assert_eq!(
            d,
            Some(DuplicateKey {
                name: "c".into(),
                path: "b.c".into(),
                first: Pos { line: 3, column: 3 },
                second: Pos { line: 4, column: 3 },
            })
        );
        assert_eq!(find_duplicate_key("a: 1\nb: {a: 1}\n"), None);
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let e = parse("a: 1\na: 2\n").err();
        assert!(e.is_some_and(|e| e.pos.line == 2));
    }
}
