//! The install bundle's record of the options it was made with (`celld-gen-install.yaml`
//! in the bundle folder, beside the kustomization, which does not list it), so an
//! upgrade renders the same bundle again with `celld-gen install --options-from`
//! instead of repeating every flag by hand.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{HEADER, InstallOptions};
use celld_api::healer_flags::format_duration;

/// File name of the record in the bundle.
pub const RECORD_FILE: &str = "celld-gen-install.yaml";
/// Its `kind`.
pub const RECORD_KIND: &str = "CelldGenInstallOptions";

/// The record, as written (field names are the flags').
#[derive(Serialize, Deserialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Record {
    /// [`RECORD_KIND`].
    pub kind: String,
    /// The celld-gen release that wrote it.
    pub written_by: String,
    /// `--namespace`.
    pub namespace: String,
    /// `--image`; absent: the release's own healer image, whichever release renders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `--allow-tag` was needed for the image (a tag without a digest).
    #[serde(default)]
    pub allow_tag: bool,
    /// `--replicas`.
    pub replicas: i32,
    /// `--shards`.
    pub shards: u32,
    /// `--watch-namespace` (empty: every namespace).
    pub watch_namespace: Vec<String>,
    /// `--member-replacement-delay`, in the healer's grammar (`10m`).
    pub member_replacement_delay: String,
    /// `--repo-url`.
    pub repo_url: String,
    /// `--repo-path`.
    pub repo_path: String,
    /// `--team`.
    #[serde(default)]
    pub team: Vec<String>,
    /// `--cmp-image`; absent: the release's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmp_image: Option<String>,
    /// `--metrics-auth`.
    #[serde(default = "no_metrics_auth")]
    pub metrics_auth: String,
    /// `--service-monitor`.
    #[serde(default)]
    pub service_monitor: bool,
    /// `--kubernetes-version`; absent in records written before it existed, whose
    /// bundles were made for Kubernetes 1.36, the one minor supported then.
    #[serde(default = "before_the_version_was_recorded")]
    pub kubernetes_version: String,
}

fn before_the_version_was_recorded() -> String {
    "1.36".to_string()
}

fn no_metrics_auth() -> String {
    celld_api::healer_flags::MetricsAuth::None
        .as_str()
        .to_string()
}

impl Record {
    /// The record of `o`. An image equal to this release's default is not recorded: a
    /// later release rendering from the record uses its own healer, never an old one
    /// beside its new CRDs and RBAC.
    pub fn of(o: &InstallOptions) -> Self {
        let defaults = InstallOptions::default();
        let chosen = |v: &str, d: &str| (v != d).then(|| v.to_string());
        Record {
            kind: RECORD_KIND.into(),
            written_by: env!("CARGO_PKG_VERSION").into(),
            namespace: o.namespace.clone(),
            image: chosen(&o.image, &defaults.image),
            allow_tag: o.image != defaults.image && !o.image.contains("@sha256:"),
            replicas: o.replicas,
            shards: o.shards,
            watch_namespace: o.watch_namespaces.clone(),
            member_replacement_delay: format_duration(o.member_replacement_delay),
            repo_url: o.repo_url.clone(),
            repo_path: o.repo_path.clone(),
            cmp_image: chosen(&o.cmp_image, &defaults.cmp_image),
            team: o.teams.clone(),
            metrics_auth: o.metrics_auth.as_str().to_string(),
            service_monitor: o.service_monitor,
            kubernetes_version: o.kubernetes.to_string(),
        }
    }

    /// The file's text.
    pub fn text(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or_default();
        format!(
            "{HEADER}# The options this bundle was made with. Render it again (after an upgrade of\n\
             # celld-gen) with: celld-gen install --options-from <this file> -o <this folder>\n{}\n",
            crate::render::yaml::block(&value, 0)
        )
    }

    /// Reads a record's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let record: Record = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        if record.kind != RECORD_KIND {
            return Err(format!("kind is `{}`, not {RECORD_KIND}", record.kind));
        }
        Ok(record)
    }

    /// The member replacement delay, parsed with the healer's grammar.
    pub fn delay(&self) -> Result<Duration, String> {
        celld_api::healer_flags::parse_duration(&self.member_replacement_delay)
            .map_err(|e| format!("memberReplacementDelay: {e}"))
    }
}
