//! Respite's operator tools, off the data path: the `respite` command's subcommands beside
//! running the proxy (`top`, `migrate`, `drain`) and the one client of the admin endpoints
//! ([`admin_client`]), which respite-control, the benchmark and the tests use too.
//!
//! The TUI and the Redis client sit behind the `top` and `migrate` features (both on by default;
//! the `respite` binary needs both), so a crate that only wants the admin client builds neither.

pub mod admin_client;
pub mod drain;
#[cfg(feature = "migrate")]
pub mod migrate;
#[cfg(feature = "top")]
pub mod top;
