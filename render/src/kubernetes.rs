//! The Kubernetes minors celld-gen renders for, written once: `version` prints the range,
//! `install`, `render`, `check` and `diff` take `--kubernetes-version` (or
//! [`KUBERNETES_VERSION_ENV`]) and refuse any other, and the one thing that differs
//! between them, how a new fleet StatefulSet starts with no member ([`StartGuard`]), is
//! decided here.

use std::fmt;
use std::str::FromStr;

/// Environment variable that `install`, `render`, `check` and `diff` read for
/// `--kubernetes-version`, so the install bundle and the fleets agree.
pub const KUBERNETES_VERSION_ENV: &str = "CELLD_GEN_KUBERNETES_VERSION";

/// A Kubernetes 1.x minor that celld-gen supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Minor(u32);

/// Oldest supported minor: its control plane runs the end-to-end subset of
/// `scripts/test-oldest.sh` (`K8S_OLDEST_VERSION` in tests/k8s-version.env).
pub const OLDEST: Minor = Minor(34);
/// Newest supported minor, and the default: every test runs against it
/// (`K8S_VERSION` in tests/k8s-version.env, which the k8s-openapi feature follows).
pub const NEWEST: Minor = Minor(37);
/// First minor that serves `MutatingAdmissionPolicy` of `admissionregistration.k8s.io/v1`
/// (GA in 1.36; its beta API is off by default before).
const MUTATING_POLICY_V1: Minor = Minor(36);

/// How a fleet StatefulSet that Argo CD or Flux creates starts with no member, so every
/// member, the first one included, goes through the healer's rules (a claim
/// `data-<fleet>-0` of another fleet, a bucket reserved to another identity, a paused
/// fleet: rules G1, V3, P1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartGuard {
    /// The workload is rendered without `spec.replicas`; the install bundle's
    /// MutatingAdmissionPolicy creates it at 0 instead of the API default of 1.
    MutatingPolicy,
    /// The workload is rendered with `spec.replicas: 0` (which the engines create it
    /// with, then leave to the healer under their ignore rules); the install bundle's
    /// ValidatingAdmissionPolicy refuses creating one at the API default and refuses any
    /// change of `spec.replicas` except the healer's, so an engine without the ignore
    /// rules fails its sync instead of stopping every member.
    RenderedZero,
}

impl Minor {
    /// Every supported minor, oldest first.
    pub fn supported() -> impl Iterator<Item = Minor> {
        (OLDEST.0..=NEWEST.0).map(Minor)
    }

    /// The minor number (`37` for 1.37).
    pub fn minor(self) -> u32 {
        self.0
    }

    /// How new fleet StatefulSets start at zero on this minor.
    pub fn start_guard(self) -> StartGuard {
        if self >= MUTATING_POLICY_V1 {
            StartGuard::MutatingPolicy
        } else {
            StartGuard::RenderedZero
        }
    }
}

impl Default for Minor {
    fn default() -> Self {
        NEWEST
    }
}

impl fmt::Display for Minor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.0)
    }
}

/// The supported minors as a list, for messages: `1.34, 1.35, 1.36, 1.37`.
pub fn supported_list() -> String {
    Minor::supported()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The supported range as people write it: `1.34-1.37`.
pub fn range() -> String {
    if OLDEST == NEWEST {
        OLDEST.to_string()
    } else {
        format!("{OLDEST}-{NEWEST}")
    }
}

/// A `--kubernetes-version` that is not a supported minor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not a version at all.
    #[error(
        "`{0}` is not a Kubernetes version: write the minor as `kubectl version` shows the \
         server, `1.35` (a patch release and a leading `v` are accepted: `v1.35.4`); \
         supported: {list}",
        list = supported_list()
    )]
    Malformed(String),
    /// A version outside the supported range.
    #[error(
        "Kubernetes {0} is not supported by this celld-gen: supported are {list}",
        list = supported_list()
    )]
    Unsupported(String),
}

impl FromStr for Minor {
    type Err = VersionError;

    /// `1.35`, `v1.35`, `1.35.4` or `v1.35.4`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.split('.');
        let number = |p: Option<&str>| {
            p.filter(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u32>().ok())
        };
        let (major, minor) = (number(parts.next()), number(parts.next()));
        let patch = parts.next();
        let well_formed = major.is_some()
            && minor.is_some()
            && patch.is_none_or(|p| number(Some(p)).is_some())
            && parts.next().is_none();
        let (Some(major), Some(minor), true) = (major, minor, well_formed) else {
            return Err(VersionError::Malformed(s.to_string()));
        };
        let m = Minor(minor);
        if major != 1 || m < OLDEST || m > NEWEST {
            return Err(VersionError::Unsupported(format!("{major}.{minor}")));
        }
        Ok(m)
    }
}

/// Decides the minor from `--kubernetes-version` and [`KUBERNETES_VERSION_ENV`] (an empty
/// variable counts as unset): either one, or both when they name the same minor, else
/// [`NEWEST`].
pub fn choose(flag: Option<&str>, env: Option<&str>) -> Result<Minor, ChooseError> {
    let env = env.filter(|v| !v.trim().is_empty());
    let parse = |origin: &'static str, v: &str| {
        v.parse::<Minor>()
            .map_err(|source| ChooseError::Invalid { origin, source })
    };
    match (flag, env) {
        (Some(f), Some(e)) => {
            let (a, b) = (
                parse("--kubernetes-version", f)?,
                parse(KUBERNETES_VERSION_ENV, e)?,
            );
            if a != b {
                return Err(ChooseError::Conflict { flag: a, env: b });
            }
            Ok(a)
        }
        (Some(f), None) => parse("--kubernetes-version", f),
        (None, Some(e)) => parse(KUBERNETES_VERSION_ENV, e),
        (None, None) => Ok(NEWEST),
    }
}

/// The Kubernetes version cannot be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChooseError {
    /// The flag or the variable is not a supported minor.
    #[error("{origin}: {source}")]
    Invalid {
        /// `--kubernetes-version` or the variable's name.
        origin: &'static str,
        /// What is wrong with it.
        source: VersionError,
    },
    /// They name different minors.
    #[error(
        "--kubernetes-version {flag} disagrees with {KUBERNETES_VERSION_ENV}={env}: the \
         install bundle and the fleets would be made for different clusters; unset one, or \
         give both the same minor"
    )]
    Conflict {
        /// The flag's minor.
        flag: Minor,
        /// The variable's minor.
        env: Minor,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_people_write_are_read_as_their_minor() {
        for s in ["1.34", "v1.34", "1.34.4", "v1.34.4", " 1.34 "] {
            assert_eq!(s.parse::<Minor>(), Ok(Minor(34)), "{s}");
        }
        assert_eq!("1.37".parse::<Minor>(), Ok(NEWEST));
    }

    #[test]
    fn other_versions_are_refused_with_the_supported_list() {
        for s in ["1.33", "1.38", "2.0", "0.37"] {
            let e = s.parse::<Minor>().unwrap_err();
            assert!(matches!(e, VersionError::Unsupported(_)), "{s}: {e}");
            assert!(e.to_string().contains("1.34, 1.35, 1.36, 1.37"), "{e}");
        }
        for s in [
            "", "1", "1.", "1.x", "v", "1.35.4.1", "1.35-rc", "latest", "1..35",
        ] {
            let e = s.parse::<Minor>().unwrap_err();
            assert!(matches!(e, VersionError::Malformed(_)), "{s}: {e}");
            assert!(e.to_string().contains("supported: 1.34"), "{e}");
        }
    }

    /// Only minors that serve MutatingAdmissionPolicy v1 rely on it.
    #[test]
    fn the_start_guard_follows_the_mutating_policy_api() {
        let guards: Vec<_> = Minor::supported().map(|m| (m.0, m.start_guard())).collect();
        assert_eq!(
            guards,
            [
                (34, StartGuard::RenderedZero),
                (35, StartGuard::RenderedZero),
                (36, StartGuard::MutatingPolicy),
                (37, StartGuard::MutatingPolicy),
            ]
        );
        assert_eq!(range(), "1.34-1.37");
    }

    #[test]
    fn flag_and_environment_must_agree() {
        assert_eq!(choose(None, None), Ok(NEWEST));
        assert_eq!(choose(None, Some("")), Ok(NEWEST));
        assert_eq!(choose(Some("1.35"), None), Ok(Minor(35)));
        assert_eq!(choose(None, Some("v1.35.2")), Ok(Minor(35)));
        assert_eq!(choose(Some("1.35"), Some("v1.35.2")), Ok(Minor(35)));
        let e = choose(Some("1.35"), Some("1.36")).unwrap_err();
        assert!(
            e.to_string()
                .contains("disagrees with CELLD_GEN_KUBERNETES_VERSION=1.36")
        );
        let e = choose(None, Some("1.30")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("CELLD_GEN_KUBERNETES_VERSION: Kubernetes 1.30")
        );
    }
}
