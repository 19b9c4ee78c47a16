//! Client configuration: the options a caller passes, their `CVSM_*`
//! environment fallbacks and defaults, and the validated result.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::e2e::{split_token, TokenKey};
use crate::error::{Error, Result};
use crate::rules;

/// The environment used when neither the option nor
/// `CVSM_ENVIRONMENT` names one.
pub const DEFAULT_ENVIRONMENT: &str = rules::DEFAULT_ENVIRONMENT;
/// How long fetched values stay cached by default.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(rules::DEFAULT_CACHE_TTL_SECONDS);
/// The default limit for one HTTP attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(rules::DEFAULT_TIMEOUT_SECONDS);
/// How many extra attempts a failed GET gets by default.
pub const DEFAULT_MAX_RETRIES: u32 = rules::DEFAULT_MAX_RETRIES as u32;

/// The options a caller passes to [`Client::new`](crate::Client::new).
///
/// Every field is optional: a field left `None` (or an empty string) falls
/// back to its `CVSM_*` environment variable, then to its default. Build one
/// with struct update syntax:
///
/// ```
/// let options = cvsm::ClientOptions {
///     team: Some("acme".into()),
///     ..Default::default()
/// };
/// # let _ = options;
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientOptions {
    /// The API token (`cvsm_...`) or a JWT; falls back to `CVSM_TOKEN`.
    /// A token of an end-to-end team carries its private key after a dot
    /// (`cvsm_<64 hex>.<key>`): only the part before the dot is sent.
    pub token: Option<String>,
    /// The API root including `/api/v1`; falls back to
    /// `CVSM_BASE_URL`. A trailing `/` is ignored.
    pub base_url: Option<String>,
    /// A team id (UUID) or slug; falls back to `CVSM_TEAM`. Either
    /// goes into every request path as it is (percent-encoded); a slug that
    /// is none of the caller's teams is answered 404, an
    /// [`Error::Configuration`].
    pub team: Option<String>,
    /// Selects `production`, `staging` or `development`; falls
    /// back to `CVSM_ENVIRONMENT`, then `production`.
    pub environment: Option<String>,
    /// How long fetched values are reused; falls back to
    /// `CVSM_CACHE_TTL` (whole seconds), then 30 seconds. Zero disables the cache.
    pub cache_ttl: Option<Duration>,
    /// Limits each HTTP attempt, from connecting to the last byte of
    /// the body; falls back to `CVSM_TIMEOUT` (seconds, may be fractional),
    /// then 10 seconds.
    pub timeout: Option<Duration>,
    /// How many extra attempts a GET gets after a network
    /// error or a 502, 503 or 504; falls back to `CVSM_MAX_RETRIES`, then 2.
    pub max_retries: Option<u32>,
    /// Names a PEM bundle of CA certificates trusted *instead of* the
    /// built-in roots; falls back to `CVSM_CA_FILE`. A file that cannot be
    /// read is an [`Error::Configuration`] at construction.
    pub ca_file: Option<PathBuf>,
    /// How long a cached value is kept after it stops
    /// being fresh, to be served (marked stale) when a refresh fails with a
    /// network error, a 5xx or a 429; falls back to `CVSM_STALE_IF_ERROR`
    /// (whole seconds), then zero, which turns it off. See
    /// [`Client::get_with_meta`](crate::Client::get_with_meta).
    pub stale_if_error: Option<Duration>,
    /// Keeps one connection to the team's change stream, so that a changed
    /// secret stops being served from the cache at once (see "Live cache"
    /// on [`Client`](crate::Client)); falls back to `CVSM_LIVE` (`1`,
    /// `true`, `yes`, `on`, or `0`, `false`, `no`, `off`, any case; anything
    /// else is an [`Error::Configuration`]), then off. `true` turns it on
    /// whatever `CVSM_LIVE` says; `false` (the default) leaves it to `CVSM_LIVE`.
    pub live: bool,
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("token", &self.token.as_ref().map(|_| Redacted))
            .field("base_url", &self.base_url.as_deref().map(display_url))
            .field("team", &self.team)
            .field("environment", &self.environment)
            .field("cache_ttl", &self.cache_ttl)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("ca_file", &self.ca_file)
            .field("stale_if_error", &self.stale_if_error)
            .field("live", &self.live)
            .finish()
    }
}

/// userinfo is the `user:password` part of a URL's authority (before its
/// `@`), if it has one.
pub(crate) fn userinfo(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    authority.rfind('@').map(|at| &authority[..at])
}

/// display_url is `url` as it may be printed: a user and password in it
/// become `***` (`https://user:secret@host/api/v1` shows as
/// `https://***@host/api/v1`, as every SDK prints it).
pub(crate) fn display_url(url: &str) -> String {
    match userinfo(url) {
        Some(info) => url.replacen(&format!("://{info}@"), "://***@", 1),
        None => url.to_string(),
    }
}

/// without_userinfo is the URL requests go to: `url` without a user and
/// password. The client authenticates with its Bearer token only, so they are
/// never sent (an `HttpClient` that made `Authorization: Basic` of them would
/// replace the token).
pub(crate) fn without_userinfo(url: &str) -> String {
    match userinfo(url) {
        Some(info) => url.replacen(&format!("://{info}@"), "://", 1),
        None => url.to_string(),
    }
}

/// Redacted prints in place of a token in every `Debug` output.
pub(crate) struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Config is the effective, validated configuration of a client.
#[derive(Clone)]
pub(crate) struct Config {
    /// token is the bearer: the token without its key part.
    pub token: String,
    /// key is the private key after the token's dot (end-to-end teams).
    pub key: Option<TokenKey>,
    pub base_url: String,
    pub team: String,
    pub environment: String,
    pub cache_ttl: Duration,
    pub timeout: Duration,
    pub max_retries: u32,
    pub ca_file: Option<PathBuf>,
    pub stale_if_error: Duration,
    pub live: bool,
}

impl Config {
    /// Applies the precedence explicit option, then `CVSM_*`
    /// variable, then default, and validates the result.
    pub fn resolve(options: ClientOptions, custom_http: bool) -> Result<Config> {
        let token = required(
            options.token.map(trim_token),
            "token",
            rules::ENV_TOKEN,
            trim_token,
        )?;
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::configuration(
                "the token (CVSM_TOKEN) contains spaces or characters other than visible ASCII",
            ));
        }
        let (token, key) = match split_token(&token) {
            Ok((bearer, key)) => (bearer.to_string(), key),
            Err(message) => return Err(Error::configuration(message)),
        };
        let base_url = required(
            options.base_url,
            "base_url",
            rules::ENV_BASE_URL,
            String::from,
        )?;
        let team = required(options.team, "team", rules::ENV_TEAM, String::from)?
            .trim()
            .to_string();
        let environment = match non_empty(options.environment) {
            Some(environment) => environment,
            None => env_var(rules::ENV_ENVIRONMENT)?.unwrap_or_else(|| DEFAULT_ENVIRONMENT.into()),
        }
        .trim()
        .to_string();
        let cache_ttl = match options.cache_ttl {
            Some(ttl) => ttl,
            None => seconds_var(rules::ENV_CACHE_TTL)?.unwrap_or(DEFAULT_CACHE_TTL),
        };
        let stale_if_error = match options.stale_if_error {
            Some(keep) => keep,
            None => seconds_var(rules::ENV_STALE_IF_ERROR)?
                .unwrap_or(Duration::from_secs(rules::DEFAULT_STALE_IF_ERROR_SECONDS)),
        };
        let live = match options.live {
            true => true,
            false => match env_var(rules::ENV_LIVE)? {
                Some(raw) => parse_switch(&raw).ok_or_else(|| {
                    Error::configuration(
                        "CVSM_LIVE must be 1, true, yes or on (or 0, false, no or off)",
                    )
                })?,
                None => false,
            },
        };
        let timeout = match options.timeout {
            Some(timeout) => timeout,
            None => match env_var(rules::ENV_TIMEOUT)? {
                Some(raw) => parse_timeout(&raw).ok_or_else(|| {
                    Error::configuration("CVSM_TIMEOUT must be a positive number of seconds")
                })?,
                None => DEFAULT_TIMEOUT,
            },
        };
        if timeout.is_zero() {
            return Err(Error::configuration("timeout must be greater than zero"));
        }
        let max_retries = match options.max_retries {
            Some(retries) => retries,
            None => match env_var(rules::ENV_MAX_RETRIES)? {
                Some(raw) => parse_count(&raw).ok_or_else(|| {
                    Error::configuration("CVSM_MAX_RETRIES must be a non-negative integer")
                })?,
                None => DEFAULT_MAX_RETRIES,
            },
        };
        let ca_file =
            match options.ca_file.filter(|path| !path.as_os_str().is_empty()) {
                Some(_) if custom_http => return Err(Error::configuration(
                    "ca_file cannot be combined with a custom HTTP client: configure the CA on it",
                )),
                Some(path) => Some(path),
                // A custom HTTP client owns the transport: CVSM_CA_FILE is not read.
                None if custom_http => None,
                None => env_var(rules::ENV_CA_FILE)?.map(PathBuf::from),
            };

        let base_url = base_url.trim().trim_end_matches('/').to_string();
        let host = base_url
            .strip_prefix("http://")
            .or_else(|| base_url.strip_prefix("https://"))
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("");
        if host.is_empty() || host.contains(char::is_whitespace) {
            return Err(Error::configuration(
                "the base URL must start with http:// or https:// and name a host (CVSM_BASE_URL)",
            ));
        }

        Ok(Config {
            token,
            key,
            base_url,
            team,
            environment,
            cache_ttl,
            timeout,
            max_retries,
            ca_file,
            stale_if_error,
            live,
        })
    }
}

/// trim_token removes the whitespace a token file usually brings along
/// (spaces, tabs, `\r`, `\n`) from both ends.
fn trim_token(token: String) -> String {
    let trimmed = token.trim_matches([' ', '\t', '\r', '\n']);
    if trimmed.len() == token.len() {
        token
    } else {
        trimmed.to_string()
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

/// required takes the option, else the variable (both passed through
/// `clean`), and names the variable when neither is set.
fn required(
    value: Option<String>,
    option: &str,
    variable: &str,
    clean: fn(String) -> String,
) -> Result<String> {
    match non_empty(value) {
        Some(value) => Ok(value),
        None => non_empty(env_var(variable)?.map(clean)).ok_or_else(|| {
            Error::configuration(format!(
                "{} (pass the {option} option or set {variable})",
                rules::MESSAGE_NOT_SET.replace("%s", variable)
            ))
        }),
    }
}

/// env_var reads a variable, treating an empty value as unset.
fn env_var(variable: &str) -> Result<Option<String>> {
    match std::env::var(variable) {
        Ok(value) if value.is_empty() => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::configuration(format!(
            "{variable} is not valid UTF-8"
        ))),
    }
}

/// seconds_var reads a variable holding a non-negative integer number of
/// seconds; anything else is a configuration error naming it.
fn seconds_var(variable: &str) -> Result<Option<Duration>> {
    env_var(variable)?
        .map(|raw| {
            parse_seconds(&raw).ok_or_else(|| {
                Error::configuration(format!(
                    "{variable} must be a non-negative integer number of seconds"
                ))
            })
        })
        .transpose()
}

/// parse_seconds accepts only ASCII digits (no sign), with surrounding spaces.
fn parse_seconds(raw: &str) -> Option<Duration> {
    let raw = raw.trim();
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse::<u64>().ok().map(Duration::from_secs)
}

/// parse_timeout accepts a positive, finite decimal number of seconds.
fn parse_timeout(raw: &str) -> Option<Duration> {
    let raw = raw.trim();
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let seconds: f64 = raw.parse().ok()?;
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
}

/// parse_switch reads an on/off variable: `1`, `true`, `yes`, `on` or
/// `0`, `false`, `no`, `off`, in any case, with surrounding spaces.
fn parse_switch(raw: &str) -> Option<bool> {
    let word = raw.trim().to_ascii_lowercase();
    if rules::LIVE_TRUE_WORDS.contains(&word.as_str()) {
        Some(true)
    } else if rules::LIVE_FALSE_WORDS.contains(&word.as_str()) {
        Some(false)
    } else {
        None
    }
}

/// parse_count accepts only ASCII digits (no sign), with surrounding spaces.
fn parse_count(raw: &str) -> Option<u32> {
    let raw = raw.trim();
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_seconds_accepts_only_plain_non_negative_integers() {
        assert_eq!(parse_seconds("0"), Some(Duration::ZERO));
        assert_eq!(parse_seconds(" 45 "), Some(Duration::from_secs(45)));
        for bad in [
            "",
            " ",
            "-1",
            "+5",
            "1 5",
            "1.5",
            "abc",
            "99999999999999999999999",
        ] {
            assert_eq!(parse_seconds(bad), None, "{bad:?} must be rejected");
        }
    }

    #[test]
    fn parse_timeout_accepts_positive_numbers_of_seconds() {
        assert_eq!(parse_timeout("2.5"), Some(Duration::from_millis(2500)));
        assert_eq!(parse_timeout(" 10 "), Some(Duration::from_secs(10)));
        for bad in [
            "", "0", "0.0", "-1", "+1", "1e3", "inf", "NaN", "abc", "1.2.3",
        ] {
            assert_eq!(parse_timeout(bad), None, "{bad:?} must be rejected");
        }
    }

    #[test]
    fn parse_count_accepts_only_non_negative_integers() {
        assert_eq!(parse_count("0"), Some(0));
        assert_eq!(parse_count(" 3 "), Some(3));
        for bad in ["", "-1", "+1", "1.5", "two", "99999999999"] {
            assert_eq!(parse_count(bad), None, "{bad:?} must be rejected");
        }
    }

    #[test]
    fn parse_switch_accepts_the_spellings_of_on_and_off_in_any_case() {
        for on in ["1", "true", "TRUE", "Yes", "on", " On "] {
            assert_eq!(parse_switch(on), Some(true), "{on:?}");
        }
        for off in ["0", "false", "False", "NO", "off"] {
            assert_eq!(parse_switch(off), Some(false), "{off:?}");
        }
        for bad in ["", "2", "y", "enabled", "tru", "on off"] {
            assert_eq!(parse_switch(bad), None, "{bad:?} must be rejected");
        }
    }

    #[test]
    fn token_whitespace_is_trimmed_from_both_ends_only() {
        assert_eq!(trim_token(" \t\r\ncvsm_abc\r\n".into()), "cvsm_abc");
        assert_eq!(trim_token("cvsm_abc".into()), "cvsm_abc");
        assert_eq!(trim_token("cvsm a\nb".into()), "cvsm a\nb");
        assert_eq!(
            trim_token("\u{a0}cvsm".into()),
            "\u{a0}cvsm",
            "only ASCII whitespace"
        );
    }

    #[test]
    fn options_debug_redacts_the_token() {
        let options = ClientOptions {
            token: Some("cvsm_deadbeef_supersecret".into()),
            team: Some("acme".into()),
            ..Default::default()
        };
        let text = format!("{options:?} {options:#?}");
        assert!(!text.contains("supersecret"), "{text}");
        assert!(
            text.contains("[redacted]") && text.contains("acme"),
            "{text}"
        );
    }
}
