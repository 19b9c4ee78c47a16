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

fn by_name(team: &Team, name: &str) -> String {
    format!(
        "/api/v1/teams/{}/secrets/by-name/{name}?environment=production",
        team.team_id
    )
}

fn key_path(team: &Team) -> String {
    format!("/api/v1/teams/{}/e2e/key", team.team_id)
}

fn decryption_message(result: cvsm::Result<impl std::fmt::Debug>) -> String {
    decryption_error(result).to_string()
}

/// decryption_error returns the decryption error of `result`, which has no
/// status and carries a request id (every answer of the stub has one).
fn decryption_error(result: cvsm::Result<impl std::fmt::Debug>) -> Error {
    match result {
        Err(err @ Error::Decryption { .. }) => {
            assert_eq!(err.status(), None);
            assert!(err.request_id().is_some(), "{err:?}");
            assert_eq!(err.message(), err.to_string());
            err
        }
        other => panic!("expected a decryption error, got {other:?}"),
    }
}

// Each environment's values opening for the name and environment read is the conformance
// cases e2e_get_opens_value and e2e_get_all_opens_values.

#[test]
fn the_team_key_is_held_with_a_zero_ttl_too() {
    let team = Team::from_vectors();
    let stub = serve(&team, no_errors);
    let client = Client::new(ClientOptions {
        cache_ttl: Some(Duration::ZERO),
        ..options(&team, &stub)
    })
    .unwrap();
    client.get(DATABASE_URL).unwrap();
    client.get(DATABASE_URL).unwrap();
    assert_eq!(
        stub.targets(),
        vec![
            by_name(&team, DATABASE_URL),
            key_path(&team),
            by_name(&team, DATABASE_URL),
        ],
        "values are not cached, the key is"
    );
}

/// moving_the_flag serves `team` with the by-name answer's `"e2e": true`
/// in its secret object instead of beside the value.
fn moving_the_flag(team: &Arc<Team>) -> Stub {
    let team = Arc::clone(team);
    Stub::start(move |req| match team.reply(req) {
        Reply::Json(200, body) => {
            let mut answer: serde_json::Value = serde_json::from_str(&body).unwrap();
            if answer.get("e2e").is_some() {
                answer.as_object_mut().unwrap().remove("e2e");
                answer["secret"]["e2e"] = true.into();
            }
            Reply::Json(200, answer.to_string())
        }
        reply => reply,
    })
}

#[test]
fn a_keyless_token_takes_an_export_without_the_header_as_it_is() {
    // A plain team's export carries no `Cvsm-E2E`: its values are served as
    // they come, whatever they look like.
    let team = Team::from_vectors();
    let served = Arc::clone(&team);
    let stub = Stub::start(move |req| match served.reply(req) {
        Reply::Headers(200, _, body) => Reply::Json(200, body),
        reply => reply,
    });
    let plain = Client::new(ClientOptions {
        token: Some(team.api_token.clone()),
        ..options(&team, &stub)
    })
    .unwrap();
    let values = plain.get_all().unwrap();
    assert_eq!(
        values[DATABASE_URL],
        team.envelope("production", DATABASE_URL)
    );
    assert!(values[DATABASE_URL].starts_with("cvsm-e2e1."));
    assert_eq!(stub.count(), 1);
}

#[test]
fn the_flag_in_the_secret_object_reads_like_the_flag_beside_the_value() {
    let team = Team::from_vectors();
    let stub = moving_the_flag(&team);
    let client = Client::new(options(&team, &stub)).unwrap();
    assert_eq!(
        client.get(DATABASE_URL).unwrap(),
        Team::vector_value("production", DATABASE_URL)
    );
    assert_eq!(stub.count(), 2);
}

#[test]
fn a_re_keyed_team_is_read_after_one_key_refetch() {
    let team = Team::from_vectors();
    let stub = serve(&team, no_errors);
    let client = Client::new(ClientOptions {
        cache_ttl: Some(Duration::ZERO),
        ..options(&team, &stub)
    })
    .unwrap();
    client.get(DATABASE_URL).unwrap();
    assert_eq!(stub.count(), 2);

    team.rekey(&[("production", DATABASE_URL, "postgres://rotated")]);
    assert_eq!(team.key_version(), 3);
    assert!(team
        .envelope("production", DATABASE_URL)
        .starts_with("cvsm-e2e1.3."));
    assert_eq!(client.get(DATABASE_URL).unwrap(), "postgres://rotated");
    assert_eq!(
        stub.targets()[2..],
        [by_name(&team, DATABASE_URL), key_path(&team)],
        "the held key is version 2: fetched once more"
    );
    assert_eq!(client.get(DATABASE_URL).unwrap(), "postgres://rotated");
    assert_eq!(stub.count(), 5, "version 3 is held now");
}

#[test]
fn an_envelope_of_a_key_version_the_server_does_not_give_fails_after_one_refetch() {
    let team = Team::from_vectors();
    let stub = serve(&team, no_errors);
    let client = Client::new(ClientOptions {
        cache_ttl: Some(Duration::ZERO),
        ..options(&team, &stub)
    })
    .unwrap();
    client.get(DATABASE_URL).unwrap();
    let envelope = team.envelope("production", DATABASE_URL);
    team.put_envelope(
        "production",
        DATABASE_URL,
        &envelope.replacen("cvsm-e2e1.2.", "cvsm-e2e1.3.", 1),
    );
    let err = decryption_error(client.get(DATABASE_URL));
    assert_eq!(err.request_id(), Some("req-3"), "the read, not the key");
    let message = err.to_string();
    assert!(message.contains("key version 3"), "{message}");
    assert!(message.contains("key version 2"), "{message}");
    assert_eq!(
        stub.targets()[2..],
        [by_name(&team, DATABASE_URL), key_path(&team)],
        "one refetch, no more"
    );
    assert_eq!(stub.count(), 4);
}

#[test]
fn a_team_key_that_does_not_open_with_the_token_is_a_decryption_error() {
    let team = Team::from_vectors();
    team.wrap_for_the_member();
    let stub = serve(&team, no_errors);
    let client = Client::new(options(&team, &stub)).unwrap();
    let err = decryption_error(client.get(DATABASE_URL));
    assert_eq!(err.request_id(), Some("req-2"), "the key answer's");
    let message = err.to_string();
    assert!(message.contains("team key"), "{message}");
    assert!(!message.contains(&team.private_key), "{message}");
    assert_eq!(stub.count(), 2, "never retried");
    decryption_message(client.get_all());
    decryption_message(client.get(DATABASE_URL));
    assert_eq!(stub.count(), 6, "nothing held: each read asks for the key");
}

#[test]
fn key_request_failures_are_the_errors_of_every_get() {
    let team = Team::from_vectors();
    let status = Arc::new(AtomicUsize::new(403));
    let answer = Arc::clone(&status);
    let stub = serve(&team, move |req| {
        req.path()
            .ends_with("/e2e/key")
            .then(|| match answer.load(Ordering::SeqCst) {
                0 => Reply::Drop,
                403 => error(403, "Token ini tidak punya kunci tim"),
                code => error(code as u16, "Gagal"),
            })
    });
    let client = Client::new(ClientOptions {
        max_retries: Some(1),
        ..options(&team, &stub)
    })
    .unwrap();

    let err = client.get(DATABASE_URL).unwrap_err();
    assert!(
        matches!(err, Error::PermissionDenied { status: 403, .. }),
        "{err:?}"
    );
    for (code, configuration) in [(400, true), (404, true), (401, false)] {
        status.store(code, Ordering::SeqCst);
        let err = client.get(DATABASE_URL).unwrap_err();
        assert_eq!(err.status(), Some(code as u16), "{err:?}");
        assert_eq!(
            matches!(err, Error::Configuration { .. }),
            configuration,
            "{err:?}"
        );
    }
    status.store(503, Ordering::SeqCst);
    let before = stub.count();
    let err = client.get(DATABASE_URL).unwrap_err();
    assert!(matches!(err, Error::Api { status: 503, .. }), "{err:?}");
    assert_eq!(
        stub.count() - before,
        3,
        "the read, the key twice (retried)"
    );
    status.store(0, Ordering::SeqCst);
    let before = stub.count();
    let err = client.get(DATABASE_URL).unwrap_err();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert_eq!(stub.count() - before, 3);
}

#[test]
fn a_failed_key_refresh_can_serve_the_kept_value() {
    let team = Team::from_vectors();
    let down = Arc::new(AtomicUsize::new(0));
    let flag = Arc::clone(&down);
    let stub = serve(&team, move |req| {
        (flag.load(Ordering::SeqCst) == 1 && req.path().ends_with("/e2e/key"))
            .then(|| error(503, "Sedang gangguan"))
    });
    let client = Client::new(ClientOptions {
        cache_ttl: Some(Duration::ZERO),
        stale_if_error: Some(Duration::from_secs(300)),
        max_retries: Some(0),
        ..options(&team, &stub)
    })
    .unwrap();
    let value = client.get(DATABASE_URL).unwrap();
    down.store(1, Ordering::SeqCst);
    team.rekey(&[("production", DATABASE_URL, "postgres://rotated")]);
    let served = client.get_with_meta(DATABASE_URL).unwrap();
    assert!(
        matches!(served.stale, Some(Error::Api { status: 503, .. })),
        "{served:?}"
    );
    assert_eq!(served.value, value, "the value kept from before");
}

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
fn a_token_with_a_key_part_opens_the_value_even_when_the_answer_omits_the_e2e_flag() {
    // A server that drops "e2e": true cannot pass off a value of its own.
    let team = Team::from_vectors();
    let served = Arc::clone(&team);
    let stub = Stub::start(move |req| match served.reply(req) {
        Reply::Json(200, body) => {
            let mut answer: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(answer) = answer.as_object_mut() {
                answer.remove("e2e");
            }
            Reply::Json(200, answer.to_string())
        }
        reply => reply,
    });
    team.put_envelope("production", "FORGED", "postgres://attacker");
    let client = Client::new(options(&team, &stub)).unwrap();
    let message = decryption_message(client.get("FORGED"));
    assert!(message.contains("\"FORGED\""), "{message}");
    assert!(!message.contains("attacker"), "{message}");
    assert_eq!(
        client.get(DATABASE_URL).unwrap(),
        Team::vector_value("production", DATABASE_URL)
    );
    let plain = Client::new(ClientOptions {
        token: Some(team.api_token.clone()),
        ..options(&team, &stub)
    })
    .unwrap();
    assert_eq!(
        plain.get("FORGED").unwrap(),
        "postgres://attacker",
        "the flag is gone: a token without a key takes the value as it is"
    );
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
