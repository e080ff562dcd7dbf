//! `respite-control`: the control process of Respite (docs/architecture.md, "Processes").
//!
//! It takes config from one source — a Respite TOML file, an Envoy bootstrap's
//! `static_resources`, or a live xDS management server (ADS, state-of-the-world or Delta) —
//! translates it into the data plane's one config model, validates it with the data plane's own
//! parser, and pushes it over the data plane's control socket. The data plane's accept or reject
//! becomes the xDS ACK or NACK.
//!
//! Folders: `source/` (where config comes from: gRPC xDS bootstrap, Envoy bootstrap file),
//! `translate/` (Envoy resources → Respite TOML tables), `xds/` (the ADS client: subscriptions,
//! versions, nonces, timers, backoff), `apply` (resource cache, warming, snapshot, push),
//! `push` (the control-socket client), `admin` (`/config_dump`, `/xds`, `/sockmap`), `sockmap`
//! (the eBPF loopback accelerator: `--sockmap`).

pub mod admin;
pub mod apply;
pub mod push;
pub mod sockmap;
pub mod source;
pub mod translate;
pub mod xds;
