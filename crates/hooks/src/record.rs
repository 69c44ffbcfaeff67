//! Recording hook traffic (`--record-hooks DIR`): every exchange the client sends can be
//! handed to a [`HookRecorder`]. [`DirectoryRecorder`] writes one JSON file per exchange
//! so a failing sync can be read, or replayed with `metacontroller render --request FILE`.
//!
//! The hot path only moves reference-counted buffers into a bounded channel; parsing,
//! redaction and the file write happen on a thread of their own. When that thread falls
//! behind, records are dropped (with a warning) rather than slowing syncs down, and a
//! failing write (disk full, permissions) is logged and never fails a hook call. At
//! shutdown the controller waits a bounded time for the queued records to be written
//! ([`HookRecorder::flush`]), so the last exchanges before a SIGTERM are not lost.
//!
//! # File format
//!
//! ```json
//! {"controller": {"kind": "CompositeController", "name": "hello-controller"},
//!  "hook": "sync", "url": "http://hello.hooks/sync",
//!  "startedAt": "2026-11-23T16:17:24.123Z", "durationMs": 3,
//!  "request": {"controller": {}, "parent": {}, "children": {}},
//!  "response": {"status": 200, "body": {"status": {}, "children": []}}}
//! ```
//!
//! * `request` is the body sent; `response.body` the body received, or `null` when it was
//!   empty or not JSON, in which case `response.bodyText` holds it as text. For a `304`/
//!   `412` answer to an ETag, `body` is the cached body the controller used.
//! * `response` is `null` and `error` says why when no status arrived (transport error,
//!   timeout); `error` is also set when the body could not be read (too large).
//! * The `data` and `stringData` values of every core/v1 Secret in the request or the
//!   response (and the last-applied annotations of Secrets) are replaced by `"REDACTED"`;
//!   request headers (credentials) are never written, and the URL has no userinfo.
//! * File names sort by start time: `<unix millis>-<seq>-<controller>-<hook>-<parent
//!   namespace or _>-<parent name>.json`. A file appears complete or not at all (it is
//!   written under a hidden temporary name and renamed).

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

/// What replaces a Secret value in a recording. Unlike the log marker it is valid base64,
/// so a replayed Secret still decodes.
pub const RECORD_REDACTED: &str = "REDACTED";

/// Records sent before the writer thread drops new ones.
const QUEUE_CAPACITY: usize = 4096;

/// Minimum pause between two warnings about lost records.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// One hook exchange as the client saw it. Buffers are shared, not copied.
#[derive(Debug, Clone)]
pub struct RecordedExchange {
    /// `CompositeController` or `DecoratorController` (empty if the client has no type).
    pub controller_kind: &'static str,
    /// The controller object's name.
    pub controller: String,
    /// `sync`, `finalize` or `customize`.
    pub hook: String,
    /// The parent key the call was made for (`namespace/name` or `name`).
    pub parent_key: String,
    /// The hook URL without userinfo.
    pub url: String,
    /// When the request was sent.
    pub started_at: SystemTime,
    /// Until the response was read (or the call failed).
    pub duration: Duration,
    /// The request body as sent.
    pub request: Bytes,
    /// Status and body, when a status arrived.
    pub response: Option<RecordedResponse>,
    /// Why the exchange failed, when it did before a usable body arrived.
    pub error: Option<String>,
}

/// The answer of a hook server.
#[derive(Debug, Clone)]
pub struct RecordedResponse {
    /// HTTP status.
    pub status: u16,
    /// The body (for non-200 statuses: its first KiB, credentials scrubbed).
    pub body: Bytes,
}

/// Receives every hook exchange. Implementations must be cheap: `record` runs on the
/// sync path.
pub trait HookRecorder: Send + Sync {
    /// Takes one exchange; must not block.
    fn record(&self, exchange: RecordedExchange);

    /// Blocks until every exchange taken so far is stored, for at most `within`; `false`
    /// when some were still pending then. Called once at shutdown, off the async runtime.
    fn flush(&self, within: Duration) -> bool {
        let _ = within;
        true
    }
}

/// What the writer thread receives.
enum Message {
    // Boxed: an exchange is large, and a boxed one moves through the channel as a pointer.
    Exchange(Box<RecordedExchange>),
    /// Answered once every message queued before it has been handled.
    Flush(std::sync::mpsc::Sender<()>),
}

/// Writes each exchange as a JSON file into a directory (see the module docs).
pub struct DirectoryRecorder {
    queue: SyncSender<Message>,
    dropped: AtomicU64,
    last_warning: std::sync::Mutex<Option<Instant>>,
}

impl DirectoryRecorder {
    /// Creates `dir` if missing and starts the writer thread. With `max_files`, the oldest
    /// recordings (by file name) are removed so the directory holds at most that many.
    pub fn new(dir: impl Into<PathBuf>, max_files: Option<usize>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        let existing = list_recordings(&dir)?;
        let (queue, receiver) = sync_channel(QUEUE_CAPACITY);
        let writer = Writer {
            dir,
            max_files,
            files: existing,
            seq: 0,
            failures: 0,
            last_warning: None,
        };
        std::thread::Builder::new()
            .name("hook-recorder".into())
            .spawn(move || writer.run(receiver))?;
        Ok(Self {
            queue,
            dropped: AtomicU64::new(0),
            last_warning: std::sync::Mutex::new(None),
        })
    }

    fn warn_dropped(&self, why: &str) {
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.last_warning.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(
                dropped_total = dropped,
                "--record-hooks: {why}; hook exchange not recorded"
            );
        }
    }
}

impl HookRecorder for DirectoryRecorder {
    fn record(&self, exchange: RecordedExchange) {
        match self.queue.try_send(Message::Exchange(Box::new(exchange))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.warn_dropped("the writer is behind"),
            Err(TrySendError::Disconnected(_)) => self.warn_dropped("the writer stopped"),
        }
    }

    fn flush(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let (done, written) = std::sync::mpsc::channel();
        let mut message = Message::Flush(done);
        // The marker queues behind the records; a full queue drains at disk speed.
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) => {
                    if Instant::now() >= deadline {
                        return false;
                    }
                    message = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
                // The writer is gone: nothing queued will be written any more.
                Err(TrySendError::Disconnected(_)) => return false,
            }
        }
        written
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }
}

/// The recording files already in `dir` (for `max_files`).
fn list_recordings(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if is_recording(&name) {
            files.insert(name);
        }
    }
    Ok(files)
}

fn is_recording(name: &str) -> bool {
    name.ends_with(".json") && name.as_bytes().first().is_some_and(u8::is_ascii_digit)
}

struct Writer {
    dir: PathBuf,
    max_files: Option<usize>,
    files: BTreeSet<String>,
    seq: u64,
    failures: u64,
    last_warning: Option<Instant>,
}

impl Writer {
    fn run(mut self, receiver: Receiver<Message>) {
        while let Ok(message) = receiver.recv() {
            let exchange = match message {
                Message::Exchange(exchange) => *exchange,
                Message::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
            };
            self.seq += 1;
            let name = file_name(&exchange, self.seq);
            match self.write(&name, &exchange) {
                Ok(()) => {
                    self.files.insert(name);
                    self.prune();
                }
                Err(err) => self.warn(&format!("cannot write {}: {err}", name)),
            }
        }
    }

    fn write(&self, name: &str, exchange: &RecordedExchange) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(&to_record(exchange))?;
        let temp = self.dir.join(format!(".{name}.tmp"));
        let result = std::fs::File::create(&temp)
            .and_then(|mut file| file.write_all(&bytes))
            .and_then(|()| std::fs::rename(&temp, self.dir.join(name)));
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result
    }

    fn prune(&mut self) {
        let Some(max) = self.max_files else { return };
        while self.files.len() > max {
            let Some(oldest) = self.files.pop_first() else {
                break;
            };
            match std::fs::remove_file(self.dir.join(&oldest)) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => self.warn(&format!("cannot remove {oldest}: {err}")),
            }
        }
    }

    fn warn(&mut self, message: &str) {
        self.failures += 1;
        if self
            .last_warning
            .is_none_or(|at| at.elapsed() >= WARN_EVERY)
        {
            self.last_warning = Some(Instant::now());
            tracing::warn!(dir = %self.dir.display(), failures_total = self.failures, "--record-hooks: {message}");
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Record<'a> {
    controller: ControllerRef<'a>,
    hook: &'a str,
    url: &'a str,
    started_at: String,
    duration_ms: u64,
    request: Value,
    response: Option<ResponseRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct ControllerRef<'a> {
    kind: &'a str,
    name: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseRecord {
    status: u16,
    body: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    body_text: Option<String>,
}

fn to_record(exchange: &RecordedExchange) -> Record<'_> {
    let request = match serde_json::from_slice::<Value>(&exchange.request) {
        Ok(mut value) => {
            redact(&mut value);
            value
        }
        // Requests are serialized by us, so this does not happen; never write raw bytes.
        Err(_) => Value::Null,
    };
    let response = exchange.response.as_ref().map(|response| {
        let (body, body_text) = if response.body.is_empty() {
            (Value::Null, None)
        } else {
            match serde_json::from_slice::<Value>(&response.body) {
                Ok(mut value) => {
                    redact(&mut value);
                    (value, None)
                }
                Err(_) => (
                    Value::Null,
                    Some(String::from_utf8_lossy(&response.body).into_owned()),
                ),
            }
        };
        ResponseRecord {
            status: response.status,
            body,
            body_text,
        }
    });
    Record {
        controller: ControllerRef {
            kind: exchange.controller_kind,
            name: &exchange.controller,
        },
        hook: &exchange.hook,
        url: &exchange.url,
        started_at: rfc3339_millis(unix_millis(exchange.started_at)),
        duration_ms: u64::try_from(exchange.duration.as_millis()).unwrap_or(u64::MAX),
        request,
        response,
        error: exchange.error.as_deref(),
    }
}

fn redact(value: &mut Value) {
    crate::redact::redact_secret_data_with(value, RECORD_REDACTED);
}

fn unix_millis(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn rfc3339_millis(millis: i64) -> String {
    match jiff::Timestamp::from_millisecond(millis) {
        Ok(ts) => format!("{ts:.3}"),
        Err(_) => String::new(),
    }
}

/// `<millis>-<seq>-<controller>-<hook>-<namespace>-<name>.json`, each part restricted to
/// characters safe in file names.
fn file_name(exchange: &RecordedExchange, seq: u64) -> String {
    let (namespace, name) = parent_of(exchange);
    format!(
        "{:013}-{:06}-{}-{}-{}-{}.json",
        unix_millis(exchange.started_at),
        seq,
        sanitize(&exchange.controller),
        sanitize(&exchange.hook),
        sanitize(namespace.as_deref().unwrap_or("_")),
        sanitize(&name),
    )
}

/// The parent's namespace and name: from the key (`namespace/name` or `name`).
fn parent_of(exchange: &RecordedExchange) -> (Option<String>, String) {
    match exchange.parent_key.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() => {
            (Some(namespace.to_owned()), name.to_owned())
        }
        Some((_, name)) => (None, name.to_owned()),
        None => (None, exchange.parent_key.clone()),
    }
}

fn sanitize(part: &str) -> String {
    let cleaned: String = part
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    match cleaned.trim_start_matches('.') {
        "" => "_".to_owned(),
        rest => rest.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exchange(key: &str, request: Value, body: &[u8]) -> RecordedExchange {
        RecordedExchange {
            controller_kind: "CompositeController",
            controller: "ctl/x".into(),
            hook: "sync".into(),
            parent_key: key.into(),
            url: "http://h/sync".into(),
            started_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            duration: Duration::from_millis(7),
            request: Bytes::from(request.to_string()),
            response: Some(RecordedResponse {
                status: 200,
                body: Bytes::copy_from_slice(body),
            }),
            error: None,
        }
    }

    #[test]
    fn file_names_sort_by_time_and_are_safe() {
        let e = exchange("ns/p:1", json!({}), b"{}");
        assert_eq!(
            file_name(&e, 7),
            "1700000000123-000007-ctl_x-sync-ns-p_1.json"
        );
        let cluster = exchange("p", json!({}), b"{}");
        assert!(file_name(&cluster, 1).ends_with("-sync-_-p.json"));
        assert_eq!(sanitize("../.."), "_.."); // no leading dot, no separator
    }

    #[test]
    fn records_redact_secrets_and_keep_text_bodies() {
        let request = json!({"parent": {"kind": "Secret", "apiVersion": "v1",
            "data": {"k": "c2VjcmV0"}}});
        let record = serde_json::to_value(to_record(&exchange("a/b", request, b"oops"))).unwrap();
        assert_eq!(record["request"]["parent"]["data"]["k"], "REDACTED");
        assert_eq!(record["startedAt"], "2023-11-14T22:13:20.123Z");
        assert_eq!(record["durationMs"], 7);
        assert_eq!(record["response"]["body"], Value::Null);
        assert_eq!(record["response"]["bodyText"], "oops");
        assert!(record.get("error").is_none());
        let with_json = exchange("a/b", json!({}), br#"{"children":[]}"#);
        let json_body = serde_json::to_value(to_record(&with_json)).unwrap();
        assert_eq!(json_body["response"]["body"], json!({"children": []}));
        assert!(json_body["response"].get("bodyText").is_none());
    }

    #[test]
    fn directory_recorder_writes_and_prunes() {
        let dir = std::env::temp_dir().join(format!("hook-record-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("0000000000001-000001-old-sync-_-p.json"), "{}").unwrap();
        std::fs::write(dir.join("notes.txt"), "kept").unwrap();
        let recorder = DirectoryRecorder::new(&dir, Some(2)).unwrap();
        for i in 0..3u64 {
            let mut e = exchange("ns/p", json!({"i": i}), b"{}");
            e.started_at += Duration::from_millis(i);
            recorder.record(e);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let names: BTreeSet<String> = list_recordings(&dir).unwrap();
            let complete = names.iter().any(|n| n.starts_with("1700000000125"));
            if complete && names.len() == 2 {
                assert!(
                    names.iter().all(|n| n.starts_with("170000000012")),
                    "{names:?}"
                );
                break;
            }
            assert!(Instant::now() < deadline, "{names:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(dir.join("notes.txt").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
