//! Prometheus metrics of hook calls.
//!
//! Per hook type (`sync`, `finalize`, `customize`) the families upstream Metacontroller
//! exposes, so its dashboards and alerts keep working:
//!
//! * `metacontroller_<hook>_requests_total{code,method,controller_name,controller_type,url}`
//!   — responses received, by HTTP status (`"200"`) and lower-case method (`"post"`);
//!   calls that got no response (connection refused, timeout) are not counted here, as
//!   upstream;
//! * `metacontroller_<hook>_request_duration_histogram_seconds{method,controller_name,controller_type,url}`
//!   — time to the response headers (Prometheus default buckets);
//! * `metacontroller_<hook>_in_flight_requests{controller_name,controller_type,url}`.
//!
//! Beyond upstream, [`CALLS_TOTAL`] counts every call by runtime (`webhook`, `jsonnet`,
//! `wasm`) and outcome (success, cached or an error kind), so timeouts and decode errors are
//! visible too, and [`RETRIES_TOTAL`] counts webhook requests sent again because the hook
//! could not be reached (by `reason`, see [`crate::retry::reason`]). The `url` label never holds
//! userinfo (it is the URL as shown in messages); nothing from Secrets becomes a label.

use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::error::HookError;

/// Name of the per-outcome call counter (not in upstream).
pub const CALLS_TOTAL: &str = "metacontroller_hook_calls_total";

/// Name of the counter of webhook attempts retried because the hook was not reachable
/// (not in upstream; see [`crate::retry`]).
pub const RETRIES_TOTAL: &str = "metacontroller_hook_retries_total";

/// Outcome label of a call that got a fresh 200 response.
pub const OUTCOME_SUCCESS: &str = "success";
/// Outcome label of a call answered 304/412 and served from the ETag cache.
pub const OUTCOME_CACHED: &str = "cached";

/// The hook types upstream has metric families for.
pub const HOOK_TYPES: [&str; 3] = ["sync", "finalize", "customize"];

/// Upstream's method label value: Go's promhttp lower-cases known methods.
const METHOD_POST: &str = "post";

/// The three upstream families of one hook type.
#[derive(Clone)]
struct HookFamilies {
    requests: IntCounterVec,
    duration: HistogramVec,
    in_flight: IntGaugeVec,
}

/// Who a call is for: the constant labels of upstream's hook families.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallLabels<'a> {
    pub controller_name: &'a str,
    pub controller_type: &'a str,
    pub hook: &'a str,
    pub url: &'a str,
    /// What ran the hook: `webhook`, `jsonnet` or `wasm`.
    pub runtime: &'a str,
}

#[derive(Clone)]
pub(crate) struct HookMetrics {
    calls: IntCounterVec,
    retries: IntCounterVec,
    /// In [`HOOK_TYPES`] order.
    hooks: Vec<HookFamilies>,
}

fn metric_error(e: prometheus::Error) -> HookError {
    HookError::config(format!("metrics: {e}"))
}

impl HookFamilies {
    /// Upstream's three families of `hook` (unregistered).
    fn new(hook: &str) -> Result<Self, HookError> {
        let requests = IntCounterVec::new(
            Opts::new(
                format!("metacontroller_{hook}_requests_total"),
                "A counter for outgoing requests from the wrapped client.",
            ),
            &[
                "code",
                "method",
                "controller_name",
                "controller_type",
                "url",
            ],
        )
        .map_err(metric_error)?;
        // Go's prometheus.DefBuckets, as upstream.
        let duration = HistogramVec::new(
            HistogramOpts::new(
                format!("metacontroller_{hook}_request_duration_histogram_seconds"),
                "A histogram of outgoing request latencies.",
            )
            .buckets(prometheus::DEFAULT_BUCKETS.to_vec()),
            &["method", "controller_name", "controller_type", "url"],
        )
        .map_err(metric_error)?;
        let in_flight = IntGaugeVec::new(
            Opts::new(
                format!("metacontroller_{hook}_in_flight_requests"),
                "A gauge of in-flight outgoing requests for the wrapped client.",
            ),
            &["controller_name", "controller_type", "url"],
        )
        .map_err(metric_error)?;
        Ok(Self {
            requests,
            duration,
            in_flight,
        })
    }
}

impl HookMetrics {
    pub(crate) fn new(registry: Option<&Registry>) -> Result<Self, HookError> {
        let calls = IntCounterVec::new(
            Opts::new(
                CALLS_TOTAL,
                "Hook calls by controller, hook and outcome (success, cached or an error kind).",
            ),
            &[
                "controller_name",
                "controller_type",
                "hook",
                "runtime",
                "outcome",
            ],
        )
        .map_err(metric_error)?;
        let retries = IntCounterVec::new(
            Opts::new(
                RETRIES_TOTAL,
                "Webhook requests sent again because the previous attempt could not reach the hook, by reason.",
            ),
            &["controller_name", "controller_type", "hook", "reason"],
        )
        .map_err(metric_error)?;
        let hooks = HOOK_TYPES
            .iter()
            .map(|hook| HookFamilies::new(hook))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(registry) = registry {
            registry
                .register(Box::new(calls.clone()))
                .map_err(metric_error)?;
            registry
                .register(Box::new(retries.clone()))
                .map_err(metric_error)?;
            for f in &hooks {
                registry
                    .register(Box::new(f.requests.clone()))
                    .map_err(metric_error)?;
                registry
                    .register(Box::new(f.duration.clone()))
                    .map_err(metric_error)?;
                registry
                    .register(Box::new(f.in_flight.clone()))
                    .map_err(metric_error)?;
            }
        }
        Ok(Self {
            calls,
            retries,
            hooks,
        })
    }

    fn families(&self, hook: &str) -> Option<&HookFamilies> {
        HOOK_TYPES
            .iter()
            .position(|h| *h == hook)
            .and_then(|i| self.hooks.get(i))
    }

    /// Counts one finished call by outcome.
    pub(crate) fn observe_call(&self, labels: &CallLabels<'_>, outcome: &str) {
        self.calls
            .with_label_values(&[
                labels.controller_name,
                labels.controller_type,
                labels.hook,
                labels.runtime,
                outcome,
            ])
            .inc();
    }

    /// Counts one retry of a webhook call, by `reason` (see [`crate::retry::reason`]).
    pub(crate) fn observe_retry(&self, labels: &CallLabels<'_>, reason: &str) {
        self.retries
            .with_label_values(&[
                labels.controller_name,
                labels.controller_type,
                labels.hook,
                reason,
            ])
            .inc();
    }

    /// Marks a request as sent; the returned guard un-marks it when dropped (also when the
    /// call is cancelled by its timeout).
    pub(crate) fn start_request(&self, labels: &CallLabels<'_>) -> InFlight {
        let gauge = self.families(labels.hook).map(|f| {
            let g = f.in_flight.with_label_values(&[
                labels.controller_name,
                labels.controller_type,
                labels.url,
            ]);
            g.inc();
            g
        });
        InFlight { gauge }
    }

    /// Records a response (status `code`) that arrived after `elapsed`.
    pub(crate) fn observe_response(&self, labels: &CallLabels<'_>, code: u16, elapsed: Duration) {
        let Some(f) = self.families(labels.hook) else {
            return;
        };
        f.requests
            .with_label_values(&[
                &code.to_string(),
                METHOD_POST,
                labels.controller_name,
                labels.controller_type,
                labels.url,
            ])
            .inc();
        f.duration
            .with_label_values(&[
                METHOD_POST,
                labels.controller_name,
                labels.controller_type,
                labels.url,
            ])
            .observe(elapsed.as_secs_f64());
    }
}

/// An in-flight request, counted until dropped.
pub(crate) struct InFlight {
    gauge: Option<prometheus::IntGauge>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(g) = &self.gauge {
            g.dec();
        }
    }
}

/// Name of the gauge of bytes reserved by running in-process hook calls (not in upstream).
pub const MEMORY_RESERVED: &str = "metacontroller_inprocess_hook_memory_reserved_bytes";
/// Name of the counter of in-process hook calls that met a full memory budget, by outcome:
/// `waited` (had to wait), `exhausted` (failed after waiting until the hook's timeout),
/// `too_large` (its memory limit alone exceeds the budget).
pub const MEMORY_BUDGET_TOTAL: &str = "metacontroller_inprocess_hook_memory_budget_total";
/// Name of the counter of in-process hook calls that waited for admission, by controller and
/// `limit` (`controller`: its controller's share; `process`: the process-wide cap).
pub const ADMISSION_WAITS_TOTAL: &str = "metacontroller_inprocess_hook_admission_waits_total";

/// Metrics of in-process hook admission and the memory budget.
pub(crate) struct InProcessMetrics {
    pub(crate) budget: crate::inprocess::BudgetMetrics,
    pub(crate) waits: IntCounterVec,
}

impl InProcessMetrics {
    /// The families, registered on `registry` when given.
    pub(crate) fn new(registry: Option<&Registry>) -> Result<Self, HookError> {
        let reserved = prometheus::IntGauge::new(
            MEMORY_RESERVED,
            "Bytes of the in-process hook memory budget reserved by running calls.",
        )
        .map_err(metric_error)?;
        let outcomes = IntCounterVec::new(
            Opts::new(
                MEMORY_BUDGET_TOTAL,
                "In-process hook calls that met a full memory budget, by outcome (waited, exhausted, too_large).",
            ),
            &["outcome"],
        )
        .map_err(metric_error)?;
        let waits = IntCounterVec::new(
            Opts::new(
                ADMISSION_WAITS_TOTAL,
                "In-process hook calls that waited for admission, by controller and limit (controller, process).",
            ),
            &["controller", "limit"],
        )
        .map_err(metric_error)?;
        if let Some(registry) = registry {
            registry
                .register(Box::new(reserved.clone()))
                .map_err(metric_error)?;
            registry
                .register(Box::new(outcomes.clone()))
                .map_err(metric_error)?;
            registry
                .register(Box::new(waits.clone()))
                .map_err(metric_error)?;
        }
        Ok(Self {
            budget: crate::inprocess::BudgetMetrics { reserved, outcomes },
            waits,
        })
    }
}
