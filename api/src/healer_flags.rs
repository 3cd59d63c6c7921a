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
    min: None,
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

/// Every duration flag, for the tests that check defaults and bounds.
pub const DURATION_FLAGS: [DurationFlag; 7] = [
    MEMBER_REPLACEMENT_DELAY,
    FORCE_DELETE_MARGIN,
    ABSORB_WINDOW,
    LOST_CLAIM_CONFIRMATION,
    APPLICATION_INTERVAL,
    LEASE_DURATION,
    FRESH_DISK_AGE,
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
/// This replica's name in the Lease and in Events.
pub const IDENTITY: &str = "identity";
/// The environment variable `--identity` falls back to (the Deployment sets it from
/// `metadata.name`).
pub const IDENTITY_ENV: &str = "POD_NAME";
/// Tests only: accept a `--member-replacement-delay` below its bound.
pub const ALLOW_SHORT_DELAYS: &str = "allow-short-delays";

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
