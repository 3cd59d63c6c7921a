//! Why the evaluator decided what it did: the `status.capacity.reason` vocabulary.

use serde::{Deserialize, Serialize};

/// One reason per decision; its CamelCase name is what `status.capacity` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// Load stayed high long enough: grow by the step.
    ScaleOutRecommended,
    /// Load stayed low long enough: remove one member.
    ScaleInRecommended,
    /// Load is high, but not for long enough or not for enough samples yet.
    StabilizingOut,
    /// Load is low, but not for long enough or not for enough samples yet.
    StabilizingIn,
    /// Load lies between the thresholds.
    WithinThresholds,
    /// Load is low but the fleet is at minMembers.
    AtMinimum,
    /// Load is high but the fleet is at maxMembers.
    AtMaximum,
    /// Some applied members are not yet ready with a fresh runtime sample.
    PendingCapacity,
    /// Members stayed pending past provisioningTimeoutSeconds.
    IneffectiveCapacity,
    /// A member's runtime or metrics sample is missing, stale or out of range.
    IncompleteMetrics,
    /// The policy, the applied count or the observation time cannot be evaluated.
    InvalidObservation,
    /// No member's sources advanced since the last counted observation.
    RepeatedSamples,
    /// A sample between intervals contradicted a running window.
    WindowInterrupted,
    /// The policy or the membership changed: windows restart.
    PolicyChanged,
    /// A cooldown since the last durable member-count change is still running.
    RateLimited,
    /// A manual edit of spec.members takes precedence.
    ManualOverride,
    /// One `/scale` writer owns spec.members.
    ExternalOwner,
    /// After an addition, waiting to see whether load moved onto the newcomers.
    ObservingRedistribution,
    /// Additions did not relieve the incumbents: pressure-driven growth is held.
    LoadNotRedistributed,
}

impl Reason {
    /// The CamelCase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ScaleOutRecommended => "ScaleOutRecommended",
            Reason::ScaleInRecommended => "ScaleInRecommended",
            Reason::StabilizingOut => "StabilizingOut",
            Reason::StabilizingIn => "StabilizingIn",
            Reason::WithinThresholds => "WithinThresholds",
            Reason::AtMinimum => "AtMinimum",
            Reason::AtMaximum => "AtMaximum",
            Reason::PendingCapacity => "PendingCapacity",
            Reason::IneffectiveCapacity => "IneffectiveCapacity",
            Reason::IncompleteMetrics => "IncompleteMetrics",
            Reason::InvalidObservation => "InvalidObservation",
            Reason::RepeatedSamples => "RepeatedSamples",
            Reason::WindowInterrupted => "WindowInterrupted",
            Reason::PolicyChanged => "PolicyChanged",
            Reason::RateLimited => "RateLimited",
            Reason::ManualOverride => "ManualOverride",
            Reason::ExternalOwner => "ExternalOwner",
            Reason::ObservingRedistribution => "ObservingRedistribution",
            Reason::LoadNotRedistributed => "LoadNotRedistributed",
        }
    }

    /// Every reason, for metrics that export one series per reason.
    pub const ALL: [Reason; 19] = [
        Reason::ScaleOutRecommended,
        Reason::ScaleInRecommended,
        Reason::StabilizingOut,
        Reason::StabilizingIn,
        Reason::WithinThresholds,
        Reason::AtMinimum,
        Reason::AtMaximum,
        Reason::PendingCapacity,
        Reason::IneffectiveCapacity,
        Reason::IncompleteMetrics,
        Reason::InvalidObservation,
        Reason::RepeatedSamples,
        Reason::WindowInterrupted,
        Reason::PolicyChanged,
        Reason::RateLimited,
        Reason::ManualOverride,
        Reason::ExternalOwner,
        Reason::ObservingRedistribution,
        Reason::LoadNotRedistributed,
    ];
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
