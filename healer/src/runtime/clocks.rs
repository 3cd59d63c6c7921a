//! The process's clocks: its monotonic origin, its wall clock, and the API server's clock
//! measured from the `Date` of every response ([`crate::clock::ServerClock`]); exported
//! as `celld_healer_clock_skew_seconds`. The requests layer ([`super::requests`]) feeds
//! it, so measuring costs no request of its own.

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tracing::warn;

use super::metrics::Metrics;
use crate::clock::{DateSample, Mono, Now, ServerClock};
use crate::time::{Span, Timestamp};

/// One pass's reading of the clocks. A decision and the fresh read that confirms it put
/// the API server's timestamps on the healer's clock with this same measurement: a
/// `Date` sample arriving in between (the fresh read's own responses bring some) would
/// otherwise move a deadline by up to the header's one-second truncation, and the
/// confirmation would refuse a write its decision had found due.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    /// The healer's clocks.
    pub now: Now,
    /// The API server's clock as measured at that moment.
    pub server: ServerClock,
}

/// The clocks of this process.
pub struct Clocks {
    origin: Instant,
    server: Mutex<ServerClock>,
    metrics: Arc<Metrics>,
    /// The bound beyond which a skew is logged (rule T1's, `--max-clock-skew`).
    bound: Span,
    /// Whether the last sample was beyond the bound (logged once per change).
    skewed: Mutex<bool>,
}

impl Clocks {
    /// Starts the monotonic clock now.
    pub fn new(metrics: Arc<Metrics>, bound: Span) -> Clocks {
        Clocks {
            origin: Instant::now(),
            server: Mutex::new(ServerClock::default()),
            metrics,
            bound,
            skewed: Mutex::new(false),
        }
    }

    /// The monotonic clock at `at`.
    pub fn mono_of(&self, at: Instant) -> Mono {
        Mono(
            i64::try_from(at.saturating_duration_since(self.origin).as_millis())
                .unwrap_or(i64::MAX),
        )
    }

    /// Both clocks, now.
    pub fn now(&self) -> Now {
        Now {
            wall: wall(),
            mono: self.mono_of(Instant::now()),
        }
    }

    /// Both clocks now, and the API server's as measured so far.
    pub fn read(&self) -> Reading {
        Reading {
            server: self.server(),
            now: self.now(),
        }
    }

    /// The API server's clock as measured so far.
    pub fn server(&self) -> ServerClock {
        *self.server.lock().expect("server clock")
    }

    /// Records one response: its `Date` header (ignored when absent or unreadable) and
    /// when its request was sent and its headers arrived.
    pub fn record(&self, date: Option<&http::HeaderValue>, sent: Instant, received: Instant) {
        let Some(date) = date
            .and_then(|d| d.to_str().ok())
            .and_then(|d| httpdate::parse_http_date(d).ok())
        else {
            return;
        };
        let Ok(since_epoch) = date.duration_since(UNIX_EPOCH) else {
            return;
        };
        let sample = DateSample {
            date: Timestamp(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)),
            sent: self.mono_of(sent),
            received: self.mono_of(received),
        };
        let skew = {
            let mut server = self.server.lock().expect("server clock");
            server.record(sample);
            server.skew(self.now())
        };
        let Some(skew) = skew else { return };
        self.metrics
            .clock_skew_seconds
            .set(skew.millis() as f64 / 1000.0);
        let beyond = skew.millis().abs() > self.bound.millis();
        let mut was = self.skewed.lock().expect("skew state");
        if beyond != *was {
            *was = beyond;
            if beyond {
                warn!(
                    skew_ms = skew.millis(),
                    bound_ms = self.bound.millis(),
                    "this process's clock is further from the API server's than --max-clock-skew: destructive writes are held (rule T1)"
                );
            } else {
                warn!(
                    skew_ms = skew.millis(),
                    "this process's clock agrees with the API server's again"
                );
            }
        }
    }
}

/// The wall clock.
pub fn wall() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Timestamp(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_date_sets_the_skew_metric() {
        let metrics = Arc::new(Metrics::new());
        let clocks = Clocks::new(metrics.clone(), Span::secs(30));
        let t = Instant::now();
        // A server 15 minutes behind this process.
        let server = SystemTime::now() - std::time::Duration::from_secs(900);
        let date = http::HeaderValue::from_str(&httpdate::fmt_http_date(server)).expect("a date");
        clocks.record(Some(&date), t, t);
        let skew = clocks.server().skew(clocks.now()).expect("measured");
        assert!((899_000..=901_000).contains(&skew.millis()), "{skew:?}");
        let text = metrics.encode();
        let exported: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("celld_healer_clock_skew_seconds "))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no skew in {text}"));
        assert!((899.0..=901.0).contains(&exported), "{text}");
        // No Date, or an unreadable one: nothing recorded.
        let other = Clocks::new(metrics, Span::secs(30));
        other.record(None, t, t);
        other.record(Some(&http::HeaderValue::from_static("yesterday")), t, t);
        assert_eq!(other.server().latest, None);
    }
}
