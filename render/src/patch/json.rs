//! RFC 6902 JSON Patch over a `serde_json::Value`, with RFC 6901 pointers. Every failure
//! says which path did not resolve, so a patch that no longer fits the rendering (a field
//! moved by an upgrade) is an error naming itself, never a silent no-op.

use serde_json::Value;

/// The six operations of RFC 6902.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Insert or set a value.
    Add,
    /// Remove a value that exists.
    Remove,
    /// Replace a value that exists.
    Replace,
    /// Move a value from `from` to `path`.
    Move,
    /// Copy a value from `from` to `path`.
    Copy,
    /// Fail unless the value at `path` equals `value`.
    Test,
}

impl OpKind {
    /// Every operation, by its name in a patch.
    pub const ALL: [(&'static str, OpKind); 6] = [
        ("add", OpKind::Add),
        ("remove", OpKind::Remove),
        ("replace", OpKind::Replace),
        ("move", OpKind::Move),
        ("copy", OpKind::Copy),
        ("test", OpKind::Test),
    ];

    /// Whether the operation takes `value`.
    pub fn takes_value(self) -> bool {
        matches!(self, OpKind::Add | OpKind::Replace | OpKind::Test)
    }

    /// Whether the operation takes `from`.
    pub fn takes_from(self) -> bool {
        matches!(self, OpKind::Move | OpKind::Copy)
    }
}

/// One operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// Which.
    pub op: OpKind,
    /// Target pointer.
    pub path: String,
    /// Source pointer (move, copy).
    pub from: Option<String>,
    /// The value (add, replace, test).
    pub value: Option<Value>,
}

/// The reference tokens of a pointer (`/a/b~1c` → `a`, `b/c`); an error unless it starts
/// with `/` (the empty pointer, the whole object, is refused: a patch edits inside it).
pub fn tokens(pointer: &str) -> Result<Vec<String>, String> {
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "`{pointer}` is not a JSON pointer below the object (it must start with `/`)"
        ));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn index(token: &str, len: usize, allow_end: bool, at: &str) -> Result<usize, String> {
    if token == "-" && allow_end {
        return Ok(len);
    }
    let i: usize = token
        .parse()
        .ok()
        .filter(|_| token == "0" || !token.starts_with('0'))
        .ok_or_else(|| format!("`{token}` in {at} is not a list index"))?;
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > max || (!allow_end && len == 0) {
        return Err(format!("{at} does not exist (the list has {len} items)"));
    }
    Ok(i)
}

/// The parent container of the pointer's last token, and that token.
fn parent<'a>(doc: &'a mut Value, pointer: &str) -> Result<(&'a mut Value, String), String> {
    let mut toks = tokens(pointer)?;
    let last = toks.pop().unwrap_or_default();
    let mut at = String::new();
    let mut node = doc;
    for t in toks {
        at.push('/');
        at.push_str(&t);
        node = match node {
            Value::Object(m) => m
                .get_mut(&t)
                .ok_or_else(|| format!("{at} does not exist"))?,
            Value::Array(a) => {
                let i = index(&t, a.len(), false, &at)?;
                &mut a[i]
            }
            _ => {
                return Err(format!(
                    "{at} is inside a value that is neither a map nor a list"
                ));
            }
        };
    }
    Ok((node, last))
}

fn get(doc: &Value, pointer: &str) -> Result<Value, String> {
    tokens(pointer)?;
    doc.pointer(pointer)
        .cloned()
        .ok_or_else(|| format!("{pointer} does not exist"))
}

fn add(doc: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    let (node, last) = parent(doc, pointer)?;
    match node {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let i = index(&last, a.len(), true, pointer)?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!(
            "the parent of {pointer} is neither a map nor a list"
        )),
    }
}

fn remove(doc: &mut Value, pointer: &str) -> Result<Value, String> {
    let (node, last) = parent(doc, pointer)?;
    match node {
        Value::Object(m) => m
            .remove(&last)
            .ok_or_else(|| format!("{pointer} does not exist")),
        Value::Array(a) => {
            let i = index(&last, a.len(), false, pointer)?;
            Ok(a.remove(i))
        }
        _ => Err(format!(
            "the parent of {pointer} is neither a map nor a list"
        )),
    }
}

/// Applies one operation to `doc`.
pub fn apply(doc: &mut Value, op: &Operation) -> Result<(), String> {
    let value = || op.value.clone().unwrap_or(Value::Null);
    let from = || op.from.clone().unwrap_or_default();
    match op.op {
        OpKind::Add => add(doc, &op.path, value()),
        OpKind::Remove => remove(doc, &op.path).map(drop),
        OpKind::Replace => {
            remove(doc, &op.path)?;
            add(doc, &op.path, value())
        }
        OpKind::Move => {
            let f = from();
            if op.path.starts_with(&format!("{f}/")) {
                return Err(format!("cannot move {f} into itself ({})", op.path));
            }
            let v = remove(doc, &f)?;
            add(doc, &op.path, v)
        }
        OpKind::Copy => {
            let v = get(doc, &from())?;
            add(doc, &op.path, v)
        }
        OpKind::Test => {
            let have = get(doc, &op.path)?;
            if have == value() {
                Ok(())
            } else {
                Err(format!(
                    "test failed: {} is {have}, not {}",
                    op.path,
                    value()
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(kind: OpKind, path: &str, from: Option<&str>, value: Option<Value>) -> Operation {
        Operation {
            op: kind,
            path: path.into(),
            from: from.map(Into::into),
            value,
        }
    }

    #[test]
    fn the_six_operations() {
        let mut d = json!({"a": {"b": [1, 2]}, "c~d/e": 1});
        apply(&mut d, &op(OpKind::Add, "/a/b/-", None, Some(json!(3)))).unwrap();
        apply(&mut d, &op(OpKind::Add, "/a/b/0", None, Some(json!(0)))).unwrap();
        assert_eq!(d["a"]["b"], json!([0, 1, 2, 3]));
        apply(&mut d, &op(OpKind::Remove, "/a/b/1", None, None)).unwrap();
        apply(
            &mut d,
            &op(OpKind::Replace, "/c~0d~1e", None, Some(json!(2))),
        )
        .unwrap();
        assert_eq!(d["c~d/e"], json!(2));
        apply(&mut d, &op(OpKind::Copy, "/x", Some("/a/b"), None)).unwrap();
        apply(&mut d, &op(OpKind::Move, "/y", Some("/a"), None)).unwrap();
        assert_eq!(
            d,
            json!({"y": {"b": [0, 2, 3]}, "c~d/e": 2, "x": [0, 2, 3]})
        );
        apply(&mut d, &op(OpKind::Test, "/x/0", None, Some(json!(0)))).unwrap();
        assert!(apply(&mut d, &op(OpKind::Test, "/x/0", None, Some(json!(9)))).is_err());
    }

    #[test]
    fn a_path_that_does_not_resolve_is_an_error() {
        let mut d = json!({"a": {"b": [1]}});
        for (o, want) in [
            (
                op(OpKind::Replace, "/a/c", None, Some(json!(1))),
                "/a/c does not exist",
            ),
            (op(OpKind::Remove, "/a/b/1", None, None), "does not exist"),
            (
                op(OpKind::Add, "/z/q", None, Some(json!(1))),
                "/z does not exist",
            ),
            (
                op(OpKind::Add, "/a/b/01", None, Some(json!(1))),
                "not a list index",
            ),
            (
                op(OpKind::Add, "a", None, Some(json!(1))),
                "must start with `/`",
            ),
            (op(OpKind::Move, "/a/b/x", Some("/a"), None), "into itself"),
        ] {
            let e = apply(&mut d, &o).unwrap_err();
            assert!(e.contains(want), "{o:?}: {e}");
        }
        assert_eq!(
            d,
            json!({"a": {"b": [1]}}),
            "a failed operation changes nothing"
        );
    }
}
