//! What the API tests share, by what it helps with: the app in this process
//! (`app`), HTTP as a client speaks it (`http`), test images (`images`), the
//! dashboard as a browser uses it (`browser`), the binary as a child
//! process (`child`), HTTPS with a pinned certificate (`tls`), a
//! throw-away PostgreSQL server (`postgres`) and a relay that breaks its
//! connections on cue (`pg_relay`), a load balancer in front of several
//! appliances (`haproxy`) and a web server on the LAN (`web`).

mod app;
mod browser;
mod cgroup;
mod child;
mod haproxy;
mod http;
mod images;
mod pg_relay;
mod postgres;
mod tls;
mod web;

pub use app::*;
pub use browser::*;
pub use cgroup::*;
pub use child::*;
pub use haproxy::*;
pub use http::*;
pub use images::*;
pub use pg_relay::*;
pub use postgres::*;
pub use tls::*;
pub use web::*;
