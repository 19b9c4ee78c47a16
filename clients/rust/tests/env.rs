//! Configuration from `CVSM_*` variables and `inject`, which read and write
//! the process environment. Every test here holds ENV so they never overlap.

mod support;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cvsm::{Client, ClientOptions, Error};
use support::{Stub, TEAM_ID, TOKEN};

static ENV: Mutex<()> = Mutex::new(());

const CVSM_VARS: [&str; 5] = [
    "CVSM_TOKEN",
    "CVSM_BASE_URL",
    "CVSM_TEAM",
    "CVSM_ENVIRONMENT",
    "CVSM_CACHE_TTL",
];

/// clean_env takes the lock and removes every `CVSM_*` variable.
fn clean_env() -> MutexGuard<'static, ()> {
    let guard = ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for name in CVSM_VARS {
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
    assert_eq!(client.base_url(), "http://127.0.0.1:9/api/v1", "trailing / ignored");
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
        assert!(message.starts_with(&format!("{missing} is not set")), "{message}");

        std::env::set_var(missing, "");
        let message = configuration_error(Client::from_env());
        assert!(message.contains(missing), "an empty {missing} counts as unset: {message}");
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
fn inject_keeps_existing_variables_unless_asked_to_overwrite() {
    let _env = clean_env();
    let names = ["RS_INJECT_TEST_B", "RS_INJECT_TEST_A", "RS_INJECT_TEST_C"];
    for name in names {
        std::env::remove_var(name);
    }
    let stub = Stub::secrets(
        &[("RS_INJECT_TEST_B", "b"), ("RS_INJECT_TEST_A", "a"), ("RS_INJECT_TEST_C", "")],
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
    assert_eq!(client.inject(false).unwrap(), vec!["RS_INJECT_TEST_B", "RS_INJECT_TEST_C"]);
    assert_eq!(std::env::var("RS_INJECT_TEST_A").unwrap(), "kept");
    assert_eq!(std::env::var("RS_INJECT_TEST_B").unwrap(), "b");
    assert_eq!(std::env::var("RS_INJECT_TEST_C").unwrap(), "");

    assert_eq!(
        client.inject(true).unwrap(),
        vec!["RS_INJECT_TEST_A", "RS_INJECT_TEST_B", "RS_INJECT_TEST_C"]
    );
    assert_eq!(std::env::var("RS_INJECT_TEST_A").unwrap(), "a");
    assert_eq!(stub.count(), 1, "the second inject reuses the cached export");

    for name in names {
        std::env::remove_var(name);
    }
}
