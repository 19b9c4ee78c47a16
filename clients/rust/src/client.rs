//! The blocking client: secret reads, the per-client cache, team slug
//! resolution and environment injection.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::options::{ClientOptions, Config, Redacted};
use crate::transport::{encode, Transport};

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
    pub fn new(options: ClientOptions) -> Result<Client> {
        let config = Config::resolve(options)?;
        let transport = Transport::new(&config);
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
    /// suggests the existing name when only the case differs.
    pub fn get(&self, name: &str) -> Result<String> {
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
    /// value (one export request), and caches the whole result as well as
    /// each value, so a later [`get`](Client::get) makes no request.
    pub fn get_all(&self) -> Result<BTreeMap<String, String>> {
        let environment = &self.config.environment;
        if let Some(values) = self.cache().all(environment) {
            return Ok(values);
        }
        let values = self.guard(self.fetch_all())?;
        self.cache()
            .store_all(environment, &values, self.config.cache_ttl);
        Ok(values)
    }

    /// inject sets every secret of the configured environment as a process
    /// environment variable and returns the names it set, sorted. A variable
    /// that is already set is kept unless `overwrite` is true. Names or
    /// values that cannot be environment variables (containing `=` or NUL)
    /// are skipped.
    ///
    /// Like [`std::env::set_var`], call it before starting other threads
    /// that read the environment.
    pub fn inject(&self, overwrite: bool) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for (name, value) in self.get_all()? {
            let settable = !name.is_empty() && !name.contains(['=', '\0']) && !value.contains('\0');
            if !settable || (!overwrite && std::env::var_os(&name).is_some()) {
                continue;
            }
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

    fn fetch(&self, name: &str) -> Result<String> {
        let team = self.team_id()?;
        let environment = self.config.environment.as_str();
        let list: SecretList = self.transport.get_json(
            &format!("/teams/{}/secrets", encode(&team)),
            &[("environment", environment), ("search", name)],
        )?;
        let in_environment = |s: &&SecretSummary| {
            s.environment.as_deref().is_none_or(|e| e == environment)
        };
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
                .find(|s| s.name.eq_ignore_ascii_case(name));
            let mut message = format!("secret {name:?} not found in {environment}");
            if let Some(similar) = suggestion {
                message.push_str(&format!("; did you mean {:?}?", similar.name));
            }
            return Err(Error::NotFound {
                status: None,
                message,
            });
        };
        let read: SecretValue = self.transport.get_json(
            &format!("/teams/{}/secrets/{}", encode(&team), encode(&secret.id)),
            &[],
        )?;
        Ok(read.value)
    }

    fn fetch_all(&self) -> Result<BTreeMap<String, String>> {
        let team = self.team_id()?;
        self.transport.get_json(
            &format!("/teams/{}/secrets/export", encode(&team)),
            &[("format", "json"), ("environment", &self.config.environment)],
        )
    }

    /// team_id returns the configured team id, resolving a slug through
    /// `GET /teams` the first time.
    fn team_id(&self) -> Result<String> {
        let mut team_id = lock(&self.team_id);
        if let Some(id) = team_id.as_ref() {
            return Ok(id.clone());
        }
        let teams: TeamList = self.transport.get_json("/teams", &[])?;
        let slug = &self.config.team;
        let team = teams.teams.into_iter().find(|t| &t.slug == slug).ok_or_else(|| {
            Error::configuration(format!(
                "team {slug:?} (CVSM_TEAM) matches none of your teams"
            ))
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
            .field("token", &Redacted)
            .finish_non_exhaustive()
    }
}

/// lock ignores poisoning: the guarded data stays consistent after a panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Cache holds values by (environment, name) and whole `get_all` results by
/// environment, each with its expiry.
#[derive(Default)]
struct Cache {
    values: HashMap<(String, String), (String, Instant)>,
    all: HashMap<String, (BTreeMap<String, String>, Instant)>,
}

impl Cache {
    fn value(&mut self, environment: &str, name: &str) -> Option<String> {
        let key = (environment.to_string(), name.to_string());
        match self.values.get(&key) {
            Some((value, expires)) if Instant::now() < *expires => Some(value.clone()),
            Some(_) => {
                self.values.remove(&key);
                None
            }
            None => None,
        }
    }

    fn all(&mut self, environment: &str) -> Option<BTreeMap<String, String>> {
        match self.all.get(environment) {
            Some((values, expires)) if Instant::now() < *expires => Some(values.clone()),
            Some(_) => {
                self.all.remove(environment);
                None
            }
            None => None,
        }
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
        for (name, value) in values {
            self.values.insert(
                (environment.to_string(), name.clone()),
                (value.clone(), expires),
            );
        }
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
        for slug in ["acme", "acme-corp", "0b7f3c1e-8a4d-4c2b-9f1e-2d3c4b5a697", "0b7f3c1e8a4d4c2b9f1e2d3c4b5a6978", "0b7f3c1e-8a4d-4c2b-9f1e-2d3c4b5a697g"] {
            assert!(!is_uuid(slug), "{slug}");
        }
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
}
