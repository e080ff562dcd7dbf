//! A scripted xDS management server and the `respite-control` process under test.
//!
//! [`XdsServer`] is a real gRPC server (tonic, envoy-types' `AggregatedDiscoveryService`
//! stub, SotW and Delta ADS) on 127.0.0.1, on its own tokio runtime thread. It never answers
//! on its own: a blocking test reads each request the client sends ([`XdsServer::recv`]) and
//! decides what to send back ([`XdsServer::send`], [`XdsServer::send_delta`]), when to end the
//! stream ([`XdsServer::close_stream`]) or refuse the next ones ([`XdsServer::refuse_streams`]).
//! So tests assert on the exact requests, in order (Envoy's `api/xds_protocol.rst`).
//!
//! [`ControlProcess`] runs `target/release/respite-control --bootstrap FILE --admin ADDR` and
//! reads its `/xds` and `/config_dump` pages; [`bootstrap`] writes the gRPC xDS bootstrap
//! (gRFC A27) with Respite's `"respite"` extension object.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::{START_TIMEOUT, free_port};

/// Largest message the server encodes or decodes (the 6 MiB CDS test needs more than gRPC's
/// 4 MiB default).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// One request the client sent.
#[derive(Debug, Clone)]
pub struct Received {
    /// Which stream carried it: 1 for the first stream opened, counting refused streams too.
    pub stream: u64,
    /// When the server read it.
    pub at: Instant,
    pub req: Req,
}

/// A SotW or Delta request.
#[derive(Debug, Clone)]
pub enum Req {
    Sotw(DiscoveryRequest),
    Delta(DeltaDiscoveryRequest),
}

impl Received {
    /// The request's type URL.
    pub fn type_url(&self) -> &str {
        match &self.req {
            Req::Sotw(r) => &r.type_url,
            Req::Delta(r) => &r.type_url,
        }
    }

    /// The SotW request; panics (naming it) on a Delta one.
    pub fn sotw(&self) -> &DiscoveryRequest {
        match &self.req {
            Req::Sotw(r) => r,
            Req::Delta(r) => panic!("expected a SotW request, got a Delta one: {r:?}"),
        }
    }

    /// The Delta request; panics (naming it) on a SotW one.
    pub fn delta(&self) -> &DeltaDiscoveryRequest {
        match &self.req {
            Req::Delta(r) => r,
            Req::Sotw(r) => panic!("expected a Delta request, got a SotW one: {r:?}"),
        }
    }
}

enum StreamTx {
    Sotw(mpsc::UnboundedSender<Result<DiscoveryResponse, tonic::Status>>),
    Delta(mpsc::UnboundedSender<Result<DeltaDiscoveryResponse, tonic::Status>>),
}

#[derive(Default)]
struct Shared {
    /// Streams opened so far, refused ones included; also the last stream id.
    opened: u64,
    /// When each stream was opened (index = id - 1).
    open_times: Vec<Instant>,
    /// How many of the next streams to refuse.
    refuse: u64,
    /// The newest accepted stream: (id, response sender).
    current: Option<(u64, StreamTx)>,
}

#[derive(Clone)]
struct Service {
    shared: Arc<Mutex<Shared>>,
    received: std_mpsc::Sender<Received>,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

type RespStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

impl Service {
    /// Counts the stream and either refuses it or makes it the current one.
    fn open(&self, make: impl FnOnce() -> StreamTx) -> Result<u64, tonic::Status> {
        let mut s = lock(&self.shared);
        s.opened += 1;
        s.open_times.push(Instant::now());
        let id = s.opened;
        if s.refuse > 0 {
            s.refuse -= 1;
            return Err(tonic::Status::unavailable(format!(
                "scripted server: stream {id} refused"
            )));
        }
        s.current = Some((id, make()));
        Ok(id)
    }

    /// Forwards every request of stream `id` to the test, until the client ends it.
    fn read_requests<T: Send + 'static>(
        &self,
        id: u64,
        mut inbound: tonic::Streaming<T>,
        wrap: fn(T) -> Req,
    ) {
        let received = self.received.clone();
        tokio::spawn(async move {
            while let Ok(Some(msg)) = inbound.message().await {
                let r = Received {
                    stream: id,
                    at: Instant::now(),
                    req: wrap(msg),
                };
                if received.send(r).is_err() {
                    break;
                }
            }
        });
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Service {
    type StreamAggregatedResourcesStream = RespStream<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = RespStream<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, tonic::Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.open(|| StreamTx::Sotw(tx))?;
        self.read_requests(id, request.into_inner(), Req::Sotw);
        Ok(tonic::Response::new(Box::pin(
            UnboundedReceiverStream::new(rx),
        )))
    }

    async fn delta_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, tonic::Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.open(|| StreamTx::Delta(tx))?;
        self.read_requests(id, request.into_inner(), Req::Delta);
        Ok(tonic::Response::new(Box::pin(
            UnboundedReceiverStream::new(rx),
        )))
    }
}

/// The scripted ADS management server. Dropping it stops the server.
pub struct XdsServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    received: Mutex<std_mpsc::Receiver<Received>>,
    /// Requests read past by [`XdsServer::recv_type`], handed out first by the next reads.
    pending: Mutex<VecDeque<Received>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl XdsServer {
    /// Starts the server on 127.0.0.1:0 on its own one-thread tokio runtime.
    pub fn start() -> XdsServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("xds-server")
            .enable_all()
            .build()
            .expect("tokio runtime for the xDS server");
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (tx, rx) = std_mpsc::channel();
        let service = Service {
            shared: shared.clone(),
            received: tx,
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let addr = runtime.block_on(async move {
            let incoming = tonic::transport::server::TcpIncoming::bind(
                "127.0.0.1:0".parse().expect("literal address"),
            )
            .expect("bind the xDS server");
            let addr = incoming.local_addr().expect("local_addr");
            let svc = AggregatedDiscoveryServiceServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            tokio::spawn(async move {
                let served = tonic::transport::Server::builder()
                    .add_service(svc)
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stop_rx.await;
                    })
                    .await;
                if let Err(e) = served {
                    eprintln!("xDS server stopped: {e}");
                }
            });
            addr
        });
        XdsServer {
            addr,
            shared,
            received: Mutex::new(rx),
            pending: Mutex::new(VecDeque::new()),
            shutdown: Some(stop_tx),
            runtime: Some(runtime),
        }
    }

    /// Where it listens (127.0.0.1:PORT).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next request the client sent, waiting up to `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<Received> {
        if let Some(r) = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
        {
            return Some(r);
        }
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv_timeout(timeout)
            .ok()
    }

    /// The next request of `type_url`, waiting up to `timeout`; requests of other types read
    /// meanwhile stay queued, in order, for the next [`XdsServer::recv`]. Use it where the
    /// order between types is not specified (e.g. the first LDS and CDS requests).
    pub fn recv_type(&self, type_url: &str, timeout: Duration) -> Option<Received> {
        {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(i) = pending.iter().position(|r| r.type_url() == type_url) {
                return pending.remove(i);
            }
        }
        let deadline = Instant::now() + timeout;
        let rx = self.received.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let r = rx.recv_timeout(left).ok()?;
            if r.type_url() == type_url {
                return Some(r);
            }
            self.pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back(r);
        }
    }

    /// Like [`XdsServer::recv_type`], panicking with `what` if nothing comes within `timeout`.
    pub fn expect_type(&self, type_url: &str, timeout: Duration, what: &str) -> Received {
        self.recv_type(type_url, timeout)
            .unwrap_or_else(|| panic!("no {type_url} request within {timeout:?}: {what}"))
    }

    /// Asserts the client sends nothing for `dur` (e.g. no second reply to one response, no
    /// hot loop).
    pub fn expect_none(&self, dur: Duration) {
        if let Some(r) = self.recv(dur) {
            panic!(
                "expected no request for {dur:?}, got one on stream {}: {:?}",
                r.stream, r.req
            );
        }
    }

    /// Every request received within `dur` (waits the whole `dur`).
    pub fn drain(&self, dur: Duration) -> Vec<Received> {
        let deadline = Instant::now() + dur;
        let mut out = Vec::new();
        while let Some(r) = self.recv(deadline.saturating_duration_since(Instant::now())) {
            out.push(r);
        }
        out
    }

    fn current<R>(&self, f: impl FnOnce(u64, &StreamTx) -> R) -> R {
        let s = lock(&self.shared);
        let (id, tx) = s
            .current
            .as_ref()
            .expect("no stream is open (the client never connected, or it was closed)");
        f(*id, tx)
    }

    /// Sends a SotW response on the current stream. Panics if there is none, or it is Delta.
    pub fn send(&self, resp: DiscoveryResponse) {
        self.current(|id, tx| match tx {
            StreamTx::Sotw(tx) => {
                if tx.send(Ok(resp)).is_err() {
                    panic!("stream {id} is gone: cannot send");
                }
            }
            StreamTx::Delta(_) => panic!("stream {id} is Delta: use send_delta"),
        })
    }

    /// Sends a Delta response on the current stream. Panics if there is none, or it is SotW.
    pub fn send_delta(&self, resp: DeltaDiscoveryResponse) {
        self.current(|id, tx| match tx {
            StreamTx::Delta(tx) => {
                if tx.send(Ok(resp)).is_err() {
                    panic!("stream {id} is gone: cannot send");
                }
            }
            StreamTx::Sotw(_) => panic!("stream {id} is SotW: use send"),
        })
    }

    /// Ends the current stream with `status` (the client sees it as the stream's gRPC status).
    pub fn close_stream(&self, status: tonic::Status) {
        let (id, tx) = lock(&self.shared)
            .current
            .take()
            .expect("no stream is open to close");
        let sent = match tx {
            StreamTx::Sotw(tx) => tx.send(Err(status)).is_ok(),
            StreamTx::Delta(tx) => tx.send(Err(status)).is_ok(),
        };
        assert!(sent, "stream {id} was already gone");
    }

    /// The next `n` streams are refused at once with UNAVAILABLE, before any response.
    pub fn refuse_streams(&self, n: u64) {
        lock(&self.shared).refuse = n;
    }

    /// Streams opened so far, refused ones included.
    pub fn streams_opened(&self) -> u64 {
        lock(&self.shared).opened
    }

    /// When each stream was opened, in order (refused ones included).
    pub fn stream_open_times(&self) -> Vec<Instant> {
        lock(&self.shared).open_times.clone()
    }

    /// Waits up to `timeout` until at least `n` streams were opened.
    pub fn wait_streams(&self, n: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.streams_opened() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.streams_opened() >= n
    }
}

impl Drop for XdsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.shutdown.take() {
            let _ = stop.send(());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

// ---- bootstrap --------------------------------------------------------------------------

/// Node id the [`bootstrap`] gives the client.
pub const NODE_ID: &str = "respite-test~127.0.0.1~node";
/// Node cluster the [`bootstrap`] gives the client.
pub const NODE_CLUSTER: &str = "respite-test";

/// gRPC xDS bootstrap JSON (gRFC A27) for a client of `addr`: `xds_servers[0]` with
/// `server_uri` "127.0.0.1:PORT", insecure creds and Respite's `api_type` ("GRPC" = SotW,
/// "DELTA_GRPC" = Delta); `node {id, cluster}`; and the `"respite"` extension object with
/// `resource_timeout: "2s"`, then every key of `extra` (an object) on top.
pub fn bootstrap(addr: SocketAddr, delta: bool, extra: serde_json::Value) -> String {
    let mut respite = serde_json::json!({ "resource_timeout": "2s" });
    if let (Some(base), serde_json::Value::Object(more)) = (respite.as_object_mut(), extra) {
        base.extend(more);
    }
    serde_json::json!({
        "xds_servers": [{
            "server_uri": format!("127.0.0.1:{}", addr.port()),
            "channel_creds": [{ "type": "insecure" }],
            "api_type": if delta { "DELTA_GRPC" } else { "GRPC" },
        }],
        "node": { "id": NODE_ID, "cluster": NODE_CLUSTER },
        "respite": respite,
    })
    .to_string()
}

// ---- respite-control --------------------------------------------------------------------

/// The `respite-control` binary: `RESPITE_CONTROL_BIN`, else `target/release/respite-control`
/// (`cargo test` does not rebuild it: `cargo build --release -p respite-control` first).
pub fn control_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RESPITE_CONTROL_BIN") {
        return PathBuf::from(p);
    }
    crate::target_dir().join("release").join("respite-control")
}

/// A running `respite-control --bootstrap FILE --admin 127.0.0.1:PORT [--dataplane SOCK]`,
/// killed on drop. Its output goes to a file whose tail is printed if the test panics.
pub struct ControlProcess {
    /// The admin HTTP port.
    pub admin_port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl ControlProcess {
    /// Writes `bootstrap_json` to a temp file, starts the control process and waits until its
    /// admin endpoint answers `/xds`.
    pub fn start(bootstrap_json: &str, dataplane_socket: Option<&Path>) -> ControlProcess {
        let dir = tempfile::Builder::new()
            .prefix("respite-control-")
            .tempdir()
            .expect("tempdir");
        let boot = dir.path().join("bootstrap.json");
        fs::write(&boot, bootstrap_json).expect("write bootstrap");
        Self::spawn_in(dir, "--bootstrap", boot, dataplane_socket)
    }

    /// `respite-control <flag> FILE` with `text` as the file (`--config` for a Respite TOML,
    /// `--envoy-config` / `--twemproxy-config` for a YAML), else as [`ControlProcess::start`]. Returns the
    /// process and the file's path (rewrite it, then [`ControlProcess::signal`] `HUP`).
    pub fn start_file(
        flag: &str,
        text: &str,
        dataplane_socket: Option<&Path>,
    ) -> (ControlProcess, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("respite-control-")
            .tempdir()
            .expect("tempdir");
        let ext = if flag == "--envoy-config" || flag == "--twemproxy-config" {
            "yaml"
        } else {
            "toml"
        };
        let file = dir.path().join(format!("source.{ext}"));
        fs::write(&file, text).expect("write source");
        (
            Self::spawn_in(dir, flag, file.clone(), dataplane_socket),
            file,
        )
    }

    /// Sends `sig` (e.g. "HUP") with kill(1).
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let ok = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(c.id().to_string())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill -{sig} respite-control");
        }
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    fn spawn_in(
        dir: tempfile::TempDir,
        flag: &str,
        source: PathBuf,
        dataplane_socket: Option<&Path>,
    ) -> ControlProcess {
        let admin_port = free_port();
        let log = fs::File::create(dir.path().join("control.log")).expect("log file");
        let mut cmd = Command::new(control_bin());
        cmd.arg(flag)
            .arg(&source)
            .arg("--admin")
            .arg(format!("127.0.0.1:{admin_port}"));
        if let Some(sock) = dataplane_socket {
            cmd.arg("--dataplane").arg(sock);
        }
        let child = cmd
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} (cargo build --release -p respite-control): {e}",
                    control_bin().display()
                )
            });
        let mut p = ControlProcess {
            admin_port,
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok((200, _)) = crate::admin::try_request(admin_port, "GET", "/xds") {
                return p;
            }
            if let Some(Ok(Some(status))) = p.child.as_mut().map(|c| c.try_wait()) {
                panic!("respite-control exited early ({status}):\n{}", p.log());
            }
            if Instant::now() > deadline {
                panic!(
                    "respite-control admin did not answer on {admin_port}:\n{}",
                    p.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("control.log")).unwrap_or_default()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn get_json(&self, path: &str) -> serde_json::Value {
        let (status, body) = crate::admin::request(self.admin_port, "GET", path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
    }

    /// `GET /xds`: `{stream, types: {type_url: ...}, resources: [...]}`.
    pub fn xds_status(&self) -> serde_json::Value {
        self.get_json("/xds")
    }

    /// `GET /config_dump`: `{"applied": <data plane config JSON>, ...}`.
    pub fn config_dump(&self) -> serde_json::Value {
        self.get_json("/config_dump")
    }

    /// The `/xds` row of resource (`type_url`, `name`), if any.
    pub fn resource(&self, type_url: &str, name: &str) -> Option<serde_json::Value> {
        resource_row(&self.xds_status(), type_url, name)
    }

    /// Names of `applied.listeners` (or `applied.clusters` with `"clusters"`) on /config_dump,
    /// name → the table.
    pub fn applied(&self, what: &str) -> BTreeMap<String, serde_json::Value> {
        applied_of(&self.config_dump(), what)
    }
}

/// The row of (`type_url`, `name`) in a `/xds` document.
pub fn resource_row(
    xds: &serde_json::Value,
    type_url: &str,
    name: &str,
) -> Option<serde_json::Value> {
    xds["resources"]
        .as_array()?
        .iter()
        .find(|r| r["type_url"] == type_url && r["name"] == name)
        .cloned()
}

/// `applied.<what>` of a `/config_dump` document by name (empty when nothing is applied).
pub fn applied_of(dump: &serde_json::Value, what: &str) -> BTreeMap<String, serde_json::Value> {
    dump["applied"][what]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    (
                        i["name"].as_str().unwrap_or_default().to_string(),
                        i.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for ControlProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- respite-control log (tail) ----\n{}\n----",
                self.log_tail(60)
            );
        }
    }
}

/// Polls `f` every 50 ms until it returns `Some`, up to `timeout`.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    //! The harness itself, driven by a direct tonic client: what a test reads is what the
    //! client sent, what a test sends is what the client receives, and the stream controls do
    //! what they say.

    use super::*;
    use crate::xds_resources::*;
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use tokio_stream::StreamExt;

    const T: Duration = Duration::from_secs(5);

    /// Multi-thread, so the client's connection makes progress between `block_on`s.
    fn client_rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("client runtime")
    }

    async fn connect(
        addr: SocketAddr,
    ) -> AggregatedDiscoveryServiceClient<tonic::transport::Channel> {
        AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect")
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn req(type_url: &str, version: &str, nonce: &str, names: &[&str]) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: version.into(),
            type_url: type_url.into(),
            response_nonce: nonce.into(),
            resource_names: names.iter().map(|s| s.to_string()).collect(),
            node: Some(Node {
                id: "n1".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn sotw_requests_and_responses_pass_through_exactly() {
        let server = XdsServer::start();
        let rt = client_rt();
        let (req_tx, req_rx) = mpsc::unbounded_channel::<DiscoveryRequest>();
        let mut client = rt.block_on(connect(server.addr()));
        req_tx.send(req(CLUSTER, "", "", &[])).unwrap();
        req_tx.send(req(ENDPOINT, "", "", &["e1"])).unwrap();
        let mut inbound = rt
            .block_on(client.stream_aggregated_resources(UnboundedReceiverStream::new(req_rx)))
            .expect("stream")
            .into_inner();

        // Out of order on purpose: recv_type keeps the CDS one for the next recv.
        let eds = server.expect_type(ENDPOINT, T, "second request");
        assert_eq!(eds.stream, 1);
        assert_eq!(eds.sotw().resource_names, vec!["e1".to_string()]);
        let cds = server.recv(T).expect("first request kept");
        assert_eq!(cds.type_url(), CLUSTER);
        assert_eq!(cds.sotw().node.as_ref().map(|n| n.id.as_str()), Some("n1"));
        assert!(cds.at <= eds.at, "arrival times in order");
        server.expect_none(Duration::from_millis(200));

        let c = static_cluster("c1", &["127.0.0.1:7001".parse().unwrap()]);
        server.send(sotw(CLUSTER, "v1", "n1", vec![any(c.clone())]));
        let got = rt
            .block_on(inbound.next())
            .expect("a response")
            .expect("ok");
        assert_eq!(got.version_info, "v1");
        assert_eq!(got.nonce, "n1");
        assert_eq!(got.type_url, CLUSTER);
        assert_eq!(got.resources, vec![any(c)]);

        // A 6 MiB response goes through (encoding limit raised).
        let big = padded_cluster("big", &["127.0.0.1:7001".parse().unwrap()], 6 << 20);
        server.send(sotw(CLUSTER, "v2", "n2", vec![any(big)]));
        let got = rt
            .block_on(inbound.next())
            .expect("a response")
            .expect("ok");
        assert_eq!(got.version_info, "v2");
        assert!(prost::Message::encoded_len(&got) > 6 << 20);

        req_tx.send(req(CLUSTER, "v2", "n2", &[])).unwrap();
        let ack = server.recv(T).expect("ack");
        assert_eq!(
            (
                ack.sotw().version_info.as_str(),
                ack.sotw().response_nonce.as_str()
            ),
            ("v2", "n2")
        );

        server.close_stream(tonic::Status::unavailable("bye"));
        let end = rt.block_on(inbound.next()).expect("the close");
        let status = end.expect_err("closed with a status");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "bye");
        assert_eq!(server.streams_opened(), 1);
    }

    #[test]
    fn refused_streams_fail_with_unavailable_then_streams_open_again() {
        let server = XdsServer::start();
        let rt = client_rt();
        let mut client = rt.block_on(connect(server.addr()));
        server.refuse_streams(2);
        for n in 1..=2u64 {
            let (_tx, rx) = mpsc::unbounded_channel::<DiscoveryRequest>();
            let r =
                rt.block_on(client.stream_aggregated_resources(UnboundedReceiverStream::new(rx)));
            let status = r
                .err()
                .unwrap_or_else(|| panic!("stream {n} should be refused"));
            assert_eq!(status.code(), tonic::Code::Unavailable);
            assert_eq!(server.streams_opened(), n);
        }
        let (tx, rx) = mpsc::unbounded_channel::<DiscoveryRequest>();
        tx.send(req(LISTENER, "", "", &[])).unwrap();
        let _inbound = rt
            .block_on(client.stream_aggregated_resources(UnboundedReceiverStream::new(rx)))
            .expect("third stream accepted");
        let r = server.recv(T).expect("request on stream 3");
        assert_eq!(r.stream, 3);
        assert_eq!(server.stream_open_times().len(), 3);
    }

    #[test]
    fn delta_requests_and_responses_pass_through_exactly() {
        let server = XdsServer::start();
        let rt = client_rt();
        let mut client = rt.block_on(connect(server.addr()));
        let (tx, rx) = mpsc::unbounded_channel::<DeltaDiscoveryRequest>();
        tx.send(DeltaDiscoveryRequest {
            type_url: LISTENER.into(),
            resource_names_subscribe: vec!["*".into()],
            initial_resource_versions: [("l1".to_string(), "a1".to_string())].into(),
            ..Default::default()
        })
        .unwrap();
        let mut inbound = rt
            .block_on(client.delta_aggregated_resources(UnboundedReceiverStream::new(rx)))
            .expect("delta stream")
            .into_inner();
        let r = server.recv(T).expect("delta request");
        let d = r.delta();
        assert_eq!(d.resource_names_subscribe, vec!["*".to_string()]);
        assert_eq!(
            d.initial_resource_versions.get("l1").map(String::as_str),
            Some("a1")
        );

        let l = listener("l1", "127.0.0.1:7000".parse().unwrap(), "c1");
        server.send_delta(delta_resp(
            LISTENER,
            "s1",
            "d1",
            vec![("l1", "a2", any(l.clone()))],
            &["l0"],
        ));
        let got = rt.block_on(inbound.next()).expect("response").expect("ok");
        assert_eq!(got.nonce, "d1");
        assert_eq!(got.removed_resources, vec!["l0".to_string()]);
        assert_eq!(got.resources[0].name, "l1");
        assert_eq!(got.resources[0].version, "a2");
        assert_eq!(got.resources[0].resource, Some(any(l)));
    }

    #[test]
    fn bootstrap_has_server_node_and_respite_extension() {
        let addr: SocketAddr = "127.0.0.1:18000".parse().unwrap();
        let b: serde_json::Value = serde_json::from_str(&bootstrap(
            addr,
            true,
            serde_json::json!({"listener_names": ["l1"], "resource_timeout": "3s"}),
        ))
        .unwrap();
        assert_eq!(b["xds_servers"][0]["server_uri"], "127.0.0.1:18000");
        assert_eq!(b["xds_servers"][0]["api_type"], "DELTA_GRPC");
        assert_eq!(b["xds_servers"][0]["channel_creds"][0]["type"], "insecure");
        assert_eq!(b["node"]["id"], NODE_ID);
        assert_eq!(b["respite"]["resource_timeout"], "3s");
        assert_eq!(b["respite"]["listener_names"][0], "l1");
        let sotw: serde_json::Value =
            serde_json::from_str(&bootstrap(addr, false, serde_json::json!({}))).unwrap();
        assert_eq!(sotw["xds_servers"][0]["api_type"], "GRPC");
        assert_eq!(sotw["respite"]["resource_timeout"], "2s");
    }
}
