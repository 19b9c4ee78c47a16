//! The shared vectors (`conformance/vectors/e2e.json`, read from the
//! repository as the tests run) and the formats' edge cases.

use super::*;

use serde_json::Value;

/// vectors reads the vectors every language opens, from the repository.
fn vectors() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance/vectors/e2e.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("read {}: {err}", path.display()));
    serde_json::from_str(&text).expect("the vectors are JSON")
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string"))
}

/// token_key is the key of a token `cvsm_<64 zeros>.<private_key>`,
/// pinned at the vectors' key version 2.
fn token_key(private_key: &str) -> TokenKey {
    let token = format!(
        "cvsm_{}.{private_key}.2.i-612c5I1Tbb7YLSPOxx-TgMpS3QP7gpp259k1AnVio",
        "0".repeat(64)
    );
    split_token(&token).unwrap().1.expect("a key part")
}

fn b64u(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// team_key unwraps the vectors' token recipient's wrap.
fn team_key(v: &Value) -> TeamKey {
    let token = &v["recipients"][1];
    assert_eq!(text(token, "what"), "token");
    TeamKey::unwrap(
        text(token, "wrapped_key"),
        text(v, "team_id"),
        v["key_version"].as_u64().unwrap(),
        &token_key(text(token, "private_key")),
        &[],
    )
    .unwrap()
}

#[test]
fn every_recipient_unwraps_the_team_key_of_the_vectors() {
    let v = vectors();
    let team_id = text(&v, "team_id");
    let version = v["key_version"].as_u64().unwrap();
    // A probe sealed here under the vectors' team_key opens with each
    // unwrapped key only if that key is the team_key.
    let expected = URL_SAFE_NO_PAD.decode(text(&v, "team_key")).unwrap();
    let nonce = [7u8; NONCE_LEN];
    let mut probe = b"probe".to_vec();
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &expected).unwrap())
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(b"aad"),
            &mut probe,
        )
        .unwrap();

    let recipients = v["recipients"].as_array().unwrap();
    assert_eq!(recipients.len(), 2);
    for recipient in recipients {
        let key = token_key(text(recipient, "private_key"));
        assert_eq!(
            b64u(key.public.as_bytes()),
            text(recipient, "public_key"),
            "{}",
            recipient["what"]
        );
        let unwrapped =
            TeamKey::unwrap(text(recipient, "wrapped_key"), team_id, version, &key, &[]).unwrap();
        assert_eq!(unwrapped.version(), version);
        let mut copy = probe.clone();
        assert_eq!(
            open_with(&unwrapped.keys[&version], &nonce, &mut copy, b"aad").unwrap(),
            b"probe",
            "{} unwraps team_key",
            recipient["what"]
        );
    }
}

#[test]
fn a_wrap_opens_only_for_its_team_its_key_version_and_its_recipient() {
    let v = vectors();
    let team_id = text(&v, "team_id");
    let version = v["key_version"].as_u64().unwrap();
    let token = &v["recipients"][1];
    let wrapped = text(token, "wrapped_key");
    let key = token_key(text(token, "private_key"));
    let member = token_key(text(&v["recipients"][0], "private_key"));
    let fails = |wrapped: &str, team_id: &str, version: u64, key: &TokenKey| {
        TeamKey::unwrap(wrapped, team_id, version, key, &[]).unwrap_err()
    };
    assert_eq!(
        fails(wrapped, team_id, version + 1, &key),
        Failure::DoesNotOpen
    );
    assert_eq!(
        fails(
            wrapped,
            "00000000-0000-4000-8000-000000000000",
            version,
            &key
        ),
        Failure::DoesNotOpen
    );
    assert_eq!(
        fails(wrapped, team_id, version, &member),
        Failure::DoesNotOpen
    );
    let mut tampered = wrapped.to_string();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'Q' } else { 'A' });
    assert!(TeamKey::unwrap(&tampered, team_id, version, &key, &[]).is_err());
    for malformed in [
        "",
        "cvsm-wrap1.",
        "cvsm-wrap1.a.b",
        "cvsm-wrap2.AAAA.AAAA.AAAA",
        &wrapped.replacen("cvsm-wrap1.", "cvsm-wrap1.AAAA", 1),
        &format!("{wrapped}.AAAA"),
        &format!("{wrapped}="),
    ] {
        assert!(
            matches!(
                TeamKey::unwrap(malformed, team_id, version, &key, &[]),
                Err(Failure::Malformed(_))
            ),
            "{malformed:?}"
        );
    }
}

#[test]
fn a_wrap_from_a_low_order_ephemeral_key_is_refused() {
    let v = vectors();
    let key = token_key(text(&v["recipients"][1], "private_key"));
    // The all-zero point makes an all-zero shared secret.
    let wrapped = format!(
        "cvsm-wrap1.{}.{}.{}",
        b64u(&[0; KEY]),
        b64u(&[0; NONCE_LEN]),
        b64u(&[0; KEY + TAG])
    );
    assert_eq!(
        TeamKey::unwrap(&wrapped, text(&v, "team_id"), 2, &key, &[]).unwrap_err(),
        Failure::LowOrder
    );
}

#[test]
fn every_value_of_the_vectors_opens_or_fails_as_it_says() {
    let v = vectors();
    let key = team_key(&v);
    let values = v["values"].as_array().unwrap();
    assert!(values.len() >= 9, "{}", values.len());
    for entry in values {
        let envelope = text(entry, "envelope");
        let (environment, name) = (text(entry, "environment"), text(entry, "name"));
        let opened = Envelope::parse(envelope).and_then(|e| key.open(&e, environment, name));
        if entry["opens"].as_bool().unwrap() {
            assert_eq!(opened.as_deref(), Ok(text(entry, "value")), "{envelope}");
        } else {
            assert!(opened.is_err(), "{}: {opened:?}", text(entry, "why"));
        }
    }
}

#[test]
fn envelopes_are_read_field_by_field_and_anything_else_is_malformed() {
    let v = vectors();
    let good = text(&v["values"][0], "envelope");
    let envelope = Envelope::parse(good).unwrap();
    assert_eq!(envelope.key_version, 2);
    assert_eq!(envelope.secret_id, "0b6d3e2a-8f41-4a5c-b3d2-7e9c1f0a4b58");
    assert_eq!(envelope.version, 1);
    let debug = format!("{envelope:?}");
    assert!(!debug.contains("jrci1"), "{debug}");

    let parts: Vec<&str> = good.split('.').collect();
    let with = |i: usize, field: &str| {
        let mut parts = parts.clone();
        parts[i] = field;
        parts.join(".")
    };
    for malformed in [
        String::new(),
        good.replacen("cvsm-e2e1", "cvsm-e2e2", 1),
        format!("{good}.x"),
        good.rsplit_once('.').unwrap().0.to_string(),
        with(1, "0"),
        with(1, "02"),
        with(1, "-2"),
        with(1, "12345678901"),
        with(3, "01"),
        with(2, "0B6D3E2A-8F41-4A5C-B3D2-7E9C1F0A4B58"),
        with(2, "0b6d3e2a8f414a5cb3d27e9c1f0a4b58"),
        with(4, "AAAA"),
        with(4, "1UAZqBxO0Rj3e2D1="),
        with(5, "AAAA"),
        with(5, "A"),
        format!("{good}="),
        format!(" {good}"),
    ] {
        assert!(
            matches!(Envelope::parse(&malformed), Err(Failure::Malformed(_))),
            "{malformed:?}"
        );
    }
}

#[test]
fn the_vectors_token_splits_into_its_api_token_and_private_key() {
    let v = vectors();
    let token = &v["token"];
    let (api_token, key) = split_token(text(token, "token")).unwrap();
    assert_eq!(api_token, text(token, "api_token"));
    let key = key.expect("a key part");
    assert_eq!(b64u(key.secret.as_bytes()), text(token, "private_key"));
    assert_eq!(
        b64u(key.public.as_bytes()),
        text(&v["recipients"][1], "public_key")
    );
    assert_eq!(format!("{key:?}"), "TokenKey([redacted])");
}

#[test]
fn every_bad_token_of_the_vectors_is_refused_without_quoting_it() {
    let v = vectors();
    let bad = v["bad_tokens"].as_array().unwrap();
    assert!(bad.len() >= 4);
    for token in bad {
        let token = token.as_str().unwrap();
        let message = split_token(token).map(|_| ()).unwrap_err();
        let key_part = token.split_once('.').unwrap().1;
        assert!(
            key_part.len() < 8 || !message.contains(key_part),
            "{message}"
        );
        assert!(!message.contains("cvsm_f7"), "{message}");
    }
    // Base64url whose last character carries stray bits is not canonical.
    let key = text(&v["token"], "private_key");
    let stray = format!("{}1", &key[..42]);
    assert!(URL_SAFE_NO_PAD.decode(&stray).is_err());
    let token = format!(
        "{}.{stray}.1.{}",
        text(&v["token"], "api_token"),
        text(&v["token"], "commitment")
    );
    assert!(split_token(&token).is_err());
    let upper = format!(
        "cvsm_{}.{key}.1.{}",
        text(&v["token"], "api_token")[5..].to_uppercase(),
        text(&v["token"], "commitment")
    );
    assert!(split_token(&upper).is_err());
}

#[test]
fn tokens_without_a_key_part_and_jwts_are_sent_as_they_are() {
    for token in [
        "cvsm_f70443af595c7f74fa811f5e05197b6d3160d24ea7b7cb3c14f6ce3145d117c5",
        "cvsm_0123abcd_TOPSECRETTOKEN",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    ] {
        let (bearer, key) = split_token(token).unwrap();
        assert_eq!(bearer, token);
        assert!(key.is_none(), "{token}");
    }
}

#[test]
fn a_first_format_token_is_refused_and_the_pinned_one_parses() {
    let v = vectors();
    assert!(split_token(text(&v, "v1_token")).is_err());
    let (bearer, key) = split_token(text(&v["token"], "token")).unwrap();
    assert_eq!(bearer, text(&v["token"], "api_token"));
    let key = key.expect("a key part");
    assert_eq!(key.pin.0, v["token"]["key_version"].as_u64().unwrap());
    assert_eq!(b64u(&key.pin.1), text(&v["token"], "commitment"));
}

#[test]
fn every_chain_commitment_of_the_vectors_matches() {
    let v = vectors();
    let chain = &v["chain"];
    for key in chain["keys"].as_array().unwrap() {
        let raw = URL_SAFE_NO_PAD.decode(text(key, "team_key")).unwrap();
        let version = key["key_version"].as_u64().unwrap();
        assert_eq!(
            b64u(&commitment(&raw, text(chain, "team_id"), version)),
            text(key, "commitment")
        );
    }
}

#[test]
fn every_token_pin_of_the_vectors_verifies_or_is_an_integrity_failure() {
    let v = vectors();
    let pins = v["token_pins"].as_array().unwrap();
    assert!(pins.len() >= 9);
    for case in pins {
        let (_, key) = split_token(text(case, "token")).unwrap();
        let key = key.unwrap();
        let answer = &case["key_answer"];
        let links: Vec<Link<'_>> = answer["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| Link {
                key_version: l["key_version"].as_u64().unwrap(),
                link: text(l, "link"),
            })
            .collect();
        let got = TeamKey::unwrap(
            text(answer, "wrapped_key"),
            text(answer, "team_id"),
            answer["key_version"].as_u64().unwrap(),
            &key,
            &links,
        );
        match text(case, "outcome") {
            "ok" => {
                let team = got.unwrap_or_else(|e| panic!("{}: {e}", text(case, "why")));
                // Every key version down to the pin is reached.
                for version in key.pin.0..=team.version() {
                    assert!(team.has(version), "{}", text(case, "why"));
                }
            }
            _ => assert!(
                matches!(got, Err(Failure::Chain(_))),
                "{}",
                text(case, "why")
            ),
        }
    }
}
