//! An end-to-end team for the stub server: the shared vectors
//! (`conformance/vectors/e2e.json`, read from the repository), values sealed
//! here under their team key as a writing client would, and the vectors' team
//! key wrapped to their token (docs/e2e.md, format 2, with its back-links).

use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use serde_json::{json, Value};

use super::{error, json, Reply, Request, TEAM_SLUG};

/// vectors reads the vectors every language opens, from the repository.
pub fn vectors() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance/vectors/e2e.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("read {}: {err}", path.display()));
    serde_json::from_str(&text).expect("the vectors are JSON")
}

fn text(value: &Value, key: &str) -> String {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string"))
        .to_string()
}

fn b64u(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// seal is AES-256-GCM with the tag appended.
fn seal(key: &[u8], nonce: [u8; 12], plain: &[u8], aad: &str) -> Vec<u8> {
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).unwrap());
    let mut data = plain.to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad.as_bytes()),
        &mut data,
    )
    .unwrap();
    data
}

/// Sealed is one secret as the server holds it: its envelope.
#[derive(Clone)]
struct Sealed {
    environment: String,
    name: String,
    envelope: String,
}

struct State {
    key_version: u64,
    team_key: Vec<u8>,
    wrapped_key: String,
    /// links are the back-links (format 2) by key version, ascending.
    links: Vec<(u64, String)>,
    secrets: Vec<Sealed>,
    /// sealed counts the values sealed here, for their nonces and ids.
    sealed: u32,
}

/// Team is an end-to-end team of the stub server, at the vectors' key
/// version with their team key, holding their values that open.
pub struct Team {
    /// team_id is the vectors' team id; the stub also takes TEAM_SLUG.
    pub team_id: String,
    /// token is the vectors' token with its key part.
    pub token: String,
    /// api_token is the part before the dot: the only one sent.
    pub api_token: String,
    /// private_key is the key part, base64url.
    pub private_key: String,
    state: Mutex<State>,
}

impl Team {
    /// from_vectors holds DATABASE_URL (production), API_KEY (staging) and
    /// QUOTED (development) as the vectors sealed them.
    pub fn from_vectors() -> Arc<Team> {
        let v = vectors();
        let recipient = &v["recipients"][1];
        assert_eq!(text(recipient, "what"), "token");
        let mut secrets: Vec<Sealed> = Vec::new();
        for entry in v["values"].as_array().unwrap() {
            let sealed = Sealed {
                environment: text(entry, "environment"),
                name: text(entry, "name"),
                envelope: text(entry, "envelope"),
            };
            let taken = secrets
                .iter()
                .any(|s| s.environment == sealed.environment && s.name == sealed.name);
            if entry["opens"].as_bool().unwrap() && !taken {
                secrets.push(sealed);
            }
        }
        Arc::new(Team {
            team_id: text(&v, "team_id"),
            token: text(&v["token"], "token"),
            api_token: text(&v["token"], "api_token"),
            private_key: text(&v["token"], "private_key"),
            state: Mutex::new(State {
                key_version: v["key_version"].as_u64().unwrap(),
                team_key: URL_SAFE_NO_PAD.decode(text(&v, "team_key")).unwrap(),
                wrapped_key: text(recipient, "wrapped_key"),
                links: v["chain"]["links"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| (l["key_version"].as_u64().unwrap(), text(l, "link")))
                    .filter(|(version, _)| *version <= v["key_version"].as_u64().unwrap())
                    .collect(),
                secrets,
                sealed: 0,
            }),
        })
    }

    /// value returns the value the vectors sealed for `name` in `environment`.
    pub fn vector_value(environment: &str, name: &str) -> String {
        vectors()["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| {
                e["opens"].as_bool().unwrap()
                    && e["environment"] == environment
                    && e["name"] == name
            })
            .map(|e| text(e, "value"))
            .expect("a value of the vectors")
    }

    /// put seals `value` for `name` in `environment` under the current team
    /// key (a new secret at version 1) and holds it in place of any other.
    pub fn put(&self, environment: &str, name: &str, value: &str) {
        let envelope = self.seal(environment, name, value);
        self.put_envelope(environment, name, &envelope);
    }

    /// seal returns `value` sealed for `name` in `environment` under the
    /// current team key, as a writing client seals it.
    pub fn seal(&self, environment: &str, name: &str, value: &str) -> String {
        let mut state = self.state.lock().unwrap();
        state.sealed += 1;
        let n = state.sealed;
        let secret_id = format!("5ea1ed00-0000-4000-8000-{n:012}");
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&n.to_be_bytes());
        let aad = format!(
            "cvsm-e2e:v1:secret:{}:{secret_id}:1:{environment}:{name}",
            self.team_id
        );
        let ct = seal(&state.team_key, nonce, value.as_bytes(), &aad);
        format!(
            "cvsm-e2e1.{}.{secret_id}.1.{}.{}",
            state.key_version,
            b64u(&nonce),
            b64u(&ct)
        )
    }

    /// put_envelope holds `envelope` as the value of `name` in `environment`.
    pub fn put_envelope(&self, environment: &str, name: &str, envelope: &str) {
        let mut state = self.state.lock().unwrap();
        state
            .secrets
            .retain(|s| !(s.environment == environment && s.name == name));
        state.secrets.push(Sealed {
            environment: environment.to_string(),
            name: name.to_string(),
            envelope: envelope.to_string(),
        });
    }

    /// reply answers like the server for an end-to-end team: the by-name
    /// read (`"e2e": true`, the envelope as the value), the JSON export
    /// (envelopes by name, marked `Cvsm-E2E: 1`), the listing and
    /// `GET .../e2e/key`. A bearer other than the API token is a 401.
    pub fn reply(&self, req: &Request) -> Reply {
        if req.header("authorization") != Some(&format!("Bearer {}", self.api_token)) {
            return error(401, "Token tidak valid");
        }
        let path = req.path();
        let query = req.target.split_once('?').map(|(_, q)| q).unwrap_or("");
        let param = |key: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
                .map(str::to_string)
        };
        let Some(rest) = path.strip_prefix("/api/v1/teams/") else {
            return error(404, "Data tidak ditemukan");
        };
        let (team, rest) = rest.split_once('/').unwrap_or((rest, ""));
        if team != self.team_id && team != TEAM_SLUG {
            return error(404, "Tim tidak ditemukan");
        }
        let state = self.state.lock().unwrap();
        let environment = param("environment").unwrap_or_else(|| "production".into());
        let here = state
            .secrets
            .iter()
            .filter(|s| s.environment == environment);
        match rest {
            "e2e/key" => json(
                200,
                json!({
                    "team_id": self.team_id,
                    "key_version": state.key_version,
                    "wrapped_key": state.wrapped_key,
                    "links": state
                        .links
                        .iter()
                        .map(|(version, link)| json!({"key_version": version, "link": link}))
                        .collect::<Vec<_>>(),
                }),
            ),
            "secrets/export" => Reply::Headers(
                200,
                vec![("Cvsm-E2E", "1".into())],
                Value::Object(
                    here.map(|s| (s.name.clone(), Value::String(s.envelope.clone())))
                        .collect(),
                )
                .to_string(),
            ),
            "secrets" => json(200, json!({ "secrets": [], "total": 0 })),
            _ => match rest.strip_prefix("secrets/by-name/") {
                Some(name) => match here.into_iter().find(|s| s.name == name) {
                    Some(s) => json(
                        200,
                        json!({
                            "secret": { "name": s.name, "environment": s.environment },
                            "value": s.envelope,
                            "e2e": true,
                        }),
                    ),
                    None => error(404, "Secret tidak ditemukan"),
                },
                None => error(404, "Data tidak ditemukan"),
            },
        }
    }
}
