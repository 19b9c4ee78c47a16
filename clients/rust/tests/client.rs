//! Wire behaviour of `cvsm::Client` against a local stub server: requests,
//! team resolution, cache, errors, retries and redaction. These tests never
//! read or write the process environment (see tests/env.rs for that).

mod support;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cvsm::{Client, ClientOptions, Error};
use support::{error, json, secret_id, Reply, Request, Stub, TEAM_ID, TOKEN};

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
    }
}

fn client(stub: &Stub) -> Client {
    Client::new(options(&stub.base_url)).expect("client")
}

fn no_errors(_: &Request) -> Option<Reply> {
    None
}

/// always answers every request with the reply `make` builds.
fn always(make: impl Fn() -> Reply + Send + Sync + 'static) -> Stub {
    Stub::start(move |_| make())
}

#[test]
fn get_lists_by_name_then_reads_by_id_with_auth_accept_and_user_agent() {
    let stub = Stub::secrets(&[("DATABASE_URL", "postgres://db"), ("API_KEY", "k-1")], no_errors);
    assert_eq!(client(&stub).get("API_KEY").unwrap(), "k-1");

    assert_eq!(
        stub.targets(),
        vec![
            format!("/api/v1/teams/{TEAM_ID}/secrets?environment=production&search=API_KEY"),
            format!("/api/v1/teams/{TEAM_ID}/secrets/{}", secret_id(1)),
        ]
    );
    for request in stub.requests() {
        assert_eq!(request.method, "GET");
        assert_eq!(request.header("authorization"), Some(&*format!("Bearer {TOKEN}")));
        assert_eq!(request.header("accept"), Some("application/json"));
        assert_eq!(request.header("user-agent"), Some("cvsm-rust/0.1.0"));
    }
    assert_eq!(cvsm::USER_AGENT, "cvsm-rust/0.1.0");
}

#[test]
fn get_takes_the_exact_case_sensitive_match_among_search_results() {
    let stub = Stub::secrets(
        &[("api_key", "lower"), ("API_KEY_OLD", "old"), ("API_KEY", "upper")],
        no_errors,
    );
    let client = client(&stub);
    assert_eq!(client.get("API_KEY").unwrap(), "upper");
    assert_eq!(client.get("api_key").unwrap(), "lower");
}

#[test]
fn get_of_absent_name_is_not_found_and_suggests_a_name_differing_only_in_case() {
    let stub = Stub::secrets(&[("DATABASE_URL", "postgres://hidden-value")], no_errors);
    let client = client(&stub);

    let err = client.get("database_url").unwrap_err();
    assert!(matches!(err, Error::NotFound { status: None, .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        r#"secret "database_url" not found in production; did you mean "DATABASE_URL"?"#
    );
    assert!(!format!("{err:?}").contains("hidden-value"));
    assert_eq!(stub.count(), 1, "no read by id without an exact match");

    let err = client.get("MISSING").unwrap_err();
    assert!(matches!(err, Error::NotFound { status: None, .. }), "{err:?}");
    assert!(!err.to_string().contains("did you mean"), "{err}");
}

#[test]
fn get_all_uses_the_json_export_of_the_configured_environment() {
    let stub = Stub::secrets(&[("B", "2"), ("A", "1")], no_errors);
    let client = Client::new(ClientOptions {
        environment: Some("staging".into()),
        ..options(&stub.base_url)
    })
    .unwrap();

    let values = client.get_all().unwrap();
    assert_eq!(values.into_iter().collect::<Vec<_>>(), vec![("A".into(), "1".into()), ("B".into(), "2".into())]);
    assert_eq!(
        stub.targets(),
        vec![format!("/api/v1/teams/{TEAM_ID}/secrets/export?format=json&environment=staging")]
    );
}

#[test]
fn team_slug_is_resolved_once_through_get_teams() {
    let stub = Stub::secrets(&[("A", "1"), ("B", "2")], no_errors);
    let client = Client::new(ClientOptions {
        team: Some("acme".into()),
        ..options(&stub.base_url)
    })
    .unwrap();
    assert_eq!(client.team(), "acme");

    assert_eq!(client.get("A").unwrap(), "1");
    assert_eq!(client.get("B").unwrap(), "2");
    client.get_all().unwrap();

    let targets = stub.targets();
    assert_eq!(targets[0], "/api/v1/teams");
    assert_eq!(targets.iter().filter(|t| *t == "/api/v1/teams").count(), 1, "{targets:?}");
    assert!(targets[1..].iter().all(|t| t.starts_with(&format!("/api/v1/teams/{TEAM_ID}/"))));
}

#[test]
fn team_slug_matching_no_team_is_a_configuration_error() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = Client::new(ClientOptions {
        team: Some("no-such-team".into()),
        ..options(&stub.base_url)
    })
    .unwrap();
    let err = client.get("A").unwrap_err();
    assert!(matches!(err, Error::Configuration { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-team"), "{err}");
    assert_eq!(err.status(), None);
}

#[test]
fn repeated_get_is_served_from_the_cache() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = client(&stub);
    assert_eq!(client.get("A").unwrap(), "1");
    assert_eq!(client.get("A").unwrap(), "1");
    assert_eq!(stub.count(), 2, "one list and one read, then cache hits");
}

#[test]
fn cached_values_expire_after_the_ttl() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = Client::new(ClientOptions {
        cache_ttl: Some(Duration::from_millis(150)),
        ..options(&stub.base_url)
    })
    .unwrap();
    client.get("A").unwrap();
    client.get_all().unwrap();
    assert_eq!(stub.count(), 3);
    std::thread::sleep(Duration::from_millis(200));
    client.get("A").unwrap();
    client.get_all().unwrap();
    assert_eq!(stub.count(), 6);
}

#[test]
fn zero_cache_ttl_disables_the_cache() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = Client::new(ClientOptions {
        cache_ttl: Some(Duration::ZERO),
        ..options(&stub.base_url)
    })
    .unwrap();
    client.get_all().unwrap();
    client.get_all().unwrap();
    client.get("A").unwrap();
    client.get("A").unwrap();
    assert_eq!(stub.count(), 6);
}

#[test]
fn clear_cache_makes_the_next_read_ask_the_server() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = client(&stub);
    client.get("A").unwrap();
    client.get_all().unwrap();
    assert_eq!(stub.count(), 3);
    client.clear_cache();
    client.get("A").unwrap();
    client.get_all().unwrap();
    assert_eq!(stub.count(), 6);
}

#[test]
fn get_all_is_cached_and_fills_the_per_name_cache() {
    let stub = Stub::secrets(&[("A", "1"), ("B", "2")], no_errors);
    let client = client(&stub);
    client.get_all().unwrap();
    assert_eq!(client.get("A").unwrap(), "1");
    assert_eq!(client.get("B").unwrap(), "2");
    assert_eq!(client.get_all().unwrap().len(), 2);
    assert_eq!(stub.count(), 1);
}

#[test]
fn errors_are_never_cached() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let stub = Stub::secrets(&[("A", "1")], move |_| {
        (seen.fetch_add(1, Ordering::SeqCst) == 0).then(|| error(500, "Kesalahan server"))
    });
    let client = client(&stub);
    let err = client.get("A").unwrap_err();
    assert!(matches!(err, Error::Api { status: 500, .. }), "{err:?}");
    assert_eq!(client.get("A").unwrap(), "1");
    assert_eq!(stub.count(), 3);
}

#[test]
fn authentication_error_empties_the_cache() {
    let reject = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&reject);
    let stub = Stub::secrets(&[("A", "1"), ("B", "2")], move |_| {
        flag.load(Ordering::SeqCst).then(|| error(401, "Token tidak valid"))
    });
    let client = client(&stub);
    client.get("A").unwrap();
    assert_eq!(stub.count(), 2);

    reject.store(true, Ordering::SeqCst);
    let err = client.get("B").unwrap_err();
    assert!(matches!(err, Error::Authentication { status: 401, .. }), "{err:?}");
    assert_eq!(stub.count(), 3);

    reject.store(false, Ordering::SeqCst);
    client.get("A").unwrap();
    assert_eq!(stub.count(), 5, "A must be fetched again after the 401");
}

#[test]
fn each_error_status_maps_to_its_variant_without_retrying() {
    type IsExpected = fn(&Error) -> bool;
    let cases: [(u16, IsExpected); 7] = [
        (400, |e| matches!(e, Error::Api { status: 400, .. })),
        (401, |e| matches!(e, Error::Authentication { status: 401, .. })),
        (403, |e| matches!(e, Error::PermissionDenied { status: 403, .. })),
        (404, |e| matches!(e, Error::NotFound { status: Some(404), .. })),
        (409, |e| matches!(e, Error::Api { status: 409, .. })),
        (429, |e| matches!(e, Error::RateLimited { status: 429, .. })),
        (500, |e| matches!(e, Error::Api { status: 500, .. })),
    ];
    for (status, expected) in cases {
        let stub = always(move || error(status, "Pesan dari server"));
        let err = client(&stub).get_all().unwrap_err();
        assert!(expected(&err), "status {status} gave {err:?}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.to_string(), format!("HTTP {status}: Pesan dari server"));
        assert_eq!(stub.count(), 1, "status {status} must not be retried");
    }
}

#[test]
fn error_without_a_json_body_still_carries_the_status() {
    let stub = always(|| Reply::Json(418, "<html>teapot</html>".into()));
    let err = client(&stub).get_all().unwrap_err();
    assert!(matches!(err, Error::Api { status: 418, .. }), "{err:?}");
    assert_eq!(err.to_string(), "HTTP 418: I'm a teapot");
}

#[test]
fn long_server_messages_are_cut() {
    let long = "x".repeat(1000);
    let stub = always(move || error(500, &long));
    let message = client(&stub).get_all().unwrap_err().to_string();
    assert_eq!(message, format!("HTTP 500: {}...", "x".repeat(300)));
}

#[test]
fn rate_limit_is_raised_at_once_with_retry_after() {
    let stub = always(|| {
        Reply::Headers(429, vec![("Retry-After", "7".into())], r#"{"error":"Terlalu banyak"}"#.into())
    });
    let err = client(&stub).get("A").unwrap_err();
    assert!(
        matches!(err, Error::RateLimited { status: 429, retry_after: Some(7), .. }),
        "{err:?}"
    );
    assert_eq!(err.retry_after(), Some(7));
    assert_eq!(stub.count(), 1);
}

#[test]
fn gateway_errors_are_retried_until_success() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let stub = Stub::secrets(&[("A", "1")], move |_| match seen.fetch_add(1, Ordering::SeqCst) {
        0 => Some(error(503, "Tidak tersedia")),
        1 => Some(error(502, "Bad gateway")),
        _ => None,
    });
    assert_eq!(client(&stub).get_all().unwrap().len(), 1);
    assert_eq!(stub.count(), 3);
}

#[test]
fn persistent_gateway_error_gives_api_error_after_max_retries() {
    for status in [502, 503, 504] {
        let stub = always(move || error(status, "Tidak tersedia"));
        let started = Instant::now();
        let err = client(&stub).get_all().unwrap_err();
        assert!(matches!(err, Error::Api { status: s, .. } if s == status), "{err:?}");
        assert_eq!(stub.count(), 3, "one attempt and two retries for {status}");
        assert!(started.elapsed() < Duration::from_secs(2), "backoff is at most 0.1 s + 0.2 s");
    }

    let stub = always(|| error(503, "Tidak tersedia"));
    let client = Client::new(ClientOptions {
        max_retries: Some(0),
        ..options(&stub.base_url)
    })
    .unwrap();
    assert!(client.get_all().is_err());
    assert_eq!(stub.count(), 1);
}

#[test]
fn dropped_connections_are_retried_then_reported_as_network_errors() {
    let stub = always(|| Reply::Drop);
    let err = client(&stub).get_all().unwrap_err();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert_eq!(err.status(), None);
    assert_eq!(stub.count(), 3);

    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let stub = Stub::secrets(&[("A", "1")], move |_| {
        (seen.fetch_add(1, Ordering::SeqCst) == 0).then_some(Reply::Drop)
    });
    assert_eq!(client(&stub).get("A").unwrap(), "1");
    assert_eq!(stub.count(), 3, "dropped list, list again, read");
}

#[test]
fn refused_connection_is_a_network_error() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = Client::new(ClientOptions {
        max_retries: Some(1),
        ..options(&format!("http://127.0.0.1:{port}/api/v1"))
    })
    .unwrap();
    let err = client.get("A").unwrap_err();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn slow_answer_times_out_as_a_network_error() {
    let stub = always(|| Reply::Slow(Duration::from_secs(3), Box::new(json(200, serde_json::json!({})))));
    let client = Client::new(ClientOptions {
        timeout: Some(Duration::from_millis(200)),
        max_retries: Some(1),
        ..options(&stub.base_url)
    })
    .unwrap();
    let started = Instant::now();
    let err = client.get_all().unwrap_err();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(stub.count(), 2, "a timeout is retried");
}

#[test]
fn unreadable_success_body_is_a_network_error_that_quotes_no_value() {
    let stub = always(|| Reply::Json(200, "not json".into()));
    let err = client(&stub).get_all().unwrap_err();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert_eq!(stub.count(), 3, "an unreadable answer is retried");

    let stub = always(|| json(200, serde_json::json!({ "A": ["leaked-value"] })));
    let err = client(&stub).get_all().unwrap_err();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("leaked-value"), "{err:?}");
}

#[test]
fn token_and_values_never_appear_in_debug_output_or_errors() {
    let stub = Stub::secrets(&[("A", "value-that-must-not-print")], |req| {
        req.path().ends_with("/export").then(|| error(401, &format!("token {TOKEN} ditolak")))
    });
    let options = options(&stub.base_url);
    let client = Client::new(options.clone()).unwrap();
    client.get("A").unwrap();

    let printed = format!("{client:?} {client:#?} {options:?} {options:#?}");
    assert!(!printed.contains(TOKEN), "{printed}");
    assert!(!printed.contains("TOPSECRET"), "{printed}");
    assert!(!printed.contains("value-that-must-not-print"), "{printed}");
    assert!(printed.contains(&stub.base_url) && printed.contains("[redacted]"), "{printed}");

    let err = client.get_all().unwrap_err();
    let printed = format!("{err} {err:?}");
    assert!(matches!(err, Error::Authentication { .. }), "{printed}");
    assert!(!printed.contains(TOKEN), "{printed}");
    assert!(printed.contains("ditolak"), "{printed}");
}

#[test]
fn client_is_send_and_sync_and_shares_its_cache_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Client>();
    assert_send_sync::<Error>();

    let stub = Stub::secrets(&[("A", "1")], no_errors);
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
    assert_eq!(stub.count(), 2);
}

#[test]
fn config_accessors_report_the_effective_configuration() {
    let client = Client::new(ClientOptions {
        base_url: Some("https://cvsm.example/api/v1///".into()),
        timeout: Some(Duration::from_millis(2500)),
        max_retries: Some(5),
        ..options("unused")
    })
    .unwrap();
    assert_eq!(client.base_url(), "https://cvsm.example/api/v1");
    assert_eq!(client.team(), TEAM_ID);
    assert_eq!(client.environment(), "production");
    assert_eq!(client.cache_ttl(), Duration::from_secs(30));
    assert_eq!(client.timeout(), Duration::from_millis(2500));
    assert_eq!(client.max_retries(), 5);
}

#[test]
fn invalid_explicit_options_are_configuration_errors() {
    for options in [
        ClientOptions { base_url: Some("cvsm.example/api/v1".into()), ..options("x") },
        ClientOptions { base_url: Some("http:///api/v1".into()), ..options("x") },
        ClientOptions { timeout: Some(Duration::ZERO), ..options("http://127.0.0.1:1") },
        ClientOptions { token: Some("cvsm_with space".into()), ..options("http://127.0.0.1:1") },
        ClientOptions { token: Some("cvsm_line\nbreak".into()), ..options("http://127.0.0.1:1") },
    ] {
        let err = Client::new(options).unwrap_err();
        assert!(matches!(err, Error::Configuration { .. }), "{err:?}");
        assert!(!err.to_string().contains("cvsm_"), "{err}");
    }
}
