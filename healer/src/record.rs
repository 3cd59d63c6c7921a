//! The handoff record: the annotation a disk handoff writes on the member Pod before it
//! deletes anything, read back by [`crate::observe`] into the snapshot and written by
//! the runtime from a [`crate::plan::Handoff`]. Its own module, so that `plan` and
//! `snapshot` both use it without importing each other.

use serde::{Deserialize, Serialize};

/// The record annotation ([`celld_api::labels::REPLACEMENT_RECORD`]) on a Pod whose
/// disk is being handed off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HandoffRecord {
    /// The fleet identity.
    pub identity: String,
    /// uid of the claim to delete.
    pub claim_uid: String,
    /// resourceVersion the claim had when the handoff was decided.
    pub claim_resource_version: String,
    /// Set only after the guarded Pod delete was acknowledged.
    pub committed: bool,
    /// The rule that started the handoff, whose facts rule H6 checks again before the
    /// claim is deleted. Absent in records written before it existed: those are checked
    /// as a member down too long unless their claim is Lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<HandoffCause>,
}

/// Why a member gets a fresh disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HandoffCause {
    /// Its claim is Lost (rule R2).
    LostDisk,
    /// It was the only member down for the replacement delay (rule R3).
    DownTooLong,
}

impl HandoffRecord {
    /// The annotation value.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a record always serializes")
    }

    /// Parses an annotation value; every field is required.
    pub fn parse(value: &str) -> Result<HandoffRecord, String> {
        let r: HandoffRecord = serde_json::from_str(value).map_err(|e| e.to_string())?;
        if r.identity.is_empty() || r.claim_uid.is_empty() || r.claim_resource_version.is_empty() {
            return Err("the record names no fleet or claim".into());
        }
        Ok(r)
    }
}
