//! Per-worker pipelined upstream connections.
