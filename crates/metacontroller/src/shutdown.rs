//! Graceful shutdown, one path for SIGTERM and SIGINT: stop taking keys, let running syncs
//! end (bounded), flush Events, release the leader Lease (or the shard Leases), exit 0.

use std::time::Duration;

use metacontroller_controllers::events::EventRecorder;
use metacontroller_dynamic::Supervisor;
use metacontroller_workqueue::SyncGate;
use tokio::sync::watch;

use crate::leader::{Elector, LeaderConfig};

/// How long running syncs may take to end after a shutdown signal (the kubelet's default
/// grace period is 30 s; this leaves time to flush Events and release the Lease).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// How long queued Events may take to be written at shutdown.
pub const EVENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Waits for SIGTERM (the kubelet) or SIGINT (Ctrl-C); returns its name.
pub async fn signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM; only SIGINT stops the process gracefully");
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

/// The running leader elector of the process (`--leader-election`).
pub struct LeaderTask {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaderTask {
    /// Starts competing for the Lease; the elector opens `gate` while this replica leads.
    /// Supervised as task `leader-election`.
    pub fn spawn(
        client: kube::Client,
        config: LeaderConfig,
        gate: SyncGate,
        supervisor: &Supervisor,
    ) -> LeaderTask {
        let (stop, stop_rx) = watch::channel(false);
        let elector = Elector::new(client, config, gate).run(stop_rx);
        let task = supervisor.spawn("leader-election", elector);
        LeaderTask { stop, task }
    }

    /// Stops the elector; a leader releases the Lease first.
    async fn release(self) {
        let _ = self.stop.send(true);
        // Bounded: a hung API server must not keep the process from exiting.
        if tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .is_err()
        {
            tracing::warn!("releasing the lease timed out; it expires on its own");
        }
    }
}

/// Runs the shutdown sequence. Never fails: each step is bounded and logged.
pub async fn graceful(
    gate: &SyncGate,
    events: &EventRecorder,
    leader: Option<LeaderTask>,
    sharding: Option<crate::shard::ShardTask>,
) {
    let running = gate.in_flight();
    tracing::info!(
        running,
        "shutting down: no new syncs; waiting for running ones"
    );
    let drained = gate.close_and_drain(DRAIN_TIMEOUT).await;
    if !drained {
        tracing::warn!(timeout = ?DRAIN_TIMEOUT, still_running = gate.in_flight(), "syncs still running at the shutdown deadline; they are abandoned");
    }
    if !events.flush(EVENT_FLUSH_TIMEOUT).await {
        tracing::warn!("some Events were not written before shutdown");
    }
    if let Some(leader) = leader {
        if drained {
            leader.release().await;
        } else {
            // Releasing now could let a standby write next to our abandoned syncs; the Lease
            // expires on its own once the process is gone.
            tracing::warn!("not releasing the lease: syncs were still running");
        }
    }
    if let Some(sharding) = sharding {
        if drained {
            sharding.release().await;
        } else {
            tracing::warn!("not releasing the shard leases: syncs were still running");
        }
    }
    tracing::info!("shutdown complete");
}
