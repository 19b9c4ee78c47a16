//! The crate's error type: one enum, one variant per kind of failure.
//!
//! Callers branch on the variant, never on the message text. Messages never
//! contain the API token or a secret value.

/// Result is the crate's result type: `std::result::Result<T, cvsm::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// Error is every failure the cvsm client reports; match on the variant to
/// decide what to do. Each variant that comes from an HTTP response carries
/// its status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Configuration means the client cannot be built or used as configured:
    /// a missing token, base URL or team (the message names the `CVSM_*`
    /// variable), an invalid `CVSM_CACHE_TTL`, or a team slug that matches
    /// none of the caller's teams.
    #[error("{message}")]
    Configuration {
        /// What is wrong, naming the option or variable.
        message: String,
    },

    /// Authentication means the server rejected the token (HTTP 401): it is
    /// wrong, expired, revoked or locked. The client's cache is emptied.
    #[error("{message}")]
    Authentication {
        /// The HTTP status, 401.
        status: u16,
        /// The status and the server's message.
        message: String,
    },

    /// PermissionDenied means the token is valid but may not do this (HTTP
    /// 403), for example an IP allowlist miss.
    #[error("{message}")]
    PermissionDenied {
        /// The HTTP status, 403.
        status: u16,
        /// The status and the server's message.
        message: String,
    },

    /// NotFound means the secret does not exist in the configured environment
    /// (`status` is `None`; when a name differs only in case the message
    /// suggests it), or the server answered HTTP 404 (`status` is `Some(404)`).
    #[error("{message}")]
    NotFound {
        /// `Some(404)` for an HTTP 404, `None` when the name is simply absent.
        status: Option<u16>,
        /// What was not found, with a suggestion when one exists.
        message: String,
    },

    /// RateLimited means the server answered HTTP 429; wait `retry_after`
    /// seconds before trying again. The client never retries a 429 itself.
    #[error("{message}")]
    RateLimited {
        /// The HTTP status, 429.
        status: u16,
        /// Whole seconds from the `Retry-After` header, when it had a number.
        retry_after: Option<u64>,
        /// The status and the server's message.
        message: String,
    },

    /// Api means any other non-2xx answer, including a 502, 503 or 504 that
    /// persisted through every retry.
    #[error("{message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The status and the server's message.
        message: String,
    },

    /// Network means no usable answer arrived after every retry: connection
    /// refused or dropped, a timeout, or a response body that could not be
    /// read or was not the JSON expected.
    #[error("{message}")]
    Network {
        /// What went wrong on the last attempt.
        message: String,
        /// The underlying transport error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
}

impl Error {
    /// status returns the HTTP status behind this error, or `None` when the
    /// failure did not come from an HTTP response.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Authentication { status, .. }
            | Error::PermissionDenied { status, .. }
            | Error::RateLimited { status, .. }
            | Error::Api { status, .. } => Some(*status),
            Error::NotFound { status, .. } => *status,
            Error::Configuration { .. } | Error::Network { .. } => None,
        }
    }

    /// retry_after returns how many seconds to wait before retrying, for a
    /// rate-limit error whose response carried `Retry-After`.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Error::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub(crate) fn configuration(message: impl Into<String>) -> Self {
        Error::Configuration {
            message: message.into(),
        }
    }
}
