//! Live caches (`live`, `CVSM_LIVE=1`, rule R16): one connection per client
//! to the team's change stream, followed on a thread of its own.
//!
//! `GET {base_url}/teams/{team}/secrets/changes?environment={env}` answers
//! server-sent events of names and versions, never values: a `snapshot` on
//! each connect, then each `change`, a comment every 15 s while idle, and an
//! `end` before the server closes it. The stream is opened at the client's
//! first read and shared by every name it reads; its events tell the cache
//! which values stopped being current ([`Cache::snapshot`],
//! [`Cache::change`]), and the next read of such a name fetches it.
//!
//! While the stream is down (refused, dropped, no byte for 45 s) the cache
//! works as without `live` (`cache_ttl`, stale-if-error), and the thread
//! reconnects after a jittered, growing pause ([`reconnect_delay`]), sending
//! `Last-Event-ID` when an event carried an `id`. A 401 or 403, and an `end`
//! whose status is 401, 403 or 404, empty the cache as a refused read does;
//! after a 401, 403 or 404 the next attempt waits at least 300 s.
//!
//! Closing or dropping the client stops the thread: at once while it waits
//! to reconnect, else at the stream's next byte (the server sends one at
//! least every 15 s), when it closes the connection. The thread holds the
//! cache and the transport, never the client.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cache::{lock, Cache};
use crate::rules;
use crate::transport::{StreamRefused, Transport};

/// READ_TIMEOUT is how long the stream may stay silent before it counts as
/// lost (the server sends a comment every 15 s while idle); it also bounds
/// connecting.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(rules::LIVE_READ_TIMEOUT_SECONDS);
/// MAX_BACKOFF caps the pause before a reconnection.
const MAX_BACKOFF: Duration = Duration::from_secs(rules::LIVE_MAX_BACKOFF_SECONDS);
/// REFUSED_BACKOFF is the least pause after a 401, 403 or 404: a revoked
/// token is not tried again every few seconds, which would lock its prefix.
const REFUSED_BACKOFF: Duration = Duration::from_secs(rules::LIVE_REFUSED_BACKOFF_SECONDS);
/// MAX_LINE is the longest line of the stream read whole; a longer one
/// (never sent by the server) counts as a broken stream.
const MAX_LINE: u64 = 1 << 20;

/// reconnect_delay returns the pause before reconnection `attempt` (0 for
/// the first): `min(30 s, 0.5 s * 2^attempt)`, taken at random between half
/// and all of it.
pub(crate) fn reconnect_delay(attempt: u32) -> Duration {
    let ceiling = Duration::from_millis(rules::LIVE_BACKOFF_BASE_MS)
        .saturating_mul(1u32 << attempt.min(16))
        .min(MAX_BACKOFF);
    ceiling.mul_f64(0.5 + 0.5 * random_fraction())
}

/// random_fraction returns a number in `[0, 1)`, random enough for jitter.
fn random_fraction() -> f64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// SseDecoder turns the lines of a `text/event-stream` into (event, data)
/// pairs. Comments (`:`) are skipped; `id` is kept in `last_id`, for
/// `Last-Event-ID`.
#[derive(Default)]
pub(crate) struct SseDecoder {
    pub(crate) last_id: Option<String>,
    event: String,
    data: Vec<String>,
}

impl SseDecoder {
    /// line takes one line, without its line ending, and returns the event
    /// a blank line ends, if it carried data.
    pub(crate) fn line(&mut self, line: &str) -> Option<(String, String)> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            let data = std::mem::take(&mut self.data);
            if data.is_empty() {
                return None;
            }
            let event = if event.is_empty() {
                "message".to_string()
            } else {
                event
            };
            return Some((event, data.join("\n")));
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.event = value.to_string(),
            "data" => self.data.push(value.to_string()),
            "id" if !value.contains('\0') => self.last_id = Some(value.to_string()),
            _ => {}
        }
        None
    }
}

/// Signal is what the client and its stream thread share besides the
/// cache: whether the client is closed, and whether the stream is up.
#[derive(Default)]
struct Signal {
    closed: Mutex<bool>,
    wake: Condvar,
    connected: AtomicBool,
}

impl Signal {
    fn closed(&self) -> bool {
        *lock(&self.closed)
    }

    /// wait sleeps for `pause`, or until the client is closed; it returns
    /// whether it was.
    fn wait(&self, pause: Duration) -> bool {
        let deadline = Instant::now() + pause;
        let mut closed = lock(&self.closed);
        while !*closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            closed = self
                .wake
                .wait_timeout(closed, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        *closed
    }
}

/// Live is a live client's handle on its change stream: started at the
/// first read, stopped by [`close`](Live::close).
pub(crate) struct Live {
    signal: Arc<Signal>,
    started: Mutex<bool>,
}

/// Stream is what the thread needs to follow the change stream.
pub(crate) struct Stream {
    pub(crate) transport: Arc<Transport>,
    pub(crate) cache: Arc<Mutex<Cache>>,
    /// path is `/teams/{team}/secrets/changes`, the team encoded.
    pub(crate) path: String,
    pub(crate) environment: String,
    /// describe is "team T, environment E": what log lines name (never a
    /// token).
    pub(crate) describe: String,
}

impl Live {
    pub(crate) fn new() -> Live {
        Live {
            signal: Arc::default(),
            started: Mutex::new(false),
        }
    }

    /// start opens the stream on a thread of its own, once per client and
    /// never after close; `stream` makes what the thread needs.
    pub(crate) fn start(&self, stream: impl FnOnce() -> Stream) {
        let mut started = lock(&self.started);
        if *started || self.signal.closed() {
            return;
        }
        *started = true;
        let follower = Follower {
            stream: stream(),
            signal: Arc::clone(&self.signal),
            last_event_id: None,
            attempt: 0,
            outage_logged: false,
        };
        if let Err(err) = std::thread::Builder::new()
            .name("cvsm-live".into())
            .spawn(move || follower.run())
        {
            log::warn!("cvsm: the live cache cannot start its thread ({err}); values are cached for cache_ttl");
        }
    }

    /// connected tells whether the stream is up now.
    pub(crate) fn connected(&self) -> bool {
        self.signal.connected.load(Ordering::SeqCst)
    }

    /// close stops the stream (see the module's documentation); idempotent.
    pub(crate) fn close(&self) {
        *lock(&self.signal.closed) = true;
        self.signal.connected.store(false, Ordering::SeqCst);
        self.signal.wake.notify_all();
    }
}

/// Ended says why one connection to the stream ended.
enum Ended {
    /// Lost: dropped, closed, silent too long, or ended by the server.
    Lost(String),
    /// Refused: answered with another status than 200, or never answered.
    Refused(StreamRefused),
    /// Closed: the client was closed.
    Closed,
}

/// Follower follows one client's change stream on its thread.
struct Follower {
    stream: Stream,
    signal: Arc<Signal>,
    last_event_id: Option<String>,
    /// attempt counts the reconnections since the last snapshot.
    attempt: u32,
    outage_logged: bool,
}

impl Follower {
    fn run(mut self) {
        loop {
            let pause = match self.follow() {
                Ended::Closed => return,
                Ended::Lost(reason) => self.lost(&reason),
                Ended::Refused(refusal) => self.refused(refusal),
            };
            if self.signal.wait(pause) {
                return;
            }
        }
    }

    /// follow connects once and applies the events until the stream ends.
    fn follow(&mut self) -> Ended {
        let query = [("environment", self.stream.environment.as_str())];
        let mut response = match self.stream.transport.open_stream(
            &self.stream.path,
            &query,
            self.last_event_id.as_deref(),
            READ_TIMEOUT,
        ) {
            Ok(response) => response,
            Err(refusal) => return Ended::Refused(refusal),
        };
        let mut reader = BufReader::new(response.body_mut());
        let mut decoder = SseDecoder::default();
        let mut line = Vec::new();
        loop {
            if self.signal.closed() {
                return Ended::Closed;
            }
            line.clear();
            match Read::take(&mut reader, MAX_LINE).read_until(b'\n', &mut line) {
                Ok(0) => return Ended::Lost("the server closed it".into()),
                Ok(_) if line.last() != Some(&b'\n') => {
                    return Ended::Lost("the server closed it mid-line".into())
                }
                Ok(_) => {}
                // The kind only: the error's text is the transport's.
                Err(err) => return Ended::Lost(format!("read failed: {:?}", err.kind())),
            }
            if self.signal.closed() {
                return Ended::Closed;
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches('\n').trim_end_matches('\r');
            let event = decoder.line(text);
            if let Some(id) = &decoder.last_id {
                self.last_event_id = Some(id.clone());
            }
            if let Some((name, data)) = event {
                if let Some(ended) = self.event(&name, &data) {
                    return ended;
                }
            }
        }
    }

    /// event applies one event; an `end` ends the connection.
    fn event(&mut self, name: &str, data: &str) -> Option<Ended> {
        let Ok(serde_json::Value::Object(payload)) = serde_json::from_str(data) else {
            return None;
        };
        let environment = self.stream.environment.as_str();
        match name {
            "snapshot" => {
                let versions: HashMap<String, i64> = payload
                    .get("secrets")
                    .and_then(serde_json::Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter_map(|(name, item)| Some((name.clone(), item.get("version")?.as_i64()?)))
                    .collect();
                let dropped = lock(&self.stream.cache).snapshot(environment, versions);
                self.attempt = 0;
                if self.outage_logged {
                    log::info!(
                        "cvsm: live cache of {}: the change stream is back ({dropped} cached value(s) changed meanwhile)",
                        self.stream.describe
                    );
                }
                self.outage_logged = false;
                self.signal.connected.store(true, Ordering::SeqCst);
            }
            "change" => {
                let secret = payload.get("name")?.as_str()?;
                if payload
                    .get("environment")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|e| e != environment)
                {
                    return None;
                }
                let version = if payload.get("deleted") == Some(&serde_json::Value::Bool(true)) {
                    None
                } else {
                    Some(payload.get("version")?.as_i64()?)
                };
                lock(&self.stream.cache).change(environment, secret, version);
            }
            "end" => {
                let status = payload.get("status").and_then(serde_json::Value::as_u64);
                let reason = payload
                    .get("reason")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_string);
                if let Some(status @ (401 | 403 | 404)) = status {
                    // Revoked, or no longer in the team: as a refused read.
                    lock(&self.stream.cache).clear();
                    return Some(Ended::Refused(StreamRefused {
                        status: Some(status as u16),
                        retry_after: None,
                        reason: format!("the server ended the change stream (HTTP {status})"),
                    }));
                }
                let why = reason.unwrap_or_else(|| "no reason given".into());
                return Some(Ended::Lost(format!(
                    "the server ended the change stream ({why})"
                )));
            }
            _ => {}
        }
        None
    }

    /// lost notes that the stream is down and returns the pause before the
    /// next attempt.
    fn lost(&mut self, reason: &str) -> Duration {
        self.signal.connected.store(false, Ordering::SeqCst);
        if !self.outage_logged {
            log::warn!(
                "cvsm: live cache of {}: the change stream is down ({reason}); values are cached for cache_ttl until it is back; reconnecting",
                self.stream.describe
            );
            self.outage_logged = true;
        }
        let pause = reconnect_delay(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        pause
    }

    /// refused notes that the stream was refused and returns the pause
    /// before the next attempt.
    fn refused(&mut self, refusal: StreamRefused) -> Duration {
        let mut pause = self.lost(&refusal.reason);
        if matches!(refusal.status, Some(401 | 403)) {
            lock(&self.stream.cache).clear(); // as a refused read does
        }
        if matches!(refusal.status, Some(401 | 403 | 404)) {
            pause = pause.max(REFUSED_BACKOFF);
        }
        if let Some(seconds) = refusal.retry_after {
            pause = pause.max(Duration::from_secs(seconds));
        }
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decoder_reads_events_skips_comments_and_keeps_the_last_id() {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for line in [
            ": heartbeat",
            "",
            "event: snapshot",
            "data: {\"secrets\": {}}",
            "",
            "id: 7",
            "event:change",
            "data: {\"name\":",
            "data:  \"A\"}",
            "retry: 5",
            "",
            "data: plain",
            "",
            "id: bad\0id",
            "",
        ] {
            events.extend(decoder.line(line));
        }
        assert_eq!(
            events,
            [
                ("snapshot".to_string(), "{\"secrets\": {}}".to_string()),
                ("change".to_string(), "{\"name\":\n \"A\"}".to_string()),
                ("message".to_string(), "plain".to_string()),
            ]
        );
        assert_eq!(
            decoder.last_id.as_deref(),
            Some("7"),
            "an id with NUL is ignored"
        );
    }

    #[test]
    fn reconnect_delays_lie_between_half_and_all_of_the_capped_doubling() {
        for attempt in 0..12 {
            let ceiling = (0.5 * 2f64.powi(attempt as i32)).min(30.0);
            for _ in 0..50 {
                let pause = reconnect_delay(attempt).as_secs_f64();
                assert!(
                    pause >= ceiling / 2.0 - 1e-9 && pause <= ceiling + 1e-9,
                    "attempt {attempt}: {pause} not in [{}, {ceiling}]",
                    ceiling / 2.0
                );
            }
        }
        assert!(reconnect_delay(u32::MAX) <= MAX_BACKOFF);
    }

    #[test]
    fn a_wait_ends_at_once_when_the_client_is_closed() {
        let live = Live::new();
        let signal = Arc::clone(&live.signal);
        let waiter = std::thread::spawn(move || signal.wait(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        live.close();
        assert!(waiter.join().unwrap(), "woken by close");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
