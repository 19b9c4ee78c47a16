//! HTTP transport: authenticated GETs with retries and jittered backoff, and
//! the mapping of HTTP statuses to [`Error`] variants.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::options::Config;

/// USER_AGENT is sent with every request.
pub(crate) const USER_AGENT: &str = concat!("cvsm-rust/", env!("CARGO_PKG_VERSION"));

/// REDACTED replaces the token wherever it would appear in a message.
const REDACTED: &str = "[redacted]";

/// MAX_SERVER_MESSAGE is how many characters of the server's message an
/// error keeps.
const MAX_SERVER_MESSAGE: usize = 300;

/// BACKOFF_BASE is the upper bound of the first retry's random sleep; it
/// doubles with each retry (full jitter).
const BACKOFF_BASE: Duration = Duration::from_millis(100);

pub(crate) struct Transport {
    agent: ureq::Agent,
    base_url: String,
    authorization: String,
    token: String,
    max_retries: u32,
}

impl Transport {
    pub fn new(config: &Config) -> Transport {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(config.timeout))
            .user_agent(USER_AGENT)
            .accept("application/json")
            .build()
            .new_agent();
        Transport {
            agent,
            base_url: config.base_url.clone(),
            authorization: format!("Bearer {}", config.token),
            token: config.token.clone(),
            max_retries: config.max_retries,
        }
    }

    /// get_json GETs `path` (segments already encoded) with `query` and
    /// decodes the JSON body, retrying network errors and 502/503/504.
    pub fn get_json<T: DeserializeOwned>(&self, path: &str, query: &[(&str, &str)]) -> Result<T> {
        let url = self.url(path, query);
        let mut retry = 0;
        loop {
            match self.attempt(&url) {
                Err(err) if retry < self.max_retries && is_retryable(&err) => {
                    std::thread::sleep(jitter(retry));
                    retry += 1;
                }
                result => return result,
            }
        }
    }

    fn url(&self, path: &str, query: &[(&str, &str)]) -> String {
        let mut url = format!("{}{}", self.base_url, path);
        for (i, (key, value)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&encode(key));
            url.push('=');
            url.push_str(&encode(value));
        }
        url
    }

    fn attempt<T: DeserializeOwned>(&self, url: &str) -> Result<T> {
        let mut response = self
            .agent
            .get(url)
            .header("Authorization", &self.authorization)
            .call()
            .map_err(|err| self.network(url, err))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after_seconds(v, SystemTime::now()));
        let body = response.body_mut().read_to_string();

        if !status.is_success() {
            let server_message = body
                .ok()
                .and_then(|b| serde_json::from_str::<ErrorBody>(&b).ok())
                .and_then(|b| b.error)
                .filter(|m| !m.is_empty());
            let detail = server_message
                .or_else(|| status.canonical_reason().map(str::to_string))
                .unwrap_or_else(|| "error".to_string());
            return Err(self.status_error(status.as_u16(), detail, retry_after));
        }

        let body = body.map_err(|err| self.network(url, err))?;
        serde_json::from_str(&body).map_err(|err| Error::Network {
            // serde's message can quote the offending value; say only where
            // the body went wrong.
            message: format!(
                "unreadable response: HTTP {} body is not the expected JSON ({:?} error at line {} column {})",
                status.as_u16(),
                err.classify(),
                err.line(),
                err.column()
            ),
            source: None,
        })
    }

    /// network describes a transport failure; the URL is shown without its
    /// query and never holds the token.
    fn network(&self, url: &str, err: ureq::Error) -> Error {
        let what = match &err {
            ureq::Error::Timeout(_) => "the request timed out",
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => {
                "could not connect to the server"
            }
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                "could not connect to the server"
            }
            ureq::Error::Io(_) | ureq::Error::Protocol(_) | ureq::Error::BodyStalled => {
                "the connection was dropped"
            }
            _ => "the request failed",
        };
        let path = url.split('?').next().unwrap_or(url);
        Error::Network {
            message: self.redact(format!("network error: {what} (GET {path}): {err}")),
            source: Some(Box::new(err)),
        }
    }

    fn status_error(&self, status: u16, detail: String, retry_after: Option<u64>) -> Error {
        let mut detail = self.redact(detail);
        if let Some((cut, _)) = detail.char_indices().nth(MAX_SERVER_MESSAGE) {
            detail.truncate(cut);
            detail.push_str("...");
        }
        let message = format!("HTTP {status}: {detail}");
        match status {
            401 => Error::Authentication { status, message },
            403 => Error::PermissionDenied { status, message },
            404 => Error::NotFound {
                status: Some(status),
                message,
            },
            429 => Error::RateLimited {
                status,
                retry_after,
                message,
            },
            _ => Error::Api { status, message },
        }
    }

    pub fn redact(&self, message: String) -> String {
        if self.token.is_empty() || !message.contains(&self.token) {
            message
        } else {
            message.replace(&self.token, REDACTED)
        }
    }
}

#[derive(serde::Deserialize)]
struct ErrorBody {
    error: Option<String>,
}

/// retry_after_seconds reads `Retry-After` as whole seconds: a number, or an
/// HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`) counted from `now`.
fn retry_after_seconds(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse().ok();
    }
    let when = parse_http_date(value)?;
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
    Some((when as f64 - now).max(0.0).round() as u64)
}

/// parse_http_date reads an IMF-fixdate into seconds since the Unix epoch.
fn parse_http_date(value: &str) -> Option<i64> {
    let mut parts = value.split_ascii_whitespace();
    let (_weekday, day, month, year, time, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if zone != "GMT" || parts.next().is_some() {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? as i64 + 1;
    let day: i64 = day.parse().ok()?;
    let year: i64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Days from civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

fn is_retryable(err: &Error) -> bool {
    matches!(
        err,
        Error::Network { .. } | Error::Api { status: 502..=504, .. }
    )
}

/// jitter returns a random pause in `[0, 0.1 s * 2^retry]`.
fn jitter(retry: u32) -> Duration {
    let ceiling = BACKOFF_BASE.saturating_mul(1u32 << retry.min(16));
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    let fraction = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
    ceiling.mul_f64(fraction)
}

/// encode percent-encodes everything but RFC 3986 unreserved characters, so
/// it is safe for a path segment and for a query key or value.
pub(crate) fn encode(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_keeps_unreserved_and_escapes_the_rest() {
        assert_eq!(encode("API_KEY-1.x~"), "API_KEY-1.x~");
        assert_eq!(encode("a b/c?d&e=f"), "a%20b%2Fc%3Fd%26e%3Df");
        assert_eq!(encode("é"), "%C3%A9");
    }

    #[test]
    fn jitter_stays_within_full_jitter_bounds_and_varies() {
        let mut seen = std::collections::HashSet::new();
        for retry in 0..4 {
            for _ in 0..50 {
                let pause = jitter(retry);
                assert!(pause <= Duration::from_millis(100) * (1 << retry), "{pause:?}");
                seen.insert(pause);
            }
        }
        assert!(seen.len() > 100, "pauses should be random, got {}", seen.len());
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(retry_after_seconds("7", now), Some(7));
        assert_eq!(retry_after_seconds(" 120 ", now), Some(120));
        assert_eq!(retry_after_seconds("Sun, 06 Nov 1994 08:50:07 GMT", now), Some(30));
        assert_eq!(retry_after_seconds("Sun, 06 Nov 1994 08:49:00 GMT", now), Some(0));
        assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT"), Some(1_835_438_400));
        for bad in ["", "-1", "1.5", "soon", "Sun, 06 Nov 1994 08:49:37 PST", "Sun, 06 Foo 1994 08:49:37 GMT"] {
            assert_eq!(retry_after_seconds(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn only_network_errors_and_502_to_504_are_retryable() {
        let network = Error::Network {
            message: String::new(),
            source: None,
        };
        assert!(is_retryable(&network));
        for status in [502, 503, 504] {
            assert!(is_retryable(&Error::Api {
                status,
                message: String::new()
            }));
        }
        for status in [500, 501, 505] {
            assert!(!is_retryable(&Error::Api {
                status,
                message: String::new()
            }));
        }
        assert!(!is_retryable(&Error::RateLimited {
            status: 429,
            retry_after: None,
            message: String::new()
        }));
    }
}
