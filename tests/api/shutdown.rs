//! Shutting down: requests in flight finish, new ones get 503.

use crate::helpers::*;
use cutout::EngineSource;
use std::sync::Arc;
use std::thread;

#[test]
fn shutdown_finishes_requests_in_flight_and_refuses_new_ones() {
    let gate = Arc::new(Gate::default());
    let app = Arc::new(spawn_app_with(
        EngineSource::Ready(Arc::new(GatedEngine(gate.clone()))),
        |_| {},
    ));
    let key = app.account("acme", "pro");
    let in_flight = {
        let (app, key) = (app.clone(), key.clone());
        thread::spawn(move || app.post_image(Some(&key), &jpeg(64, 48), None))
    };
    wait_until("the request is in flight", || app.in_flight("acme") == 1);

    let stopping = {
        let handle = app.shutdown.clone();
        thread::spawn(move || handle.shutdown())
    };
    wait_until("the app is stopping", || app.state.is_stopping());
    let refused = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (503, "service_unavailable")
    );

    gate.open();
    assert_eq!(in_flight.join().unwrap().status, 200);
    stopping.join().unwrap();
    assert_eq!(app.used("acme"), 1);
}
