//! Command lookup: the hash index `command::lookup` uses against the binary search over sorted
//! names it replaced (bench/NOTES.md), on a mix of common names in client casing.
// A benchmark, off the request path: it may index and unwrap.
#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use respite::command::{COMMANDS, lookup};

const NAMES: [&[u8]; 8] = [
    b"GET",
    b"SET",
    b"mget",
    b"HGETALL",
    b"zrangebyscore",
    b"Expire",
    b"EVALSHA",
    b"nosuch",
];

/// The replaced lookup: lowercase into a stack buffer, binary search over the sorted names.
fn binary_search_lookup(sorted: &[&'static str], name: &[u8]) -> Option<&'static str> {
    let mut buf = [0u8; 32];
    let lower = buf.get_mut(..name.len())?;
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let lower = &*lower;
    sorted
        .binary_search_by(|n| n.as_bytes().cmp(lower))
        .ok()
        .and_then(|i| sorted.get(i).copied())
}

fn bench(c: &mut Criterion) {
    let mut sorted: Vec<&'static str> = COMMANDS.iter().map(|c| c.name).collect();
    sorted.sort_unstable();
    let mut g = c.benchmark_group("command_lookup_8_names");
    g.throughput(Throughput::Elements(NAMES.len() as u64));
    g.bench_function(BenchmarkId::new("respite", "hash index"), |b| {
        b.iter(|| {
            for n in NAMES {
                black_box(lookup(black_box(n)));
            }
        })
    });
    g.bench_function(BenchmarkId::new("baseline", "binary search"), |b| {
        b.iter(|| {
            for n in NAMES {
                black_box(binary_search_lookup(&sorted, black_box(n)));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
