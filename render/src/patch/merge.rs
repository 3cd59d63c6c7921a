//! Strategic merge, the way `kubectl patch --type strategic` and Kustomize merge a patch
//! into a Kubernetes object, for the lists a fleet's objects have: maps merge key by key,
//! `null` removes a key, lists of named things merge item by item on their merge key
//! (an item with `$patch: delete` removes its match), and any other list is replaced
//! whole. `$patch: replace` in a map replaces the map instead of merging into it.

use serde_json::{Map, Value};

/// The directive key.
const DIRECTIVE: &str = "$patch";

/// The merge key of a list field, as Kubernetes' strategic merge declares it for the
/// fields our objects carry; `None`: the list is replaced whole (tolerations, args,
/// NetworkPolicy rules, ...). `ports` merges on `containerPort` in a container and on
/// `port` in a Service: the items say which.
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => Some("name"),
        "topologySpreadConstraints" => Some("topologyKey"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "hostAliases" => Some("ip"),
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                Some("containerPort")
            } else {
                Some("port")
            }
        }
        _ => None,
    }
}

fn directive(v: &Value) -> Option<&str> {
    v.get(DIRECTIVE).and_then(Value::as_str)
}

fn without_directive(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != DIRECTIVE)
                .map(|(k, v)| (k.clone(), without_directive(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_directive).collect()),
        other => other.clone(),
    }
}

/// Merges `patch` into `target`. Errors name an unknown `$patch` directive or a list item
/// without its merge key.
pub fn merge(target: &mut Value, patch: &Value) -> Result<(), String> {
    merge_at(target, patch, "")
}

fn merge_at(target: &mut Value, patch: &Value, path: &str) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match directive(patch) {
        None => {}
        Some("replace") => {
            *target = without_directive(patch);
            return Ok(());
        }
        Some(d) => {
            return Err(format!(
                "`$patch: {d}` at {} is not supported here (replace a map; delete a list item)",
                if path.is_empty() { "/" } else { path }
            ));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        unreachable!("made an object above")
    };
    for (k, pv) in p {
        let at = format!("{path}/{k}");
        match pv {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(_) => {
                if directive(pv) == Some("delete") {
                    t.remove(k);
                } else {
                    merge_at(t.entry(k.clone()).or_insert(Value::Null), pv, &at)?;
                }
            }
            Value::Array(items) => match (merge_key(k, items), t.get_mut(k)) {
                (Some(key), Some(Value::Array(have))) => merge_list(have, items, key, &at)?,
                _ => {
                    t.insert(
                        k.clone(),
                        Value::Array(
                            items
                                .iter()
                                .filter(|i| directive(i) != Some("delete"))
                                .map(without_directive)
                                .collect(),
                        ),
                    );
                }
            },
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
    Ok(())
}

fn merge_list(have: &mut Vec<Value>, items: &[Value], key: &str, path: &str) -> Result<(), String> {
    for (i, item) in items.iter().enumerate() {
        let Some(id) = item.get(key).cloned() else {
            return Err(format!(
                "item {i} of {path} has no `{key}`, which is how its list is merged"
            ));
        };
        let found = have.iter().position(|h| h.get(key) == Some(&id));
        match (directive(item), found) {
            (Some("delete"), Some(j)) => {
                have.remove(j);
            }
            (Some("delete"), None) => {
                return Err(format!(
                    "item {i} of {path} deletes `{key}: {id}`, which the list does not have"
                ));
            }
            (_, Some(j)) => merge_at(&mut have[j], item, &format!("{path}/{j}"))?,
            (_, None) => have.push(without_directive(item)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_merge_and_null_removes() {
        let mut t = json!({"metadata": {"annotations": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
        merge(
            &mut t,
            &json!({"metadata": {"annotations": {"b": null, "c": "3"}}, "spec": {"y": 2}}),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"metadata": {"annotations": {"a": "1", "c": "3"}}, "spec": {"x": 1, "y": 2}})
        );
    }

    #[test]
    fn named_lists_merge_by_key_and_others_are_replaced() {
        let mut t = json!({"containers": [
            {"name": "celld", "env": [{"name": "A", "value": "1"}], "args": ["x"]}
        ], "tolerations": [{"key": "a"}]});
        merge(
            &mut t,
            &json!({"containers": [
                {"name": "celld", "env": [{"name": "B", "value": "2"}], "args": ["y"]},
                {"name": "sidecar", "image": "s"}
            ], "tolerations": [{"key": "b"}]}),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"containers": [
                {"name": "celld", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "args": ["y"]},
                {"name": "sidecar", "image": "s"}
            ], "tolerations": [{"key": "b"}]})
        );
        merge(
            &mut t,
            &json!({"containers": [{"name": "sidecar", "$patch": "delete"}]}),
        )
        .unwrap();
        assert_eq!(t["containers"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn directives_and_missing_keys() {
        let mut t = json!({"spec": {"a": 1, "b": 2}, "volumes": [{"name": "v"}]});
        merge(&mut t, &json!({"spec": {"$patch": "replace", "c": 3}})).unwrap();
        assert_eq!(t["spec"], json!({"c": 3}));
        let e = merge(&mut t, &json!({"volumes": [{"emptyDir": {}}]})).unwrap_err();
        assert!(e.contains("has no `name`"), "{e}");
        let e = merge(
            &mut t,
            &json!({"volumes": [{"name": "w", "$patch": "delete"}]}),
        )
        .unwrap_err();
        assert!(e.contains("does not have"), "{e}");
        let e = merge(&mut t, &json!({"spec": {"$patch": "merge"}})).unwrap_err();
        assert!(e.contains("not supported"), "{e}");
    }
}
