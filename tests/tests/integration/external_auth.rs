//! `[listeners.external_auth]`: AUTH and `HELLO … AUTH` checked by a RedisProxyExternalAuth gRPC
//! service (a tonic server here), with Envoy's reply texts; pipelining behind an AUTH; the
//! service down; `enable_auth_expiration`.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{addrs, servers};
use envoy_types::pb::envoy::service::redis_auth::v3::redis_proxy_external_auth_server::{
    RedisProxyExternalAuth, RedisProxyExternalAuthServer,
};
use envoy_types::pb::envoy::service::redis_auth::v3::{
    RedisProxyExternalAuthRequest, RedisProxyExternalAuthResponse,
};
use envoy_types::pb::google::protobuf::Timestamp;
use envoy_types::pb::google::rpc::Status;
use respite_tests::{RawClient, Respite, free_port};

const OK: &[u8] = b"+OK\r\n";
const NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
const FAILED: &[u8] = b"-ERR external authentication failed\r\n";

/// Accepts password "good" (any user), user "app" with "secret", "expiring" (for one second),
/// "slow" after 3 s; refuses "denied" with PERMISSION_DENIED and a message, anything else with
/// UNAUTHENTICATED and none; "broken" gets UNAVAILABLE. Records every (user, password).
#[derive(Default, Clone)]
struct Service {
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

fn answer(
    code: i32,
    message: &str,
    expires_in: Option<Duration>,
) -> RedisProxyExternalAuthResponse {
    RedisProxyExternalAuthResponse {
        status: Some(Status {
            code,
            message: String::new(),
            details: vec![],
        }),
        expiration: expires_in.map(|d| {
            let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + d;
            Timestamp {
                seconds: t.as_secs() as i64,
                nanos: t.subsec_nanos() as i32,
            }
        }),
        message: message.into(),
    }
}

#[tonic::async_trait]
impl RedisProxyExternalAuth for Service {
    async fn authenticate(
        &self,
        request: tonic::Request<RedisProxyExternalAuthRequest>,
    ) -> Result<tonic::Response<RedisProxyExternalAuthResponse>, tonic::Status> {
        let r = request.into_inner();
        self.seen
            .lock()
            .unwrap()
            .push((r.username.clone(), r.password.clone()));
        let resp = match (r.username.as_str(), r.password.as_str()) {
            (_, "good") => answer(0, "", None),
            ("app", "secret") => answer(0, "", None),
            (_, "expiring") => answer(0, "", Some(Duration::from_secs(1))),
            (_, "slow") => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                answer(0, "", None)
            }
            (_, "denied") => answer(7, "go away", None),
            (_, "broken") => answer(14, "backend down", None),
            _ => answer(16, "", None),
        };
        Ok(tonic::Response::new(resp))
    }
}

/// The service on 127.0.0.1:0, on its own runtime (kept alive by the returned value).
fn start_service() -> (tokio::runtime::Runtime, String, Service) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let service = Service::default();
    let svc = service.clone();
    let addr = runtime.block_on(async move {
        let incoming =
            tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = incoming.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(RedisProxyExternalAuthServer::new(svc))
                .serve_with_incoming(incoming)
                .await;
        });
        addr
    });
    (runtime, addr.to_string(), service)
}

fn respite_with(service: &str, extra: &str) -> (Respite, Vec<respite_tests::RedisServer>) {
    let backends = servers(1);
    let respite = Respite::over_with(
        &addrs(&backends),
        1,
        &format!("[listeners.external_auth]\naddress = \"{service}\"\ntimeout = \"1s\"\n{extra}"),
    );
    (respite, backends)
}

fn stat(respite: &Respite, name: &str) -> u64 {
    let (status, text) = respite.admin_get("/stats");
    assert_eq!(status, 200);
    let key = format!("redis.main.{name}: ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .unwrap_or_else(|| panic!("{name} not in {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn accepted_refused_and_failed_auth_reply_as_envoy() {
    let (_rt, service_addr, service) = start_service();
    let (respite, _backends) = respite_with(&service_addr, "");
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"GET", b"k"]), NOAUTH);
    assert_eq!(c.cmd(&[b"AUTH", b"wrong"]), b"-ERR unauthorized\r\n");
    assert_eq!(c.cmd(&[b"AUTH", b"denied"]), b"-ERR go away\r\n");
    assert_eq!(c.cmd(&[b"GET", b"k"]), NOAUTH);
    assert_eq!(c.cmd(&[b"AUTH", b"good"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"k"]), b"$1\r\nv\r\n");
    // A failed call leaves the connection as it was (authenticated here).
    assert_eq!(c.cmd(&[b"AUTH", b"broken"]), FAILED);
    assert_eq!(c.cmd(&[b"GET", b"k"]), b"$1\r\nv\r\n");
    // A refusal ends it.
    assert_eq!(c.cmd(&[b"AUTH", b"nope"]), b"-ERR unauthorized\r\n");
    assert_eq!(c.cmd(&[b"GET", b"k"]), NOAUTH);
    // AUTH user pass sends the user; AUTH pass an empty one.
    assert_eq!(c.cmd(&[b"AUTH", b"app", b"secret"]), OK);
    assert_eq!(
        c.cmd(&[b"AUTH", b"a", b"b", b"c"]),
        b"-ERR syntax error\r\n"
    );
    let seen = service.seen.lock().unwrap().clone();
    assert!(seen.contains(&("app".into(), "secret".into())), "{seen:?}");
    assert!(seen.contains(&(String::new(), "good".into())), "{seen:?}");
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert_eq!(stat(&respite, "external_auth.ok"), 2);
    assert_eq!(stat(&respite, "external_auth.denied"), 3);
    assert_eq!(stat(&respite, "external_auth.error"), 1);
    assert!(!respite.log().contains("secret"), "a password was logged");
}

#[test]
fn a_pipeline_behind_auth_is_answered_in_order() {
    let (_rt, service_addr, _service) = start_service();
    let (respite, _backends) = respite_with(&service_addr, "");
    let mut c = respite.raw();
    let mut buf = Vec::new();
    RawClient::encode_into(&mut buf, &[b"AUTH", b"good"]);
    RawClient::encode_into(&mut buf, &[b"SET", b"pk", b"pv"]);
    RawClient::encode_into(&mut buf, &[b"GET", b"pk"]);
    c.send_raw(&buf);
    assert_eq!(c.read_reply(), OK);
    assert_eq!(c.read_reply(), OK);
    assert_eq!(c.read_reply(), b"$2\r\npv\r\n");
    // A refused AUTH: the commands behind it are refused.
    let mut c = respite.raw();
    let mut buf = Vec::new();
    RawClient::encode_into(&mut buf, &[b"PING"]);
    RawClient::encode_into(&mut buf, &[b"AUTH", b"bad"]);
    RawClient::encode_into(&mut buf, &[b"GET", b"pk"]);
    c.send_raw(&buf);
    assert_eq!(c.read_reply(), NOAUTH);
    assert_eq!(c.read_reply(), b"-ERR unauthorized\r\n");
    assert_eq!(c.read_reply(), NOAUTH);
}

#[test]
fn hello_auth_goes_to_the_service() {
    let (_rt, service_addr, service) = start_service();
    let (respite, _backends) = respite_with(&service_addr, "");
    let mut c = respite.raw();
    assert_eq!(
        c.cmd(&[b"HELLO", b"3", b"AUTH", b"app", b"wrong"]),
        b"-ERR unauthorized\r\n"
    );
    assert!(
        c.cmd(&[b"HELLO", b"3"])
            .starts_with(b"-NOAUTH HELLO must be called")
    );
    let reply = c.cmd(&[
        b"HELLO", b"3", b"AUTH", b"app", b"secret", b"SETNAME", b"n1",
    ]);
    assert!(
        reply.starts_with(b"%7\r\n$6\r\nserver\r\n"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(c.cmd(&[b"CLIENT", b"GETNAME"]), b"$2\r\nn1\r\n");
    assert_eq!(c.cmd(&[b"SET", b"hk", b"1"]), OK);
    // Wrong HELLO arguments are answered without a call.
    let calls = service.seen.lock().unwrap().len();
    assert_eq!(
        c.cmd(&[b"HELLO", b"4", b"AUTH", b"app", b"secret"]),
        b"-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(service.seen.lock().unwrap().len(), calls);
}

#[test]
fn service_down_or_slow_fails_the_auth_without_hanging() {
    let down = format!("127.0.0.1:{}", free_port());
    let (respite, _backends) = respite_with(&down, "");
    let mut c = respite.raw();
    let start = Instant::now();
    assert_eq!(c.cmd(&[b"AUTH", b"good"]), FAILED);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(c.cmd(&[b"GET", b"k"]), NOAUTH);
    assert_eq!(stat(&respite, "external_auth.error"), 1);

    // Past the 1s timeout.
    let (_rt, service_addr, _service) = start_service();
    let (respite, _backends) = respite_with(&service_addr, "");
    let mut c = respite.raw();
    let start = Instant::now();
    assert_eq!(c.cmd(&[b"AUTH", b"slow"]), FAILED);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2900),
        "{took:?}"
    );
    assert_eq!(c.cmd(&[b"AUTH", b"good"]), OK);
}

#[test]
fn expired_auth_refuses_commands_until_auth_again() {
    let (_rt, service_addr, _service) = start_service();
    let (respite, _backends) = respite_with(&service_addr, "enable_auth_expiration = true\n");
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"AUTH", b"expiring"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"ek", b"1"]), OK);
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(c.cmd(&[b"GET", b"ek"]), NOAUTH);
    assert_eq!(c.cmd(&[b"AUTH", b"expiring"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"ek"]), b"$1\r\n1\r\n");
    // An answer without expiration does not expire.
    assert_eq!(c.cmd(&[b"AUTH", b"good"]), OK);
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(c.cmd(&[b"GET", b"ek"]), b"$1\r\n1\r\n");

    // Without enable_auth_expiration the expiration is not applied.
    let (respite, _backends) = respite_with(&service_addr, "");
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"AUTH", b"expiring"]), OK);
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(c.cmd(&[b"PING"]), b"+PONG\r\n");
}
