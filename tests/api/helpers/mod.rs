//! What the API tests share, by what it helps with: the app in this process
//! (`app`), HTTP as a client speaks it (`http`), test images (`images`), the
//! dashboard as a browser uses it (`browser`), and the binary as a child
//! process (`child`).

mod app;
mod browser;
mod child;
mod http;
mod images;

pub use app::*;
pub use browser::*;
pub use child::*;
pub use http::*;
pub use images::*;
