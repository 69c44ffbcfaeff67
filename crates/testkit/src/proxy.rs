//! A TCP fault proxy: put it between a process and the API server to stall, heal or cut
//! that process's connections while everything else keeps working.
//!
//! [`TcpProxy::stall`] stops moving bytes in both directions but keeps every connection open
//! (new connections are accepted and held, not forwarded): what a hung load balancer or a
//! half-open link does to a client, which sees no error, only silence, until its own timeouts
//! fire. [`TcpProxy::heal`] resumes forwarding; [`TcpProxy::cut`] closes every open
//! connection (new ones are forwarded normally). Bytes pass through untouched, so TLS works
//! end to end: keep the host `127.0.0.1` (the real test cluster's certificate has that IP SAN),
//! which [`TcpProxy::write_kubeconfig`] does.

use std::io;
use std::net::SocketAddr;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the bytes of its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    stalled: bool,
    /// Bumped by every [`TcpProxy::cut`]; a connection older than the current value closes.
    generation: u64,
}

/// A running TCP proxy on `127.0.0.1:0` (stops when dropped).
pub struct TcpProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, _) = watch::channel(Mode {
            stalled: false,
            generation: 0,
        });
        let task = tokio::spawn(accept(listener, upstream, mode.clone()));
        Ok(TcpProxy {
            addr,
            upstream,
            mode,
            task,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Stops forwarding in both directions; connections stay open.
    pub fn stall(&self) {
        self.mode.send_modify(|m| m.stalled = true);
    }

    /// Forwards again (bytes held during the stall go through now).
    pub fn heal(&self) {
        self.mode.send_modify(|m| m.stalled = false);
    }

    /// Whether the proxy is stalled.
    pub fn is_stalled(&self) -> bool {
        self.mode.borrow().stalled
    }

    /// Closes every open connection (both ends); later connections are served as usual.
    pub fn cut(&self) {
        self.mode.send_modify(|m| m.generation += 1);
    }

    /// Writes a copy of kubeconfig `source` to `dest` whose cluster servers point at this
    /// proxy (same scheme, host `127.0.0.1`, the proxy's port); credentials and CA untouched.
    pub fn write_kubeconfig(&self, source: &Path, dest: &Path) -> io::Result<()> {
        let text = std::fs::read_to_string(source)?;
        let mut doc: serde_yaml::Value = serde_yaml::from_str(&text).map_err(invalid)?;
        let clusters = doc
            .get_mut("clusters")
            .and_then(serde_yaml::Value::as_sequence_mut)
            .ok_or_else(|| invalid("kubeconfig without clusters"))?;
        for entry in clusters {
            let Some(server) = entry.get_mut("cluster").and_then(|c| c.get_mut("server")) else {
                continue;
            };
            let url = server.as_str().unwrap_or_default();
            let scheme = url.split("://").next().filter(|s| *s != url);
            let scheme = scheme.unwrap_or("https");
            *server =
                serde_yaml::Value::String(format!("{scheme}://127.0.0.1:{}", self.addr.port()));
        }
        std::fs::write(dest, serde_yaml::to_string(&doc).map_err(invalid)?)
    }
}

/// The address of the first cluster's server in kubeconfig `path` (host and port).
pub fn kubeconfig_server(path: &Path) -> io::Result<SocketAddr> {
    let text = std::fs::read_to_string(path)?;
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).map_err(invalid)?;
    let server = doc
        .get("clusters")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("cluster"))
        .and_then(|c| c.get("server"))
        .and_then(serde_yaml::Value::as_str)
        .ok_or_else(|| invalid("kubeconfig without a cluster server"))?;
    let authority = server.split("://").last().unwrap_or(server);
    let authority = authority.split('/').next().unwrap_or(authority);
    let authority = authority.replace("localhost", "127.0.0.1");
    authority.parse().map_err(invalid)
}

fn invalid(err: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err.to_string())
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Close the open connections too.
        self.cut();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, mode: watch::Sender<Mode>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let mode = mode.subscribe();
        tokio::spawn(async move {
            let generation = mode.borrow().generation;
            // A stalled link does not even connect upstream until it heals.
            let mut waiting = mode.clone();
            let connected = async {
                wait_forwarding(&mut waiting).await?;
                TcpStream::connect(upstream).await.ok()
            };
            let Some(server) = until_cut(mode.clone(), generation, connected)
                .await
                .flatten()
            else {
                return;
            };
            // Small writes (TLS records, HTTP/2 frames) must not wait for Nagle's algorithm:
            // the proxy is to add no latency of its own.
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let up = pump(client_read, server_write, mode.clone());
            let down = pump(server_read, client_write, mode.clone());
            until_cut(mode, generation, async {
                tokio::join!(up, down);
            })
            .await;
        });
    }
}

/// Runs `work` unless a cut after `generation` comes first (then `None`).
async fn until_cut<T>(
    mut mode: watch::Receiver<Mode>,
    generation: u64,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        out = work => Some(out),
        _ = mode.wait_for(|m| m.generation != generation) => None,
    }
}

/// Waits until the proxy forwards; `None` if the proxy is gone.
async fn wait_forwarding(mode: &mut watch::Receiver<Mode>) -> Option<()> {
    mode.wait_for(|m| !m.stalled).await.ok().map(|_| ())
}

/// Copies `from` to `to`, holding every chunk while the proxy is stalled (before reading
/// it, and again before writing it: a stall stops a chunk already read too).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if wait_forwarding(&mut mode).await.is_none() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if wait_forwarding(&mut mode).await.is_none() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server on 127.0.0.1.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8], within: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut buf = vec![0u8; msg.len()];
        tokio::time::timeout(within, s.read_exact(&mut buf))
            .await
            .ok()?
            .ok()?;
        Some(buf)
    }

    #[tokio::test]
    async fn forwards_stalls_heals_and_cuts() {
        let proxy = TcpProxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        let long = Duration::from_secs(5);
        assert_eq!(
            roundtrip(&mut s, b"one", long).await.as_deref(),
            Some(&b"one"[..])
        );

        proxy.stall();
        // Nothing comes back while stalled, on the old connection or a new one...
        assert_eq!(
            roundtrip(&mut s, b"two", Duration::from_millis(300)).await,
            None
        );
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(
            roundtrip(&mut fresh, b"new", Duration::from_millis(300)).await,
            None
        );
        // ...and both deliver once healed.
        proxy.heal();
        let mut buf = [0u8; 3];
        tokio::time::timeout(long, s.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"two");
        tokio::time::timeout(long, fresh.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"new");

        proxy.cut();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(long, s.read_to_end(&mut rest)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "a cut closes the connection"
        );
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(
            roundtrip(&mut again, b"three", long).await.as_deref(),
            Some(&b"three"[..])
        );
    }

    #[test]
    fn kubeconfig_copy_points_at_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("in");
        std::fs::write(
            &source,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: QUJD\ncontexts: []\nusers: []\n",
        )
        .unwrap();
        assert_eq!(
            kubeconfig_server(&source).unwrap(),
            "127.0.0.1:6443".parse().unwrap()
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        let proxy = rt
            .block_on(TcpProxy::start("127.0.0.1:6443".parse().unwrap()))
            .unwrap();
        let dest = dir.path().join("out");
        proxy.write_kubeconfig(&source, &dest).unwrap();
        assert_eq!(kubeconfig_server(&dest).unwrap(), proxy.addr());
        let text = std::fs::read_to_string(&dest).unwrap();
        assert!(text.contains("QUJD"), "the CA stays: {text}");
    }
}
