//! What the templates see: every value a template writes, computed here from a validated
//! fleet with the defaults applied, so the templates hold layout and no logic beyond
//! `if` and `for`. Optional values are `null` (never missing), so templates run with
//! strict undefined checks and a misspelt variable is an error.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::url::{HttpUrl, Scheme};
use crate::api::validate::ValidatedFleet;
use crate::api::validate::rules::pod as pod_rules;
use crate::api::{CapacityMode, Egress, PlacementMode, Profile, labels, reservation_name};

/// Label and annotation keys, from [`crate::api::labels`], so templates and the healer can
/// never spell one differently.
#[derive(Serialize)]
pub struct Keys {
    identity: &'static str,
    client_of: &'static str,
    restart_token: &'static str,
    storage_reservation: &'static str,
    managed_by: &'static str,
    managed_by_value: &'static str,
    healer_name_label: &'static str,
    healer_name: &'static str,
    argocd_sync_options: &'static str,
    argocd_sync_wave: &'static str,
    flux_prune: &'static str,
    zone: &'static str,
    os_label: &'static str,
    os: &'static str,
    claim_template: &'static str,
}

const KEYS: Keys = Keys {
    identity: labels::IDENTITY,
    client_of: labels::CLIENT_OF,
    restart_token: labels::RESTART_TOKEN,
    storage_reservation: labels::STORAGE_RESERVATION,
    managed_by: labels::MANAGED_BY,
    managed_by_value: labels::MANAGED_BY_VALUE,
    healer_name_label: labels::HEALER_NAME_LABEL,
    healer_name: labels::HEALER_NAME,
    argocd_sync_options: labels::ARGOCD_SYNC_OPTIONS,
    argocd_sync_wave: ARGOCD_SYNC_WAVE,
    flux_prune: labels::FLUX_PRUNE,
    zone: labels::ZONE,
    os_label: pod_rules::OS_LABEL,
    os: pod_rules::OS,
    claim_template: labels::CLAIM_TEMPLATE,
};

/// The annotations of a protected fleet's running parts: a fleet file renamed or
/// removed from Git, or a mistyped Flux path, must not stop every member while the
/// CelldFleet and its disks stay (deletion protection keeps those). Argo CD then shows
/// the objects as needing a prune it does not make, and Flux keeps them; turning
/// protection off in Git first (the documented way to delete a fleet) removes these.
pub fn kept_annotations(protected: bool) -> Option<BTreeMap<String, String>> {
    protected.then(|| {
        BTreeMap::from([
            (
                labels::ARGOCD_SYNC_OPTIONS.to_string(),
                "Prune=false".to_string(),
            ),
            (
                labels::FLUX_PRUNE.to_string(),
                labels::FLUX_PRUNE_DISABLED.to_string(),
            ),
        ])
    })
}

/// The annotations of the rendered CelldFleet: the user's own, plus the GitOps guards.
/// Argo CD gets [`labels::FLEET_ARGOCD_SYNC_OPTIONS`] (`Prune=confirm,Delete=confirm`)
/// appended to any sync options the user wrote, except where the user already chose
/// `Prune=`/`Delete=` (validation admits only `false` or `confirm` there, never weaker);
/// Flux gets `prune: disabled`. An External fleet is marked [`labels::MEMBERS_OWNER`]
/// (and only an External one: the mark is removed from any other), which the install
/// bundle's Flux ignore rule for `spec.members` selects on.
pub fn fleet_annotations(
    user: Option<&BTreeMap<String, String>>,
    external: bool,
) -> BTreeMap<String, String> {
    let mut out = user.cloned().unwrap_or_default();
    if external {
        out.insert(
            labels::MEMBERS_OWNER.into(),
            labels::MEMBERS_OWNER_SCALE.into(),
        );
    } else {
        out.remove(labels::MEMBERS_OWNER);
    }
    let mut options: Vec<String> = out
        .get(labels::ARGOCD_SYNC_OPTIONS)
        .map(|v| {
            v.split(',')
                .map(|o| o.trim().to_string())
                .filter(|o| !o.is_empty())
                .collect()
        })
        .unwrap_or_default();
    for guard in labels::FLEET_ARGOCD_SYNC_OPTIONS {
        let name = guard.split('=').next();
        if !options.iter().any(|o| o.split('=').next() == name) {
            options.push(guard.to_string());
        }
    }
    out.insert(labels::ARGOCD_SYNC_OPTIONS.into(), options.join(","));
    out.insert(
        labels::FLUX_PRUNE.into(),
        labels::FLUX_PRUNE_DISABLED.into(),
    );
    out
}

/// Argo CD sync-wave annotation: the reservation goes in an earlier wave than everything
/// else, so a reservation that belongs to another fleet stops the sync before any member
/// starts writing to the bucket.
pub const ARGOCD_SYNC_WAVE: &str = "argocd.argoproj.io/sync-wave";

/// Application port (Service `<fleet>`, routes).
pub const APPLICATION_PORT: u16 = 8080;
/// Peer port (Service `<fleet>-peers`, healer reads).
pub const PEER_PORT: u16 = 8081;

/// Everything the templates of one fleet read.
#[derive(Serialize)]
pub struct FleetContext {
    k: Keys,
    /// Fleet name.
    pub name: String,
    /// Fleet namespace.
    pub namespace: String,
    /// `spec.identity`.
    pub identity: String,
    fleet_api_version: &'static str,
    /// Labels the user wrote on the CelldFleet (null when none).
    fleet_labels: Option<BTreeMap<String, String>>,
    /// Annotations of the CelldFleet: the user's plus the GitOps guards
    /// ([`fleet_annotations`]).
    fleet_annotations: BTreeMap<String, String>,
    /// While the fleet is protected from deletion, the annotations that keep its running
    /// parts (workload, Services, PodDisruptionBudget, NetworkPolicies) through a prune:
    /// Argo CD `Prune=false`, Flux `prune: disabled` ([`kept_annotations`]). Null when
    /// not protected.
    kept_annotations: Option<BTreeMap<String, String>>,
    /// The spec exactly as written (no defaults), as plain data.
    spec: serde_json::Value,
    workload: Workload,
    reservation: Reservation,
    /// Namespace of the healer Pods the NetworkPolicy admits to the peer port.
    healer_namespace: String,
    /// The StatefulSet carries `replicas: 0` in Git: on Kubernetes minors without the
    /// install bundle's MutatingAdmissionPolicy ([`crate::kubernetes::StartGuard`]).
    replicas_zero_in_git: bool,
    /// The credentials agent members may reach (null: `enabled: false`).
    credentials_agent: Option<AgentContext>,
    /// Extra egress destinations after the fixed rules, in order.
    egress: Vec<EgressRule>,
    routing: Option<RoutingContext>,
}

#[derive(Serialize)]
struct Workload {
    stateful: bool,
    bucket_profile: bool,
    peers_service: String,
    service_account: String,
    termination_grace_seconds: i64,
    zones: Vec<String>,
    zone_count: usize,
    strict: bool,
    image: String,
    cpu_request: String,
    cpu_limit: Option<String>,
    memory_request: String,
    memory_limit: String,
    /// Bucket: the emptyDir size and ephemeral-storage request and limit.
    scratch: Option<String>,
    /// PersistentFleet: the claim template.
    claim: Option<Claim>,
    env: Vec<EnvEntry>,
    /// Pod metadata and `spec.pod`, with the zone placement merged into the node
    /// affinity.
    pod: super::pod::PodContext,
}

#[derive(Serialize)]
struct Claim {
    storage_class: String,
    size: String,
}

/// One container environment variable: exactly one of value / field_path / secret.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct EnvEntry {
    /// Name.
    pub name: String,
    /// Literal value.
    pub value: Option<String>,
    /// Downward-API field path.
    pub field_path: Option<&'static str>,
    /// Secret key reference.
    pub secret: Option<SecretRef>,
}

/// A Secret key.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct SecretRef {
    /// Secret name.
    pub name: String,
    /// Key.
    pub key: String,
}

impl EnvEntry {
    fn value(name: &str, value: impl Into<String>) -> Self {
        EnvEntry {
            name: name.to_owned(),
            value: Some(value.into()),
            field_path: None,
            secret: None,
        }
    }
    fn field(name: &str, path: &'static str) -> Self {
        EnvEntry {
            name: name.to_owned(),
            value: None,
            field_path: Some(path),
            secret: None,
        }
    }
    fn secret(name: &str, secret: &str, key: &str) -> Self {
        EnvEntry {
            name: name.to_owned(),
            value: None,
            field_path: None,
            secret: Some(SecretRef {
                name: secret.to_owned(),
                key: key.to_owned(),
            }),
        }
    }
}

#[derive(Serialize)]
struct AgentContext {
    cidr: String,
    port: i32,
    /// Whether this is the default (the EKS Pod Identity agent), for the comment.
    default: bool,
}

#[derive(Serialize)]
struct Reservation {
    name: String,
    bucket: String,
    prefix: Option<String>,
}

/// An egress destination rule: to the given peer (or anywhere), one TCP port.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct EgressRule {
    /// Why the rule exists (written as a comment).
    pub purpose: &'static str,
    /// A single-host CIDR.
    pub cidr: Option<String>,
    /// Pod labels of the destination.
    pub pod_labels: Option<BTreeMap<String, String>>,
    /// Namespace of the destination Pods (null: the fleet's own).
    pub namespace: Option<String>,
    /// TCP port.
    pub port: u16,
}

#[derive(Serialize)]
struct RoutingContext {
    name: String,
    hostnames: Vec<String>,
    source_namespace: String,
    source_pod_labels: BTreeMap<String, String>,
    gateway: Option<GatewayContext>,
    ingress: Option<IngressContext>,
}

#[derive(Serialize)]
struct GatewayContext {
    name: String,
    namespace: String,
    section_name: Option<String>,
}

#[derive(Serialize)]
struct IngressContext {
    class_name: String,
    tls_secret_name: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
}

/// A fleet the templates cannot render (only reachable with a fleet the validator should
/// have refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextError {
    /// Field path.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl FleetContext {
    /// Computes the template context of a validated fleet, with default options.
    pub fn new(fleet: &ValidatedFleet) -> Result<FleetContext, ContextError> {
        Self::with_options(fleet, &crate::render::RenderOptions::default())
    }

    /// Computes the template context of a validated fleet.
    /// Validation already refused everything this could trip on (a missing name, a
    /// PersistentFleet without a storage class, routing with both or neither of gateway
    /// and ingress, a URL without a port), so nothing here checks it again.
    pub fn with_options(
        fleet: &ValidatedFleet,
        options: &crate::render::RenderOptions,
    ) -> Result<FleetContext, ContextError> {
        let spec = &fleet.spec;
        let name = fleet.metadata.name.clone().unwrap_or_default();
        let namespace = fleet.metadata.namespace.clone().unwrap_or_default();
        let bucket_profile = spec.profile == Profile::Bucket;
        let stateful = spec.is_stateful_set();
        let peers_service = format!("{name}-peers");
        let reservation = Reservation {
            name: reservation_name(&spec.storage.bucket, spec.storage.prefix.as_deref()),
            bucket: spec.storage.bucket.clone(),
            prefix: spec.storage.prefix.clone(),
        };
        let size = format!("{}Gi", spec.size_gib());
        // Validation requires a storage class of every PersistentFleet.
        let claim = match spec.profile {
            Profile::PersistentFleet => {
                spec.storage
                    .storage_class_name
                    .clone()
                    .map(|storage_class| Claim {
                        storage_class,
                        size: size.clone(),
                    })
            }
            Profile::Bucket => None,
        };

        let mut egress = Vec::new();
        if let (Some(ep), Some(url)) = (&spec.storage.endpoint, fleet.storage_endpoint()) {
            egress.push(egress_rule("storage endpoint", url, ep.egress.as_ref()));
        }
        if let (Some(t), Some(url)) = (&spec.telemetry, fleet.collector()) {
            egress.push(egress_rule("telemetry collector", url, Some(&t.egress)));
        }

        let routing = spec.routing.as_ref().map(|r| RoutingContext {
            name: format!("{name}-routing"),
            hostnames: r.hostnames.clone(),
            source_namespace: r.source.namespace.clone(),
            source_pod_labels: r.source.pod_labels.clone(),
            gateway: r.gateway.as_ref().map(|g| GatewayContext {
                name: g.name.clone(),
                namespace: g.namespace.clone().unwrap_or_else(|| namespace.clone()),
                section_name: g.section_name.clone(),
            }),
            ingress: r.ingress.as_ref().map(|i| IngressContext {
                class_name: i.class_name.clone(),
                tls_secret_name: i.tls_secret_name.clone(),
                annotations: i.annotations.clone().filter(|a| !a.is_empty()),
            }),
        });
        let spec_value = serde_json::to_value(spec).map_err(|e| ContextError {
            field: "spec".into(),
            message: e.to_string(),
        })?;

        Ok(FleetContext {
            k: KEYS,
            identity: spec.identity.clone(),
            fleet_api_version: labels::API_VERSION,
            fleet_labels: fleet.metadata.labels.clone().filter(|m| !m.is_empty()),
            fleet_annotations: fleet_annotations(
                fleet.metadata.annotations.as_ref(),
                spec.capacity_mode() == Some(CapacityMode::External),
            ),
            kept_annotations: kept_annotations(spec.deletion_protected()),
            spec: spec_value,
            workload: Workload {
                stateful,
                bucket_profile,
                peers_service,
                service_account: spec.service_account_name.clone(),
                termination_grace_seconds: spec.termination_grace_seconds(),
                zones: spec.placement.zones.clone(),
                zone_count: spec.placement.zones.len(),
                strict: spec.placement_mode() == PlacementMode::Strict,
                image: crate::api::validate::formats::pinned_image(&spec.runtime_image),
                cpu_request: spec.cpu_request().to_owned(),
                cpu_limit: spec.cpu_limit().map(str::to_owned),
                memory_request: spec.memory_request().to_owned(),
                memory_limit: spec.memory_limit().to_owned(),
                scratch: bucket_profile.then(|| size.clone()),
                claim,
                env: env(fleet, &name, &namespace),
                pod: super::pod::PodContext::new(spec),
            },
            reservation,
            healer_namespace: options.healer_namespace.clone(),
            replicas_zero_in_git: options.kubernetes.start_guard()
                == crate::kubernetes::StartGuard::RenderedZero,
            credentials_agent: spec.credentials_agent().map(|(cidr, port)| AgentContext {
                cidr: cidr.to_owned(),
                port,
                default: spec.credentials_agent.is_none(),
            }),
            egress,
            routing,
            name,
            namespace,
        })
    }
}

/// The container environment, in the anchor operator's order: downward-API and fixed
/// runtime settings, optional tuning, the storage endpoint, the user's entries in their
/// order, then telemetry. Entries that reference `$(VAR)` come after `VAR`.
pub fn env(fleet: &ValidatedFleet, name: &str, namespace: &str) -> Vec<EnvEntry> {
    let spec = &fleet.spec;
    let bucket = spec.profile == Profile::Bucket;
    let mut env = vec![
        EnvEntry::field("POD_IP", "status.podIP"),
        if bucket {
            EnvEntry::field("CELLD_NODE", "metadata.uid")
        } else {
            EnvEntry::field("CELLD_NODE", "metadata.name")
        },
        if bucket {
            EnvEntry::value("CELLD_ADVERTISE", format!("$(POD_IP):{PEER_PORT}"))
        } else {
            EnvEntry::value(
                "CELLD_ADVERTISE",
                format!("$(CELLD_NODE).{name}-peers.{namespace}.svc:{PEER_PORT}"),
            )
        },
        EnvEntry::value("CELLD_BUCKET", spec.bucket_url()),
        EnvEntry::value("AWS_REGION", spec.storage.region.clone()),
        EnvEntry::value("CELLD_DURABILITY", if bucket { "bucket" } else { "fleet" }),
        EnvEntry::value("CELLD_ADDR", format!("0.0.0.0:{APPLICATION_PORT}")),
        EnvEntry::value("CELLD_INTERNAL_ADDR", format!("0.0.0.0:{PEER_PORT}")),
        EnvEntry::value("CELLD_WATCH", "/work"),
        EnvEntry::value("CELLD_TTL_MS", "10000"),
        EnvEntry::value(
            "CELLD_SHUTDOWN_TOTAL_MS",
            (spec.shutdown_seconds() * 1000).to_string(),
        ),
        EnvEntry::value("CELLD_TOKIO_THREADS", "2"),
    ];
    if let Some(e) = &spec.execution {
        if let Some(n) = e.max_resident_cells.filter(|n| *n > 0) {
            env.push(EnvEntry::value("CELLD_MAX_RESIDENT_CELLS", n.to_string()));
        }
        if let Some(n) = e.idle_evict_seconds.filter(|n| *n > 0) {
            env.push(EnvEntry::value("CELLD_IDLE_EVICT_S", n.to_string()));
        }
    }
    if let Some(ep) = &spec.storage.endpoint {
        env.push(EnvEntry::value("S3_ENDPOINT", ep.url.clone()));
        if fleet.storage_endpoint().map(HttpUrl::scheme) == Some(Scheme::Http) {
            env.push(EnvEntry::value("AWS_ALLOW_HTTP", "true"));
        }
        env.push(EnvEntry::secret(
            "AWS_ACCESS_KEY_ID",
            &ep.credentials_secret_name,
            "accessKeyId",
        ));
        env.push(EnvEntry::secret(
            "AWS_SECRET_ACCESS_KEY",
            &ep.credentials_secret_name,
            "secretAccessKey",
        ));
    }
    for e in spec.env.iter().flatten() {
        env.push(match (&e.value, &e.secret_key_ref) {
            (_, Some(s)) => EnvEntry::secret(&e.name, &s.name, &s.key),
            (v, None) => EnvEntry::value(&e.name, v.clone().unwrap_or_default()),
        });
    }
    if let Some(t) = &spec.telemetry {
        env.push(EnvEntry::value("CELLD_OTEL", t.collector_url.clone()));
        env.push(EnvEntry::field("POD_NAME", "metadata.name"));
        env.push(EnvEntry::value(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!(
                "k8s.namespace.name={namespace},k8s.pod.name=$(POD_NAME),celld.fleet.name={name}"
            ),
        ));
        if let Some(s) = t.sampler {
            env.push(EnvEntry::value("OTEL_TRACES_SAMPLER", s.as_str()));
        }
        if let Some(a) = &t.sampler_arg {
            env.push(EnvEntry::value("OTEL_TRACES_SAMPLER_ARG", a.clone()));
        }
        if let Some(ms) = t.flush_milliseconds {
            env.push(EnvEntry::value("CELLD_OTEL_FLUSH_MS", ms.to_string()));
        }
        if let Some(b) = t.flush_bytes {
            env.push(EnvEntry::value("CELLD_OTEL_FLUSH_BYTES", b.to_string()));
        }
        if let Some(h) = &t.headers_secret_key_ref {
            env.push(EnvEntry::secret(
                "OTEL_EXPORTER_OTLP_HEADERS",
                &h.name,
                &h.key,
            ));
        }
    }
    env
}

fn egress_rule(purpose: &'static str, url: &HttpUrl, egress: Option<&Egress>) -> EgressRule {
    let port = url.port();
    let (cidr, pod_labels, namespace) = match egress {
        None => (None, None, None),
        Some(e) => (e.cidr.clone(), e.pod_labels.clone(), e.namespace.clone()),
    };
    EgressRule {
        purpose,
        // Pod labels win if both were given (the validator refuses that).
        cidr: if pod_labels.is_some() { None } else { cidr },
        namespace: if pod_labels.is_some() {
            namespace
        } else {
            None
        },
        pod_labels,
        port,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fleet_carries_the_gitops_guards_merged_with_the_users_options() {
        let guards = |user: &[(&str, &str)]| {
            let m: BTreeMap<String, String> = user
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            fleet_annotations((!m.is_empty()).then_some(&m), false)
        };
        let plain = guards(&[]);
        assert_eq!(
            plain[labels::ARGOCD_SYNC_OPTIONS],
            "Prune=confirm,Delete=confirm"
        );
        assert_eq!(plain[labels::FLUX_PRUNE], "disabled");
        assert_eq!(plain.len(), 2);
        // Only an External fleet carries the mark Flux's members ignore rule selects on.
        assert_eq!(
            fleet_annotations(None, true)[labels::MEMBERS_OWNER],
            labels::MEMBERS_OWNER_SCALE
        );
        let forged: BTreeMap<String, String> =
            [(labels::MEMBERS_OWNER.to_string(), "scale".to_string())].into();
        assert!(!fleet_annotations(Some(&forged), false).contains_key(labels::MEMBERS_OWNER));
        let mine = guards(&[
            (
                labels::ARGOCD_SYNC_OPTIONS,
                "ServerSideApply=true, Prune=false",
            ),
            ("team", "a"),
        ]);
        assert_eq!(
            mine[labels::ARGOCD_SYNC_OPTIONS],
            "ServerSideApply=true,Prune=false,Delete=confirm"
        );
        assert_eq!(mine["team"], "a");
    }
}
