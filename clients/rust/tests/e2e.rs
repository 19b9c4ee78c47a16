//! End-to-end teams against a local stub server: the token's key part, the
//! team key fetched once and kept until `clear_cache`, values opened for the
//! name and environment asked for, and the decryption error. These tests
//! never read or write the process environment (see tests/env.rs for
//! `inject`).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cvsm::{Client, ClientOptions, Error};
use support::e2e::{vectors, Team};
use support::{error, Reply, Request, Stub};

const DATABASE_URL: &str = "DATABASE_URL";

fn options(team: &Team, stub: &Stub) -> ClientOptions {
    ClientOptions {
        token: Some(team.token.clone()),
        base_url: Some(stub.base_url.clone()),
        team: Some(team.team_id.clone()),
        environment: Some("production".into()),
        cache_ttl: Some(Duration::from_secs(30)),
        timeout: Some(Duration::from_secs(5)),
        max_retries: Some(2),
        ca_file: None,
        stale_if_error: Some(Duration::ZERO),
        live: false,
    }
}

/// serve starts a stub answering for `team`; `errors` may override any request.
fn serve(
    team: &Arc<Team>,
    errors: impl Fn(&Request) -> Option<Reply> + Send + Sync + 'static,
) -> Stub {
    let team = Arc::clone(team);
    Stub::start(move |req| errors(req).unwrap_or_else(|| team.reply(req)))
}

fn no_errors(_: &Request) -> Option<Reply> {
    None
}

// The wire rules of an end-to-end team (the requests, the key kept and fetched again, every
// error of the reads and of the key request) are the conformance cases e2e_*; here: secrecy,
// the vectors' bad tokens and concurrency.

#[test]
fn the_key_part_is_never_printed_nor_sent() {
    let team = Team::from_vectors();
    let stub = serve(&team, no_errors);
    let options = options(&team, &stub);
    let client = Client::new(options.clone()).unwrap();
    for printed in [
        format!("{client:?}"),
        format!("{client:#?}"),
        format!("{options:?}"),
        format!("{:?}", Client::builder().token(&team.token)),
    ] {
        assert!(!printed.contains(&team.private_key), "{printed}");
        assert!(!printed.contains(&team.api_token), "{printed}");
    }
    assert!(format!("{client:?}").contains("token_key: Some([redacted])"));
    let plain = Client::new(ClientOptions {
        token: Some(team.api_token.clone()),
        ..options
    })
    .unwrap();
    assert!(format!("{plain:?}").contains("token_key: None"));
}

#[test]
fn every_bad_token_of_the_vectors_is_a_configuration_error_that_does_not_quote_it() {
    for token in vectors()["bad_tokens"].as_array().unwrap() {
        let token = token.as_str().unwrap();
        let err = Client::new(ClientOptions {
            token: Some(token.into()),
            base_url: Some("http://127.0.0.1:9/api/v1".into()),
            team: Some("acme".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(err, Error::Configuration { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("key part"), "{message}");
        assert!(!message.contains("cvsm_f7"), "{message}");
        let key_part = token.split_once('.').unwrap().1;
        assert!(key_part.len() < 8 || !message.contains(key_part));
    }
}

#[test]
fn concurrent_first_reads_fetch_the_team_key_once() {
    let team = Team::from_vectors();
    team.put("production", "API_TOKEN", "tok-1");
    let slow = Arc::clone(&team);
    let stub = serve(&team, move |req| {
        req.path()
            .ends_with("/e2e/key")
            .then(|| Reply::Slow(Duration::from_millis(300), Box::new(slow.reply(req))))
    });
    let client = Arc::new(Client::new(options(&team, &stub)).unwrap());
    let readers: Vec<_> = [DATABASE_URL, "API_TOKEN", DATABASE_URL, "API_TOKEN"]
        .into_iter()
        .map(|name| {
            let client = Arc::clone(&client);
            std::thread::spawn(move || client.get(name).unwrap())
        })
        .collect();
    for reader in readers {
        reader.join().unwrap();
    }
    let keys = stub
        .targets()
        .iter()
        .filter(|t| t.ends_with("/e2e/key"))
        .count();
    assert_eq!(keys, 1, "{:?}", stub.targets());
}

#[test]
fn a_team_key_fetched_across_clear_cache_or_a_403_is_not_held() {
    for interruption in ["clear_cache", "403"] {
        let team = Team::from_vectors();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&in_flight);
        let slow = Arc::clone(&team);
        let stub = serve(&team, move |req| {
            if req.path().ends_with("/secrets/by-name/DENIED") {
                return Some(error(403, "Akses ditolak"));
            }
            req.path().ends_with("/e2e/key").then(|| {
                seen.fetch_add(1, Ordering::SeqCst);
                Reply::Slow(Duration::from_millis(400), Box::new(slow.reply(req)))
            })
        });
        let client = Arc::new(
            Client::new(ClientOptions {
                cache_ttl: Some(Duration::ZERO),
                ..options(&team, &stub)
            })
            .unwrap(),
        );
        let reader = {
            let client = Arc::clone(&client);
            std::thread::spawn(move || client.get(DATABASE_URL))
        };
        let waited = std::time::Instant::now();
        while in_flight.load(Ordering::SeqCst) == 0 {
            assert!(waited.elapsed() < Duration::from_secs(5), "no key request");
            std::thread::sleep(Duration::from_millis(5));
        }
        match interruption {
            "clear_cache" => client.clear_cache(),
            _ => assert!(matches!(
                client.get("DENIED"),
                Err(Error::PermissionDenied { .. })
            )),
        }
        assert_eq!(
            reader.join().unwrap().unwrap(),
            Team::vector_value("production", DATABASE_URL),
            "the read in flight opens its value with the key it fetched"
        );

        client.get(DATABASE_URL).unwrap();
        let keys = stub
            .targets()
            .iter()
            .filter(|t| t.ends_with("/e2e/key"))
            .count();
        assert_eq!(
            keys,
            2,
            "{interruption}: the key fetched before it is not held: {:?}",
            stub.targets()
        );
    }
}
