//! Respite data plane: a thread-per-core io_uring RESP proxy.
//!
//! A request walks the modules in this order (DESIGN.md "Workspace layout"):
//! [`engine`] (workers, listeners, downstream sessions) → [`resp`] (framing) → [`command`]
//! (command table) → [`router`] (routes) → [`cluster`] (load balancers) → [`upstream`]
//! (per-worker pipelined connections) → back to the session, which writes replies in order.
//! [`config`] holds the model and validation, [`stats`] the counters, [`admin`] the HTTP endpoint.

pub mod admin;
pub mod cluster;
pub mod command;
pub mod config;
pub mod engine;
pub mod net;
pub mod resp;
pub mod router;
pub mod stats;
pub mod upstream;
