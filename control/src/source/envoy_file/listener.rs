//! `envoy.config.listener.v3.Listener` and its filter chains.

use envoy_types::pb::envoy::config::core::v3::TrafficDirection;
use envoy_types::pb::envoy::config::listener::v3 as l;
use serde_json::Value;

use super::any::any;
use super::core::{address, cidr_range, metadata, tcp_keepalive, transport_socket};
use super::reader::{Obj, Res, uint32};

/// A Listener: the fields a TCP (Redis) listener carries. UDP, API listeners, FCDS,
/// filter_chain_matcher, access logs and socket options are not mapped (unknown fields).
pub fn listener(v: &Value, p: &str) -> Res<l::Listener> {
    let mut o = Obj::new(v, p)?;
    let r = l::Listener {
        name: o.string("name")?,
        address: o.msg("address", address)?,
        additional_addresses: o.list("additional_addresses", |v, p| {
            let mut a = Obj::new(v, p)?;
            let r = l::AdditionalAddress {
                address: a.msg("address", address)?,
                tcp_keepalive: a.msg("tcp_keepalive", tcp_keepalive)?,
                ..Default::default()
            };
            a.done(r)
        })?,
        stat_prefix: o.string("stat_prefix")?,
        filter_chains: o.list("filter_chains", filter_chain)?,
        default_filter_chain: o.msg("default_filter_chain", filter_chain)?,
        use_original_dst: o.boolw("use_original_dst")?,
        per_connection_buffer_limit_bytes: o.u32w("per_connection_buffer_limit_bytes")?,
        per_connection_buffer_high_watermark_timeout: o
            .dur("per_connection_buffer_high_watermark_timeout")?,
        metadata: o.msg("metadata", metadata)?,
        drain_type: o.enm("drain_type", l::listener::DrainType::from_str_name)?,
        listener_filters: o.list("listener_filters", listener_filter)?,
        listener_filters_timeout: o.dur("listener_filters_timeout")?,
        continue_on_listener_filters_timeout: o.bool("continue_on_listener_filters_timeout")?,
        transparent: o.boolw("transparent")?,
        freebind: o.boolw("freebind")?,
        tcp_fast_open_queue_length: o.u32w("tcp_fast_open_queue_length")?,
        traffic_direction: o.enm("traffic_direction", TrafficDirection::from_str_name)?,
        enable_reuse_port: o.boolw("enable_reuse_port")?,
        tcp_backlog_size: o.u32w("tcp_backlog_size")?,
        max_connections_to_accept_per_socket_event: o
            .u32w("max_connections_to_accept_per_socket_event")?,
        bind_to_port: o.boolw("bind_to_port")?,
        enable_mptcp: o.bool("enable_mptcp")?,
        ignore_global_conn_limit: o.bool("ignore_global_conn_limit")?,
        bypass_overload_manager: o.bool("bypass_overload_manager")?,
        tcp_keepalive: o.msg("tcp_keepalive", tcp_keepalive)?,
        ..Default::default()
    };
    o.done(r)
}

#[allow(deprecated)] // use_proxy_proto is deprecated, still accepted by Envoy
fn filter_chain(v: &Value, p: &str) -> Res<l::FilterChain> {
    let mut o = Obj::new(v, p)?;
    let r = l::FilterChain {
        filter_chain_match: o.msg("filter_chain_match", filter_chain_match)?,
        filters: o.list("filters", filter)?,
        use_proxy_proto: o.boolw("use_proxy_proto")?,
        metadata: o.msg("metadata", metadata)?,
        transport_socket: o.msg("transport_socket", transport_socket)?,
        transport_socket_connect_timeout: o.dur("transport_socket_connect_timeout")?,
        name: o.string("name")?,
    };
    o.done(r)
}

fn filter(v: &Value, p: &str) -> Res<l::Filter> {
    let mut o = Obj::new(v, p)?;
    let r = l::Filter {
        name: o.string("name")?,
        config_type: o
            .msg("typed_config", any)?
            .map(l::filter::ConfigType::TypedConfig),
    };
    o.done(r)
}

fn filter_chain_match(v: &Value, p: &str) -> Res<l::FilterChainMatch> {
    use l::filter_chain_match::ConnectionSourceType;
    let mut o = Obj::new(v, p)?;
    let r = l::FilterChainMatch {
        destination_port: o.u32w("destination_port")?,
        prefix_ranges: o.list("prefix_ranges", cidr_range)?,
        address_suffix: o.string("address_suffix")?,
        suffix_len: o.u32w("suffix_len")?,
        direct_source_prefix_ranges: o.list("direct_source_prefix_ranges", cidr_range)?,
        source_type: o.enm("source_type", ConnectionSourceType::from_str_name)?,
        source_prefix_ranges: o.list("source_prefix_ranges", cidr_range)?,
        source_ports: o.list("source_ports", uint32)?,
        server_names: o.strings("server_names")?,
        transport_protocol: o.string("transport_protocol")?,
        application_protocols: o.strings("application_protocols")?,
    };
    o.done(r)
}

fn listener_filter(v: &Value, p: &str) -> Res<l::ListenerFilter> {
    let mut o = Obj::new(v, p)?;
    let r = l::ListenerFilter {
        name: o.string("name")?,
        filter_disabled: None,
        config_type: o
            .msg("typed_config", any)?
            .map(l::listener_filter::ConfigType::TypedConfig),
    };
    o.done(r)
}
