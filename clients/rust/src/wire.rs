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
/// members are required (rule R3).
#[derive(Deserialize)]
pub(crate) struct ByName {
    #[serde(rename = "secret")]
    _secret: serde_json::Map<String, serde_json::Value>,
    pub(crate) value: String,
}

/// ErrorBody is an error answer, `{"error": "<message>"}`.
#[derive(Deserialize)]
pub(crate) struct ErrorBody {
    pub(crate) error: Option<String>,
}
