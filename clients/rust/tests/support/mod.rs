//! A stub cvsm server for the tests: a `std::net::TcpListener` in a thread
//! that records every request and answers through a handler closure.

#![allow(dead_code)] // each test binary uses a different part of it

use std::io::{BufRead, BufReader, Write};
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
        return json(200, serde_json::json!({ "secrets": matches, "total": total }));
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

fn serve(stream: TcpStream, handler: &Handler, recorded: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
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
    recorded.lock().unwrap().push(request.clone());
    respond(stream, handler(&request));
}

fn respond(mut stream: TcpStream, reply: Reply) {
    let (status, headers, body) = match reply {
        Reply::Drop => return,
        Reply::Slow(pause, reply) => {
            thread::sleep(pause);
            return respond(stream, *reply);
        }
        Reply::Json(status, body) => (status, Vec::new(), body),
        Reply::Headers(status, headers, body) => (status, headers, body),
    };
    let mut head = format!(
        "HTTP/1.1 {status} Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
    let _ = stream.flush();
}
