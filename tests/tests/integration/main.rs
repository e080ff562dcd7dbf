//! Respite's integration tests against real redis-server, Redis Cluster, nutcracker, xDS and
//! client-library processes, one module per concern.
//!
//! They are one test binary, not one per file: each binary links the whole workspace with the
//! release profile's thin LTO (≈30 s each on 2 cores), which made building ~35 of them the
//! largest part of a CI run. `deploy/run-tests.sh` still runs every module in its own process
//! (`<binary> --exact <module>::…`), so modules keep their own statics and ports, and the long
//! or machine-wide ones keep their lanes. One module by hand:
//! `cargo test --release -p respite-tests --test integration -- proxy:: --test-threads 2`.
//!
//! Two tests stay binaries of their own: `alloc` installs a counting global allocator, and
//! `sockmap` re-runs modules of this binary inside a cgroup.

mod common;

mod address_in_use;
mod admin;
mod auth;
mod blocking;
mod chaos;
mod clients;
mod cluster;
mod config_cli;
mod control_file;
mod control_socket;
mod differential;
mod dns_cluster;
mod envoy_import;
mod external_auth;
mod failures;
mod faults;
mod health;
mod hostile;
mod hot_keys;
mod job_queue;
mod ketama_nutcracker;
mod large_requests;
mod latency;
mod loading;
mod log_limits;
mod migrate;
mod migration;
mod mirror;
mod non_hashing_lb;
mod observability_deploy;
mod proxy;
mod pubsub;
mod reconnect;
mod redis_suite;
mod regressions;
mod reload;
mod resp3_listener;
mod restart;
mod routes;
mod scripts;
mod stats;
mod tls;
mod tls_sessions;
mod transactions;
mod twemproxy_import;
mod upstream_credentials;
mod xds_e2e;
mod xds_transport;
mod zone_affinity;
