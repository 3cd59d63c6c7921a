//! Command-line flags.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Result, bail};
use celld_gen::api::labels::HEALER_NAMESPACE;
use clap::{Parser, ValueEnum};

use super::served::Served;
use crate::config::Config;
use crate::time::Span;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (for log collectors).
    Json,
    /// Human-readable lines.
    Text,
}

/// A step of the disk handoff after which a test build can halt the healer (see
/// `--test-halt-after`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HaltPoint {
    /// After step 1 (the Pod carries the finalizer and an uncommitted record).
    Prepare,
    /// After step 2 (the guarded Pod delete was acknowledged, the record is not yet
    /// committed).
    Delete,
    /// After step 3 (the record is committed; the claim is not yet deleted).
    Commit,
    /// After the claim delete of a committed handoff (the hold is not yet released).
    ClaimDelete,
}

const ABOUT: &str =
    "The celld fleet healer: the in-cluster controller that does what no manifest can.";

const LONG_ABOUT: &str = "\
The celld fleet healer: the in-cluster controller that does what no manifest can.

Argo CD or Flux apply what `celld-gen render` produced. The healer watches every
CelldFleet and the objects carrying its identity label (fleet.celld.dev/identity), and does
only the runtime duties:

  * grows a fleet's workload to spec.members (PersistentFleet: one run of consecutive
    members at a time) and shrinks it one member per rolled-out step; it owns the
    workload's spec.replicas by server-side apply (field manager `celld-healer`);
  * force-deletes a member Pod stranded on a dead node once its termination grace plus
    --force-delete-margin has passed (it keeps its disk);
  * gives a member a fresh disk when its volume is lost, or when it alone has been down
    for --member-replacement-delay while every other member has been ready for
    --absorb-window, through a guarded handoff that never deletes a disk it has not
    proven it may delete;
  * deletes a CelldFleet in order (workload, then its claims) behind a finalizer;
  * reports status, conditions and Kubernetes Events on each CelldFleet.

Every write carries uid and resourceVersion preconditions. Two replicas may run: only
the holder of the coordination Lease (--lease-namespace/--lease-name) writes; the other
keeps its caches warm and takes over when the lease expires.

Endpoints on --metrics-addr: /metrics (Prometheus text), /healthz, /readyz (ready once
every watch has listed its objects).

Durations are written with units: 90s, 10m, 1h, 1m30s, 500ms.

Examples:
  celld-healer                                   # all namespaces, defaults
  celld-healer --namespace apps --log-format text
  celld-healer --namespace team-a,team-b         # serves only these two
  celld-healer --member-replacement-delay 15m --force-delete-margin 3m";

/// Command-line flags of `celld-healer`.
#[derive(Debug, Clone, Parser)]
#[command(name = "celld-healer", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Args {
    /// How long a single member may stay down (not ready, missing or terminating) before
    /// it gets a fresh disk, provided every other member has been ready for
    /// --absorb-window. At least 1m.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub member_replacement_delay: Duration,

    /// How long after its termination grace ended a member Pod that is still present
    /// (its node never confirmed) is force-deleted with grace 0.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub force_delete_margin: Duration,

    /// How long every other member must have been ready before a down member is given a
    /// fresh disk.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub absorb_window: Duration,

    /// How long a claim must stay Lost before its member gets a fresh disk (a restore
    /// can bring claims back before their volumes). Checked again on a fresh read from
    /// the API server just before the handoff.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    pub lost_claim_confirmation: Duration,

    /// Watch and heal fleets in these namespaces only (comma-separated or repeated;
    /// default: every namespace). Every CelldFleet of the cluster is still read, for the
    /// identity check; with `celld-gen install --watch-namespace` the healer may write only
    /// in the served namespaces.
    #[arg(
        long,
        value_name = "NS[,NS...]",
        env = "CELLD_HEALER_NAMESPACE",
        value_delimiter = ','
    )]
    pub namespace: Vec<String>,

    /// How often each fleet's members are asked for their application view
    /// (`GET <Pod IP>:8081/state?view=application`, reported as status.application and
    /// status.runtimeVersions); 0s turns it off. Never gates any action.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub application_interval: Duration,

    /// Address of the /metrics, /healthz and /readyz listener.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Log format. The level is set with RUST_LOG (default `info`).
    #[arg(long, value_enum, default_value = "json")]
    pub log_format: LogFormat,

    /// Namespace of the coordination Lease that elects the one replica that writes.
    #[arg(long, value_name = "NAMESPACE", default_value = HEALER_NAMESPACE)]
    pub lease_namespace: String,

    /// Name of the coordination Lease.
    #[arg(long, value_name = "NAME", default_value = "celld-healer")]
    pub lease_name: String,

    /// How long a lease holder that stops renewing keeps the lease; the holder renews
    /// every third of it and stops writing once a renewal is overdue.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// This replica's name in the Lease and in Events (default: $POD_NAME, else the host
    /// name). Must differ between replicas: two processes with one identity would both
    /// consider themselves the lease holder.
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub identity: Option<String>,

    /// Tests only: a claim created less than this before its Pod was made for that Pod
    /// (a member on such a disk is not given another).
    #[arg(long, hide = true, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    pub fresh_disk_age: Duration,

    /// Tests only: accept a --member-replacement-delay below 1m.
    #[arg(long, hide = true)]
    pub allow_short_delays: bool,

    /// Tests only: after this step of a disk handoff was acknowledged, stop making any
    /// request and wait to be killed (the end-to-end tests SIGKILL the healer there).
    #[arg(long, hide = true, value_enum)]
    pub test_halt_after: Option<HaltPoint>,
}

impl Args {
    /// The delays `decide` applies, checked.
    pub fn decide_config(&self) -> Result<Config> {
        let span = |d: Duration| Span(d.as_millis().min(i64::MAX as u128) as i64);
        let config = Config {
            replacement_delay: span(self.member_replacement_delay),
            force_delete_margin: span(self.force_delete_margin),
            absorb_window: span(self.absorb_window),
            fresh_disk_age: span(self.fresh_disk_age),
            lost_confirmation: span(self.lost_claim_confirmation),
        };
        if self.allow_short_delays {
            let mut probe = config.clone();
            probe.replacement_delay = Span::mins(1).max(probe.replacement_delay);
            probe.validate()?;
        } else {
            config.validate()?;
        }
        if self.lease_duration < Duration::from_secs(3) {
            bail!("--lease-duration must be at least 3s");
        }
        Ok(config)
    }

    /// The namespaces served, checked.
    pub fn served(&self) -> Result<Served> {
        Served::new(&self.namespace)
    }

    /// This replica's identity.
    pub fn identity(&self) -> String {
        if let Some(i) = self.identity.as_deref().filter(|i| !i.is_empty()) {
            return i.to_string();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| format!("celld-healer-{}", std::process::id()))
    }
}

/// Parses `90s`, `10m`, `1h`, `1m30s`, `250ms`. A unit is required.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total_ms: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!(
                "{s:?} is not a duration: expected a number at {rest:?} (write e.g. 90s, 10m, 1h30m)"
            ));
        }
        let n: u128 = rest[..digits]
            .parse()
            .map_err(|_| format!("{s:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let ms = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "" => {
                return Err(format!(
                    "{s:?} has no unit: write e.g. {n}s or {n}m (units: ms, s, m, h)"
                ));
            }
            u => return Err(format!("{s:?}: unknown unit {u:?} (units: ms, s, m, h)")),
        };
        total_ms = total_ms
            .checked_add(n.saturating_mul(ms))
            .ok_or_else(|| format!("{s:?}: too long"))?;
    }
    u64::try_from(total_ms)
        .map(Duration::from_millis)
        .map_err(|_| format!("{s:?}: too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("10").unwrap_err().contains("no unit"));
        assert!(parse_duration("10d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn defaults_match_the_operator() {
        let a = Args::parse_from(["celld-healer"]);
        let c = a.decide_config().unwrap();
        assert_eq!(c.replacement_delay, Span::mins(10));
        assert_eq!(c.force_delete_margin, Span::mins(2));
        assert_eq!(c.absorb_window, Span::mins(5));
        assert_eq!(a.metrics_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(a.lease_namespace, "celld-system");
    }

    #[test]
    fn several_namespaces() {
        let a = Args::parse_from(["celld-healer", "--namespace", "b,a", "--namespace", "a"]);
        let s = a.served().unwrap();
        assert_eq!(s.to_string(), "a,b");
        assert!(s.contains("a") && s.contains("b") && !s.contains("c"));
        let all = Args::parse_from(["celld-healer"]).served().unwrap();
        assert!(all.contains("anything"));
        assert_eq!(all.to_string(), "<all>");
        let bad = Args::parse_from(["celld-healer", "--namespace", "Team_A"]);
        assert!(bad.served().unwrap_err().to_string().contains("Team_A"));
    }

    #[test]
    fn short_replacement_delay_needs_the_test_flag() {
        let a = Args::parse_from(["celld-healer", "--member-replacement-delay", "20s"]);
        assert!(a.decide_config().is_err());
        let a = Args::parse_from([
            "celld-healer",
            "--member-replacement-delay",
            "20s",
            "--allow-short-delays",
        ]);
        assert_eq!(a.decide_config().unwrap().replacement_delay, Span::secs(20));
    }
}
