//! libFuzzer target: see `respite_fuzz::request_parser` for the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| respite_fuzz::request_parser(data));
