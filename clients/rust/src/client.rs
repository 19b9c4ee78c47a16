//! The blocking client: secret reads, the per-client cache, team slug
//! resolution and environment injection.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::options::{ClientOptions, Config, Redacted};
use crate::transport::{encode, Answer, Endpoint, Transport};

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
    /// team_id is the resolved team id; its lock is held while a slug is
    /// resolved so that one client asks `GET /teams` once.
    team_id: Mutex<Option<String>>,
    cache: Mutex<Cache>,
}

impl Client {
    /// new builds a client from `options`, falling back to the `CVSM_*`
    /// environment variables for every option left `None`. It makes no
    /// request; a missing token, base URL or team, or an invalid
    /// `CVSM_CACHE_TTL`, is an [`Error::Configuration`] naming the variable.
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
        let team_id = is_uuid(&config.team).then(|| config.team.clone());
        Ok(Client {
            config,
            transport,
            team_id: Mutex::new(team_id),
            cache: Mutex::new(Cache::default()),
        })
    }

    /// from_env builds a client configured entirely from `CVSM_*` variables.
    pub fn from_env() -> Result<Client> {
        Client::new(ClientOptions::default())
    }

    /// get returns the value of the secret `name` in the configured
    /// environment, from the cache when it holds a fresh value. Names are
    /// case-sensitive: an absent name is [`Error::NotFound`], whose message
    /// suggests the existing name when only the case differs (see
    /// [`Error::suggestion`]). A name that is not a valid secret name
    /// (`[A-Za-z_][A-Za-z0-9_]{0,254}`, so never `""`) is [`Error::NotFound`]
    /// without a request.
    pub fn get(&self, name: &str) -> Result<String> {
        if !is_secret_name(name) {
            return Err(Error::not_found(
                format!("{name:?} is not a valid secret name (letters, digits and _, not starting with a digit, at most 255)"),
                None,
                None,
            ));
        }
        let environment = &self.config.environment;
        if let Some(value) = self.cache().value(environment, name) {
            return Ok(value);
        }
        let value = self.guard(self.fetch(name))?;
        self.cache()
            .store_value(environment, name, &value, self.config.cache_ttl);
        Ok(value)
    }

    /// get_all returns every secret of the configured environment as name ->
    /// value (one export request, read once whatever its size), and caches
    /// the whole result, which also answers a later [`get`](Client::get)
    /// without a request.
    pub fn get_all(&self) -> Result<BTreeMap<String, String>> {
        let environment = &self.config.environment;
        if let Some(values) = self.cache().all(environment) {
            return Ok(values.clone());
        }
        let values = self.guard(self.fetch_all())?;
        self.cache()
            .store_all(environment, &values, self.config.cache_ttl);
        Ok(values)
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

    /// clear_cache forgets every cached value, so the next read asks the server.
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

    fn fetch(&self, name: &str) -> Result<String> {
        let team = self.team_id()?;
        let environment = self.config.environment.as_str();
        let Answer {
            body: list,
            request_id,
        } = self.transport.get_json::<SecretList>(
            Endpoint::List,
            &format!("/teams/{}/secrets", encode(&team)),
            &[("environment", environment), ("search", name)],
        )?;
        let in_environment =
            |s: &&SecretSummary| s.environment.as_deref().is_none_or(|e| e == environment);
        let found = list
            .secrets
            .iter()
            .filter(in_environment)
            .find(|s| s.name == name);
        let Some(secret) = found else {
            let suggestion = list
                .secrets
                .iter()
                .filter(in_environment)
                .find(|s| s.name.eq_ignore_ascii_case(name))
                .map(|s| s.name.clone());
            let mut message = format!("secret {name:?} not found in {environment}");
            if let Some(similar) = &suggestion {
                message.push_str(&format!("; did you mean {similar:?}?"));
            }
            return Err(Error::not_found(message, request_id, suggestion));
        };
        let read: Answer<SecretValue> = self.transport.get_json(
            Endpoint::Value,
            &format!("/teams/{}/secrets/{}", encode(&team), encode(&secret.id)),
            &[],
        )?;
        Ok(read.body.value)
    }

    fn fetch_all(&self) -> Result<BTreeMap<String, String>> {
        let team = self.team_id()?;
        let export: Answer<BTreeMap<String, String>> = self.transport.get_json(
            Endpoint::Export,
            &format!("/teams/{}/secrets/export", encode(&team)),
            &[
                ("format", "json"),
                ("environment", &self.config.environment),
            ],
        )?;
        Ok(export.body)
    }

    /// team_id returns the configured team id, resolving a slug through
    /// `GET /teams` the first time.
    fn team_id(&self) -> Result<String> {
        let mut team_id = lock(&self.team_id);
        if let Some(id) = team_id.as_ref() {
            return Ok(id.clone());
        }
        let Answer {
            body: teams,
            request_id,
        } = self
            .transport
            .get_json::<TeamList>(Endpoint::Teams, "/teams", &[])?;
        let slug = &self.config.team;
        let team = teams
            .teams
            .into_iter()
            .find(|t| &t.slug == slug)
            .ok_or_else(|| Error::Configuration {
                message: format!("team {slug:?} (CVSM_TEAM) matches none of your teams"),
                status: None,
                request_id,
            })?;
        *team_id = Some(team.id.clone());
        Ok(team.id)
    }

    /// guard empties the cache when the server rejected the token.
    fn guard<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::Authentication { .. }) = &result {
            self.cache().clear();
        }
        result
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        lock(&self.cache)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.config.base_url)
            .field("team", &self.config.team)
            .field("environment", &self.config.environment)
            .field("cache_ttl", &self.config.cache_ttl)
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

/// Cache holds values by (environment, name) and whole `get_all` results by
/// environment, each with its expiry.
#[derive(Default)]
struct Cache {
    values: HashMap<(String, String), (String, Instant)>,
    all: HashMap<String, (BTreeMap<String, String>, Instant)>,
}

impl Cache {
    /// value returns a fresh value stored by `get`, else one from a fresh
    /// `get_all` result (which is kept once, not copied per name).
    fn value(&mut self, environment: &str, name: &str) -> Option<String> {
        let key = (environment.to_string(), name.to_string());
        match self.values.get(&key) {
            Some((value, expires)) if Instant::now() < *expires => return Some(value.clone()),
            Some(_) => {
                self.values.remove(&key);
            }
            None => {}
        }
        self.all(environment)?.get(name).cloned()
    }

    fn all(&mut self, environment: &str) -> Option<&BTreeMap<String, String>> {
        let fresh = self
            .all
            .get(environment)
            .is_some_and(|(_, expires)| Instant::now() < *expires);
        if !fresh {
            self.all.remove(environment);
            return None;
        }
        self.all.get(environment).map(|(values, _)| values)
    }

    fn store_value(&mut self, environment: &str, name: &str, value: &str, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let expires = Instant::now() + ttl;
        self.values.insert(
            (environment.to_string(), name.to_string()),
            (value.to_string(), expires),
        );
    }

    fn store_all(&mut self, environment: &str, values: &BTreeMap<String, String>, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let expires = Instant::now() + ttl;
        self.all
            .insert(environment.to_string(), (values.clone(), expires));
    }

    fn clear(&mut self) {
        self.values.clear();
        self.all.clear();
    }
}

#[derive(Deserialize)]
struct TeamList {
    teams: Vec<Team>,
}

#[derive(Deserialize)]
struct Team {
    id: String,
    slug: String,
}

#[derive(Deserialize)]
struct SecretList {
    secrets: Vec<SecretSummary>,
}

#[derive(Deserialize)]
struct SecretSummary {
    id: String,
    name: String,
    environment: Option<String>,
}

#[derive(Deserialize)]
struct SecretValue {
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

/// is_uuid reports whether `team` has the 8-4-4-4-12 hex shape of a team id.
fn is_uuid(team: &str) -> bool {
    let groups: Vec<&str> = team.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_uuid_tells_ids_from_slugs() {
        assert!(is_uuid("0b7f3c1e-8a4d-4c2b-9f1e-2d3c4b5a6978"));
        assert!(is_uuid("0B7F3C1E-8A4D-4C2B-9F1E-2D3C4B5A6978"));
        for slug in [
            "acme",
            "acme-corp",
            "0b7f3c1e-8a4d-4c2b-9f1e-2d3c4b5a697",
            "0b7f3c1e8a4d4c2b9f1e2d3c4b5a6978",
            "0b7f3c1e-8a4d-4c2b-9f1e-2d3c4b5a697g",
        ] {
            assert!(!is_uuid(slug), "{slug}");
        }
    }

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
    fn cache_entries_expire_and_zero_ttl_stores_nothing() {
        let mut cache = Cache::default();
        cache.store_value("production", "A", "1", Duration::ZERO);
        assert_eq!(cache.value("production", "A"), None);
        cache.store_value("production", "A", "1", Duration::from_millis(30));
        assert_eq!(cache.value("production", "A").as_deref(), Some("1"));
        assert_eq!(cache.value("staging", "A"), None, "keyed by environment");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.value("production", "A"), None);
    }

    #[test]
    fn a_get_all_result_serves_single_values_until_it_expires() {
        let mut cache = Cache::default();
        let values = BTreeMap::from([("A".to_string(), "1".to_string())]);
        cache.store_all("production", &values, Duration::from_millis(30));
        assert_eq!(cache.value("production", "A").as_deref(), Some("1"));
        assert_eq!(cache.value("production", "B"), None);
        assert_eq!(cache.value("staging", "A"), None);
        assert!(cache.values.is_empty(), "kept once, not copied per name");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.value("production", "A"), None);
        assert!(cache.all.is_empty());
    }
}
