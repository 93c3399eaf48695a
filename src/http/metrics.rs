//! `GET /metrics`: Prometheus text format (version 0.0.4).

use super::respond::{body, header, Body};
use crate::app::AppState;
use crate::stats::LATENCY_BUCKETS;
use std::fmt::Write;

pub fn render(state: &AppState, server: &tiny_http::Server) -> String {
    let s = state.stats.snapshot();
    let connections = server.connection_stats();
    let queue = &state.pipeline.queue;
    let ready = state.pipeline.default_model().inference.ready().is_ok();
    let mut out = String::new();

    let name = metric(
        &mut out,
        "cutout_http_requests_total",
        "counter",
        "HTTP requests by route and status.",
    );
    let mut lines = String::new();
    for ((route, status), count) in &s.requests {
        writeln!(
            lines,
            "{name}{{route=\"{route}\",status=\"{status}\"}} {count}"
        )
        .unwrap();
    }
    out.push_str(&lines);

    let name = metric(
        &mut out,
        "cutout_cutout_duration_seconds",
        "histogram",
        "Time to answer a cut-out call (API and Try it), whatever the outcome.",
    );
    let mut cumulative = 0;
    for (le, count) in LATENCY_BUCKETS.iter().zip(s.histogram.buckets) {
        cumulative += count;
        writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}").unwrap();
    }
    writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", s.histogram.count).unwrap();
    writeln!(out, "{name}_sum {}", s.histogram.sum_seconds).unwrap();
    writeln!(out, "{name}_count {}", s.histogram.count).unwrap();

    let memory = queue.memory();
    let gauges = [
        (
            "cutout_images_processed_total",
            "counter",
            "Images cut out successfully.",
            s.images as f64,
        ),
        (
            "cutout_queue_depth",
            "gauge",
            "Cut-outs running or waiting for the model.",
            queue.depth() as f64,
        ),
        (
            "cutout_queue_capacity",
            "gauge",
            "Cut-outs the queue holds before answering 503.",
            queue.capacity() as f64,
        ),
        (
            "cutout_uploads_held_bytes",
            "gauge",
            "Bytes reserved by the uploads being read or waiting in the queue.",
            queue.uploads_held() as f64,
        ),
        (
            "cutout_memory_reserved_bytes",
            "gauge",
            "Bytes reserved by the cut-outs at work and the answers being sent, each at its peak.",
            memory.0 as f64,
        ),
        (
            "cutout_memory_budget_bytes",
            "gauge",
            "Bytes the cut-outs at work may reserve at once (server.memory_budget_mib).",
            memory.1 as f64,
        ),
        (
            "cutout_model_ready",
            "gauge",
            "1 once the model is loaded.",
            f64::from(u8::from(ready)),
        ),
        (
            "cutout_connections_open",
            "gauge",
            "Client connections open now.",
            connections.open as f64,
        ),
        (
            "cutout_connections_refused_total",
            "counter",
            "Connections closed at once: the cap in all or per address was reached, none idle.",
            connections.refused as f64,
        ),
        (
            "cutout_connections_evicted_total",
            "counter",
            "Connections closed to make room for a new one past a cap: idle, pipelining or hung up.",
            connections.evicted as f64,
        ),
        (
            "cutout_request_head_timeouts_total",
            "counter",
            "Request heads that did not arrive whole in time (408).",
            connections.head_timeouts as f64,
        ),
        (
            "cutout_uptime_seconds",
            "gauge",
            "Seconds since the server started.",
            s.uptime.as_secs_f64(),
        ),
    ];
    for (name, kind, help, value) in gauges {
        let name = metric(&mut out, name, kind, help);
        writeln!(out, "{name} {value}").unwrap();
    }
    if let Some(load) = s.model_load {
        let name = metric(
            &mut out,
            "cutout_model_load_seconds",
            "gauge",
            "How long loading the model took.",
        );
        writeln!(out, "{name} {}", load.as_secs_f64()).unwrap();
    }
    let name = metric(
        &mut out,
        "cutout_build_info",
        "gauge",
        "The running version and model.",
    );
    writeln!(
        out,
        "{name}{{version=\"{}\",model=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        state.pipeline.default_model().spec.name
    )
    .unwrap();
    out
}

/// Writes a metric's HELP and TYPE lines; returns its name.
fn metric<'n>(out: &mut String, name: &'n str, kind: &str, help: &str) -> &'n str {
    writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}").unwrap();
    name
}

pub fn response(state: &AppState, server: &tiny_http::Server) -> Body {
    body(render(state, server).into_bytes()).with_header(header(
        "Content-Type",
        "text/plain; version=0.0.4; charset=utf-8",
    ))
}
