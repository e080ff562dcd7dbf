//! The fuzz targets as bounded loops on stable Rust (no libFuzzer, no sanitizer, no coverage
//! feedback): each target runs over its seed corpus (`corpus/<target>/`) and then over inputs
//! mutated from the corpus and from RESP-shaped tokens by a fixed-seed RNG, for
//! `FUZZ_SECS` seconds (default 5) or `FUZZ_ITERS` inputs (default 5000000), whichever is first.
//! A failing input is written to `target/fuzz-failures/<target>-<n>` and its bytes printed.
//!
//!   cargo test --release --manifest-path fuzz/Cargo.toml
//!   FUZZ_SECS=60 cargo test --release --manifest-path fuzz/Cargo.toml -- request_parser

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// xorshift64*: small, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Pieces that make RESP-looking input likely (random bytes rarely do).
const TOKENS: &[&[u8]] = &[
    b"*",
    b"$",
    b"+",
    b"-",
    b":",
    b"_",
    b",",
    b"#",
    b"(",
    b"!",
    b"=",
    b"%",
    b"~",
    b">",
    b"|",
    b"\r\n",
    b"\n",
    b"\r",
    b"0",
    b"1",
    b"2",
    b"3",
    b"-1",
    b"-2",
    b"10",
    b"99999999999999999999",
    b"?",
    b";",
    b".",
    b"GET",
    b"SET",
    b"MGET",
    b"\"",
    b"'",
    b"\\x4",
    b"\\",
    b" ",
    b"\t",
    b"\0",
    b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
    b"$3\r\nabc\r\n",
    b"*1\r\n",
    b"\"a\\\"b\" 'c'",
];

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut v = if !seeds.is_empty() && rng.below(4) != 0 {
        seeds[rng.below(seeds.len())].clone()
    } else {
        Vec::new()
    };
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                v.splice(at..at, t.iter().copied());
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            2 if !v.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 => {
                let n = rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(at..at, bytes);
            }
            4 if !seeds.is_empty() => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                v.splice(at..at, other[from..].iter().copied());
            }
            _ => {
                for _ in 0..1 + rng.below(6) {
                    let t = TOKENS[rng.below(TOKENS.len())];
                    v.extend_from_slice(t);
                }
            }
        }
    }
    v.truncate(2048);
    v
}

fn budget() -> (Duration, usize) {
    let secs = std::env::var("FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let iters = std::env::var("FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000_000);
    (Duration::from_secs_f64(secs), iters)
}

fn run(target: &str, check: fn(&[u8])) {
    let seeds = corpus(target);
    assert!(!seeds.is_empty(), "no seed corpus in corpus/{target}/");
    let (time, iters) = budget();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ target.len() as u64);
    let start = Instant::now();
    let mut n = 0usize;
    let mut inputs = seeds.clone().into_iter();
    loop {
        let input = match inputs.next() {
            Some(s) => s,
            None if n >= iters || start.elapsed() >= time => break,
            None => mutate(&mut rng, &seeds),
        };
        n += 1;
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(&input))) {
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{target}-{n}"));
            let _ = std::fs::write(&path, &input);
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "{target}: input #{n} failed ({msg}); saved to {}; bytes: {:?}",
                path.display(),
                String::from_utf8_lossy(&input)
            );
        }
    }
    println!("{target}: {n} inputs in {:?}", start.elapsed());
}

#[test]
fn request_parser() {
    run("request_parser", respite_fuzz::request_parser);
}

#[test]
fn inline() {
    run("inline", respite_fuzz::inline);
}

#[test]
fn reply_scanner() {
    run("reply_scanner", respite_fuzz::reply_scanner);
}

#[test]
fn split_merge() {
    run("split_merge", respite_fuzz::split_merge);
}
