//! Live caches (rule R16) beyond what the conformance cases see: one stream
//! per client, `Last-Event-ID` on reconnection, and the
//! stream's end when the client is closed or dropped.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cvsm::{Client, HttpClient, HttpError, HttpRequest, HttpResponse};
use support::{TEAM_ID, TOKEN};

type Answer = Box<dyn Fn(&HttpRequest) -> HttpResponse + Send + Sync>;

/// Double answers through a closure and records every request.
#[derive(Clone)]
struct Double {
    requests: Arc<Mutex<Vec<HttpRequest>>>,
    answer: Arc<Answer>,
}

impl Double {
    fn new(answer: impl Fn(&HttpRequest) -> HttpResponse + Send + Sync + 'static) -> Double {
        Double {
            requests: Arc::default(),
            answer: Arc::new(Box::new(answer)),
        }
    }

    fn streams(&self) -> Vec<HttpRequest> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.is_stream())
            .cloned()
            .collect()
    }

    fn reads(&self) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.url().contains("/by-name/"))
            .count()
    }

    fn client(&self) -> Client {
        Client::builder()
            .token(TOKEN)
            .base_url("https://cvsm.example.com/api/v1")
            .team(TEAM_ID)
            .environment("production")
            .cache_ttl(Duration::from_secs(30))
            .live(true)
            .http_client(self.clone())
            .build()
            .expect("client")
    }
}

impl HttpClient for Double {
    fn get(&self, request: &HttpRequest) -> Result<HttpResponse, HttpError> {
        self.requests.lock().unwrap().push(request.clone());
        Ok((self.answer)(request))
    }
}

/// by_name answers a read by name with `value` at version 1.
fn by_name(request: &HttpRequest, value: &str) -> HttpResponse {
    let name = request
        .url()
        .split("/by-name/")
        .nth(1)
        .and_then(|rest| rest.split('?').next())
        .unwrap_or("");
    let body = serde_json::json!({
        "secret": {"name": name, "environment": "production", "version": 1},
        "value": value,
    });
    HttpResponse::new(200, vec![], std::io::Cursor::new(body.to_string()))
}

fn event_stream(body: &'static str) -> HttpResponse {
    HttpResponse::new(
        200,
        vec![("Content-Type".into(), "text/event-stream".into())],
        body.as_bytes(),
    )
}

/// Silent is a stream body that never sends a byte until `open` is false.
struct Silent(Arc<AtomicBool>);

impl Read for Silent {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        while self.0.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(0)
    }
}

/// until waits up to 5 s for `done`.
fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn one_stream_serves_every_name_and_a_reconnection_sends_the_last_event_id() {
    let open = Arc::new(AtomicBool::new(true));
    let held = Arc::clone(&open);
    let double = Double::new(move |request| {
        if !request.is_stream() {
            return by_name(request, "value");
        }
        let first = !request.headers().any(|(name, _)| name == "Last-Event-ID");
        match first {
            // A snapshot, a change with an id, then the server closes it.
            true => event_stream(concat!(
                "event: snapshot\ndata: {\"secrets\": {\"A\": {\"version\": 1}, \"B\": {\"version\": 1}}}\n\n",
                ": heartbeat\n\n",
                "id: 42\nevent: change\ndata: {\"name\": \"A\", \"environment\": \"production\", \"version\": 2}\n\n",
            )),
            false => HttpResponse::new(200, vec![], Silent(Arc::clone(&held))),
        }
    });
    let client = double.client();
    assert!(!client.live_connected());
    assert_eq!(client.get("A").unwrap(), "value");
    assert_eq!(client.get("B").unwrap(), "value");
    until("the reconnection", || double.streams().len() == 2);
    let streams = double.streams();
    assert_eq!(
        streams[0].url(),
        format!("https://cvsm.example.com/api/v1/teams/{TEAM_ID}/secrets/changes?environment=production")
    );
    let header = |request: &HttpRequest, wanted: &str| {
        request
            .headers()
            .find(|(name, _)| *name == wanted)
            .map(|(_, value)| value.to_string())
    };
    assert_eq!(
        header(&streams[0], "Accept").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(header(&streams[0], "Last-Event-ID"), None);
    assert_eq!(header(&streams[1], "Last-Event-ID").as_deref(), Some("42"));
    assert_eq!(
        streams[1].timeout(),
        Duration::from_secs(45),
        "45 s without a byte is a lost stream"
    );

    // The change to A (version 2) made it stop being fresh; B stayed cached.
    let reads = double.reads();
    assert_eq!(client.get("B").unwrap(), "value");
    assert_eq!(double.reads(), reads, "B did not change");
    assert_eq!(client.get("A").unwrap(), "value");
    assert_eq!(double.reads(), reads + 1, "A changed: read once");
    assert_eq!(double.streams().len(), 2, "no stream per name");
    open.store(false, Ordering::SeqCst);
}

// A refused stream emptying the cache, and not tried again for minutes, is the conformance
// case live_stream_refused_empties_the_cache.

/// A plain TCP server: a read by name answers `{"value": "v"}`, the change
/// stream sends its snapshot, then a comment every 50 ms until the client
/// has gone; `gone` is set then.
fn socket_server(gone: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}/api/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let gone = Arc::clone(&gone);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut target = String::new();
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 2 {
                    if target.is_empty() {
                        target = line.clone();
                    }
                    line.clear();
                }
                if !target.contains("/secrets/changes") {
                    let body = r#"{"secret": {"version": 1}, "value": "v"}"#;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    return;
                }
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\nevent: snapshot\ndata: {\"secrets\": {}}\n\n");
                while stream.write_all(b": heartbeat\n\n").is_ok() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                gone.store(true, Ordering::SeqCst);
            });
        }
    });
    base_url
}

#[test]
fn dropping_the_client_ends_its_stream() {
    let gone = Arc::new(AtomicBool::new(false));
    let client = Client::builder()
        .token(TOKEN)
        .base_url(socket_server(Arc::clone(&gone)))
        .team(TEAM_ID)
        .live(true)
        .build()
        .unwrap();
    assert_eq!(client.get("A").unwrap(), "v");
    until("the stream's snapshot", || client.live_connected());
    std::thread::sleep(Duration::from_millis(200));
    assert!(!gone.load(Ordering::SeqCst), "the stream stays open");
    drop(client);
    until("the server to see the stream closed", || {
        gone.load(Ordering::SeqCst)
    });
}

#[test]
fn a_closed_client_reads_with_the_plain_cache_and_opens_no_stream() {
    let double = Double::new(|request| by_name(request, "value"));
    let client = double.client();
    client.close();
    assert_eq!(client.get("A").unwrap(), "value");
    std::thread::sleep(Duration::from_millis(100));
    assert!(double.streams().is_empty());
    assert_eq!(client.get("A").unwrap(), "value");
    assert_eq!(double.reads(), 1, "cached for cache_ttl");
}
