//! A stub cvsm server for the tests: a `std::net::TcpListener` in a thread
//! that records every request and answers through a handler closure.

#![allow(dead_code)] // each test binary uses a different part of it

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
    /// of team TEAM_ID (slug "acme"); `errors` may override any request.
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

/// fake_server answers the three GETs the SDK makes, like the real server.
fn fake_server(secrets: &[(String, String)], req: &Request) -> Reply {
    let team = format!("/api/v1/teams/{TEAM_ID}");
    let path = req.path();
    let query = req.target.split_once('?').map(|(_, q)| q).unwrap_or("");
    if path == "/api/v1/teams" {
        return json(
            200,
            serde_json::json!({ "teams": [
                { "id": "99999999-2222-4333-8444-000000000000", "slug": "other", "name": "Other" },
                { "id": TEAM_ID, "slug": "acme", "name": "Acme", "role": "Viewer" },
            ]}),
        );
    }
    if path == format!("{team}/secrets/export") {
        let values: serde_json::Map<String, serde_json::Value> = secrets
            .iter()
            .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
            .collect();
        return json(200, serde_json::Value::Object(values));
    }
    if path == format!("{team}/secrets") {
        let search = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("search="))
            .unwrap_or("")
            .to_ascii_lowercase();
        let matches: Vec<serde_json::Value> = secrets
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| n.to_ascii_lowercase().contains(&search))
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
    if let Some(id) = path.strip_prefix(&format!("{team}/secrets/")) {
        if let Some(i) = (0..secrets.len()).find(|i| secret_id(*i) == id) {
            let (name, value) = &secrets[i];
            return json(
                200,
                serde_json::json!({ "secret": { "id": id, "name": name }, "value": value }),
            );
        }
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
            let _ = stream.write_all(head.as_bytes());
            for byte in body.bytes() {
                let _ = stream.flush();
                thread::sleep(interval);
                if stream.write_all(&[byte]).is_err() {
                    return;
                }
            }
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

/// tls_stub starts a stub that speaks HTTPS with `tests/fixtures/server.pem`
/// (for 127.0.0.1, signed by `tests/fixtures/ca.pem`; test-only keys).
pub fn tls_stub(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Stub {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let certs = CertificateDer::pem_file_iter(format!("{fixtures}/server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(format!("{fixtures}/server-key.pem")).unwrap();
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

/// fixture returns the path of a file in tests/fixtures.
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}
