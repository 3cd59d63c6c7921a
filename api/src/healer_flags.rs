//! The healer's command-line contract, in one place: every flag's name and default, the
//! one duration grammar, and the bounds the healer enforces. `celld-healer` declares its
//! flags from these constants and `celld-gen install` renders the Deployment's args from
//! them and refuses, with the same message, any value the healer would refuse.
//!
//! Self-contained (std, thiserror and the DNS-label rule of `validate::formats`; nothing
//! of the generator's CLI) so it can move into a shared API crate.

use std::time::Duration;

use crate::validate::formats::is_dns_label;

/// A flag taking a duration, with its default as written on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationFlag {
    /// The long name, without the leading `--`.
    pub name: &'static str,
    /// The default, in the duration grammar ([`parse_duration`]).
    pub default: &'static str,
    /// The shortest value the healer accepts, if any.
    pub min: Option<Duration>,
}

impl DurationFlag {
    /// The default as a duration.
    pub fn default_duration(&self) -> Duration {
        // The defaults are constants of this module; `defaults_parse_and_respect_bounds`
        // proves each one parses, so this never falls back.
        parse_duration(self.default).unwrap_or(Duration::ZERO)
    }

    /// Checks a parsed value against the flag's bound.
    pub fn check(&self, value: Duration) -> Result<Duration, FlagError> {
        match self.min {
            Some(min) if value < min => Err(FlagError::TooShort {
                flag: self.name,
                min: format_duration(min),
                got: format_duration(value),
            }),
            _ => Ok(value),
        }
    }

    /// `--name=value` for a command line.
    pub fn arg(&self, value: Duration) -> String {
        arg(self.name, &format_duration(value))
    }
}

/// How long a single member may stay down before it gets a fresh disk.
pub const MEMBER_REPLACEMENT_DELAY: DurationFlag = DurationFlag {
    name: "member-replacement-delay",
    default: "10m",
    // Shorter delays replace disks during ordinary restarts and node reboots.
    min: Some(Duration::from_secs(60)),
};

/// How long after its termination grace a lingering member Pod is force-deleted.
pub const FORCE_DELETE_MARGIN: DurationFlag = DurationFlag {
    name: "force-delete-margin",
    default: "2m",
    min: None,
};

/// How long every other member must have been ready before a down member is replaced.
pub const ABSORB_WINDOW: DurationFlag = DurationFlag {
    name: "absorb-window",
    default: "5m",
    min: None,
};

/// How long a claim must stay Lost before its member gets a fresh disk.
pub const LOST_CLAIM_CONFIRMATION: DurationFlag = DurationFlag {
    name: "lost-claim-confirmation",
    default: "1m",
    // A restore or a storage glitch can show claims Lost for seconds before their
    // volumes are back: a shorter window would replace disks that were never lost.
    min: Some(Duration::from_secs(30)),
};

/// How often members are asked for their application view (0s: never).
pub const APPLICATION_INTERVAL: DurationFlag = DurationFlag {
    name: "application-interval",
    default: "60s",
    min: None,
};

/// How long a lease holder that stops renewing keeps the lease.
pub const LEASE_DURATION: DurationFlag = DurationFlag {
    name: "lease-duration",
    default: "15s",
    // The holder renews every third of it: below 3s a renewal has under a second.
    min: Some(Duration::from_secs(3)),
};

/// Tests only: a claim this young when its Pod was made was made for that Pod.
pub const FRESH_DISK_AGE: DurationFlag = DurationFlag {
    name: "fresh-disk-age",
    default: "1m",
    min: None,
};

/// How far the healer's clock may be from the API server's before it holds every
/// destructive write (rule T1).
pub const MAX_CLOCK_SKEW: DurationFlag = DurationFlag {
    name: "max-clock-skew",
    default: "30s",
    // The API server's `Date` has whole seconds: a tighter bound would hold writes on
    // a healthy clock.
    min: Some(Duration::from_secs(2)),
};

/// Every duration flag, for the tests that check defaults and bounds.
pub const DURATION_FLAGS: [DurationFlag; 8] = [
    MEMBER_REPLACEMENT_DELAY,
    FORCE_DELETE_MARGIN,
    ABSORB_WINDOW,
    LOST_CLAIM_CONFIRMATION,
    APPLICATION_INTERVAL,
    LEASE_DURATION,
    FRESH_DISK_AGE,
    MAX_CLOCK_SKEW,
];

/// The namespaces served (comma-separated or repeated; none: every namespace).
pub const NAMESPACE: &str = "namespace";
/// The environment variable `--namespace` falls back to.
pub const NAMESPACE_ENV: &str = "CELLD_HEALER_NAMESPACE";
/// The /metrics, /healthz and /readyz listener.
pub const METRICS_ADDR: &str = "metrics-addr";
/// The port of that listener in a Pod (the Service and probes name it).
pub const METRICS_PORT: u16 = 8080;
/// The default listener: every address of the Pod, [`METRICS_PORT`].
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:8080";
/// Who may read `/metrics` ([`MetricsAuth`]).
pub const METRICS_AUTH: &str = "metrics-auth";

/// Who may read `/metrics`. `/healthz` and `/readyz` stay open either way: the kubelet's
/// probes carry no credentials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricsAuth {
    /// Anyone who reaches the port, over plain HTTP (the default; a NetworkPolicy limits
    /// who reaches it).
    #[default]
    None,
    /// The listener speaks HTTPS (a certificate the healer makes at start) and `/metrics`
    /// answers only a bearer token the API server authenticates (TokenReview) whose
    /// user may `get` the non-resource URL `/metrics` (SubjectAccessReview): the way
    /// kube-rbac-proxy and controller-runtime protect metrics.
    Kubernetes,
}

impl MetricsAuth {
    /// Every value, as written on the command line.
    pub const ALL: [MetricsAuth; 2] = [MetricsAuth::None, MetricsAuth::Kubernetes];

    /// The value as written on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            MetricsAuth::None => "none",
            MetricsAuth::Kubernetes => "kubernetes",
        }
    }

    /// The value written on the command line.
    pub fn parse(s: &str) -> Result<MetricsAuth, String> {
        MetricsAuth::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = MetricsAuth::ALL.iter().map(|m| m.as_str()).collect();
                format!(
                    "`{s}` is not a metrics auth mode: use one of {}",
                    valid.join(", ")
                )
            })
    }

    /// The URL scheme of the listener.
    pub fn scheme(self) -> &'static str {
        match self {
            MetricsAuth::None => "HTTP",
            MetricsAuth::Kubernetes => "HTTPS",
        }
    }
}

/// The non-resource URL a reader of `/metrics` must be allowed to `get`
/// (`--metrics-auth kubernetes`).
pub const METRICS_PATH: &str = "/metrics";

/// The log format.
pub const LOG_FORMAT: &str = "log-format";
/// The log format for collectors, the default.
pub const LOG_FORMAT_JSON: &str = "json";
/// The namespace of the coordination Lease.
pub const LEASE_NAMESPACE: &str = "lease-namespace";
/// The name of the coordination Lease.
pub const LEASE_NAME: &str = "lease-name";
/// Its default name.
pub const DEFAULT_LEASE_NAME: &str = "celld-healer";
/// The Lease an install holds in every namespace it acts in, so that of two installs
/// serving one namespace only one acts there and the other reports the conflict.
pub const NAMESPACE_CLAIM_LEASE: &str = "celld-healer-claim";
/// A namespace claim lasts this many `--lease-duration`s (at least 45 s, so that its
/// last third outlasts a write in flight). It is renewed every third of that: one
/// request per namespace every 20 s with the default 15 s. Another install takes over a
/// namespace whose holder stopped after it saw the claim unchanged that long: 60 to 80 s
/// with the default, as it looks every 20 s.
pub const NAMESPACE_CLAIM_LEASES: u32 = 4;

/// The holder identity of the namespace claims of the install whose (unsharded) Lease
/// is `lease_name` in `lease_namespace`: every replica and every shard of one install
/// holds its claims together, and two installs never share one.
pub fn claim_holder(lease_namespace: &str, lease_name: &str) -> String {
    format!("{lease_namespace}/{lease_name}")
}
/// This replica's name in the Lease and in Events.
pub const IDENTITY: &str = "identity";
/// The environment variable `--identity` falls back to (the Deployment sets it from
/// `metadata.name`).
pub const IDENTITY_ENV: &str = "POD_NAME";
/// Tests only: accept a `--member-replacement-delay` below its bound.
pub const ALLOW_SHORT_DELAYS: &str = "allow-short-delays";
/// Which share of the fleets this healer serves (`i/n`, see [`Shard`]).
pub const SHARD: &str = "shard";
/// Its default: one shard, every fleet ([`Shard::ALL`]).
pub const DEFAULT_SHARD: &str = "0/1";

/// `--name=value`.
pub fn arg(name: &str, value: &str) -> String {
    format!("--{name}={value}")
}

/// A duration that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing was written.
    #[error("empty duration")]
    Empty,
    /// Something other than digits where a number belongs.
    #[error(
        "{text:?} is not a duration: expected a number at {rest:?} (write e.g. 90s, 10m, 1h30m)"
    )]
    NotANumber { text: String, rest: String },
    /// A number without a unit.
    #[error("{text:?} has no unit: write e.g. {n}s or {n}m (units: ms, s, m, h)")]
    NoUnit { text: String, n: u128 },
    /// A unit other than ms, s, m, h.
    #[error("{text:?}: unknown unit {unit:?} (units: ms, s, m, h)")]
    UnknownUnit { text: String, unit: String },
    /// A number with more digits than any duration.
    #[error("{0:?}: number too large")]
    NumberTooLarge(String),
    /// A sum beyond what a duration holds.
    #[error("{0:?}: too long")]
    TooLong(String),
}

/// A flag value the healer refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// A served namespace that no namespace can have as its name.
    #[error(
        "--{flag} {value:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
    )]
    NotANamespace { flag: &'static str, value: String },
    /// A `--shard` that is not `i/n` with `0 <= i < n <= MAX_SHARDS`.
    #[error(
        "--{flag} {value:?}: {why} (write i/n with 0 <= i < n <= {max}, e.g. 0/2; 0/1 serves every fleet)",
        max = MAX_SHARDS
    )]
    BadShard {
        flag: &'static str,
        value: String,
        why: &'static str,
    },
    /// Below the flag's bound.
    #[error("--{flag} must be at least {min}, got {got}")]
    TooShort {
        flag: &'static str,
        min: String,
        got: String,
    },
}

/// Checks a served namespace given to `--{flag}` (the healer's `--namespace`, the
/// installer's `--watch-namespace`): the same rule, and the same words, for both.
pub fn check_namespace(flag: &'static str, value: &str) -> Result<(), FlagError> {
    if is_dns_label(value.trim(), 63) {
        Ok(())
    } else {
        Err(FlagError::NotANamespace {
            flag,
            value: value.trim().into(),
        })
    }
}

/// Parses `90s`, `10m`, `1h`, `1m30s`, `250ms`: numbers each followed by a unit (ms, s, m,
/// h), summed. A unit is required, so `10` is never guessed to mean seconds or minutes.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let text = s.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total_ms: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::NotANumber {
                text: text.into(),
                rest: rest.into(),
            });
        }
        let n: u128 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::NumberTooLarge(text.into()))?;
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
                return Err(DurationError::NoUnit {
                    text: text.into(),
                    n,
                });
            }
            u => {
                return Err(DurationError::UnknownUnit {
                    text: text.into(),
                    unit: u.into(),
                });
            }
        };
        total_ms = total_ms
            .checked_add(n.saturating_mul(ms))
            .ok_or_else(|| DurationError::TooLong(text.into()))?;
    }
    u64::try_from(total_ms)
        .map(Duration::from_millis)
        .map_err(|_| DurationError::TooLong(text.into()))
}

/// Writes a duration in the grammar of [`parse_duration`], largest units first:
/// `10m`, `1m30s`, `1h`, `250ms`, `0s`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        let n = rest / size;
        rest %= size;
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// The most shards one install may have. Each shard is a Deployment with its own Lease;
/// beyond a few dozen the shared watches cost more than the shards save.
pub const MAX_SHARDS: u32 = 64;

/// One shard of `count`: the fleets whose identity hashes to `index` ([`Shard::of`]).
/// `0/1`, the default, serves every fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// How many shards the fleets are split into.
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard::ALL
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The only shard of one: every fleet.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `i/n` (what `--shard` takes), with `0 <= i < n <= MAX_SHARDS`.
    pub fn parse(value: &str) -> Result<Shard, FlagError> {
        let bad = |why| FlagError::BadShard {
            flag: SHARD,
            value: value.trim().into(),
            why,
        };
        let (i, n) = value.trim().split_once('/').ok_or_else(|| bad("no '/'"))?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(i) || !digits(n) {
            return Err(bad("not two whole numbers"));
        }
        let (Ok(index), Ok(count)) = (i.parse::<u32>(), n.parse::<u32>()) else {
            return Err(bad("number too large"));
        };
        if count == 0 || count > MAX_SHARDS {
            return Err(bad("shard count out of range"));
        }
        if index >= count {
            return Err(bad("shard index not below the count"));
        }
        Ok(Shard { index, count })
    }

    /// The shard of `count` that serves the fleet with this identity: FNV-1a (64-bit) of
    /// the identity, modulo `count`. Keyed on the identity, not the name, so that a
    /// copied fleet (same identity) lands on the shard of its original and the identity
    /// check judges both. **Never change this function:** healers of two versions
    /// running side by side during an upgrade must agree on every fleet's shard.
    pub fn of(identity: &str, count: u32) -> u32 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in identity.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // `count` is at least 1 for every parsed shard; `max` keeps a hand-built zero safe.
        (h % u64::from(count.max(1))) as u32
    }

    /// Whether this shard serves the fleet with this identity.
    pub fn owns(&self, identity: &str) -> bool {
        Shard::of(identity, self.count) == self.index
    }

    /// The Lease this shard's replicas elect a leader on: `base` itself for a single
    /// shard (so an unsharded install keeps its Lease), else `base-<i>-of-<n>`.
    pub fn lease_name(&self, base: &str) -> String {
        if self.count == 1 {
            base.to_string()
        } else {
            format!("{base}-{}-of-{}", self.index, self.count)
        }
    }

    /// The Lease every shard leader of one shard count holds together
    /// (`holderIdentity: shards=<n>`): healers of another count act only once it has
    /// expired, so no fleet is served by two counts at once while `n` changes.
    pub fn group_lease_name(base: &str) -> String {
        format!("{base}-shards")
    }

    /// The holder identity of the group Lease for this shard's count.
    pub fn group_holder(&self) -> String {
        format!("shards={}", self.count)
    }

    /// `--shard=i/n`.
    pub fn arg(&self) -> String {
        arg(SHARD, &self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_refuse_with_the_rule() {
        assert_eq!(Shard::parse(DEFAULT_SHARD), Ok(Shard::ALL));
        assert_eq!(Shard::parse(" 2/3 "), Ok(Shard { index: 2, count: 3 }));
        for (bad, why) in [
            ("1", "no '/'"),
            ("a/2", "not two whole numbers"),
            ("-1/2", "not two whole numbers"),
            ("1/", "not two whole numbers"),
            ("0/0", "shard count out of range"),
            ("0/65", "shard count out of range"),
            ("2/2", "shard index not below the count"),
            ("0/99999999999", "number too large"),
        ] {
            let e = Shard::parse(bad).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--shard {:?}: {why}", bad.trim())),
                "{bad}: {e}"
            );
            assert!(e.contains("0 <= i < n <= 64"), "{e}");
        }
    }

    #[test]
    fn every_fleet_has_exactly_one_shard() {
        let ids: Vec<String> = (0..500).map(|i| format!("{i:026}")).collect();
        for count in 1..=8 {
            let mut sizes = vec![0usize; count as usize];
            for id in &ids {
                let owners: Vec<u32> = (0..count)
                    .filter(|&index| Shard { index, count }.owns(id))
                    .collect();
                assert_eq!(owners.len(), 1, "{id} of {count}: {owners:?}");
                sizes[owners[0] as usize] += 1;
            }
            // Spread: no shard gets under half its fair share of 500 identities.
            let fair = ids.len() / count as usize;
            assert!(sizes.iter().all(|&s| s * 2 >= fair), "{count}: {sizes:?}");
        }
    }

    #[test]
    fn shard_hash_is_frozen() {
        // Healers of two versions must agree during an upgrade: these values are the
        // contract (FNV-1a 64 of the identity). A change here is a breaking change.
        assert_eq!(
            Shard::of("", 1_000_003),
            (0xcbf2_9ce4_8422_2325u64 % 1_000_003) as u32
        );
        assert_eq!(
            Shard::of("a", u32::MAX),
            (0xaf63_dc4c_8601_ec8cu64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(
            Shard::of("ckjz8w3v0q1m2n4p5r6s7t8u9x", 2),
            Shard::of("ckjz8w3v0q1m2n4p5r6s7t8u9x", 2)
        );
    }

    #[test]
    fn shard_leases_keep_the_unsharded_name() {
        assert_eq!(Shard::ALL.lease_name("celld-healer"), "celld-healer");
        let s = Shard { index: 1, count: 3 };
        assert_eq!(s.lease_name("celld-healer"), "celld-healer-1-of-3");
        assert_eq!(
            Shard::group_lease_name("celld-healer"),
            "celld-healer-shards"
        );
        assert_eq!(s.group_holder(), "shards=3");
        assert_eq!(s.arg(), "--shard=1/3");
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        let err = |s| parse_duration(s).unwrap_err().to_string();
        assert!(err("10").contains("no unit"));
        assert!(err("10d").contains("unknown unit"));
        assert_eq!(err(""), "empty duration");
        assert!(err("m").contains("expected a number"));
        assert!(err("99999999999999999999999999999999999999999h").contains("too"));
    }

    #[test]
    fn format_round_trips() {
        for s in ["10m", "1m30s", "1h", "250ms", "0s", "1h1m1s1ms", "90m"] {
            let d = parse_duration(s).unwrap();
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{s}");
        }
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
    }

    #[test]
    fn defaults_parse_and_respect_bounds() {
        for f in DURATION_FLAGS {
            let d = parse_duration(f.default).unwrap_or_else(|e| panic!("{}: {e}", f.name));
            assert_eq!(f.default_duration(), d);
            assert_eq!(f.check(d), Ok(d), "{}", f.name);
        }
    }

    #[test]
    fn bounds_name_the_flag() {
        let short = MEMBER_REPLACEMENT_DELAY.check(Duration::from_secs(30));
        assert_eq!(
            short.unwrap_err().to_string(),
            "--member-replacement-delay must be at least 1m, got 30s"
        );
        let ok = Duration::from_secs(90);
        assert_eq!(MEMBER_REPLACEMENT_DELAY.check(ok), Ok(ok));
        assert_eq!(
            MEMBER_REPLACEMENT_DELAY.arg(ok),
            "--member-replacement-delay=1m30s"
        );
    }
}
