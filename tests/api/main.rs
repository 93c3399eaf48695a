//! Black-box tests of the API over real sockets; one binary for all of them.

mod helpers;

mod cli;
mod dashboard;
mod engines;
mod errors;
mod formats;
mod limits;
mod metrics;
mod model;
mod openapi;
mod service;
mod shutdown;
mod sizes;
