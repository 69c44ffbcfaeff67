//! Which failed webhook calls are tried again, and how soon (an extension beyond upstream,
//! its issue #1124): a hook pod that restarts refuses connections for a moment, and that
//! should not fail every sync that happens to call it then.
//!
//! Only failures where the request cannot have reached the hook are retried: the
//! connection could not be set up (refused, reset or aborted while connecting, DNS
//! lookup failed, connect timed out). A TLS handshake the server refused or a certificate
//! that does not verify is a configuration problem and fails at once. Once a connection
//! carried the request, nothing is retried: the hook may have acted on it even if no
//! answer came (hyper itself resends a request only when a pooled connection closed before
//! the request was written). Retries wait 50 ms, doubling up to 1 s, each with jitter
//! (half to all of the step), and all of them stay within the hook's own timeout.

use std::error::Error as _;
use std::hash::{BuildHasher as _, Hasher as _};
use std::time::Duration;

/// The first wait before a retry.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Why a retry happened: the `reason` label of the retries counter.
pub mod reason {
    /// The connection was refused (nothing listens yet).
    pub const REFUSED: &str = "connection_refused";
    /// The connection was reset or aborted while it was set up.
    pub const RESET: &str = "connection_reset";
    /// Connecting took too long.
    pub const CONNECT_TIMEOUT: &str = "connect_timeout";
    /// Any other failure to connect (e.g. a DNS name not served yet).
    pub const CONNECT: &str = "connect_error";
}

/// The retries counter's `reason` when `err` may be retried (the request was certainly
/// not sent), `None` when it must not be.
pub(crate) fn retry_reason(err: &reqwest::Error) -> Option<&'static str> {
    if !err.is_connect() {
        return None;
    }
    let mut reason = reason::CONNECT;
    let mut next = err.source();
    while let Some(cause) = next {
        if cause.is::<rustls::Error>() {
            return None;
        }
        let Some(io) = cause.downcast_ref::<std::io::Error>() else {
            next = cause.source();
            continue;
        };
        reason = match io.kind() {
            std::io::ErrorKind::ConnectionRefused => reason::REFUSED,
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted => {
                reason::RESET
            }
            std::io::ErrorKind::TimedOut => reason::CONNECT_TIMEOUT,
            // TLS failures surface as InvalidData; they do not go away by retrying.
            std::io::ErrorKind::InvalidData => return None,
            _ => reason,
        };
        // std's io::Error hides the error it wraps from `source()`: step into it.
        next = match io.get_ref() {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => cause.source(),
        };
    }
    Some(reason)
}

/// The waits between attempts: [`FIRST_BACKOFF`], doubling up to [`MAX_BACKOFF`], each
/// drawn between half and all of its step so parents failing together spread out.
pub(crate) struct Backoff {
    step: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Self {
            step: FIRST_BACKOFF,
        }
    }

    /// The next wait.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(MAX_BACKOFF);
        let half = step / 2;
        half + half.mul_f64(jitter())
    }
}

/// A number in [0, 1): random enough to spread retries, without a RNG dependency.
fn jitter() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;

    fn client() -> reqwest::Client {
        crate::pool::plain_client().unwrap()
    }

    /// A port nothing listens on (bound, then closed).
    /// A server on 127.0.0.1 for one connection: it reads (the start of) the request, writes
    /// `answer` (nothing: it hangs up without a byte of answer) and closes.
    fn one_connection_server(
        answer: &'static [u8],
    ) -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(answer);
        });
        (addr, server)
    }

    fn closed_port() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn refused_connections_are_retried() {
        let url = format!("http://127.0.0.1:{}/sync", closed_port());
        let err = client().post(url).send().await.unwrap_err();
        assert_eq!(retry_reason(&err), Some(reason::REFUSED), "{err:?}");
    }

    #[tokio::test]
    async fn a_request_sent_without_answer_is_not_retried() {
        // Read the request, then hang up without a byte of answer.
        let (addr, server) = one_connection_server(b"");
        let err = client()
            .post(format!("http://{addr}/sync"))
            .body("{}")
            .send()
            .await
            .unwrap_err();
        server.join().unwrap();
        assert_eq!(retry_reason(&err), None, "{err:?}");
    }

    #[tokio::test]
    async fn tls_failures_are_not_retried() {
        // A plain-text server answering a TLS ClientHello: the handshake fails.
        let (addr, server) =
            one_connection_server(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        let err = client()
            .post(format!("https://{addr}/sync"))
            .send()
            .await
            .unwrap_err();
        server.join().unwrap();
        assert!(err.is_connect(), "{err:?}");
        assert_eq!(retry_reason(&err), None, "{err:?}");
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter() {
        let mut backoff = Backoff::new();
        let mut step = FIRST_BACKOFF;
        for _ in 0..8 {
            let delay = backoff.next_delay();
            assert!(delay >= step / 2 && delay <= step, "{delay:?} for {step:?}");
            step = (step * 2).min(MAX_BACKOFF);
        }
        assert_eq!(step, MAX_BACKOFF);
    }
}
