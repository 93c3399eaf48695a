//! Black-box tests of the API over real sockets; one binary for all of them.

mod helpers;

mod attacks;
mod backdrops;
mod backup;
mod cli;
mod connections;
mod crash;
mod dashboard;
mod disk;
mod engines;
mod errors;
mod fetch;
mod fleet;
mod formats;
mod hostile;
mod ladder;
mod limits;
mod memory;
mod metrics;
mod model;
mod openapi;
mod options;
mod pairing;
mod removebg;
mod security;
mod service;
mod setup;
mod shutdown;
mod sizes;
mod soak;
mod store;
mod transport;
mod types;
mod upgrade;
