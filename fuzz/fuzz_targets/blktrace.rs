//! libFuzzer target: [`iosched_trace::untrusted::blktrace`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| iosched_trace::untrusted::blktrace(data));
