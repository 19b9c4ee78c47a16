//! The client builder: options one by one, and the transport seam.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::error::Result;
use crate::http::HttpClient;
use crate::options::ClientOptions;

/// Builds a [`Client`] option by option, and takes your own
/// [`HttpClient`] (the transport seam).
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = cvsm::Client::builder()
///     .team("acme")
///     .timeout(Duration::from_secs(5))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), cvsm::Error>(())
/// ```
///
/// Options left unset fall back to the `CVSM_*` variables exactly as with
/// [`Client::new`]; `ClientBuilder::from(options)` starts from a
/// [`ClientOptions`].
#[derive(Clone, Default)]
pub struct ClientBuilder {
    options: ClientOptions,
    http: Option<Arc<dyn HttpClient>>,
}

impl ClientBuilder {
    /// Sets the API token (`CVSM_TOKEN` otherwise).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.options.token = Some(token.into());
        self
    }

    /// Sets the API root including `/api/v1` (`CVSM_BASE_URL` otherwise).
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.options.base_url = Some(base_url.into());
        self
    }

    /// Sets the team id or slug (`CVSM_TEAM` otherwise).
    pub fn team(mut self, team: impl Into<String>) -> Self {
        self.options.team = Some(team.into());
        self
    }

    /// Sets the environment (`CVSM_ENVIRONMENT`, then `production`, otherwise).
    pub fn environment(mut self, environment: impl Into<String>) -> Self {
        self.options.environment = Some(environment.into());
        self
    }

    /// Sets how long values are reused; zero disables the cache.
    pub fn cache_ttl(mut self, ttl: Duration) -> Self {
        self.options.cache_ttl = Some(ttl);
        self
    }

    /// Keeps each cached value this long after it stops being
    /// fresh, to be served (marked stale) when a refresh fails with a
    /// network error, a 5xx or a 429 (`CVSM_STALE_IF_ERROR`, then zero:
    /// off, otherwise). See [`Client::get_with_meta`].
    pub fn stale_if_error(mut self, keep: Duration) -> Self {
        self.options.stale_if_error = Some(keep);
        self
    }

    /// Turns the live cache on (`true`), or leaves it to `CVSM_LIVE` (`false`):
    /// one connection to the team's change stream makes a changed secret
    /// stop being served from the cache at once. See [`Client`]'s "Live
    /// cache".
    pub fn live(mut self, live: bool) -> Self {
        self.options.live = live;
        self
    }

    /// Sets the limit for each HTTP attempt, body included.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = Some(timeout);
        self
    }

    /// Sets how many extra attempts a failed GET gets.
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.options.max_retries = Some(retries);
        self
    }

    /// Names a PEM bundle trusted instead of the built-in roots
    /// (`CVSM_CA_FILE` otherwise). It cannot be combined with
    /// [`http_client`](ClientBuilder::http_client).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.ca_file = Some(path.into());
        self
    }

    /// Sends the client's requests through `http`, your own [`HttpClient`]
    /// (client certificates, other roots, a proxy of your choosing, another
    /// HTTP library, a test double). It is used as it is: the proxy
    /// variables and `CVSM_CA_FILE` are not read, and an explicit `ca_file`
    /// is a configuration error. The client still sets its own headers,
    /// reads every status itself and retries as its options say.
    pub fn http_client(mut self, http: impl HttpClient + 'static) -> Self {
        self.http = Some(Arc::new(http));
        self
    }

    /// Validates the configuration and returns the client; it makes
    /// no request.
    pub fn build(self) -> Result<Client> {
        Client::build(self.options, self.http)
    }
}

impl From<ClientOptions> for ClientBuilder {
    fn from(options: ClientOptions) -> Self {
        ClientBuilder {
            options,
            http: None,
        }
    }
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("options", &self.options)
            .field("http_client", &self.http.as_ref().map(|_| "custom"))
            .finish()
    }
}
