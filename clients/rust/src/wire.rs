//! The JSON shapes of the server's answers that the client reads.

use serde::Deserialize;

#[derive(Deserialize)]
pub(crate) struct SecretList {
    pub(crate) secrets: Vec<SecretSummary>,
}

#[derive(Deserialize)]
pub(crate) struct SecretSummary {
    pub(crate) name: String,
    pub(crate) environment: Option<String>,
}

/// ByName is the by-name answer, `{"secret": {...}, "value": "..."}`; both
/// members are required (rule R3). An end-to-end team's answer says
/// `"e2e": true`, beside the value or in the secret, and its value is then
/// a sealed envelope (which a token with a key part opens whether the flag
/// is there or not).
#[derive(Deserialize)]
pub(crate) struct ByName {
    secret: serde_json::Map<String, serde_json::Value>,
    pub(crate) value: String,
    #[serde(default)]
    e2e: Option<bool>,
}

impl ByName {
    /// is_e2e reports whether the answer flags an end-to-end team.
    pub(crate) fn is_e2e(&self) -> bool {
        self.e2e == Some(true) || self.secret.get("e2e") == Some(&serde_json::Value::Bool(true))
    }

    /// version is the secret's version the answer says (`secret.version`),
    /// when it says one.
    pub(crate) fn version(&self) -> Option<i64> {
        self.secret
            .get("version")
            .and_then(serde_json::Value::as_i64)
    }
}

/// WrappedTeamKey is the answer of `GET /teams/{team}/e2e/key`: the team
/// key at `key_version`, wrapped to the caller's public key.
#[derive(Deserialize)]
pub(crate) struct WrappedTeamKey {
    pub(crate) team_id: String,
    pub(crate) key_version: u64,
    pub(crate) wrapped_key: String,
    /// links are the team's back-links (format 2), ascending, as they
    /// came (absent or null: `None`): read with the key by
    /// [`crate::e2e::parse_links`], since a malformed one is the decryption
    /// error, not an unreadable answer.
    #[serde(default)]
    pub(crate) links: Option<serde_json::Value>,
}

/// ErrorBody is an error answer, `{"error": "<message>"}`.
#[derive(Deserialize)]
pub(crate) struct ErrorBody {
    pub(crate) error: Option<String>,
}
