//! HTTP transport: authenticated GETs with retries and jittered backoff, and
//! the mapping of HTTP statuses to [`Error`] variants.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufReader, Read};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::http::{HttpClient, HttpError, HttpErrorKind, HttpRequest, HttpResponse};
use crate::options::Config;
use crate::rules;
use crate::ureq_client::UreqClient;
use crate::wire::ErrorBody;

/// USER_AGENT is sent with every request.
pub(crate) const USER_AGENT: &str = concat!("cvsm-rust/", env!("CARGO_PKG_VERSION"));

/// REDACTED replaces the token wherever it would appear in a message.
const REDACTED: &str = "[redacted]";

/// MAX_SERVER_MESSAGE is how many characters of the server's message an
/// error keeps.
const MAX_SERVER_MESSAGE: usize = 300;

/// MAX_ERROR_BODY is how much of a non-2xx body is read for its message.
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// BACKOFF_BASE is the upper bound of the first retry's random sleep; it
/// doubles with each retry (full jitter).
const BACKOFF_BASE: Duration = Duration::from_millis(rules::RETRY_BACKOFF_BASE_MS);

/// Endpoint says which of the API's GETs a request is; it decides what a
/// 400 or 404 answer means (rule R9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `GET /teams/{team}/secrets/by-name/{name}`, one value.
    ByName,
    /// `GET /teams/{team}/secrets?search=`, the listing asked after a
    /// by-name 404.
    List,
    /// `GET /teams/{team}/secrets/export`.
    Export,
    /// `GET /teams/{team}/e2e/key`, the team key wrapped to the token
    /// (end-to-end teams).
    TeamKey,
}

/// E2E_HEADER marks the JSON export of an end-to-end team (`Cvsm-E2E: 1`),
/// whose values are envelopes.
const E2E_HEADER: &str = "cvsm-e2e";

/// Answer is a decoded 2xx answer with what its headers tell.
pub(crate) struct Answer<T> {
    pub body: T,
    /// request_id is the answer's `X-Request-Id`.
    pub request_id: Option<String>,
    /// e2e is true when the answer carries `Cvsm-E2E: 1`.
    pub e2e: bool,
}

pub(crate) struct Transport {
    http: Arc<dyn HttpClient>,
    /// base_url is where requests go: the configured base URL without its
    /// user and password.
    base_url: String,
    /// userinfo is the configured base URL's `user:password`, scrubbed from
    /// messages.
    userinfo: Option<String>,
    authorization: String,
    token: String,
    timeout: Duration,
    max_retries: u32,
}

impl Transport {
    /// new sends through `http` as given, or through a ureq agent built
    /// from the environment's proxy variables and the configured CA file.
    pub fn new(config: &Config, http: Option<Arc<dyn HttpClient>>) -> Result<Transport> {
        let http = match http {
            Some(http) => http,
            None => Arc::new(UreqClient::from_config(config)?),
        };
        Ok(Transport {
            http,
            base_url: crate::options::without_userinfo(&config.base_url),
            userinfo: crate::options::userinfo(&config.base_url).map(str::to_string),
            authorization: format!("Bearer {}", config.token),
            token: config.token.clone(),
            timeout: config.timeout,
            max_retries: config.max_retries,
        })
    }

    /// get_json GETs `path` (segments already encoded) with `query` and
    /// decodes the JSON body, retrying network errors (an unreadable answer
    /// included) and 502/503/504.
    pub fn get_json<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T> {
        self.get_answer(endpoint, path, query)
            .map(|answer| answer.body)
    }

    /// get_answer works as get_json, and also returns the `X-Request-Id` of
    /// the answer it decoded and whether it carries `Cvsm-E2E: 1`.
    pub fn get_answer<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Answer<T>> {
        let url = self.url(path, query);
        let mut retry = 0;
        loop {
            match self.attempt(endpoint, &url) {
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

    fn attempt<T: DeserializeOwned>(&self, endpoint: Endpoint, url: &str) -> Result<Answer<T>> {
        let request = HttpRequest {
            url: url.to_string(),
            headers: vec![
                ("Authorization", self.authorization.clone()),
                ("Accept", rules::ACCEPT_JSON.to_string()),
                ("User-Agent", USER_AGENT.to_string()),
            ],
            timeout: self.timeout,
            stream: false,
        };
        let mut response = self
            .http
            .get(&request)
            .map_err(|err| self.network(url, err))?;
        let status = response.status();
        let request_id = response.header("x-request-id").map(str::to_string);
        let retry_after = response.header("retry-after").map(str::to_string);
        let e2e = response.header(E2E_HEADER) == Some("1");

        if !(200..300).contains(&status) {
            let mut body = Vec::new();
            if let Err(err) = response
                .body_mut()
                .take(MAX_ERROR_BODY)
                .read_to_end(&mut body)
            {
                // The status came but not the whole answer (the timeout while
                // it dripped, a dropped connection): the attempt failed like
                // any other cut off (rule R1) and is retried, never taken for
                // an error with that status (a 404 would go on to the listing).
                return Err(self.body_failed(url, HttpError::from_io(err), request_id));
            }
            let server_message = serde_json::from_slice::<ErrorBody>(&body)
                .ok()
                .and_then(|b| b.error)
                .filter(|m| !m.trim().is_empty());
            let detail = server_message
                .or_else(|| canonical_reason(status).map(str::to_string))
                .unwrap_or_else(|| "error".to_string());
            let retry_after = retry_after.and_then(|v| retry_after_seconds(&v, SystemTime::now()));
            return Err(self.status_error(endpoint, status, detail, retry_after, request_id));
        }

        // Any size, read once: the body streams into the decoder with no
        // limit but the timeout.
        let mut reader = KeepError::new(BufReader::with_capacity(64 * 1024, response.body_mut()));
        match serde_json::from_reader(&mut reader) {
            Ok(body) => Ok(Answer {
                body,
                request_id,
                e2e,
            }),
            Err(err) if err.is_io() => {
                let err = HttpError::from_io(reader.error.unwrap_or_else(|| err.into()));
                Err(self.body_failed(url, err, request_id))
            }
            // serde's message can quote the offending value; say only where
            // the body went wrong.
            Err(err) => Err(Error::Network {
                message: format!(
                    "unreadable response: HTTP {status} body is not the expected JSON ({:?} error at line {} column {})",
                    err.classify(),
                    err.line(),
                    err.column()
                ),
                request_id,
                source: None,
            }),
        }
    }

    /// open_stream GETs the change stream at `path` with `query`
    /// (`Accept: text/event-stream`, and `Last-Event-ID` when given), once,
    /// with `read_timeout` for connecting and each read. It returns the
    /// answer when it is a 200, else why not: never the token.
    pub fn open_stream(
        &self,
        path: &str,
        query: &[(&str, &str)],
        last_event_id: Option<&str>,
        read_timeout: Duration,
    ) -> std::result::Result<HttpResponse, StreamRefused> {
        let url = self.url(path, query);
        let mut headers = vec![
            ("Authorization", self.authorization.clone()),
            ("Accept", rules::ACCEPT_EVENT_STREAM.to_string()),
            ("User-Agent", USER_AGENT.to_string()),
        ];
        if let Some(id) = last_event_id {
            headers.push((rules::HEADER_LAST_EVENT_ID, id.to_string()));
        }
        let request = HttpRequest {
            url: url.clone(),
            headers,
            timeout: read_timeout,
            stream: true,
        };
        let response = self.http.get(&request).map_err(|err| StreamRefused {
            status: None,
            retry_after: None,
            reason: self.network(&url, err).to_string(),
        })?;
        match response.status() {
            200 => Ok(response),
            status => Err(StreamRefused {
                status: Some(status),
                retry_after: response
                    .header("retry-after")
                    .and_then(|v| retry_after_seconds(v, SystemTime::now())),
                reason: format!("the change stream answered HTTP {status}"),
            }),
        }
    }

    /// network describes a transport failure; the URL is shown without its
    /// query and never holds the token.
    fn network(&self, url: &str, err: HttpError) -> Error {
        let what = match err.kind() {
            HttpErrorKind::Timeout => "the request timed out",
            HttpErrorKind::Connect => "could not connect to the server",
            HttpErrorKind::Tls => "TLS failed",
            HttpErrorKind::Proxy => "the proxy refused the connection",
            HttpErrorKind::Dropped => "the connection was dropped",
            _ => "the request failed",
        };
        Error::Network {
            message: self.redact(format!(
                "network error: {what} (GET {}): {err}",
                without_query(url)
            )),
            request_id: None,
            source: Some(Box::new(err)),
        }
    }

    /// body_failed is the network error of an answer whose body could not
    /// be read to its end; it carries the answer's request id.
    fn body_failed(&self, url: &str, err: HttpError, request_id: Option<String>) -> Error {
        match self.network(url, err) {
            Error::Network {
                message, source, ..
            } => Error::Network {
                message,
                request_id,
                source,
            },
            other => other,
        }
    }

    fn status_error(
        &self,
        endpoint: Endpoint,
        status: u16,
        detail: String,
        retry_after: Option<u64>,
        request_id: Option<String>,
    ) -> Error {
        let mut detail = self.redact(detail);
        if let Some((cut, _)) = detail.char_indices().nth(MAX_SERVER_MESSAGE) {
            detail.truncate(cut);
            detail.push_str("...");
        }
        let message = format!("HTTP {status}: {detail}");
        let configuration = |hint: &str| Error::Configuration {
            message: format!("{message} ({hint})"),
            status: Some(status),
            request_id: request_id.clone(),
        };
        match (status, endpoint) {
            // A by-name 404 is a not-found the client settles with the listing.
            (404, Endpoint::List | Endpoint::Export | Endpoint::TeamKey) => configuration(
                "check the team (CVSM_TEAM) and the base URL (CVSM_BASE_URL), which includes /api/v1",
            ),
            (400, Endpoint::TeamKey) => configuration(
                "the team is not end-to-end: its tokens have no key part (CVSM_TOKEN)",
            ),
            (400, _) => configuration("check the environment (CVSM_ENVIRONMENT)"),
            (401, _) => Error::Authentication { status, message, request_id },
            (403, _) => Error::PermissionDenied { status, message, request_id },
            (404, _) => Error::NotFound {
                status: Some(status),
                message,
                request_id,
                suggestion: None,
            },
            (429, _) => Error::RateLimited {
                status,
                retry_after,
                message,
                request_id,
            },
            _ => Error::Api { status, message, request_id },
        }
    }

    /// redact takes the token, and a user and password in the base URL,
    /// out of a message.
    pub fn redact(&self, message: String) -> String {
        let message = match self.userinfo.as_deref() {
            Some(info) if !info.is_empty() && message.contains(info) => {
                message.replace(info, "***")
            }
            _ => message,
        };
        if self.token.is_empty() || !message.contains(&self.token) {
            message
        } else {
            message.replace(&self.token, REDACTED)
        }
    }
}

/// StreamRefused says why the change stream did not open: its status, when
/// the server answered, and its `Retry-After`; `reason` names neither the
/// token nor a value.
#[derive(Debug)]
pub(crate) struct StreamRefused {
    pub status: Option<u16>,
    pub retry_after: Option<u64>,
    pub reason: String,
}

/// KeepError keeps the error a body read failed with, so that the client
/// reports ureq's error (a timeout, a dropped connection) rather than the
/// decoder's copy of its message.
struct KeepError<R> {
    inner: R,
    error: Option<std::io::Error>,
}

impl<R> KeepError<R> {
    fn new(inner: R) -> Self {
        KeepError { inner, error: None }
    }
}

impl<R: Read> Read for KeepError<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).map_err(|err| {
            let copy = std::io::Error::new(err.kind(), "reading the body failed");
            self.error = Some(err);
            copy
        })
    }
}

/// canonical_reason is the reason phrase of `status`, when it has one.
fn canonical_reason(status: u16) -> Option<&'static str> {
    ureq::http::StatusCode::from_u16(status)
        .ok()?
        .canonical_reason()
}

fn without_query(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

/// retry_after_seconds reads `Retry-After` as whole seconds: a delay in
/// seconds, or an HTTP date counted from `now`, rounded up, and 0 when it is
/// past. Anything else is `None`.
fn retry_after_seconds(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse().ok();
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(match when.duration_since(now) {
        Ok(ahead) => ahead.as_secs() + u64::from(ahead.subsec_nanos() > 0),
        Err(_) => 0,
    })
}

fn is_retryable(err: &Error) -> bool {
    match err {
        Error::Network { .. } => true,
        Error::Api { status, .. } => rules::RETRYABLE_STATUSES.contains(status),
        _ => false,
    }
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
                assert!(
                    pause <= Duration::from_millis(100) * (1 << retry),
                    "{pause:?}"
                );
                seen.insert(pause);
            }
        }
        assert!(
            seen.len() > 100,
            "pauses should be random, got {}",
            seen.len()
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates_rounding_up() {
        use std::time::UNIX_EPOCH;
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(retry_after_seconds("7", now), Some(7));
        assert_eq!(retry_after_seconds("0", now), Some(0));
        assert_eq!(retry_after_seconds(" 120 ", now), Some(120));
        assert_eq!(
            retry_after_seconds("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(30)
        );
        assert_eq!(
            retry_after_seconds("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(0)
        );
        assert_eq!(
            retry_after_seconds("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(0),
            "past"
        );
        // The two obsolete forms RFC 9110 asks recipients to accept.
        assert_eq!(
            retry_after_seconds("Sunday, 06-Nov-94 08:50:07 GMT", now),
            Some(30)
        );
        assert_eq!(
            retry_after_seconds("Sun Nov  6 08:50:07 1994", now),
            Some(30)
        );
        // Part of a second ahead counts as a whole one.
        let now_and_a_bit = now + Duration::from_millis(300);
        assert_eq!(
            retry_after_seconds("Sun, 06 Nov 1994 08:50:07 GMT", now_and_a_bit),
            Some(30)
        );
        assert_eq!(
            retry_after_seconds("Sun, 06 Nov 1994 08:49:38 GMT", now_and_a_bit),
            Some(1)
        );
        for bad in [
            "",
            "-1",
            "1.5",
            "+3",
            "soon",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "99999999999999999999999",
        ] {
            assert_eq!(retry_after_seconds(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn only_network_errors_and_502_to_504_are_retryable() {
        assert!(is_retryable(&Error::network("")));
        let api = |status| Error::Api {
            status,
            message: String::new(),
            request_id: None,
        };
        for status in [502, 503, 504] {
            assert!(is_retryable(&api(status)));
        }
        for status in [300, 301, 400, 500, 501, 505] {
            assert!(!is_retryable(&api(status)));
        }
        assert!(!is_retryable(&Error::RateLimited {
            status: 429,
            retry_after: None,
            message: String::new(),
            request_id: None,
        }));
        assert!(!is_retryable(&Error::configuration("")));
        assert!(!is_retryable(&Error::decryption("", None)));
    }
}
