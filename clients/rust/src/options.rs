//! Client configuration: the options a caller passes, their `CVSM_*`
//! environment fallbacks and defaults, and the validated result.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};

/// DEFAULT_ENVIRONMENT is the environment used when neither the option nor
/// `CVSM_ENVIRONMENT` names one.
pub const DEFAULT_ENVIRONMENT: &str = "production";
/// DEFAULT_CACHE_TTL is how long fetched values stay cached by default.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(30);
/// DEFAULT_TIMEOUT is the default limit for one HTTP attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// DEFAULT_MAX_RETRIES is how many extra attempts a failed GET gets by default.
pub const DEFAULT_MAX_RETRIES: u32 = 2;

/// ClientOptions holds what a caller passes to [`Client::new`](crate::Client::new).
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
    /// token is the API token (`cvsm_...`) or a JWT; falls back to `CVSM_TOKEN`.
    pub token: Option<String>,
    /// base_url is the API root including `/api/v1`; falls back to
    /// `CVSM_BASE_URL`. A trailing `/` is ignored.
    pub base_url: Option<String>,
    /// team is a team id (UUID) or slug; falls back to `CVSM_TEAM`. A slug is
    /// resolved to its id once per client through `GET /teams`.
    pub team: Option<String>,
    /// environment selects `production`, `staging` or `development`; falls
    /// back to `CVSM_ENVIRONMENT`, then `production`.
    pub environment: Option<String>,
    /// cache_ttl is how long fetched values are reused; falls back to
    /// `CVSM_CACHE_TTL` (whole seconds), then 30 seconds. Zero disables the cache.
    pub cache_ttl: Option<Duration>,
    /// timeout limits each HTTP attempt; defaults to 10 seconds.
    pub timeout: Option<Duration>,
    /// max_retries is how many extra attempts a GET gets after a network
    /// error or a 502, 503 or 504; defaults to 2.
    pub max_retries: Option<u32>,
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("token", &self.token.as_ref().map(|_| Redacted))
            .field("base_url", &self.base_url)
            .field("team", &self.team)
            .field("environment", &self.environment)
            .field("cache_ttl", &self.cache_ttl)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish()
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
    pub token: String,
    pub base_url: String,
    pub team: String,
    pub environment: String,
    pub cache_ttl: Duration,
    pub timeout: Duration,
    pub max_retries: u32,
}

impl Config {
    /// resolve applies the precedence explicit option, then `CVSM_*`
    /// variable, then default, and validates the result.
    pub fn resolve(options: ClientOptions) -> Result<Config> {
        let token = required(options.token, "token", "CVSM_TOKEN")?;
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::configuration(
                "the token contains spaces or characters not allowed in an HTTP header",
            ));
        }
        let base_url = required(options.base_url, "base_url", "CVSM_BASE_URL")?;
        let team = required(options.team, "team", "CVSM_TEAM")?.trim().to_string();
        let environment = match non_empty(options.environment) {
            Some(environment) => environment,
            None => env_var("CVSM_ENVIRONMENT")?.unwrap_or_else(|| DEFAULT_ENVIRONMENT.into()),
        }
        .trim()
        .to_string();
        let cache_ttl = match options.cache_ttl {
            Some(ttl) => ttl,
            None => match env_var("CVSM_CACHE_TTL")? {
                Some(raw) => parse_seconds(&raw).ok_or_else(|| {
                    Error::configuration(
                        "CVSM_CACHE_TTL must be a non-negative integer number of seconds",
                    )
                })?,
                None => DEFAULT_CACHE_TTL,
            },
        };
        let timeout = options.timeout.unwrap_or(DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            return Err(Error::configuration("timeout must be greater than zero"));
        }

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
            base_url,
            team,
            environment,
            cache_ttl,
            timeout,
            max_retries: options.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
        })
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

fn required(value: Option<String>, option: &str, variable: &str) -> Result<String> {
    match non_empty(value) {
        Some(value) => Ok(value),
        None => env_var(variable)?.ok_or_else(|| {
            Error::configuration(format!(
                "{variable} is not set (pass the {option} option or set {variable})"
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

/// parse_seconds accepts only ASCII digits (no sign), with surrounding spaces.
fn parse_seconds(raw: &str) -> Option<Duration> {
    let raw = raw.trim();
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_seconds_accepts_only_plain_non_negative_integers() {
        assert_eq!(parse_seconds("0"), Some(Duration::ZERO));
        assert_eq!(parse_seconds(" 45 "), Some(Duration::from_secs(45)));
        for bad in ["", " ", "-1", "+5", "1 5", "1.5", "abc", "99999999999999999999999"] {
            assert_eq!(parse_seconds(bad), None, "{bad:?} must be rejected");
        }
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
        assert!(text.contains("[redacted]") && text.contains("acme"), "{text}");
    }
}
