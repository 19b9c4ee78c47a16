//! A stub cvsm server for the tests: a `std::net::TcpListener` in a thread
//! that records every request and answers through a handler closure.

#![allow(dead_code)] // each test binary uses a different part of it

pub mod e2e;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

pub const TEAM_ID: &str = "0b7f3c1e-8a4d-4c2b-9f1e-2d3c4b5a6978";
pub const TOKEN: &str = "cvsm_0123abcd_TOPSECRETTOKEN";

/// Request is one request the stub received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// target is the path with its query string, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// Reply is what the stub does with a request.
pub enum Reply {
    /// Json answers with a status and a JSON body.
    Json(u16, String),
    /// Headers answers with a status, extra headers and a JSON body.
    Headers(u16, Vec<(&'static str, String)>, String),
    /// Drop closes the connection without answering.
    Drop,
    /// Slow waits before answering.
    Slow(Duration, Box<Reply>),
    /// Drip sends a 200 head announcing `body`, then the body one byte per
    /// interval.
    Drip(Duration, String),
    /// DripStatus is Drip with another status (and an `X-Request-Id`).
    DripStatus(u16, Duration, String),
    /// Cut sends a head announcing `body` with its status, then half the
    /// body, and closes the connection.
    Cut(u16, String),
}

pub fn json(status: u16, body: serde_json::Value) -> Reply {
    Reply::Json(status, body.to_string())
}

pub fn error(status: u16, message: &str) -> Reply {
    json(status, serde_json::json!({ "error": message }))
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// Stub is a running stub server; it lives until the test process exits.
pub struct Stub {
    pub base_url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Stub {
    pub fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Stub {
        Stub::start_with(handler, |stream, serve| serve(Box::new(stream)))
    }

    /// start_with runs `accept` on each connection; it wraps the stream (in
    /// TLS, say) and hands it to `serve`.
    pub fn start_with(
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
        accept: impl Fn(TcpStream, &dyn Fn(Box<dyn Stream>)) + Send + Sync + 'static,
    ) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind stub");
        let base_url = format!("http://{}/api/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let accept = Arc::new(accept);
        let recorded = Arc::clone(&requests);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let handler = Arc::clone(&handler);
                let recorded = Arc::clone(&recorded);
                let accept = Arc::clone(&accept);
                thread::spawn(move || accept(stream, &|s| serve(s, &*handler, &recorded)));
            }
        });
        Stub { base_url, requests }
    }

    /// secrets starts a stub holding `secrets` (name, value) in production
    /// of team TEAM_ID (slug TEAM_SLUG); `errors` may override any request.
    pub fn secrets(
        secrets: &[(&str, &str)],
        errors: impl Fn(&Request) -> Option<Reply> + Send + Sync + 'static,
    ) -> Stub {
        let secrets: Vec<(String, String)> = secrets
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        Stub::start(move |req| {
            if let Some(reply) = errors(req) {
                return reply;
            }
            fake_server(&secrets, req)
        })
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub fn targets(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.target).collect()
    }
}

/// secret_id gives each fake secret a stable id derived from its position.
pub fn secret_id(index: usize) -> String {
    format!("11111111-2222-4333-8444-{index:012}")
}

/// TEAM_SLUG is the slug of team TEAM_ID; the fake server takes either in
/// its paths, like the real one.
pub const TEAM_SLUG: &str = "acme";

/// fake_server answers the three GETs the SDK makes, like the real server:
/// by-name, the listing and the export, of production in team TEAM_ID
/// (or TEAM_SLUG). Any other team is a 404.
fn fake_server(secrets: &[(String, String)], req: &Request) -> Reply {
    let path = req.path();
    let query = req.target.split_once('?').map(|(_, q)| q).unwrap_or("");
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
    };
    let Some(rest) = path.strip_prefix("/api/v1/teams/") else {
        return error(404, "Data tidak ditemukan");
    };
    let (team, rest) = rest.split_once('/').unwrap_or((rest, ""));
    if team != TEAM_ID && team != TEAM_SLUG {
        return error(404, "Tim tidak ditemukan");
    }
    // The export answers whatever the environment; the listing and by-name
    // hold production only.
    let production = param("environment").is_none_or(|e| e == "production");
    if rest == "secrets/export" {
        let values: serde_json::Map<String, serde_json::Value> = secrets
            .iter()
            .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
            .collect();
        return json(200, serde_json::Value::Object(values));
    }
    if rest == "secrets" {
        let search = param("search").unwrap_or_default().to_ascii_lowercase();
        let matches: Vec<serde_json::Value> = secrets
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| production && n.to_ascii_lowercase().contains(&search))
            .map(|(i, (n, _))| {
                serde_json::json!({ "id": secret_id(i), "name": n, "environment": "production" })
            })
            .collect();
        let total = matches.len();
        return json(
            200,
            serde_json::json!({ "secrets": matches, "total": total }),
        );
    }
    if let Some(name) = rest.strip_prefix("secrets/by-name/") {
        if let Some(i) = secrets.iter().position(|(n, _)| production && n == name) {
            let (name, value) = &secrets[i];
            return json(
                200,
                serde_json::json!({
                    "secret": { "id": secret_id(i), "name": name, "environment": "production" },
                    "value": value,
                }),
            );
        }
        return error(404, "Secret tidak ditemukan");
    }
    error(404, "Data tidak ditemukan")
}

/// Stream is a connection the stub reads a request from and answers on.
pub trait Stream: Read + Write + Send {}
impl<S: Read + Write + Send> Stream for S {}

fn serve(stream: Box<dyn Stream>, handler: &Handler, recorded: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 {
            break;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let request = Request {
        method,
        target,
        headers,
    };
    let number = {
        let mut recorded = recorded.lock().unwrap();
        recorded.push(request.clone());
        recorded.len()
    };
    respond(
        reader.get_mut(),
        handler(&request),
        &format!("req-{number}"),
    );
}

/// respond sends `reply`; every answer carries `X-Request-Id: req-<n>` (n
/// counts the stub's requests from 1) unless the reply sets its own.
fn respond(stream: &mut dyn Stream, reply: Reply, request_id: &str) {
    let (status, headers, body) = match reply {
        Reply::Drop => return,
        Reply::Slow(pause, reply) => {
            thread::sleep(pause);
            return respond(stream, *reply, request_id);
        }
        Reply::Drip(interval, body) => {
            let head = format!(
                "HTTP/1.1 200 Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            drip(stream, &head, interval, &body);
            return;
        }
        Reply::DripStatus(status, interval, body) => {
            let head = format!(
                "HTTP/1.1 {status} Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\nX-Request-Id: {request_id}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            drip(stream, &head, interval, &body);
            return;
        }
        Reply::Cut(status, body) => {
            let head = format!(
                "HTTP/1.1 {status} Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\nX-Request-Id: {request_id}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body.as_bytes()[..body.len() / 2]);
            let _ = stream.flush();
            return;
        }
        Reply::Json(status, body) => (status, Vec::new(), body),
        Reply::Headers(status, headers, body) => (status, headers, body),
    };

    let mut head = format!(
        "HTTP/1.1 {status} Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("x-request-id"))
    {
        head.push_str(&format!("X-Request-Id: {request_id}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
    let _ = stream.flush();
}

/// drip sends `head` at once, then `body` one byte per `interval`.
fn drip(stream: &mut dyn Stream, head: &str, interval: Duration, body: &str) {
    let _ = stream.write_all(head.as_bytes());
    for byte in body.bytes() {
        let _ = stream.flush();
        thread::sleep(interval);
        if stream.write_all(&[byte]).is_err() {
            return;
        }
    }
    let _ = stream.flush();
}

/// ConnectProxy is an HTTP proxy that tunnels `CONNECT host:port` and
/// records each request line it receives.
pub struct ConnectProxy {
    pub url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ConnectProxy {
    pub fn start() -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&lines);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let recorded = Arc::clone(&recorded);
                thread::spawn(move || tunnel(stream, &recorded));
            }
        });
        ConnectProxy { url, lines }
    }

    /// lines returns the request lines received (`CONNECT 127.0.0.1:1234 HTTP/1.1`).
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

fn tunnel(client: TcpStream, recorded: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(client.try_clone().expect("clone stream"));
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let line = line.trim_end().to_string();
    recorded.lock().unwrap().push(line.clone());
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim_end().is_empty() {
            break;
        }
    }
    let mut client = client;
    let target = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["CONNECT", target, _] => target.to_string(),
        _ => {
            let _ = client.write_all(b"HTTP/1.1 405 Only CONNECT\r\nContent-Length: 0\r\n\r\n");
            return;
        }
    };
    let Ok(upstream) = TcpStream::connect(&target) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
    let (mut up_read, mut up_write) = (upstream.try_clone().unwrap(), upstream);
    let mut client_write = client.try_clone().unwrap();
    thread::spawn(move || {
        let _ = std::io::copy(&mut reader, &mut up_write);
        let _ = up_write.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut up_read, &mut client_write);
    let _ = client_write.shutdown(std::net::Shutdown::Both);
}

/// tls_stub starts a stub that speaks HTTPS with the test PKI's server
/// certificate (for localhost and 127.0.0.1, signed by `fixture("ca.pem")`).
pub fn tls_stub(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Stub {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let certs = CertificateDer::pem_file_iter(fixture("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(fixture("server-key.pem")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let config = Arc::new(config);
    let mut stub = Stub::start_with(handler, move |tcp, serve| {
        let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else {
            return;
        };
        serve(Box::new(rustls::StreamOwned::new(connection, tcp)));
    });
    stub.base_url = stub.base_url.replacen("http://", "https://", 1);
    stub
}

/// fixture returns the path of a file of the test PKI, made once per test
/// binary in Cargo's scratch directory for integration tests: `ca.pem` (a CA
/// whose key is never written), `server.pem` and `server-key.pem` (signed by
/// it for localhost and 127.0.0.1), and `other-ca.pem` (an unrelated CA, which
/// must not be enough to trust the server). No key is committed.
pub fn fixture(name: &str) -> std::path::PathBuf {
    static PKI: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PKI.get_or_init(make_pki).join(name)
}

fn make_pki() -> std::path::PathBuf {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };

    let ca = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        (cert, key)
    };
    let (ca_cert, ca_key) = ca("cvsm tests CA");
    let (other_ca, _) = ca("cvsm tests unrelated CA");
    let server_key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server = params.signed_by(&server_key, &ca_cert, &ca_key).unwrap();

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("pki-{}", env!("CARGO_CRATE_NAME")));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, pem) in [
        ("ca.pem", ca_cert.pem()),
        ("other-ca.pem", other_ca.pem()),
        ("server.pem", server.pem()),
        ("server-key.pem", server_key.serialize_pem()),
    ] {
        std::fs::write(dir.join(name), pem).unwrap();
    }
    dir
}

/// UreqHttp is an [`cvsm::HttpClient`] on a ureq agent of the test's own, as
/// the README shows one: statuses as answers, no redirect, the request's
/// timeout over the whole exchange.
pub struct UreqHttp(pub ureq::Agent);

impl cvsm::HttpClient for UreqHttp {
    fn get(&self, request: &cvsm::HttpRequest) -> Result<cvsm::HttpResponse, cvsm::HttpError> {
        let mut call = self.0.get(request.url());
        for (name, value) in request.headers() {
            call = call.header(name, value);
        }
        let response = call
            .config()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(request.timeout()))
            .build()
            .call()
            .map_err(|err| {
                let kind = match err {
                    ureq::Error::Timeout(_) => cvsm::HttpErrorKind::Timeout,
                    ureq::Error::ConnectionFailed => cvsm::HttpErrorKind::Connect,
                    _ => cvsm::HttpErrorKind::Other,
                };
                cvsm::HttpError::new(kind, err)
            })?;
        let headers = response
            .headers()
            .iter()
            .filter_map(|(n, v)| Some((n.to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let status = response.status().as_u16();
        Ok(cvsm::HttpResponse::new(
            status,
            headers,
            response.into_body().into_reader(),
        ))
    }
}
