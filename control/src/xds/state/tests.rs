//! The sans-IO state, rule by rule: exact request fields after each step.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::service::discovery::v3::{Resource, ResourceError, ResourceName};
use envoy_types::pb::google::rpc;
use prost::Message;

use super::*;
use crate::xds::status::XdsStatus;

const T: Duration = Duration::from_secs(15);

/// Records what it is given; rejects the names in `reject`; interest is settable.
#[derive(Default)]
struct TestApplier {
    updates: Vec<Update>,
    missing: Vec<(String, String)>,
    reject: BTreeSet<String>,
    error: Option<String>,
    interest: Vec<(&'static str, Interest)>,
    /// Interest to switch to after the next apply (e.g. CDS brings EDS names).
    after_apply: Option<Vec<(&'static str, Interest)>>,
}

impl Applier for TestApplier {
    fn apply(&mut self, update: Update) -> Verdict {
        let rejected = update
            .resources
            .iter()
            .filter(|(n, _)| self.reject.contains(n))
            .map(|(n, _)| (n.clone(), "bad".to_string()))
            .collect();
        self.updates.push(update);
        if let Some(i) = self.after_apply.take() {
            self.interest = i;
        }
        Verdict {
            rejected,
            error: self.error.clone(),
        }
    }
    fn does_not_exist(&mut self, type_url: &str, name: &str) {
        self.missing.push((type_url.into(), name.into()));
    }
    fn interest(&self) -> Vec<(&'static str, Interest)> {
        self.interest.clone()
    }
}

fn names(n: &[&str]) -> Interest {
    Interest::Names(n.iter().map(|s| s.to_string()).collect())
}

fn envoy_interest(eds: &[&str]) -> Vec<(&'static str, Interest)> {
    vec![
        (LISTENER_TYPE, Interest::Wildcard),
        (CLUSTER_TYPE, Interest::Wildcard),
        (ENDPOINT_TYPE, names(eds)),
    ]
}

fn node() -> Node {
    Node {
        id: "proxy-1".into(),
        client_features: vec!["x".into()],
        ..Default::default()
    }
}

fn state(mode: Mode, applier: &TestApplier) -> (State, Status) {
    let status = Status::default();
    let mut s = State::new(mode, node(), T, status.clone());
    s.set_interest(applier.interest());
    (s, status)
}

fn cluster(name: &str) -> Any {
    Any {
        type_url: CLUSTER_TYPE.into(),
        value: Cluster {
            name: name.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    }
}

fn cla(name: &str) -> Any {
    Any {
        type_url: ENDPOINT_TYPE.into(),
        value: ClusterLoadAssignment {
            cluster_name: name.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    }
}

fn resp(type_url: &str, version: &str, nonce: &str, resources: Vec<Any>) -> Inbound {
    Inbound::Sotw(DiscoveryResponse {
        version_info: version.into(),
        resources,
        type_url: type_url.into(),
        nonce: nonce.into(),
        ..Default::default()
    })
}

fn sotw(o: &Outbound) -> &DiscoveryRequest {
    match o {
        Outbound::Sotw(r) => r,
        Outbound::Delta(_) => panic!("expected SotW, got {o:?}"),
    }
}

fn delta(o: &Outbound) -> &DeltaDiscoveryRequest {
    match o {
        Outbound::Delta(r) => r,
        Outbound::Sotw(_) => panic!("expected Delta, got {o:?}"),
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn snap(st: &Status) -> XdsStatus {
    st.snapshot()
}

fn res_state(st: &Status, t: &str, n: &str) -> ResourceState {
    snap(st).resources[&(t.to_string(), n.to_string())].state
}

#[test]
fn first_requests_wildcard_lds_cds_no_empty_eds_and_node_once() {
    let a = TestApplier {
        interest: envoy_interest(&[]),
        ..Default::default()
    };
    let (mut s, _) = state(Mode::Sotw, &a);
    let out = s.start_stream();
    assert_eq!(
        out.len(),
        2,
        "EDS with no names is never requested on a new stream: {out:?}"
    );
    let (l, c) = (sotw(&out[0]), sotw(&out[1]));
    assert_eq!(
        (l.type_url.as_str(), c.type_url.as_str()),
        (LISTENER_TYPE, CLUSTER_TYPE)
    );
    assert!(l.resource_names.is_empty() && c.resource_names.is_empty());
    assert_eq!(
        (l.version_info.as_str(), l.response_nonce.as_str()),
        ("", "")
    );
    let n = l.node.as_ref().expect("node on the first request");
    assert_eq!(n.id, "proxy-1");
    assert_eq!(n.user_agent_name, "respite-control");
    assert_eq!(
        n.user_agent_version_type,
        Some(UserAgentVersionType::UserAgentVersion(
            env!("CARGO_PKG_VERSION").into()
        ))
    );
    assert!(
        n.client_features.is_empty(),
        "never advertise client_features"
    );
    assert!(c.node.is_none(), "node only on the stream's first request");
    assert!(l.error_detail.is_none());
}

#[test]
fn ack_then_nack_keeps_previous_version_and_names_resource() {
    let mut a = TestApplier {
        interest: envoy_interest(&[]),
        ..Default::default()
    };
    let (mut s, st) = state(Mode::Sotw, &a);
    s.start_stream();
    let now = Instant::now();
    let out = s.on_response(
        resp(CLUSTER_TYPE, "v1", "n1", vec![cluster("c1")]),
        &mut a,
        now,
    );
    assert_eq!(out.len(), 1);
    let ack = sotw(&out[0]);
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("v1", "n1")
    );
    assert!(ack.error_detail.is_none() && ack.resource_names.is_empty() && ack.node.is_none());
    assert_eq!(a.updates.len(), 1);
    assert_eq!(a.updates[0].resources[0].0, "c1");
    assert_eq!(a.updates[0].version, "v1");

    a.reject.insert("c1".into());
    let out = s.on_response(
        resp(CLUSTER_TYPE, "v2", "n2", vec![cluster("c1"), cluster("c2")]),
        &mut a,
        now,
    );
    let nack = sotw(&out[0]);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (nack.version_info.as_str(), nack.response_nonce.as_str()),
        ("v1", "n2")
    );
    let e = nack.error_detail.as_ref().expect("error_detail");
    assert_eq!(e.code, 3);
    assert!(
        e.message.contains("c1: bad") && e.message.contains("\"v2\""),
        "{}",
        e.message
    );
    assert!(!e.message.contains("c2"), "{}", e.message);

    let x = snap(&st);
    let c1 = &x.resources[&(CLUSTER_TYPE.to_string(), "c1".to_string())];
    assert_eq!(c1.state, ResourceState::Nacked);
    assert_eq!(c1.version.as_deref(), Some("v1"));
    assert_eq!(c1.rejected_version.as_deref(), Some("v2"));
    assert_eq!(c1.error.as_deref(), Some("bad"));
    let c2 = &x.resources[&(CLUSTER_TYPE.to_string(), "c2".to_string())];
    assert_eq!(
        (c2.state, c2.version.as_deref()),
        (ResourceState::Acked, Some("v2"))
    );
    let t = &x.types[CLUSTER_TYPE];
    assert_eq!(
        (t.acks, t.nacks, t.version.as_str(), t.nonce.as_str()),
        (1, 1, "v1", "n2")
    );
    assert_eq!(t.last_nack.as_ref().map(|n| n.version.as_str()), Some("v2"));
    assert!(t.wildcard);
}

#[test]
fn first_nack_has_empty_version_and_whole_config_error() {
    let mut a = TestApplier {
        interest: envoy_interest(&[]),
        error: Some("data plane refused".into()),
        ..Default::default()
    };
    let (mut s, st) = state(Mode::Sotw, &a);
    s.start_stream();
    let out = s.on_response(
        resp(CLUSTER_TYPE, "v1", "n1", vec![cluster("c1")]),
        &mut a,
        Instant::now(),
    );
    let nack = sotw(&out[0]);
    assert_eq!(nack.version_info, "");
    assert!(
        nack.error_detail
            .as_ref()
            .expect("nack")
            .message
            .contains("data plane refused")
    );
    assert_eq!(res_state(&st, CLUSTER_TYPE, "c1"), ResourceState::Nacked);
}

#[test]
fn unrequested_dropped_duplicates_and_type_mismatch_rejected() {
    let mut a = TestApplier {
        interest: envoy_interest(&["a", "b", "d"]),
        ..Default::default()
    };
    let (mut s, _) = state(Mode::Sotw, &a);
    let out = s.start_stream();
    assert_eq!(strs(&sotw(&out[2]).resource_names), ["a", "b", "d"]);
    let out = s.on_response(
        resp(ENDPOINT_TYPE, "1", "e1", vec![cla("a"), cla("zzz")]),
        &mut a,
        Instant::now(),
    );
    assert!(
        sotw(&out[0]).error_detail.is_none(),
        "unrequested resources are not NACKed"
    );
    let names: Vec<_> = a.updates[0]
        .resources
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["a"]);

    let mut wrong = cluster("d");
    wrong.type_url = CLUSTER_TYPE.into();
    let out = s.on_response(
        resp(
            ENDPOINT_TYPE,
            "2",
            "e2",
            vec![cla("a"), cla("b"), cla("b"), wrong],
        ),
        &mut a,
        Instant::now(),
    );
    let nack = sotw(&out[0]);
    let msg = &nack.error_detail.as_ref().expect("NACK").message;
    assert!(msg.contains("b: duplicate"), "{msg}");
    assert!(
        msg.contains("d: resource type type.googleapis.com/envoy.config.cluster.v3.Cluster"),
        "{msg}"
    );
    assert_eq!(nack.version_info, "1");
    let names: Vec<_> = a.updates[1]
        .resources
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["a"], "duplicates and mismatches are not applied");
}

#[test]
fn sotw_cds_is_complete_eds_is_partial() {
    let mut a = TestApplier {
        interest: envoy_interest(&["e1", "e2"]),
        ..Default::default()
    };
    let (mut s, st) = state(Mode::Sotw, &a);
    s.start_stream();
    let now = Instant::now();
    s.on_response(
        resp(CLUSTER_TYPE, "1", "n1", vec![cluster("c1"), cluster("c2")]),
        &mut a,
        now,
    );
    s.on_response(
        resp(CLUSTER_TYPE, "2", "n2", vec![cluster("c1")]),
        &mut a,
        now,
    );
    assert_eq!(a.updates[1].removed, ["c2"]);
    assert_eq!(
        res_state(&st, CLUSTER_TYPE, "c2"),
        ResourceState::DoesNotExist
    );
    s.on_response(resp(CLUSTER_TYPE, "3", "n3", vec![]), &mut a, now);
    assert_eq!(
        a.updates[2].removed,
        ["c1"],
        "an empty CDS response deletes everything held"
    );

    s.on_response(
        resp(ENDPOINT_TYPE, "1", "m1", vec![cla("e1"), cla("e2")]),
        &mut a,
        now,
    );
    s.on_response(resp(ENDPOINT_TYPE, "2", "m2", vec![cla("e1")]), &mut a, now);
    assert!(a.updates[4].removed.is_empty(), "EDS absent is not deleted");
}

#[test]
fn unsubscribe_sends_remaining_then_empty_and_new_stream_skips_type() {
    let mut a = TestApplier {
        interest: envoy_interest(&["a", "b"]),
        ..Default::default()
    };
    let (mut s, _) = state(Mode::Sotw, &a);
    s.start_stream();
    let now = Instant::now();
    s.on_response(resp(ENDPOINT_TYPE, "1", "e1", vec![cla("a")]), &mut a, now);
    // Cascade through the applier's interest: a CDS update shrinks the EDS names.
    a.after_apply = Some(envoy_interest(&["b"]));
    let out = s.on_response(
        resp(CLUSTER_TYPE, "1", "c1", vec![cluster("x")]),
        &mut a,
        now,
    );
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(sotw(&out[0]).type_url, CLUSTER_TYPE);
    let eds = sotw(&out[1]);
    assert_eq!(
        (eds.type_url.as_str(), strs(&eds.resource_names)),
        (ENDPOINT_TYPE, vec!["b"])
    );
    assert_eq!(
        (eds.version_info.as_str(), eds.response_nonce.as_str()),
        ("1", "e1")
    );
    // Now nothing: the live stream gets the empty list (the unsubscribe).
    a.interest = envoy_interest(&[]);
    s.set_interest(a.interest());
    let out = s.requests();
    assert_eq!(out.len(), 1);
    assert!(sotw(&out[0]).resource_names.is_empty());
    assert_eq!(sotw(&out[0]).response_nonce, "e1");
    // A response now for the unsubscribed type: its resources are unrequested, dropped; ACKed.
    let out = s.on_response(resp(ENDPOINT_TYPE, "2", "e2", vec![cla("a")]), &mut a, now);
    assert!(a.updates.last().expect("update").resources.is_empty());
    assert_eq!(sotw(&out[0]).response_nonce, "e2");
    // Re-subscribe carries that response's nonce.
    a.interest = envoy_interest(&["a"]);
    s.set_interest(a.interest());
    let out = s.requests();
    assert_eq!(
        (
            strs(&sotw(&out[0]).resource_names),
            sotw(&out[0]).response_nonce.as_str()
        ),
        (vec!["a"], "e2")
    );
    // New stream without EDS names: no EDS request at all.
    a.interest = envoy_interest(&[]);
    s.set_interest(a.interest());
    s.end_stream();
    let out = s.start_stream();
    assert!(out.iter().all(|o| o.type_url() != ENDPOINT_TYPE), "{out:?}");
}

#[test]
fn new_stream_resends_last_accepted_version_empty_nonce_and_node() {
    let mut a = TestApplier {
        interest: envoy_interest(&["e"]),
        ..Default::default()
    };
    let (mut s, _) = state(Mode::Sotw, &a);
    s.start_stream();
    let now = Instant::now();
    s.on_response(
        resp(CLUSTER_TYPE, "7", "n1", vec![cluster("c")]),
        &mut a,
        now,
    );
    a.reject.insert("c".into());
    s.on_response(
        resp(CLUSTER_TYPE, "8", "n2", vec![cluster("c")]),
        &mut a,
        now,
    );
    s.end_stream();
    let out = s.start_stream();
    assert_eq!(out.len(), 3);
    assert!(sotw(&out[0]).node.is_some());
    let c = sotw(&out[1]);
    assert_eq!(
        (c.version_info.as_str(), c.response_nonce.as_str()),
        ("7", "")
    );
    assert!(
        c.resource_names.is_empty(),
        "wildcard stays legacy wildcard"
    );
    assert_eq!(strs(&sotw(&out[2]).resource_names), ["e"]);
}

#[test]
fn nonces_of_unknown_types_are_recorded_not_answered() {
    let mut a = TestApplier {
        interest: envoy_interest(&[]),
        ..Default::default()
    };
    let (mut s, _) = state(Mode::Sotw, &a);
    s.start_stream();
    let out = s.on_response(
        resp(
            "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            "1",
            "r1",
            vec![],
        ),
        &mut a,
        Instant::now(),
    );
    assert!(out.is_empty());
    // EDS was never requested on this stream: an unsolicited response is not answered either
    // (an empty request would be a wildcard subscription), but its nonce is kept.
    let out = s.on_response(
        resp(ENDPOINT_TYPE, "1", "e9", vec![cla("a")]),
        &mut a,
        Instant::now(),
    );
    assert!(out.is_empty());
    assert!(a.updates.is_empty());
    a.interest = envoy_interest(&["a"]);
    s.set_interest(a.interest());
    let out = s.requests();
    assert_eq!(sotw(&out[0]).response_nonce, "e9");
}

#[test]
fn nack_loop_gets_one_nack_each() {
    let mut a = TestApplier {
        interest: envoy_interest(&[]),
        ..Default::default()
    };
    a.reject.insert("c".into());
    let (mut s, st) = state(Mode::Sotw, &a);
    s.start_stream();
    let now = Instant::now();
    for i in 0..100 {
        let out = s.on_response(
            resp(CLUSTER_TYPE, "9", &format!("n{i}"), vec![cluster("c")]),
            &mut a,
            now,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(sotw(&out[0]).response_nonce, format!("n{i}"));
        assert!(sotw(&out[0]).error_detail.is_some());
    }
    assert_eq!(snap(&st).types[CLUSTER_TYPE].nacks, 100);
}

#[test]
fn does_not_exist_timer_lifecycle() {
    let mut a = TestApplier {
        interest: envoy_interest(&["a", "b", "c"]),
        ..Default::default()
    };
    let (mut s, st) = state(Mode::Sotw, &a);
    let t0 = Instant::now();
    assert_eq!(s.next_deadline(), None, "not started before a stream");
    s.start_stream();
    assert_eq!(
        s.next_deadline(),
        None,
        "not started before the request is handed to the stream"
    );
    s.on_sent(CLUSTER_TYPE, t0);
    assert_eq!(
        s.next_deadline(),
        None,
        "only the EDS request starts EDS timers"
    );
    s.on_sent(ENDPOINT_TYPE, t0);
    assert_eq!(s.next_deadline(), Some(t0 + T));
    // An invalid "b" still cancels b's timer; "a" arrives valid.
    a.reject.insert("b".into());
    s.on_response(
        resp(ENDPOINT_TYPE, "1", "e1", vec![cla("a"), cla("b")]),
        &mut a,
        t0,
    );
    assert!(
        s.on_tick(t0 + T - Duration::from_millis(1), &mut a)
            .is_empty()
    );
    assert!(a.missing.is_empty());
    s.on_tick(t0 + T, &mut a);
    assert_eq!(a.missing, [(ENDPOINT_TYPE.to_string(), "c".to_string())]);
    assert_eq!(
        res_state(&st, ENDPOINT_TYPE, "c"),
        ResourceState::DoesNotExist
    );
    assert_eq!(res_state(&st, ENDPOINT_TYPE, "b"), ResourceState::Nacked);
    assert_eq!(s.next_deadline(), None);
    // Reconnect: re-armed for names not cached (b, c), not for a.
    s.end_stream();
    s.start_stream();
    let t1 = t0 + Duration::from_secs(100);
    s.on_sent(ENDPOINT_TYPE, t1);
    s.on_response(resp(ENDPOINT_TYPE, "2", "e2", vec![cla("b")]), &mut a, t1);
    a.missing.clear();
    s.on_tick(t1 + T, &mut a);
    assert_eq!(a.missing, [(ENDPOINT_TYPE.to_string(), "c".to_string())]);
    // Re-subscribing a cached name drops the copy and restarts its timer.
    a.interest = envoy_interest(&["b", "c"]);
    s.set_interest(a.interest());
    a.interest = envoy_interest(&["a", "b", "c"]);
    s.set_interest(a.interest());
    assert_eq!(res_state(&st, ENDPOINT_TYPE, "a"), ResourceState::Requested);
    let t2 = t1 + Duration::from_secs(100);
    s.on_sent(ENDPOINT_TYPE, t2);
    a.missing.clear();
    s.on_tick(t2 + T, &mut a);
    assert_eq!(a.missing, [(ENDPOINT_TYPE.to_string(), "a".to_string())]);
    // Stream loss stops running timers.
    a.interest = envoy_interest(&["a", "b", "c", "d"]);
    s.set_interest(a.interest());
    s.on_sent(ENDPOINT_TYPE, t2);
    s.end_stream();
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn no_timers_under_wildcard() {
    let a = TestApplier {
        interest: envoy_interest(&[]),
        ..Default::default()
    };
    let (mut s, _) = state(Mode::Sotw, &a);
    s.start_stream();
    s.on_sent(LISTENER_TYPE, Instant::now());
    s.on_sent(CLUSTER_TYPE, Instant::now());
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn named_then_wildcard_uses_star() {
    let a = TestApplier {
        interest: vec![(LISTENER_TYPE, names(&["l1"]))],
        ..Default::default()
    };
    let (mut s, _) = state(Mode::Sotw, &a);
    let out = s.start_stream();
    assert_eq!(strs(&sotw(&out[0]).resource_names), ["l1"]);
    s.set_interest(vec![(LISTENER_TYPE, Interest::Wildcard)]);
    let out = s.requests();
    assert_eq!(strs(&sotw(&out[0]).resource_names), ["*"]);
}

fn dresp(
    type_url: &str,
    nonce: &str,
    resources: Vec<Resource>,
    removed: &[&str],
) -> DeltaDiscoveryResponse {
    DeltaDiscoveryResponse {
        system_version_info: "sys".into(),
        resources,
        type_url: type_url.into(),
        removed_resources: removed.iter().map(|s| s.to_string()).collect(),
        nonce: nonce.into(),
        ..Default::default()
    }
}

fn dres(name: &str, version: &str, body: Option<Any>) -> Resource {
    Resource {
        name: name.into(),
        version: version.into(),
        resource: body,
        ..Default::default()
    }
}

#[test]
fn delta_subscribe_ack_nack_removals_and_reconnect() {
    let mut a = TestApplier {
        interest: envoy_interest(&["a", "b"]),
        ..Default::default()
    };
    let (mut s, st) = state(Mode::Delta, &a);
    let out = s.start_stream();
    assert_eq!(out.len(), 3);
    let l = delta(&out[0]);
    assert!(
        l.node.is_some()
            && l.resource_names_subscribe.is_empty()
            && l.initial_resource_versions.is_empty()
    );
    assert!(delta(&out[1]).node.is_none());
    assert_eq!(strs(&delta(&out[2]).resource_names_subscribe), ["a", "b"]);
    let now = Instant::now();

    let r = dresp(
        CLUSTER_TYPE,
        "n1",
        vec![
            dres("c1", "1", Some(cluster("c1"))),
            dres("c2", "4", Some(cluster("c2"))),
        ],
        &[],
    );
    let out = s.on_response(Inbound::Delta(r), &mut a, now);
    let ack = delta(&out[0]);
    assert_eq!(
        (ack.response_nonce.as_str(), ack.type_url.as_str()),
        ("n1", CLUSTER_TYPE)
    );
    assert!(ack.error_detail.is_none() && ack.resource_names_subscribe.is_empty());
    // Removal three ways: removed_resources, a Resource without body, resource_errors NOT_FOUND.
    let r = dresp(
        ENDPOINT_TYPE,
        "m1",
        vec![
            dres("a", "a1", Some(cla("a"))),
            dres("b", "b1", Some(cla("b"))),
        ],
        &[],
    );
    s.on_response(Inbound::Delta(r), &mut a, now);
    let r = dresp(CLUSTER_TYPE, "n2", vec![dres("c2", "", None)], &["c1"]);
    s.on_response(Inbound::Delta(r), &mut a, now);
    let mut removed = a.updates.last().expect("u").removed.clone();
    removed.sort();
    assert_eq!(removed, ["c1", "c2"]);
    let mut r = dresp(ENDPOINT_TYPE, "m2", vec![], &[]);
    r.resource_errors = vec![ResourceError {
        resource_name: Some(ResourceName {
            name: "b".into(),
            ..Default::default()
        }),
        error_detail: Some(rpc::Status {
            code: 5,
            message: "gone".into(),
            details: vec![],
        }),
    }];
    s.on_response(Inbound::Delta(r), &mut a, now);
    assert_eq!(a.updates.last().expect("u").removed, ["b"]);
    assert_eq!(
        res_state(&st, ENDPOINT_TYPE, "b"),
        ResourceState::DoesNotExist
    );
    // NACK: nonce and error_detail.
    a.reject.insert("a".into());
    let r = dresp(
        ENDPOINT_TYPE,
        "m3",
        vec![dres("a", "a2", Some(cla("a")))],
        &[],
    );
    let out = s.on_response(Inbound::Delta(r), &mut a, now);
    let nack = delta(&out[0]);
    assert_eq!(nack.response_nonce, "m3");
    assert!(
        nack.error_detail
            .as_ref()
            .expect("nack")
            .message
            .contains("a: bad")
    );
    let x = snap(&st);
    let ra = &x.resources[&(ENDPOINT_TYPE.to_string(), "a".to_string())];
    assert_eq!(
        (ra.version.as_deref(), ra.rejected_version.as_deref()),
        (Some("a1"), Some("a2"))
    );
    // Subscription change: diff, no nonce.
    a.interest = envoy_interest(&["a", "z"]);
    s.set_interest(a.interest());
    let out = s.requests();
    let d = delta(&out[0]);
    assert_eq!(
        (
            strs(&d.resource_names_subscribe),
            strs(&d.resource_names_unsubscribe)
        ),
        (vec!["z"], vec!["b"])
    );
    assert_eq!(d.response_nonce, "");
    // Reconnect: cached names with their latest accepted versions; wildcard stays wildcard.
    s.on_response(
        Inbound::Delta(dresp(
            CLUSTER_TYPE,
            "n3",
            vec![dres("c3", "9", Some(cluster("c3")))],
            &[],
        )),
        &mut a,
        now,
    );
    s.end_stream();
    let out = s.start_stream();
    let c = delta(&out[1]);
    assert!(
        c.resource_names_subscribe.is_empty(),
        "wildcard stays wildcard: {c:?}"
    );
    assert_eq!(
        c.initial_resource_versions,
        [("c3".to_string(), "9".to_string())].into_iter().collect()
    );
    let e = delta(&out[2]);
    assert_eq!(strs(&e.resource_names_subscribe), ["a", "z"]);
    assert_eq!(
        e.initial_resource_versions,
        [("a".to_string(), "a1".to_string())].into_iter().collect()
    );
    assert_eq!(e.response_nonce, "");
}

#[test]
fn delta_wildcard_to_names_unsubscribes_star() {
    let a = TestApplier {
        interest: envoy_interest(&[]),
        ..Default::default()
    };
    let (mut s, _) = state(Mode::Delta, &a);
    s.start_stream();
    s.set_interest(vec![(CLUSTER_TYPE, names(&["c"]))]);
    let out = s.requests();
    let d = delta(&out[0]);
    assert_eq!(
        (
            strs(&d.resource_names_subscribe),
            strs(&d.resource_names_unsubscribe)
        ),
        (vec!["c"], vec!["*"])
    );
    let _unused: BTreeMap<(), ()> = BTreeMap::new();
}
