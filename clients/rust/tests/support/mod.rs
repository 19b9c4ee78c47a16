//! The tests' fixtures: a launcher for conformance/stub.py (the stub cvsm API
//! every SDK's own tests share), an HTTP proxy that tunnels CONNECT, a test CA
//! and an [`cvsm::HttpClient`] on a ureq agent of the test's own.

#![allow(dead_code)] // each test binary uses a different part of it

pub mod e2e;
mod own;

#[allow(unused_imports)] // the e2e tests use them
pub use own::{error, json, Reply, Request, Stub};

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// CONFIG_VARS are the variables a client reads from the environment.
pub const CONFIG_VARS: [&str; 16] = [
    "CVSM_TOKEN",
    "CVSM_BASE_URL",
    "CVSM_TEAM",
    "CVSM_ENVIRONMENT",
    "CVSM_CACHE_TTL",
    "CVSM_TIMEOUT",
    "CVSM_MAX_RETRIES",
    "CVSM_CA_FILE",
    "CVSM_STALE_IF_ERROR",
    "CVSM_LIVE",
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
];

pub const TEAM_ID: &str = "0b7f3c1e-8a4d-4c2b-9f1e-2d3c4b5a6978";
pub const TOKEN: &str = "cvsm_0123abcd_TOPSECRETTOKEN";
/// TEAM_SLUG is the slug of team TEAM_ID; the stubs take either in their
/// paths, like the real server.
pub const TEAM_SLUG: &str = "acme";

/// SharedStub is conformance/stub.py in a process of the test's own (tests run
/// in parallel; each gets its own data): canned data over `POST /_stub/reset`,
/// scripted faults over `POST /_stub/faults`, the requests it saw at
/// `GET /_stub/requests`. The process ends when the value is dropped.
pub struct SharedStub {
    /// base_url is the stub's API root (`http://127.0.0.1:PORT/api/v1`).
    pub base_url: String,
    root: String,
    child: Child,
    dir: std::path::PathBuf,
}

/// StubRequest is what the shared stub saw of one API request.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct StubRequest {
    pub method: String,
    /// path is as sent, percent-encoding included.
    pub path: String,
    pub query: String,
    /// headers are keyed by their names in lower case.
    pub headers: HashMap<String, String>,
}

impl StubRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// target is the path with its query string.
    pub fn target(&self) -> String {
        match self.query.as_str() {
            "" => self.path.clone(),
            query => format!("{}?{query}", self.path),
        }
    }
}

impl SharedStub {
    /// start runs a stub holding `secrets` (name, value) in production of team
    /// TEAM_ID (slug TEAM_SLUG), for the token TOKEN.
    pub fn start(secrets: &[(&str, &str)]) -> SharedStub {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cvsm-rust-stub-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let port_file = dir.join("port");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../conformance/stub.py");
        // Its stderr (a client hanging up makes a traceback there) goes to a file, shown when
        // it does not start.
        let log = std::fs::File::create(dir.join("stderr")).unwrap();
        let child = Command::new("python3")
            .arg(script)
            .arg(&port_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("python3 conformance/stub.py");
        let started = Instant::now();
        let port = loop {
            match std::fs::read_to_string(&port_file) {
                Ok(port) if !port.trim().is_empty() => break port.trim().to_string(),
                _ if started.elapsed() > Duration::from_secs(20) => {
                    let log = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
                    panic!("conformance/stub.py wrote no port to {port_file:?}: {log}")
                }
                _ => thread::sleep(Duration::from_millis(20)),
            }
        };
        let root = format!("http://127.0.0.1:{port}");
        let stub = SharedStub {
            base_url: format!("{root}/api/v1"),
            root,
            child,
            dir,
        };
        let secrets: Vec<_> = secrets
            .iter()
            .enumerate()
            .map(|(i, (name, value))| {
                serde_json::json!({
                    "id": format!("11111111-2222-4333-8444-{i:012}"),
                    "name": name, "environment": "production", "value": value,
                })
            })
            .collect();
        stub.post(
            "/_stub/reset",
            serde_json::json!({
                "token": TOKEN,
                "teams": [{ "id": TEAM_ID, "slug": TEAM_SLUG }],
                "secrets": secrets,
            }),
        );
        stub
    }

    /// faults queues faults, a JSON array (see conformance/stub.py).
    pub fn faults(&self, faults: serde_json::Value) {
        self.post("/_stub/faults", faults);
    }

    pub fn requests(&self) -> Vec<StubRequest> {
        serde_json::from_value(self.get("/_stub/requests")).unwrap()
    }

    pub fn count(&self) -> usize {
        self.requests().len()
    }

    /// changes sends changes to the open change streams, a JSON array (see conformance/stub.py).
    pub fn changes(&self, changes: serde_json::Value) {
        self.post("/_stub/changes", changes);
    }

    /// streams says how many change streams are open, and how many ended since the start.
    pub fn streams(&self) -> (u64, u64) {
        let streams = self.get("/_stub/streams");
        let count = |key: &str| streams[key].as_u64().unwrap();
        (count("open"), count("closed"))
    }

    pub fn targets(&self) -> Vec<String> {
        self.requests().iter().map(StubRequest::target).collect()
    }

    fn get(&self, path: &str) -> serde_json::Value {
        let body = stub_agent()
            .get(format!("{}{path}", self.root))
            .call()
            .unwrap_or_else(|err| panic!("GET {path}: {err}"))
            .into_body()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    }

    fn post(&self, path: &str, body: serde_json::Value) {
        stub_agent()
            .post(format!("{}{path}", self.root))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .unwrap_or_else(|err| panic!("POST {path}: {err}"));
    }
}

impl Drop for SharedStub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// stub_agent talks to the stub itself, never through a proxy.
fn stub_agent() -> ureq::Agent {
    ureq::Agent::config_builder().proxy(None).build().into()
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

/// fixture returns the path of a file of the test PKI, made once per test
/// binary in Cargo's scratch directory for integration tests: `ca.pem`, a CA
/// certificate whose key is never written. No key is committed.
pub fn fixture(name: &str) -> std::path::PathBuf {
    static PKI: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PKI.get_or_init(make_pki).join(name)
}

fn make_pki() -> std::path::PathBuf {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "cvsm tests CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = params.self_signed(&key).unwrap();

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("pki-{}", env!("CARGO_CRATE_NAME")));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
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
