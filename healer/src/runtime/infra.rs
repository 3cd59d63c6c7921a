//! Verifying a fleet's live prerequisites against the generator's rendering.
//!
//! The healer does not write Services (Argo CD or Flux do); it checks that the live
//! `<fleet>` and `<fleet>-peers` Services still say what `celld_render::render` renders for
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
use celld_render::render::{ObjectKind, render_fleet};
use k8s_openapi::api::core::v1::Service;
use serde_json::Value;

use crate::snapshot::Infrastructure;

/// Rendered Services of one fleet generation: (name, object) or why rendering failed.
type Rendered = Arc<Result<Vec<(String, Value)>, String>>;

/// Compares a fleet's live Services with the generator's rendering, and reports the
/// differences as drift. Caches the rendering per fleet uid and generation (rendering runs
/// the templates), and the last verdict with the live Services it was reached on, by uid
/// and resourceVersion: a steady reconcile finds the same Services and does not turn them
/// into JSON and walk them again. [`ServiceDrift::retain`] drops fleets that are gone.
#[derive(Default)]
pub struct ServiceDrift {
    cache: Mutex<HashMap<String, Entry>>,
}

/// Which version of a live Service a verdict was reached on (`None`: none was found).
type Seen = Vec<Option<(String, String)>>;

/// One fleet's rendering, and the last verdict on its live Services.
struct Entry {
    generation: i64,
    rendered: Rendered,
    last: Option<(Seen, Vec<String>)>,
}

impl ServiceDrift {
    /// Compares the live Services (looked up by name) with the rendering of `fleet`.
    pub fn verify(
        &self,
        fleet: &CelldFleet,
        live: impl Fn(&str) -> Option<Arc<Service>>,
    ) -> Infrastructure {
        let uid = fleet.metadata.uid.clone().unwrap_or_default();
        let generation = fleet.metadata.generation.unwrap_or(0);
        let rendered = self.rendered(&uid, generation, fleet);
        let services = match rendered.as_ref() {
            Err(e) => {
                return Infrastructure {
                    drift: vec![format!(
                        "the fleet cannot be rendered to verify its Services ({e})"
                    )],
                };
            }
            Ok(services) => services,
        };
        let found: Vec<Option<Arc<Service>>> = services.iter().map(|(n, _)| live(n)).collect();
        // A Service's uid and resourceVersion name its content exactly; one without them
        // (not from the API server) is compared every time.
        let seen: Option<Seen> = found
            .iter()
            .map(|s| match s {
                None => Some(None),
                Some(s) => Some(Some((
                    s.metadata.uid.clone()?,
                    s.metadata.resource_version.clone()?,
                ))),
            })
            .collect();
        if let Some(seen) = &seen
            && let Some(e) = self.cache.lock().expect("infra cache").get(&uid)
            && e.generation == generation
            && let Some((was, drift)) = &e.last
            && was == seen
        {
            return Infrastructure {
                drift: drift.clone(),
            };
        }
        let mut drift = Vec::new();
        for ((name, want), svc) in services.iter().zip(&found) {
            match svc {
                None => drift.push(format!(
                    "Service {name} is missing or no longer carries the fleet's identity label"
                )),
                Some(svc) => {
                    let have = serde_json::to_value(&**svc).unwrap_or(Value::Null);
                    let mut diffs = Vec::new();
                    compare(want, &have, "", &mut diffs);
                    drift.extend(diffs.into_iter().map(|d| format!("Service {name}: {d}")));
                }
            }
        }
        if let Some(seen) = seen
            && let Some(e) = self.cache.lock().expect("infra cache").get_mut(&uid)
            && e.generation == generation
        {
            e.last = Some((seen, drift.clone()));
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

    fn rendered(&self, uid: &str, generation: i64, fleet: &CelldFleet) -> Rendered {
        if let Some(e) = self.cache.lock().expect("infra cache").get(uid)
            && e.generation == generation
        {
            return e.rendered.clone();
        }
        let r: Rendered = Arc::new(render_services(fleet));
        self.cache.lock().expect("infra cache").insert(
            uid.to_string(),
            Entry {
                generation,
                rendered: r.clone(),
                last: None,
            },
        );
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
        let fleet = celld_render::load::load_str(std::path::Path::new("persistent.yaml"), &text)
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

    /// A fleet's patches may add to its Services (celld-gen refuses any other change),
    /// and the healer, which renders the live fleet without them, sees no drift in the
    /// patched Services Argo CD or Flux apply.
    #[test]
    fn a_patched_service_is_not_drift() {
        let path = std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/persistent-platform.yaml"
        ));
        let loaded = celld_render::load::load_paths(&[path]).expect("example loads");
        assert!(!loaded[0].patches.is_empty(), "the example carries patches");
        let bundle = celld_render::render::render_all(&loaded).expect("renders");
        let fleet = loaded[0].fleet.clone().into_fleet();
        let live: Vec<(String, Service)> = bundle.fleets[0]
            .objects
            .iter()
            .filter(|o| o.kind == ObjectKind::Service)
            .map(|o| {
                let v = celld_render::render::parse::parse_document(&o.yaml).unwrap();
                (o.name.clone(), serde_json::from_value(v).unwrap())
            })
            .collect();
        let patched = live.iter().any(|(_, s)| {
            s.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("service.kubernetes.io/topology-mode"))
        });
        assert!(patched, "the example patches its Service");
        let drift = ServiceDrift::default().verify(&fleet, |n| {
            live.iter()
                .find(|(m, _)| m == n)
                .map(|(_, s)| Arc::new(s.clone()))
        });
        assert!(drift.drift.is_empty(), "{drift:?}");
    }

    /// The verdict is remembered for the live Services it was reached on, by uid and
    /// resourceVersion, and for the fleet's generation: a Service edited (a new
    /// resourceVersion), gone or come back is compared again, as is one without a
    /// resourceVersion.
    #[test]
    fn a_verdict_is_remembered_only_for_the_same_services() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/persistent.yaml"
        ))
        .unwrap();
        let mut fleet =
            celld_render::load::load_str(std::path::Path::new("persistent.yaml"), &text)
                .expect("example loads")
                .into_fleet();
        fleet.metadata.uid = Some("fleet-uid".into());
        fleet.metadata.generation = Some(1);
        let rendered = render_services(&fleet).unwrap();
        let live_of = |rv: Option<&str>, drifted: bool| -> Vec<(String, Arc<Service>)> {
            rendered
                .clone()
                .into_iter()
                .map(|(n, mut v)| {
                    if drifted && n.ends_with("-peers") {
                        v["spec"]["publishNotReadyAddresses"] = Value::Bool(false);
                    }
                    let mut svc: Service = serde_json::from_value(v).unwrap();
                    svc.metadata.uid = Some(format!("uid-{n}"));
                    svc.metadata.resource_version = rv.map(str::to_string);
                    (n, Arc::new(svc))
                })
                .collect()
        };
        let verify = |d: &ServiceDrift, fleet: &CelldFleet, live: &[(String, Arc<Service>)]| {
            d.verify(fleet, |n| {
                live.iter().find(|(m, _)| m == n).map(|(_, s)| s.clone())
            })
            .drift
        };
        let d = ServiceDrift::default();
        assert!(verify(&d, &fleet, &live_of(Some("1"), false)).is_empty());
        // Edited: a new resourceVersion, a new verdict.
        let drifted = verify(&d, &fleet, &live_of(Some("2"), true));
        assert_eq!(drifted.len(), 1, "{drifted:?}");
        // The same versions: the remembered verdict (the content is not looked at again;
        // the API server never changes an object without a new resourceVersion).
        assert_eq!(verify(&d, &fleet, &live_of(Some("2"), false)), drifted);
        // Without a resourceVersion: compared every time.
        assert!(verify(&d, &fleet, &live_of(None, false)).is_empty());
        assert_eq!(verify(&d, &fleet, &live_of(None, true)), drifted);
        // Gone, then back at the version of the remembered verdict.
        assert_eq!(verify(&d, &fleet, &[]).len(), 2);
        assert_eq!(verify(&d, &fleet, &live_of(Some("2"), true)), drifted);
        // A new generation renders again and compares again.
        fleet.metadata.generation = Some(2);
        assert_eq!(
            verify(&d, &fleet, &live_of(Some("2"), false)),
            Vec::<String>::new()
        );
    }
}
