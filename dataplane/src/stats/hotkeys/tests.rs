use super::*;

/// `n` draws of a Zipf(`s`) distribution over keys `key:0 .. key:(keys-1)` (key:0 the most
/// likely), deterministic for `seed`.
fn zipf(n: usize, keys: usize, s: f64, seed: u64) -> Vec<Vec<u8>> {
    let weights: Vec<f64> = (1..=keys).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(keys);
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cdf.push(acc);
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n)
        .map(|_| {
            let u = rng.f64();
            let k = cdf.partition_point(|&c| c < u).min(keys - 1);
            format!("key:{k}").into_bytes()
        })
        .collect()
}

fn true_counts(stream: &[Vec<u8>]) -> HashMap<Vec<u8>, u64> {
    let mut m = HashMap::new();
    for k in stream {
        *m.entry(k.clone()).or_default() += 1;
    }
    m
}

fn sorted_top(counts: impl IntoIterator<Item = (Vec<u8>, u64)>, k: usize) -> Vec<(Vec<u8>, u64)> {
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

#[test]
fn exact_while_every_key_fits() {
    let mut s = SpaceSaving::new(4);
    for k in [&b"a"[..], b"b", b"a", b"c", b"a", b"b"] {
        s.record(k);
    }
    assert_eq!(
        (s.get(b"a"), s.get(b"b"), s.get(b"c"), s.get(b"d")),
        (3, 2, 1, 0)
    );
    assert!(s.iter().all(|(_, _, err)| err == 0));
    assert_eq!(s.total(), 6);
}

#[test]
fn a_new_key_replaces_the_least_counted_one() {
    let mut s = SpaceSaving::new(2);
    for k in [&b"a"[..], b"a", b"a", b"b", b"c"] {
        s.record(k);
    }
    // "b" (count 1) was the minimum: "c" takes its place with count 2, error 1.
    assert_eq!(s.get(b"b"), 0);
    let c: Vec<_> = s.iter().filter(|(k, _, _)| *k == b"c").collect();
    assert_eq!(c, vec![(&b"c"[..], 2, 1)]);
    assert_eq!(s.get(b"a"), 3);
}

#[test]
fn zipf_top_10_is_the_true_top_10_with_bounded_error() {
    let stream = zipf(20_000, 1_000, 1.1, 42);
    let truth = true_counts(&stream);
    let mut s = SpaceSaving::new(capacity_for(10));
    for k in &stream {
        s.record(k);
    }
    let bound = stream.len() as u64 / s.capacity() as u64;
    for (k, count, err) in s.iter() {
        let t = truth.get(k).copied().unwrap_or(0);
        // Space-Saving's guarantee (Metwally et al., Lemma 3.4): count - error <= true <= count.
        assert!(
            count - err <= t && t <= count,
            "{k:?}: {count} ({err}) vs {t}"
        );
        assert!(err <= bound, "{err} > {bound}");
    }
    let reported = sorted_top(s.iter().map(|(k, c, _)| (k.to_vec(), c)), 10);
    let expected = sorted_top(truth.clone(), 10);
    let keys = |v: &[(Vec<u8>, u64)]| v.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&reported), keys(&expected));
    // The hottest keys are never evicted, so their counts are exact.
    assert_eq!(reported[..5], expected[..5]);
}

#[test]
fn every_key_above_n_over_capacity_is_tracked() {
    // Adversarial order: many one-off keys between the frequent ones.
    let mut s = SpaceSaving::new(64);
    let mut n = 0u64;
    for i in 0..10_000u32 {
        let k = format!("noise:{i}");
        s.record(k.as_bytes());
        n += 1;
        if i % 40 == 0 {
            s.record(b"frequent");
            n += 1;
        }
    }
    // "frequent" was seen 250 times > n / 64 ≈ 160.
    assert!(n / 64 < 250);
    let c = s.get(b"frequent");
    assert!(c >= 250, "{c}");
}

#[test]
fn long_keys_are_tracked_by_their_prefix() {
    let mut s = SpaceSaving::new(8);
    let mut a = vec![b'x'; MAX_TRACKED_KEY + 10];
    s.record(&a);
    a[MAX_TRACKED_KEY + 5] = b'y';
    s.record(&a);
    assert_eq!(s.get(&a), 2);
    assert!(s.iter().all(|(k, _, _)| k.len() == MAX_TRACKED_KEY));
}

#[test]
fn the_window_covers_between_half_and_all_of_it() {
    let t0 = Instant::now();
    let w = Duration::from_secs(10);
    let mut top = SlidingTopK::new(64, w, t0);
    let mut out = Vec::new();
    top.record(b"old");
    assert!(!top.rotate(t0 + Duration::from_secs(4)));
    assert!(top.rotate(t0 + Duration::from_secs(5)));
    top.record(b"new");
    top.record(b"old");
    top.merged_into(&mut out);
    out.sort();
    assert_eq!(out, vec![(b"new".to_vec(), 1), (b"old".to_vec(), 2)]);
    // 10 s after start: the first half-window's request is gone, the second's remain.
    assert!(top.rotate(t0 + Duration::from_secs(10)));
    top.merged_into(&mut out);
    out.sort();
    assert_eq!(out, vec![(b"new".to_vec(), 1), (b"old".to_vec(), 1)]);
    // A whole window without rotation (idle worker): nothing is left.
    assert!(top.rotate(t0 + Duration::from_secs(30)));
    top.merged_into(&mut out);
    assert!(out.is_empty());
}

fn big(key: &str, unix_ms: u64) -> BigValue {
    BigValue {
        key: key.as_bytes().to_vec(),
        command: "set".into(),
        bytes: 2048,
        direction: "request",
        unix_ms,
    }
}

#[test]
fn store_merges_workers_and_keeps_top_k() {
    let store = crate::stats::Store::new();
    let hk = Some((2, Duration::from_secs(60)));
    // Two workers are two threads; two prefixes stand in for them here (one per thread).
    let w0 = LocalHotKeys::for_listener("p", || store.hot_keys_shard("p", 0), hk, true);
    for k in ["a", "a", "b", "c", "c", "c"] {
        w0.record_key(k.as_bytes());
    }
    w0.record_big(big("x", 1), Instant::now());
    assert!(store.hot_keys().iter().all(|r| r.top.is_empty()));
    flush_thread(false);
    let std::thread::Result::Ok(()) = std::thread::scope(|s| {
        s.spawn(|| {
            let w1 = LocalHotKeys::for_listener("p", || store.hot_keys_shard("p", 1), hk, true);
            for k in ["b", "b", "b", "a"] {
                w1.record_key(k.as_bytes());
            }
            w1.record_big(big("y", 2), Instant::now());
            flush_thread(true);
            // Dropping w1 here would unpublish it; keep it until the report is read.
            std::mem::forget(w1);
        })
        .join()
    }) else {
        panic!("worker thread");
    };
    let r = store.hot_keys();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].stat_prefix, "p");
    assert_eq!(r[0].window, Duration::from_secs(60));
    // a: 3, b: 4, c: 3 → top 2 = b, then a (ties by key).
    assert_eq!(r[0].top, vec![(b"b".to_vec(), 4), (b"a".to_vec(), 3)]);
    let bv: Vec<_> = r[0].big_values.iter().map(|b| b.key.clone()).collect();
    assert_eq!(bv, vec![b"y".to_vec(), b"x".to_vec()]);
    // Turning both off (the recorder dropped) removes the listener from the report.
    drop(w0);
    let r = store.hot_keys();
    assert_eq!(r.len(), 1, "worker 1's shard is still published");
}

#[test]
fn a_contended_shard_waits_for_the_next_tick_and_reconfigure_keeps_counts() {
    let store = crate::stats::Store::new();
    let hk = Some((10, Duration::from_secs(60)));
    let local = LocalHotKeys::for_listener("q", || store.hot_keys_shard("q", 0), hk, false);
    local.record_key(b"k");
    {
        let shard = store.hot_keys_shard("q", 0);
        let _reader = shard.published.lock().unwrap();
        assert!(!local.publish(false, Instant::now()));
    }
    assert!(local.publish(false, Instant::now()));
    // A reload with the same settings finds the same recorder and keeps its counts.
    let again = LocalHotKeys::for_listener("q", || unreachable!(), hk, false);
    assert!(Rc::ptr_eq(&local, &again));
    again.record_key(b"k");
    flush_thread(false);
    assert_eq!(store.hot_keys()[0].top, vec![(b"k".to_vec(), 2)]);
    drop((local, again));
    assert!(store.hot_keys().is_empty());
}

#[test]
fn big_value_ring_is_bounded_newest_first() {
    let store = crate::stats::Store::new();
    let local = LocalHotKeys::for_listener("r", || store.hot_keys_shard("r", 0), None, true);
    let now = Instant::now();
    for i in 0..(BIG_VALUES_KEPT as u64 + 5) {
        local.record_big(big(&format!("k{i}"), i), now);
    }
    flush_thread(false);
    let r = store.hot_keys();
    assert_eq!(r[0].window, Duration::ZERO);
    assert!(r[0].top.is_empty());
    assert_eq!(r[0].big_values.len(), BIG_VALUES_KEPT);
    assert_eq!(r[0].big_values[0].unix_ms, BIG_VALUES_KEPT as u64 + 4);
    assert_eq!(local.state.borrow().suppressed, BIG_VALUES_KEPT as u64 + 4);
}

#[test]
fn keys_are_escaped_and_cut() {
    assert_eq!(escape_key(b"plain:1", 100), "plain:1");
    assert_eq!(
        escape_key(b"a\"b\\c\n\x00\xff", 100),
        "a\\\"b\\\\c\\n\\x00\\xff"
    );
    assert_eq!(escape_key(b"abcdef", 3), "abc...");
}
