//! The Argo CD config-management plugin (CMP): `celld-gen render --stdout` as the
//! `generate` command of a sidecar of `argocd-repo-server`, so that an Application can
//! point at the fleet files themselves instead of committed manifests.
//!
//! Argo CD runs a CMP as a sidecar whose entrypoint is `argocd-cmp-server` (copied into
//! the shared `/var/run/argocd` volume by the repo server's init container). It reads
//! the plugin's definition from `/home/argocd/cmp-server/config/plugin.yaml`, listens on
//! a socket in the shared plugins volume, runs `generate` in a copy of the app's folder
//! and keeps its standard output only. The sidecar runs as Argo CD's user (999).

use serde_json::{Value, json};

use super::InstallOptions;

/// The plugin's name (`metadata.name`); an Application names it in `spec.source.plugin.name`.
/// Unversioned, so an upgrade of celld-gen does not rename it.
pub const PLUGIN_NAME: &str = "celld-gen";
/// The ConfigMap that holds `plugin.yaml`, and the name of the sidecar container.
pub const NAME: &str = "celld-gen-cmp";
/// Where the CMP server reads the plugin's definition.
pub const PLUGIN_CONFIG_PATH: &str = "/home/argocd/cmp-server/config/plugin.yaml";
/// The key of `plugin.yaml` in [`NAME`] (mounted with this sub path).
pub const PLUGIN_FILE: &str = "plugin.yaml";
/// Argo CD's namespace and repo server, as Argo CD's own manifests name them.
const ARGOCD_NAMESPACE: &str = "argocd";
const REPO_SERVER: &str = "argocd-repo-server";
/// The user Argo CD's containers run as; the CMP server expects it.
const ARGOCD_UID: i64 = 999;

/// The shell line of `generate`: every fleet file below the app's folder, rendered for
/// the healer's namespace and the cluster's Kubernetes minor. Logs go to stderr, which
/// the CMP server does not read as manifests. The namespace is a DNS label (checked by
/// the caller) and the minor a number, so neither needs quoting.
pub fn generate_line(o: &InstallOptions) -> String {
    format!(
        "exec celld-gen render . --stdout --healer-namespace {} --kubernetes-version {}",
        o.namespace, o.kubernetes
    )
}

/// The ConfigManagementPlugin, as the sidecar reads it from [`PLUGIN_CONFIG_PATH`].
pub fn plugin(o: &InstallOptions) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ConfigManagementPlugin",
        "metadata": {"name": PLUGIN_NAME},
        "spec": {
            "generate": {"command": ["sh", "-c"], "args": [generate_line(o)]},
        },
    })
}

/// The ConfigMap holding `plugin.yaml` (`text`: the plugin as YAML), in Argo CD's namespace.
pub fn config_map(text: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": ARGOCD_NAMESPACE},
        "data": {PLUGIN_FILE: text},
    })
}

/// A strategic-merge patch of `argocd-repo-server` that adds the sidecar. `var-files`
/// (which holds `argocd-cmp-server`) and `plugins` (the sockets) are volumes of Argo CD's
/// own repo server; the patch adds the ConfigMap and a scratch `/tmp` (the CMP server's
/// work folder, on a read-only root file system).
pub fn repo_server_patch(o: &InstallOptions) -> Value {
    let tmp = format!("{NAME}-tmp");
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": REPO_SERVER, "namespace": ARGOCD_NAMESPACE},
        "spec": {"template": {"spec": {
            "containers": [{
                "name": NAME,
                "image": o.cmp_image,
                "command": ["/var/run/argocd/argocd-cmp-server"],
                "securityContext": {
                    "runAsNonRoot": true,
                    "runAsUser": ARGOCD_UID,
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "volumeMounts": [
                    {"name": "var-files", "mountPath": "/var/run/argocd"},
                    {"name": "plugins", "mountPath": "/home/argocd/cmp-server/plugins"},
                    {"name": NAME, "mountPath": PLUGIN_CONFIG_PATH, "subPath": PLUGIN_FILE},
                    {"name": tmp, "mountPath": "/tmp"},
                ],
            }],
            "volumes": [
                {"name": NAME, "configMap": {"name": NAME}},
                {"name": tmp, "emptyDir": {}},
            ],
        }}},
    })
}
