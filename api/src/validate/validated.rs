//! A fleet that passed validation. Only [`super`] makes one, so a function that takes a
//! [`ValidatedFleet`] (all of rendering) needs no checks of its own: every rule already
//! held, and the values validation parsed (the URLs) are kept here, parsed once.

use std::ops::Deref;

use crate::CelldFleet;
use crate::url::{HttpUrl, UrlError, UrlShape};

/// A [`CelldFleet`] that passed every check of [`super`], with its parsed URLs.
#[derive(Clone, Debug)]
pub struct ValidatedFleet {
    fleet: CelldFleet,
    storage_endpoint: Option<HttpUrl>,
    collector: Option<HttpUrl>,
}

impl ValidatedFleet {
    /// Wraps a fleet whose rules held, parsing its URLs (the rules parsed them with the
    /// same type, so an error here names a field the rules let through).
    pub(crate) fn new(fleet: CelldFleet) -> Result<ValidatedFleet, (&'static str, UrlError)> {
        let spec = &fleet.spec;
        let storage_endpoint = match &spec.storage.endpoint {
            Some(e) => Some(
                HttpUrl::parse(&e.url, UrlShape::Origin)
                    .map_err(|e| ("spec.storage.endpoint.url", e))?,
            ),
            None => None,
        };
        let collector = match &spec.telemetry {
            Some(t) => Some(
                HttpUrl::parse(&t.collector_url, UrlShape::Base)
                    .map_err(|e| ("spec.telemetry.collectorURL", e))?,
            ),
            None => None,
        };
        Ok(ValidatedFleet {
            fleet,
            storage_endpoint,
            collector,
        })
    }

    /// A fleet taken as valid without the checks, for tests that render values the rules
    /// would refuse (quoting of hostile strings). Only with the `unchecked` feature,
    /// which only dev-dependencies turn on; a URL that does not parse is left out.
    #[cfg(feature = "unchecked")]
    pub fn unchecked(fleet: CelldFleet) -> ValidatedFleet {
        let parse = |text: &str, shape| HttpUrl::parse(text, shape).ok();
        ValidatedFleet {
            storage_endpoint: (fleet.spec.storage.endpoint.as_ref())
                .and_then(|e| parse(&e.url, UrlShape::Origin)),
            collector: (fleet.spec.telemetry.as_ref())
                .and_then(|t| parse(&t.collector_url, UrlShape::Base)),
            fleet,
        }
    }

    /// The fleet.
    pub fn fleet(&self) -> &CelldFleet {
        &self.fleet
    }

    /// The fleet, giving up the proof that it is valid.
    pub fn into_fleet(self) -> CelldFleet {
        self.fleet
    }

    /// `spec.storage.endpoint.url`, parsed.
    pub fn storage_endpoint(&self) -> Option<&HttpUrl> {
        self.storage_endpoint.as_ref()
    }

    /// `spec.telemetry.collectorURL`, parsed.
    pub fn collector(&self) -> Option<&HttpUrl> {
        self.collector.as_ref()
    }
}

/// Read access only: a changed fleet must be validated again.
impl Deref for ValidatedFleet {
    type Target = CelldFleet;

    fn deref(&self) -> &CelldFleet {
        &self.fleet
    }
}
