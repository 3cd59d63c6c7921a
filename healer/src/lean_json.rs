//! JSON from the API server with the objects' managed fields cut before it is decoded.
//!
//! Every `managedFields` member of an object held under a `metadata` key (every
//! ObjectMeta: an object's own, a Pod template's) has its value replaced with `null`, in
//! one scan of the text, so the decoded object is the one a whole decode gives with each
//! ObjectMeta's `managed_fields` set to `None`; the tests check that on realistic lists
//! and on generated JSON. Text the scan cannot follow (not JSON, unbalanced, a managed
//! fields value that is neither a list nor null) is returned as it came, for the decoder
//! to report. A key written with escapes (`managed\u0046ields`) is not recognised and
//! is decoded whole: the API server writes keys plainly. Used by the fresh
//! reads ([`crate::runtime`]), whose lists are mostly managed fields the healer never
//! reads.

use std::borrow::Cow;

/// A container open at the scan's position.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Array,
    /// An object; `metadata`: it is the value of a `metadata` key (an ObjectMeta).
    Object {
        metadata: bool,
    },
}

/// `text` with the value of every `managedFields` key of an object under a `metadata`
/// key replaced by `null`; `text` itself when it has none, or when it is not JSON the
/// scan can follow.
pub fn without_managed_fields(text: &str) -> Cow<'_, str> {
    const KEY: &[u8] = b"\"managedFields\"";
    if !text.contains("\"managedFields\"") {
        return Cow::Borrowed(text);
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() / 2);
    let mut copied = 0;
    let mut open: Vec<Open> = Vec::new();
    // The span of the key last read in the innermost object, and whether the next string
    // there is a key.
    let mut key = 0..0;
    let mut expect_key = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let Some(end) = string_end(b, i) else {
                    return Cow::Borrowed(text);
                };
                if expect_key {
                    key = i..end;
                    expect_key = false;
                }
                i = end;
                continue;
            }
            b'{' => {
                let in_object = matches!(open.last(), Some(Open::Object { .. }));
                let metadata = in_object && &b[key.clone()] == b"\"metadata\"";
                open.push(Open::Object { metadata });
                expect_key = true;
            }
            b'[' => {
                open.push(Open::Array);
                expect_key = false;
            }
            close @ (b'}' | b']') => {
                // A closer must match its opener, or the text is not followed.
                match (open.pop(), close) {
                    (Some(Open::Object { .. }), b'}') | (Some(Open::Array), b']') => {}
                    _ => return Cow::Borrowed(text),
                }
                expect_key = false;
            }
            b',' => expect_key = matches!(open.last(), Some(Open::Object { .. })),
            b':' if open.last() == Some(&Open::Object { metadata: true })
                && &b[key.clone()] == KEY =>
            {
                // Managed fields are a list, or null (left as it is): anything else is not
                // what the API server sends, and is left for the decoder to judge.
                let start = skip_space(b, i + 1);
                match b.get(start) {
                    Some(b'[') => {}
                    Some(b'n') => {
                        i += 1;
                        continue;
                    }
                    _ => return Cow::Borrowed(text),
                }
                let Some(end) = array_end(b, start) else {
                    return Cow::Borrowed(text);
                };
                out.push_str(&text[copied..i + 1]);
                out.push_str("null");
                copied = end;
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    // Nothing replaced, or the text ended inside a container: the text as it came.
    if copied == 0 || !open.is_empty() {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// The index just past the string starting at `b[start]` (a `"`), escapes followed.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The index just past the array starting at `b[start]` (a `[`), strings followed.
fn array_end(b: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i = string_end(b, i)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Pod;
    use kube::Resource;
    use kube::api::ObjectList;
    use proptest::prelude::*;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    /// A member Pod as the API server lists it: managed fields with `fieldsV1` trees, and
    /// text that looks like the key elsewhere (an annotation key, a string value, a
    /// label value with escaped quotes, a nested template's metadata).
    fn pod(name: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "apps", "uid": format!("{name}-uid"),
                "resourceVersion": "42",
                "labels": {"fleet.celld.dev/identity": "abc"},
                "annotations": {
                    "managedFields": "an annotation, not the field",
                    "note": "a \"managedFields\": [1, 2] inside a string, {unbalanced"
                },
                "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update",
                     "apiVersion": "v1", "time": "2026-12-07T23:46:35Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:x": {}}},
                                  "f:spec": {"f:containers": {"k:{\"name\":\"celld\"}": {".": {}}}}}},
                    {"manager": "kubelet", "operation": "Update", "subresource": "status",
                     "apiVersion": "v1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {}}}}}
                ]
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "celld", "image": "i",
                     "env": [{"name": "managedFields", "value": "[]"}]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        })
    }

    fn list(items: Vec<Value>) -> Value {
        json!({"apiVersion": "v1", "kind": "PodList",
               "metadata": {"resourceVersion": "99"}, "items": items})
    }

    fn decoded_whole<K: DeserializeOwned + Resource + Clone>(text: &str) -> ObjectList<K> {
        let mut l: ObjectList<K> = serde_json::from_str(text).expect("decodes");
        for o in &mut l.items {
            o.meta_mut().managed_fields = None;
        }
        l
    }

    #[test]
    fn a_list_decodes_as_the_whole_decode_without_managed_fields() {
        let items = vec![pod("a-0"), pod("a-1"), pod("a-2")];
        for text in [
            serde_json::to_string(&list(items.clone())).expect("json"),
            serde_json::to_string_pretty(&list(items)).expect("json"),
        ] {
            let lean = without_managed_fields(&text);
            assert!(lean.len() < text.len(), "the managed fields are cut");
            let lean: ObjectList<Pod> = serde_json::from_str(&lean).expect("still decodes");
            let whole = decoded_whole::<Pod>(&text);
            assert_eq!(lean.items, whole.items);
            assert_eq!(lean.metadata, whole.metadata);
            // What looked like the key elsewhere is kept.
            let a = lean.items[0]
                .metadata
                .annotations
                .as_ref()
                .expect("annotations");
            assert_eq!(a["managedFields"], "an annotation, not the field");
            assert!(a["note"].contains("\"managedFields\": [1, 2]"));
        }
    }

    #[test]
    fn a_template_s_metadata_is_metadata_too() {
        let sts = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "a", "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"selector": {}, "serviceName": "a",
                     "template": {"metadata": {"labels": {"x": "y"},
                                               "managedFields": [{"manager": "m"}]},
                                  "spec": {"containers": []}}}
        });
        let text = serde_json::to_string(&json!({"metadata": {}, "items": [sts]})).expect("json");
        let lean: ObjectList<StatefulSet> =
            serde_json::from_str(&without_managed_fields(&text)).expect("decodes");
        let mut whole = decoded_whole::<StatefulSet>(&text).items;
        for s in &mut whole {
            if let Some(t) = s.spec.template.metadata.as_mut() {
                assert!(t.managed_fields.is_some(), "the fixture has them");
                t.managed_fields = None;
            }
        }
        assert_eq!(lean.items, whole);
    }

    #[test]
    fn text_without_the_key_or_not_followed_is_passed_as_it_came() {
        for text in [
            r#"{"items": []}"#,
            r#"{"metadata": {"managedFields": [1, 2"#,
            r#"{"metadata": {"managedFields": "unterminated}}"#,
            r#"{"metadata": {"managedFields": []}}}"#,
            r#"not json "managedFields""#,
            r#"{"metadata": {"managedFields": tru}}"#,
            r#"{"metadata": {"managedFields": []]}"#,
            r#"{"metadata": {"managed\u0046ields": [{"manager": "m"}]}}"#,
        ] {
            assert!(matches!(without_managed_fields(text), Cow::Borrowed(t) if t == text));
        }
    }

    /// Whether every managed fields value under a `metadata` object is a list or null
    /// (the scan replaces only those, and otherwise passes the text as it came).
    fn replaceable(v: &Value, under_metadata: bool) -> bool {
        match v {
            Value::Object(m) => m.iter().all(|(k, x)| {
                if under_metadata && k == "managedFields" {
                    matches!(x, Value::Array(_) | Value::Null)
                } else {
                    replaceable(x, k == "metadata" && x.is_object())
                }
            }),
            Value::Array(a) => a.iter().all(|x| replaceable(x, false)),
            _ => true,
        }
    }

    /// The reference: the same replacement made on the decoded tree.
    fn nulled(v: &Value, under_metadata: bool) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| {
                        let x = if under_metadata && k == "managedFields" {
                            Value::Null
                        } else {
                            nulled(x, k == "metadata" && x.is_object())
                        };
                        (k.clone(), x)
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|x| nulled(x, false)).collect()),
            other => other.clone(),
        }
    }

    fn json_tree() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("metadata".to_string()),
            Just("managedFields".to_string()),
            Just("name".to_string()),
            "[a-zé😀\"\\\\{}\\[\\],: ]{0,6}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-zé😀\"\\\\{}\\[\\],: ]{0,8}".prop_map(Value::String),
            Just(Value::String("\"managedFields\":[".into())),
        ];
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_gets_exactly_the_reference_replacement(v in json_tree(), pretty in any::<bool>()) {
            let text = if pretty {
                serde_json::to_string_pretty(&v).expect("json")
            } else {
                serde_json::to_string(&v).expect("json")
            };
            let lean: Value = serde_json::from_str(&without_managed_fields(&text)).expect("still JSON");
            let expected = if replaceable(&v, false) { nulled(&v, false) } else { v.clone() };
            prop_assert_eq!(lean, expected);
        }
    }
}
