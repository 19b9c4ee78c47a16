//! The transport seam: the [`HttpClient`] trait the client sends its GET
//! requests through, with cvsm's own request, response and error types, so
//! that no HTTP library's types are part of cvsm's API.

use std::fmt;
use std::io::Read;
use std::time::Duration;

/// A blocking HTTP client that a [`Client`](crate::Client) sends its
/// requests through, given to [`ClientBuilder::http_client`](crate::ClientBuilder::http_client).
///
/// The client sends only GETs. An implementation sends `request` as it is
/// (its URL and every header, `Authorization` included) and returns the
/// answer whatever its status. It must:
///
/// - follow **no redirect**: a 3xx is an answer like any other (the client
///   makes it an [`Error::Api`](crate::Error::Api), and the token must never
///   go to a `Location`);
/// - bound the whole exchange, connecting to the last byte of the body, by
///   [`HttpRequest::timeout`], returning an [`HttpErrorKind::Timeout`] error
///   (or failing the body's reads) once it has passed;
/// - report a failure to get an answer as an [`HttpError`] of the right
///   [`HttpErrorKind`], and a failure while the body is read as an
///   [`std::io::Error`] from the body's reader.
///
/// The client sets its own `Authorization`, `Accept` and `User-Agent`
/// headers, reads every status itself and retries as its options say. An
/// implementation must be `Send + Sync`: one client may be shared between
/// threads.
///
/// ```
/// use cvsm::{HttpClient, HttpError, HttpErrorKind, HttpRequest, HttpResponse};
///
/// /// Answers every request with one canned export, for a test.
/// struct Canned;
///
/// impl HttpClient for Canned {
///     fn get(&self, request: &HttpRequest) -> Result<HttpResponse, HttpError> {
///         if !request.url().contains("/secrets/export") {
///             return Err(HttpError::new(HttpErrorKind::Connect, "this test double only exports"));
///         }
///         let body = br#"{"DATABASE_URL": "postgres://db/app"}"#;
///         Ok(HttpResponse::new(200, vec![], &body[..]))
///     }
/// }
///
/// let client = cvsm::Client::builder()
///     .token("cvsm_test")
///     .base_url("https://cvsm.example.com/api/v1")
///     .team("acme")
///     .http_client(Canned)
///     .build()?;
/// assert_eq!(client.get_all()?["DATABASE_URL"], "postgres://db/app");
/// # Ok::<(), cvsm::Error>(())
/// ```
pub trait HttpClient: Send + Sync {
    /// Sends the GET `request` and returns the answer, whatever its status,
    /// or the error that kept an answer from arriving.
    fn get(&self, request: &HttpRequest) -> Result<HttpResponse, HttpError>;
}

/// A GET request the client asks an [`HttpClient`] to send.
#[derive(Clone)]
pub struct HttpRequest {
    pub(crate) url: String,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) timeout: Duration,
    pub(crate) stream: bool,
}

impl HttpRequest {
    /// Returns the absolute URL, with its query, to send the GET to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Returns the headers to send, as (name, value) pairs; `Authorization`
    /// is among them.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
    }

    /// Returns how long the whole exchange may take, from connecting to the
    /// last byte of the body; for a [stream](HttpRequest::is_stream), how
    /// long connecting and each wait for a byte may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Tells whether this is a live client's change stream
    /// (`Accept: text/event-stream`), whose body lasts as long as the
    /// client: its [`timeout`](HttpRequest::timeout) bounds connecting and
    /// each wait for a byte (the server sends one at least every 15 s), not
    /// the whole exchange. An implementation that bounds the whole exchange
    /// anyway makes the client reconnect each time.
    pub fn is_stream(&self) -> bool {
        self.stream
    }
}

impl fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = if name.eq_ignore_ascii_case("authorization") {
                    "[redacted]"
                } else {
                    value.as_str()
                };
                (*name, shown)
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("url", &self.url)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("stream", &self.stream)
            .finish()
    }
}

/// An answer an [`HttpClient`] received: its status, its headers and a
/// reader of its body.
pub struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Box<dyn Read + Send>,
}

impl HttpResponse {
    /// Creates an answer from its status, its headers (names in any case)
    /// and a reader of its body, which the client reads at most once.
    pub fn new(
        status: u16,
        headers: Vec<(String, String)>,
        body: impl Read + Send + 'static,
    ) -> Self {
        HttpResponse {
            status,
            headers,
            body: Box::new(body),
        }
    }

    /// Returns the HTTP status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Returns the trimmed value of the first header called `name`
    /// (compared without regard to case), when it is present and not empty.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// Returns the reader of the body.
    pub fn body_mut(&mut self) -> &mut (dyn Read + Send) {
        &mut *self.body
    }
}

impl fmt::Debug for HttpResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponse")
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// What kept an answer from arriving; the client words its
/// [`Error::Network`](crate::Error::Network) message from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpErrorKind {
    /// The request's timeout passed.
    Timeout,
    /// No connection to the server: refused, unreachable, or a host name
    /// that does not resolve.
    Connect,
    /// The TLS handshake failed, for example on an untrusted certificate.
    Tls,
    /// The proxy refused the connection.
    Proxy,
    /// The connection was dropped, or the answer broke the protocol.
    Dropped,
    /// Any other failure.
    Other,
}

/// A failure of an [`HttpClient`] to get an answer: its kind and its cause.
#[derive(Debug)]
pub struct HttpError {
    kind: HttpErrorKind,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl HttpError {
    /// Creates an error of `kind` caused by `source` (any error, or a
    /// message). The cause's text is shown in the client's error message:
    /// it must not hold the token.
    pub fn new(
        kind: HttpErrorKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        HttpError {
            kind,
            source: source.into(),
        }
    }

    /// Returns what kept the answer from arriving.
    pub fn kind(&self) -> HttpErrorKind {
        self.kind
    }

    /// from_io classifies an error of a body's reader: the [`HttpError`] it
    /// carries, if any, else a timeout or a dropped connection.
    pub(crate) fn from_io(err: std::io::Error) -> HttpError {
        if err.get_ref().is_some_and(|inner| inner.is::<HttpError>()) {
            if let Ok(inner) = err
                .into_inner()
                .expect("checked above")
                .downcast::<HttpError>()
            {
                return *inner;
            }
            unreachable!("checked above");
        }
        let kind = match err.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => HttpErrorKind::Timeout,
            _ => HttpErrorKind::Dropped,
        };
        HttpError::new(kind, err)
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl std::error::Error for HttpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
