//! Where config comes from: the gRPC xDS bootstrap ([`bootstrap`]) for a live management server,
//! or an Envoy bootstrap file's `static_resources` ([`envoy_file`]).

pub mod bootstrap;
pub mod envoy_file;
