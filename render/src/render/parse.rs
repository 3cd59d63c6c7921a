//! A strict YAML reader for rendered objects: the YAML structure comes from
//! `saphyr-parser` (a YAML 1.2 parser), scalars are resolved the cautious way: a plain
//! scalar that any common Kubernetes tool could read differently (YAML 1.1 booleans such
//! as `on`, octal-looking `0755`, sexagesimal `1:30`) is an error, not a guess.
//!
//! It is about three times faster than deserializing with serde-saphyr, which matters
//! because every rendered object is read back (see [`super::roundtrip`]); the golden tests
//! cross-check it against serde-saphyr on every example.

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Number, Value};

/// Reads exactly one YAML document into a JSON value.
pub fn parse_document(text: &str) -> Result<Value, String> {
    let parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Value> = None;
    let mut documents = 0;
    for next in parser {
        let (event, span) = next.map_err(|e| e.to_string())?;
        let at = || format!("line {}", span.start.line());
        let value = match event {
            Event::StreamStart | Event::Nothing | Event::DocumentEnd => continue,
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(format!("{}: a second YAML document", at()));
                }
                continue;
            }
            Event::Alias(_) => return Err(format!("{}: aliases are not used here", at())),
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return Err(format!("{}: anchors and tags are not used here", at()));
                }
                // A key is always read as a string; a plain key that a YAML 1.1 reader
                // would turn into something else is refused.
                let is_key = matches!(stack.last(), Some(Frame::Map(_, None)));
                let v = if style == ScalarStyle::Plain {
                    resolve_plain(&text).map_err(|e| format!("{}: {e}", at()))?
                } else {
                    Value::String(text.into_owned())
                };
                if is_key {
                    match v {
                        Value::String(s) => {
                            if let Some(Frame::Map(_, key)) = stack.last_mut() {
                                *key = Some(s);
                            }
                            continue;
                        }
                        other => {
                            return Err(format!(
                                "{}: mapping key {other} is not a string (quote it)",
                                at()
                            ));
                        }
                    }
                }
                v
            }
            Event::SequenceStart(anchor, tag) | Event::MappingStart(anchor, tag)
                if anchor != 0 || tag.is_some() =>
            {
                return Err(format!("{}: anchors and tags are not used here", at()));
            }
            Event::SequenceStart(..) => {
                if matches!(stack.last(), Some(Frame::Map(_, None))) {
                    return Err(format!("{}: a sequence as a mapping key", at()));
                }
                stack.push(Frame::Seq(Vec::new()));
                continue;
            }
            Event::MappingStart(..) => {
                if matches!(stack.last(), Some(Frame::Map(_, None))) {
                    return Err(format!("{}: a mapping as a mapping key", at()));
                }
                stack.push(Frame::Map(Map::new(), None));
                continue;
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(items)) => Value::Array(items),
                _ => return Err(format!("{}: unbalanced sequence", at())),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(map, None)) => Value::Object(map),
                _ => return Err(format!("{}: unbalanced mapping", at())),
            },
        };
        match stack.last_mut() {
            None => root = Some(value),
            Some(Frame::Seq(items)) => items.push(value),
            Some(Frame::Map(map, key)) => {
                let k = key.take().expect("a value follows its key");
                if map.contains_key(&k) {
                    return Err(format!("{}: duplicate key {k:?}", at()));
                }
                map.insert(k, value);
            }
        }
    }
    root.ok_or_else(|| "no YAML document".to_owned())
}

enum Frame {
    Seq(Vec<Value>),
    Map(Map<String, Value>, Option<String>),
}

/// Resolves a plain scalar: null, booleans (YAML 1.2 spellings), integers and floats
/// (YAML 1.2 core schema), else a string. Spellings that YAML 1.1 readers (go-yaml v2,
/// PyYAML) type differently from YAML 1.2 readers are errors.
fn resolve_plain(s: &str) -> Result<Value, String> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Value::Null),
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        "y" | "Y" | "yes" | "Yes" | "YES" | "n" | "N" | "no" | "No" | "NO" | "on" | "On" | "ON"
        | "off" | "Off" | "OFF" => {
            return Err(format!(
                "plain {s:?} is a boolean to YAML 1.1 readers and a string to YAML 1.2 readers"
            ));
        }
        _ => {}
    }
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    let first = unsigned.bytes().next();
    if !first.is_some_and(|b| b.is_ascii_digit() || b == b'.') {
        return Ok(Value::String(s.to_owned()));
    }
    if unsigned.bytes().all(|b| b.is_ascii_digit()) {
        if unsigned.len() > 1 && unsigned.starts_with('0') {
            return Err(format!("plain {s:?} is octal to YAML 1.1 readers"));
        }
        if let Ok(n) = s.parse::<i64>() {
            return Ok(Value::Number(n.into()));
        }
        if let Ok(n) = s.parse::<u64>() {
            return Ok(Value::Number(n.into()));
        }
        return Err(format!("plain {s:?} is an integer too large to read"));
    }
    if unsigned.contains(':')
        && unsigned
            .split(':')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!(
            "plain {s:?} is a base-60 number to YAML 1.1 readers"
        ));
    }
    if unsigned.starts_with("0x")
        || unsigned.starts_with("0o")
        || unsigned.starts_with("0b")
        || unsigned.contains('_')
    {
        return Err(format!(
            "plain {s:?} is read as a number by some YAML readers"
        ));
    }
    if is_float(unsigned) && !unsigned.contains('.') {
        return Err(format!(
            "plain {s:?} is a float to YAML 1.2 readers and a string to YAML 1.1 readers"
        ));
    }
    if is_float(unsigned) {
        return s
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("plain {s:?} is not a finite number"));
    }
    if matches!(
        unsigned,
        ".inf" | ".Inf" | ".INF" | ".nan" | ".NaN" | ".NAN"
    ) {
        return Err(format!("plain {s:?} is a non-finite float"));
    }
    Ok(Value::String(s.to_owned()))
}

/// `[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?` or `\.[0-9]+([eE][-+]?[0-9]+)?`.
fn is_float(s: &str) -> bool {
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match frac {
        Some(f) => digits(int) && digits(f) && !(int.is_empty() && f.is_empty()),
        None => !int.is_empty() && digits(int),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_block_and_flow_yaml() {
        let v = parse_document(
            "# c\na: 1\nb: \"2\"\nc: [x, {d: true}]\ne:\n- -1.5\n- null\nf: {}\ng: []\nh: '0755'\n",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"a": 1, "b": "2", "c": ["x", {"d": true}], "e": [-1.5, null], "f": {}, "g": [], "h": "0755"})
        );
    }

    #[test]
    fn refuses_ambiguous_plain_scalars() {
        for s in [
            "on", "No", "y", "0755", "1:30", "0x1f", "1_000", ".inf", "1e3",
        ] {
            let e = parse_document(&format!("a: {s}\n")).unwrap_err();
            assert!(e.contains("line 1"), "{s}: {e}");
        }
        assert!(parse_document("on: 1\n").is_err());
        assert!(parse_document("1: a\n").is_err());
    }

    #[test]
    fn refuses_duplicates_aliases_tags_and_streams() {
        assert!(
            parse_document("a: 1\na: 2\n")
                .unwrap_err()
                .contains("duplicate")
        );
        assert!(parse_document("a: &x 1\nb: *x\n").is_err());
        assert!(parse_document("a: !!str 1\n").is_err());
        assert!(parse_document("a: 1\n---\nb: 2\n").is_err());
        assert!(parse_document("").is_err());
        assert!(parse_document("a: [1\n").is_err());
    }

    #[test]
    fn plain_strings_stay_strings() {
        let v =
            parse_document("a: 250m\nb: 1Gi\nc: /work\nd: 169.254.170.23/32\ne: 1.2.3\n").unwrap();
        assert_eq!(
            v,
            json!({"a": "250m", "b": "1Gi", "c": "/work", "d": "169.254.170.23/32", "e": "1.2.3"})
        );
    }
}
