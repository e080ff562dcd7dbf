//! Respite data plane: a thread-per-core io_uring RESP proxy.
//!
//! The modules, from the request's way in to its way out; each imports only those after it
//! (checked by a unit test, `layers_test.rs`): [`engine`] (workers, listeners, downstream
//! sessions) → [`admin`] (the HTTP endpoint) → [`router`] (routes, mirrors, faults) →
//! [`cluster`] (placement, health, slot maps, the per-worker pools) → [`upstream`] (pipelined
//! connections) → [`resp`] (framing) → [`net`] (the runtime). [`command`] (the command table)
//! sits below [`config`] (the model and validation), which checks command names against it;
//! [`stats`] (counters, histograms, the clock) imports nothing.

pub mod admin;
pub mod cluster;
pub mod command;
pub mod config;
pub mod engine;
pub mod migrate;
pub mod net;
pub mod resp;
pub mod router;
pub mod stats;
pub mod top;
pub mod upstream;

#[cfg(test)]
mod layers_test;
