//! The Argo CD Application and the Flux Kustomization that `celld-gen install` renders
//! (and, with `--team`, a team's AppProject, Application and Kustomization),
//! against the CRDs that ship in the modules `tests/gitops/build.sh` builds
//! (`argo-cd/v3` `manifests/crds/application-crd.yaml`, kustomize-controller's
//! `config/crd/bases`): with those CRDs installed on the test control plane, each is
//! server-side applied with strict field validation (an unknown or misplaced field is an
//! error, not a warning), nothing is pruned from what we wrote, and a field the CRD does
//! not have is refused (negative control). The same for the ServiceMonitor of
//! `install --service-monitor`, against the Prometheus Operator's CRD.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::gitops::{self, Bundle};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    ValidationDirective,
};
use kube::{Api, Client};
use kubesim::testing::{Sharing, create_namespace, e2e_cluster, wait_for};
use serde_json::{Value, json};

const MANAGER: &str = "celld-e2e";

fn strict_apply(dry_run: bool) -> PatchParams {
    let mut pp = PatchParams::apply(MANAGER).force();
    pp.field_validation = Some(ValidationDirective::Strict);
    pp.dry_run = dry_run;
    pp
}

/// Installs a CRD file and waits until it is Established.
async fn install_crd(client: &Client, path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} (run tests/gitops/build.sh)", path.display()))?;
    let crd = gitops::yaml(&text, &path.display().to_string())?;
    let name = crd["metadata"]["name"]
        .as_str()
        .context("CRD name")?
        .to_string();
    let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .with_context(|| format!("installing CRD {name}"))?;
    wait_for(
        &format!("CRD {name} Established"),
        Duration::from_secs(60),
        || async {
            let c = api.get(&name).await?;
            let ok = c.status.and_then(|s| s.conditions).is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            Ok(ok.then_some(()))
        },
    )
    .await?;
    Ok(name)
}

fn api_for(client: &Client, obj: &Value, plural: &str) -> Result<(Api<DynamicObject>, String)> {
    let (group, version) = obj["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .context("apiVersion")?;
    let kind = obj["kind"].as_str().context("kind")?;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let ns = obj["metadata"]["namespace"].as_str().context("namespace")?;
    let name = obj["metadata"]["name"]
        .as_str()
        .context("name")?
        .to_string();
    Ok((Api::namespaced_with(client.clone(), ns, &ar), name))
}

/// Every field of `want` is in `got` with the same value (nothing pruned or changed).
fn contains(want: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                contains(
                    v,
                    g.get(k).unwrap_or(&Value::Null),
                    &format!("{path}/{k}"),
                    out,
                );
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                contains(a, b, &format!("{path}/{i}"), out);
            }
        }
        (w, g) if w == g => {}
        (w, g) => out.push(format!("{path}: wrote {w}, stored {g}")),
    }
}

async fn check(client: &Client, obj: &Value, plural: &str) -> Result<()> {
    let ns = obj["metadata"]["namespace"].as_str().context("namespace")?;
    let _ = create_namespace(client, ns).await;
    let (api, name) = api_for(client, obj, plural)?;
    let kind = obj["kind"].as_str().unwrap_or("?");
    api.patch(&name, &strict_apply(true), &Patch::Apply(obj))
        .await
        .with_context(|| format!("strict dry-run apply of the rendered {kind}"))?;
    let stored = api
        .patch(&name, &strict_apply(false), &Patch::Apply(obj))
        .await
        .with_context(|| format!("strict apply of the rendered {kind}"))?;
    let mut lost = Vec::new();
    contains(&obj["spec"], &stored.data["spec"], "/spec", &mut lost);
    ensure!(
        lost.is_empty(),
        "the {kind} as stored lost what we wrote: {lost:#?}"
    );
    eprintln!("[crds] the rendered {kind} applies with strict validation, stored as written");

    // Negative control: a field the CRD does not declare is refused.
    let mut bad = obj.clone();
    bad["spec"]["celldNoSuchField"] = json!(true);
    let refused = api
        .patch(&name, &strict_apply(true), &Patch::Apply(&bad))
        .await;
    ensure!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("celldNoSuchField")),
        "an unknown field in the {kind} was not refused: {refused:?}"
    );
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_bundle_application_and_kustomization_match_the_real_crds() -> Result<()> {
    let test = "install_bundle_application_and_kustomization_match_the_real_crds";
    let Some(cluster) = e2e_cluster(test).await else {
        return Ok(());
    };
    // The CRD files come with the engines' build.
    if gitops::engine("celld-argocd", test)?.is_none() {
        return Ok(());
    }
    let _lock = tokio::task::block_in_place(|| cluster.lock(test, Sharing::Shared))?;
    let client = &cluster.client;
    let dir = gitops::gitops_dir();
    let bundle = Bundle::render_with(&[
        "--team",
        "crds-team-a",
        "--metrics-auth",
        "kubernetes",
        "--service-monitor",
    ])?;
    let mut crds = Vec::new();
    let result = async {
        crds.push(install_crd(client, &dir.join("argocd/application-crd.yaml")).await?);
        crds.push(install_crd(client, &dir.join("argocd/appproject-crd.yaml")).await?);
        crds.push(
            install_crd(
                client,
                &dir.join("flux/kustomize.toolkit.fluxcd.io_kustomizations.yaml"),
            )
            .await?,
        );
        check(client, &bundle.application()?, "applications").await?;
        check(client, &bundle.kustomization()?, "kustomizations").await?;
        // A team's objects (`install --team`): its AppProject, Application and Flux
        // Kustomization (in the team's namespace).
        check(
            client,
            &bundle.file("argocd/teams/crds-team-a/appproject.yaml")?,
            "appprojects",
        )
        .await?;
        check(
            client,
            &bundle.file("argocd/teams/crds-team-a/application.yaml")?,
            "applications",
        )
        .await?;
        check(
            client,
            &bundle.file("flux/teams/crds-team-a.yaml")?,
            "kustomizations",
        )
        .await?;
        // `install --service-monitor` (with --metrics-auth kubernetes: HTTPS and a
        // bearer token) against the Prometheus Operator's own CRD.
        crds.push(
            install_crd(
                client,
                &dir.join("prometheus/monitoring.coreos.com_servicemonitors.yaml"),
            )
            .await?,
        );
        check(
            client,
            &bundle.file("healer/servicemonitor.yaml")?,
            "servicemonitors",
        )
        .await
    }
    .await;
    // The CRDs stay installed, as the Gateway API CRDs do: removing them would change
    // API discovery under the engines of the GitOps tests running beside this one.
    let _ = crds;
    let _ =
        kubesim::testing::delete_namespace(client, "crds-team-a", Duration::from_secs(60)).await;
    result
}
