//! TLS over the ring against rustls on both ends: records whole and in order while two tasks
//! read and write one connection at once, and handshake failures classified as `ssl.*` counts.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use rustls::pki_types::ServerName;

use super::tls::Failure;
use super::*;
use crate::config::tls::{downstream, upstream};
use crate::config::tls_testing::Pki;

fn server_config(pki: &Pki, require_client: bool) -> Arc<rustls::ServerConfig> {
    let ca = require_client.then(|| pki.ca.clone());
    downstream(
        pki.server_cert.clone(),
        pki.server_key.clone(),
        ca,
        require_client,
        Vec::new(),
    )
    .unwrap()
    .server
    .config
}

fn client_config(pki: &Pki, with_cert: bool) -> Arc<rustls::ClientConfig> {
    let (c, k) = if with_cert {
        (Some(pki.client_cert.clone()), Some(pki.client_key.clone()))
    } else {
        (None, None)
    };
    upstream(Some(pki.ca.clone()), None, c, k, false)
        .unwrap()
        .client
        .config
}

async fn listener() -> (TcpListener, SocketAddr) {
    let l = bind_listener("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

fn ip_name() -> ServerName<'static> {
    ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into())
}

/// 4 MiB written in odd-sized pieces by one task while another reads the echo: the server
/// echoes with a reader and a writer of its own, so both ends read and write at once.
#[test]
fn both_directions_at_once_keep_every_byte_in_order() {
    let pki = Pki::new();
    let rt = runtime(None).unwrap();
    rt.block_on(async {
        let (l, addr) = listener().await;
        let server = server_config(&pki, true);
        spawn(async move {
            let (tcp, _) = accept(&l).await.unwrap();
            let (stream, info) = tls_accept(tcp, server).await.unwrap();
            assert!(info.peer_certificate);
            let stream = Rc::new(stream);
            let (tx, rx) = async_channel::unbounded::<Vec<u8>>();
            let w = stream.clone();
            spawn(async move {
                while let Ok(chunk) = rx.recv().await {
                    let BufResult(res, _) = write_all(&w, chunk).await;
                    res.unwrap();
                }
            });
            loop {
                let BufResult(res, buf) = read_append(&stream, Vec::with_capacity(9000)).await;
                if res.unwrap() == 0 {
                    break;
                }
                tx.send(buf).await.unwrap();
            }
        });
        let tcp = connect(addr, Duration::from_secs(5)).await.unwrap();
        let stream = Rc::new(
            tls_connect(tcp, client_config(&pki, true), ip_name())
                .await
                .unwrap(),
        );
        let total = 4 * 1024 * 1024;
        let data: Vec<u8> = (0..total).map(|i| (i * 7 % 251) as u8).collect();
        let sent = Rc::new(data.clone());
        let w = stream.clone();
        spawn(async move {
            let mut off = 0;
            let mut size = 1;
            while off < sent.len() {
                let end = (off + size).min(sent.len());
                let BufResult(res, _) = write_all(&w, sent[off..end].to_vec()).await;
                res.unwrap();
                off = end;
                size = size * 3 % 70_001 + 1;
            }
        });
        let mut got = Vec::with_capacity(total);
        while got.len() < total {
            let BufResult(res, b) = read_append(&stream, got).await;
            got = b;
            assert!(res.unwrap() > 0, "closed after {} bytes", got.len());
        }
        assert!(got == data, "echo differs");
    });
}

/// The failures the `ssl.*` stats count, each seen from the side that counts it.
#[test]
fn handshake_failures_are_classified() {
    let pki = Pki::new();
    let rt = runtime(None).unwrap();
    rt.block_on(async {
        // A name the certificate does not carry: fail_verify_san on the client.
        let (l, addr) = listener().await;
        let server = server_config(&pki, false);
        spawn(async move {
            let (tcp, _) = accept(&l).await.unwrap();
            let _ = tls_accept(tcp, server).await;
        });
        let tcp = connect(addr, Duration::from_secs(5)).await.unwrap();
        let name = ServerName::try_from("elsewhere.example").unwrap();
        let Err(e) = tls_connect(tcp, client_config(&pki, false), name).await else {
            panic!("a wrong name verified");
        };
        assert_eq!(tls::failure(&e), Failure::VerifyName, "{e}");

        // No client certificate where one is required: fail_verify_no_cert on the server.
        let (l, addr) = listener().await;
        let server = server_config(&pki, true);
        let (tx, rx) = async_channel::bounded(1);
        spawn(async move {
            let (tcp, _) = accept(&l).await.unwrap();
            let r = tls_accept(tcp, server).await.map(|_| ());
            tx.send(r.map_err(|e| tls::failure(&e))).await.unwrap();
        });
        let tcp = connect(addr, Duration::from_secs(5)).await.unwrap();
        if let Ok(s) = tls_connect(tcp, client_config(&pki, false), ip_name()).await {
            // TLS 1.3: the client finishes first and hears of the refusal on its first read.
            let BufResult(res, _) = read_append(&s, Vec::with_capacity(16)).await;
            assert!(!matches!(res, Ok(n) if n > 0));
        }
        assert_eq!(rx.recv().await.unwrap(), Err(Failure::NoCertificate));

        // A certificate from another issuer: fail_verify_error on the client.
        let (l, addr) = listener().await;
        let stranger = downstream(
            pki.stranger_cert.clone(),
            pki.stranger_key.clone(),
            None,
            false,
            Vec::new(),
        )
        .unwrap()
        .server
        .config;
        spawn(async move {
            let (tcp, _) = accept(&l).await.unwrap();
            let _ = tls_accept(tcp, stranger).await;
        });
        let tcp = connect(addr, Duration::from_secs(5)).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let Err(e) = tls_connect(tcp, client_config(&pki, false), name).await else {
            panic!("a certificate of an unknown issuer verified");
        };
        assert_eq!(tls::failure(&e), Failure::Verify, "{e}");
    });
}
