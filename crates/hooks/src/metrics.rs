//! Prometheus metrics of hook calls. Labels are the controller name, the hook name and the
//! outcome; never URLs (which may carry userinfo) nor anything from Secrets.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use crate::error::HookError;

/// Name of the request counter.
pub const REQUESTS_TOTAL: &str = "metacontroller_hook_requests_total";
/// Name of the latency histogram.
pub const REQUEST_DURATION: &str = "metacontroller_hook_request_duration_seconds";

/// Outcome label of a call that got a fresh 200 response.
pub const OUTCOME_SUCCESS: &str = "success";
/// Outcome label of a call answered 304/412 and served from the ETag cache.
pub const OUTCOME_CACHED: &str = "cached";

#[derive(Clone)]
pub(crate) struct HookMetrics {
    requests: IntCounterVec,
    latency: HistogramVec,
}

impl HookMetrics {
    pub(crate) fn new(registry: Option<&Registry>) -> Result<Self, HookError> {
        let requests = IntCounterVec::new(
            Opts::new(
                REQUESTS_TOTAL,
                "Hook calls by controller, hook and outcome (success, cached or an error kind).",
            ),
            &["controller", "hook", "outcome"],
        )
        .map_err(|e| HookError::config(format!("metrics: {e}")))?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                REQUEST_DURATION,
                "Duration of hook calls in seconds, from request to decoded response.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0,
            ]),
            &["controller", "hook"],
        )
        .map_err(|e| HookError::config(format!("metrics: {e}")))?;
        if let Some(registry) = registry {
            registry
                .register(Box::new(requests.clone()))
                .map_err(|e| HookError::config(format!("metrics: {e}")))?;
            registry
                .register(Box::new(latency.clone()))
                .map_err(|e| HookError::config(format!("metrics: {e}")))?;
        }
        Ok(Self { requests, latency })
    }

    pub(crate) fn observe(&self, controller: &str, hook: &str, outcome: &str, seconds: f64) {
        self.requests
            .with_label_values(&[controller, hook, outcome])
            .inc();
        self.latency
            .with_label_values(&[controller, hook])
            .observe(seconds);
    }
}
