//! Wire behaviour of `cvsm::Client` against a local stub server: requests,
//! the team in the path, cache, errors, retries and redaction. These tests never
//! read or write the process environment (see tests/env.rs for that).

mod support;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cvsm::{Client, ClientOptions, Error};
use support::{
    error, fixture, json, tls_stub, ConnectProxy, Reply, Request, Stub, UreqHttp, TEAM_ID,
    TEAM_SLUG, TOKEN,
};

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
fn get_is_one_by_name_request_with_auth_accept_and_user_agent() {
    let stub = Stub::secrets(
        &[("DATABASE_URL", "postgres://db"), ("API_KEY", "k-1")],
        no_errors,
    );
    assert_eq!(client(&stub).get("API_KEY").unwrap(), "k-1");

    assert_eq!(
        stub.targets(),
        vec![format!(
            "/api/v1/teams/{TEAM_ID}/secrets/by-name/API_KEY?environment=production"
        )]
    );
    for request in stub.requests() {
        assert_eq!(request.method, "GET");
        assert_eq!(
            request.header("authorization"),
            Some(&*format!("Bearer {TOKEN}"))
        );
        assert_eq!(request.header("accept"), Some("application/json"));
        assert_eq!(request.header("user-agent"), Some("cvsm-rust/0.1.0"));
    }
    assert_eq!(cvsm::USER_AGENT, "cvsm-rust/0.1.0");
}

#[test]
fn get_is_case_sensitive() {
    let stub = Stub::secrets(
        &[
            ("api_key", "lower"),
            ("API_KEY_OLD", "old"),
            ("API_KEY", "upper"),
        ],
        no_errors,
    );
    let client = client(&stub);
    assert_eq!(client.get("API_KEY").unwrap(), "upper");
    assert_eq!(client.get("api_key").unwrap(), "lower");
    assert_eq!(stub.count(), 2, "one by-name request each, no listing");
}

#[test]
fn get_of_absent_name_asks_the_listing_and_suggests_a_name_differing_only_in_case() {
    let stub = Stub::secrets(&[("DATABASE_URL", "postgres://hidden-value")], no_errors);
    let client = client(&stub);

    let err = client.get("database_url").unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotFound {
                status: Some(404),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        r#"secret "database_url" not found in production; did you mean "DATABASE_URL"?"#
    );
    assert_eq!(err.suggestion(), Some("DATABASE_URL"));
    assert!(!format!("{err:?}").contains("hidden-value"));
    assert_eq!(
        stub.targets(),
        vec![
            format!("/api/v1/teams/{TEAM_ID}/secrets/by-name/database_url?environment=production"),
            format!("/api/v1/teams/{TEAM_ID}/secrets?environment=production&search=database_url"),
        ],
        "the listing only after the by-name 404"
    );

    let err = client.get("MISSING").unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotFound {
                status: Some(404),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains("did you mean"), "{err}");
    assert_eq!(err.suggestion(), None);
    assert_eq!(stub.count(), 4);
}

#[test]
fn a_listing_entry_with_the_very_name_is_no_suggestion() {
    // The by-name read says 404 (a secret deleted in between, say) while
    // the listing still shows the name: not found, and nothing to suggest.
    let stub = Stub::secrets(&[("GONE", "x"), ("gone", "y")], |req| {
        req.path()
            .contains("/by-name/")
            .then(|| error(404, "Secret tidak ditemukan"))
    });
    let err = client(&stub).get("GONE").unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotFound {
                status: Some(404),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.suggestion(), Some("gone"));
    let err = client(&stub).get("OTHER").unwrap_err();
    assert_eq!(err.suggestion(), None);
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
    assert_eq!(
        values.into_iter().collect::<Vec<_>>(),
        vec![("A".into(), "1".into()), ("B".into(), "2".into())]
    );
    assert_eq!(
        stub.targets(),
        vec![format!(
            "/api/v1/teams/{TEAM_ID}/secrets/export?format=json&environment=staging"
        )]
    );
}

#[test]
fn the_team_goes_into_the_path_as_it_is_percent_encoded() {
    let stub = Stub::secrets(&[("A", "1"), ("B", "2")], no_errors);
    let client = Client::new(ClientOptions {
        team: Some(TEAM_SLUG.into()),
        ..options(&stub.base_url)
    })
    .unwrap();
    assert_eq!(client.team(), TEAM_SLUG);
    assert_eq!(client.get("A").unwrap(), "1");
    client.get_all().unwrap();
    assert_eq!(
        stub.targets(),
        vec![
            "/api/v1/teams/acme/secrets/by-name/A?environment=production".to_string(),
            "/api/v1/teams/acme/secrets/export?format=json&environment=production".to_string(),
        ],
        "no GET /teams: the server takes a slug"
    );

    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = Client::new(ClientOptions {
        team: Some("a b/c?d".into()),
        ..options(&stub.base_url)
    })
    .unwrap();
    assert!(client.get_all().is_err());
    assert_eq!(
        stub.targets(),
        vec!["/api/v1/teams/a%20b%2Fc%3Fd/secrets/export?format=json&environment=production"]
    );
}

#[test]
fn team_matching_none_of_yours_is_a_configuration_error_after_the_listing() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = Client::new(ClientOptions {
        team: Some("no-such-team".into()),
        ..options(&stub.base_url)
    })
    .unwrap();
    let err = client.get("A").unwrap_err();
    assert!(
        matches!(
            err,
            Error::Configuration {
                status: Some(404),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("CVSM_TEAM"), "{err}");
    assert_eq!(
        stub.targets(),
        vec![
            "/api/v1/teams/no-such-team/secrets/by-name/A?environment=production".to_string(),
            "/api/v1/teams/no-such-team/secrets?environment=production&search=A".to_string(),
        ]
    );
    let err = client.get_all().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Configuration {
                status: Some(404),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(stub.count(), 3, "one export, no listing");
}

#[test]
fn repeated_get_is_served_from_the_cache() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = client(&stub);
    assert_eq!(client.get("A").unwrap(), "1");
    assert_eq!(client.get("A").unwrap(), "1");
    assert_eq!(stub.count(), 1, "one by-name read, then cache hits");
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
    client.get("A").unwrap();
    assert_eq!(stub.count(), 2);
    std::thread::sleep(Duration::from_millis(200));
    client.get("A").unwrap();
    client.get_all().unwrap();
    assert_eq!(stub.count(), 4);
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
    assert_eq!(stub.count(), 4);
}

#[test]
fn clear_cache_makes_the_next_read_ask_the_server() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = client(&stub);
    client.get("A").unwrap();
    client.get_all().unwrap();
    assert_eq!(stub.count(), 2);
    client.clear_cache();
    client.get("A").unwrap();
    client.get_all().unwrap();
    assert_eq!(stub.count(), 4);
}

#[test]
fn a_read_in_flight_across_clear_cache_is_not_cached() {
    for get_all in [false, true] {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&in_flight);
        let stub = Stub::secrets(&[("A", "1")], move |_| {
            // The first answer comes late: clear_cache runs meanwhile.
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(400));
            }
            None
        });
        let client = Arc::new(client(&stub));
        let reader = {
            let client = Arc::clone(&client);
            std::thread::spawn(move || match get_all {
                true => client.get_all().map(|values| values["A"].clone()),
                false => client.get("A"),
            })
        };
        let waited = Instant::now();
        while in_flight.load(Ordering::SeqCst) == 0 {
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
    assert_eq!(stub.count(), 2);
}

#[test]
fn authentication_and_permission_errors_empty_the_cache() {
    for status in [401, 403] {
        let reject = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&reject);
        let stub = Stub::secrets(&[("A", "1"), ("B", "2")], move |_| {
            flag.load(Ordering::SeqCst)
                .then(|| error(status, "Token tidak valid"))
        });
        let client = client(&stub);
        client.get("A").unwrap();
        client.get_all().unwrap();
        assert_eq!(stub.count(), 2);

        reject.store(true, Ordering::SeqCst);
        let err = client.get("C").unwrap_err();
        assert_eq!(err.status(), Some(status), "{err:?}");
        assert!(
            matches!(
                err,
                Error::Authentication { .. } | Error::PermissionDenied { .. }
            ),
            "{err:?}"
        );
        assert_eq!(stub.count(), 3);

        reject.store(false, Ordering::SeqCst);
        client.get("A").unwrap();
        client.get("B").unwrap();
        assert_eq!(
            stub.count(),
            5,
            "A and B must be fetched again after the {status}"
        );
    }
}

#[test]
fn each_error_status_maps_to_its_variant_without_retrying() {
    type IsExpected = fn(&Error) -> bool;
    let cases: [(u16, IsExpected); 7] = [
        (400, |e| {
            matches!(
                e,
                Error::Configuration {
                    status: Some(400),
                    ..
                }
            )
        }), // R9
        (401, |e| {
            matches!(e, Error::Authentication { status: 401, .. })
        }),
        (403, |e| {
            matches!(e, Error::PermissionDenied { status: 403, .. })
        }),
        (404, |e| {
            matches!(
                e,
                Error::Configuration {
                    status: Some(404),
                    ..
                }
            )
        }), // R9
        (409, |e| matches!(e, Error::Api { status: 409, .. })),
        (429, |e| matches!(e, Error::RateLimited { status: 429, .. })),
        (500, |e| matches!(e, Error::Api { status: 500, .. })),
    ];
    for (status, expected) in cases {
        let stub = always(move || error(status, "Pesan dari server"));
        let err = client(&stub).get_all().unwrap_err();
        assert!(expected(&err), "status {status} gave {err:?}");
        assert_eq!(err.status(), Some(status));
        assert!(
            err.to_string()
                .starts_with(&format!("HTTP {status}: Pesan dari server")),
            "{err}"
        );
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
        Reply::Headers(
            429,
            vec![("Retry-After", "7".into())],
            r#"{"error":"Terlalu banyak"}"#.into(),
        )
    });
    let err = client(&stub).get("A").unwrap_err();
    assert!(
        matches!(
            err,
            Error::RateLimited {
                status: 429,
                retry_after: Some(7),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.retry_after(), Some(7));
    assert_eq!(stub.count(), 1);
}

#[test]
fn gateway_errors_are_retried_until_success() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let stub = Stub::secrets(&[("A", "1")], move |_| {
        match seen.fetch_add(1, Ordering::SeqCst) {
            0 => Some(error(503, "Tidak tersedia")),
            1 => Some(error(502, "Bad gateway")),
            _ => None,
        }
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
        assert!(
            matches!(err, Error::Api { status: s, .. } if s == status),
            "{err:?}"
        );
        assert_eq!(stub.count(), 3, "one attempt and two retries for {status}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "backoff is at most 0.1 s + 0.2 s"
        );
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
    assert_eq!(stub.count(), 2, "dropped by-name read, then again");
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
    let stub = always(|| {
        Reply::Slow(
            Duration::from_secs(3),
            Box::new(json(200, serde_json::json!({}))),
        )
    });
    let client = Client::new(ClientOptions {
        timeout: Some(Duration::from_millis(200)),
        max_retries: Some(1),
        ..options(&stub.base_url)
    })
    .unwrap();
    let started = Instant::now();
    let err = client.get_all().unwrap_err();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
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
    assert!(
        !format!("{err} {err:?}").contains("leaked-value"),
        "{err:?}"
    );
}

#[test]
fn token_and_values_never_appear_in_debug_output_or_errors() {
    let stub = Stub::secrets(&[("A", "value-that-must-not-print")], |req| {
        req.path()
            .ends_with("/export")
            .then(|| error(401, &format!("token {TOKEN} ditolak")))
    });
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

// Decided behaviour (conformance/PROTOCOL.md, rules R1-R13).

#[test]
fn r1_timeout_covers_the_whole_body() {
    // The head arrives at once, then one byte every 100 ms: 2 s in all.
    let body = serde_json::json!({ "A": "0123456789abcdef" }).to_string();
    assert!(body.len() >= 20);
    let stub = always(move || Reply::Drip(Duration::from_millis(100), body.clone()));
    let client = Client::new(ClientOptions {
        timeout: Some(Duration::from_millis(400)),
        max_retries: Some(1),
        ..options(&stub.base_url)
    })
    .unwrap();
    let started = Instant::now();
    let err = client.get_all().unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert_eq!(err.status(), None);
    assert!(
        elapsed < Duration::from_millis(1500),
        "two attempts of 0.4 s, got {elapsed:?}"
    );
    assert_eq!(stub.count(), 2, "a timeout is retried");
}

#[test]
fn r1_an_error_answer_whose_body_drips_past_the_timeout_is_a_retried_network_error() {
    // A 404 read so would go on to the listing, a 500 or a 429 be final: the
    // answer was never given, so each is a network error, retried.
    for status in [500, 429, 404, 503] {
        let body = serde_json::json!({ "error": "pesan server yang menetes" }).to_string();
        let stub =
            always(move || Reply::DripStatus(status, Duration::from_millis(100), body.clone()));
        let client = Client::new(ClientOptions {
            timeout: Some(Duration::from_millis(300)),
            max_retries: Some(1),
            ..options(&stub.base_url)
        })
        .unwrap();
        let started = Instant::now();
        let err = client.get("A").unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(err, Error::Network { .. }), "{status}: {err:?}");
        assert!(err.to_string().contains("timed out"), "{status}: {err}");
        assert_eq!(err.status(), None, "{status}");
        assert_eq!(err.request_id(), Some("req-2"), "{status}");
        assert!(
            elapsed < Duration::from_millis(1500),
            "{status}: {elapsed:?}"
        );
        let targets = stub.targets();
        assert_eq!(targets.len(), 2, "{status}: {targets:?}");
        assert!(
            targets.iter().all(|t| t.contains("/by-name/A")),
            "{status}: no listing, {targets:?}"
        );
    }
}

#[test]
fn an_error_answer_cut_off_in_its_body_is_a_retried_network_error() {
    let body = serde_json::json!({ "error": "rahasia tidak ditemukan" }).to_string();
    let stub = always(move || Reply::Cut(404, body.clone()));
    let err = client(&stub).get("A").unwrap_err();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert_eq!(err.status(), None);
    assert_eq!(err.request_id(), Some("req-3"));
    let targets = stub.targets();
    assert_eq!(targets.len(), 3, "{targets:?}");
    assert!(
        targets.iter().all(|t| t.contains("/by-name/A")),
        "{targets:?}"
    );
}

#[test]
fn r2_an_export_over_10_mib_is_read_in_one_request() {
    let big = "x".repeat(11 * 1024 * 1024);
    let body = serde_json::json!({ "BIG": big, "SMALL": "1" }).to_string();
    let stub = always(move || Reply::Json(200, body.clone()));
    // R2 is about size, not speed: a loaded machine may take seconds.
    let client = Client::new(ClientOptions {
        timeout: Some(Duration::from_secs(120)),
        ..options(&stub.base_url)
    })
    .unwrap();
    let values = client.get_all().unwrap();
    assert_eq!(values["BIG"].len(), 11 * 1024 * 1024);
    assert_eq!(client.get("SMALL").unwrap(), "1", "from the cache");
    assert_eq!(stub.count(), 1);
}

/// Target says which of the three GETs a request is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    ByName,
    List,
    Export,
}

fn target_of(req: &Request) -> Target {
    let path = req.path();
    if path.contains("/secrets/by-name/") {
        Target::ByName
    } else if path.ends_with("/secrets/export") {
        Target::Export
    } else {
        assert!(path.ends_with("/secrets"), "{path}");
        Target::List
    }
}

#[test]
fn r3_answers_of_the_wrong_shape_are_retried_then_network_errors() {
    let cases: [(Target, &str); 15] = [
        (Target::Export, "null"),
        (Target::Export, "[]"),
        (Target::Export, r#"{"A": null}"#),
        (Target::Export, r#"{"A": ["v"]}"#),
        (Target::Export, r#"{"A": 1}"#),
        (Target::Export, r#"{"A": "1"} trailing"#),
        (Target::List, r#"{"total": 0}"#),
        (Target::List, r#"{"secrets": null}"#),
        (Target::ByName, r#"{"secret": {}}"#),
        (Target::ByName, r#"{"secret": {}, "value": 1}"#),
        (Target::ByName, r#"{"secret": {}, "value": null}"#),
        (Target::ByName, r#"{"value": "1"}"#),
        (Target::ByName, r#"{"secret": [], "value": "1"}"#),
        (Target::ByName, r#"{"secret": "A", "value": "1"}"#),
        (Target::ByName, "<html>maintenance</html>"),
    ];
    for (target, body) in cases {
        let stub = Stub::secrets(&[("A", "1")], move |req| {
            (target_of(req) == target).then(|| Reply::Json(200, body.into()))
        });
        let client = client(&stub);
        let result = match target {
            Target::Export => client.get_all().map(|_| ()),
            Target::ByName => client.get("A").map(|_| ()),
            // The listing is asked only after a by-name 404.
            Target::List => client.get("MISSING").map(|_| ()),
        };
        let err = result.expect_err(body);
        assert!(
            matches!(err, Error::Network { .. }),
            "{target:?} {body}: {err:?}"
        );
        assert_eq!(err.status(), None);
        assert!(
            err.request_id().is_some(),
            "an unreadable answer is still an answer"
        );
        let hits = stub
            .requests()
            .iter()
            .filter(|r| target_of(r) == target)
            .count();
        assert_eq!(hits, 3, "{target:?} {body}: one attempt and two retries");
    }
}

#[test]
fn r3_an_unreadable_answer_then_a_good_one_succeeds() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let stub = Stub::secrets(&[("A", "1")], move |_| {
        (seen.fetch_add(1, Ordering::SeqCst) == 0).then(|| Reply::Json(200, "[]".into()))
    });
    assert_eq!(client(&stub).get_all().unwrap().len(), 1);
    assert_eq!(stub.count(), 2);
}

#[test]
fn r4_retry_after_is_seconds_an_http_date_or_null() {
    let in_30s = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
    let cases: [(Option<String>, Option<u64>); 6] = [
        (Some("0".into()), Some(0)),
        (Some("12".into()), Some(12)),
        (Some("Thu, 01 Jan 1970 00:00:00 GMT".into()), Some(0)),
        (Some(in_30s), None), // checked below: 29 or 30
        (Some("soon".into()), None),
        (None, None),
    ];
    for (header, expected) in cases {
        let sent = header.clone();
        let stub = always(move || {
            let headers = sent.iter().map(|v| ("Retry-After", v.clone())).collect();
            Reply::Headers(429, headers, r#"{"error":"Terlalu banyak"}"#.into())
        });
        let err = client(&stub).get_all().unwrap_err();
        assert!(
            matches!(err, Error::RateLimited { status: 429, .. }),
            "{err:?}"
        );
        assert_eq!(stub.count(), 1, "a 429 is never retried");
        match header.as_deref() {
            Some(date) if date.ends_with("GMT") && expected.is_none() => {
                let seconds = err.retry_after().expect("a future date gives seconds");
                assert!((29..=30).contains(&seconds), "{date}: {seconds}");
            }
            _ => assert_eq!(err.retry_after(), expected, "{header:?}"),
        }
    }
}

#[test]
fn r5_a_redirect_is_an_api_error_and_never_followed() {
    let elsewhere = Stub::secrets(&[("A", "1")], no_errors);
    let location = format!(
        "{}/teams/{TEAM_ID}/secrets/export?format=json&environment=production",
        elsewhere.base_url
    );
    for status in [301, 302, 303, 307, 308] {
        let location = location.clone();
        let stub = always(move || {
            Reply::Headers(status, vec![("Location", location.clone())], String::new())
        });
        let err = client(&stub).get_all().unwrap_err();
        assert!(
            matches!(err, Error::Api { status: s, .. } if s == status),
            "{err:?}"
        );
        assert_eq!(err.status(), Some(status));
        assert_eq!(stub.count(), 1, "a redirect is not retried");
    }
    assert_eq!(elsewhere.count(), 0, "the token never goes to a Location");
}

#[test]
fn r6_token_whitespace_is_trimmed_and_other_characters_rejected() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = Client::new(ClientOptions {
        token: Some(format!(" \t{TOKEN}\r\n")),
        ..options(&stub.base_url)
    })
    .unwrap();
    client.get_all().unwrap();
    assert_eq!(
        stub.requests()[0].header("authorization"),
        Some(&*format!("Bearer {TOKEN}"))
    );

    for bad in [
        format!("{TOKEN}\u{1}"),
        format!("{TOKEN}\u{7f}"),
        format!("{TOKEN}é"),
        format!("cvsm_a b{TOKEN}"),
    ] {
        let err = Client::new(ClientOptions {
            token: Some(bad),
            ..options(&stub.base_url)
        })
        .unwrap_err();
        assert!(matches!(err, Error::Configuration { .. }), "{err:?}");
        assert!(!format!("{err} {err:?}").contains(TOKEN), "{err:?}");
    }
}

#[test]
fn r9_wrong_base_url_team_or_environment_is_a_configuration_error_with_status() {
    // (target answering `status`, then op, expected status of the
    // configuration error and the requests made)
    let cases: [(Target, u16, &str, &[Target]); 6] = [
        (Target::ByName, 400, "get", &[Target::ByName]),
        (Target::List, 404, "get", &[Target::ByName, Target::List]),
        (Target::List, 400, "get", &[Target::ByName, Target::List]),
        (Target::Export, 404, "get_all", &[Target::Export]),
        (Target::Export, 400, "get_all", &[Target::Export]),
        // Every GET answering 404: a base URL without /api/v1, or a wrong team.
        (Target::ByName, 0, "get", &[Target::ByName, Target::List]),
    ];
    for (target, status, op, requests) in cases {
        let stub = Stub::secrets(&[("A", "1")], move |req| {
            if status == 0 {
                return Some(error(404, "Data tidak ditemukan"));
            }
            (target_of(req) == target).then(|| error(status, "Data tidak ditemukan"))
        });
        let client = client(&stub);
        let err = if op == "get" {
            // An absent name, so that a by-name 404 leads to the listing.
            client.get("ABSENT").map(|_| ())
        } else {
            client.get_all().map(|_| ())
        }
        .unwrap_err();
        let status = if status == 0 { 404 } else { status };
        assert!(
            matches!(err, Error::Configuration { status: Some(s), .. } if s == status),
            "{target:?} {status}: {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("HTTP {status}: Data tidak ditemukan")),
            "{err}"
        );
        assert!(
            err.to_string().contains("CVSM_"),
            "names what to check: {err}"
        );
        assert!(err.request_id().is_some());
        let made: Vec<Target> = stub.requests().iter().map(target_of).collect();
        assert_eq!(made, requests, "{target:?} {status}: never retried");
    }
}

#[test]
fn r10_invalid_names_are_not_found_without_a_request() {
    let stub = Stub::secrets(&[("A", "1")], no_errors);
    let client = client(&stub);
    for name in ["", "1A", "A-B", "A B", "A/../B", "É", &"A".repeat(256)] {
        let err = client.get(name).unwrap_err();
        assert!(
            matches!(err, Error::NotFound { status: None, .. }),
            "{name:?}: {err:?}"
        );
        assert!(err.to_string().contains("not a valid secret name"), "{err}");
        assert_eq!((err.request_id(), err.suggestion()), (None, None));
    }
    assert_eq!(stub.count(), 0);
    assert_eq!(
        client.get(&"A".repeat(255)).unwrap_err().status(),
        Some(404),
        "255 is valid: asked"
    );
    assert_eq!(stub.count(), 2, "by-name, then the listing");
}

#[test]
fn r11_errors_carry_request_id_and_suggestion_as_fields() {
    let stub = Stub::secrets(&[("API_KEY", "k")], |req| {
        req.path().ends_with("/export").then(|| {
            Reply::Headers(
                403,
                vec![("X-Request-Id", "abc-123".into())],
                r#"{"error":"IP ditolak"}"#.into(),
            )
        })
    });
    let client = client(&stub);

    let err = client.get("api_key").unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotFound {
                status: Some(404),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.suggestion(), Some("API_KEY"));
    assert_eq!(
        err.request_id(),
        Some("req-1"),
        "the by-name answer's request id, not the listing's (req-2)"
    );

    let err = client.get("OTHER").unwrap_err();
    assert_eq!((err.suggestion(), err.request_id()), (None, Some("req-3")));

    let err = client.get_all().unwrap_err();
    assert!(
        matches!(err, Error::PermissionDenied { status: 403, .. }),
        "{err:?}"
    );
    assert_eq!(err.request_id(), Some("abc-123"));
    assert_eq!(err.suggestion(), None);
    assert_eq!(err.message(), "HTTP 403: IP ditolak");

    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let err = Client::new(ClientOptions {
        max_retries: Some(0),
        ..options(&format!("http://127.0.0.1:{port}/api/v1"))
    })
    .unwrap()
    .get_all()
    .unwrap_err();
    assert_eq!(
        (err.status(), err.request_id()),
        (None, None),
        "no answer, no request id"
    );
}

// The transport seam and TLS.

#[test]
fn a_custom_http_client_carries_the_requests_and_the_sdk_keeps_its_rules() {
    let proxy = ConnectProxy::start();
    let stub = Stub::secrets(&[("A", "1")], |req| {
        req.path()
            .ends_with("/secrets")
            .then(|| error(403, "Dilarang"))
    });
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
fn a_private_ca_is_trusted_through_ca_file_and_only_then() {
    let stub = tls_stub(fake);
    let with_ca = |ca: Option<&str>| {
        Client::new(ClientOptions {
            ca_file: ca.map(fixture),
            max_retries: Some(0),
            ..options(&stub.base_url)
        })
        .unwrap()
    };
    let client = with_ca(Some("ca.pem"));
    assert_eq!(client.ca_file(), Some(&*fixture("ca.pem")));
    assert_eq!(client.get_all().unwrap()["A"], "1");

    for ca in [None, Some("other-ca.pem")] {
        let err = with_ca(ca).get_all().unwrap_err();
        assert!(matches!(err, Error::Network { .. }), "{ca:?}: {err:?}");
        assert!(err.to_string().contains("TLS"), "{err}");
    }
    assert_eq!(
        stub.count(),
        1,
        "no request is sent over an untrusted connection"
    );
}

/// fake answers like the stub server with one secret A=1.
fn fake(req: &Request) -> Reply {
    if req.path().ends_with("/export") {
        return json(200, serde_json::json!({ "A": "1" }));
    }
    error(404, "Data tidak ditemukan")
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
