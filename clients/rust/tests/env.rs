//! Configuration from `CVSM_*` variables and `inject`, which read and write
//! the process environment. Every test here holds ENV so they never overlap.

mod support;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cvsm::{Client, ClientOptions, Error};
use support::{fixture, ConnectProxy, Stub, TEAM_ID, TOKEN};

static ENV: Mutex<()> = Mutex::new(());

const VARS: [&str; 16] = [
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

/// clean_env takes the lock and removes every `CVSM_*` and proxy variable.
fn clean_env() -> MutexGuard<'static, ()> {
    let guard = ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for name in VARS {
        std::env::remove_var(name);
    }
    guard
}

fn set_required() {
    std::env::set_var("CVSM_TOKEN", TOKEN);
    std::env::set_var("CVSM_BASE_URL", "http://127.0.0.1:9/api/v1/");
    std::env::set_var("CVSM_TEAM", "acme");
}

fn configuration_error(result: cvsm::Result<Client>) -> String {
    match result {
        Err(err @ Error::Configuration { .. }) => err.to_string(),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn configuration_comes_from_cvsm_variables() {
    let _env = clean_env();
    set_required();
    std::env::set_var("CVSM_ENVIRONMENT", "staging");
    std::env::set_var("CVSM_CACHE_TTL", "5");

    let client = Client::from_env().unwrap();
    assert_eq!(
        client.base_url(),
        "http://127.0.0.1:9/api/v1",
        "trailing / ignored"
    );
    assert_eq!(client.team(), "acme");
    assert_eq!(client.environment(), "staging");
    assert_eq!(client.cache_ttl(), Duration::from_secs(5));
    assert!(!format!("{client:?}").contains(TOKEN));
}

#[test]
fn defaults_apply_when_neither_option_nor_variable_is_set() {
    let _env = clean_env();
    set_required();
    let client = Client::new(ClientOptions::default()).unwrap();
    assert_eq!(client.environment(), "production");
    assert_eq!(client.cache_ttl(), Duration::from_secs(30));
    assert_eq!(client.timeout(), Duration::from_secs(10));
    assert_eq!(client.max_retries(), 2);
    assert_eq!(client.stale_if_error(), Duration::ZERO, "off by default");
}

#[test]
fn explicit_options_take_precedence_over_variables() {
    let _env = clean_env();
    set_required();
    std::env::set_var("CVSM_ENVIRONMENT", "staging");
    std::env::set_var("CVSM_CACHE_TTL", "not-a-number");

    let client = Client::new(ClientOptions {
        base_url: Some("http://127.0.0.1:10/api/v1".into()),
        team: Some(TEAM_ID.into()),
        environment: Some("development".into()),
        cache_ttl: Some(Duration::from_secs(7)),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(client.base_url(), "http://127.0.0.1:10/api/v1");
    assert_eq!(client.team(), TEAM_ID);
    assert_eq!(client.environment(), "development");
    assert_eq!(client.cache_ttl(), Duration::from_secs(7));
}

#[test]
fn missing_token_base_url_or_team_is_a_configuration_error_naming_the_variable() {
    let _env = clean_env();
    for missing in ["CVSM_TOKEN", "CVSM_BASE_URL", "CVSM_TEAM"] {
        set_required();
        std::env::remove_var(missing);
        let message = configuration_error(Client::from_env());
        assert!(
            message.starts_with(&format!("{missing} is not set")),
            "{message}"
        );

        std::env::set_var(missing, "");
        let message = configuration_error(Client::from_env());
        assert!(
            message.contains(missing),
            "an empty {missing} counts as unset: {message}"
        );
    }
}

#[test]
fn cache_ttl_variable_must_be_a_non_negative_integer() {
    let _env = clean_env();
    set_required();
    for bad in ["-1", "abc", "1.5", "30s"] {
        std::env::set_var("CVSM_CACHE_TTL", bad);
        let message = configuration_error(Client::from_env());
        assert!(message.contains("CVSM_CACHE_TTL"), "{bad}: {message}");
    }
    std::env::set_var("CVSM_CACHE_TTL", "0");
    assert_eq!(Client::from_env().unwrap().cache_ttl(), Duration::ZERO);
}

#[test]
fn live_variable_takes_the_spellings_of_on_and_off_and_the_option_turns_it_on() {
    let _env = clean_env();
    set_required();
    assert!(!Client::from_env().unwrap().live(), "off by default");
    for (raw, live) in [
        ("1", true),
        ("TRUE", true),
        ("yes", true),
        ("On", true),
        ("0", false),
        ("off", false),
        ("No", false),
    ] {
        std::env::set_var("CVSM_LIVE", raw);
        assert_eq!(Client::from_env().unwrap().live(), live, "{raw}");
    }
    std::env::set_var("CVSM_LIVE", "0");
    let explicit = Client::new(ClientOptions {
        live: true,
        ..Default::default()
    })
    .unwrap();
    assert!(
        explicit.live(),
        "the option turns it on whatever CVSM_LIVE says"
    );
    for bad in ["2", "enabled", "y"] {
        std::env::set_var("CVSM_LIVE", bad);
        let message = configuration_error(Client::from_env());
        assert!(message.contains("CVSM_LIVE"), "{bad}: {message}");
    }
}

#[test]
fn stale_if_error_variable_is_a_non_negative_integer_and_the_option_wins() {
    let _env = clean_env();
    set_required();
    std::env::set_var("CVSM_STALE_IF_ERROR", "300");
    assert_eq!(
        Client::from_env().unwrap().stale_if_error(),
        Duration::from_secs(300)
    );
    let explicit = Client::new(ClientOptions {
        stale_if_error: Some(Duration::from_secs(5)),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(explicit.stale_if_error(), Duration::from_secs(5));

    for bad in ["soon", "-1", "1.5", "+3", "30s"] {
        std::env::set_var("CVSM_STALE_IF_ERROR", bad);
        let message = configuration_error(Client::from_env());
        assert!(message.contains("CVSM_STALE_IF_ERROR"), "{bad}: {message}");
    }
    std::env::set_var("CVSM_STALE_IF_ERROR", "");
    assert_eq!(
        Client::from_env().unwrap().stale_if_error(),
        Duration::ZERO,
        "empty counts as unset"
    );
}

#[test]
fn timeout_and_max_retries_come_from_their_variables() {
    let _env = clean_env();
    set_required();
    std::env::set_var("CVSM_TIMEOUT", "2.5");
    std::env::set_var("CVSM_MAX_RETRIES", "0");
    let client = Client::from_env().unwrap();
    assert_eq!(client.timeout(), Duration::from_millis(2500));
    assert_eq!(client.max_retries(), 0);

    let explicit = Client::new(ClientOptions {
        timeout: Some(Duration::from_secs(1)),
        max_retries: Some(4),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        (explicit.timeout(), explicit.max_retries()),
        (Duration::from_secs(1), 4)
    );

    for (name, bad) in [
        ("CVSM_TIMEOUT", "0"),
        ("CVSM_TIMEOUT", "-1"),
        ("CVSM_TIMEOUT", "ten"),
        ("CVSM_MAX_RETRIES", "-1"),
        ("CVSM_MAX_RETRIES", "1.5"),
    ] {
        std::env::set_var("CVSM_TIMEOUT", "1");
        std::env::set_var("CVSM_MAX_RETRIES", "1");
        std::env::set_var(name, bad);
        let message = configuration_error(Client::from_env());
        assert!(message.contains(name), "{name}={bad}: {message}");
    }
}

#[test]
fn token_from_the_variable_is_trimmed_like_a_mounted_file() {
    let _env = clean_env();
    let stub = Stub::secrets(&[("A", "1")], |_| None);
    std::env::set_var("CVSM_TOKEN", format!("{TOKEN}\n"));
    std::env::set_var("CVSM_BASE_URL", &stub.base_url);
    std::env::set_var("CVSM_TEAM", TEAM_ID);
    Client::from_env().unwrap().get_all().unwrap();
    assert_eq!(
        stub.requests()[0].header("authorization"),
        Some(&*format!("Bearer {TOKEN}"))
    );

    std::env::set_var("CVSM_TOKEN", " \r\n\t");
    let message = configuration_error(Client::from_env());
    assert!(
        message.starts_with("CVSM_TOKEN is not set"),
        "only whitespace is no token: {message}"
    );

    std::env::set_var("CVSM_TOKEN", format!("{TOKEN}\u{1b}x"));
    let message = configuration_error(Client::from_env());
    assert!(!message.contains(TOKEN), "{message}");
}

#[test]
fn ca_file_comes_from_its_variable_and_an_unreadable_one_fails_at_construction() {
    let _env = clean_env();
    set_required();
    std::env::set_var("CVSM_CA_FILE", fixture("ca.pem"));
    assert_eq!(
        Client::from_env().unwrap().ca_file(),
        Some(&*fixture("ca.pem"))
    );

    std::env::set_var("CVSM_CA_FILE", fixture("missing.pem"));
    let message = configuration_error(Client::from_env());
    assert!(
        message.contains("missing.pem") && message.contains("CVSM_CA_FILE"),
        "{message}"
    );

    // A custom HTTP client owns TLS: the variable is not read.
    let client = Client::builder()
        .http_client(support::UreqHttp(ureq::Agent::new_with_defaults()))
        .build()
        .unwrap();
    assert_eq!(client.ca_file(), None);
}

/// proxy_client builds a client for `stub` from the environment as it is now.
fn proxy_client(stub: &Stub) -> Client {
    Client::new(ClientOptions {
        token: Some(TOKEN.into()),
        base_url: Some(stub.base_url.clone()),
        team: Some(TEAM_ID.into()),
        cache_ttl: Some(Duration::ZERO),
        max_retries: Some(0),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn http_proxy_variables_are_honoured_when_the_client_is_created() {
    let _env = clean_env();
    let stub = Stub::secrets(&[("A", "1")], |_| None);
    let authority = stub
        .base_url
        .trim_start_matches("http://")
        .trim_end_matches("/api/v1")
        .to_string();
    let connect = format!("CONNECT {authority} HTTP/1.1");

    for variable in ["http_proxy", "HTTP_PROXY"] {
        let proxy = ConnectProxy::start();
        let before = proxy_client(&stub);
        std::env::set_var(variable, &proxy.url);
        let after = proxy_client(&stub);
        before.get_all().unwrap();
        assert!(
            proxy.lines().is_empty(),
            "{variable}: read when the client is created, not later"
        );
        after.get_all().unwrap();
        assert_eq!(proxy.lines(), vec![connect.clone()], "{variable}");
        std::env::remove_var(variable);
    }

    // https_proxy is for https:// base URLs only.
    let proxy = ConnectProxy::start();
    std::env::set_var("https_proxy", &proxy.url);
    std::env::set_var("HTTPS_PROXY", &proxy.url);
    proxy_client(&stub).get_all().unwrap();
    assert!(proxy.lines().is_empty());
}

#[test]
fn no_proxy_exempts_matching_hosts() {
    let _env = clean_env();
    let stub = Stub::secrets(&[("A", "1")], |_| None);
    let proxy = ConnectProxy::start();
    std::env::set_var("http_proxy", &proxy.url);
    for (variable, value) in [
        ("no_proxy", "localhost,127.0.0.1"),
        ("NO_PROXY", "*"),
        ("NO_PROXY", "127.0.0.0/8"),
    ] {
        std::env::set_var(variable, value);
        proxy_client(&stub).get_all().unwrap();
        assert!(proxy.lines().is_empty(), "{variable}={value}");
        std::env::remove_var(variable);
    }
    std::env::set_var("NO_PROXY", "example.com,10.0.0.0/8");
    proxy_client(&stub).get_all().unwrap();
    assert_eq!(
        proxy.lines().len(),
        1,
        "a non-matching no_proxy leaves the proxy in use"
    );
}

#[test]
fn an_invalid_proxy_url_is_a_configuration_error_that_hides_the_value() {
    let _env = clean_env();
    set_required();
    std::env::set_var("http_proxy", "http://user:hunter2@[broken");
    let message = configuration_error(Client::from_env());
    assert!(
        message.contains("http_proxy") && !message.contains("hunter2"),
        "{message}"
    );
}

#[test]
fn inject_keeps_existing_variables_unless_asked_to_overwrite() {
    let _env = clean_env();
    let names = ["RS_INJECT_TEST_B", "RS_INJECT_TEST_A", "RS_INJECT_TEST_C"];
    for name in names {
        std::env::remove_var(name);
    }
    let stub = Stub::secrets(
        &[
            ("RS_INJECT_TEST_B", "b"),
            ("RS_INJECT_TEST_A", "a"),
            ("RS_INJECT_TEST_C", ""),
        ],
        |_| None,
    );
    let client = Client::new(ClientOptions {
        token: Some(TOKEN.into()),
        base_url: Some(stub.base_url.clone()),
        team: Some(TEAM_ID.into()),
        ..Default::default()
    })
    .unwrap();

    std::env::set_var("RS_INJECT_TEST_A", "kept");
    assert_eq!(
        client.inject(false).unwrap(),
        vec!["RS_INJECT_TEST_B", "RS_INJECT_TEST_C"]
    );
    assert_eq!(std::env::var("RS_INJECT_TEST_A").unwrap(), "kept");
    assert_eq!(std::env::var("RS_INJECT_TEST_B").unwrap(), "b");
    assert_eq!(std::env::var("RS_INJECT_TEST_C").unwrap(), "");

    assert_eq!(
        client.inject(true).unwrap(),
        vec!["RS_INJECT_TEST_A", "RS_INJECT_TEST_B", "RS_INJECT_TEST_C"]
    );
    assert_eq!(std::env::var("RS_INJECT_TEST_A").unwrap(), "a");
    assert_eq!(
        stub.count(),
        1,
        "the second inject reuses the cached export"
    );

    for name in names {
        std::env::remove_var(name);
    }
}

#[test]
fn inject_is_all_or_nothing() {
    let _env = clean_env();
    let cases: [(&[(&str, &str)], &str); 3] = [
        (
            &[
                ("RS_ALL_A", "a"),
                ("RS_ALL_B", "nul\0inside"),
                ("RS_ALL_C", "c"),
            ],
            "RS_ALL_B",
        ),
        (
            &[("RS_ALL_A", "a"), ("RS_ALL-B", "b"), ("RS_ALL_C", "c")],
            "RS_ALL-B",
        ),
        (&[("1RS_ALL", "a"), ("RS_ALL_A", "a")], "1RS_ALL"),
    ];
    for (secrets, culprit) in cases {
        for (name, _) in secrets {
            std::env::remove_var(name);
        }
        let stub = Stub::secrets(secrets, |_| None);
        let client = Client::new(ClientOptions {
            token: Some(TOKEN.into()),
            base_url: Some(stub.base_url.clone()),
            team: Some(TEAM_ID.into()),
            ..Default::default()
        })
        .unwrap();
        let err = client.inject(true).unwrap_err();
        assert!(
            matches!(err, Error::Configuration { status: None, .. }),
            "{err:?}"
        );
        let printed = format!("{err} {err:?}");
        assert!(printed.contains(culprit), "{printed}");
        assert!(!printed.contains("nul"), "never the value: {printed}");
        for (name, _) in secrets {
            if !name.contains('-') && !name.starts_with('1') {
                assert_eq!(std::env::var_os(name), None, "{name} must not be set");
            }
        }
    }
}

#[test]
fn inject_sets_the_opened_values_of_an_end_to_end_team() {
    let _env = clean_env();
    let names = ["RS_E2E_INJECT_A", "RS_E2E_INJECT_B", "DATABASE_URL"];
    for name in names {
        std::env::remove_var(name);
    }
    let team = support::e2e::Team::from_vectors();
    team.put("production", "RS_E2E_INJECT_A", "opened a");
    team.put("production", "RS_E2E_INJECT_B", "");
    let served = std::sync::Arc::clone(&team);
    let stub = Stub::start(move |req| served.reply(req));
    let client = Client::new(ClientOptions {
        token: Some(team.token.clone()),
        base_url: Some(stub.base_url.clone()),
        team: Some(team.team_id.clone()),
        ..Default::default()
    })
    .unwrap();

    assert_eq!(
        client.inject(false).unwrap(),
        vec!["DATABASE_URL", "RS_E2E_INJECT_A", "RS_E2E_INJECT_B"]
    );
    assert_eq!(std::env::var("RS_E2E_INJECT_A").unwrap(), "opened a");
    assert_eq!(std::env::var("RS_E2E_INJECT_B").unwrap(), "");
    assert_eq!(
        std::env::var("DATABASE_URL").unwrap(),
        support::e2e::Team::vector_value("production", "DATABASE_URL")
    );
    assert_eq!(stub.count(), 2, "the export, then the key");

    for name in names {
        std::env::remove_var(name);
    }
}

#[test]
fn inject_with_a_keyless_token_of_an_end_to_end_team_sets_nothing() {
    let _env = clean_env();
    std::env::remove_var("DATABASE_URL");
    let team = support::e2e::Team::from_vectors();
    let served = std::sync::Arc::clone(&team);
    let stub = Stub::start(move |req| served.reply(req));
    let client = Client::new(ClientOptions {
        token: Some(team.api_token.clone()),
        base_url: Some(stub.base_url.clone()),
        team: Some(team.team_id.clone()),
        ..Default::default()
    })
    .unwrap();

    let err = client.inject(true).unwrap_err();
    assert!(matches!(err, Error::Configuration { .. }), "{err:?}");
    assert!(err.to_string().contains("key part"), "{err}");
    assert_eq!(std::env::var_os("DATABASE_URL"), None);
    assert_eq!(stub.count(), 1, "the export, not retried");
}
