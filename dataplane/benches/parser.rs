//! Request parsing: Respite's zero-copy resumable parser vs the `redis-protocol` decoder, on a
//! pipeline of 16 GET and 16 SET requests (the measured reason the hot path does not use
//! `redis-protocol`). Per-request time = reported time / 32 (see the Throughput line).
// A benchmark, off the request path: it may index and unwrap.
#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use respite::resp::{Parsed, RequestParser, encode};

fn pipeline() -> Vec<u8> {
    let mut buf = Vec::new();
    for i in 0..16 {
        let key = format!("key:{i:06}");
        encode::command(&mut buf, [&b"GET"[..], key.as_bytes()].into_iter());
        let val = vec![b'v'; 64];
        encode::command(&mut buf, [&b"SET"[..], key.as_bytes(), &val].into_iter());
    }
    buf
}

fn bench(c: &mut Criterion) {
    let buf = pipeline();
    let mut g = c.benchmark_group("parse_pipeline_32");
    g.throughput(Throughput::Elements(32));

    g.bench_function(BenchmarkId::new("respite", "RequestParser"), |b| {
        let mut p = RequestParser::default();
        let mut args = Vec::with_capacity(8);
        let mut scratch = Vec::new();
        b.iter(|| {
            let mut off = 0;
            let mut n = 0usize;
            while off < buf.len() {
                match p.parse(black_box(&buf[off..]), &mut args, &mut scratch) {
                    Ok(Parsed::Resp { consumed }) => {
                        n += args.len();
                        off += consumed;
                    }
                    _ => break,
                }
            }
            n
        })
    });

    g.bench_function(BenchmarkId::new("redis-protocol", "decode (owned)"), |b| {
        b.iter(|| {
            let mut off = 0;
            let mut n = 0usize;
            while let Ok(Some((f, used))) =
                redis_protocol::resp2::decode::decode(black_box(&buf[off..]))
            {
                n += usize::from(!matches!(f, redis_protocol::resp2::types::OwnedFrame::Null));
                off += used;
            }
            n
        })
    });

    let bytes = Bytes::from(buf.clone());
    g.bench_function(BenchmarkId::new("redis-protocol", "decode_bytes"), |b| {
        b.iter(|| {
            let mut off = 0;
            let mut n = 0usize;
            while off < bytes.len() {
                match redis_protocol::resp2::decode::decode_bytes(black_box(&bytes.slice(off..))) {
                    Ok(Some((_f, used))) => {
                        n += 1;
                        off += used;
                    }
                    _ => break,
                }
            }
            n
        })
    });

    g.bench_function(BenchmarkId::new("redis-protocol", "decode_range"), |b| {
        b.iter(|| {
            let mut off = 0;
            let mut n = 0usize;
            while let Ok(Some((_f, used))) =
                redis_protocol::resp2::decode::decode_range(black_box(&buf[off..]))
            {
                n += 1;
                off += used;
            }
            n
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
