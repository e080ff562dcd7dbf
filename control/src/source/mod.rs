//! Where config comes from: the gRPC xDS bootstrap ([`bootstrap`]) for a live management server,
//! an Envoy bootstrap file's `static_resources` ([`envoy_file`]), or a twemproxy
//! `nutcracker.yml` ([`twemproxy`]).

pub mod bootstrap;
pub mod envoy_file;
pub mod twemproxy;
