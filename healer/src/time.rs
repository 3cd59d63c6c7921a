//! Time as the healer sees it: milliseconds since the Unix epoch, passed in by the caller.
//! `decide` never reads a clock; the runtime passes the wall clock, the simulation its own.

use std::fmt;

/// A point in time, in milliseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

/// A span of time in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Span(pub i64);

impl Span {
    /// `n` seconds.
    pub const fn secs(n: i64) -> Span {
        Span(n * 1000)
    }
    /// `n` minutes.
    pub const fn mins(n: i64) -> Span {
        Span(n * 60_000)
    }
    /// Milliseconds.
    pub const fn millis(self) -> i64 {
        self.0
    }
    /// A [`std::time::Duration`], saturating at the longest span.
    pub fn from_duration(d: std::time::Duration) -> Span {
        Span(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

impl std::ops::Sub for Span {
    type Output = Span;
    fn sub(self, rhs: Span) -> Span {
        Span(self.0.saturating_sub(rhs.0))
    }
}

impl std::ops::Add<Span> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Span) -> Timestamp {
        Timestamp(self.0.saturating_add(rhs.0))
    }
}

impl std::ops::Sub<Span> for Timestamp {
    type Output = Timestamp;
    fn sub(self, rhs: Span) -> Timestamp {
        Timestamp(self.0.saturating_sub(rhs.0))
    }
}

impl std::ops::Sub<Timestamp> for Timestamp {
    type Output = Span;
    fn sub(self, rhs: Timestamp) -> Span {
        Span(self.0.saturating_sub(rhs.0))
    }
}

impl Timestamp {
    /// Seconds since the epoch.
    pub const fn from_secs(s: i64) -> Timestamp {
        Timestamp(s * 1000)
    }

    /// RFC 3339 in UTC with second precision, e.g. `2026-11-29T08:15:00Z` (the form
    /// Kubernetes uses for condition times).
    pub fn rfc3339(self) -> String {
        // Hand-rolled: status carries one of these per member, and `decide` must stay
        // fast on a 100-member fleet.
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        if !(0..=9999).contains(&y) {
            return self.to_string();
        }
        let mut b = *b"0000-00-00T00:00:00Z";
        let mut put = |at: usize, v: u32, width: usize| {
            let mut v = v;
            for i in (0..width).rev() {
                b[at + i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, y as u32, 4);
        put(5, m, 2);
        put(8, d, 2);
        put(11, (rem / 3600) as u32, 2);
        put(14, ((rem % 3600) / 60) as u32, 2);
        put(17, (rem % 60) as u32, 2);
        let mut out = String::with_capacity(b.len());
        out.extend(b.iter().map(|&c| c as char));
        out
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60
        )
    }
}

/// Days since the epoch to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(Timestamp(0).rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(
            Timestamp::from_secs(1_795_940_100).rfc3339(),
            "2026-11-29T08:15:00Z"
        );
        assert_eq!(Timestamp(951_782_400_999).rfc3339(), "2000-02-29T00:00:00Z");
    }
}
