//! Serving a hook router until a shutdown signal, draining in-flight requests.

use std::future::Future;

use tokio::net::TcpListener;

use crate::Hooks;

/// Serves `hooks` on `listener` until `shutdown` completes, then stops accepting and
/// waits for in-flight requests to finish (Metacontroller retries a hook call that
/// fails, so a restart loses nothing).
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// use metacontroller_hook::{serve, shutdown_signal, Hooks};
/// let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
/// serve(listener, Hooks::new(), shutdown_signal()).await
/// # }
/// ```
pub async fn serve(
    listener: TcpListener,
    hooks: impl Into<axum::Router>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving hooks");
    }
    axum::serve(listener, hooks.into())
        .with_graceful_shutdown(shutdown)
        .await
}

impl From<Hooks> for axum::Router {
    fn from(hooks: Hooks) -> Self {
        hooks.into_router()
    }
}

/// Completes on SIGTERM (what Kubernetes sends a terminating pod) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C: shutting down"),
        _ = term => tracing::info!("SIGTERM: shutting down"),
    }
}
