//! libFuzzer target: see `respite_fuzz::inline` for the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| respite_fuzz::inline(data));
