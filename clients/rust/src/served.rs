//! Served values: what the `*_with_meta` reads return, a value and whether
//! it was served stale.

use std::fmt;

use crate::error::Error;
use crate::options::Redacted;

/// What [`Client::get_with_meta`](crate::Client::get_with_meta) and
/// [`Client::get_all_with_meta`](crate::Client::get_all_with_meta) return: the value, and whether it was
/// served stale.
///
/// A value is stale when the client could not refresh it (a network error,
/// a 5xx or a 429, after retries) and answered with the value it had kept
/// instead, no older than `cache_ttl + stale_if_error`; `stale` then holds
/// the error the refresh failed with. Its `Debug` output never shows the
/// value.
///
/// ```no_run
/// # let client = cvsm::Client::new(cvsm::ClientOptions::default())?;
/// let served = client.get_with_meta("DATABASE_URL")?;
/// if let Some(err) = &served.stale {
///     eprintln!("using the last known DATABASE_URL: {err}");
/// }
/// let database_url = served.value;
/// # let _ = database_url;
/// # Ok::<(), cvsm::Error>(())
/// ```
#[non_exhaustive]
pub struct Served<T> {
    /// The value: a secret's, or every secret's for `get_all_with_meta`.
    pub value: T,
    /// `Some(error)` when the value was served stale: the error the refresh
    /// failed with (a [`Network`](Error::Network), [`Api`](Error::Api) 5xx
    /// or [`RateLimited`](Error::RateLimited) error). `None` for a fresh
    /// value, from the server or the cache.
    pub stale: Option<Error>,
}

impl<T> Served<T> {
    /// Reports whether the value was served stale, in place of an
    /// error.
    pub fn is_stale(&self) -> bool {
        self.stale.is_some()
    }

    /// Returns the value, stale or not.
    pub fn into_value(self) -> T {
        self.value
    }

    pub(crate) fn fresh(value: T) -> Self {
        Served { value, stale: None }
    }
}

impl<T> fmt::Debug for Served<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("value", &Redacted)
            .field("stale", &self.stale)
            .finish()
    }
}
