//! Stale if error (rule R14): kept values stand in for a failed refresh,
//! marked stale, with one warning per name through the `log` facade.
//! These tests never read or write the process environment.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use cvsm::{Client, ClientOptions, Error, Served};
use support::{error, Reply, Request, Stub, TEAM_ID, TOKEN};

const MS: Duration = Duration::from_millis(1);

/// Capture is a `log` logger that keeps every record with the thread that
/// logged it, so that each test sees only its own (tests run in parallel).
struct Capture {
    records: Mutex<Vec<(ThreadId, log::Level, String)>>,
}

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        self.records.lock().unwrap().push((
            thread::current().id(),
            record.level(),
            record.args().to_string(),
        ));
    }

    fn flush(&self) {}
}

static CAPTURE: Capture = Capture {
    records: Mutex::new(Vec::new()),
};

/// warnings returns the warnings this test's thread logged so far.
fn warnings() -> Vec<String> {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&CAPTURE).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Trace);
    });
    let me = thread::current().id();
    CAPTURE
        .records
        .lock()
        .unwrap()
        .iter()
        .filter(|(thread, level, _)| *thread == me && *level == log::Level::Warn)
        .map(|(_, _, message)| message.clone())
        .collect()
}

/// Fault is what the stub does to every request while it is set.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    Status(u16),
    RateLimited,
    Drop,
    Unreadable,
    /// A 404 to the by-name read only; `Some(status)` answers the listing too.
    ByNameMissing(Option<u16>),
}

/// Outage is a stub holding `secrets` whose answers a test can spoil.
struct Outage {
    stub: Stub,
    fault: Arc<Mutex<Fault>>,
}

impl Outage {
    fn start(secrets: &[(&str, &str)]) -> Outage {
        let fault = Arc::new(Mutex::new(Fault::None));
        let current = Arc::clone(&fault);
        let stub = Stub::secrets(secrets, move |req: &Request| {
            let by_name = req.path().contains("/by-name/");
            match *current.lock().unwrap() {
                Fault::None => None,
                Fault::Status(status) => Some(error(status, "Sedang gangguan")),
                Fault::RateLimited => Some(Reply::Headers(
                    429,
                    vec![("Retry-After", "1".into())],
                    r#"{"error":"Terlalu banyak"}"#.into(),
                )),
                Fault::Drop => Some(Reply::Drop),
                Fault::Unreadable => Some(Reply::Json(200, "<html>maintenance</html>".into())),
                Fault::ByNameMissing(_) if by_name => Some(error(404, "Secret tidak ditemukan")),
                Fault::ByNameMissing(listing) => listing.map(|s| error(s, "Sedang gangguan")),
            }
        });
        Outage { stub, fault }
    }

    fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    fn client(&self, cache_ttl: Duration, stale_if_error: Duration, max_retries: u32) -> Client {
        Client::new(ClientOptions {
            token: Some(TOKEN.into()),
            base_url: Some(self.stub.base_url.clone()),
            team: Some(TEAM_ID.into()),
            environment: Some("production".into()),
            cache_ttl: Some(cache_ttl),
            timeout: Some(Duration::from_secs(5)),
            max_retries: Some(max_retries),
            ca_file: None,
            stale_if_error: Some(stale_if_error),
            live: false,
        })
        .unwrap()
    }

    /// requests counts the requests from here on.
    fn requests(&self) -> impl Fn() -> usize + '_ {
        let before = self.stub.count();
        move || self.stub.count() - before
    }
}

fn fresh<T>(served: Served<T>) -> T {
    assert!(
        !served.is_stale(),
        "expected a fresh value, stale because {:?}",
        served.stale
    );
    served.value
}

fn stale<T>(served: Served<T>) -> (T, Error) {
    match served.stale {
        Some(err) => (served.value, err),
        None => panic!("expected a stale value"),
    }
}

#[test]
fn kept_values_stand_in_for_network_errors_5xx_429_and_unreadable_answers() {
    type IsExpected = fn(&Error) -> bool;
    // The fault, the error it is, and how many requests one read makes.
    let cases: [(Fault, IsExpected, usize); 6] = [
        (Fault::Drop, |e| matches!(e, Error::Network { .. }), 3),
        (
            Fault::Status(503),
            |e| matches!(e, Error::Api { status: 503, .. }),
            3,
        ),
        (
            Fault::Status(502),
            |e| matches!(e, Error::Api { status: 502, .. }),
            3,
        ),
        (
            Fault::Status(500),
            |e| matches!(e, Error::Api { status: 500, .. }),
            1,
        ),
        (
            Fault::RateLimited,
            |e| {
                matches!(
                    e,
                    Error::RateLimited {
                        retry_after: Some(1),
                        ..
                    }
                )
            },
            1,
        ),
        (Fault::Unreadable, |e| matches!(e, Error::Network { .. }), 3),
    ];
    for (fault, expected, attempts) in cases {
        let outage = Outage::start(&[("KEPT", "kept-value"), ("OTHER", "other-value")]);
        let client = outage.client(150 * MS, Duration::from_secs(30), 2);
        assert_eq!(fresh(client.get_with_meta("KEPT").unwrap()), "kept-value");
        assert_eq!(fresh(client.get_all_with_meta().unwrap()).len(), 2);
        thread::sleep(200 * MS);

        outage.set(fault);
        let requests = outage.requests();
        let (value, err) = stale(client.get_with_meta("KEPT").unwrap());
        assert_eq!(value, "kept-value", "{fault:?}");
        assert!(expected(&err), "{fault:?}: {err:?}");
        assert_eq!(requests(), attempts, "{fault:?}: retried first");

        let (values, err) = stale(client.get_all_with_meta().unwrap());
        assert_eq!(values["OTHER"], "other-value");
        assert!(expected(&err), "{fault:?}: {err:?}");
        assert_eq!(requests(), 2 * attempts, "{fault:?}");

        assert_eq!(
            client.get("KEPT").unwrap(),
            "kept-value",
            "plain get serves it too"
        );

        outage.set(Fault::None);
        assert_eq!(
            fresh(client.get_with_meta("KEPT").unwrap()),
            "kept-value",
            "{fault:?}: a fresh read is not stale"
        );
        assert_eq!(fresh(client.get_all_with_meta().unwrap()).len(), 2);
    }
}

#[test]
fn a_kept_value_older_than_cache_ttl_plus_stale_if_error_is_not_served() {
    let outage = Outage::start(&[("KEPT", "kept-value")]);
    let client = outage.client(300 * MS, 1000 * MS, 0);
    let fetched = Instant::now();
    client.get("KEPT").unwrap();
    client.get_all().unwrap();
    thread::sleep(400 * MS);

    outage.set(Fault::Status(503));
    assert!(client.get_with_meta("KEPT").unwrap().is_stale());
    assert!(client.get_all_with_meta().unwrap().is_stale());
    assert!(fetched.elapsed() < 1300 * MS, "the machine is too slow");

    thread::sleep((1500 * MS).saturating_sub(fetched.elapsed()));
    let err = client.get("KEPT").unwrap_err();
    assert!(matches!(err, Error::Api { status: 503, .. }), "{err:?}");
    let err = client.get_all().unwrap_err();
    assert!(matches!(err, Error::Api { status: 503, .. }), "{err:?}");
}

#[test]
fn without_stale_if_error_a_failed_refresh_is_the_error() {
    let outage = Outage::start(&[("KEPT", "kept-value")]);
    let client = outage.client(100 * MS, Duration::ZERO, 0);
    client.get("KEPT").unwrap();
    client.get_all().unwrap();
    thread::sleep(150 * MS);
    outage.set(Fault::Drop);
    assert!(matches!(
        client.get("KEPT").unwrap_err(),
        Error::Network { .. }
    ));
    assert!(matches!(
        client.get_all().unwrap_err(),
        Error::Network { .. }
    ));
}

#[test]
fn refused_credentials_never_serve_a_kept_value_and_empty_the_cache() {
    for status in [401, 403] {
        let outage = Outage::start(&[("KEPT", "kept-value")]);
        let client = outage.client(100 * MS, Duration::from_secs(60), 0);
        client.get("KEPT").unwrap();
        client.get_all().unwrap();
        thread::sleep(150 * MS);

        outage.set(Fault::Status(status));
        let err = client.get("KEPT").unwrap_err();
        assert_eq!(err.status(), Some(status));
        assert!(
            matches!(
                err,
                Error::Authentication { .. } | Error::PermissionDenied { .. }
            ),
            "{err:?}"
        );

        outage.set(Fault::Status(503));
        let err = client.get("KEPT").unwrap_err();
        assert!(
            matches!(err, Error::Api { status: 503, .. }),
            "{status} emptied the cache: {err:?}"
        );
        let err = client.get_all().unwrap_err();
        assert!(
            matches!(err, Error::Api { status: 503, .. }),
            "{status} emptied the cache: {err:?}"
        );
    }
}

#[test]
fn other_errors_never_serve_a_kept_value() {
    type IsExpected = fn(&Error) -> bool;
    let cases: [(Fault, IsExpected); 5] = [
        // by-name 404, and the listing says the secret is gone
        (Fault::ByNameMissing(None), |e| {
            matches!(
                e,
                Error::NotFound {
                    status: Some(404),
                    ..
                }
            )
        }),
        // by-name 404, then an outage: the 404 already said "gone"
        (Fault::ByNameMissing(Some(503)), |e| {
            matches!(e, Error::Api { status: 503, .. })
        }),
        (Fault::Status(400), |e| {
            matches!(
                e,
                Error::Configuration {
                    status: Some(400),
                    ..
                }
            )
        }),
        (Fault::Status(409), |e| {
            matches!(e, Error::Api { status: 409, .. })
        }),
        (Fault::Status(301), |e| {
            matches!(e, Error::Api { status: 301, .. })
        }),
    ];
    for (fault, expected) in cases {
        let outage = Outage::start(&[("KEPT", "kept-value")]);
        let client = outage.client(100 * MS, Duration::from_secs(60), 0);
        client.get("KEPT").unwrap();
        thread::sleep(150 * MS);
        outage.set(fault);
        let err = client.get("KEPT").unwrap_err();
        assert!(expected(&err), "{fault:?}: {err:?}");

        outage.set(Fault::Status(503));
        assert!(
            client.get_with_meta("KEPT").unwrap().is_stale(),
            "{fault:?} left the kept value in place"
        );
    }
}

#[test]
fn with_cache_ttl_zero_every_read_asks_and_a_failed_one_returns_the_last_value() {
    let outage = Outage::start(&[("KEPT", "kept-value")]);
    let client = outage.client(Duration::ZERO, Duration::from_secs(30), 0);
    let requests = outage.requests();
    assert_eq!(fresh(client.get_with_meta("KEPT").unwrap()), "kept-value");
    assert_eq!(fresh(client.get_with_meta("KEPT").unwrap()), "kept-value");
    fresh(client.get_all_with_meta().unwrap());
    fresh(client.get_all_with_meta().unwrap());
    assert_eq!(requests(), 4, "no value is ever fresh from the cache");

    outage.set(Fault::Status(503));
    assert_eq!(stale(client.get_with_meta("KEPT").unwrap()).0, "kept-value");
    assert_eq!(stale(client.get_all_with_meta().unwrap()).0.len(), 1);
    assert_eq!(requests(), 6);
}

#[test]
fn clear_cache_forgets_kept_values() {
    let outage = Outage::start(&[("KEPT", "kept-value")]);
    let client = outage.client(100 * MS, Duration::from_secs(30), 0);
    client.get("KEPT").unwrap();
    client.get_all().unwrap();
    client.clear_cache();
    outage.set(Fault::Drop);
    assert!(matches!(
        client.get("KEPT").unwrap_err(),
        Error::Network { .. }
    ));
    assert!(matches!(
        client.get_all().unwrap_err(),
        Error::Network { .. }
    ));
}

#[test]
fn a_get_falls_back_on_a_kept_get_all_result() {
    let outage = Outage::start(&[("KEPT", "kept-value"), ("ONLY_EXPORTED", "exported")]);
    let client = outage.client(Duration::from_secs(1), Duration::from_secs(30), 0);
    client.get_all().unwrap();
    let requests = outage.requests();
    assert_eq!(client.get("ONLY_EXPORTED").unwrap(), "exported");
    assert_eq!(
        requests(),
        0,
        "a get after get_all is served from the cache"
    );
    thread::sleep(1100 * MS);
    outage.set(Fault::Drop);
    let (value, err) = stale(client.get_with_meta("ONLY_EXPORTED").unwrap());
    assert_eq!(value, "exported");
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert_eq!(requests(), 1);
}

#[test]
fn one_warning_per_name_naming_the_secret_and_the_kind_never_the_value() {
    let outage = Outage::start(&[("LOGGED_A", "value-a-9f2c"), ("LOGGED_B", "value-b-9f2c")]);
    let client = outage.client(100 * MS, Duration::from_secs(30), 0);
    let before = warnings().len();
    client.get("LOGGED_A").unwrap();
    client.get("LOGGED_B").unwrap();
    client.get_all().unwrap();
    thread::sleep(150 * MS);

    outage.set(Fault::Status(503));
    for _ in 0..3 {
        client.get("LOGGED_A").unwrap();
        client.get("LOGGED_B").unwrap();
        client.get_all().unwrap();
    }
    let logged = warnings()[before..].to_vec();
    assert_eq!(logged.len(), 3, "{logged:#?}");
    assert!(
        logged[0].contains("\"LOGGED_A\"") && logged[0].contains("api error"),
        "{}",
        logged[0]
    );
    assert!(logged[1].contains("\"LOGGED_B\""), "{}", logged[1]);
    assert!(logged[2].contains("get_all"), "{}", logged[2]);
    for line in &logged {
        assert!(
            line.contains("stale") && line.contains("production"),
            "{line}"
        );
        assert!(line.contains("HTTP 503"), "{line}");
        assert!(!line.contains("9f2c"), "never a value: {line}");
        assert!(!line.contains(TOKEN), "never the token: {line}");
    }

    // Once the service is back, a later outage warns again.
    outage.set(Fault::None);
    client.get("LOGGED_A").unwrap();
    thread::sleep(150 * MS);
    outage.set(Fault::Drop);
    client.get("LOGGED_A").unwrap();
    client.get("LOGGED_A").unwrap();
    client.get("LOGGED_B").unwrap();
    let logged = warnings()[before..].to_vec();
    assert_eq!(logged.len(), 4, "{logged:#?}");
    assert!(
        logged[3].contains("\"LOGGED_A\"") && logged[3].contains("network error"),
        "{}",
        logged[3]
    );
}

#[test]
fn a_shared_client_serves_kept_values_to_every_thread() {
    let outage = Outage::start(&[("KEPT", "kept-value")]);
    let client = Arc::new(outage.client(100 * MS, Duration::from_secs(30), 0));
    client.get("KEPT").unwrap();
    thread::sleep(150 * MS);
    outage.set(Fault::Status(503));
    let stale_reads = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let client = Arc::clone(&client);
            let stale_reads = Arc::clone(&stale_reads);
            thread::spawn(move || {
                let served = client.get_with_meta("KEPT").unwrap();
                if served.is_stale() {
                    stale_reads.fetch_add(1, Ordering::SeqCst);
                }
                served.value
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), "kept-value");
    }
    assert_eq!(stale_reads.load(Ordering::SeqCst), 4);
}
