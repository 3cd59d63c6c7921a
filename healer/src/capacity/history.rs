//! What the evaluator remembers between reconciles, and its annotation form.
//!
//! History lives only in the `fleet.celld.dev/capacity-history` annotation of the fleet's
//! CelldBucketReservation (the healer's own field, manager `celld-healer`). It is bounded:
//! at most [`MAX_ENTRIES`] entries in each per-member map and [`MAX_BYTES`] encoded; an
//! encoding over half the limit is flagged so an operator hears before it fails.
//! Times are milliseconds since the epoch; `None` means "not running".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::reasons::Reason;
use celld_api::CapacityMode;

/// The format version written; anything else read back is dropped, never guessed at.
pub const VERSION: u32 = 1;
/// Largest encoding written.
pub const MAX_BYTES: usize = 180 * 1024;
/// Most entries in `load`, `stamps` and an addition's `before`.
pub const MAX_ENTRIES: usize = 100;

/// Why a history cannot be used or written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HistoryError {
    /// The annotation is not our JSON.
    #[error("capacity history annotation is not readable: {0}")]
    Unreadable(String),
    /// Written by another format version.
    #[error("capacity history has format version {found}, this healer reads {VERSION}")]
    Version {
        /// The version found.
        found: u32,
    },
    /// Belongs to another fleet (the reservation changed hands).
    #[error("capacity history belongs to fleet uid {found}, not {expected}")]
    OtherFleet {
        /// The uid in the annotation.
        found: String,
        /// This fleet's uid.
        expected: String,
    },
    /// A per-member map exceeds [`MAX_ENTRIES`].
    #[error("capacity history field {field} has {len} entries, more than {MAX_ENTRIES}")]
    TooManyEntries {
        /// Which map.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// The encoding exceeds [`MAX_BYTES`].
    #[error("capacity history encodes to {bytes} bytes, more than {MAX_BYTES}")]
    TooLarge {
        /// Encoded size.
        bytes: usize,
    },
}

/// One member's last counted load (for the redistribution judgement).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Load {
    /// CPU, millicores.
    pub cpu: i64,
    /// Memory, MiB.
    pub memory_mib: i64,
    /// Reported pressure or backlog.
    pub pressure: bool,
}

/// Per-member source watermarks: a window counts a sample only if both sources advanced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Stamp {
    /// Runtime `sampled_ms` last counted.
    pub runtime: i64,
    /// Metrics timestamp last counted.
    pub metrics: i64,
}

/// How the last addition turned out so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Not judged yet.
    Unknown,
    /// Load moved: newcomers work, fewer incumbents are hot, or total work grew.
    Improved,
    /// None of that.
    Ineffective,
}

/// A policy addition whose effect is being watched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Addition {
    /// Current outcome.
    pub outcome: Outcome,
    /// Incumbents' load just before the addition.
    pub before: BTreeMap<String, Load>,
    /// Member count the addition went to.
    pub target: i32,
    /// When the current outcome was first seen.
    pub since: i64,
    /// Counted samples with the current outcome.
    pub samples: i32,
    /// A judgement was made (counted once per addition).
    #[serde(default)]
    pub judged: bool,
}

/// The last decision, kept so a sample between intervals can repeat it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Remembered {
    /// Mode it was made in.
    pub mode: CapacityMode,
    /// Reason.
    pub reason: Reason,
    /// Message.
    pub message: String,
    /// Desired members.
    pub desired: i32,
}

/// Everything the evaluator remembers about one fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct History {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// The fleet it belongs to.
    pub fleet_uid: String,
    /// Last counted load per member identity.
    #[serde(default)]
    pub load: BTreeMap<String, Load>,
    /// The addition being judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addition: Option<Addition>,
    /// Judged-ineffective additions in a row.
    #[serde(default)]
    pub ineffective_batches: i32,
    /// The last decision may be acted on.
    #[serde(default)]
    pub actionable: bool,
    /// Policy fingerprint (empty after a manual edit, so windows restart).
    #[serde(default)]
    pub config: String,
    /// Membership fingerprint (sorted identities).
    #[serde(default)]
    pub membership: String,
    /// Last observation that started an interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observation: Option<i64>,
    /// Start of the running high window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_since: Option<i64>,
    /// Start of the running low window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_since: Option<i64>,
    /// Since when some applied members are pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_since: Option<i64>,
    /// Last durable member-count change, manual or not (cooldowns run from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<i64>,
    /// Counted high samples in the running window.
    #[serde(default)]
    pub high_samples: i32,
    /// Counted low samples in the running window.
    #[serde(default)]
    pub low_samples: i32,
    /// Source watermarks per identity.
    #[serde(default)]
    pub stamps: BTreeMap<String, Stamp>,
    /// A manual edit being carried out (0: none).
    #[serde(default)]
    pub manual_target: i32,
    /// spec.members as last seen (a change of value is a manual edit).
    #[serde(default)]
    pub last_manual: i32,
    /// The applied member count as last seen (a change is a durable action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied: Option<i32>,
    /// The last decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Remembered>,
}

impl History {
    /// A fresh history: the declared count is the first manual intent.
    pub fn new(fleet_uid: &str, declared: i32) -> History {
        History {
            version: VERSION,
            fleet_uid: fleet_uid.to_string(),
            load: BTreeMap::new(),
            addition: None,
            ineffective_batches: 0,
            actionable: false,
            config: String::new(),
            membership: String::new(),
            last_observation: None,
            high_since: None,
            low_since: None,
            pending_since: None,
            last_action: None,
            high_samples: 0,
            low_samples: 0,
            stamps: BTreeMap::new(),
            manual_target: declared,
            last_manual: declared,
            last_applied: None,
            decision: None,
        }
    }

    /// Restarts both windows (not the watermarks: a repeated sample stays repeated).
    pub fn reset_windows(&mut self) {
        self.reset_high();
        self.reset_low();
    }

    /// Restarts the high window.
    pub fn reset_high(&mut self) {
        self.high_since = None;
        self.high_samples = 0;
    }

    /// Restarts the low window.
    pub fn reset_low(&mut self) {
        self.low_since = None;
        self.low_samples = 0;
    }

    /// Reads the annotation of the fleet with `fleet_uid`. A history of another version
    /// or fleet is an error the caller drops (and overwrites), never a reason to block.
    pub fn decode(text: &str, fleet_uid: &str) -> Result<History, HistoryError> {
        // Version first, so a future format says so rather than "unreadable".
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Head {
            version: u32,
        }
        let head: Head =
            serde_json::from_str(text).map_err(|e| HistoryError::Unreadable(e.to_string()))?;
        if head.version != VERSION {
            return Err(HistoryError::Version {
                found: head.version,
            });
        }
        let h: History =
            serde_json::from_str(text).map_err(|e| HistoryError::Unreadable(e.to_string()))?;
        if h.fleet_uid != fleet_uid {
            return Err(HistoryError::OtherFleet {
                found: h.fleet_uid,
                expected: fleet_uid.to_string(),
            });
        }
        h.check_entries()?;
        Ok(h)
    }

    /// The annotation value; refuses what breaks the bounds.
    pub fn encode(&self) -> Result<String, HistoryError> {
        self.check_entries()?;
        let text =
            serde_json::to_string(self).map_err(|e| HistoryError::Unreadable(e.to_string()))?;
        if text.len() > MAX_BYTES {
            return Err(HistoryError::TooLarge { bytes: text.len() });
        }
        Ok(text)
    }

    /// Whether an encoding of `bytes` deserves a warning (over half the limit).
    pub fn size_warning(bytes: usize) -> bool {
        bytes > MAX_BYTES / 2
    }

    fn check_entries(&self) -> Result<(), HistoryError> {
        let before = self.addition.as_ref().map_or(0, |a| a.before.len());
        for (field, len) in [
            ("load", self.load.len()),
            ("stamps", self.stamps.len()),
            ("addition.before", before),
        ] {
            if len > MAX_ENTRIES {
                return Err(HistoryError::TooManyEntries { field, len });
            }
        }
        Ok(())
    }
}
