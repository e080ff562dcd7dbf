//! End to end over a real HTTP/2 connection: the client against an in-process tonic ADS server
//! on 127.0.0.1:0 scripted by the test.

use std::collections::BTreeSet;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::source::bootstrap;
use crate::xds::status::Status;
use crate::xds::{Applier, CLUSTER_TYPE, ENDPOINT_TYPE, Interest, LISTENER_TYPE, Update, Verdict};

type RespTx = UnboundedSender<Result<DiscoveryResponse, tonic::Status>>;

/// Hands each new stream to the test as (its requests, a sender of its responses).
struct Server {
    streams: UnboundedSender<(UnboundedReceiver<DiscoveryRequest>, RespTx)>,
    delta: UnboundedSender<(UnboundedReceiver<DeltaDiscoveryRequest>, DeltaTx)>,
}

type DeltaTx = UnboundedSender<Result<DeltaDiscoveryResponse, tonic::Status>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Server {
    type StreamAggregatedResourcesStream =
        UnboundedReceiverStream<Result<DiscoveryResponse, tonic::Status>>;
    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, tonic::Status> {
        let mut incoming = request.into_inner();
        let (req_tx, req_rx) = unbounded_channel();
        let (resp_tx, resp_rx) = unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(r)) = incoming.next().await {
                if req_tx.send(r).is_err() {
                    break;
                }
            }
        });
        let _ = self.streams.send((req_rx, resp_tx));
        Ok(tonic::Response::new(UnboundedReceiverStream::new(resp_rx)))
    }
    type DeltaAggregatedResourcesStream =
        UnboundedReceiverStream<Result<DeltaDiscoveryResponse, tonic::Status>>;
    async fn delta_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, tonic::Status> {
        let mut incoming = request.into_inner();
        let (req_tx, req_rx) = unbounded_channel();
        let (resp_tx, resp_rx) = unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(r)) = incoming.next().await {
                if req_tx.send(r).is_err() {
                    break;
                }
            }
        });
        let _ = self.delta.send((req_rx, resp_tx));
        Ok(tonic::Response::new(UnboundedReceiverStream::new(resp_rx)))
    }
}

/// Reports events to the test.
struct Recorder {
    events: UnboundedSender<String>,
}

impl Applier for Recorder {
    fn apply(&mut self, update: Update) -> Verdict {
        let names: Vec<_> = update.resources.iter().map(|(n, _)| n.clone()).collect();
        let _ = self
            .events
            .send(format!("apply {} {}", update.version, names.join(",")));
        Verdict::default()
    }
    fn does_not_exist(&mut self, _type_url: &str, name: &str) {
        let _ = self.events.send(format!("missing {name}"));
    }
    fn interest(&self) -> Vec<(&'static str, Interest)> {
        vec![
            (LISTENER_TYPE, Interest::Names(BTreeSet::new())),
            (CLUSTER_TYPE, Interest::Wildcard),
            (
                ENDPOINT_TYPE,
                Interest::Names(["nope".to_string()].into_iter().collect()),
            ),
        ]
    }
}

async fn next<T>(rx: &mut UnboundedReceiver<T>, what: &str) -> T {
    match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
        Ok(Some(v)) => v,
        Ok(None) => panic!("{what}: channel closed"),
        Err(_) => panic!("{what}: nothing within 20 s"),
    }
}

fn cluster(name: &str, pad: usize) -> Any {
    let c = Cluster {
        name: name.into(),
        alt_stat_name: "x".repeat(pad),
        ..Default::default()
    };
    Any {
        type_url: CLUSTER_TYPE.into(),
        value: c.encode_to_vec(),
    }
}

type Streams<Q, R> = UnboundedReceiver<(UnboundedReceiver<Q>, R)>;

/// Starts the server; returns its address and the SotW and Delta stream feeds.
fn serve() -> (
    std::net::SocketAddr,
    Streams<DiscoveryRequest, RespTx>,
    Streams<DeltaDiscoveryRequest, DeltaTx>,
) {
    let incoming =
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
    let addr = incoming.local_addr().expect("addr");
    let (streams_tx, streams) = unbounded_channel();
    let (delta_tx, delta) = unbounded_channel();
    let svc = AggregatedDiscoveryServiceServer::new(Server {
        streams: streams_tx,
        delta: delta_tx,
    })
    .max_encoding_message_size(usize::MAX);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming),
    );
    (addr, streams, delta)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_end_to_end_subscribe_ack_reconnect_initial_versions() {
    use envoy_types::pb::envoy::service::discovery::v3::Resource;
    let (addr, _sotw, mut streams) = serve();
    let json = format!(
        r#"{{"xds_servers":[{{"server_uri":"http://{addr}","channel_creds":[{{"type":"insecure"}}],
            "api_type":"DELTA_GRPC"}}], "node":{{"id":"d1"}}}}"#
    );
    let b = bootstrap::parse(&json).expect("bootstrap");
    let (events_tx, mut events) = unbounded_channel();
    let client = tokio::spawn(super::run(
        b,
        Recorder { events: events_tx },
        Status::default(),
    ));
    let (mut reqs, resp) = next(&mut streams, "first stream").await;
    let cds = next(&mut reqs, "CDS").await;
    assert_eq!(cds.type_url, CLUSTER_TYPE);
    assert_eq!(cds.node.as_ref().map(|n| n.id.as_str()), Some("d1"));
    assert!(cds.resource_names_subscribe.is_empty(), "wildcard");
    let eds = next(&mut reqs, "EDS").await;
    assert_eq!(eds.resource_names_subscribe, vec!["nope".to_string()]);
    let r = DeltaDiscoveryResponse {
        system_version_info: "s1".into(),
        resources: vec![Resource {
            name: "c1".into(),
            version: "r7".into(),
            resource: Some(cluster("c1", 0)),
            ..Default::default()
        }],
        type_url: CLUSTER_TYPE.into(),
        nonce: "d-n1".into(),
        ..Default::default()
    };
    resp.send(Ok(r)).expect("send");
    assert_eq!(next(&mut events, "apply").await, "apply s1 c1");
    let ack = next(&mut reqs, "ACK").await;
    assert_eq!(
        (ack.type_url.as_str(), ack.response_nonce.as_str()),
        (CLUSTER_TYPE, "d-n1")
    );
    assert!(ack.error_detail.is_none());
    drop(resp);
    let (mut reqs2, _resp2) = next(&mut streams, "second stream").await;
    let cds2 = next(&mut reqs2, "CDS again").await;
    assert!(cds2.node.is_some() && cds2.resource_names_subscribe.is_empty());
    assert_eq!(
        cds2.initial_resource_versions.get("c1").map(String::as_str),
        Some("r7")
    );
    assert_eq!(cds2.response_nonce, "");
    client.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_end_to_end_ack_timer_reconnect_large_message() {
    let (addr, mut streams, _delta) = serve();

    let json = format!(
        r#"{{"xds_servers":[{{"server_uri":"{addr}","channel_creds":[{{"type":"insecure"}}]}}],
            "node":{{"id":"n1"}}, "respite":{{"resource_timeout":"1s"}}}}"#
    );
    let b = bootstrap::parse(&json).expect("bootstrap");
    let (events_tx, mut events) = unbounded_channel();
    let status = Status::default();
    let client = tokio::spawn(super::run(
        b,
        Recorder { events: events_tx },
        status.clone(),
    ));

    let (mut reqs, resp) = next(&mut streams, "first stream").await;
    let cds = next(&mut reqs, "CDS request").await;
    assert_eq!(cds.type_url, CLUSTER_TYPE);
    assert_eq!(cds.node.as_ref().map(|n| n.id.as_str()), Some("n1"));
    assert!(cds.resource_names.is_empty());
    let eds = next(&mut reqs, "EDS request").await;
    assert_eq!(
        (eds.type_url.as_str(), eds.resource_names.clone()),
        (ENDPOINT_TYPE, vec!["nope".to_string()])
    );
    let started = std::time::Instant::now();

    // 6 MiB: above gRPC's 4 MiB default receive limit.
    let big = DiscoveryResponse {
        version_info: "v1".into(),
        resources: vec![cluster("c1", 6 << 20)],
        type_url: CLUSTER_TYPE.into(),
        nonce: "n1".into(),
        ..Default::default()
    };
    resp.send(Ok(big)).expect("send");
    assert_eq!(next(&mut events, "apply").await, "apply v1 c1");
    let ack = next(&mut reqs, "ACK").await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("v1", "n1")
    );
    assert!(ack.error_detail.is_none());

    assert_eq!(next(&mut events, "does-not-exist").await, "missing nope");
    let waited = started.elapsed();
    println!("does-not-exist fired after {waited:?} (timeout 1 s)");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "{waited:?}"
    );

    // The server closes the stream: the client reconnects, re-requests with the accepted version.
    drop(resp);
    let (mut reqs2, _resp2) = next(&mut streams, "second stream").await;
    let cds2 = next(&mut reqs2, "CDS on the new stream").await;
    assert_eq!(cds2.type_url, CLUSTER_TYPE);
    assert_eq!(
        (cds2.version_info.as_str(), cds2.response_nonce.as_str()),
        ("v1", "")
    );
    assert!(cds2.node.is_some());
    // The client sees the new stream's headers a moment after the server saw its requests.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while status.snapshot().stream.streams_opened < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = status.snapshot();
    assert_eq!(s.stream.streams_opened, 2);
    assert!(s.stream.connected);
    assert_eq!(
        s.stream.last_error.as_deref(),
        Some("stream closed by the server")
    );
    assert_eq!(s.types[CLUSTER_TYPE].acks, 1);
    client.abort();
}
