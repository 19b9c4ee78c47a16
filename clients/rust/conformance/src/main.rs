//! cvsm-conformance-driver speaks the conformance protocol
//! (`conformance/PROTOCOL.md`): one JSON request per line on stdin, one JSON
//! response per line on stdout, one long-lived client between requests.

use std::io::{self, BufRead, Write};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::Duration;

use cvsm::{Client, ClientOptions};
use serde_json::{json, Map, Value};

/// Failure is an op's error: an SDK error (its kind comes from its variant)
/// or a driver-level problem with an explicit kind.
enum Failure {
    Sdk(cvsm::Error),
    Driver { kind: &'static str, message: String },
}

impl From<cvsm::Error> for Failure {
    fn from(err: cvsm::Error) -> Self {
        Failure::Sdk(err)
    }
}

impl Failure {
    fn internal(message: impl Into<String>) -> Self {
        Failure::Driver {
            kind: "internal",
            message: message.into(),
        }
    }

    /// configuration reports an option value the Rust types cannot hold
    /// (a negative or fractional count, a non-string token): the SDK would
    /// reject it as a configuration error, so the driver does too.
    fn configuration(message: impl Into<String>) -> Self {
        Failure::Driver {
            kind: "configuration",
            message: message.into(),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Failure::Sdk(err) => json!({
                "kind": kind_of(err),
                "message": err.to_string(),
                "status": err.status(),
                "retry_after": err.retry_after(),
                "request_id": err.request_id(),
                "suggestion": err.suggestion(),
            }),
            Failure::Driver { kind, message } => json!({
                "kind": kind,
                "message": message,
                "status": null,
                "retry_after": null,
                "request_id": null,
                "suggestion": null,
            }),
        }
    }
}

/// kind_of maps an error's variant (never its message) to the protocol kind.
fn kind_of(err: &cvsm::Error) -> &'static str {
    match err {
        cvsm::Error::Configuration { .. } => "configuration",
        cvsm::Error::Authentication { .. } => "authentication",
        cvsm::Error::PermissionDenied { .. } => "permission_denied",
        cvsm::Error::NotFound { .. } => "not_found",
        cvsm::Error::RateLimited { .. } => "rate_limited",
        cvsm::Error::Api { .. } => "api",
        cvsm::Error::Network { .. } => "network",
        cvsm::Error::Decryption { .. } => "decryption",
        _ => "internal",
    }
}

type OpResult = Result<Value, Failure>;

#[derive(Default)]
struct Driver {
    client: Option<Client>,
}

impl Driver {
    fn handle(&mut self, op: &str, args: &Map<String, Value>) -> OpResult {
        match op {
            "new_client" => self.new_client(args),
            "get" => {
                let name = string_arg(args, "name")?;
                let served = self.client()?.get_with_meta(&name)?;
                Ok(with_stale(json!({ "value": served.value }), served.stale))
            }
            "refresh" => {
                let name = string_arg(args, "name")?;
                let client = self.client()?;
                let value = match args.get("environment") {
                    None | Some(Value::Null) => client.refresh(&name)?,
                    Some(Value::String(environment)) => client.refresh_in(&name, environment)?,
                    Some(_) => return Err(Failure::internal("environment must be a string")),
                };
                Ok(json!({ "value": value }))
            }
            "get_all" => {
                let served = self.client()?.get_all_with_meta()?;
                Ok(with_stale(json!({ "values": served.value }), served.stale))
            }
            "inject" => {
                let overwrite = match args.get("overwrite") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(Failure::internal("overwrite must be a boolean")),
                };
                Ok(json!({ "names": self.client()?.inject(overwrite)? }))
            }
            "clear_cache" => {
                self.client()?.clear_cache();
                Ok(json!({}))
            }
            "describe" => Ok(json!({ "text": format!("{:?}", self.client()?) })),
            "set_env" => set_env(args),
            "get_env" => get_env(args),
            "capabilities" => {
                Ok(json!({ "capabilities": ["tls_ca_file", "proxy_env", "live", "refresh"] }))
            }
            "shutdown" => Ok(json!({})),
            other => Err(Failure::Driver {
                kind: "unsupported",
                message: format!("unknown op {other:?}"),
            }),
        }
    }

    fn client(&self) -> Result<&Client, Failure> {
        self.client
            .as_ref()
            .ok_or_else(|| Failure::internal("no client: new_client has not succeeded"))
    }

    fn new_client(&mut self, args: &Map<String, Value>) -> OpResult {
        self.client = None;
        let empty = Map::new();
        let options = match args.get("options") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(options)) => options,
            Some(_) => return Err(Failure::internal("options must be an object")),
        };
        let client = Client::new(ClientOptions {
            token: string_option(options, "token")?,
            base_url: string_option(options, "base_url")?,
            team: string_option(options, "team")?,
            environment: string_option(options, "environment")?,
            cache_ttl: seconds_option(options, "cache_ttl", true)?,
            timeout: seconds_option(options, "timeout", false)?,
            max_retries: match options.get("max_retries") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                    || Failure::configuration("max_retries must be a non-negative integer"),
                )?),
            },
            ca_file: string_option(options, "ca_file")?.map(PathBuf::from),
            stale_if_error: seconds_option(options, "stale_if_error", true)?,
            live: match options.get("live") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(live)) => *live,
                Some(_) => return Err(Failure::configuration("live must be a boolean")),
            },
        })?;
        let config = json!({
            "base_url": client.base_url(),
            "team": client.team(),
            "environment": client.environment(),
            "cache_ttl": seconds_json(client.cache_ttl()),
            "timeout": seconds_json(client.timeout()),
            "max_retries": client.max_retries(),
            "stale_if_error": seconds_json(client.stale_if_error()),
        });
        self.client = Some(client);
        Ok(json!({ "config": config }))
    }
}

/// with_stale adds `"stale": true` to a result served stale, the SDK's own
/// signal ([`cvsm::Served::stale`]); a fresh result has no `stale` key.
fn with_stale(mut result: Value, stale: Option<cvsm::Error>) -> Value {
    if stale.is_some() {
        result["stale"] = Value::Bool(true);
    }
    result
}

fn string_arg(args: &Map<String, Value>, key: &str) -> Result<String, Failure> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Failure::internal(format!("argument {key:?} must be a string")))
}

fn string_option(options: &Map<String, Value>, key: &str) -> Result<Option<String>, Failure> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Failure::configuration(format!("{key} must be a string"))),
    }
}

fn seconds_option(
    options: &Map<String, Value>,
    key: &str,
    integer: bool,
) -> Result<Option<Duration>, Failure> {
    let value = match options.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => value,
    };
    let seconds = if integer {
        value.as_u64().map(Duration::from_secs)
    } else {
        value
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
    };
    let kind = if integer { "integer" } else { "number" };
    seconds.map(Some).ok_or_else(|| {
        Failure::configuration(format!("{key} must be a non-negative {kind} of seconds"))
    })
}

/// seconds_json reports whole seconds as an integer, others as a float.
fn seconds_json(duration: Duration) -> Value {
    if duration.subsec_nanos() == 0 {
        json!(duration.as_secs())
    } else {
        json!(duration.as_secs_f64())
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

fn set_env(args: &Map<String, Value>) -> OpResult {
    if let Some(set) = args.get("set").filter(|v| !v.is_null()) {
        let set = set
            .as_object()
            .ok_or_else(|| Failure::internal("set must be an object"))?;
        for (name, value) in set {
            let value = value
                .as_str()
                .ok_or_else(|| Failure::internal(format!("value of {name:?} must be a string")))?;
            if !valid_env_name(name) || value.contains('\0') {
                return Err(Failure::internal(format!("cannot set variable {name:?}")));
            }
            std::env::set_var(name, value);
        }
    }
    for name in names_arg(args, "unset")? {
        if !valid_env_name(&name) {
            return Err(Failure::internal(format!("cannot unset variable {name:?}")));
        }
        std::env::remove_var(name);
    }
    Ok(json!({}))
}

fn get_env(args: &Map<String, Value>) -> OpResult {
    let mut values = Map::new();
    for name in names_arg(args, "names")? {
        let value = std::env::var_os(&name)
            .map(|v| Value::String(v.to_string_lossy().into_owned()))
            .unwrap_or(Value::Null);
        values.insert(name, value);
    }
    Ok(json!({ "values": values }))
}

fn names_arg(args: &Map<String, Value>, key: &str) -> Result<Vec<String>, Failure> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Failure::internal(format!("{key} must hold strings")))
            })
            .collect(),
        Some(_) => Err(Failure::internal(format!("{key} must be an array"))),
    }
}

/// StderrLogger writes the SDK's `log` records (the stale-value warnings of
/// rule R14) to stderr, which the harness keeps for debugging; stdout
/// carries protocol lines only.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!("{} {}: {}", record.level(), record.target(), record.args());
        }
    }

    fn flush(&self) {}
}

fn main() {
    if log::set_logger(&StderrLogger).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    let mut driver = Driver::default();
    let stdin = io::stdin();
    let mut stdout = io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let request: Value = match serde_json::from_str(&line) {
            Ok(request) => request,
            Err(err) => {
                let failure = Failure::internal(format!("request is not JSON: {err}"));
                let response = json!({ "id": null, "ok": false, "error": failure.to_json() });
                if writeln!(stdout, "{response}")
                    .and_then(|_| stdout.flush())
                    .is_err()
                {
                    break;
                }
                continue;
            }
        };
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let op = request.get("op").and_then(Value::as_str).unwrap_or("");
        let empty = Map::new();
        let args = request
            .get("args")
            .and_then(Value::as_object)
            .unwrap_or(&empty);

        let outcome = panic::catch_unwind(AssertUnwindSafe(|| driver.handle(op, args)))
            .unwrap_or_else(|_| Err(Failure::internal("the driver panicked (see stderr)")));
        let response = match outcome {
            Ok(result) => json!({ "id": id, "ok": true, "result": result }),
            Err(failure) => json!({ "id": id, "ok": false, "error": failure.to_json() }),
        };
        if writeln!(stdout, "{response}")
            .and_then(|_| stdout.flush())
            .is_err()
        {
            break;
        }
        if op == "shutdown" {
            break;
        }
    }
}
