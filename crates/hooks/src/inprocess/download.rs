//! Modules downloaded from a URL pinned by SHA-256: one download per url + digest at a time
//! however many calls want it (single flight), verified modules kept by digest in the code
//! cache, and a failure (HTTP error, wrong digest, timeout) remembered for a backoff (30 s
//! doubling to 5 min) during which calls fail at once with it instead of downloading again.
//! The download runs on a task of its own: a call that stops waiting (its timeout) does not
//! stop it, so the next call finds its result.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::code::{self, CodeCache, Digest};

/// How long a failed download is not tried again, at first.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(30);
/// The longest a failed download is not tried again.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The outcome of one download, shared by every call that waited for it.
type Outcome = Result<Arc<Vec<u8>>, String>;

/// What is known of one url + digest.
enum Flight {
    /// Being downloaded; the outcome arrives on the channel.
    Running(watch::Receiver<Option<Outcome>>),
    /// Failed; not tried again before `retry_at`.
    Failed {
        message: String,
        failed_at: Instant,
        retry_at: Instant,
        backoff: Duration,
    },
}

/// Downloads of pinned modules; one per process.
pub(crate) struct Downloads {
    cache: Arc<CodeCache>,
    flights: Mutex<HashMap<(String, String), Flight>>,
    http: Mutex<Option<reqwest::Client>>,
    /// Downloads started (for tests and diagnostics).
    started: AtomicU64,
}

impl Downloads {
    /// Downloads keeping verified modules in `cache`.
    pub(crate) fn new(cache: Arc<CodeCache>) -> Self {
        Self {
            cache,
            flights: Mutex::new(HashMap::new()),
            http: Mutex::new(None),
            started: AtomicU64::new(0),
        }
    }

    /// The module at `url`, which must hash to `pinned` (hex): from the cache, from the
    /// download under way, or downloaded now; a recent failure is answered at once.
    pub(crate) async fn get(self: &Arc<Self>, url: &str, pinned: &str) -> Outcome {
        let wanted = pinned.to_ascii_lowercase();
        if let Some(bytes) = parse_hex(&wanted).and_then(|d| self.cache.source(&d)) {
            return Ok(bytes);
        }
        let mut outcome = self.flight(url, &wanted)?;
        let result = match outcome.wait_for(Option::is_some).await {
            Ok(done) => done.clone(),
            Err(_) => None,
        };
        result.unwrap_or_else(|| Err(format!("downloading {url}: the download stopped")))
    }

    /// Downloads started so far.
    #[cfg(test)]
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// The download of `url` + `wanted` under way, started now if none is; the remembered
    /// failure while its backoff lasts.
    fn flight(
        self: &Arc<Self>,
        url: &str,
        wanted: &str,
    ) -> Result<watch::Receiver<Option<Outcome>>, String> {
        let now = Instant::now();
        let key = (url.to_owned(), wanted.to_owned());
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        let previous = match flights.get(&key) {
            Some(Flight::Running(outcome)) => return Ok(outcome.clone()),
            Some(Flight::Failed {
                message,
                failed_at,
                retry_at,
                ..
            }) if now < *retry_at => {
                return Err(format!(
                    "{message} (failed {}s ago; not downloaded again for {}s)",
                    now.duration_since(*failed_at).as_secs(),
                    retry_at.duration_since(now).as_secs().max(1)
                ))
            }
            Some(Flight::Failed { backoff, .. }) => Some(*backoff),
            None => None,
        };
        // Failures long past their backoff are forgotten (a URL nobody uses any more).
        flights.retain(
            |_, f| !matches!(f, Flight::Failed { retry_at, .. } if *retry_at + MAX_BACKOFF < now),
        );
        let (done, outcome) = watch::channel(None);
        flights.insert(key.clone(), Flight::Running(outcome.clone()));
        drop(flights);
        self.started.fetch_add(1, Ordering::Relaxed);
        let this = self.clone();
        tokio::spawn(async move {
            let result = this.download(&key.0, &key.1).await;
            this.finish(key, &result, previous);
            let _ = done.send(Some(result));
        });
        Ok(outcome)
    }

    /// Records the outcome of the download of `key`: a success is in the cache, a failure
    /// is remembered for the next backoff.
    fn finish(&self, key: (String, String), result: &Outcome, previous: Option<Duration>) {
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        let Err(message) = result else {
            flights.remove(&key);
            return;
        };
        let backoff = previous.map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
        tracing::warn!(url = %key.0, error = %message, retry_in = ?backoff, "downloading a hook module failed");
        let now = Instant::now();
        flights.insert(
            key,
            Flight::Failed {
                message: message.clone(),
                failed_at: now,
                retry_at: now + backoff,
                backoff,
            },
        );
    }

    /// Downloads `url`, checks it against `wanted` and keeps it.
    async fn download(&self, url: &str, wanted: &str) -> Outcome {
        let client = self.http_client()?;
        let bytes = code::fetch(&client, url).await?;
        let digest = code::sha256(&bytes);
        if code::hex(&digest) != wanted {
            return Err(format!(
                "the module at {url} has sha256 {}, not the pinned {wanted}",
                code::hex(&digest)
            ));
        }
        let bytes = Arc::new(code::gunzip_if_compressed(bytes)?);
        self.cache.insert_source(digest, bytes.clone());
        Ok(bytes)
    }

    fn http_client(&self) -> Result<reqwest::Client, String> {
        let mut http = self.http.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = http.as_ref() {
            return Ok(client.clone());
        }
        let client = crate::pool::plain_client().map_err(|e| e.to_string())?;
        *http = Some(client.clone());
        Ok(client)
    }
}

/// A digest from 64 hex digits.
fn parse_hex(text: &str) -> Option<Digest> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback HTTP server answering every GET with `body`, counting requests.
    async fn server(body: &'static [u8]) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/module.wasm", listener.local_addr().unwrap());
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    // Slow enough that every caller asks while the download runs.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(body).await;
                });
            }
        });
        (url, count)
    }

    #[tokio::test]
    async fn a_hundred_calls_make_one_download_and_a_wrong_digest_is_remembered() {
        let (url, requests) = server(b"\0asm-bytes").await;
        let downloads = Arc::new(Downloads::new(Arc::new(CodeCache::new(1 << 30))));
        let wrong = "ab".repeat(32);
        let calls: Vec<_> = (0..100)
            .map(|_| {
                let (downloads, url, wrong) = (downloads.clone(), url.clone(), wrong.clone());
                tokio::spawn(async move { downloads.get(&url, &wrong).await })
            })
            .collect();
        for call in calls {
            let err = call.await.unwrap().unwrap_err();
            assert!(err.contains("not the pinned"), "{err}");
        }
        let again = downloads.get(&url, &wrong).await.unwrap_err();
        assert!(again.contains("not downloaded again for"), "{again}");
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        assert_eq!(downloads.started(), 1);

        let right = code::hex(&code::sha256(b"\0asm-bytes"));
        let calls: Vec<_> = (0..100)
            .map(|_| {
                let (downloads, url, right) = (downloads.clone(), url.clone(), right.clone());
                tokio::spawn(async move { downloads.get(&url, &right).await })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap().as_slice(), b"\0asm-bytes");
        }
        assert_eq!(
            requests.load(Ordering::SeqCst),
            2,
            "one download for the right digest"
        );
        assert_eq!(
            downloads.get(&url, &right).await.unwrap().as_slice(),
            b"\0asm-bytes"
        );
        assert_eq!(
            requests.load(Ordering::SeqCst),
            2,
            "then served from the cache"
        );
    }

    #[test]
    fn hex_digests_parse() {
        let digest = code::sha256(b"x");
        assert_eq!(parse_hex(&code::hex(&digest)), Some(digest));
        assert_eq!(parse_hex("zz"), None);
    }
}
