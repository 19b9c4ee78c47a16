//! The blocking client: secret reads with the cache's stale-if-error
//! fallback, and environment injection.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::builder::ClientBuilder;
use crate::cache::{lock, Cache};
use crate::e2e::{Envelope, Failure, TeamKey, TokenKey};
use crate::error::{Error, Result};
use crate::http::HttpClient;
use crate::live::{Live, Stream};
use crate::options::{ClientOptions, Config, Redacted};
use crate::rules;
use crate::served::Served;
use crate::transport::{encode, Answer, Endpoint, Transport};
use crate::wire::{ByName, SecretList, WrappedTeamKey};

/// KEYLESS is the error of a token without its key part reading an
/// end-to-end team.
const KEYLESS: &str = concat!(
    "this team is end-to-end: the token needs its key part",
    " (CVSM_TOKEN: cvsm_<64 hex digits>.<key>, as it was shown when it was made)"
);

/// A blocking client that reads the secrets of one team and environment
/// from a cvsm server.
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
///
/// With the token of an end-to-end team (`cvsm_<64 hex>.<key>`), it opens
/// each value itself: the first read also fetches the team key wrapped to
/// the token (`GET /teams/{team}/e2e/key`), which it keeps until
/// [`clear_cache`](Client::clear_cache); a value that does not open is an
/// [`Error::Decryption`].
///
/// # Live cache
///
/// With [`ClientOptions::live`] (or `CVSM_LIVE=1`) the client keeps one
/// connection to the team's change stream, opened by its first read and
/// shared by every name it reads: a changed secret stops being served from
/// the cache as soon as the server announces it (within milliseconds), so
/// the next [`get`](Client::get) reads the new value, while a secret that
/// does not change still costs one request per `cache_ttl`. The stream
/// carries names and versions, never values. It is followed on one thread
/// per client, which ends when the client is [closed](Client::close) or
/// dropped. While the stream is down the cache works as without `live`
/// (`cache_ttl`, stale-if-error) and the thread reconnects with a growing,
/// jittered pause (at least 300 s after a 401, 403 or 404).
///
/// ```no_run
/// let client = cvsm::Client::new(cvsm::ClientOptions {
///     live: true,
///     ..Default::default()
/// })?;
/// let password = client.get("DB_PASSWORD")?; // a rotation is seen within a second
/// # let _ = password;
/// # Ok::<(), cvsm::Error>(())
/// ```
pub struct Client {
    config: Config,
    transport: Arc<Transport>,
    /// cache is shared with the live cache's thread, if any.
    cache: Arc<Mutex<Cache>>,
    /// live is the change stream's handle of a live client.
    live: Option<Live>,
    /// key_fetch is held while the team key is fetched, so that concurrent
    /// first reads of an end-to-end team fetch it once.
    key_fetch: Mutex<()>,
}

impl Client {
    /// Builds a client from `options`, falling back to the `CVSM_*`
    /// environment variables for every option left `None`. It makes no
    /// request; a missing token, base URL or team, or an invalid
    /// `CVSM_CACHE_TTL` or `CVSM_STALE_IF_ERROR`, is an
    /// [`Error::Configuration`] naming the variable.
    ///
    /// Proxies come from `http_proxy`/`HTTP_PROXY` (`https_proxy`/`HTTPS_PROXY`
    /// for an `https://` base URL) and `no_proxy`/`NO_PROXY`, read now. To
    /// bring your own [`HttpClient`], use [`Client::builder`].
    pub fn new(options: ClientOptions) -> Result<Client> {
        Client::build(options, None)
    }

    /// Starts a [`ClientBuilder`], which sets options one by one and
    /// can hand the client your own [`HttpClient`] (the transport seam).
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    pub(crate) fn build(
        options: ClientOptions,
        http: Option<Arc<dyn HttpClient>>,
    ) -> Result<Client> {
        let config = Config::resolve(options, http.is_some())?;
        let transport = Transport::new(&config, http)?;
        let cache = Cache::new(config.cache_ttl, config.stale_if_error);
        Ok(Client {
            live: config.live.then(Live::new),
            config,
            transport: Arc::new(transport),
            cache: Arc::new(Mutex::new(cache)),
            key_fetch: Mutex::new(()),
        })
    }

    /// Builds a client configured entirely from `CVSM_*` variables.
    pub fn from_env() -> Result<Client> {
        Client::new(ClientOptions::default())
    }

    /// Returns the value of the secret `name` in the configured
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
    ///
    /// For an end-to-end team the value is opened with the team key (fetched
    /// by the first read, a second request) for this environment and this
    /// name: [`Error::Decryption`] when it does not open, and
    /// [`Error::Configuration`] when the token has no key part.
    pub fn get(&self, name: &str) -> Result<String> {
        self.get_with_meta(name).map(Served::into_value)
    }

    /// Works as [`get`](Client::get), telling a stale value from a
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
            return Err(invalid_name(name));
        }
        let environment = self.config.environment.as_str();
        if let Some(value) = self.cache().fresh_value(environment, name, Instant::now()) {
            return Ok(Served::fresh(value));
        }
        self.live_start();
        let mark = self.cache().mark();
        let err = match self.read(environment, name) {
            Ok((value, version)) => {
                // Not after a clear_cache or 401/403, nor (live) a change of
                // the secret, while the read was in flight.
                self.cache()
                    .store_value(environment, name, &value, version, mark, Instant::now());
                return Ok(Served::fresh(value));
            }
            // The server knows no such secret here, or no such team: the
            // listing decides which, and no kept value stands in for it.
            Err(Error::NotFound { request_id, .. }) => {
                return Err(self.guard(self.absent(environment, name, request_id)));
            }
            Err(err) => err,
        };
        self.stale_or(err, Some(name), |cache, now| {
            cache.kept_value(environment, name, now)
        })
    }

    /// Returns the value of the secret `name` in the configured environment
    /// read now, past the cache: one request, whatever the cache holds. The
    /// cache then holds the value read.
    ///
    /// It is for the pattern "my database login failed: fetch the credential
    /// again once", after a rotation the cache has not seen yet:
    ///
    /// ```no_run
    /// # fn connect(_: &str) -> Result<(), ()> { Ok(()) }
    /// # let client = cvsm::Client::from_env()?;
    /// if connect(&client.get("DB_PASSWORD")?).is_err() {
    ///     let _ = connect(&client.refresh("DB_PASSWORD")?); // once, not in a loop
    /// }
    /// # Ok::<(), cvsm::Error>(())
    /// ```
    ///
    /// Its request, errors, retries and not-found listing are those of
    /// [`get`](Client::get), but no cached value ever answers it, not even
    /// with `stale_if_error` set: the caller asked for the current value.
    pub fn refresh(&self, name: &str) -> Result<String> {
        self.refresh_in(name, &self.config.environment)
    }

    /// Works as [`refresh`](Client::refresh) in `environment`: the client's
    /// own environment's value is then cached, another environment's is
    /// returned and not cached. An empty `environment` is an
    /// [`Error::Configuration`].
    pub fn refresh_in(&self, name: &str, environment: &str) -> Result<String> {
        if environment.trim().is_empty() {
            return Err(Error::configuration(
                "refresh_in: the environment must not be empty",
            ));
        }
        if !is_secret_name(name) {
            return Err(invalid_name(name));
        }
        let own = environment == self.config.environment;
        self.live_start();
        let mark = self.cache().mark();
        let (value, version) = match self.read(environment, name) {
            Ok(read) => read,
            Err(Error::NotFound { request_id, .. }) => {
                return Err(self.guard(self.absent(environment, name, request_id)));
            }
            Err(err) => return Err(self.guard(err)),
        };
        if own {
            self.cache()
                .store_value(environment, name, &value, version, mark, Instant::now());
        }
        Ok(value)
    }

    /// Stops a live client's change stream (see "Live cache" above);
    /// dropping the client does too. Reads keep working, with the plain
    /// cache. Without `live` it does nothing.
    pub fn close(&self) {
        if let Some(live) = &self.live {
            live.close();
        }
    }

    /// Tells whether a live client's change stream is up now (its snapshot
    /// received); always false without `live`.
    pub fn live_connected(&self) -> bool {
        self.live.as_ref().is_some_and(Live::connected)
    }

    /// Returns every secret of the configured environment as name ->
    /// value (one export request, read once whatever its size), and caches
    /// the whole result, which also answers a later [`get`](Client::get)
    /// without a request. With the token of an end-to-end team every value
    /// is opened, as [`get`](Client::get) opens one; with a token without its
    /// key part, an end-to-end team's export (marked `Cvsm-E2E: 1`) is the
    /// [`Error::Configuration`] [`get`](Client::get) gives.
    pub fn get_all(&self) -> Result<BTreeMap<String, String>> {
        self.get_all_with_meta().map(Served::into_value)
    }

    /// Works as [`get_all`](Client::get_all), telling a stale
    /// result from a fresh one, exactly as
    /// [`get_with_meta`](Client::get_with_meta) does for one name.
    pub fn get_all_with_meta(&self) -> Result<Served<BTreeMap<String, String>>> {
        let environment = self.config.environment.as_str();
        if let Some(values) = self.cache().fresh_all(environment, Instant::now()) {
            return Ok(Served::fresh(values));
        }
        self.live_start();
        let mark = self.cache().mark();
        let export = self
            .transport
            .get_answer::<BTreeMap<String, String>>(
                Endpoint::Export,
                &format!("{}/secrets/export", self.team_path()),
                &[("format", "json"), ("environment", environment)],
            )
            .and_then(|answer| match &self.config.key {
                // An end-to-end team's export holds envelopes, keyed by name.
                Some(token_key) => {
                    self.open_sealed(token_key, environment, answer.body, answer.request_id)
                }
                // A token without its key part cannot: the server marks that
                // export `Cvsm-E2E: 1`, and it is the by-name read's error.
                None if answer.e2e => Err(Error::configuration(KEYLESS)),
                None => Ok(answer.body),
            });
        match export {
            Ok(values) => {
                // Not after a clear_cache or 401/403, nor (live) any change,
                // while the export was in flight.
                self.cache()
                    .store_all(environment, &values, mark, Instant::now());
                Ok(Served::fresh(values))
            }
            Err(err) => self.stale_or(err, None, |cache, now| cache.kept_all(environment, now)),
        }
    }

    /// Sets every secret of the configured environment as a process
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

    /// Forgets every cached value, kept stale values included, and
    /// an end-to-end team's key, so the next read asks the server (and
    /// fetches the key again). A read in flight meanwhile returns what it
    /// fetched but does not cache it.
    pub fn clear_cache(&self) {
        self.cache().clear();
    }

    /// Returns the API root in use, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.config.base_url
    }

    /// Returns the team as configured: an id, or a slug.
    pub fn team(&self) -> &str {
        &self.config.team
    }

    /// Returns the environment whose secrets this client reads.
    pub fn environment(&self) -> &str {
        &self.config.environment
    }

    /// Returns how long values stay cached; zero means no cache.
    pub fn cache_ttl(&self) -> Duration {
        self.config.cache_ttl
    }

    /// Returns how long a value is kept after it stops being
    /// fresh, to stand in for a failed refresh; zero means never.
    pub fn stale_if_error(&self) -> Duration {
        self.config.stale_if_error
    }

    /// Returns the limit for each HTTP attempt.
    pub fn timeout(&self) -> Duration {
        self.config.timeout
    }

    /// Returns how many extra attempts a failed GET gets.
    pub fn max_retries(&self) -> u32 {
        self.config.max_retries
    }

    /// Returns whether the client keeps a live cache (see "Live cache"
    /// above).
    pub fn live(&self) -> bool {
        self.config.live
    }

    /// Returns the PEM bundle trusted instead of the built-in roots,
    /// when one is configured.
    pub fn ca_file(&self) -> Option<&Path> {
        self.config.ca_file.as_deref()
    }

    /// team_path is `/teams/{team}`, the team (id or slug) percent-encoded.
    fn team_path(&self) -> String {
        format!("/teams/{}", encode(&self.config.team))
    }

    /// live_start opens a live client's change stream, once, at its first
    /// read.
    fn live_start(&self) {
        if let Some(live) = &self.live {
            live.start(|| Stream {
                transport: Arc::clone(&self.transport),
                cache: Arc::clone(&self.cache),
                path: format!("{}/secrets/changes", self.team_path()),
                environment: self.config.environment.clone(),
                describe: format!(
                    "team {:?}, environment {:?}",
                    self.config.team, self.config.environment
                ),
            });
        }
    }

    /// read reads `name` by name in `environment` (one request, opened for
    /// an end-to-end team): its value and the version the answer says. A
    /// 404 is the by-name answer's not-found error, for
    /// [`absent`](Client::absent) to settle.
    fn read(&self, environment: &str, name: &str) -> Result<(String, Option<i64>)> {
        self.transport
            .get_answer::<ByName>(
                Endpoint::ByName,
                &format!("{}/secrets/by-name/{}", self.team_path(), encode(name)),
                &[("environment", environment)],
            )
            .and_then(|answer| {
                let version = answer.body.version();
                let value = self.reveal(environment, name, answer.body, answer.request_id)?;
                Ok((value, version))
            })
    }

    /// absent settles a by-name 404 with the listing: a listing means the
    /// name is absent (the not-found error carries the by-name answer's
    /// request id and a name differing only in case); a 404 or 400 to the
    /// listing is the configuration error of a wrong team or base URL.
    fn absent(&self, environment: &str, name: &str, request_id: Option<String>) -> Error {
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
            message.push_str(&rules::MESSAGE_DID_YOU_MEAN.replace("%s", similar));
        }
        Error::NotFound {
            status: Some(404),
            message,
            request_id,
            suggestion,
        }
    }

    /// reveal returns the value of a by-name answer: opened for
    /// `environment` and `name` when the token has a key part, as it is
    /// otherwise. A token with a key part belongs to an end-to-end team, so
    /// its values are opened whatever the answer says: a server that left
    /// out `"e2e": true` could otherwise pass off a value of its own.
    /// `request_id` is the answer's, for the decryption error.
    fn reveal(
        &self,
        environment: &str,
        name: &str,
        answer: ByName,
        request_id: Option<String>,
    ) -> Result<String> {
        let Some(token_key) = &self.config.key else {
            return match answer.is_e2e() {
                true => Err(Error::configuration(KEYLESS)),
                false => Ok(answer.value),
            };
        };
        let sealed = BTreeMap::from([(name.to_string(), answer.value)]);
        let mut opened = self.open_sealed(token_key, environment, sealed, request_id)?;
        Ok(opened.remove(name).unwrap_or_default())
    }

    /// open_sealed opens each envelope of `sealed` (name -> envelope, read
    /// from `environment`) for its name. The team key is fetched when none
    /// is held, or when an envelope names another key version than the
    /// one held (a re-keyed team): at most once per call. A value that does
    /// not open is the decryption error with `request_id`, that of the
    /// answer that carried `sealed`.
    fn open_sealed(
        &self,
        token_key: &TokenKey,
        environment: &str,
        sealed: BTreeMap<String, String>,
        request_id: Option<String>,
    ) -> Result<BTreeMap<String, String>> {
        let mut envelopes = Vec::with_capacity(sealed.len());
        for (name, text) in sealed {
            match Envelope::parse(&text) {
                Ok(envelope) => envelopes.push((name, envelope)),
                Err(why) => return Err(undecryptable(&name, environment, why, request_id)),
            }
        }
        let mut key = self.cache().team_key();
        let held = |key: &Option<Arc<TeamKey>>, envelope: &Envelope| {
            key.as_ref()
                .is_some_and(|key| key.has(envelope.key_version))
        };
        if envelopes.iter().any(|(_, envelope)| !held(&key, envelope)) {
            let _fetching = lock(&self.key_fetch);
            // Another read may have fetched the key while this one waited.
            key = self.cache().team_key();
            if envelopes.iter().any(|(_, envelope)| !held(&key, envelope)) {
                key = Some(self.fetch_team_key(token_key)?);
            }
        }
        let Some(key) = key else {
            return Ok(BTreeMap::new()); // nothing was sealed
        };
        let mut values = BTreeMap::new();
        for (name, envelope) in envelopes {
            if !key.has(envelope.key_version) {
                return Err(Error::decryption(
                    format!(
                        "secret {name:?} in {environment} cannot be decrypted: it is sealed under key version {}, and the server gives this token key version {}",
                        envelope.key_version,
                        key.version()
                    ),
                    request_id,
                ));
            }
            match key.open(&envelope, environment, &name) {
                Ok(value) => values.insert(name, value),
                Err(why) => return Err(undecryptable(&name, environment, why, request_id)),
            };
        }
        Ok(values)
    }

    /// fetch_team_key asks for the team key wrapped to this token, opens it
    /// with the token's key part and holds it in place of any earlier one.
    /// A wrap that does not open is the decryption error with the key
    /// answer's request id. A key whose request was in flight while the
    /// cache was cleared opens this read's values and is not held.
    fn fetch_team_key(&self, token_key: &TokenKey) -> Result<Arc<TeamKey>> {
        let generation = self.cache().generation();
        let Answer {
            body: answer,
            request_id,
            ..
        } = self.transport.get_answer::<WrappedTeamKey>(
            Endpoint::TeamKey,
            &format!("{}/e2e/key", self.team_path()),
            &[],
        )?;
        let links = crate::e2e::parse_links(answer.links.as_ref()).map_err(|why| {
            Error::decryption(
                format!("the team key the server sent for this token cannot be used: {why}"),
                request_id.clone(),
            )
        })?;
        let key = TeamKey::unwrap(
            &answer.wrapped_key,
            &answer.team_id,
            answer.key_version,
            token_key,
            &links,
        )
        .map_err(|why| {
            Error::decryption(
                format!(
                    "the team key the server sent for this token cannot be decrypted with the token's key part: {why}"
                ),
                request_id,
            )
        })?;
        let key = Arc::new(key);
        self.cache().store_team_key(Arc::clone(&key), generation);
        Ok(key)
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
        Error::Decryption { .. } => "decryption",
        Error::Network { .. } => "network",
    }
}

/// undecryptable is the error of the value of `name` that did not open,
/// carried by the answer of `request_id`.
fn undecryptable(name: &str, environment: &str, why: Failure, request_id: Option<String>) -> Error {
    let why = match why {
        Failure::DoesNotOpen => "it does not open with the team key (it was altered, or sealed for another secret, environment or team)".to_string(),
        why => why.to_string(),
    };
    Error::decryption(
        format!("secret {name:?} in {environment} cannot be decrypted: {why}"),
        request_id,
    )
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field(
                "base_url",
                &crate::options::display_url(&self.config.base_url),
            )
            .field("team", &self.config.team)
            .field("environment", &self.config.environment)
            .field("cache_ttl", &self.config.cache_ttl)
            .field("stale_if_error", &self.config.stale_if_error)
            .field("timeout", &self.config.timeout)
            .field("max_retries", &self.config.max_retries)
            .field("ca_file", &self.config.ca_file)
            .field("live", &self.config.live)
            .field("token", &Redacted)
            .field("token_key", &self.config.key.as_ref().map(|_| Redacted))
            .finish_non_exhaustive()
    }
}

impl Drop for Client {
    /// Stops a live client's change stream, as [`close`](Client::close).
    fn drop(&mut self) {
        self.close();
    }
}

/// invalid_name is the error of a name that is not a valid secret name.
fn invalid_name(name: &str) -> Error {
    Error::not_found(
        rules::MESSAGE_INVALID_SECRET_NAME.replace("%s", &format!("{name:?}")),
        None,
        None,
    )
}

/// is_secret_name reports whether `name` is a valid secret name:
/// `[A-Za-z_][A-Za-z0-9_]{0,254}`.
fn is_secret_name(name: &str) -> bool {
    name.len() <= rules::SECRET_NAME_MAX_LENGTH as usize && is_variable_name(name)
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
mod tests;
