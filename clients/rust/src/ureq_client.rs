//! The default [`HttpClient`]: a ureq agent built from the client's
//! configuration (proxy variables, CA file). ureq stays private to cvsm.

use std::io::Read;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::http::{HttpClient, HttpError, HttpErrorKind, HttpRequest, HttpResponse};
use crate::options::Config;
use crate::transport::USER_AGENT;

/// UreqClient sends the client's requests with its own ureq agent.
pub(crate) struct UreqClient {
    agent: ureq::Agent,
}

impl UreqClient {
    /// from_config builds the agent from the environment's proxy variables
    /// and the configured CA file.
    pub(crate) fn from_config(config: &Config) -> Result<UreqClient> {
        let mut builder = ureq::Agent::config_builder()
            .proxy(crate::proxy::from_env(&config.base_url)?)
            .user_agent(USER_AGENT);
        if let Some(path) = &config.ca_file {
            builder = builder.tls_config(tls_trusting(path)?);
        }
        Ok(UreqClient {
            agent: builder.build().new_agent(),
        })
    }
}

impl HttpClient for UreqClient {
    fn get(&self, request: &HttpRequest) -> std::result::Result<HttpResponse, HttpError> {
        let https = request.url().starts_with("https://");
        let mut call = self.agent.get(request.url());
        for (name, value) in request.headers() {
            call = call.header(name, value);
        }
        // The status is read by the client, redirects are answers (never
        // followed, so the token never goes to a Location), and the timeout
        // bounds the whole attempt, from connecting to the last byte; the
        // change stream's, connecting and each read.
        let config = call.config().http_status_as_error(false).max_redirects(0);
        let config = match request.is_stream() {
            true => config
                .timeout_connect(Some(request.timeout()))
                .timeout_per_read(Some(request.timeout())),
            false => config.timeout_global(Some(request.timeout())),
        };
        let response = config.build().call().map_err(|err| classify(err, https))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .filter_map(|(name, value)| {
                Some((name.as_str().to_string(), value.to_str().ok()?.to_string()))
            })
            .collect();
        // Any size: the client reads the body once, bounded by the timeout.
        let body = response
            .into_body()
            .into_with_config()
            .limit(u64::MAX)
            .reader();
        Ok(HttpResponse::new(
            status,
            headers,
            Classified { inner: body, https },
        ))
    }
}

/// Classified is a body reader whose errors carry the [`HttpError`] ureq's
/// error maps to (a timeout, a dropped connection).
struct Classified<R> {
    inner: R,
    https: bool,
}

impl<R: Read> Read for Classified<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).map_err(|err| {
            let err = classify(ureq::Error::from(err), self.https);
            let kind = match err.kind() {
                HttpErrorKind::Timeout => std::io::ErrorKind::TimedOut,
                _ => std::io::ErrorKind::ConnectionAborted,
            };
            std::io::Error::new(kind, err)
        })
    }
}

/// classify gives ureq's error its [`HttpErrorKind`].
fn classify(err: ureq::Error, https: bool) -> HttpError {
    let kind = match &err {
        ureq::Error::Timeout(_) => HttpErrorKind::Timeout,
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => HttpErrorKind::Connect,
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            HttpErrorKind::Connect
        }
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => HttpErrorKind::Tls,
        // rustls reports a refused certificate as invalid data.
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData && https => {
            HttpErrorKind::Tls
        }
        ureq::Error::ConnectProxyFailed(_) => HttpErrorKind::Proxy,
        ureq::Error::Io(_) | ureq::Error::Protocol(_) | ureq::Error::BodyStalled => {
            HttpErrorKind::Dropped
        }
        _ => HttpErrorKind::Other,
    };
    HttpError::new(kind, err)
}

/// tls_trusting returns a TLS configuration whose only roots are the
/// certificates of the PEM bundle at `path`.
fn tls_trusting(path: &std::path::Path) -> Result<ureq::tls::TlsConfig> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|err| {
        Error::configuration(format!(
            "cannot read the CA file {shown} (ca_file, CVSM_CA_FILE): {err}"
        ))
    })?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {}
            Err(_) => {
                return Err(Error::configuration(format!(
                    "the CA file {shown} (ca_file, CVSM_CA_FILE) is not a valid PEM bundle"
                )))
            }
        }
    }
    if certs.is_empty() {
        return Err(Error::configuration(format!(
            "the CA file {shown} (ca_file, CVSM_CA_FILE) holds no PEM certificate"
        )));
    }
    Ok(ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
        .build())
}
