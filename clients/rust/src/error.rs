//! The crate's error type: one enum, one variant per kind of failure.
//!
//! Callers branch on the variant, never on the message text. Messages never
//! contain the API token or a secret value.

/// The crate's result type: `std::result::Result<T, cvsm::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// Every failure the cvsm client reports; match on the variant to
/// decide what to do.
///
/// Every variant carries its message (the `Display` text), and the
/// accessors [`status`](Error::status), [`retry_after`](Error::retry_after),
/// [`request_id`](Error::request_id) and [`suggestion`](Error::suggestion)
/// read the other fields whatever the variant. The variants are
/// `#[non_exhaustive]`: match them with `..`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The client cannot be built or used as configured:
    /// a missing token, base URL or team (the message names the `CVSM_*`
    /// variable), an invalid option or variable, an unreadable CA file, a
    /// server answer saying the base URL or team (HTTP 404 to the listing or
    /// the export; a team slug that is none of the caller's teams included)
    /// or the environment (HTTP 400) is wrong, or a secret that
    /// [`inject`](crate::Client::inject) cannot put in the process
    /// environment. For an end-to-end team: a `cvsm_` token whose key part
    /// (after the dot) is malformed, a token without one reading that
    /// team's values, or a key part used on a team that is not end-to-end.
    #[error("{message}")]
    #[non_exhaustive]
    Configuration {
        /// What is wrong, naming the option or variable.
        message: String,
        /// The HTTP status when the server's answer showed the error.
        status: Option<u16>,
        /// The `X-Request-Id` of that answer.
        request_id: Option<String>,
    },

    /// The server rejected the token (HTTP 401): it is
    /// wrong, expired, revoked or locked. The client's cache is emptied.
    #[error("{message}")]
    #[non_exhaustive]
    Authentication {
        /// The HTTP status, 401.
        status: u16,
        /// The status and the server's message.
        message: String,
        /// The answer's `X-Request-Id`.
        request_id: Option<String>,
    },

    /// The token is valid but may not do this (HTTP
    /// 403), for example an IP allowlist miss. The client's cache is emptied.
    #[error("{message}")]
    #[non_exhaustive]
    PermissionDenied {
        /// The HTTP status, 403.
        status: u16,
        /// The status and the server's message.
        message: String,
        /// The answer's `X-Request-Id`.
        request_id: Option<String>,
    },

    /// The secret does not exist in the configured
    /// environment (the by-name read answered HTTP 404 and the listing
    /// confirmed the team: `status` is `Some(404)`), or its name is not a
    /// valid secret name (no request is made: `status` is `None`).
    #[error("{message}")]
    #[non_exhaustive]
    NotFound {
        /// `Some(404)` for an absent name, `None` for an invalid one.
        status: Option<u16>,
        /// What was not found, with the suggestion when there is one.
        message: String,
        /// The `X-Request-Id` of the by-name answer.
        request_id: Option<String>,
        /// The existing name that differs from the one asked for only in case.
        suggestion: Option<String>,
    },

    /// The server answered HTTP 429; wait `retry_after`
    /// seconds before trying again. The client never retries a 429 itself.
    #[error("{message}")]
    #[non_exhaustive]
    RateLimited {
        /// The HTTP status, 429.
        status: u16,
        /// Whole seconds from the `Retry-After` header (a delay, or an HTTP
        /// date counted from now and rounded up); `None` without a usable header.
        retry_after: Option<u64>,
        /// The status and the server's message.
        message: String,
        /// The answer's `X-Request-Id`.
        request_id: Option<String>,
    },

    /// Any other non-2xx answer, including a redirect (never
    /// followed) and a 502, 503 or 504 that persisted through every retry.
    #[error("{message}")]
    #[non_exhaustive]
    Api {
        /// The HTTP status.
        status: u16,
        /// The status and the server's message.
        message: String,
        /// The answer's `X-Request-Id`.
        request_id: Option<String>,
    },

    /// A value of an end-to-end team, or the team key the server wrapped
    /// to the token, does not open with the token's key part: it was
    /// altered, sealed for another secret, environment or team, malformed,
    /// or sealed under a key version the server does not give this token.
    /// It is never retried and never answered with a kept value. The
    /// message names the secret, never a value or a key; there is no status.
    #[error("{message}")]
    #[non_exhaustive]
    Decryption {
        /// What did not open, and why.
        message: String,
        /// The `X-Request-Id` of the answer that carried the value (the
        /// by-name read or the export), or of the team key's answer when the
        /// key wrapped to the token does not open.
        request_id: Option<String>,
    },

    /// No usable answer arrived after every retry: connection
    /// refused or dropped, a timeout, a TLS failure, or a 2xx answer whose
    /// body is not the JSON the request promises.
    #[error("{message}")]
    #[non_exhaustive]
    Network {
        /// What went wrong on the last attempt.
        message: String,
        /// The `X-Request-Id` of the unreadable answer, when one arrived.
        request_id: Option<String>,
        /// The underlying transport error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
}

impl Error {
    /// Returns the HTTP status behind this error, or `None` when the
    /// failure did not come from an HTTP answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Authentication { status, .. }
            | Error::PermissionDenied { status, .. }
            | Error::RateLimited { status, .. }
            | Error::Api { status, .. } => Some(*status),
            Error::NotFound { status, .. } | Error::Configuration { status, .. } => *status,
            Error::Decryption { .. } | Error::Network { .. } => None,
        }
    }

    /// Returns how many seconds to wait before retrying, for a
    /// rate-limit error whose answer carried a usable `Retry-After`.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Error::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Returns the `X-Request-Id` header of the answer this error
    /// came from (for an absent name, the by-name read's; for a value that
    /// does not open, the answer that carried it, or the team key's when the
    /// key wrapped to the token does not open), or `None` when there
    /// was no answer or it had no such header. Quote it when reporting a
    /// problem to the server's operators.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Error::Configuration { request_id, .. }
            | Error::Authentication { request_id, .. }
            | Error::PermissionDenied { request_id, .. }
            | Error::NotFound { request_id, .. }
            | Error::RateLimited { request_id, .. }
            | Error::Api { request_id, .. }
            | Error::Decryption { request_id, .. }
            | Error::Network { request_id, .. } => request_id.as_deref(),
        }
    }

    /// Returns, for a name not found, the existing name that
    /// differs from it only in case (`API_KEY` for `api_key`).
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            Error::NotFound { suggestion, .. } => suggestion.as_deref(),
            _ => None,
        }
    }

    /// Returns the error's message, the same text as `Display`.
    pub fn message(&self) -> &str {
        match self {
            Error::Configuration { message, .. }
            | Error::Authentication { message, .. }
            | Error::PermissionDenied { message, .. }
            | Error::NotFound { message, .. }
            | Error::RateLimited { message, .. }
            | Error::Api { message, .. }
            | Error::Decryption { message, .. }
            | Error::Network { message, .. } => message,
        }
    }

    pub(crate) fn configuration(message: impl Into<String>) -> Self {
        Error::Configuration {
            message: message.into(),
            status: None,
            request_id: None,
        }
    }

    pub(crate) fn decryption(message: impl Into<String>, request_id: Option<String>) -> Self {
        Error::Decryption {
            message: message.into(),
            request_id,
        }
    }

    pub(crate) fn not_found(
        message: String,
        request_id: Option<String>,
        suggestion: Option<String>,
    ) -> Self {
        Error::NotFound {
            status: None,
            message,
            request_id,
            suggestion,
        }
    }

    #[cfg(test)]
    pub(crate) fn network(message: impl Into<String>) -> Self {
        Error::Network {
            message: message.into(),
            request_id: None,
            source: None,
        }
    }
}
