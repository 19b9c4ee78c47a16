//! The e2e tests' own stub server (tests/e2e.rs, support/e2e.rs): a
//! `std::net::TcpListener` in a thread that records every request and answers
//! through a handler closure. Every other test runs on the shared stub
//! (`super::SharedStub`); this one is kept until the e2e rules move into
//! conformance cases.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

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
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind stub");
        let base_url = format!("http://{}/api/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let recorded = Arc::clone(&requests);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let handler = Arc::clone(&handler);
                let recorded = Arc::clone(&recorded);
                thread::spawn(move || serve(stream, &*handler, &recorded));
            }
        });
        Stub { base_url, requests }
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

fn serve(stream: TcpStream, handler: &Handler, recorded: &Mutex<Vec<Request>>) {
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
fn respond(stream: &mut TcpStream, reply: Reply, request_id: &str) {
    let (status, headers, body) = match reply {
        Reply::Drop => return,
        Reply::Slow(pause, reply) => {
            thread::sleep(pause);
            return respond(stream, *reply, request_id);
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
