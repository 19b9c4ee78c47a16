//! `cvsm::Client`'s Rust surface on the shared stub (conformance/stub.py): the
//! cache across threads, `Debug` redaction, configuration accessors and the
//! transport seam. These tests never read or write the process environment
//! (see tests/env.rs for that); the wire rules are the conformance cases.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cvsm::{Client, ClientOptions, Error, HttpClient, HttpError, HttpRequest, HttpResponse};
use serde_json::json;
use support::{fixture, ConnectProxy, SharedStub, UreqHttp, TEAM_ID, TEAM_SLUG, TOKEN};

/// options configures every field explicitly, so no `CVSM_*` variable is read.
fn options(base_url: &str) -> ClientOptions {
    ClientOptions {
        token: Some(TOKEN.into()),
        base_url: Some(base_url.into()),
        team: Some(TEAM_ID.into()),
        environment: Some("production".into()),
        cache_ttl: Some(Duration::from_secs(30)),
        timeout: Some(Duration::from_secs(5)),
        max_retries: Some(2),
        ca_file: None,
        stale_if_error: Some(Duration::ZERO),
        live: false,
    }
}

fn client(stub: &SharedStub) -> Client {
    Client::new(options(&stub.base_url)).expect("client")
}

// The team in the path as given, percent-encoded, with no GET /teams for a slug, is the
// conformance cases team_is_percent_encoded_in_the_path and team_by_slug.

#[test]
fn a_read_in_flight_across_clear_cache_is_not_cached() {
    for get_all in [false, true] {
        let stub = SharedStub::start(&[("A", "1")]);
        // The first answer comes late: clear_cache runs meanwhile.
        stub.faults(json!([{ "path": "/api/v1/", "delay": 0.4 }]));
        let client = Arc::new(client(&stub));
        let reader = {
            let client = Arc::clone(&client);
            std::thread::spawn(move || match get_all {
                true => client.get_all().map(|values| values["A"].clone()),
                false => client.get("A"),
            })
        };
        let waited = Instant::now();
        while stub.count() == 0 {
            assert!(waited.elapsed() < Duration::from_secs(5), "no request");
            std::thread::sleep(Duration::from_millis(5));
        }
        client.clear_cache();
        assert_eq!(reader.join().unwrap().unwrap(), "1");

        assert_eq!(client.get("A").unwrap(), "1");
        assert_eq!(
            stub.count(),
            2,
            "get_all: {get_all}: what was fetched before clear_cache is not cached"
        );
    }
}

#[test]
fn token_and_values_never_appear_in_debug_output_or_errors() {
    let stub = SharedStub::start(&[("A", "value-that-must-not-print")]);
    stub.faults(json!([{
        "path": format!("/api/v1/teams/{TEAM_ID}/secrets/export"),
        "status": 401,
        "body": json!({ "error": format!("token {TOKEN} ditolak") }).to_string(),
    }]));
    let options = options(&stub.base_url);
    let client = Client::new(options.clone()).unwrap();
    client.get("A").unwrap();

    let printed = format!("{client:?} {client:#?} {options:?} {options:#?}");
    assert!(!printed.contains(TOKEN), "{printed}");
    assert!(!printed.contains("TOPSECRET"), "{printed}");
    assert!(!printed.contains("value-that-must-not-print"), "{printed}");
    assert!(
        printed.contains(&stub.base_url) && printed.contains("[redacted]"),
        "{printed}"
    );

    let err = client.get_all().unwrap_err();
    let printed = format!("{err} {err:?}");
    assert!(matches!(err, Error::Authentication { .. }), "{printed}");
    assert!(!printed.contains(TOKEN), "{printed}");
    assert!(printed.contains("ditolak"), "{printed}");
}

#[test]
fn base_url_password_never_appears_in_debug_output_or_errors() {
    let with_userinfo = "http://cvsm-user:p4ss-must-not-show@127.0.0.1:9/api/v1";
    let mut options = options(with_userinfo);
    options.max_retries = Some(0);
    let client = Client::new(options.clone()).unwrap();
    let printed = format!("{client:?} {client:#?} {options:?} {options:#?}");
    assert!(!printed.contains("p4ss-must-not-show"), "{printed}");
    assert!(!printed.contains("cvsm-user"), "{printed}");
    assert!(
        printed.contains("http://***@127.0.0.1:9/api/v1"),
        "{printed}"
    );
    assert_eq!(client.base_url(), with_userinfo);

    let err = client.get("A").unwrap_err();
    let printed = format!("{err} {err:?}");
    assert!(matches!(err, Error::Network { .. }), "{printed}");
    assert!(!printed.contains("p4ss-must-not-show"), "{printed}");
}

/// Recorder answers every request with one secret and keeps the requests.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<HttpRequest>>>);

impl HttpClient for Recorder {
    fn get(&self, request: &HttpRequest) -> Result<HttpResponse, HttpError> {
        self.0.lock().unwrap().push(request.clone());
        let body = json!({
            "secret": {"name": "A", "environment": "production", "version": 1},
            "value": "1",
        });
        Ok(HttpResponse::new(
            200,
            vec![],
            std::io::Cursor::new(body.to_string()),
        ))
    }
}

#[test]
fn base_url_user_and_password_never_reach_the_http_client() {
    let recorder = Recorder::default();
    let client = Client::builder()
        .token(TOKEN)
        .base_url("https://cvsm-user:p4ss-must-not-show@cvsm.example.com/api/v1")
        .team(TEAM_ID)
        .environment("production")
        .http_client(recorder.clone())
        .build()
        .unwrap();
    assert_eq!(client.get("A").unwrap(), "1");
    let requests = recorder.0.lock().unwrap();
    assert_eq!(requests.len(), 1);
    let url = requests[0].url();
    assert!(
        url.starts_with("https://cvsm.example.com/api/v1/teams/"),
        "{url}"
    );
    let auth: Vec<_> = requests[0]
        .headers()
        .filter(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value.to_string())
        .collect();
    assert_eq!(auth, vec![format!("Bearer {TOKEN}")]);
}

#[test]
fn client_is_send_and_sync_and_shares_its_cache_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Client>();
    assert_send_sync::<Error>();

    let stub = SharedStub::start(&[("A", "1")]);
    let client = Arc::new(client(&stub));
    client.get("A").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let client = Arc::clone(&client);
            std::thread::spawn(move || client.get("A").unwrap())
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), "1");
    }
    assert_eq!(stub.count(), 1);
}

#[test]
fn config_accessors_report_the_effective_configuration() {
    let client = Client::new(ClientOptions {
        base_url: Some("https://cvsm.example/api/v1///".into()),
        timeout: Some(Duration::from_millis(2500)),
        max_retries: Some(5),
        stale_if_error: Some(Duration::from_secs(300)),
        ..options("unused")
    })
    .unwrap();
    assert_eq!(client.base_url(), "https://cvsm.example/api/v1");
    assert_eq!(client.team(), TEAM_ID);
    assert_eq!(client.environment(), "production");
    assert_eq!(client.cache_ttl(), Duration::from_secs(30));
    assert_eq!(client.timeout(), Duration::from_millis(2500));
    assert_eq!(client.max_retries(), 5);
    assert_eq!(client.stale_if_error(), Duration::from_secs(300));

    let built = Client::builder()
        .token(TOKEN)
        .base_url("https://cvsm.example/api/v1")
        .team(TEAM_SLUG)
        .environment("staging")
        .cache_ttl(Duration::from_secs(5))
        .stale_if_error(Duration::from_secs(60))
        .build()
        .unwrap();
    assert_eq!(
        (built.cache_ttl(), built.stale_if_error()),
        (Duration::from_secs(5), Duration::from_secs(60))
    );
    let printed = format!("{built:?}");
    assert!(printed.contains("stale_if_error: 60s"), "{printed}");
}

#[test]
fn invalid_explicit_options_are_configuration_errors() {
    for options in [
        ClientOptions {
            base_url: Some("cvsm.example/api/v1".into()),
            ..options("x")
        },
        ClientOptions {
            base_url: Some("http:///api/v1".into()),
            ..options("x")
        },
        ClientOptions {
            timeout: Some(Duration::ZERO),
            ..options("http://127.0.0.1:1")
        },
        ClientOptions {
            token: Some("cvsm_with space".into()),
            ..options("http://127.0.0.1:1")
        },
        ClientOptions {
            token: Some("cvsm_line\nbreak".into()),
            ..options("http://127.0.0.1:1")
        },
    ] {
        let err = Client::new(options).unwrap_err();
        assert!(matches!(err, Error::Configuration { .. }), "{err:?}");
        assert!(!err.to_string().contains("cvsm_"), "{err}");
    }
}

// An error answer cut off in its body, a retried network error, is the conformance cases
// dropped_connection_retried and dripped_error_answer_is_network_error.

// The transport seam and TLS.

#[test]
fn a_custom_http_client_carries_the_requests_and_the_sdk_keeps_its_rules() {
    let proxy = ConnectProxy::start();
    let stub = SharedStub::start(&[("A", "1")]);
    // The export and B's read by name pass; the listing after B's 404 is refused.
    stub.faults(json!([{
        "path": format!("/api/v1/teams/{TEAM_ID}/secrets"),
        "after": 2,
        "status": 403,
        "body": json!({ "error": "Dilarang" }).to_string(),
    }]));
    // Your own HTTP client, here on an agent with another user agent and a
    // proxy: the client still sends its own headers and reads every status.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(Some(ureq::Proxy::new(&proxy.url).unwrap()))
        .user_agent("someone-else/1.0")
        .build()
        .into();
    let client = Client::builder()
        .token(TOKEN)
        .base_url(&stub.base_url)
        .team(TEAM_ID)
        .http_client(UreqHttp(agent))
        .build()
        .unwrap();
    assert_eq!(client.get_all().unwrap().len(), 1);
    let err = client.get("B").unwrap_err();
    assert!(
        matches!(err, Error::PermissionDenied { status: 403, .. }),
        "{err:?}"
    );

    let authority = stub
        .base_url
        .trim_start_matches("http://")
        .trim_end_matches("/api/v1");
    assert_eq!(proxy.lines()[0], format!("CONNECT {authority} HTTP/1.1"));
    for request in stub.requests() {
        assert_eq!(request.header("user-agent"), Some("cvsm-rust/0.1.0"));
        assert_eq!(request.header("accept"), Some("application/json"));
    }
}

#[test]
fn ca_file_and_a_custom_http_client_do_not_mix() {
    let err = Client::builder()
        .token(TOKEN)
        .base_url("https://127.0.0.1:1/api/v1")
        .team(TEAM_ID)
        .ca_file(fixture("ca.pem"))
        .http_client(UreqHttp(ureq::Agent::new_with_defaults()))
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::Configuration { .. }), "{err:?}");
    assert!(err.to_string().contains("ca_file"), "{err}");
}

#[test]
fn an_unreadable_or_empty_ca_file_is_a_configuration_error_at_construction() {
    let missing = fixture("no-such-ca.pem");
    let not_pem = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    for path in [missing, not_pem, fixture("")] {
        let err = Client::new(ClientOptions {
            ca_file: Some(path.clone()),
            ..options("https://127.0.0.1:1/api/v1")
        })
        .unwrap_err();
        assert!(
            matches!(err, Error::Configuration { .. }),
            "{path:?}: {err:?}"
        );
        assert!(err.to_string().contains("CA file"), "{err}");
    }
}

#[test]
fn builder_debug_redacts_the_token() {
    let builder = Client::builder()
        .token(TOKEN)
        .team("acme")
        .http_client(UreqHttp(ureq::Agent::new_with_defaults()));
    let printed = format!("{builder:?} {builder:#?}");
    assert!(
        !printed.contains(TOKEN) && printed.contains("acme") && printed.contains("custom"),
        "{printed}"
    );
}
