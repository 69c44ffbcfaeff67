//! Listen addresses as upstream's flags take them (Go `net.Listen` style): `:9999` is every
//! interface, `host:port` one address, `0` (or empty) turns the server off; port 0 picks a
//! free port, which the caller logs.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::Context;
use tokio::net::TcpListener;

/// A parsed listen flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// `0` or empty: do not serve.
    Disabled,
    /// `:port`: all interfaces.
    AnyHost(u16),
    /// `host:port` (host may be a name, an IPv4 address or a bracketed IPv6 address).
    HostPort(String, u16),
}

/// Parses `value` of flag `flag` (named in errors).
pub fn parse(flag: &str, value: &str) -> anyhow::Result<ListenAddr> {
    let value = value.trim();
    if value.is_empty() || value == "0" {
        return Ok(ListenAddr::Disabled);
    }
    let (host, port) = value.rsplit_once(':').with_context(|| {
        format!("--{flag}={value}: expected host:port or :port (or 0 to disable)")
    })?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("--{flag}={value}: invalid port {port:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(if host.is_empty() {
        ListenAddr::AnyHost(port)
    } else {
        ListenAddr::HostPort(host.to_owned(), port)
    })
}

/// Binds `addr`; `None` when disabled. `:port` binds the IPv6 wildcard (dual stack, as Go
/// does) and falls back to IPv4 where IPv6 is unavailable.
pub async fn bind(flag: &str, addr: &ListenAddr) -> anyhow::Result<Option<TcpListener>> {
    let listener = match addr {
        ListenAddr::Disabled => return Ok(None),
        ListenAddr::AnyHost(port) => {
            match TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, *port))).await {
                Ok(l) => l,
                Err(_) => TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, *port)))
                    .await
                    .with_context(|| format!("--{flag}: cannot listen on :{port}"))?,
            }
        }
        ListenAddr::HostPort(host, port) => TcpListener::bind((host.as_str(), *port))
            .await
            .with_context(|| format!("--{flag}: cannot listen on {host}:{port}"))?,
    };
    Ok(Some(listener))
}

/// The HTTP servers of the process (metrics, probes); stopped when dropped. Each runs as a
/// supervised task: a server that stops serving stops the process.
pub struct Servers {
    supervisor: metacontroller_dynamic::Supervisor,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Servers {
    /// No servers yet; those started run under `supervisor`.
    pub fn new(supervisor: metacontroller_dynamic::Supervisor) -> Servers {
        Servers {
            supervisor,
            tasks: Vec::new(),
        }
    }

    /// Serves `router` on the address of `--flag=value`, logging the bound address
    /// (`serving <what>`, with `address=`). A malformed flag is an error; an address that
    /// cannot be bound (port in use, no permission) is logged and the process goes on
    /// without that server, so monitoring trouble never stops the controllers. A server that
    /// stops once it serves is supervised task `task`.
    pub async fn serve(
        &mut self,
        task: &str,
        flag: &str,
        value: &str,
        what: &str,
        router: axum::Router,
    ) -> anyhow::Result<()> {
        let addr = parse(flag, value)?;
        let listener = match bind(flag, &addr).await {
            Ok(Some(listener)) => listener,
            Ok(None) => {
                tracing::info!(flag, "{what} disabled");
                return Ok(());
            }
            Err(err) => {
                tracing::error!(error = %format!("{err:#}"), "{what} not served");
                return Ok(());
            }
        };
        let local = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| value.to_owned());
        tracing::info!(address = %local, "serving {what}");
        let what = what.to_owned();
        self.tasks.push(self.supervisor.spawn(task, async move {
            if let Err(err) = axum::serve(listener, router).await {
                tracing::error!(error = %err, "{what} server stopped");
            }
        }));
        Ok(())
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_addresses() {
        assert_eq!(parse("f", "0").unwrap(), ListenAddr::Disabled);
        assert_eq!(parse("f", "").unwrap(), ListenAddr::Disabled);
        assert_eq!(parse("f", ":9999").unwrap(), ListenAddr::AnyHost(9999));
        assert_eq!(
            parse("f", "127.0.0.1:0").unwrap(),
            ListenAddr::HostPort("127.0.0.1".into(), 0)
        );
        assert_eq!(
            parse("f", "[::1]:8081").unwrap(),
            ListenAddr::HostPort("::1".into(), 8081)
        );
        assert_eq!(
            parse("f", "localhost:80").unwrap(),
            ListenAddr::HostPort("localhost".into(), 80)
        );
        for bad in ["9999", ":http", ":99999", "host:"] {
            let err = parse("metrics-address", bad).unwrap_err().to_string();
            assert!(err.contains("--metrics-address"), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn port_zero_binds_a_free_port() {
        let addr = parse("f", "127.0.0.1:0").unwrap();
        let listener = bind("f", &addr).await.unwrap().unwrap();
        assert_ne!(listener.local_addr().unwrap().port(), 0);
        assert!(bind("f", &ListenAddr::Disabled).await.unwrap().is_none());
    }
}
