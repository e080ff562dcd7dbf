//! Smoke tests of `respite-bench compare` (also `--tls`), `run --tls-ca`, `soak` and `attack`
//! against real servers, with tiny run durations: one test binary (one link of the workspace),
//! one module per kind of run.
//! `deploy/run-tests.sh` runs each module in its own process; `sockmap_compare` alone, after the
//! others.

mod common;

mod attack;
mod cluster_compare;
mod pubsub_compare;
mod soak;
mod sockmap_compare;
mod standalone_compare;
mod stateful_compare;
mod stats_reader;
mod tls_compare;
