//! kubesim's control API (JSON over HTTP). Every fault endpoint returns only once the
//! fault is in effect. See `tests/README.md` for the reference.

use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

use super::Sim;
use crate::control::{
    FaultApplied, FaultKind, FaultRequest, FaultRule, VolumeDelete, VolumeDeleted,
};
use crate::http::{self, Req, Resp};
use crate::objects::glob_match;

const WAIT_LIMIT: Duration = Duration::from_secs(60);

pub(crate) async fn handle(sim: Arc<Sim>, req: Req) -> Resp {
    let segs: Vec<String> = req.segments().into_iter().map(str::to_string).collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let result = match (req.method.clone(), segs.as_slice()) {
        (Method::GET, ["healthz"]) => return http::text(StatusCode::OK, "ok"),
        (Method::GET, ["state"]) => return http::json(StatusCode::OK, &sim.state()),
        (Method::POST, ["nodes", name, "stop"]) => match req.json::<NodeStop>() {
            Ok(body) => node_action(&sim, name, Some(body.keep_stubs)).await,
            Err(r) => return *r,
        },
        (Method::POST, ["nodes", name, "start"]) => node_action(&sim, name, None).await,
        (Method::POST, ["pods", ns, name, "kill"]) => {
            match super::kubelet::kill_stub(&sim, ns, name).await {
                Ok(pid) => Ok(json!({"pod": format!("{ns}/{name}"), "pid": pid})),
                Err(msg) => Err((StatusCode::CONFLICT, msg)),
            }
        }
        (Method::PUT, ["pods", ns, name, "load"]) => {
            return super::resource_metrics::set_load(&sim, ns, name, &req);
        }
        (Method::POST, ["volumes", "delete"]) => match req.json::<VolumeDelete>() {
            Ok(body) => delete_volume(&sim, body).await,
            Err(r) => return *r,
        },
        (Method::PUT, ["pods", ns, name, "fault"]) => match req.json::<FaultRequest>() {
            Ok(body) => {
                let rule = FaultRule {
                    id: 0,
                    namespace: Some(ns.to_string()),
                    pod: name.to_string(),
                    fault: body.fault,
                };
                // One rule per exact Pod: replace an earlier one.
                remove_rules(&sim, |r| {
                    r.namespace.as_deref() == Some(*ns) && r.pod == *name
                });
                add_fault(&sim, rule).await
            }
            Err(r) => return *r,
        },
        (Method::DELETE, ["pods", ns, name, "fault"]) => {
            let removed = remove_rules(&sim, |r| {
                r.namespace.as_deref() == Some(*ns) && r.pod == *name
            });
            if removed.is_empty() {
                Err((StatusCode::NOT_FOUND, format!("no fault on {ns}/{name}")))
            } else {
                cleared(&sim, &removed).await
            }
        }
        (Method::GET, ["faults"]) => return http::json(StatusCode::OK, &sim.state().faults),
        (Method::POST, ["faults"]) => match req.json::<FaultRule>() {
            Ok(rule) => add_fault(&sim, rule).await,
            Err(r) => return *r,
        },
        (Method::DELETE, ["faults", id]) => match id.parse::<u64>() {
            Ok(id) => {
                let removed = remove_rules(&sim, |r| r.id == id);
                if removed.is_empty() {
                    Err((StatusCode::NOT_FOUND, format!("no fault rule {id}")))
                } else {
                    cleared(&sim, &removed).await
                }
            }
            Err(_) => Err((StatusCode::BAD_REQUEST, "fault id must be a number".into())),
        },
        _ => Err((
            StatusCode::NOT_FOUND,
            format!("no route {} {}", req.method, req.path),
        )),
    };
    match result {
        Ok(v) => http::json(StatusCode::OK, &v),
        Err((status, msg)) => http::error(status, &msg),
    }
}

type ApiResult = Result<serde_json::Value, (StatusCode, String)>;

fn internal(e: impl std::fmt::Display) -> (StatusCode, String) {
    (StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// Body of `POST /nodes/{node}/stop` (optional).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeStop {
    #[serde(default)]
    keep_stubs: bool,
}

/// `stop`: Some(keep_stubs); start: None.
async fn node_action(sim: &Arc<Sim>, name: &str, stop: Option<bool>) -> ApiResult {
    if sim.node(name).is_none() {
        return Err((StatusCode::NOT_FOUND, format!("no node {name}")));
    }
    let r = match stop {
        Some(keep) => super::node::stop(sim, name, keep).await,
        None => super::node::start(sim, name).await,
    };
    r.map_err(|e| internal(format!("{e:#}")))?;
    let view = sim.state().nodes.into_iter().find(|n| n.name == name);
    Ok(json!(view))
}

async fn delete_volume(sim: &Arc<Sim>, body: VolumeDelete) -> ApiResult {
    let (pv_name, claim) = match (&body.pv, &body.namespace, &body.claim) {
        (Some(pv), _, _) => (pv.clone(), None),
        (None, Some(ns), Some(claim)) => {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(sim.client.clone(), ns);
            let c = api
                .get_opt(claim)
                .await
                .map_err(internal)?
                .ok_or_else(|| (StatusCode::NOT_FOUND, format!("no claim {ns}/{claim}")))?;
            let pv = c
                .spec
                .and_then(|s| s.volume_name)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    (
                        StatusCode::CONFLICT,
                        format!("claim {ns}/{claim} has no volume"),
                    )
                })?;
            (pv, Some(format!("{ns}/{claim}")))
        }
        _ => {
            return Err((
                StatusCode::BAD_REQUEST,
                "give {\"pv\": name} or {\"namespace\", \"claim\"}".into(),
            ));
        }
    };
    let api: Api<PersistentVolume> = Api::all(sim.client.clone());
    match api.delete(&pv_name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => {
            return Err((StatusCode::NOT_FOUND, format!("no PV {pv_name}")));
        }
        Err(e) => return Err(internal(e)),
    }
    // Strip the protection finalizer: the backing disk is gone whatever uses it.
    let strip = json!({"metadata": {"finalizers": null}});
    match api
        .patch(&pv_name, &PatchParams::default(), &Patch::Merge(&strip))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => {}
        Err(e) => return Err(internal(e)),
    }
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        match api.get_opt(&pv_name).await {
            Ok(None) => break,
            Ok(Some(_)) if Instant::now() > deadline => {
                return Err(internal(format!("PV {pv_name} still present")));
            }
            Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => return Err(internal(e)),
        }
    }
    let _ = std::fs::remove_dir_all(sim.cfg.data_dir.join("volumes").join(&pv_name));
    tracing::warn!(pv = %pv_name, claim = ?claim, "volume deleted (fault injected)");
    Ok(json!(VolumeDeleted { pv: pv_name, claim }))
}

fn remove_rules(sim: &Sim, pred: impl Fn(&FaultRule) -> bool) -> Vec<FaultRule> {
    let mut inner = sim.inner.lock().expect("inner lock");
    let (gone, keep): (Vec<_>, Vec<_>) = inner.faults.drain(..).partition(|r| pred(r));
    inner.faults = keep;
    gone
}

fn matches(rule: &FaultRule, ns: &str, name: &str) -> bool {
    rule.namespace.as_deref().is_none_or(|n| n == ns) && glob_match(&rule.pod, name)
}

/// Existing Pods (on live nodes, not terminating) matched by any of `rules`.
fn affected(sim: &Sim, rules: &[FaultRule]) -> Vec<(String, String, String)> {
    let inner = sim.inner.lock().expect("inner lock");
    inner
        .workers
        .values()
        .filter(|w| rules.iter().any(|r| matches(r, &w.namespace, &w.name)))
        .filter(|w| sim.node(&w.node).is_some_and(|n| n.is_alive()))
        .map(|w| {
            let v = w.view.lock().expect("view");
            (v.namespace.clone(), v.name.clone(), v.uid.clone())
        })
        .collect()
}

/// Waits until every worker in `pods` satisfies `done`, or the Pod went away.
async fn wait_pods(
    sim: &Sim,
    pods: &[(String, String, String)],
    done: impl Fn(&crate::control::PodView, Option<FaultKind>) -> bool,
) -> Result<Vec<String>, (StatusCode, String)> {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let mut pending = Vec::new();
        let mut ok = Vec::new();
        {
            let inner = sim.inner.lock().expect("inner lock");
            for (ns, name, uid) in pods {
                let Some(w) = inner.workers.get(uid) else {
                    continue;
                };
                let v = w.view.lock().expect("view");
                // The fault the Pod should now show: the latest matching rule.
                let expected = inner
                    .faults
                    .iter()
                    .rev()
                    .find(|r| matches(r, ns, name))
                    .map(|r| r.fault);
                let terminating = matches!(
                    v.container.as_str(),
                    "Terminating" | "Terminated" | "Finalized"
                );
                if done(&v, expected)
                    || terminating
                    || !sim.node(&w.node).is_some_and(|n| n.is_alive())
                {
                    ok.push(format!("{ns}/{name}"));
                } else {
                    pending.push(format!("{ns}/{name}"));
                }
            }
        }
        if pending.is_empty() {
            return Ok(ok);
        }
        if Instant::now() > deadline {
            return Err(internal(format!("timed out waiting for {pending:?}")));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn add_fault(sim: &Arc<Sim>, mut rule: FaultRule) -> ApiResult {
    {
        let mut inner = sim.inner.lock().expect("inner lock");
        rule.id = inner.next_fault_id;
        inner.next_fault_id += 1;
        inner.faults.push(rule.clone());
    }
    let pods = affected(sim, std::slice::from_ref(&rule));
    sim.nudge_where(|w| matches(&rule, &w.namespace, &w.name));
    let fault = rule.fault;
    let done = wait_pods(sim, &pods, |v, expected| {
        // A later rule may override this one; wait for whatever is expected now.
        let f = expected.unwrap_or(fault);
        // A hung termination shows only on deletion: in effect once the kubelet has it.
        let stopped = v.stub_pid.is_none() || f == FaultKind::HangTermination;
        stopped && v.applied_fault == Some(f) && v.fault == Some(f)
    })
    .await?;
    tracing::warn!(rule = ?rule, pods = ?done, "fault rule added");
    Ok(json!(FaultApplied {
        rule: Some(rule),
        pods: done
    }))
}

async fn cleared(sim: &Arc<Sim>, removed: &[FaultRule]) -> ApiResult {
    let pods = affected(sim, removed);
    sim.nudge_where(|w| removed.iter().any(|r| matches(r, &w.namespace, &w.name)));
    // Done when the Pod has no fault left, or still shows another rule's fault.
    let done = wait_pods(sim, &pods, |v, expected| match expected {
        Some(f) => v.fault == Some(f) && v.applied_fault == Some(f),
        // Running again (or waiting for its volumes, which no fault controls).
        None => {
            v.fault.is_none()
                && (v.container == "Running" || v.container == "Waiting:ContainerCreating")
        }
    })
    .await?;
    tracing::info!(rules = ?removed.iter().map(|r| r.id).collect::<Vec<_>>(), pods = ?done, "fault rules removed");
    Ok(json!(FaultApplied {
        rule: removed.first().cloned(),
        pods: done
    }))
}
