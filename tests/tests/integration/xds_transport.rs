//! The xDS transport rules, one test (or a few) per rule; a test's name starts with its rule's
//! number:
//!
//! 1. ACK = the response's version and nonce; NACK = its nonce, the *previously accepted*
//!    version and an `error_detail` naming each rejected resource; one ACK or NACK per response.
//! 2. A rejected resource keeps its last good version; valid ones in the same response apply.
//! 3. Resources not requested are ignored (not validated, cached or NACKed) unless the type is
//!    under a wildcard subscription.
//! 4. An empty name list is a wildcard only in the first request of a type on a stream; after a
//!    named request it unsubscribes from all. Unsubscribing sends the remaining names;
//!    re-subscribing gets the resource again.
//! 5. SotW LDS and CDS responses are complete (absent = deleted, cascading to EDS); EDS
//!    responses are partial; Delta deletes through `removed_resources`.
//! 6. A does-not-exist timer per newly requested resource, started only once the request is on
//!    a connected stream, cancelled when the resource (even an invalid one) arrives.
//! 7. Reconnect with jittered exponential backoff, reset only after a response; a new stream
//!    re-sends every subscribed type with the last accepted version, an empty nonce and the node,
//!    and never a type without subscriptions; Delta sends `initial_resource_versions`, and a
//!    wildcard stays wildcard.
//! 8. Nonces are tracked per type for the whole stream, also for types with no watchers left.
//! 9. No hot loop: a server re-sending a rejected response gets one NACK each, no reconnect.
//! 10. Responses over gRPC's 4 MiB default are accepted.
//! 11. Warming: a listener naming a cluster not yet known waits for it.
//!
//! Each runs `respite-control --bootstrap` (no `--dataplane`: it validates and serves
//! `/config_dump`) against the scripted management server and asserts on the exact requests
//! it sends, and on its `/xds` and `/config_dump` pages. Written from the spec (Envoy's
//! `api/xds_protocol.rst`, `discovery.proto`, gRFCs A27, A46, A57), not from the client.
//!
//! Needs `cargo build --release -p respite-control` first.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::protobuf::Any;
use respite_tests::free_port;
use respite_tests::xds::*;
use respite_tests::xds_resources::*;
use serde_json::{Value, json};

/// How long to wait for a request the client must send.
const T: Duration = Duration::from_secs(10);

fn up(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn listen_addr() -> SocketAddr {
    up(free_port())
}

fn start(delta: bool, extra: Value) -> (XdsServer, ControlProcess) {
    let server = XdsServer::start();
    let ctl = ControlProcess::start(&bootstrap(server.addr(), delta, extra), None);
    (server, ctl)
}

fn names(r: &DiscoveryRequest) -> BTreeSet<String> {
    r.resource_names.iter().cloned().collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The first LDS and CDS requests of a wildcard client: empty names, version and nonce, on
/// stream 1, the earlier one carrying the node.
fn wildcard_start(server: &XdsServer) -> (DiscoveryRequest, DiscoveryRequest) {
    let lds = server.expect_type(LISTENER, T, "first LDS request");
    let cds = server.expect_type(CLUSTER, T, "first CDS request");
    for r in [&lds, &cds] {
        let q = r.sotw();
        assert_eq!(r.stream, 1);
        assert!(q.resource_names.is_empty(), "wildcard = empty names: {q:?}");
        assert_eq!(q.version_info, "", "{q:?}");
        assert_eq!(q.response_nonce, "", "{q:?}");
        assert!(q.error_detail.is_none(), "{q:?}");
    }
    let first = if lds.at <= cds.at { &lds } else { &cds };
    let node = first
        .sotw()
        .node
        .as_ref()
        .expect("node on the stream's first request");
    assert_eq!(node.id, NODE_ID);
    assert_eq!(node.cluster, NODE_CLUSTER);
    (lds.sotw().clone(), cds.sotw().clone())
}

fn assert_ack(r: &DiscoveryRequest, version: &str, nonce: &str) {
    assert!(
        r.error_detail.is_none(),
        "expected an ACK, got a NACK: {r:?}"
    );
    assert_eq!(r.version_info, version, "ACK version: {r:?}");
    assert_eq!(r.response_nonce, nonce, "ACK nonce: {r:?}");
}

/// A NACK: the rejected response's nonce, the previously accepted `version`, and an
/// `error_detail` with a non-OK code whose message names each of `rejected`.
fn assert_nack(r: &DiscoveryRequest, version: &str, nonce: &str, rejected: &[&str]) {
    let e = r
        .error_detail
        .as_ref()
        .unwrap_or_else(|| panic!("expected a NACK: {r:?}"));
    assert_ne!(e.code, 0, "NACK code must not be OK: {e:?}");
    assert_eq!(
        r.version_info, version,
        "NACK carries the last accepted version: {r:?}"
    );
    assert_eq!(r.response_nonce, nonce, "NACK nonce: {r:?}");
    for name in rejected {
        assert!(
            e.message.contains(name),
            "error_detail names {name}: {:?}",
            e.message
        );
    }
    assert!(
        e.message.len() < 16 * 1024,
        "bounded error_detail: {} bytes",
        e.message.len()
    );
}

/// Sends a SotW response and returns the client's reply of that type.
fn exchange(
    server: &XdsServer,
    type_url: &str,
    version: &str,
    nonce: &str,
    res: Vec<Any>,
) -> DiscoveryRequest {
    server.send(sotw(type_url, version, nonce, res));
    server
        .expect_type(
            type_url,
            T,
            &format!("reply to {type_url} {version}/{nonce}"),
        )
        .sotw()
        .clone()
}

/// CDS v "c1" with static cluster c1, LDS v "l1" with listener l1 → c1 on `addr`; both ACKed.
fn setup_c1_l1(server: &XdsServer, addr: SocketAddr) {
    wildcard_start(server);
    let ack = exchange(
        server,
        CLUSTER,
        "c1",
        "nc1",
        vec![any(static_cluster("c1", &[up(7001)]))],
    );
    assert_ack(&ack, "c1", "nc1");
    let ack = exchange(
        server,
        LISTENER,
        "l1",
        "nl1",
        vec![any(listener("l1", addr, "c1"))],
    );
    assert_ack(&ack, "l1", "nl1");
}

fn state(ctl: &ControlProcess, type_url: &str, name: &str) -> Option<String> {
    ctl.resource(type_url, name)
        .and_then(|r| r["state"].as_str().map(str::to_string))
}

/// Waits until resource (type, name) is in `want` state on /xds.
fn wait_state(ctl: &ControlProcess, type_url: &str, name: &str, want: &str) -> Value {
    wait_for(T, || {
        ctl.resource(type_url, name).filter(|r| r["state"] == want)
    })
    .unwrap_or_else(|| panic!("{name} never {want}: /xds = {}", ctl.xds_status()))
}

fn wait_applied_listener(ctl: &ControlProcess, name: &str) -> Value {
    wait_for(T, || ctl.applied("listeners").get(name).cloned())
        .unwrap_or_else(|| panic!("listener {name} never applied: {}", ctl.config_dump()))
}

fn host_texts(cluster: &Value) -> Vec<String> {
    cluster["hosts"]
        .as_array()
        .map(|hs| {
            hs.iter()
                .filter_map(|h| h["address_text"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

// ---- rule 1: ACK / NACK -----------------------------------------------------------------

#[test]
fn rule1_ack_carries_version_and_nonce() {
    let (server, ctl) = start(false, json!({}));
    let addr = listen_addr();
    wildcard_start(&server);
    let ack = exchange(
        &server,
        CLUSTER,
        "c-v1",
        "n-c1",
        vec![any(static_cluster("c1", &[up(7001)]))],
    );
    assert_ack(&ack, "c-v1", "n-c1");
    assert!(
        ack.resource_names.is_empty(),
        "wildcard CDS stays []: {ack:?}"
    );
    assert_eq!(ack.type_url, CLUSTER);
    let ack = exchange(
        &server,
        LISTENER,
        "l-v1",
        "n-l1",
        vec![any(listener("l1", addr, "c1"))],
    );
    assert_ack(&ack, "l-v1", "n-l1");
    server.expect_none(Duration::from_secs(1));

    let l1 = wait_state(&ctl, LISTENER, "l1", "ACKED");
    assert_eq!(l1["version"], "l-v1");
    assert_eq!(wait_state(&ctl, CLUSTER, "c1", "ACKED")["version"], "c-v1");
    let applied = wait_applied_listener(&ctl, "l1");
    assert_eq!(applied["address"], addr.to_string());
    assert_eq!(applied["prefix_routes"]["catch_all_route"]["cluster"], "c1");
}

#[test]
fn rule1_nack_carries_previous_version_and_error_detail() {
    let (server, ctl) = start(false, json!({}));
    setup_c1_l1(&server, listen_addr());
    let nack = exchange(
        &server,
        LISTENER,
        "l2",
        "nl2",
        vec![
            any(listener("l1", listen_addr(), "c1")),
            any(bad_listener_over("lbad-x", listen_addr(), "c1")),
        ],
    );
    assert_nack(&nack, "l1", "nl2", &["lbad-x", "key_formatter"]);
    server.expect_none(Duration::from_secs(1));
    let xds = ctl.xds_status();
    assert_eq!(xds["types"][LISTENER]["version"], "l1", "{xds}");
    assert_eq!(xds["types"][LISTENER]["nacks"], 1, "{xds}");
    assert_eq!(xds["types"][LISTENER]["last_nack"]["nonce"], "nl2", "{xds}");
}

#[test]
fn rule1_nack_before_any_accept_has_empty_version() {
    let (server, _ctl) = start(false, json!({}));
    wildcard_start(&server);
    let nack = exchange(
        &server,
        LISTENER,
        "l1",
        "nl1",
        vec![any(bad_listener("lb1")), any(bad_listener("lb2"))],
    );
    assert_nack(&nack, "", "nl1", &["lb1", "lb2"]);
}

#[test]
fn rule1_one_reply_per_response() {
    let (server, _ctl) = start(false, json!({}));
    wildcard_start(&server);
    for i in 1..=3 {
        server.send(sotw(
            CLUSTER,
            &format!("v{i}"),
            &format!("n{i}"),
            vec![any(static_cluster("c1", &[up(7000 + i)]))],
        ));
    }
    for i in 1..=3 {
        let r = server.expect_type(CLUSTER, T, "one reply per response");
        assert_ack(r.sotw(), &format!("v{i}"), &format!("n{i}"));
    }
    server.expect_none(Duration::from_secs(1));
}

#[test]
fn rule1_type_mismatch_and_duplicate_names_are_nacked() {
    let (server, _ctl) = start(false, json!({}));
    wildcard_start(&server);
    // A Listener inside a CDS response (discovery.proto DiscoveryResponse.type_url).
    let nack = exchange(
        &server,
        CLUSTER,
        "c1",
        "n1",
        vec![any(listener("cx", listen_addr(), "c1"))],
    );
    assert_nack(&nack, "", "n1", &["cx"]);
    // Two resources of one name (xds_protocol.rst "Duplicate Resource Names").
    let c = any(static_cluster("dup", &[up(7001)]));
    let nack = exchange(&server, CLUSTER, "c2", "n2", vec![c.clone(), c]);
    assert_nack(&nack, "", "n2", &["dup"]);
}

// ---- rule 2: a rejected resource keeps its last good version -----------------------------

#[test]
fn rule2_rejected_resource_keeps_last_good_and_valid_ones_apply() {
    let (server, ctl) = start(false, json!({}));
    let a = listen_addr();
    setup_c1_l1(&server, a);
    wait_applied_listener(&ctl, "l1");
    let (b, c) = (listen_addr(), listen_addr());
    let nack = exchange(
        &server,
        LISTENER,
        "l2",
        "nl2",
        vec![
            any(bad_listener_over("l1", b, "c1")),
            any(listener("l2", c, "c1")),
        ],
    );
    assert_nack(&nack, "l1", "nl2", &["l1"]);

    let l1 = wait_state(&ctl, LISTENER, "l1", "NACKED");
    assert_eq!(l1["version"], "l1", "last good version kept: {l1}");
    assert_eq!(l1["rejected_version"], "l2", "{l1}");
    assert!(
        l1["error"]
            .as_str()
            .unwrap_or_default()
            .contains("key_formatter"),
        "{l1}"
    );
    let l2 = wait_state(&ctl, LISTENER, "l2", "ACKED");
    assert_eq!(l2["version"], "l2");

    let l2_applied = wait_applied_listener(&ctl, "l2");
    assert_eq!(l2_applied["address"], c.to_string());
    let applied = ctl.applied("listeners");
    assert_eq!(
        applied["l1"]["address"],
        a.to_string(),
        "l1 keeps its last good config: {applied:?}"
    );
}

// ---- rule 3: unrequested resources are ignored unless wildcard -----------------------------

#[test]
fn rule3_unrequested_eds_resources_are_ignored_not_validated() {
    let (server, ctl) = start(false, json!({}));
    wildcard_start(&server);
    let ack = exchange(&server, CLUSTER, "c1", "nc1", vec![any(eds_cluster("e1"))]);
    assert_ack(&ack, "c1", "nc1");
    let eds = server.expect_type(ENDPOINT, T, "EDS subscription from the cluster");
    assert_eq!(names(eds.sotw()), set(&["e1"]));
    // "stranger" was never requested, and is invalid: it must not be validated or NACKed.
    let ack = exchange(
        &server,
        ENDPOINT,
        "e1",
        "ne1",
        vec![any(cla("e1", &[up(7001)])), any(bad_cla("stranger"))],
    );
    assert_ack(&ack, "e1", "ne1");
    assert_eq!(names(&ack), set(&["e1"]));
    wait_state(&ctl, ENDPOINT, "e1", "ACKED");
    assert_eq!(
        ctl.resource(ENDPOINT, "stranger"),
        None,
        "not cached: {}",
        ctl.xds_status()
    );
}

#[test]
fn rule3_wildcard_lds_takes_and_validates_every_listener() {
    let (server, ctl) = start(false, json!({}));
    wildcard_start(&server);
    assert_ack(
        &exchange(
            &server,
            CLUSTER,
            "c1",
            "nc1",
            vec![any(static_cluster("c1", &[up(7001)]))],
        ),
        "c1",
        "nc1",
    );
    let nack = exchange(
        &server,
        LISTENER,
        "l1",
        "nl1",
        vec![
            any(listener("never-named-1", listen_addr(), "c1")),
            any(listener("never-named-2", listen_addr(), "c1")),
            any(bad_listener("never-named-bad")),
        ],
    );
    // Under a wildcard everything is taken, so the bad one is validated and NACKed...
    assert_nack(&nack, "", "nl1", &["never-named-bad"]);
    // ...and the others apply.
    wait_applied_listener(&ctl, "never-named-1");
    wait_applied_listener(&ctl, "never-named-2");
    assert_eq!(
        state(&ctl, LISTENER, "never-named-1").as_deref(),
        Some("ACKED")
    );
}

// ---- rule 4: empty lists, unsubscribe, re-subscribe ----------------------------------------

/// CDS "c1" = [eds e1]; EDS request [e1]; EDS "e1" = cla e1 ACKed.
fn setup_e1(server: &XdsServer) {
    wildcard_start(server);
    assert_ack(
        &exchange(server, CLUSTER, "c1", "nc1", vec![any(eds_cluster("e1"))]),
        "c1",
        "nc1",
    );
    let eds = server.expect_type(ENDPOINT, T, "EDS subscription");
    assert_eq!(names(eds.sotw()), set(&["e1"]));
    assert_eq!(eds.sotw().version_info, "");
    assert_ack(
        &exchange(
            server,
            ENDPOINT,
            "e1",
            "ne1",
            vec![any(cla("e1", &[up(7001)]))],
        ),
        "e1",
        "ne1",
    );
}

#[test]
fn rule4_empty_list_after_names_means_unsubscribe_all() {
    let (server, ctl) = start(false, json!({}));
    setup_e1(&server);
    wait_state(&ctl, ENDPOINT, "e1", "ACKED");
    // The cluster goes away: EDS is left with no names, sent as [] (not a wildcard).
    assert_ack(
        &exchange(&server, CLUSTER, "c2", "nc2", vec![]),
        "c2",
        "nc2",
    );
    let unsub = server.expect_type(ENDPOINT, T, "EDS unsubscribe");
    let u = unsub.sotw();
    assert!(u.resource_names.is_empty(), "{u:?}");
    assert_eq!(u.version_info, "e1");
    assert_eq!(u.response_nonce, "ne1");
    assert!(u.error_detail.is_none());
    // The server sends it anyway: ignored (one reply, no error), not cached, not applied.
    let ack = exchange(
        &server,
        ENDPOINT,
        "e2",
        "ne2",
        vec![any(cla("e1", &[up(7002)]))],
    );
    assert!(ack.error_detail.is_none(), "{ack:?}");
    assert_eq!(ack.response_nonce, "ne2");
    assert!(ack.resource_names.is_empty(), "{ack:?}");
    std::thread::sleep(Duration::from_millis(500));
    let row = ctl.resource(ENDPOINT, "e1");
    assert!(
        row.as_ref().is_none_or(|r| r["version"] != "e2"),
        "unsubscribed e1 was taken: {row:?}"
    );
    assert!(
        !ctl.applied("clusters").contains_key("e1"),
        "{}",
        ctl.config_dump()
    );
}

#[test]
fn rule4_unsubscribe_sends_the_remaining_names_and_resubscribe_gets_it_again() {
    let (server, ctl) = start(false, json!({}));
    wildcard_start(&server);
    let both = vec![any(eds_cluster("e1")), any(eds_cluster("e2"))];
    assert_ack(
        &exchange(&server, CLUSTER, "c1", "nc1", both.clone()),
        "c1",
        "nc1",
    );
    let r = wait_for(T, || {
        server
            .recv_type(ENDPOINT, T)
            .filter(|r| names(r.sotw()) == set(&["e1", "e2"]))
    });
    assert!(r.is_some(), "EDS request [e1, e2]");
    assert_ack(
        &exchange(
            &server,
            ENDPOINT,
            "e1",
            "ne1",
            vec![any(cla("e1", &[up(7001)])), any(cla("e2", &[up(7002)]))],
        ),
        "e1",
        "ne1",
    );
    // Unsubscribe e1: the request lists what remains.
    assert_ack(
        &exchange(&server, CLUSTER, "c2", "nc2", vec![any(eds_cluster("e2"))]),
        "c2",
        "nc2",
    );
    let r = server.expect_type(ENDPOINT, T, "EDS unsubscribe of e1");
    assert_eq!(names(r.sotw()), set(&["e2"]), "{:?}", r.req);
    // Re-subscribe: e1 must be requested again and not served from a stale cache.
    assert_ack(&exchange(&server, CLUSTER, "c3", "nc3", both), "c3", "nc3");
    let r = server.expect_type(ENDPOINT, T, "EDS re-subscribe of e1");
    assert_eq!(names(r.sotw()), set(&["e1", "e2"]), "{:?}", r.req);
    let row = wait_for(T, || ctl.resource(ENDPOINT, "e1")).expect("e1 row");
    assert_eq!(
        row["state"], "REQUESTED",
        "re-subscribed e1 is not assumed cached: {row}"
    );
    assert_ack(
        &exchange(
            &server,
            ENDPOINT,
            "e3",
            "ne3",
            vec![any(cla("e1", &[up(7003)]))],
        ),
        "e3",
        "ne3",
    );
    wait_state(&ctl, ENDPOINT, "e1", "ACKED");
}

// ---- rule 5: SotW LDS/CDS complete, EDS partial, Delta removed_resources -------------------

#[test]
fn rule5_sotw_lds_absent_listener_is_deleted() {
    let (server, ctl) = start(false, json!({}));
    wildcard_start(&server);
    assert_ack(
        &exchange(
            &server,
            CLUSTER,
            "c1",
            "nc1",
            vec![any(static_cluster("c1", &[up(7001)]))],
        ),
        "c1",
        "nc1",
    );
    let l = vec![
        any(listener("l1", listen_addr(), "c1")),
        any(listener("l2", listen_addr(), "c1")),
    ];
    assert_ack(&exchange(&server, LISTENER, "l1", "nl1", l), "l1", "nl1");
    wait_applied_listener(&ctl, "l1");
    assert_ack(
        &exchange(
            &server,
            LISTENER,
            "l2",
            "nl2",
            vec![any(listener("l2", listen_addr(), "c1"))],
        ),
        "l2",
        "nl2",
    );
    let gone = wait_for(T, || {
        (!ctl.applied("listeners").contains_key("l1")).then_some(())
    });
    assert!(
        gone.is_some(),
        "absent l1 still applied: {}",
        ctl.config_dump()
    );
    assert!(ctl.applied("listeners").contains_key("l2"));
    let row = ctl.resource(LISTENER, "l1");
    assert!(
        row.as_ref().is_none_or(|r| r["state"] == "DOES_NOT_EXIST"),
        "{row:?}"
    );
}

#[test]
fn rule5_sotw_cds_absent_cluster_is_deleted_and_its_eds_unsubscribed() {
    let (server, ctl) = start(false, json!({}));
    wildcard_start(&server);
    let cs = vec![
        any(static_cluster("c1", &[up(7001)])),
        any(eds_cluster("e1")),
    ];
    assert_ack(&exchange(&server, CLUSTER, "c1", "nc1", cs), "c1", "nc1");
    let r = server.expect_type(ENDPOINT, T, "EDS subscription");
    assert_eq!(names(r.sotw()), set(&["e1"]));
    assert_ack(
        &exchange(
            &server,
            ENDPOINT,
            "e1",
            "ne1",
            vec![any(cla("e1", &[up(7002)]))],
        ),
        "e1",
        "ne1",
    );
    assert_ack(
        &exchange(
            &server,
            CLUSTER,
            "c2",
            "nc2",
            vec![any(static_cluster("c1", &[up(7001)]))],
        ),
        "c2",
        "nc2",
    );
    let r = server.expect_type(ENDPOINT, T, "cascade: EDS unsubscribe");
    assert!(r.sotw().resource_names.is_empty(), "{:?}", r.req);
    let gone = wait_for(T, || {
        (!ctl.applied("clusters").contains_key("e1")).then_some(())
    });
    assert!(gone.is_some(), "{}", ctl.config_dump());
    let row = ctl.resource(CLUSTER, "e1");
    assert!(
        row.as_ref().is_none_or(|r| r["state"] == "DOES_NOT_EXIST"),
        "{row:?}"
    );
}

#[test]
fn rule5_sotw_eds_response_is_partial() {
    let (server, ctl) = start(false, json!({}));
    wildcard_start(&server);
    let cs = vec![any(eds_cluster("e1")), any(eds_cluster("e2"))];
    assert_ack(&exchange(&server, CLUSTER, "c1", "nc1", cs), "c1", "nc1");
    assert!(
        wait_for(T, || server.recv_type(ENDPOINT, T).filter(|r| names(
            r.sotw()
        ) == set(&[
            "e1", "e2"
        ])))
        .is_some()
    );
    let both = vec![any(cla("e1", &[up(7001)])), any(cla("e2", &[up(7002)]))];
    assert_ack(&exchange(&server, ENDPOINT, "e1", "ne1", both), "e1", "ne1");
    let routes = [("a:", "e1"), ("b:", "e2")];
    let l = listener_routes("l1", listen_addr(), &routes, None);
    assert_ack(
        &exchange(&server, LISTENER, "l1", "nl1", vec![any(l)]),
        "l1",
        "nl1",
    );
    wait_applied_listener(&ctl, "l1");
    // Only e2 changes; e1 is absent from the response and must stay as it was.
    assert_ack(
        &exchange(
            &server,
            ENDPOINT,
            "e2",
            "ne2",
            vec![any(cla("e2", &[up(7003)]))],
        ),
        "e2",
        "ne2",
    );
    let clusters = wait_for(T, || {
        let c = ctl.applied("clusters");
        (c.get("e2").map(host_texts) == Some(vec!["127.0.0.1:7003".to_string()])).then_some(c)
    })
    .unwrap_or_else(|| panic!("e2 not updated: {}", ctl.config_dump()));
    assert_eq!(
        host_texts(&clusters["e1"]),
        vec!["127.0.0.1:7001".to_string()]
    );
    assert_eq!(state(&ctl, ENDPOINT, "e1").as_deref(), Some("ACKED"));
}

#[test]
fn rule5_delta_removed_resources_deletes() {
    let (server, ctl) = start(true, json!({}));
    let l = server
        .expect_type(LISTENER, T, "first delta LDS")
        .delta()
        .clone();
    let _c = server.expect_type(CLUSTER, T, "first delta CDS");
    assert!(
        l.resource_names_subscribe.iter().all(|n| n == "*"),
        "wildcard: {l:?}"
    );
    server.send_delta(delta_resp(
        CLUSTER,
        "s1",
        "dc1",
        vec![("c1", "cv1", any(static_cluster("c1", &[up(7001)])))],
        &[],
    ));
    let ack = server
        .expect_type(CLUSTER, T, "delta CDS ACK")
        .delta()
        .clone();
    assert_eq!(ack.response_nonce, "dc1");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    let ls = vec![
        ("l1", "a1", any(listener("l1", listen_addr(), "c1"))),
        ("l2", "b1", any(listener("l2", listen_addr(), "c1"))),
    ];
    server.send_delta(delta_resp(LISTENER, "s1", "dl1", ls, &[]));
    let ack = server
        .expect_type(LISTENER, T, "delta LDS ACK")
        .delta()
        .clone();
    assert_eq!(ack.response_nonce, "dl1");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    wait_applied_listener(&ctl, "l1");
    server.send_delta(delta_resp(LISTENER, "s2", "dl2", vec![], &["l1"]));
    let ack = server
        .expect_type(LISTENER, T, "delta LDS ACK of the removal")
        .delta()
        .clone();
    assert_eq!(ack.response_nonce, "dl2");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    let gone = wait_for(T, || {
        (!ctl.applied("listeners").contains_key("l1")).then_some(())
    });
    assert!(gone.is_some(), "{}", ctl.config_dump());
    assert!(ctl.applied("listeners").contains_key("l2"));
}

// ---- rule 6: the does-not-exist timer ------------------------------------------------------

#[test]
fn rule6_does_not_exist_only_after_the_timeout_then_accepted_later() {
    let (server, ctl) = start(false, json!({"resource_timeout": "2s"}));
    wildcard_start(&server);
    assert_ack(
        &exchange(&server, CLUSTER, "c1", "nc1", vec![any(eds_cluster("e1"))]),
        "c1",
        "nc1",
    );
    let req = server.expect_type(ENDPOINT, T, "EDS subscription");
    let t0 = req.at;
    let mut first_dne = None;
    while t0.elapsed() < Duration::from_secs(8) {
        let s = state(&ctl, ENDPOINT, "e1");
        if s.as_deref() == Some("DOES_NOT_EXIST") {
            first_dne = Some(t0.elapsed());
            break;
        }
        assert!(s.is_none() || s.as_deref() == Some("REQUESTED"), "{s:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = first_dne.expect("e1 never DOES_NOT_EXIST");
    println!("does-not-exist after {after:?} (timeout 2s)");
    assert!(
        after >= Duration::from_millis(1500),
        "fired early: {after:?}"
    );
    // A missing resource can still arrive later (xds_protocol.rst "Knowing When a Requested
    // Resource Does Not Exist").
    assert_ack(
        &exchange(
            &server,
            ENDPOINT,
            "e1",
            "ne1",
            vec![any(cla("e1", &[up(7001)]))],
        ),
        "e1",
        "ne1",
    );
    wait_state(&ctl, ENDPOINT, "e1", "ACKED");
}

#[test]
fn rule6_timer_not_started_while_streams_are_refused() {
    let server = XdsServer::start();
    server.refuse_streams(3);
    let ctl = ControlProcess::start(
        &bootstrap(
            server.addr(),
            false,
            json!({"listener_names": ["l1"], "resource_timeout": "2s"}),
        ),
        None,
    );
    // ~1 + 1.6 + 2.56 s of refused streams: far longer than the 2 s timeout.
    let started = Instant::now();
    while server.streams_opened() < 4 {
        assert!(started.elapsed() < Duration::from_secs(30), "no 4th stream");
        let s = state(&ctl, LISTENER, "l1");
        assert_ne!(
            s.as_deref(),
            Some("DOES_NOT_EXIST"),
            "timer ran while not connected"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("4 streams after {:?}", started.elapsed());
    let req = server.expect_type(LISTENER, T, "named LDS on the 4th stream");
    assert_eq!(req.stream, 4);
    assert_eq!(names(req.sotw()), set(&["l1"]));
    let t0 = req.at;
    wait_state(&ctl, LISTENER, "l1", "DOES_NOT_EXIST");
    println!("does-not-exist {:?} after the request", t0.elapsed());
    assert!(t0.elapsed() >= Duration::from_millis(1500));
}

#[test]
fn rule6_invalid_resource_cancels_the_timer() {
    let (server, ctl) = start(
        false,
        json!({"listener_names": ["l1"], "resource_timeout": "2s"}),
    );
    let req = server.expect_type(LISTENER, T, "named LDS");
    assert_eq!(names(req.sotw()), set(&["l1"]));
    let nack = exchange(
        &server,
        LISTENER,
        "l1",
        "nl1",
        vec![any(bad_listener("l1"))],
    );
    assert_nack(&nack, "", "nl1", &["l1"]);
    std::thread::sleep(Duration::from_millis(3500));
    let row = ctl.resource(LISTENER, "l1").expect("l1 row");
    assert_eq!(
        row["state"], "NACKED",
        "an invalid resource is not a missing one: {row}"
    );
}

// ---- rule 7: reconnect -------------------------------------------------------------------

#[test]
fn rule7_backoff_grows_with_jitter_and_resets_after_a_response() {
    let server = XdsServer::start();
    server.refuse_streams(4);
    let ctl = ControlProcess::start(&bootstrap(server.addr(), false, json!({})), None);
    assert!(server.wait_streams(5, Duration::from_secs(30)), "5 streams");
    let times = server.stream_open_times();
    let nominal = [1.0, 1.6, 2.56, 4.096];
    let ratios: Vec<f64> = times
        .windows(2)
        .zip(nominal)
        .map(|(w, n)| (w[1] - w[0]).as_secs_f64() / n)
        .collect();
    println!("refused-stream intervals / nominal: {ratios:?}");
    for (i, r) in ratios.iter().enumerate() {
        assert!(
            (0.75..=1.45).contains(r),
            "interval {i} is {r}x its nominal {}s",
            nominal[i]
        );
    }
    let spread = ratios.iter().cloned().fold(f64::MIN, f64::max)
        - ratios.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread > 0.03, "no jitter: {ratios:?}");

    // A response resets the backoff.
    wildcard_start_on(&server, 5);
    assert_ack(
        &exchange(
            &server,
            CLUSTER,
            "c1",
            "nc1",
            vec![any(static_cluster("c1", &[up(7001)]))],
        ),
        "c1",
        "nc1",
    );
    let closed = Instant::now();
    server.close_stream(tonic::Status::unavailable("rebalance"));
    assert!(
        server.wait_streams(6, Duration::from_secs(15)),
        "6th stream"
    );
    let gap = server.stream_open_times()[5] - closed;
    println!("reconnect after a response: {gap:?}");
    assert!(
        gap < Duration::from_millis(1750),
        "backoff not reset: {gap:?}"
    );
    drop(ctl);
}

/// The first LDS and CDS requests on stream `n`.
fn wildcard_start_on(server: &XdsServer, n: u64) -> (DiscoveryRequest, DiscoveryRequest) {
    let lds = server.expect_type(LISTENER, T, "LDS on the new stream");
    let cds = server.expect_type(CLUSTER, T, "CDS on the new stream");
    assert_eq!((lds.stream, cds.stream), (n, n));
    let first = if lds.at <= cds.at { &lds } else { &cds };
    let node = first
        .sotw()
        .node
        .as_ref()
        .expect("node on the first request of every stream");
    assert_eq!(node.id, NODE_ID);
    (lds.sotw().clone(), cds.sotw().clone())
}

#[test]
fn rule7_reconnect_resends_last_accepted_version_empty_nonce_and_node() {
    let (server, ctl) = start(false, json!({}));
    wildcard_start(&server);
    let cs = vec![
        any(static_cluster("c1", &[up(7001)])),
        any(eds_cluster("e1")),
    ];
    assert_ack(&exchange(&server, CLUSTER, "7", "n7", cs), "7", "n7");
    assert_eq!(
        names(server.expect_type(ENDPOINT, T, "EDS").sotw()),
        set(&["e1"])
    );
    assert_ack(
        &exchange(
            &server,
            ENDPOINT,
            "e5",
            "ne5",
            vec![any(cla("e1", &[up(7002)]))],
        ),
        "e5",
        "ne5",
    );
    assert_ack(
        &exchange(
            &server,
            LISTENER,
            "l3",
            "nl3",
            vec![any(listener("l1", listen_addr(), "c1"))],
        ),
        "l3",
        "nl3",
    );
    // A rejected LDS version must not become the re-sent version.
    assert_nack(
        &exchange(
            &server,
            LISTENER,
            "l4",
            "nl4",
            vec![any(bad_listener("l1"))],
        ),
        "l3",
        "nl4",
        &["l1"],
    );
    wait_applied_listener(&ctl, "l1");

    server.close_stream(tonic::Status::unavailable("bye"));
    let (lds, cds) = wildcard_start_on(&server, 2);
    assert_eq!(
        (lds.version_info.as_str(), lds.response_nonce.as_str()),
        ("l3", ""),
        "{lds:?}"
    );
    assert_eq!(
        (cds.version_info.as_str(), cds.response_nonce.as_str()),
        ("7", ""),
        "{cds:?}"
    );
    assert!(lds.resource_names.is_empty() && cds.resource_names.is_empty());
    assert!(lds.error_detail.is_none() && cds.error_detail.is_none());
    let eds = server.expect_type(ENDPOINT, T, "EDS on the new stream");
    assert_eq!(eds.stream, 2);
    let e = eds.sotw();
    assert_eq!(
        (e.version_info.as_str(), e.response_nonce.as_str()),
        ("e5", ""),
        "{e:?}"
    );
    assert_eq!(names(e), set(&["e1"]));
    // The cached config stays while the server says nothing.
    assert!(ctl.applied("listeners").contains_key("l1"));
}

#[test]
fn rule7_never_requests_a_type_without_subscriptions() {
    let (server, _ctl) = start(false, json!({}));
    wildcard_start(&server);
    assert_ack(
        &exchange(&server, CLUSTER, "c1", "nc1", vec![any(eds_cluster("e1"))]),
        "c1",
        "nc1",
    );
    assert_eq!(
        names(server.expect_type(ENDPOINT, T, "EDS").sotw()),
        set(&["e1"])
    );
    assert_ack(
        &exchange(&server, CLUSTER, "c2", "nc2", vec![]),
        "c2",
        "nc2",
    );
    assert!(
        server
            .expect_type(ENDPOINT, T, "EDS unsubscribe")
            .sotw()
            .resource_names
            .is_empty()
    );
    server.close_stream(tonic::Status::unavailable("bye"));
    wildcard_start_on(&server, 2);
    let rest = server.drain(Duration::from_secs(2));
    assert!(
        rest.iter().all(|r| r.type_url() != ENDPOINT),
        "EDS request with no subscriptions: {rest:?}"
    );
}

#[test]
fn rule7_delta_reconnect_sends_initial_resource_versions_and_stays_wildcard() {
    let (server, ctl) = start(true, json!({}));
    let l = server
        .expect_type(LISTENER, T, "first delta LDS")
        .delta()
        .clone();
    let c = server
        .expect_type(CLUSTER, T, "first delta CDS")
        .delta()
        .clone();
    for d in [&l, &c] {
        assert!(d.resource_names_subscribe.iter().all(|n| n == "*"), "{d:?}");
        assert!(d.initial_resource_versions.is_empty(), "{d:?}");
        assert_eq!(d.response_nonce, "");
    }
    let cs = vec![
        ("c1", "cv1", any(static_cluster("c1", &[up(7001)]))),
        ("e1", "ev1", any(eds_cluster("e1"))),
    ];
    server.send_delta(delta_resp(CLUSTER, "s1", "dc1", cs, &[]));
    let eds = server
        .expect_type(ENDPOINT, T, "delta EDS subscribe")
        .delta()
        .clone();
    assert_eq!(eds.resource_names_subscribe, vec!["e1".to_string()]);
    server.send_delta(delta_resp(
        ENDPOINT,
        "s1",
        "de1",
        vec![("e1", "x1", any(cla("e1", &[up(7002)])))],
        &[],
    ));
    server.send_delta(delta_resp(
        LISTENER,
        "s1",
        "dl1",
        vec![("l1", "a1", any(listener("l1", listen_addr(), "c1")))],
        &[],
    ));
    server.send_delta(delta_resp(
        LISTENER,
        "s2",
        "dl2",
        vec![("l1", "a2", any(listener("l1", listen_addr(), "c1")))],
        &[],
    ));
    for (t, nonce) in [
        (CLUSTER, "dc1"),
        (ENDPOINT, "de1"),
        (LISTENER, "dl1"),
        (LISTENER, "dl2"),
    ] {
        let a = server.expect_type(t, T, "delta ACK").delta().clone();
        assert_eq!(a.response_nonce, nonce, "{a:?}");
        assert!(a.error_detail.is_none(), "{a:?}");
    }
    wait_state(&ctl, LISTENER, "l1", "ACKED");

    server.close_stream(tonic::Status::unavailable("bye"));
    let l = server.expect_type(LISTENER, T, "delta LDS on stream 2");
    let c = server.expect_type(CLUSTER, T, "delta CDS on stream 2");
    let e = server.expect_type(ENDPOINT, T, "delta EDS on stream 2");
    let first = [&l, &c, &e]
        .into_iter()
        .min_by_key(|r| r.at)
        .expect("three");
    assert_eq!(first.stream, 2);
    assert_eq!(
        first.delta().node.as_ref().map(|n| n.id.as_str()),
        Some(NODE_ID)
    );
    let (l, c, e) = (l.delta(), c.delta(), e.delta());
    assert!(
        l.resource_names_subscribe.iter().all(|n| n == "*"),
        "wildcard stays wildcard: {l:?}"
    );
    assert!(
        c.resource_names_subscribe.iter().all(|n| n == "*"),
        "wildcard stays wildcard: {c:?}"
    );
    assert_eq!(
        l.initial_resource_versions.get("l1").map(String::as_str),
        Some("a2"),
        "latest: {l:?}"
    );
    assert_eq!(l.initial_resource_versions.len(), 1);
    assert_eq!(
        c.initial_resource_versions.get("c1").map(String::as_str),
        Some("cv1")
    );
    assert_eq!(
        c.initial_resource_versions.get("e1").map(String::as_str),
        Some("ev1")
    );
    assert_eq!(e.resource_names_subscribe, vec!["e1".to_string()]);
    assert_eq!(
        e.initial_resource_versions.get("e1").map(String::as_str),
        Some("x1")
    );
    for d in [l, c, e] {
        assert_eq!(d.response_nonce, "", "{d:?}");
    }
}

// ---- rule 8: nonces per type ---------------------------------------------------------------

#[test]
fn rule8_each_type_acks_its_own_version_and_nonce() {
    let (server, _ctl) = start(false, json!({}));
    wildcard_start(&server);
    server.send(sotw(CLUSTER, "cv1", "cn1", vec![any(eds_cluster("e1"))]));
    assert_ack(
        server.expect_type(CLUSTER, T, "CDS ACK").sotw(),
        "cv1",
        "cn1",
    );
    server.expect_type(ENDPOINT, T, "EDS subscribe");
    server.send(sotw(
        ENDPOINT,
        "ev1",
        "en1",
        vec![any(cla("e1", &[up(7001)]))],
    ));
    server.send(sotw(CLUSTER, "cv2", "cn2", vec![any(eds_cluster("e1"))]));
    assert_ack(
        server.expect_type(ENDPOINT, T, "EDS ACK").sotw(),
        "ev1",
        "en1",
    );
    assert_ack(
        server.expect_type(CLUSTER, T, "CDS ACK").sotw(),
        "cv2",
        "cn2",
    );
}

#[test]
fn rule8_nonce_tracked_for_a_type_with_no_watchers_left() {
    let (server, _ctl) = start(false, json!({}));
    setup_e1(&server);
    assert_ack(
        &exchange(&server, CLUSTER, "c2", "nc2", vec![]),
        "c2",
        "nc2",
    );
    assert!(
        server
            .expect_type(ENDPOINT, T, "EDS unsubscribe")
            .sotw()
            .resource_names
            .is_empty()
    );
    // A response for EDS, which nobody watches any more: its nonce must still be recorded.
    server.send(sotw(
        ENDPOINT,
        "e2",
        "late-nonce",
        vec![any(cla("e1", &[up(7009)]))],
    ));
    std::thread::sleep(Duration::from_secs(1));
    while let Some(r) = server.recv_type(ENDPOINT, Duration::from_millis(10)) {
        assert_eq!(r.sotw().response_nonce, "late-nonce", "{:?}", r.req);
    }
    assert_ack(
        &exchange(&server, CLUSTER, "c3", "nc3", vec![any(eds_cluster("e1"))]),
        "c3",
        "nc3",
    );
    let r = server.expect_type(ENDPOINT, T, "EDS re-subscribe");
    assert_eq!(names(r.sotw()), set(&["e1"]));
    assert_eq!(r.sotw().response_nonce, "late-nonce", "{:?}", r.req);
}

// ---- rule 9: no hot loop ---------------------------------------------------------------------

#[test]
fn rule9_resent_rejected_response_gets_one_nack_each_on_one_stream() {
    let (server, ctl) = start(false, json!({}));
    let a = listen_addr();
    setup_c1_l1(&server, a);
    wait_applied_listener(&ctl, "l1");
    for i in 1..=20 {
        server.send(sotw(
            LISTENER,
            "bad",
            &format!("r{i}"),
            vec![any(bad_listener("l1"))],
        ));
    }
    for i in 1..=20 {
        let r = server.expect_type(LISTENER, T, &format!("NACK {i}"));
        assert_eq!(r.stream, 1);
        assert_nack(r.sotw(), "l1", &format!("r{i}"), &["l1"]);
    }
    server.expect_none(Duration::from_secs(2));
    assert_eq!(
        server.streams_opened(),
        1,
        "a NACK is no reason to reconnect"
    );
    assert_eq!(ctl.applied("listeners")["l1"]["address"], a.to_string());
}

// ---- rule 10: large responses ------------------------------------------------------------------

#[test]
fn rule10_six_mib_cds_response_is_accepted() {
    let (server, ctl) = start(false, json!({}));
    wildcard_start(&server);
    let clusters: Vec<_> = (0..48)
        .map(|i| any(padded_cluster(&format!("big-{i}"), &[up(7001)], 128 * 1024)))
        .collect();
    let resp = sotw(CLUSTER, "big", "nbig", clusters);
    let len = prost::Message::encoded_len(&resp);
    println!("CDS response: {len} bytes");
    assert!(len > 6 << 20);
    server.send(resp);
    let r = server
        .recv_type(CLUSTER, Duration::from_secs(30))
        .expect("a reply to the 6 MiB response");
    assert_ack(r.sotw(), "big", "nbig");
    assert_eq!(r.stream, 1);
    wait_state(&ctl, CLUSTER, "big-47", "ACKED");
}

// ---- rule 11: warming ------------------------------------------------------------------------

#[test]
fn rule11_listener_naming_an_unknown_cluster_waits_for_it() {
    let (server, ctl) = start(false, json!({"warming_timeout": "30s"}));
    wildcard_start(&server);
    assert_ack(
        &exchange(&server, CLUSTER, "c1", "nc1", vec![]),
        "c1",
        "nc1",
    );
    let ack = exchange(
        &server,
        LISTENER,
        "l1",
        "nl1",
        vec![any(listener("l1", listen_addr(), "late"))],
    );
    assert_eq!(ack.response_nonce, "nl1");
    assert!(
        ack.error_detail.is_none(),
        "a warming listener is not invalid: {ack:?}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !ctl.applied("listeners").contains_key("l1"),
        "applied before its cluster is known: {}",
        ctl.config_dump()
    );
    assert_ack(
        &exchange(
            &server,
            CLUSTER,
            "c2",
            "nc2",
            vec![any(static_cluster("late", &[up(7001)]))],
        ),
        "c2",
        "nc2",
    );
    let l1 = wait_applied_listener(&ctl, "l1");
    assert_eq!(l1["prefix_routes"]["catch_all_route"]["cluster"], "late");
}
