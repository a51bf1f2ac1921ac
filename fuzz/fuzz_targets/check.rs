//! Fuzz target: any bytes through the whole front end (UTF-8 decoding,
//! parse, resolve, trace with shape checks). Only a panic or an internal
//! error counts as a failure.
//!
//! Run: `cd fuzz && cargo fuzz run check -- -max_total_time=300`
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut session = tfc::driver::Session::new();
    let file = session.add_source("fuzz.tfl", text);
    if let Err(diags) = session.check(file) {
        assert!(
            diags.iter().all(|d| d.code != tfc::diag::Code::Internal),
            "internal error: {diags:?}"
        );
    }
});
