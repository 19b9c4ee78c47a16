//! The per-client cache: values by environment and name, whole `get_all`
//! results by environment, the values kept for stale-if-error, and the
//! team key of an end-to-end team.
//!
//! A live client (rule R16) also tells the cache what its change stream
//! says: a `snapshot` of every name's current version on each connect, and
//! each `change` after. A value whose secret changed stops being fresh at
//! once (it is still kept for stale-if-error), and a read that began before
//! the change stores nothing ([`Mark`]). Each value remembers the version it
//! holds when that is known (the by-name answer says it; a value fetched
//! while the stream is up holds at least the version the stream announced),
//! so a reconnection's snapshot drops only what changed meanwhile.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::e2e::TeamKey;

/// lock ignores poisoning: the guarded data stays consistent after a panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Entry is a cached value and when it was fetched.
struct Entry<T> {
    value: T,
    fetched: Instant,
    /// current is false once the change stream said the secret changed:
    /// the entry is then only kept for stale-if-error, never fresh.
    current: bool,
}

/// Mark is when a read began: its cache generation and change stamp. What
/// it fetched is not stored when the cache was cleared since, or (for its
/// name; for `get_all` any name) the change stream announced a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    generation: u64,
    stamp: u64,
}

/// Cache holds values by (environment, name) and whole `get_all` results by
/// environment. An entry is fresh for `ttl` after it was fetched, then kept
/// `keep` (stale_if_error) longer, only to stand in for a failed refresh.
pub(crate) struct Cache {
    ttl: Duration,
    keep: Duration,
    values: HashMap<(String, String), Entry<String>>,
    all: HashMap<String, Entry<BTreeMap<String, String>>>,
    /// warned holds (environment, name) for each stale value already
    /// logged, `None` standing for `get_all`, until a refresh succeeds.
    warned: HashSet<(String, Option<String>)>,
    /// team_key is the end-to-end team's key, unwrapped; it does not expire
    /// (whatever the ttl) and goes only with the rest of the cache.
    team_key: Option<Arc<TeamKey>>,
    /// generation counts the clears, so that what a request in flight
    /// during a clear fetched (a value, a `get_all` result, the team key)
    /// is not stored after it.
    generation: u64,
    /// stamp counts the change stream's events applied (live clients).
    stamp: u64,
    /// changed holds (environment, name) -> the stamp of its last change.
    changed: HashMap<(String, String), u64>,
    /// latest holds, by environment, name -> version as the change stream
    /// last said; absent before the environment's first snapshot.
    latest: HashMap<String, HashMap<String, i64>>,
    /// versions holds (environment, name) -> the version the value entry
    /// holds (at least), when known.
    versions: HashMap<(String, String), i64>,
    /// all_versions holds, by environment, the versions the `get_all`
    /// result is known to hold (every name, from the stream), when known.
    all_versions: HashMap<String, HashMap<String, i64>>,
}

impl Cache {
    pub(crate) fn new(ttl: Duration, keep: Duration) -> Self {
        Cache {
            ttl,
            keep,
            values: HashMap::new(),
            all: HashMap::new(),
            warned: HashSet::new(),
            team_key: None,
            generation: 0,
            stamp: 0,
            changed: HashMap::new(),
            latest: HashMap::new(),
            versions: HashMap::new(),
            all_versions: HashMap::new(),
        }
    }

    /// generation returns how many times the cache was cleared: read it
    /// before a request whose team key will be stored.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// mark returns when a read begins: take it before the request whose
    /// answer [`store_value`](Cache::store_value) or
    /// [`store_all`](Cache::store_all) will store.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            generation: self.generation,
            stamp: self.stamp,
        }
    }

    /// team_key returns the team key held, if any.
    pub(crate) fn team_key(&self) -> Option<Arc<TeamKey>> {
        self.team_key.clone()
    }

    /// store_team_key holds `key` in place of any earlier one, unless the
    /// cache was cleared since `generation` (the request for it began then):
    /// a key fetched across `clear_cache`, or across a 401 or 403 that emptied
    /// the cache, is used by the read that fetched it and never held.
    pub(crate) fn store_team_key(&mut self, key: Arc<TeamKey>, generation: u64) {
        if generation == self.generation {
            self.team_key = Some(key);
        }
    }

    /// age returns how old `entry` is when it is younger than `limit`.
    fn age<T>(entry: &Entry<T>, limit: Duration, now: Instant) -> Option<Duration> {
        let age = now.saturating_duration_since(entry.fetched);
        (age < limit).then_some(age)
    }

    /// fresh_value returns a fresh value stored by `get`, else one from a
    /// fresh `get_all` result (which is kept once, not copied per name).
    pub(crate) fn fresh_value(
        &self,
        environment: &str,
        name: &str,
        now: Instant,
    ) -> Option<String> {
        self.value(environment, name, self.ttl, true, now)
            .map(|(value, _)| value)
    }

    /// kept_value returns the youngest value of `name` fetched less than
    /// `ttl + keep` ago, by `get` or by `get_all`, with its age.
    pub(crate) fn kept_value(
        &mut self,
        environment: &str,
        name: &str,
        now: Instant,
    ) -> Option<(String, Duration)> {
        self.sweep(now);
        self.value(environment, name, self.bound(), false, now)
    }

    /// value returns the youngest value of `name` younger than `limit`,
    /// only from current entries when `current` is set.
    fn value(
        &self,
        environment: &str,
        name: &str,
        limit: Duration,
        current: bool,
        now: Instant,
    ) -> Option<(String, Duration)> {
        let single = self
            .values
            .get(&(environment.to_string(), name.to_string()))
            .filter(|entry| entry.current || !current)
            .and_then(|entry| Some((&entry.value, Cache::age(entry, limit, now)?)));
        let from_all = self
            .all
            .get(environment)
            .filter(|entry| entry.current || !current)
            .and_then(|entry| Some((entry.value.get(name)?, Cache::age(entry, limit, now)?)));
        [single, from_all]
            .into_iter()
            .flatten()
            .min_by_key(|(_, age)| *age)
            .map(|(value, age)| (value.clone(), age))
    }

    pub(crate) fn fresh_all(
        &self,
        environment: &str,
        now: Instant,
    ) -> Option<BTreeMap<String, String>> {
        self.all(environment, self.ttl, true, now)
            .map(|(values, _)| values)
    }

    /// kept_all returns the `get_all` result fetched less than `ttl + keep`
    /// ago, with its age.
    pub(crate) fn kept_all(
        &mut self,
        environment: &str,
        now: Instant,
    ) -> Option<(BTreeMap<String, String>, Duration)> {
        self.sweep(now);
        self.all(environment, self.bound(), false, now)
    }

    fn all(
        &self,
        environment: &str,
        limit: Duration,
        current: bool,
        now: Instant,
    ) -> Option<(BTreeMap<String, String>, Duration)> {
        let entry = self.all.get(environment)?;
        if current && !entry.current {
            return None;
        }
        let age = Cache::age(entry, limit, now)?;
        Some((entry.value.clone(), age))
    }

    /// store_value stores the value of `name` read by a call that began at
    /// `mark`; `version` is the one the answer said it is, when it did.
    /// Nothing is stored after a clear since `mark`, nor a value older than
    /// the change stream announced (or, its version unknown, one whose
    /// secret changed while it was read).
    pub(crate) fn store_value(
        &mut self,
        environment: &str,
        name: &str,
        value: &str,
        version: Option<i64>,
        mark: Mark,
        now: Instant,
    ) {
        if mark.generation != self.generation {
            return;
        }
        let key = (environment.to_string(), name.to_string());
        let latest = self
            .latest
            .get(environment)
            .and_then(|versions| versions.get(name))
            .copied();
        match (version, latest) {
            (Some(version), Some(latest)) if version < latest => return,
            (Some(_), Some(_)) => {}
            _ if self
                .changed
                .get(&key)
                .is_some_and(|&stamp| stamp > mark.stamp) =>
            {
                return
            }
            _ => {}
        }
        self.warned.remove(&(key.0.clone(), Some(key.1.clone())));
        if self.bound().is_zero() {
            return;
        }
        self.sweep(now);
        match version.or(latest) {
            Some(held) => self.versions.insert(key.clone(), held),
            None => self.versions.remove(&key),
        };
        self.values.insert(
            key,
            Entry {
                value: value.to_string(),
                fetched: now,
                current: true,
            },
        );
    }

    /// store_all stores a `get_all` result read by a call that began at
    /// `mark`: not after a clear, nor after any change, since `mark`.
    pub(crate) fn store_all(
        &mut self,
        environment: &str,
        values: &BTreeMap<String, String>,
        mark: Mark,
        now: Instant,
    ) {
        if mark.generation != self.generation || mark.stamp != self.stamp {
            return;
        }
        self.warned.retain(|(e, _)| e != environment);
        if self.bound().is_zero() {
            return;
        }
        self.sweep(now);
        match self.latest.get(environment) {
            Some(latest) => self
                .all_versions
                .insert(environment.to_string(), latest.clone()),
            None => self.all_versions.remove(environment),
        };
        self.all.insert(
            environment.to_string(),
            Entry {
                value: values.clone(),
                fetched: now,
                current: true,
            },
        );
    }

    /// snapshot takes the change stream's `snapshot` of `environment`
    /// (every name's current version, on each connect): a value whose
    /// version is unknown or differs stops being fresh, and so does the
    /// `get_all` result unless it is known to hold exactly these versions.
    /// It returns how many values stopped being fresh.
    pub(crate) fn snapshot(&mut self, environment: &str, versions: HashMap<String, i64>) -> usize {
        self.stamp += 1;
        let before = self
            .latest
            .insert(environment.to_string(), versions.clone());
        let names: HashSet<&String> = versions
            .keys()
            .chain(before.iter().flat_map(|before| before.keys()))
            .collect();
        for name in names {
            if before.as_ref().and_then(|b| b.get(name)) != versions.get(name) || before.is_none() {
                self.changed
                    .insert((environment.to_string(), name.clone()), self.stamp);
            }
        }
        let stale: Vec<(String, String)> = self
            .values
            .iter()
            .filter(|((env, name), entry)| {
                let held = self.versions.get(&(env.clone(), name.clone()));
                env == environment
                    && entry.current
                    && (held.is_none() || held != versions.get(name))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in &stale {
            self.drop_value(key);
        }
        if self.all_versions.get(environment) != Some(&versions) {
            self.drop_all(environment);
        }
        stale.len()
    }

    /// change takes a `change` event of `environment`: `name` is now at
    /// `version` (`None`: deleted). Its value stops being fresh unless it
    /// already holds that version; the `get_all` result always does.
    pub(crate) fn change(&mut self, environment: &str, name: &str, version: Option<i64>) {
        self.stamp += 1;
        if let Some(latest) = self.latest.get_mut(environment) {
            match version {
                Some(version) => latest.insert(name.to_string(), version),
                None => latest.remove(name),
            };
        }
        self.split_all(environment, name);
        self.drop_all(environment);
        let key = (environment.to_string(), name.to_string());
        if version.is_some()
            && self.values.get(&key).is_some_and(|entry| entry.current)
            && self.versions.get(&key).copied() == version
        {
            return;
        }
        self.changed.insert(key.clone(), self.stamp);
        self.drop_value(&key);
    }

    /// split_all keeps each value of the fresh `get_all` result of
    /// `environment` but `except`'s as a value of its own (fetched when the
    /// result was, at the version it is known to hold), unless a younger one
    /// is held: a change of one name drops the `get_all` result, never
    /// another name's cached value (R16).
    fn split_all(&mut self, environment: &str, except: &str) {
        let Some(entry) = self.all.get(environment).filter(|entry| entry.current) else {
            return;
        };
        let fetched = entry.fetched;
        let values = entry.value.clone();
        let versions = self.all_versions.get(environment).cloned();
        for (name, value) in values {
            if name == except {
                continue;
            }
            let key = (environment.to_string(), name);
            if self
                .values
                .get(&key)
                .is_some_and(|single| single.current && single.fetched >= fetched)
            {
                continue;
            }
            match versions.as_ref().and_then(|known| known.get(&key.1)) {
                Some(&version) => self.versions.insert(key.clone(), version),
                None => self.versions.remove(&key),
            };
            self.values.insert(
                key,
                Entry {
                    value,
                    fetched,
                    current: true,
                },
            );
        }
    }

    /// drop_value makes the value of `key` stop being fresh, kept for
    /// stale-if-error when that is on.
    fn drop_value(&mut self, key: &(String, String)) {
        self.versions.remove(key);
        if self.keep.is_zero() {
            self.values.remove(key);
        } else if let Some(entry) = self.values.get_mut(key) {
            entry.current = false;
        }
    }

    /// drop_all makes the `get_all` result of `environment` stop being
    /// fresh, kept for stale-if-error when that is on.
    fn drop_all(&mut self, environment: &str) {
        self.all_versions.remove(environment);
        if self.keep.is_zero() {
            self.all.remove(environment);
        } else if let Some(entry) = self.all.get_mut(environment) {
            entry.current = false;
        }
    }

    /// first_warning records that the stale value of `name` (`None`: of
    /// `get_all`) was served, and reports whether it is the first time
    /// since it was last fetched.
    pub(crate) fn first_warning(&mut self, environment: &str, name: Option<&str>) -> bool {
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
        let values = &self.values;
        self.versions.retain(|key, _| values.contains_key(key));
    }

    pub(crate) fn clear(&mut self) {
        self.values.clear();
        self.all.clear();
        self.warned.clear();
        self.team_key = None;
        self.versions.clear();
        self.all_versions.clear();
        self.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn cache_entries_are_fresh_for_the_ttl_and_keyed_by_environment() {
        let t0 = Instant::now();
        let mut cache = Cache::new(30 * S, Duration::ZERO);
        cache.store_value("production", "A", "1", None, cache.mark(), t0);
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
        cache.store_value("production", "A", "1", None, cache.mark(), t0);
        cache.store_all(
            "production",
            &BTreeMap::from([("B".into(), "2".into())]),
            cache.mark(),
            t0,
        );
        assert!(cache.values.is_empty() && cache.all.is_empty());
    }

    #[test]
    fn a_get_all_result_serves_single_values_until_it_expires() {
        let t0 = Instant::now();
        let mut cache = Cache::new(30 * S, Duration::ZERO);
        let values = BTreeMap::from([("A".to_string(), "1".to_string())]);
        cache.store_all("production", &values, cache.mark(), t0);
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
        cache.store_value("production", "A", "1", None, cache.mark(), t0);
        cache.store_all(
            "production",
            &BTreeMap::from([("B".into(), "2".into())]),
            cache.mark(),
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
        cache.store_value("production", "A", "1", None, cache.mark(), t0);
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
        cache.store_value("production", "A", "old", None, cache.mark(), t0);
        cache.store_all(
            "production",
            &BTreeMap::from([("A".into(), "new".into())]),
            cache.mark(),
            t0 + 10 * S,
        );
        assert_eq!(
            cache.kept_value("production", "A", t0 + 20 * S),
            Some(("new".into(), 10 * S))
        );
        cache.store_value("production", "A", "newest", None, cache.mark(), t0 + 15 * S);
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

        cache.store_value("production", "A", "1", None, cache.mark(), t0);
        assert!(cache.first_warning("production", Some("A")), "refreshed");
        assert!(!cache.first_warning("production", Some("B")));

        cache.store_all("production", &BTreeMap::new(), cache.mark(), t0);
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
    fn a_change_stops_only_its_name_being_fresh_and_keeps_it_for_stale_if_error() {
        let t0 = Instant::now();
        let mut cache = Cache::new(30 * S, 60 * S);
        cache.snapshot(
            "production",
            HashMap::from([("A".into(), 1), ("B".into(), 1)]),
        );
        cache.store_value("production", "A", "a1", Some(1), cache.mark(), t0);
        cache.store_value("production", "B", "b1", Some(1), cache.mark(), t0);
        cache.store_all(
            "production",
            &BTreeMap::from([("A".into(), "a1".into()), ("B".into(), "b1".into())]),
            cache.mark(),
            t0,
        );
        cache.change("production", "A", Some(1));
        assert_eq!(
            cache.fresh_value("production", "A", t0).as_deref(),
            Some("a1"),
            "it already holds the announced version"
        );
        cache.change("production", "A", Some(2));
        assert_eq!(cache.fresh_value("production", "A", t0), None);
        assert_eq!(cache.fresh_all("production", t0), None);
        assert_eq!(
            cache.fresh_value("production", "B", t0).as_deref(),
            Some("b1")
        );
        assert_eq!(
            cache.kept_value("production", "A", t0).map(|(v, _)| v),
            Some("a1".into()),
            "kept for stale-if-error"
        );
        assert!(cache.kept_all("production", t0).is_some());
    }

    #[test]
    fn a_read_under_way_when_its_name_changed_stores_nothing_older() {
        let t0 = Instant::now();
        let mut cache = Cache::new(30 * S, Duration::ZERO);
        let before = cache.mark();
        cache.change("production", "A", None);
        cache.store_value("production", "A", "old", None, before, t0);
        assert_eq!(cache.fresh_value("production", "A", t0), None);
        cache.store_all(
            "production",
            &BTreeMap::from([("B".into(), "b".into())]),
            before,
            t0,
        );
        assert_eq!(cache.fresh_all("production", t0), None, "any change");

        cache.snapshot("production", HashMap::from([("A".into(), 3)]));
        let before = cache.mark();
        cache.change("production", "A", Some(4));
        cache.store_value("production", "A", "v3", Some(3), before, t0);
        assert_eq!(cache.fresh_value("production", "A", t0), None);
        cache.store_value("production", "A", "v4", Some(4), before, t0);
        assert_eq!(
            cache.fresh_value("production", "A", t0).as_deref(),
            Some("v4"),
            "the announced version may stay"
        );
    }

    #[test]
    fn a_snapshot_drops_the_values_whose_version_it_does_not_confirm() {
        let t0 = Instant::now();
        let mut cache = Cache::new(30 * S, Duration::ZERO);
        cache.store_value("production", "A", "a", Some(1), cache.mark(), t0);
        cache.store_value("production", "B", "b", Some(1), cache.mark(), t0);
        cache.store_value("production", "C", "c", None, cache.mark(), t0);
        let dropped = cache.snapshot(
            "production",
            HashMap::from([("A".into(), 1), ("B".into(), 2)]),
        );
        assert_eq!(dropped, 2);
        assert_eq!(
            cache.fresh_value("production", "A", t0).as_deref(),
            Some("a")
        );
        assert_eq!(
            cache.fresh_value("production", "B", t0),
            None,
            "changed meanwhile"
        );
        assert_eq!(
            cache.fresh_value("production", "C", t0),
            None,
            "version unknown"
        );
    }
}
