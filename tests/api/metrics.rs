//! `GET /metrics` in Prometheus' text format.

use crate::helpers::*;

fn metrics(app: &TestApp) -> String {
    let reply = app.request("GET", "/metrics", &[], b"");
    assert_eq!(reply.status, 200);
    assert!(reply
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    reply.text()
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_count_requests_by_status_latency_images_and_the_queue() {
    let app = spawn_app();
    let key = app.account("booth", "pro");
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 200);
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 200);
    assert_eq!(app.post_image(None, &jpeg(64, 48), None).status, 401);
    app.request("GET", "/made-up/path/1", &[], b"");

    let text = metrics(&app);
    let requests = "cutout_http_requests_total";
    assert_eq!(
        value(
            &text,
            &format!("{requests}{{route=\"remove_bg\",status=\"200\"}}")
        ),
        2.0
    );
    assert_eq!(
        value(
            &text,
            &format!("{requests}{{route=\"remove_bg\",status=\"401\"}}")
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            &format!("{requests}{{route=\"other\",status=\"404\"}}")
        ),
        1.0
    );
    assert!(!text.contains("made-up"), "paths never become labels");
    assert_eq!(value(&text, "cutout_cutout_duration_seconds_count"), 3.0);
    assert_eq!(
        value(&text, "cutout_cutout_duration_seconds_bucket{le=\"+Inf\"}"),
        3.0
    );
    assert!(value(&text, "cutout_cutout_duration_seconds_sum") > 0.0);
    assert_eq!(value(&text, "cutout_images_processed_total"), 2.0);
    assert_eq!(value(&text, "cutout_queue_depth"), 0.0);
    assert_eq!(value(&text, "cutout_queue_capacity"), 66.0);
    assert_eq!(value(&text, "cutout_uploads_held_bytes"), 0.0);
    assert_eq!(value(&text, "cutout_model_ready"), 1.0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, number) = line.rsplit_once(' ').unwrap();
        assert!(number.parse::<f64>().is_ok(), "not a sample: {line}");
    }
}

#[test]
fn histogram_buckets_are_cumulative() {
    let app = spawn_app();
    let key = app.account("booth", "pro");
    app.post_image(Some(&key), &jpeg(64, 48), None);
    let text = metrics(&app);
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("cutout_cutout_duration_seconds_bucket"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert_eq!(buckets.len(), 11);
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(*buckets.last().unwrap(), 1.0);
}

#[test]
fn model_load_seconds_appear_once_the_model_has_loaded() {
    let app = spawn_app_with(cutout::EngineSource::Load, |_| {});
    wait_until("the model is loaded", || {
        app.request("GET", "/readyz", &[], b"").status == 200
    });
    assert!(value(&metrics(&app), "cutout_model_load_seconds") > 0.0);
}
