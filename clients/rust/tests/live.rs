//! Live caches (rule R16) beyond what the conformance cases see: one stream
//! per client, `Last-Event-ID` on reconnection, and the
//! stream's end when the client is closed or dropped.

mod support;

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cvsm::{Client, HttpClient, HttpError, HttpRequest, HttpResponse};
use support::{SharedStub, TEAM_ID, TOKEN};

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

#[test]
fn dropping_the_client_ends_its_stream() {
    let stub = SharedStub::start(&[("A", "v")]);
    let client = Client::builder()
        .token(TOKEN)
        .base_url(&stub.base_url)
        .team(TEAM_ID)
        .live(true)
        .build()
        .unwrap();
    assert_eq!(client.get("A").unwrap(), "v");
    until("the stream's snapshot", || client.live_connected());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(stub.streams(), (1, 0), "the stream stays open");
    drop(client);
    // The stream's thread sees the drop at its next byte: the stub sends comments meanwhile.
    until("the stub to see the stream closed", || {
        stub.changes(serde_json::json!([{ "raw": ": heartbeat\n\n" }]));
        stub.streams() == (0, 1)
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
