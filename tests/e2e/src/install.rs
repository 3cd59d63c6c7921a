//! The one-time install from `celld-gen install` and the healer's ServiceAccount
//! kubeconfigs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_gen::api::labels::{HEALER_NAMESPACE, IDENTITY};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::*;

/// The one-time (idempotent) install: the CRDs, the admission policies (fleet and disk
/// deletion protection) and the healer's namespace, ServiceAccount and RBAC exactly as
/// `celld-gen install` renders them (its Deployment, Service, PDB and NetworkPolicy are
/// left out: the tests run the healer binary themselves), and a StorageClass for kubesim's
/// provisioner.
pub async fn install(client: &Client) -> Result<()> {
    server_is_the_rendered_minor(client).await?;
    let bundle = install_bundle()?;
    for o in &bundle {
        apply(client, o, SETUP, false).await?;
    }
    let sc = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    });
    apply(client, &sc, SETUP, false).await?;
    start_at_zero_in_effect(client).await?;
    for crd in bundle
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
    {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        wait_for(&format!("CRD {name} established"), Duration::from_secs(30), || {
            let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
                Api::all(client.clone());
            let name = name.clone();
            async move {
                let c = api.get(&name).await?;
                Ok(c.status
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
                    .then_some(()))
            }
        })
        .await?;
    }
    // The policies are type-checked against the CRDs once the API server has seen them.
    for p in bundle
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
    {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        wait_for(
            &format!("ValidatingAdmissionPolicy {name} observed"),
            Duration::from_secs(30),
            || {
                let api: Api<
                    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
                > = Api::all(client.clone());
                let name = name.clone();
                async move {
                    let p = api.get(&name).await?;
                    let observed = p.status.as_ref().and_then(|s| s.observed_generation);
                    Ok((observed.is_some() && observed == p.metadata.generation).then_some(()))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// The Kubernetes minor the tests render for and install with: that of
/// `CELLD_GEN_KUBERNETES_VERSION`, which the `celld-gen` the tests run reads too (unset:
/// the newest supported). `scripts/test-oldest.sh` sets it for the oldest line.
pub fn kubernetes() -> Result<celld_gen::kubernetes::Minor> {
    celld_gen::kubernetes::choose(
        None,
        std::env::var(celld_gen::kubernetes::KUBERNETES_VERSION_ENV)
            .ok()
            .as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The render options of the tests' fleets: the default healer namespace, for
/// [`kubernetes`].
pub fn render_options() -> Result<celld_gen::render::RenderOptions> {
    Ok(celld_gen::render::RenderOptions {
        kubernetes: kubernetes()?,
        ..Default::default()
    })
}

/// The cluster runs the minor the tests render for: a fleet rendered for another would
/// start differently (and a bundle for another might not apply), so a mismatch fails the
/// run with what to set instead.
async fn server_is_the_rendered_minor(client: &Client) -> Result<()> {
    let info = client.apiserver_version().await?;
    let server = format!("{}.{}", info.major, info.minor.trim_end_matches('+'));
    let want = kubernetes()?;
    ensure!(
        server == want.to_string(),
        "the API server is Kubernetes {server} ({}), but the tests render for {want}: set {}={server} (scripts/test-oldest.sh does for the oldest line)",
        info.git_version,
        celld_gen::kubernetes::KUBERNETES_VERSION_ENV
    );
    Ok(())
}

/// Waits until the API server enforces the start guard (a new policy takes a moment to
/// load): a server-side dry-run create of a celld-gen StatefulSet at the API default
/// must come back with `replicas: 0` (the mutating policy, 1.36 on) or be refused (the
/// replicas policy, before 1.36). Without this wait, the first test on a fresh cluster
/// could create its StatefulSet at the API default of 1.
async fn start_at_zero_in_effect(client: &Client) -> Result<()> {
    use celld_gen::kubernetes::StartGuard;
    let guard = kubernetes()?.start_guard();
    let probe: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "celld-e2e-start-probe", "namespace": HEALER_NAMESPACE,
                     "labels": {IDENTITY: "probe", celld_gen::api::labels::MANAGED_BY:
                                celld_gen::api::labels::MANAGED_BY_VALUE}},
        "spec": {"serviceName": "probe", "selector": {"matchLabels": {"probe": "x"}},
                 "template": {"metadata": {"labels": {"probe": "x"}},
                              "spec": {"containers": [{"name": "c", "image": "probe"}]}}},
    }))?;
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), HEALER_NAMESPACE);
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        "the start-at-zero admission policy in effect",
        Duration::from_secs(60),
        || {
            let (api, probe, pp) = (api.clone(), probe.clone(), pp.clone());
            async move {
                Ok(match (guard, api.create(&pp, &probe).await) {
                    (StartGuard::MutatingPolicy, made) => made?.spec.replicas == Some(0),
                    (StartGuard::RenderedZero, Err(kube::Error::Api(e))) => {
                        e.message.contains("would start a member before the healer")
                    }
                    (StartGuard::RenderedZero, made) => {
                        made?;
                        false
                    }
                }
                .then_some(()))
            }
        },
    )
    .await
}

/// Kinds of `celld-gen install --stdout` the tests apply.
const BUNDLE_KINDS: [&str; 11] = [
    "CustomResourceDefinition",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The CRDs, the admission policies and the healer's namespace, ServiceAccount and RBAC
/// from `celld-gen install --stdout`, in its order.
pub fn install_bundle() -> Result<Vec<Value>> {
    install_bundle_with(&[])
}

/// [`install_bundle`] of `celld-gen install --stdout <args>`.
pub fn install_bundle_with(args: &[&str]) -> Result<Vec<Value>> {
    let objects: Vec<Value> = install_stream(args)?
        .into_iter()
        .filter(|v| {
            v["kind"]
                .as_str()
                .is_some_and(|k| BUNDLE_KINDS.contains(&k))
        })
        .collect();
    ensure!(
        objects.iter().any(|o| o["kind"] == "ClusterRole"),
        "the install bundle has no ClusterRole"
    );
    Ok(objects)
}

/// Every object of `celld-gen install --stdout <args>`, the healer's Deployment too.
pub fn install_stream(args: &[&str]) -> Result<Vec<Value>> {
    let out = run_install(args)?;
    ensure!(
        out.status.success(),
        "celld-gen install --stdout failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let mut objects = Vec::new();
    for doc in text.split("\n---") {
        if doc
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            continue;
        }
        objects.push(serde_saphyr::from_str(doc).context("a document of the install bundle")?);
    }
    Ok(objects)
}

/// The standard error of `celld-gen install --stdout <args>`, which must refuse them
/// (an error when it renders instead).
pub fn install_refusal(args: &[&str]) -> Result<String> {
    let out = run_install(args)?;
    ensure!(!out.status.success(), "celld-gen install accepted {args:?}");
    ensure!(out.stdout.is_empty(), "a refused install wrote objects");
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

fn run_install(args: &[&str]) -> Result<std::process::Output> {
    let bin = kubesim::testing::workspace_bin("celld-gen", "CELLD_GEN_BIN")?;
    Command::new(&bin)
        .args(["install", "--stdout"])
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .with_context(|| format!("running {} install --stdout", bin.display()))
}

/// The container args of the healer Deployment in an install stream.
pub fn healer_container_args(stream: &[Value]) -> Result<Vec<String>> {
    let d = stream
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .context("the install stream has no Deployment")?;
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .context("the Deployment's container has no args")?
        .iter()
        .map(|a| {
            a.as_str()
                .map(str::to_string)
                .context("a container arg that is not a string")
        })
        .collect()
}

/// The kinds of the install bundle a healer needs to run as its ServiceAccount: its
/// namespace, ServiceAccount and RBAC.
pub const HEALER_RBAC_KINDS: [&str; 6] = [
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The healer's namespace, ServiceAccount and RBAC from the install bundle.
pub fn healer_rbac_objects() -> Vec<Value> {
    install_bundle()
        .unwrap_or_default()
        .into_iter()
        .filter(|o| {
            o["kind"]
                .as_str()
                .is_some_and(|k| HEALER_RBAC_KINDS.contains(&k))
        })
        .collect()
}

/// Writes a kubeconfig for the healer's ServiceAccount, from a TokenRequest.
pub async fn write_healer_kubeconfig(cluster: &Cluster, path: &Path) -> Result<()> {
    write_sa_kubeconfig(cluster, HEALER_NAMESPACE, HEALER_SA, path).await
}

/// A token of ServiceAccount `ns/sa` (a TokenRequest, valid two hours).
pub async fn sa_token(client: &kube::Client, ns: &str, sa: &str) -> Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let tr: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 7200},
    }))?;
    let tr = sas
        .create_token_request(sa, &PostParams::default(), &tr)
        .await
        .with_context(|| format!("TokenRequest for ServiceAccount {ns}/{sa}"))?;
    tr.status
        .and_then(|s| s.token)
        .context("TokenRequest without a token")
}

/// Writes a kubeconfig for ServiceAccount `ns/sa`, from a TokenRequest.
pub async fn write_sa_kubeconfig(cluster: &Cluster, ns: &str, sa: &str, path: &Path) -> Result<()> {
    let token = sa_token(&cluster.client, ns, sa).await?;
    let admin = kube::config::Kubeconfig::read_from(&cluster.kubeconfig)?;
    let cl = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("admin kubeconfig has no cluster")?;
    let server = cl.server.context("no server")?;
    let ca = cl.certificate_authority_data.clone();
    let ca_file = cl.certificate_authority.clone();
    let mut cluster_entry = json!({"server": server});
    if let Some(ca) = ca {
        cluster_entry["certificate-authority-data"] = json!(ca);
    }
    if let Some(f) = ca_file {
        cluster_entry["certificate-authority"] = json!(f);
    }
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster_entry}],
        "users": [{"name": "celld-healer", "user": {"token": token}}],
        "contexts": [{"name": "healer", "context": {"cluster": "e2e", "user": "celld-healer"}}],
        "current-context": "healer",
    });
    std::fs::write(path, serde_json::to_string_pretty(&kc)?)?;
    Ok(())
}

/// Deletes the cluster-scoped RBAC (`ClusterRole`, `ClusterRoleBinding`, by name) a test
/// applied from an install of its own; a failure is reported, not returned (cleanup).
pub async fn delete_cluster_rbac(client: &Client, test: &str, objects: Vec<(String, String)>) {
    use k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let dp = kube::api::DeleteParams::default();
    for (kind, name) in objects {
        let gone = match kind.as_str() {
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .delete(&name, &dp)
                .await
                .map(|_| ()),
            // An install's own start-at-zero binding.
            "MutatingAdmissionPolicyBinding" => {
                Api::<MutatingAdmissionPolicyBinding>::all(client.clone())
                    .delete(&name, &dp)
                    .await
                    .map(|_| ())
            }
            _ => Api::<ClusterRoleBinding>::all(client.clone())
                .delete(&name, &dp)
                .await
                .map(|_| ()),
        };
        if let Err(e) = gone {
            eprintln!("[{test}] deleting {kind} {name}: {e}");
        }
    }
}

/// A healer install of the test's own: the ServiceAccount, ClusterRole, bindings and lease
/// Role `celld-gen install --namespace <ns>-healer` renders (no admission objects: the
/// shared install's cover every namespace). A test that edits the healer's RBAC edits
/// this one, never the shared install the healers of the tests beside it run with.
pub struct OwnInstall {
    /// Its namespace (the ServiceAccount's and the lease's).
    pub namespace: String,
    /// A kubeconfig of its ServiceAccount.
    pub kubeconfig: std::path::PathBuf,
    /// Its RBAC objects, as rendered.
    pub objects: Vec<Value>,
}

impl OwnInstall {
    /// Its ClusterRole without the rules on `resources` (each rule names one resource).
    pub fn cluster_role_without(&self, resources: &[&str]) -> Result<Value> {
        let mut role = self
            .objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole")
            .cloned()
            .context("no ClusterRole in the install")?;
        let rules: Vec<Value> = role["rules"]
            .as_array()
            .context("ClusterRole without rules")?
            .iter()
            .filter(|r| !resources.iter().any(|x| r["resources"] == json!([x])))
            .cloned()
            .collect();
        role["rules"] = Value::Array(rules);
        Ok(role)
    }

    /// Applies its RBAC again as rendered (whatever a test removed).
    pub async fn restore(&self, client: &Client) -> Result<()> {
        for o in &self.objects {
            apply(client, o, SETUP, false).await?;
        }
        Ok(())
    }

    /// The healer options of `env` with this install's identity and lease namespace.
    pub fn healer_options(&self, env: &Env) -> HealerOptions {
        HealerOptions {
            kubeconfig: Some(self.kubeconfig.clone()),
            lease_namespace: Some(self.namespace.clone()),
            ..env.healer_options()
        }
    }
}

impl Env {
    /// Installs [`OwnInstall`] in a namespace of the test (`<ns>-healer`); its
    /// cluster-scoped objects are deleted when the test finishes.
    pub async fn own_install(&mut self) -> Result<OwnInstall> {
        self.own_install_with(&[]).await
    }

    /// [`Env::own_install`] rendered with these `celld-gen install` options too (for
    /// example `--watch-namespace <the test's namespace>`).
    pub async fn own_install_with(&mut self, options: &[&str]) -> Result<OwnInstall> {
        let namespace = self.extra_namespace("healer").await?;
        let mut args = vec!["--namespace", namespace.as_str()];
        args.extend_from_slice(options);
        let objects: Vec<Value> = install_bundle_with(&args)?
            .into_iter()
            .filter(|o| {
                o["kind"]
                    .as_str()
                    .is_some_and(|k| HEALER_RBAC_KINDS.contains(&k))
            })
            .collect();
        for o in &objects {
            apply(&self.client, o, SETUP, false).await?;
            let kind = o["kind"].as_str().unwrap_or_default();
            if kind.starts_with("Cluster") {
                self.cluster_objects.push((
                    kind.to_string(),
                    o["metadata"]["name"].as_str().unwrap_or_default().into(),
                ));
            }
        }
        let kubeconfig = self.dir.join("own-install.kubeconfig");
        write_sa_kubeconfig(&self.cluster, &namespace, HEALER_SA, &kubeconfig).await?;
        Ok(OwnInstall {
            namespace,
            kubeconfig,
            objects,
        })
    }
}
