//! Respite data plane: a thread-per-core io_uring RESP proxy.
//!
//! A request walks the modules from [`engine`] (workers, listeners, downstream sessions) to
//! [`router`] (routes, mirrors, faults), [`cluster`] (placement, health, slot maps, the
//! per-worker pools) and [`upstream`] (pipelined connections), framed by [`resp`] over [`net`]
//! (the runtime); [`admin`] is the HTTP endpoint. Imports go one way only, down that order:
//! no module imports one above it. [`config`] (the model and validation) checks command names
//! against [`command`] (the command table), so the command table sits below everything that
//! reads the config and uses only [`resp`] and [`stats`]; [`stats`] (counters, histograms, the
//! clock) imports nothing. `layers_test.rs` holds the table of allowed imports and checks every
//! source file against it.

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

#[cfg(test)]
mod layers_test;
