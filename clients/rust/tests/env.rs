//! Configuration from `CVSM_*` variables and `inject`, which read and write
//! the process environment. Every test here holds ENV so they never overlap.

mod support;

use std::sync::{Mutex, MutexGuard};

use cvsm::{Client, Error};
use support::{fixture, CONFIG_VARS, TOKEN};

static ENV: Mutex<()> = Mutex::new(());

/// clean_env takes the lock and removes every `CVSM_*` and proxy variable.
fn clean_env() -> MutexGuard<'static, ()> {
    let guard = ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for name in CONFIG_VARS {
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
