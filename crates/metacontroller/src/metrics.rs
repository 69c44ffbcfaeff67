//! `/metrics` on `--metrics-address`: the process's one Prometheus registry in the text
//! exposition format. Every crate registers its families into this registry (hooks,
//! queues and reconciles, child writes, API client); this module adds the process
//! metrics (`process_*`) and the informer cache sizes.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metacontroller_dynamic::Informers;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

/// A registry with the process collector (CPU, memory, file descriptors, start time).
pub fn registry() -> anyhow::Result<Registry> {
    let registry = Registry::new();
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    Ok(registry)
}

/// Registers `metacontroller_informer_cached_objects`, `metacontroller_informer_synced` and
/// `metacontroller_informer_listed_objects_total` (labels `api_version`, `resource`,
/// `label_selector`), read from `informers` at each scrape.
pub fn register_informers(registry: &Registry, informers: Informers) -> anyhow::Result<()> {
    registry.register(Box::new(InformerCollector::new(informers)?))?;
    Ok(())
}

/// Registers controller-runtime's `leader_election_master_status{name}`: 1 while this
/// replica leads (its sync gate admits syncs), else 0; `name` is the Lease name. Read at
/// each scrape, so it follows the elector exactly.
pub fn register_leader(
    registry: &Registry,
    gate: metacontroller_workqueue::SyncGate,
    lease: &str,
) -> anyhow::Result<()> {
    let status = IntGaugeVec::new(
        Opts::new(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
        ),
        &["name"],
    )?;
    registry.register(Box::new(LeaderCollector {
        gauge: status.with_label_values(&[lease]),
        descs: status.desc().into_iter().cloned().collect(),
        status,
        gate,
    }))?;
    Ok(())
}

struct LeaderCollector {
    status: IntGaugeVec,
    gauge: prometheus::IntGauge,
    gate: metacontroller_workqueue::SyncGate,
    descs: Vec<Desc>,
}

impl Collector for LeaderCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.gauge.set(i64::from(self.gate.admits_syncs()));
        self.status.collect()
    }
}

/// Reads the informers when scraped, so the gauges never go stale or outlive an informer.
struct InformerCollector {
    informers: Informers,
    objects: IntGaugeVec,
    synced: IntGaugeVec,
    listed: IntCounterVec,
    descs: Vec<Desc>,
}

impl InformerCollector {
    fn new(informers: Informers) -> anyhow::Result<Self> {
        // `label_selector`: what the API server filters the informer by ("" for none).
        let labels = ["api_version", "resource", "label_selector"];
        let objects = IntGaugeVec::new(
            Opts::new(
                "metacontroller_informer_cached_objects",
                "Objects held in the shared informer cache, per resource.",
            ),
            &labels,
        )?;
        let synced = IntGaugeVec::new(
            Opts::new(
                "metacontroller_informer_synced",
                "1 once the shared informer of a resource finished its first list.",
            ),
            &labels,
        )?;
        let listed = IntCounterVec::new(
            Opts::new(
                "metacontroller_informer_listed_objects_total",
                "Objects the API server returned to the lists of a shared informer.",
            ),
            &labels,
        )?;
        let descs = objects
            .desc()
            .into_iter()
            .chain(synced.desc())
            .chain(listed.desc())
            .cloned()
            .collect();
        Ok(InformerCollector {
            informers,
            objects,
            synced,
            listed,
            descs,
        })
    }
}

impl Collector for InformerCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.objects.reset();
        self.synced.reset();
        self.listed.reset();
        for stats in self.informers.cache_stats() {
            let key = &stats.key;
            let labels = [
                key.resource.api_version.as_str(),
                key.resource.resource.as_str(),
                key.label_selector.as_deref().unwrap_or_default(),
            ];
            self.objects
                .with_label_values(&labels)
                .set(i64::try_from(stats.cached).unwrap_or(i64::MAX));
            self.synced
                .with_label_values(&labels)
                .set(i64::from(stats.synced));
            self.listed.with_label_values(&labels).inc_by(stats.listed);
        }
        let mut families = self.objects.collect();
        families.extend(self.synced.collect());
        families.extend(self.listed.collect());
        families
    }
}

/// The `/metrics` router.
pub fn router(registry: Registry) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(registry)
}

async fn scrape(State(registry): State<Registry>) -> Response {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    if let Err(err) = encoder.encode(&registry.gather(), &mut body) {
        tracing::warn!(error = %err, "encoding metrics");
        return (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response();
    }
    (
        [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
        body,
    )
        .into_response()
}
