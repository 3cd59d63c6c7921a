//! The parse-back check: every rendered object is read back as plain YAML and as its typed
//! form, and the two must be equal. A field the typed form does not know (a misspelt key,
//! a field at the wrong level) is dropped by the typed parse; a value of the wrong type
//! (an unquoted `on`, a number where a string belongs) fails it; a field the type adds on
//! its own (a `kind` the template forgot) appears only on the typed side. Each shows up
//! as a difference, named by its JSON pointer.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ObjectKind;
use super::httproute::HttpRoute;
use crate::api::{CelldBucketReservation, CelldFleet};

/// Checks that `yaml` is one object of `kind` that survives a typed round trip unchanged.
pub fn check(kind: ObjectKind, yaml: &str) -> Result<(), String> {
    use k8s_openapi::api::{
        apps::v1 as apps, core::v1 as core, networking::v1 as net, policy::v1 as policy,
    };
    let generic = super::parse::parse_document(yaml).map_err(|e| format!("not valid YAML: {e}"))?;
    let expected = |field: &str| generic.get(field).and_then(Value::as_str).unwrap_or("");
    if expected("apiVersion") != kind.api_version() || expected("kind") != kind.kind() {
        return Err(format!(
            "rendered {}/{} where {}/{} was expected",
            expected("apiVersion"),
            expected("kind"),
            kind.api_version(),
            kind.kind()
        ));
    }
    match kind {
        ObjectKind::CelldBucketReservation => same::<CelldBucketReservation>(generic),
        ObjectKind::CelldFleet => same::<CelldFleet>(generic),
        ObjectKind::NetworkPolicy => same::<net::NetworkPolicy>(generic),
        ObjectKind::PodDisruptionBudget => same::<policy::PodDisruptionBudget>(generic),
        ObjectKind::Service => same::<core::Service>(generic),
        ObjectKind::Deployment => same::<apps::Deployment>(generic),
        ObjectKind::StatefulSet => same::<apps::StatefulSet>(generic),
        ObjectKind::HttpRoute => same::<HttpRoute>(generic),
        ObjectKind::Ingress => same::<net::Ingress>(generic),
    }
}

fn same<T: DeserializeOwned + Serialize>(generic: Value) -> Result<(), String> {
    let typed = T::deserialize(&generic)
        .map_err(|e| format!("does not parse as {}: {e}", std::any::type_name::<T>()))?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    same_tree(&generic, &back)
}

/// Ok when the rendered tree and the typed tree are equal, else the first difference.
pub fn same_tree(rendered: &Value, typed: &Value) -> Result<(), String> {
    // Equality first: the same verdict as the walk below (maps compared as maps, numbers
    // as numbers), without building a path for every field of an object that passes.
    if rendered == typed {
        return Ok(());
    }
    match first_difference(rendered, typed, &mut String::new()) {
        None => Ok(()),
        Some(d) => Err(d),
    }
}

/// The first place where the rendered value and the typed value differ, as a sentence.
pub fn first_difference(rendered: &Value, typed: &Value, path: &mut String) -> Option<String> {
    match (rendered, typed) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                let found = match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => first_difference(x, y, path),
                    (Some(x), None) => Some(format!(
                        "{path}: rendered {x} but the typed object has no such field (misspelt or misplaced?)"
                    )),
                    (None, Some(y)) => Some(format!(
                        "{path}: the typed object has {y} but the template did not write it"
                    )),
                    (None, None) => None,
                };
                if found.is_some() {
                    return found;
                }
                path.truncate(len);
            }
            None
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                if let Some(d) = first_difference(x, y, path) {
                    return Some(d);
                }
                path.truncate(len);
            }
            None
        }
        (a, b) if a == b => None,
        (a, b) => Some(format!(
            "{}: rendered {a} but the typed object reads it as {b}",
            if path.is_empty() { "/" } else { path }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: \"a\"
spec:
  ports:
  - port: 8080
    protocol: TCP
";

    #[test]
    fn a_faithful_object_passes() {
        check(ObjectKind::Service, SERVICE).unwrap();
    }

    #[test]
    fn a_misspelt_field_fails() {
        let bad = SERVICE.replace("protocol:", "protocl:");
        let e = check(ObjectKind::Service, &bad).unwrap_err();
        assert!(e.contains("/spec/ports/0/protocl"), "{e}");
    }

    #[test]
    fn a_retyped_scalar_fails() {
        let bad = SERVICE.replace("name: \"a\"", "name: on");
        assert!(check(ObjectKind::Service, &bad).is_err());
    }

    #[test]
    fn a_wrong_kind_fails() {
        let e = check(ObjectKind::Ingress, SERVICE).unwrap_err();
        assert!(e.contains("networking.k8s.io/v1/Ingress"), "{e}");
    }

    #[test]
    fn a_missing_claim_template_kind_fails() {
        // The typed claim template always writes apiVersion and kind; a template that
        // leaves them out would make Argo CD show a permanent difference.
        let sts = "\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: \"a\"
spec:
  selector: {}
  serviceName: \"a\"
  template: {}
  volumeClaimTemplates:
  - metadata:
      name: data
";
        let e = check(ObjectKind::StatefulSet, sts).unwrap_err();
        assert!(e.contains("/spec/volumeClaimTemplates/0/apiVersion"), "{e}");
    }
}
