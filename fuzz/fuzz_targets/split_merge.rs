//! libFuzzer target: see `respite_fuzz::split_merge` for the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| respite_fuzz::split_merge(data));
