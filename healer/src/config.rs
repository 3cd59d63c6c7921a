//! The healer's delays. Defaults and bounds are those of the command-line flags
//! ([`celld_api::healer_flags`]), so the runtime, the simulation and `celld-gen install`
//! agree on them.

use celld_api::healer_flags::{self as flags, DurationFlag};

use crate::time::Span;

/// A flag's default as a span.
fn default_span(flag: DurationFlag) -> Span {
    Span::from_duration(flag.default_duration())
}

/// Delays and margins `decide` applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// How long a single member may be down before it gets a fresh disk (default 10 min,
    /// at least 1 min: [`Config::validate`]).
    pub replacement_delay: Span,
    /// How long past its deletionTimestamp a member Pod may linger before it is
    /// force-deleted (default 2 min). Kubernetes already adds the termination grace to
    /// the deletionTimestamp, so this is the margin after grace ended.
    pub force_delete_margin: Span,
    /// How long every other member must have been ready before a down member is replaced
    /// (the absorb window, default 5 min).
    pub absorb_window: Span,
    /// A claim created less than this before its Pod was made for that Pod: a fresh disk
    /// already, so replacing it again would not help (default 1 min).
    pub fresh_disk_age: Span,
    /// How long a claim must stay Lost before it gets a fresh disk (default 1 min);
    /// checked again on the fresh read that precedes the handoff.
    pub lost_confirmation: Span,
    /// How far the healer's clock may be from the API server's before rule T1 holds
    /// every destructive write (default 30 s).
    pub max_clock_skew: Span,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            replacement_delay: default_span(flags::MEMBER_REPLACEMENT_DELAY),
            force_delete_margin: default_span(flags::FORCE_DELETE_MARGIN),
            absorb_window: default_span(flags::ABSORB_WINDOW),
            fresh_disk_age: default_span(flags::FRESH_DISK_AGE),
            lost_confirmation: default_span(flags::LOST_CLAIM_CONFIRMATION),
            max_clock_skew: default_span(flags::MAX_CLOCK_SKEW),
        }
    }
}

/// A delay outside what the healer accepts.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The replacement delay is below one minute.
    #[error("the member replacement delay must be at least 1 minute, got {0} ms")]
    ReplacementDelayTooShort(i64),
    /// A negative span.
    #[error("{0} must not be negative")]
    Negative(&'static str),
}

impl Config {
    /// The shortest replacement delay a user may set (`--member-replacement-delay`'s
    /// bound).
    pub fn min_replacement_delay() -> Span {
        Span::from_duration(flags::MEMBER_REPLACEMENT_DELAY.min.unwrap_or_default())
    }

    /// Checks the values a user may set.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.replacement_delay < Self::min_replacement_delay() {
            return Err(ConfigError::ReplacementDelayTooShort(
                self.replacement_delay.millis(),
            ));
        }
        for (name, span) in [
            ("the force-delete margin", self.force_delete_margin),
            ("the absorb window", self.absorb_window),
            ("the fresh-disk age", self.fresh_disk_age),
            ("the lost-claim confirmation window", self.lost_confirmation),
        ] {
            if span.millis() < 0 {
                return Err(ConfigError::Negative(name));
            }
        }
        Ok(())
    }
}
