//! Verifying a fleet's live prerequisites against the generator's rendering.
//!
//! The healer does not write Services (Argo CD or Flux do); it checks that the live
//! `<fleet>` and `<fleet>-peers` Services still say what `celld_gen::render` renders for
//! the fleet, because growth, contraction and disk replacement rely on them (peer
//! discovery through the headless Service with not-ready addresses published). Any
//! difference is reported to `decide` as drift, which holds every lifecycle action as
//! `InfrastructureBlocked` until the Service is restored.
//!
//! The comparison walks the rendered object:
//! - a field the live object leaves unset (absent or null) is not a difference: filling
//!   it is what the next sync does; except a boolean the rendering sets to `true`: the
//!   API server omits `false`, so an absent boolean is a set `false`;
//! - a field the rendering does not mention is not compared (API server defaults such
//!   as `clusterIP`, `sessionAffinity`, `ipFamilies`; labels and annotations other
//!   tools add);
//! - everything else must be equal; lists must have the same length and are compared
//!   item by item; the label selector must be exactly the rendered one, since an extra
//!   key changes which Pods it selects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use celld_api::CelldFleet;
use celld_api::validate::validate_live;
use celld_gen::render::{ObjectKind, render_fleet};
use k8s_openapi::api::core::v1::Service;
use serde_json::Value;

use crate::snapshot::Infrastructure;

/// Rendered Services of one fleet generation: (name, object) or why rendering failed.
type Rendered = Arc<Result<Vec<(String, Value)>, String>>;

/// Compares a fleet's live Services with the generator's rendering, and reports the
/// differences as drift. Caches the rendering per fleet uid and generation (rendering runs
/// the templates); [`ServiceDrift::retain`] drops fleets that are gone.
#[derive(Default)]
pub struct ServiceDrift {
    cache: Mutex<HashMap<String, (i64, Rendered)>>,
}

impl ServiceDrift {
    /// Compares the live Services (looked up by name) with the rendering of `fleet`.
    pub fn verify(
        &self,
        fleet: &CelldFleet,
        live: impl Fn(&str) -> Option<Arc<Service>>,
    ) -> Infrastructure {
        let rendered = self.rendered(fleet);
        let mut drift = Vec::new();
        match rendered.as_ref() {
            Err(e) => drift.push(format!(
                "the fleet cannot be rendered to verify its Services ({e})"
            )),
            Ok(services) => {
                for (name, want) in services {
                    match live(name) {
                        None => drift.push(format!(
                            "Service {name} is missing or no longer carries the fleet's identity label"
                        )),
                        Some(svc) => {
                            let have = serde_json::to_value(&*svc).unwrap_or(Value::Null);
                            let mut diffs = Vec::new();
                            compare(want, &have, "", &mut diffs);
                            drift.extend(diffs.into_iter().map(|d| format!("Service {name}: {d}")));
                        }
                    }
                }
            }
        }
        Infrastructure { drift }
    }

    /// Keeps the cached renderings of the fleet uids `keep` keeps (the live fleets).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.cache
            .lock()
            .expect("infra cache")
            .retain(|uid, _| keep(uid));
    }

    /// How many fleets have a cached rendering.
    pub fn len(&self) -> usize {
        self.cache.lock().expect("infra cache").len()
    }

    /// Whether no rendering is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn rendered(&self, fleet: &CelldFleet) -> Rendered {
        let uid = fleet.metadata.uid.clone().unwrap_or_default();
        let generation = fleet.metadata.generation.unwrap_or(0);
        if let Some((g, r)) = self.cache.lock().expect("infra cache").get(&uid)
            && *g == generation
        {
            return r.clone();
        }
        let r: Rendered = Arc::new(render_services(fleet));
        self.cache
            .lock()
            .expect("infra cache")
            .insert(uid, (generation, r.clone()));
        r
    }
}

/// The Services the generator renders for `fleet`.
pub fn render_services(fleet: &CelldFleet) -> Result<Vec<(String, Value)>, String> {
    // Render from the name, namespace and spec alone, as the generator does from the
    // fleet file; rendering takes only a validated fleet.
    let valid = validate_live(fleet).map_err(|d| {
        d.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let rendered = render_fleet(&valid).map_err(|e| e.to_string())?;
    rendered
        .objects
        .iter()
        .filter(|o| o.kind == ObjectKind::Service)
        .map(|o| {
            serde_saphyr::from_str::<Value>(&o.yaml)
                .map(|v| (o.name.clone(), v))
                .map_err(|e| format!("rendered Service {} is not YAML: {e}", o.name))
        })
        .collect()
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!(
            "{}...",
            &s[..s.char_indices().nth(77).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Appends one line per difference between the rendered `want` and the live `have`.
pub fn compare(want: &Value, have: &Value, path: &str, out: &mut Vec<String>) {
    if have.is_null() {
        // Unset live: filling it is not a difference. Except a boolean: the API server
        // drops `false` (omitempty), so an absent boolean *is* false, and a rendered
        // `true` there is a real difference (e.g. `publishNotReadyAddresses` turned off).
        if *want == Value::Bool(true) {
            out.push(format!("{path} is false (unset), the rendering has true"));
        }
        return;
    }
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            let exact = path == "spec.selector";
            for (k, wv) in w {
                if path == "metadata" && (k == "name" || k == "namespace") {
                    continue;
                }
                let p = join(path, k);
                match h.get(k) {
                    None if exact || p == "spec.selector" => {
                        out.push(format!("{p} is missing, the rendering has {}", show(wv)))
                    }
                    None => compare(wv, &Value::Null, &p, out),
                    Some(hv) => compare(wv, hv, &p, out),
                }
            }
            if exact {
                for k in h.keys().filter(|k| !w.contains_key(*k)) {
                    out.push(format!(
                        "{} is set but the rendering has no such key",
                        join(path, k)
                    ));
                }
            }
        }
        (Value::Array(w), Value::Array(h)) => {
            if w.len() != h.len() {
                out.push(format!(
                    "{path} has {} entries, the rendering has {}",
                    h.len(),
                    w.len()
                ));
                return;
            }
            for (i, (wv, hv)) in w.iter().zip(h).enumerate() {
                compare(wv, hv, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (w, h) if w == h => {}
        (w, h) => out.push(format!(
            "{path} is {}, the rendering has {}",
            show(h),
            show(w)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diffs(want: Value, have: Value) -> Vec<String> {
        let mut out = Vec::new();
        compare(&want, &have, "", &mut out);
        out
    }

    #[test]
    fn unset_and_unmentioned_fields_are_not_differences() {
        let want = json!({"spec": {"type": "ClusterIP", "publishNotReadyAddresses": false,
            "ports": [{"port": 8081, "appProtocol": "tcp"}]}});
        let have = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1",
            "ports": [{"port": 8081}]}});
        assert_eq!(diffs(want, have), Vec::<String>::new());
    }

    #[test]
    fn changed_values_and_selectors_are_differences() {
        let want = json!({"spec": {"publishNotReadyAddresses": true,
            "selector": {"a": "1"}, "ports": [{"port": 8081}]}});
        let have = json!({"spec": {"publishNotReadyAddresses": false,
            "selector": {"a": "1", "b": "2"}, "ports": [{"port": 8082}]}});
        let d = diffs(want, have);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(
            d.iter()
                .any(|l| l.contains("spec.publishNotReadyAddresses is false")),
            "{d:?}"
        );
        assert!(
            d.iter().any(|l| l.contains("spec.selector.b is set")),
            "{d:?}"
        );
        assert!(
            d.iter().any(|l| l.contains("spec.ports[0].port is 8082")),
            "{d:?}"
        );
    }

    #[test]
    fn extra_ports_are_differences() {
        let want = json!({"spec": {"ports": [{"port": 1}]}});
        let have = json!({"spec": {"ports": [{"port": 1}, {"port": 2}]}});
        assert_eq!(diffs(want, have).len(), 1);
    }
}

#[cfg(test)]
mod rendering_tests {
    use super::*;

    #[test]
    fn a_hand_edited_peer_service_is_drift() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/persistent.yaml"
        ))
        .unwrap();
        let fleet = celld_gen::load::load_str(std::path::Path::new("persistent.yaml"), &text)
            .expect("example loads")
            .into_fleet();
        let services = render_services(&fleet).unwrap();
        assert_eq!(services.len(), 2, "{services:?}");
        let (name, peers) = services
            .iter()
            .find(|(n, _)| n.ends_with("-peers"))
            .unwrap();
        let mut live = peers.clone();
        let mut out = Vec::new();
        compare(peers, &live, "", &mut out);
        assert!(out.is_empty(), "{out:?}");
        live["spec"]
            .as_object_mut()
            .unwrap()
            .remove("publishNotReadyAddresses");
        let svc: Service = serde_json::from_value(live).unwrap();
        let v = ServiceDrift::default();
        let drift = v.verify(&fleet, |n| (n == name).then(|| Arc::new(svc.clone())));
        assert!(
            drift
                .drift
                .iter()
                .any(|d| d.contains("publishNotReadyAddresses")),
            "{drift:?}"
        );
    }
}
