//! The blocking client: secret reads, the per-client cache with its
//! stale-if-error fallback, and environment injection.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::options::{ClientOptions, Config, Redacted};
use crate::transport::{encode, Endpoint, Transport};

/// Client reads secrets of one team and environment from a cvsm server.
///
/// It is `Send + Sync`: share one client between threads (for example in an
/// `Arc`) so they share its cache. Every call blocks the calling thread.
///
/// ```no_run
/// let client = cvsm::Client::new(cvsm::ClientOptions::default())?;
/// let url = client.get("DATABASE_URL")?;
/// # let _ = url;
/// # Ok::<(), cvsm::Error>(())
/// ```
pub struct Client {
    config: Config,
    transport: Transport,
    cache: Mutex<Cache>,
}

/// Served is what [`Client::get_with_meta`] and
/// [`Client::get_all_with_meta`] return: the value, and whether it was
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
    /// is_stale reports whether the value was served stale, in place of an
    /// error.
    pub fn is_stale(&self) -> bool {
        self.stale.is_some()
    }

    /// into_value returns the value, stale or not.
    pub fn into_value(self) -> T {
        self.value
    }

    fn fresh(value: T) -> Self {
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

impl Client {
    /// new builds a client from `options`, falling back to the `CVSM_*`
    /// environment variables for every option left `None`. It makes no
    /// request; a missing token, base URL or team, or an invalid
    /// `CVSM_CACHE_TTL` or `CVSM_STALE_IF_ERROR`, is an
    /// [`Error::Configuration`] naming the variable.
    ///
    /// Proxies come from `http_proxy`/`HTTP_PROXY` (`https_proxy`/`HTTPS_PROXY`
    /// for an `https://` base URL) and `no_proxy`/`NO_PROXY`, read now. To
    /// bring your own [`ureq::Agent`], use [`Client::builder`].
    pub fn new(options: ClientOptions) -> Result<Client> {
        Client::build(options, None)
    }

    /// builder starts a [`ClientBuilder`], which sets options one by one and
    /// can hand the client your own [`ureq::Agent`] (the transport seam).
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    fn build(options: ClientOptions, agent: Option<ureq::Agent>) -> Result<Client> {
        let config = Config::resolve(options, agent.is_some())?;
        let transport = Transport::new(&config, agent)?;
        let cache = Cache::new(config.cache_ttl, config.stale_if_error);
        Ok(Client {
            config,
            transport,
            cache: Mutex::new(cache),
        })
    }

    /// from_env builds a client configured entirely from `CVSM_*` variables.
    pub fn from_env() -> Result<Client> {
        Client::new(ClientOptions::default())
    }

    /// get returns the value of the secret `name` in the configured
    /// environment: from the cache when it holds a fresh value, else with
    /// one request, `GET /teams/{team}/secrets/by-name/{name}`.
    ///
    /// Names are case-sensitive: an absent name is [`Error::NotFound`]
    /// (status 404), whose message suggests the existing name when only the
    /// case differs (see [`Error::suggestion`]); only then does the client
    /// ask for the listing, which tells a missing secret from a wrong team
    /// or base URL ([`Error::Configuration`]). A name that is not a valid
    /// secret name (`[A-Za-z_][A-Za-z0-9_]{0,254}`, so never `""`) is
    /// [`Error::NotFound`] without a request.
    ///
    /// With `stale_if_error` set, a refresh that fails with a network error,
    /// a 5xx or a 429 returns the kept value instead; use
    /// [`get_with_meta`](Client::get_with_meta) to learn that it was stale.
    pub fn get(&self, name: &str) -> Result<String> {
        self.get_with_meta(name).map(Served::into_value)
    }

    /// get_with_meta is [`get`](Client::get), telling a stale value from a
    /// fresh one.
    ///
    /// When the refresh fails with a network error (an unreadable answer
    /// included), a 5xx (both after retries) or a 429, and the client holds
    /// a value of `name` fetched less than `cache_ttl + stale_if_error` ago
    /// (by `get` or `get_all`), it returns that value with
    /// [`Served::stale`] set to the error, and logs a warning through the
    /// [`log`](https://docs.rs/log) facade, once per name until a refresh
    /// succeeds again. An authentication or permission error never serves a
    /// stale value: it empties the cache. No other error does either.
    pub fn get_with_meta(&self, name: &str) -> Result<Served<String>> {
        if !is_secret_name(name) {
            return Err(Error::not_found(
                format!("{name:?} is not a valid secret name (letters, digits and _, not starting with a digit, at most 255)"),
                None,
                None,
            ));
        }
        let environment = self.config.environment.as_str();
        if let Some(value) = self.cache().fresh_value(environment, name, Instant::now()) {
            return Ok(Served::fresh(value));
        }
        let read = self.transport.get_json::<ByName>(
            Endpoint::ByName,
            &format!("{}/secrets/by-name/{}", self.team_path(), encode(name)),
            &[("environment", environment)],
        );
        let err = match read {
            Ok(answer) => {
                let value = answer.value;
                self.cache()
                    .store_value(environment, name, &value, Instant::now());
                return Ok(Served::fresh(value));
            }
            // The server knows no such secret here, or no such team: the
            // listing decides which, and no kept value stands in for it.
            Err(Error::NotFound { request_id, .. }) => {
                return Err(self.guard(self.absent(name, request_id)));
            }
            Err(err) => err,
        };
        self.stale_or(err, Some(name), |cache, now| {
            cache.kept_value(environment, name, now)
        })
    }

    /// get_all returns every secret of the configured environment as name ->
    /// value (one export request, read once whatever its size), and caches
    /// the whole result, which also answers a later [`get`](Client::get)
    /// without a request.
    pub fn get_all(&self) -> Result<BTreeMap<String, String>> {
        self.get_all_with_meta().map(Served::into_value)
    }

    /// get_all_with_meta is [`get_all`](Client::get_all), telling a stale
    /// result from a fresh one, exactly as
    /// [`get_with_meta`](Client::get_with_meta) does for one name.
    pub fn get_all_with_meta(&self) -> Result<Served<BTreeMap<String, String>>> {
        let environment = self.config.environment.as_str();
        if let Some(values) = self.cache().fresh_all(environment, Instant::now()) {
            return Ok(Served::fresh(values));
        }
        let export = self.transport.get_json::<BTreeMap<String, String>>(
            Endpoint::Export,
            &format!("{}/secrets/export", self.team_path()),
            &[("format", "json"), ("environment", environment)],
        );
        match export {
            Ok(values) => {
                self.cache().store_all(environment, &values, Instant::now());
                Ok(Served::fresh(values))
            }
            Err(err) => self.stale_or(err, None, |cache, now| cache.kept_all(environment, now)),
        }
    }

    /// inject sets every secret of the configured environment as a process
    /// environment variable and returns the names it set, sorted. A variable
    /// that is already set is kept unless `overwrite` is true.
    ///
    /// It is all or nothing: every name it would set must be a valid
    /// variable name (`[A-Za-z_][A-Za-z0-9_]*`) and every value free of NUL,
    /// or it sets nothing and returns an [`Error::Configuration`] naming the
    /// secret (never its value).
    ///
    /// Like [`std::env::set_var`], call it before starting other threads
    /// that read the environment.
    pub fn inject(&self, overwrite: bool) -> Result<Vec<String>> {
        let values = self.get_all()?;
        let wanted: Vec<(String, String)> = values
            .into_iter()
            .filter(|(name, _)| overwrite || std::env::var_os(name).is_none())
            .collect();
        for (name, value) in &wanted {
            if !is_variable_name(name) {
                return Err(Error::configuration(format!(
                    "cannot inject secret {name:?}: not a valid environment variable name; nothing was set"
                )));
            }
            if value.contains('\0') {
                return Err(Error::configuration(format!(
                    "cannot inject secret {name:?}: its value contains a NUL character; nothing was set"
                )));
            }
        }
        let mut names = Vec::with_capacity(wanted.len());
        for (name, value) in wanted {
            std::env::set_var(&name, value);
            names.push(name);
        }
        Ok(names)
    }

    /// clear_cache forgets every cached value, kept stale values included,
    /// so the next read asks the server.
    pub fn clear_cache(&self) {
        self.cache().clear();
    }

    /// base_url returns the API root in use, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.config.base_url
    }

    /// team returns the team as configured: an id, or a slug.
    pub fn team(&self) -> &str {
        &self.config.team
    }

    /// environment returns the environment whose secrets this client reads.
    pub fn environment(&self) -> &str {
        &self.config.environment
    }

    /// cache_ttl returns how long values stay cached; zero means no cache.
    pub fn cache_ttl(&self) -> Duration {
        self.config.cache_ttl
    }

    /// stale_if_error returns how long a value is kept after it stops being
    /// fresh, to stand in for a failed refresh; zero means never.
    pub fn stale_if_error(&self) -> Duration {
        self.config.stale_if_error
    }

    /// timeout returns the limit for each HTTP attempt.
    pub fn timeout(&self) -> Duration {
        self.config.timeout
    }

    /// max_retries returns how many extra attempts a failed GET gets.
    pub fn max_retries(&self) -> u32 {
        self.config.max_retries
    }

    /// ca_file returns the PEM bundle trusted instead of the built-in roots,
    /// when one is configured.
    pub fn ca_file(&self) -> Option<&Path> {
        self.config.ca_file.as_deref()
    }

    /// team_path is `/teams/{team}`, the team (id or slug) percent-encoded.
    fn team_path(&self) -> String {
        format!("/teams/{}", encode(&self.config.team))
    }

    /// absent settles a by-name 404 with the listing: a listing means the
    /// name is absent (the not-found error carries the by-name answer's
    /// request id and a name differing only in case); a 404 or 400 to the
    /// listing is the configuration error of a wrong team or base URL.
    fn absent(&self, name: &str, request_id: Option<String>) -> Error {
        let environment = self.config.environment.as_str();
        let list = match self.transport.get_json::<SecretList>(
            Endpoint::List,
            &format!("{}/secrets", self.team_path()),
            &[("environment", environment), ("search", name)],
        ) {
            Ok(list) => list,
            Err(err) => return err,
        };
        let suggestion = list
            .secrets
            .into_iter()
            .filter(|s| s.environment.as_deref().is_none_or(|e| e == environment))
            .find(|s| s.name != name && s.name.eq_ignore_ascii_case(name))
            .map(|s| s.name);
        let mut message = format!("secret {name:?} not found in {environment}");
        if let Some(similar) = &suggestion {
            message.push_str(&format!("; did you mean {similar:?}?"));
        }
        Error::NotFound {
            status: Some(404),
            message,
            request_id,
            suggestion,
        }
    }

    /// stale_or answers a failed refresh (rule R14): with the value `kept`
    /// finds, marked stale, when the error allows it; else with the error.
    /// `secret` names the secret, or is `None` for `get_all`.
    fn stale_or<T>(
        &self,
        err: Error,
        secret: Option<&str>,
        kept: impl FnOnce(&mut Cache, Instant) -> Option<(T, Duration)>,
    ) -> Result<Served<T>> {
        let err = self.guard(err);
        if !may_serve_stale(&err) {
            return Err(err);
        }
        let environment = self.config.environment.as_str();
        let mut cache = self.cache();
        let Some((value, age)) = kept(&mut cache, Instant::now()) else {
            return Err(err);
        };
        let first = cache.first_warning(environment, secret);
        drop(cache);
        if first {
            let what = match secret {
                Some(name) => format!("secret {name:?}"),
                None => "every secret (get_all)".to_string(),
            };
            log::warn!(
                "cvsm: serving a stale value of {what} in {environment}, fetched {}s ago: the refresh failed ({} error): {err}",
                age.as_secs(),
                error_kind(&err),
            );
        }
        Ok(Served {
            value,
            stale: Some(err),
        })
    }

    /// guard empties the cache when the server refused the credentials (401
    /// or 403), so that a revoked token stops working at once.
    fn guard(&self, err: Error) -> Error {
        if matches!(
            err,
            Error::Authentication { .. } | Error::PermissionDenied { .. }
        ) {
            self.cache().clear();
        }
        err
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        lock(&self.cache)
    }
}

/// may_serve_stale reports whether a kept value may stand in for `err`: a
/// network error, a 5xx or a 429 (rule R14).
fn may_serve_stale(err: &Error) -> bool {
    matches!(
        err,
        Error::Network { .. }
            | Error::RateLimited { .. }
            | Error::Api {
                status: 500..=599,
                ..
            }
    )
}

/// error_kind names the kind of `err` for a log line.
fn error_kind(err: &Error) -> &'static str {
    match err {
        Error::Configuration { .. } => "configuration",
        Error::Authentication { .. } => "authentication",
        Error::PermissionDenied { .. } => "permission_denied",
        Error::NotFound { .. } => "not_found",
        Error::RateLimited { .. } => "rate_limited",
        Error::Api { .. } => "api",
        Error::Network { .. } => "network",
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.config.base_url)
            .field("team", &self.config.team)
            .field("environment", &self.config.environment)
            .field("cache_ttl", &self.config.cache_ttl)
            .field("stale_if_error", &self.config.stale_if_error)
            .field("timeout", &self.config.timeout)
            .field("max_retries", &self.config.max_retries)
            .field("ca_file", &self.config.ca_file)
            .field("token", &Redacted)
            .finish_non_exhaustive()
    }
}

/// ClientBuilder builds a [`Client`] option by option, and is where your own
/// [`ureq::Agent`] goes in.
///
/// ```no_run
/// use std::time::Duration;
/// use cvsm::ureq;
///
/// let agent: ureq::Agent = ureq::Agent::config_builder()
///     .proxy(Some(ureq::Proxy::new("http://proxy.internal:3128")?))
///     .build()
///     .into();
/// let client = cvsm::Client::builder()
///     .team("acme")
///     .timeout(Duration::from_secs(5))
///     .agent(agent)
///     .build()?;
/// # let _ = client;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Options left unset fall back to the `CVSM_*` variables exactly as with
/// [`Client::new`]; `ClientBuilder::from(options)` starts from a
/// [`ClientOptions`].
#[derive(Clone, Default)]
pub struct ClientBuilder {
    options: ClientOptions,
    agent: Option<ureq::Agent>,
}

impl ClientBuilder {
    /// token sets the API token (`CVSM_TOKEN` otherwise).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.options.token = Some(token.into());
        self
    }

    /// base_url sets the API root including `/api/v1` (`CVSM_BASE_URL` otherwise).
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.options.base_url = Some(base_url.into());
        self
    }

    /// team sets the team id or slug (`CVSM_TEAM` otherwise).
    pub fn team(mut self, team: impl Into<String>) -> Self {
        self.options.team = Some(team.into());
        self
    }

    /// environment sets the environment (`CVSM_ENVIRONMENT`, then `production`, otherwise).
    pub fn environment(mut self, environment: impl Into<String>) -> Self {
        self.options.environment = Some(environment.into());
        self
    }

    /// cache_ttl sets how long values are reused; zero disables the cache.
    pub fn cache_ttl(mut self, ttl: Duration) -> Self {
        self.options.cache_ttl = Some(ttl);
        self
    }

    /// stale_if_error keeps each cached value this long after it stops being
    /// fresh, to be served (marked stale) when a refresh fails with a
    /// network error, a 5xx or a 429 (`CVSM_STALE_IF_ERROR`, then zero:
    /// off, otherwise). See [`Client::get_with_meta`].
    pub fn stale_if_error(mut self, keep: Duration) -> Self {
        self.options.stale_if_error = Some(keep);
        self
    }

    /// timeout sets the limit for each HTTP attempt, body included.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = Some(timeout);
        self
    }

    /// max_retries sets how many extra attempts a failed GET gets.
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.options.max_retries = Some(retries);
        self
    }

    /// ca_file names a PEM bundle trusted instead of the built-in roots
    /// (`CVSM_CA_FILE` otherwise). It cannot be combined with
    /// [`agent`](ClientBuilder::agent).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.ca_file = Some(path.into());
        self
    }

    /// agent hands the client your own [`ureq::Agent`] for its requests:
    /// your proxy, TLS (client certificates, roots), resolver and connection
    /// pool. The agent is used as it is: the proxy variables and
    /// `CVSM_CA_FILE` are not read, and an explicit `ca_file` is a
    /// configuration error. On each request the client still sets its own
    /// headers, reads every status itself, follows no redirect and applies
    /// its timeout to the whole attempt.
    pub fn agent(mut self, agent: ureq::Agent) -> Self {
        self.agent = Some(agent);
        self
    }

    /// build validates the configuration and returns the client; it makes
    /// no request.
    pub fn build(self) -> Result<Client> {
        Client::build(self.options, self.agent)
    }
}

impl From<ClientOptions> for ClientBuilder {
    fn from(options: ClientOptions) -> Self {
        ClientBuilder {
            options,
            agent: None,
        }
    }
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("options", &self.options)
            .field("agent", &self.agent.as_ref().map(|_| "custom"))
            .finish()
    }
}

/// lock ignores poisoning: the guarded data stays consistent after a panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Entry is a cached value and when it was fetched.
struct Entry<T> {
    value: T,
    fetched: Instant,
}

/// Cache holds values by (environment, name) and whole `get_all` results by
/// environment. An entry is fresh for `ttl` after it was fetched, then kept
/// `keep` (stale_if_error) longer, only to stand in for a failed refresh.
struct Cache {
    ttl: Duration,
    keep: Duration,
    values: HashMap<(String, String), Entry<String>>,
    all: HashMap<String, Entry<BTreeMap<String, String>>>,
    /// warned holds (environment, name) for each stale value already
    /// logged, `None` standing for `get_all`, until a refresh succeeds.
    warned: HashSet<(String, Option<String>)>,
}

impl Cache {
    fn new(ttl: Duration, keep: Duration) -> Self {
        Cache {
            ttl,
            keep,
            values: HashMap::new(),
            all: HashMap::new(),
            warned: HashSet::new(),
        }
    }

    /// age returns how old `entry` is when it is younger than `limit`.
    fn age<T>(entry: &Entry<T>, limit: Duration, now: Instant) -> Option<Duration> {
        let age = now.saturating_duration_since(entry.fetched);
        (age < limit).then_some(age)
    }

    /// fresh_value returns a fresh value stored by `get`, else one from a
    /// fresh `get_all` result (which is kept once, not copied per name).
    fn fresh_value(&self, environment: &str, name: &str, now: Instant) -> Option<String> {
        self.value(environment, name, self.ttl, now)
            .map(|(value, _)| value)
    }

    /// kept_value returns the youngest value of `name` fetched less than
    /// `ttl + keep` ago, by `get` or by `get_all`, with its age.
    fn kept_value(
        &mut self,
        environment: &str,
        name: &str,
        now: Instant,
    ) -> Option<(String, Duration)> {
        self.sweep(now);
        self.value(environment, name, self.bound(), now)
    }

    fn value(
        &self,
        environment: &str,
        name: &str,
        limit: Duration,
        now: Instant,
    ) -> Option<(String, Duration)> {
        let single = self
            .values
            .get(&(environment.to_string(), name.to_string()))
            .and_then(|entry| Some((&entry.value, Cache::age(entry, limit, now)?)));
        let from_all = self
            .all
            .get(environment)
            .and_then(|entry| Some((entry.value.get(name)?, Cache::age(entry, limit, now)?)));
        [single, from_all]
            .into_iter()
            .flatten()
            .min_by_key(|(_, age)| *age)
            .map(|(value, age)| (value.clone(), age))
    }

    fn fresh_all(&self, environment: &str, now: Instant) -> Option<BTreeMap<String, String>> {
        self.all(environment, self.ttl, now)
            .map(|(values, _)| values)
    }

    /// kept_all returns the `get_all` result fetched less than `ttl + keep`
    /// ago, with its age.
    fn kept_all(
        &mut self,
        environment: &str,
        now: Instant,
    ) -> Option<(BTreeMap<String, String>, Duration)> {
        self.sweep(now);
        self.all(environment, self.bound(), now)
    }

    fn all(
        &self,
        environment: &str,
        limit: Duration,
        now: Instant,
    ) -> Option<(BTreeMap<String, String>, Duration)> {
        let entry = self.all.get(environment)?;
        let age = Cache::age(entry, limit, now)?;
        Some((entry.value.clone(), age))
    }

    fn store_value(&mut self, environment: &str, name: &str, value: &str, now: Instant) {
        self.warned
            .remove(&(environment.to_string(), Some(name.to_string())));
        if self.bound().is_zero() {
            return;
        }
        self.sweep(now);
        self.values.insert(
            (environment.to_string(), name.to_string()),
            Entry {
                value: value.to_string(),
                fetched: now,
            },
        );
    }

    fn store_all(&mut self, environment: &str, values: &BTreeMap<String, String>, now: Instant) {
        self.warned.retain(|(e, _)| e != environment);
        if self.bound().is_zero() {
            return;
        }
        self.sweep(now);
        self.all.insert(
            environment.to_string(),
            Entry {
                value: values.clone(),
                fetched: now,
            },
        );
    }

    /// first_warning records that the stale value of `name` (`None`: of
    /// `get_all`) was served, and reports whether it is the first time
    /// since it was last fetched.
    fn first_warning(&mut self, environment: &str, name: Option<&str>) -> bool {
        self.warned
            .insert((environment.to_string(), name.map(str::to_string)))
    }

    /// bound is how long after its fetch an entry is held at all.
    fn bound(&self) -> Duration {
        self.ttl.saturating_add(self.keep)
    }

    /// sweep drops every entry past the bound, so no value is held in
    /// memory longer than it can be served.
    fn sweep(&mut self, now: Instant) {
        let bound = self.bound();
        self.values
            .retain(|_, entry| Cache::age(entry, bound, now).is_some());
        self.all
            .retain(|_, entry| Cache::age(entry, bound, now).is_some());
    }

    fn clear(&mut self) {
        self.values.clear();
        self.all.clear();
        self.warned.clear();
    }
}

#[derive(Deserialize)]
struct SecretList {
    secrets: Vec<SecretSummary>,
}

#[derive(Deserialize)]
struct SecretSummary {
    name: String,
    environment: Option<String>,
}

/// ByName is the by-name answer, `{"secret": {...}, "value": "..."}`; both
/// members are required (rule R3).
#[derive(Deserialize)]
struct ByName {
    #[serde(rename = "secret")]
    _secret: serde_json::Map<String, serde_json::Value>,
    value: String,
}

/// is_secret_name reports whether `name` is a valid secret name:
/// `[A-Za-z_][A-Za-z0-9_]{0,254}`.
fn is_secret_name(name: &str) -> bool {
    name.len() <= 255 && is_variable_name(name)
}

/// is_variable_name reports whether `name` can be an environment variable
/// set by `inject`: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn secret_names_are_letters_digits_and_underscores() {
        for good in ["A", "_", "a_1", "DATABASE_URL", "_9", &"A".repeat(255)] {
            assert!(is_secret_name(good), "{good}");
        }
        for bad in [
            "",
            "1A",
            "A-B",
            "A B",
            "A.B",
            "É",
            "A\0",
            "A=B",
            &"A".repeat(256),
        ] {
            assert!(!is_secret_name(bad), "{bad:?}");
        }
        assert!(
            is_variable_name(&"A".repeat(300)),
            "no length limit for inject"
        );
    }

    #[test]
    fn cache_entries_are_fresh_for_the_ttl_and_keyed_by_environment() {
        let t0 = Instant::now();
        let mut cache = Cache::new(30 * S, Duration::ZERO);
        cache.store_value("production", "A", "1", t0);
        assert_eq!(
            cache.fresh_value("production", "A", t0).as_deref(),
            Some("1")
        );
        assert_eq!(
            cache.fresh_value("production", "A", t0 + 29 * S).as_deref(),
            Some("1")
        );
        assert_eq!(cache.fresh_value("staging", "A", t0), None);
        assert_eq!(cache.fresh_value("production", "A", t0 + 30 * S), None);
        assert_eq!(
            cache.kept_value("production", "A", t0 + 30 * S),
            None,
            "nothing kept without stale_if_error"
        );
        assert!(cache.values.is_empty(), "swept once past its bound");
    }

    #[test]
    fn zero_ttl_and_zero_keep_store_nothing() {
        let t0 = Instant::now();
        let mut cache = Cache::new(Duration::ZERO, Duration::ZERO);
        cache.store_value("production", "A", "1", t0);
        cache.store_all(
            "production",
            &BTreeMap::from([("B".into(), "2".into())]),
            t0,
        );
        assert!(cache.values.is_empty() && cache.all.is_empty());
    }

    #[test]
    fn a_get_all_result_serves_single_values_until_it_expires() {
        let t0 = Instant::now();
        let mut cache = Cache::new(30 * S, Duration::ZERO);
        let values = BTreeMap::from([("A".to_string(), "1".to_string())]);
        cache.store_all("production", &values, t0);
        assert_eq!(
            cache.fresh_value("production", "A", t0).as_deref(),
            Some("1")
        );
        assert_eq!(cache.fresh_value("production", "B", t0), None);
        assert_eq!(cache.fresh_value("staging", "A", t0), None);
        assert_eq!(cache.fresh_all("production", t0), Some(values));
        assert!(cache.values.is_empty(), "kept once, not copied per name");
        assert_eq!(cache.fresh_value("production", "A", t0 + 30 * S), None);
        assert_eq!(cache.fresh_all("production", t0 + 30 * S), None);
    }

    #[test]
    fn kept_values_outlive_freshness_by_stale_if_error_and_no_longer() {
        let t0 = Instant::now();
        let mut cache = Cache::new(10 * S, 20 * S);
        cache.store_value("production", "A", "1", t0);
        cache.store_all(
            "production",
            &BTreeMap::from([("B".into(), "2".into())]),
            t0,
        );
        let later = t0 + 29 * S;
        assert_eq!(cache.fresh_value("production", "A", later), None);
        assert_eq!(cache.fresh_all("production", later), None);
        assert_eq!(
            cache.kept_value("production", "A", later),
            Some(("1".into(), 29 * S))
        );
        assert_eq!(
            cache.kept_value("production", "B", later),
            Some(("2".into(), 29 * S)),
            "a get_all result keeps its names too"
        );
        assert_eq!(
            cache.kept_all("production", later).map(|(v, _)| v.len()),
            Some(1)
        );
        let past = t0 + 30 * S;
        assert_eq!(cache.kept_value("production", "A", past), None);
        assert_eq!(cache.kept_value("production", "B", past), None);
        assert_eq!(cache.kept_all("production", past), None);
        assert!(cache.values.is_empty() && cache.all.is_empty(), "swept");
    }

    #[test]
    fn with_zero_ttl_values_are_kept_only_to_stand_in_for_errors() {
        let t0 = Instant::now();
        let mut cache = Cache::new(Duration::ZERO, 5 * S);
        cache.store_value("production", "A", "1", t0);
        assert_eq!(
            cache.fresh_value("production", "A", t0),
            None,
            "never fresh"
        );
        assert_eq!(
            cache.kept_value("production", "A", t0 + 4 * S),
            Some(("1".into(), 4 * S))
        );
        assert_eq!(cache.kept_value("production", "A", t0 + 5 * S), None);
    }

    #[test]
    fn the_youngest_kept_value_wins_between_get_and_get_all() {
        let t0 = Instant::now();
        let mut cache = Cache::new(S, 60 * S);
        cache.store_value("production", "A", "old", t0);
        cache.store_all(
            "production",
            &BTreeMap::from([("A".into(), "new".into())]),
            t0 + 10 * S,
        );
        assert_eq!(
            cache.kept_value("production", "A", t0 + 20 * S),
            Some(("new".into(), 10 * S))
        );
        cache.store_value("production", "A", "newest", t0 + 15 * S);
        assert_eq!(
            cache.fresh_value("production", "A", t0 + 15 * S).as_deref(),
            Some("newest")
        );
        assert_eq!(
            cache.kept_value("production", "A", t0 + 20 * S),
            Some(("newest".into(), 5 * S))
        );
    }

    #[test]
    fn warnings_are_once_per_name_until_a_refresh_succeeds_or_the_cache_is_cleared() {
        let t0 = Instant::now();
        let mut cache = Cache::new(S, 60 * S);
        assert!(cache.first_warning("production", Some("A")));
        assert!(!cache.first_warning("production", Some("A")));
        assert!(cache.first_warning("production", Some("B")));
        assert!(cache.first_warning("staging", Some("A")));
        assert!(cache.first_warning("production", None));
        assert!(!cache.first_warning("production", None));

        cache.store_value("production", "A", "1", t0);
        assert!(cache.first_warning("production", Some("A")), "refreshed");
        assert!(!cache.first_warning("production", Some("B")));

        cache.store_all("production", &BTreeMap::new(), t0);
        assert!(
            cache.first_warning("production", Some("B")),
            "get_all refreshed all"
        );
        assert!(cache.first_warning("production", None));
        assert!(
            !cache.first_warning("staging", Some("A")),
            "other environment"
        );

        cache.clear();
        assert!(cache.first_warning("staging", Some("A")));
    }

    #[test]
    fn only_network_errors_5xx_and_429_may_serve_stale_values() {
        let api = |status| Error::Api {
            status,
            message: String::new(),
            request_id: None,
        };
        assert!(may_serve_stale(&Error::network("")));
        for status in [500, 502, 503, 504, 599] {
            assert!(may_serve_stale(&api(status)), "{status}");
        }
        assert!(may_serve_stale(&Error::RateLimited {
            status: 429,
            retry_after: None,
            message: String::new(),
            request_id: None,
        }));
        for status in [301, 409, 418] {
            assert!(!may_serve_stale(&api(status)), "{status}");
        }
        assert!(!may_serve_stale(&Error::configuration("")));
        assert!(!may_serve_stale(&Error::not_found(
            String::new(),
            None,
            None
        )));
        assert!(!may_serve_stale(&Error::Authentication {
            status: 401,
            message: String::new(),
            request_id: None,
        }));
        assert!(!may_serve_stale(&Error::PermissionDenied {
            status: 403,
            message: String::new(),
            request_id: None,
        }));
    }

    #[test]
    fn served_debug_never_shows_the_value() {
        let served = Served {
            value: "top-secret-value".to_string(),
            stale: Some(Error::network("network error: the connection was dropped")),
        };
        let printed = format!("{served:?} {served:#?}");
        assert!(!printed.contains("top-secret-value"), "{printed}");
        assert!(printed.contains("dropped"), "{printed}");
        assert!(served.is_stale());
    }
}
