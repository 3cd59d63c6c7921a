//! Command-line flags.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use celld_api::healer_flags::{self as flags, FlagError, Shard, parse_duration};
use celld_api::labels::HEALER_NAMESPACE;
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
  celld-healer --shard 1/3                       # the second of three shards
  celld-healer --member-replacement-delay 15m --force-delete-margin 3m";

/// Command-line flags of `celld-healer`.
#[derive(Debug, Clone, Parser)]
#[command(name = "celld-healer", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Args {
    /// How long a single member may stay down (not ready, missing or terminating) before
    /// it gets a fresh disk, provided every other member has been ready for
    /// --absorb-window. At least 1m.
    #[arg(long = flags::MEMBER_REPLACEMENT_DELAY.name, value_name = "DURATION", default_value = flags::MEMBER_REPLACEMENT_DELAY.default, value_parser = parse_duration)]
    pub member_replacement_delay: Duration,

    /// How long after its termination grace ended a member Pod that is still present
    /// (its node never confirmed) is force-deleted with grace 0.
    #[arg(long = flags::FORCE_DELETE_MARGIN.name, value_name = "DURATION", default_value = flags::FORCE_DELETE_MARGIN.default, value_parser = parse_duration)]
    pub force_delete_margin: Duration,

    /// How long every other member must have been ready before a down member is given a
    /// fresh disk.
    #[arg(long = flags::ABSORB_WINDOW.name, value_name = "DURATION", default_value = flags::ABSORB_WINDOW.default, value_parser = parse_duration)]
    pub absorb_window: Duration,

    /// How long a claim must stay Lost before its member gets a fresh disk (a restore
    /// can bring claims back before their volumes). Checked again on a fresh read from
    /// the API server just before the handoff. At least 30s.
    #[arg(long = flags::LOST_CLAIM_CONFIRMATION.name, value_name = "DURATION", default_value = flags::LOST_CLAIM_CONFIRMATION.default, value_parser = parse_duration)]
    pub lost_claim_confirmation: Duration,

    /// How far this process's clock may be from the API server's (measured from the
    /// `Date` of its responses, exported as celld_healer_clock_skew_seconds) before it
    /// holds every destructive write and reports ClockSkewed on the fleets it holds. At
    /// least 2s.
    #[arg(long = flags::MAX_CLOCK_SKEW.name, value_name = "DURATION", default_value = flags::MAX_CLOCK_SKEW.default, value_parser = parse_duration)]
    pub max_clock_skew: Duration,

    /// Watch and heal fleets in these namespaces only (comma-separated or repeated;
    /// default: every namespace). Every CelldFleet of the cluster is still read, for the
    /// identity check; with `celld-gen install --watch-namespace` the healer may write only
    /// in the served namespaces.
    #[arg(
        long = flags::NAMESPACE,
        value_name = "NS[,NS...]",
        env = flags::NAMESPACE_ENV,
        value_delimiter = ','
    )]
    pub namespace: Vec<String>,

    /// How often each fleet's members are asked for their application view
    /// (`GET <Pod IP>:8081/state?view=application`, reported as status.application and
    /// status.runtimeVersions); 0s turns it off. Never gates any action.
    #[arg(long = flags::APPLICATION_INTERVAL.name, value_name = "DURATION", default_value = flags::APPLICATION_INTERVAL.default, value_parser = parse_duration)]
    pub application_interval: Duration,

    /// Address of the /metrics, /healthz and /readyz listener.
    #[arg(long = flags::METRICS_ADDR, value_name = "ADDR", default_value = flags::DEFAULT_METRICS_ADDR)]
    pub metrics_addr: SocketAddr,

    /// Who may read /metrics. `none`: anyone who reaches the port, over HTTP.
    /// `kubernetes`: the listener speaks HTTPS (a certificate made at start) and /metrics
    /// answers only a bearer token the API server authenticates (TokenReview) whose user
    /// may `get` the nonResourceURL /metrics (SubjectAccessReview); the healer then
    /// needs `create` on tokenreviews and subjectaccessreviews. /healthz and /readyz
    /// stay open for the kubelet's probes.
    #[arg(long = flags::METRICS_AUTH, value_name = "MODE", default_value = flags::MetricsAuth::None.as_str(), value_parser = parse_metrics_auth)]
    pub metrics_auth: flags::MetricsAuth,

    /// Log format. The level is set with RUST_LOG (default `info`).
    #[arg(long = flags::LOG_FORMAT, value_enum, default_value = flags::LOG_FORMAT_JSON)]
    pub log_format: LogFormat,

    /// Namespace of the coordination Lease that elects the one replica that writes.
    #[arg(long = flags::LEASE_NAMESPACE, value_name = "NAMESPACE", default_value = HEALER_NAMESPACE)]
    pub lease_namespace: String,

    /// Name of the coordination Lease (with --shard i/n, n > 1: the base of the shard's
    /// Lease `<NAME>-<i>-of-<n>` and of the shared `<NAME>-shards`).
    #[arg(long = flags::LEASE_NAME, value_name = "NAME", default_value = flags::DEFAULT_LEASE_NAME)]
    pub lease_name: String,

    /// Serve only the fleets of shard i of n: those whose identity hashes to i
    /// (`celld-gen install --shards n` renders one Deployment per shard). Each shard elects
    /// its own leader; every shard leader of one count also holds the Lease
    /// `<lease-name>-shards`, and healers started with another count act only once it
    /// expired, so a fleet is never served by two counts while n changes.
    #[arg(long = flags::SHARD, value_name = "I/N", default_value = flags::DEFAULT_SHARD, value_parser = parse_shard)]
    pub shard: Shard,

    /// How long a lease holder that stops renewing keeps the lease; the holder renews
    /// every third of it and stops writing once a renewal is overdue.
    #[arg(long = flags::LEASE_DURATION.name, value_name = "DURATION", default_value = flags::LEASE_DURATION.default, value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// This replica's name in the Lease and in Events (default: $POD_NAME, else the host
    /// name). Must differ between replicas: two processes with one identity would both
    /// consider themselves the lease holder.
    #[arg(long = flags::IDENTITY, value_name = "NAME", env = flags::IDENTITY_ENV)]
    pub identity: Option<String>,

    /// Tests only: a claim created less than this before its Pod was made for that Pod
    /// (a member on such a disk is not given another).
    #[arg(long = flags::FRESH_DISK_AGE.name, hide = true, value_name = "DURATION", default_value = flags::FRESH_DISK_AGE.default, value_parser = parse_duration)]
    pub fresh_disk_age: Duration,

    /// Tests only: accept a --member-replacement-delay below 1m and a
    /// --lost-claim-confirmation below 30s.
    #[arg(long = flags::ALLOW_SHORT_DELAYS, hide = true)]
    pub allow_short_delays: bool,

    /// Tests only: after this step of a disk handoff was acknowledged, stop making any
    /// request and wait to be killed (the end-to-end tests SIGKILL the healer there).
    #[arg(long, hide = true, value_enum)]
    pub test_halt_after: Option<HaltPoint>,
}

/// `--shard` through the one parser, so the installer and the healer refuse alike.
fn parse_metrics_auth(value: &str) -> Result<flags::MetricsAuth, String> {
    flags::MetricsAuth::parse(value)
}

fn parse_shard(value: &str) -> Result<Shard, FlagError> {
    Shard::parse(value)
}

impl Args {
    /// The delays `decide` applies, checked against the bounds of
    /// [`celld_api::healer_flags`] (the ones `celld-gen install` checks too, so the
    /// messages are the same).
    pub fn decide_config(&self) -> Result<Config> {
        if !self.allow_short_delays {
            flags::MEMBER_REPLACEMENT_DELAY.check(self.member_replacement_delay)?;
            flags::LOST_CLAIM_CONFIRMATION.check(self.lost_claim_confirmation)?;
        }
        flags::LEASE_DURATION.check(self.lease_duration)?;
        flags::MAX_CLOCK_SKEW.check(self.max_clock_skew)?;
        let span = Span::from_duration;
        let config = Config {
            replacement_delay: span(self.member_replacement_delay),
            force_delete_margin: span(self.force_delete_margin),
            absorb_window: span(self.absorb_window),
            fresh_disk_age: span(self.fresh_disk_age),
            lost_confirmation: span(self.lost_claim_confirmation),
            max_clock_skew: span(self.max_clock_skew),
        };
        if self.allow_short_delays {
            let mut probe = config.clone();
            probe.replacement_delay = Config::min_replacement_delay().max(probe.replacement_delay);
            probe.validate()?;
        } else {
            config.validate()?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn install_args_start_the_healer() {
        use celld_gen::install::{InstallOptions, objects};
        let matrix = [
            InstallOptions::default(),
            InstallOptions {
                member_replacement_delay: Duration::from_secs(90),
                watch_namespaces: vec!["a".into(), "b".into()],
                namespace: "other".into(),
                ..InstallOptions::default()
            },
            InstallOptions {
                shards: 3,
                ..InstallOptions::default()
            },
        ];
        for o in matrix {
            let deployments: Vec<_> = objects(&o)
                .into_iter()
                .filter(|(_, d)| d["kind"] == "Deployment")
                .collect();
            assert_eq!(deployments.len() as u32, o.shards);
            let mut shards = Vec::new();
            for (_, deployment) in deployments {
                let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                    .as_array()
                    .expect("container args")
                    .iter()
                    .map(|a| a.as_str().expect("string arg").to_string());
                let a =
                    Args::try_parse_from(std::iter::once("celld-healer".to_string()).chain(args))
                        .expect("the healer parses the rendered args");
                let c = a.decide_config().expect("and accepts them");
                assert_eq!(
                    c.replacement_delay,
                    Span::from_duration(o.member_replacement_delay)
                );
                assert_eq!(a.lease_namespace, o.namespace);
                assert_eq!(
                    a.served().unwrap().to_string(),
                    if o.watch_namespaces.is_empty() {
                        "<all>".to_string()
                    } else {
                        o.watch_namespaces.join(",")
                    }
                );
                shards.push(a.shard);
            }
            // One Deployment per shard, every shard once.
            let want: Vec<Shard> = (0..o.shards)
                .map(|index| Shard {
                    index,
                    count: o.shards,
                })
                .collect();
            assert_eq!(shards, want);
        }
    }

    #[test]
    fn shard_flag_refused_with_the_shared_message() {
        let e = Args::try_parse_from(["celld-healer", "--shard", "3/3"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("shard index not below the count (write i/n with 0 <= i < n <= 64"),
            "{e}"
        );
        let a = Args::parse_from(["celld-healer", "--shard", "1/2"]);
        assert_eq!(a.shard, Shard { index: 1, count: 2 });
        assert_eq!(Args::parse_from(["celld-healer"]).shard, Shard::ALL);
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
        let err = a.decide_config().unwrap_err().to_string();
        assert_eq!(
            err,
            "--member-replacement-delay must be at least 1m, got 20s"
        );
        let a = Args::parse_from([
            "celld-healer",
            "--member-replacement-delay",
            "20s",
            "--allow-short-delays",
        ]);
        assert_eq!(a.decide_config().unwrap().replacement_delay, Span::secs(20));
    }
}
