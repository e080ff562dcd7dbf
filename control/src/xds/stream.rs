//! The transport loop: connect, open the ADS stream (SotW or Delta), pump requests and
//! responses through [`State`], fire does-not-exist timers, reconnect with backoff forever.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::{Stream, StreamExt};

use super::backoff::Backoff;
use super::state::{Inbound, Mode, Outbound, State};
use super::status::Status;
use super::{Applier, channel};
use crate::source::bootstrap::Bootstrap;

type Responses = Pin<Box<dyn Stream<Item = Result<Inbound, tonic::Status>> + Send>>;
type Opening = Pin<Box<dyn Future<Output = Result<Responses, tonic::Status>> + Send>>;

/// Runs the ADS client until the task is dropped. Connection and stream errors are retried
/// forever with backoff (gRFC A57) and shown in `Status.stream`; only a bootstrap the client
/// cannot use at all (bad `server_uri`, unreadable TLS files) is returned as an error.
pub async fn run<A: Applier>(
    bootstrap: Bootstrap,
    mut applier: A,
    status: Status,
) -> Result<(), String> {
    let endpoint = channel::endpoint(&bootstrap.server)?;
    let mode = if bootstrap.server.delta {
        Mode::Delta
    } else {
        Mode::Sotw
    };
    status.with(|s| {
        s.stream.server_uri = bootstrap.server.server_uri.clone();
        s.stream.api = if bootstrap.server.delta {
            "delta"
        } else {
            "sotw"
        }
        .into();
    });
    let mut state = State::new(
        mode,
        bootstrap.node.clone(),
        bootstrap.resource_timeout,
        status.clone(),
    );
    state.set_interest(applier.interest());
    let mut backoff = Backoff::default();
    loop {
        let (got_response, error) = one_stream(
            &endpoint,
            mode,
            bootstrap.max_message_bytes,
            &mut state,
            &mut applier,
            &status,
        )
        .await;
        state.end_stream();
        status.with(|s| {
            s.stream.connected = false;
            s.stream.last_error = Some(error.clone());
        });
        // Backoff resets only after a response on the stream (A57); a stream that delivered
        // responses and then closed is a normal rotation: reconnect at once, quietly
        // (A57).
        let delay = if got_response {
            backoff.reset();
            tracing::info!(server = %bootstrap.server.server_uri, "xDS stream closed ({error}); reconnecting");
            std::time::Duration::ZERO
        } else {
            let d = backoff.next_delay();
            tracing::warn!(server = %bootstrap.server.server_uri, "xDS stream failed: {error}; retrying in {d:?}");
            d
        };
        tokio::time::sleep(delay).await;
    }
}

/// One connection and stream, until it fails. Returns (a response was received, why it ended).
async fn one_stream<A: Applier>(
    endpoint: &tonic::transport::Endpoint,
    mode: Mode,
    max_message_bytes: usize,
    state: &mut State,
    applier: &mut A,
    status: &Status,
) -> (bool, String) {
    let channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => return (false, format!("connect: {}", error_chain(&e))),
    };
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes);
    let (tx, rx) = mpsc::unbounded_channel::<Outbound>();
    // Each request tonic takes off the queue has been handed to the connected stream: that is
    // when its does-not-exist timers start (A57).
    let (sent_tx, mut sent_rx) = mpsc::unbounded_channel::<String>();
    let opening: Opening = match mode {
        Mode::Sotw => {
            let out = UnboundedReceiverStream::new(rx).filter_map(move |o| match o {
                Outbound::Sotw(r) => {
                    let _ = sent_tx.send(r.type_url.clone());
                    Some(r)
                }
                Outbound::Delta(_) => None,
            });
            Box::pin(async move {
                let s = client.stream_aggregated_resources(out).await?.into_inner();
                Ok(Box::pin(s.map(|m| m.map(Inbound::Sotw))) as Responses)
            })
        }
        Mode::Delta => {
            let out = UnboundedReceiverStream::new(rx).filter_map(move |o| match o {
                Outbound::Delta(r) => {
                    let _ = sent_tx.send(r.type_url.clone());
                    Some(r)
                }
                Outbound::Sotw(_) => None,
            });
            Box::pin(async move {
                let s = client.delta_aggregated_resources(out).await?.into_inner();
                Ok(Box::pin(s.map(|m| m.map(Inbound::Delta))) as Responses)
            })
        }
    };
    for r in state.start_stream() {
        let _ = tx.send(r);
    }
    let mut opening = Some(opening);
    let mut responses: Option<Responses> = None;
    let mut got_response = false;
    loop {
        let deadline = state.next_deadline();
        tokio::select! {
            r = async { opening.as_mut().expect("guarded").await }, if opening.is_some() => {
                opening = None;
                match r {
                    Ok(s) => {
                        responses = Some(s);
                        status.with(|s| {
                            s.stream.connected = true;
                            s.stream.streams_opened += 1;
                        });
                    }
                    Err(e) => return (false, format!("opening the stream: {}", grpc_error(&e))),
                }
            }
            m = async { responses.as_mut().expect("guarded").next().await }, if responses.is_some() => {
                match m {
                    Some(Ok(msg)) => {
                        got_response = true;
                        for r in state.on_response(msg, applier, Instant::now()) {
                            let _ = tx.send(r);
                        }
                    }
                    Some(Err(e)) => return (got_response, grpc_error(&e)),
                    None => return (got_response, "stream closed by the server".into()),
                }
            }
            Some(t) = sent_rx.recv() => state.on_sent(&t, Instant::now()),
            _ = sleep_until(deadline) => {
                for r in state.on_tick(Instant::now(), applier) {
                    let _ = tx.send(r);
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

fn grpc_error(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests;
