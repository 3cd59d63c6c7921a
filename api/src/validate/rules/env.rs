//! `spec.env`: extra variables, minus every name the generator sets and every name or
//! prefix celld refuses at start (the lists below mirror celld's own start-up check).
//! A variable celld refuses would crash-loop every member, so it is caught here.

use std::collections::BTreeSet;

use super::Checker;
use crate::validate::formats::*;
use crate::{CelldFleet, defaults};

/// Variables the generator writes into every member (or conditionally: endpoint, telemetry).
pub const GENERATOR_OWNED: &[&str] = &[
    "POD_IP",
    "POD_NAME",
    "CELLD_NODE",
    "CELLD_ADVERTISE",
    "CELLD_BUCKET",
    "AWS_REGION",
    "CELLD_DURABILITY",
    "CELLD_ADDR",
    "CELLD_INTERNAL_ADDR",
    "CELLD_WATCH",
    "CELLD_TTL_MS",
    "CELLD_SHUTDOWN_TOTAL_MS",
    "CELLD_TOKIO_THREADS",
    "CELLD_MAX_RESIDENT_CELLS",
    "CELLD_IDLE_EVICT_S",
    "S3_ENDPOINT",
    "AWS_ALLOW_HTTP",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_EXPORTER_OTLP_HEADERS",
];

/// Prefixes celld reserves (telemetry and export are configured through their own fields;
/// unsafe, test, strict and perf switches are not for production fleets).
pub const RESERVED_PREFIXES: &[&str] = &[
    "CELLD_REEXEC_",
    "CELLD_OTEL",
    "CELLD_EXPORT",
    "CELLD_UNSAFE_",
    "CELLD_TEST_",
    "CELLD_STRICT_",
    "CELLD_PERF_",
    "CELLD_VAR_",
    "CELLD_INTERNAL_DEV_",
];

/// Variables celld removed and now refuses at start.
pub const REMOVED: &[(&str, &str)] = &[
    (
        "CELLD_SHUTDOWN_DRAIN_MS",
        "set spec.lifecycle.shutdownSeconds instead",
    ),
    (
        "CELLD_DRAIN_TOKEN_WAIT_MS",
        "set spec.lifecycle.shutdownSeconds instead",
    ),
    (
        "CELLD_PACED_HANDOFF",
        "remove it; celld no longer has this switch",
    ),
    (
        "CELLD_OUTPUT_GATE",
        "remove it; celld no longer has this switch",
    ),
    (
        "CELLD_STORAGE_PROBE",
        "remove it; celld no longer has this switch",
    ),
    (
        "CELLD_EVICTIONS",
        "remove it; celld no longer has this switch",
    ),
    (
        "CELLD_VARS_FILE",
        "remove it; celld no longer reads a vars file",
    ),
];

/// celld switches that accept only `0` or `1`.
const FLAGS: &[&str] = &[
    "CELLD_CLOUD",
    "CELLD_LTX_COMPACTION",
    "CELLD_LTX_PAGED",
    "CELLD_TRUST_FORWARDED_HEADERS",
];

/// celld variables that must be a positive integer.
const POSITIVE: &[&str] = &[
    "CELLD_ACTIVATIONS",
    "CELLD_DEPLOY_POLL_S",
    "CELLD_FETCH_TIMEOUT_S",
    "CELLD_FLEET_VIEW_MS",
    "CELLD_HANDLER_BUDGET_S",
    "CELLD_LOG_PIPELINE",
    "CELLD_LTX_COMPACTIONS",
    "CELLD_LTX_COMPACTION_MIN_TXIDS",
    "CELLD_LTX_DURABILITY_TIMEOUT_SECS",
    "CELLD_MAX_CELL_REQUESTS",
    "CELLD_MAX_OUTBOUND_WEBSOCKETS",
    "CELLD_MAX_REQUEST_BODY_BYTES",
    "CELLD_MAX_REQUESTS",
    "CELLD_RECOVERY_RETRY_MS",
    "CELLD_RECOVERY_RETRIES",
    "CELLD_MAX_STATELESS_ISOLATES",
    "CELLD_OPERATION_DEADLINE_MS",
    "CELLD_PLACEMENT_WEIGHT",
    "CELLD_RELEASES",
    "CELLD_WAKER_TICK_MS",
];

/// celld variables that must be a non-negative integer.
const NON_NEGATIVE: &[&str] = &[
    "CELLD_ADMISSION_WAIT_MS",
    "CELLD_ALARM_RESIDENT_MS",
    "CELLD_ASSET_CACHE_BYTES",
    "CELLD_DEPLOY_MAX_AGE_S",
    "CELLD_LOCAL_CACHE_MAX_BYTES",
    "CELLD_LTX_TRUNCATE_PAGES",
    "CELLD_LOG_HEDGE_MS",
    "CELLD_LOG_WINDOW",
    "CELLD_LOG_WINDOW_BYTES",
    "CELLD_MAX_RSS_MB",
    "CELLD_READY_FLEET_GATE_MS",
    "CELLD_REBALANCE_INTERVAL_MS",
];

/// Why `name` may not be set through `spec.env`, if it may not.
pub fn refusal(name: &str) -> Option<String> {
    if GENERATOR_OWNED.contains(&name) {
        return Some(format!(
            "`{name}` is set by celld-gen from the fleet's fields"
        ));
    }
    if let Some((_, fix)) = REMOVED.iter().find(|(n, _)| *n == name) {
        return Some(format!(
            "celld refuses to start with the removed variable `{name}`; {fix}"
        ));
    }
    if let Some(p) = RESERVED_PREFIXES.iter().find(|p| name.starts_with(**p)) {
        return Some(format!("variables starting with `{p}` are reserved"));
    }
    None
}

/// Why a literal `value` of `name` would make celld refuse to start, if it would.
fn value_problem(name: &str, value: &str) -> Option<&'static str> {
    let int = value.parse::<u64>();
    if FLAGS.contains(&name) && value != "0" && value != "1" {
        return Some("celld accepts only 0 or 1 here");
    }
    if POSITIVE.contains(&name) && !matches!(int, Ok(n) if n > 0) {
        return Some("celld accepts only a positive whole number here");
    }
    if NON_NEGATIVE.contains(&name) && int.is_err() {
        return Some("celld accepts only a whole number (0 or more) here");
    }
    if name == "CELLD_PRESENCE_HEARTBEAT_MS" && !matches!(int, Ok(n) if (50..=30_000).contains(&n))
    {
        return Some("celld accepts 50 to 30000 here");
    }
    if name == "CELLD_LOG_TRANSPORT" && value != "http" && value != "stream" {
        return Some("celld accepts http or stream here");
    }
    if name == "CELLD_PRESSURE_OWNERSHIP" && value != "release" && value != "sticky" {
        return Some("celld accepts release or sticky here");
    }
    if name == "CELLD_ZONE" {
        let ok = (1..=128).contains(&value.len())
            && value != "."
            && value != ".."
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Some("celld accepts 1 to 128 letters, digits, `.`, `_` or `-` here");
        }
    }
    None
}

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let Some(env) = &fleet.spec.env else { return };
    if env.len() > defaults::MAX_ENV {
        c.fail(
            "spec.env",
            format!("{} variables listed", env.len()),
            format!("at most {}", defaults::MAX_ENV),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, e) in env.iter().enumerate() {
        let field = format!("spec.env[{i}]");
        let name_field = format!("{field}.name");
        if !is_env_name(&e.name) {
            c.fail(
                &name_field,
                format!("`{}` is not a valid variable name", e.name),
                "letters, digits and `_`, not starting with a digit, at most 128 characters",
            );
        } else if let Some(why) = refusal(&e.name) {
            c.fail(
                &name_field,
                why,
                "a variable celld-gen does not own, e.g. RUST_LOG",
            );
        }
        if !seen.insert(e.name.as_str()) {
            c.fail(
                &name_field,
                format!("`{}` is listed twice", e.name),
                "each variable once",
            );
        }
        match (&e.value, &e.secret_key_ref) {
            (Some(_), Some(_)) | (None, None) => c.fail(
                &field,
                format!("`{}` needs exactly one value source", e.name),
                "either value or secretKeyRef",
            ),
            (Some(v), None) => {
                if v.len() > defaults::MAX_ENV_VALUE_BYTES {
                    c.fail(
                        &format!("{field}.value"),
                        format!(
                            "the value of `{}` is longer than {} bytes",
                            e.name,
                            defaults::MAX_ENV_VALUE_BYTES
                        ),
                        "a shorter value, or a secretKeyRef",
                    );
                } else if let Some(why) = value_problem(&e.name, v) {
                    c.fail(&format!("{field}.value"), format!("`{v}`: {why}"), why);
                }
            }
            (None, Some(r)) => check_secret_ref(c, r, &format!("{field}.secretKeyRef")),
        }
    }
}

/// Checks a Secret key reference.
pub fn check_secret_ref(c: &mut Checker<'_>, r: &crate::SecretKeyRef, field: &str) {
    c.require(
        is_dns_subdomain(&r.name),
        &format!("{field}.name"),
        format!("`{}` is not a valid Secret name", r.name),
        "a DNS subdomain",
    );
    c.require(
        is_secret_key(&r.key),
        &format!("{field}.key"),
        format!("`{}` is not a valid Secret key", r.key),
        "letters, digits, `-`, `_` or `.`, at most 253 characters",
    );
}
