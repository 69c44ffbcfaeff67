//! Test control: request counters, fault injection, watch closing and
//! history compaction. Reached through [`crate::ApiServerHandle::control`], never over HTTP.

use crate::store::EventType;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What an injected fault does.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Answer with this HTTP status and a matching `Status` body instead of serving.
    Status(u16),
    /// Serve normally after this delay.
    Latency(Duration),
    /// Serve normally (a write is applied at once), then hold the response this long: a
    /// reply slowed on its way back to the client.
    SlowResponse(Duration),
}

/// A fault for the next `count` requests that match `verb` and `resource`.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`); `None` matches any.
    pub verb: Option<String>,
    /// Resource plural, optionally with subresource (`deployments/status`); `None` matches any.
    pub resource: Option<String>,
    /// How many matching requests it applies to.
    pub count: usize,
    pub action: FaultAction,
}

impl Fault {
    /// A fault doing `action` to the next `count` requests that match `verb` and `resource`.
    pub fn new(
        verb: Option<&str>,
        resource: Option<&str>,
        count: usize,
        action: FaultAction,
    ) -> Self {
        Fault {
            verb: verb.map(String::from),
            resource: resource.map(String::from),
            count,
            action,
        }
    }

    /// A status-code fault.
    pub fn status(verb: Option<&str>, resource: Option<&str>, count: usize, code: u16) -> Self {
        Self::new(verb, resource, count, FaultAction::Status(code))
    }

    /// A latency fault.
    pub fn latency(
        verb: Option<&str>,
        resource: Option<&str>,
        count: usize,
        delay: Duration,
    ) -> Self {
        Self::new(verb, resource, count, FaultAction::Latency(delay))
    }

    /// A fault that serves at once and answers after `delay`.
    pub fn slow_response(
        verb: Option<&str>,
        resource: Option<&str>,
        count: usize,
        delay: Duration,
    ) -> Self {
        Self::new(verb, resource, count, FaultAction::SlowResponse(delay))
    }
}

/// One recorded change from the event history.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    pub resource_version: u64,
    /// `ADDED`, `MODIFIED`, `DELETED`.
    pub event_type: &'static str,
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl HistoryEntry {
    pub(crate) fn new(rv: u64, et: EventType, gr: &(String, String), ns: &str, name: &str) -> Self {
        HistoryEntry {
            resource_version: rv,
            event_type: et.as_str(),
            group: gr.0.clone(),
            resource: gr.1.clone(),
            namespace: ns.to_string(),
            name: name.to_string(),
        }
    }
}

/// Per (verb, resource): writes being served now and the most served at once.
type InFlightGauges = Arc<Mutex<BTreeMap<(String, String), (usize, usize)>>>;

#[derive(Default)]
pub(crate) struct ControlState {
    counts: Mutex<BTreeMap<(String, String), u64>>,
    /// The same per namespace of the request path (`""`: no namespace in the path).
    namespaced_counts: Mutex<BTreeMap<(String, String, String), u64>>,
    faults: Mutex<Vec<Fault>>,
    /// Writes being served now and the most served at once, per (verb, resource).
    in_flight: InFlightGauges,
}

/// One write being served; counted in [`ControlState`]'s in-flight gauges until dropped.
pub(crate) struct InFlight {
    key: (String, String),
    gauges: InFlightGauges,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some((now, _)) = self.gauges.lock().get_mut(&self.key) {
            *now = now.saturating_sub(1);
        }
    }
}

impl ControlState {
    /// Marks a write of `verb` on `resource` as being served until the guard drops.
    pub(crate) fn enter_write(&self, verb: &str, resource: &str) -> InFlight {
        let key = (verb.to_string(), resource.to_string());
        let mut gauges = self.in_flight.lock();
        let (now, peak) = gauges.entry(key.clone()).or_default();
        *now += 1;
        *peak = (*peak).max(*now);
        InFlight {
            key,
            gauges: self.in_flight.clone(),
        }
    }

    pub(crate) fn peak_in_flight(&self, verb: &str, resource: &str) -> usize {
        self.in_flight
            .lock()
            .iter()
            .filter(|((v, r), _)| (verb == "*" || v == verb) && (resource == "*" || r == resource))
            .map(|(_, (_, peak))| *peak)
            .max()
            .unwrap_or(0)
    }

    pub(crate) fn count(&self, verb: &str, resource: &str, namespace: Option<&str>) {
        *self
            .counts
            .lock()
            .entry((verb.to_string(), resource.to_string()))
            .or_default() += 1;
        *self
            .namespaced_counts
            .lock()
            .entry((
                verb.to_string(),
                resource.to_string(),
                namespace.unwrap_or_default().to_string(),
            ))
            .or_default() += 1;
    }

    pub(crate) fn namespaced_snapshot(&self) -> BTreeMap<(String, String, String), u64> {
        self.namespaced_counts.lock().clone()
    }

    /// Takes the action of the first matching fault, consuming one use of it.
    pub(crate) fn take_fault(&self, verb: &str, resource: &str) -> Option<FaultAction> {
        let mut faults = self.faults.lock();
        let idx = faults.iter().position(|f| {
            f.count > 0
                && f.verb.as_deref().is_none_or(|v| v == verb)
                && f.resource.as_deref().is_none_or(|r| r == resource)
        })?;
        let f = &mut faults[idx];
        f.count -= 1;
        let action = f.action.clone();
        if f.count == 0 {
            faults.remove(idx);
        }
        Some(action)
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<(String, String), u64> {
        self.counts.lock().clone()
    }

    pub(crate) fn reset(&self) {
        self.counts.lock().clear();
        self.namespaced_counts.lock().clear();
        for (now, peak) in self.in_flight.lock().values_mut() {
            *peak = *now;
        }
    }

    pub(crate) fn inject(&self, f: Fault) {
        self.faults.lock().push(f);
    }

    pub(crate) fn clear_faults(&self) {
        self.faults.lock().clear();
    }
}

/// Verbs that change state.
pub const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

/// Test-control handle (cheap to clone).
#[derive(Clone)]
pub struct Control {
    pub(crate) shared: Arc<crate::server::Shared>,
}

impl Control {
    /// Requests served so far, keyed by `(verb, resource)`; resource is the plural,
    /// with `/subresource` appended for subresource requests.
    pub fn request_counts(&self) -> BTreeMap<(String, String), u64> {
        self.shared.control.snapshot()
    }

    /// Requests served so far, keyed by `(verb, resource, namespace)` as
    /// [`Control::request_counts`], the namespace being the one in the request path (`""`
    /// for cluster-wide requests and cluster-scoped resources): what a Role-only client may
    /// and may not ask for.
    pub fn request_counts_by_namespace(&self) -> BTreeMap<(String, String, String), u64> {
        self.shared.control.namespaced_snapshot()
    }

    /// Requests with this verb on this resource (`"*"` matches any).
    pub fn requests(&self, verb: &str, resource: &str) -> u64 {
        self.request_counts()
            .iter()
            .filter(|((v, r), _)| (verb == "*" || v == verb) && (resource == "*" || r == resource))
            .map(|(_, n)| *n)
            .sum()
    }

    /// Write requests (create/update/patch/delete/deletecollection) on any resource.
    pub fn writes(&self) -> u64 {
        self.request_counts()
            .iter()
            .filter(|((v, _), _)| WRITE_VERBS.contains(&v.as_str()))
            .map(|(_, n)| *n)
            .sum()
    }

    /// The most write requests with this verb on this resource (`"*"` matches any) that were
    /// served at once since the start or the last [`Control::reset_counts`]. Only writes of
    /// the same (verb, resource) are counted together: `("create", "*")` is the peak of the
    /// busiest resource, not a sum.
    pub fn peak_in_flight_writes(&self, verb: &str, resource: &str) -> usize {
        self.shared.control.peak_in_flight(verb, resource)
    }

    /// With [`crate::Config::write_latency`]: writes waiting for their commit to end (not
    /// applied yet); 0 without it.
    pub fn uncommitted_writes(&self) -> usize {
        self.shared.commits.as_ref().map_or(0, |c| c.waiting())
    }

    /// Zeroes the counters (request counts; in-flight peaks restart from the writes being
    /// served now).
    pub fn reset_counts(&self) {
        self.shared.control.reset();
    }

    /// Adds a fault.
    pub fn inject(&self, fault: Fault) {
        self.shared.control.inject(fault);
    }

    /// Removes all pending faults.
    pub fn clear_faults(&self) {
        self.shared.control.clear_faults();
    }

    /// Ends every open watch stream (clients see the stream close and re-watch).
    pub fn close_watches(&self) {
        self.shared.close_watches();
    }

    /// Forgets the event history: a watch from any earlier resourceVersion gets 410.
    pub fn compact_history(&self) {
        self.shared.state.lock().compact();
    }

    /// The retained event history, oldest first.
    pub fn history(&self) -> Vec<HistoryEntry> {
        self.shared
            .state
            .lock()
            .history()
            .iter()
            .map(|e| HistoryEntry::new(e.rv, e.etype, &e.gr, &e.namespace, &e.name))
            .collect()
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state.lock().rv
    }

    /// Number of stored objects.
    pub fn object_count(&self) -> usize {
        self.shared.state.lock().total_objects()
    }

    /// Number of open watch streams.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches()
    }
}
