//! Process-wide tracing subscriber set up from the logging flags, plus the OpenTelemetry
//! layer when the environment turns tracing on ([`crate::telemetry`]).

use std::fmt;
use std::io::IsTerminal;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::cli::{LogFormat, LogLevel, LoggingArgs};

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync + 'static>;

/// Installs the global subscriber. `RUST_LOG`, when set, refines the level per module. With
/// tracing on (see [`crate::telemetry`]) spans also go to the OTLP exporter, whose export
/// runs on `runtime`, and every log line inside a traced sync carries its `trace_id`.
pub fn init(args: &LoggingArgs, runtime: &tokio::runtime::Handle) {
    let otel = if crate::telemetry::enabled_by_env() {
        match crate::telemetry::layer::<Registry>(runtime.clone()) {
            Ok(layer) => Some(layer),
            Err(err) => {
                // Tracing is an aid; a bad OTEL_* setting must not stop the controller.
                eprintln!("warning: OpenTelemetry tracing is off: {err:#}");
                None
            }
        }
    } else {
        None
    };
    let mut layers = vec![fmt_layer(args, otel.is_some())];
    layers.extend(otel);
    // A second init (tests) is harmless; ignore the error it returns.
    let _ = tracing_subscriber::registry().with(layers).try_init();
}

/// The log layer with its own level filter (so the OpenTelemetry layer sees its spans
/// whatever the log level).
fn fmt_layer(args: &LoggingArgs, trace_ids: bool) -> BoxedLayer {
    let level = match args.effective_level() {
        LogLevel::Trace => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    // Dependencies (hyper, rustls, tower) are noisy at debug; keep them at warn unless
    // RUST_LOG asks for them.
    let default_directives = format!("warn,metacontroller={level},metacontroller_api={level},metacontroller_apply={level},metacontroller_hooks={level},metacontroller_dynamic={level},metacontroller_controllers={level},embedded_apiserver={level}");
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_directives));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !trace_ids);
    let json = args.effective_format() == LogFormat::Json;
    match (json, trace_ids) {
        (true, false) => layer.json().flatten_event(true).with_filter(filter).boxed(),
        (false, false) => layer.with_filter(filter).boxed(),
        (true, true) => {
            let inner = tracing_subscriber::fmt::format().json().flatten_event(true);
            let layer = layer.json().event_format(WithTraceId { inner, json: true });
            layer.with_filter(filter).boxed()
        }
        (false, true) => {
            let inner = tracing_subscriber::fmt::format();
            let layer = layer.event_format(WithTraceId { inner, json: false });
            layer.with_filter(filter).boxed()
        }
    }
}

/// Adds `trace_id` to each line written inside a traced span: a first key of a JSON object,
/// a last `trace_id=…` field of a text line.
struct WithTraceId<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithTraceId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(trace_id) = crate::telemetry::current_trace_id() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.strip_suffix('\n').unwrap_or(&line);
        match (self.json, body.strip_prefix('{')) {
            (true, Some(rest)) => {
                let sep = if rest.starts_with('}') { "" } else { "," };
                writeln!(writer, "{{\"trace_id\":\"{trace_id}\"{sep}{rest}")
            }
            _ => writeln!(writer, "{body} trace_id={trace_id}"),
        }
    }
}
