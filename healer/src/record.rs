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
