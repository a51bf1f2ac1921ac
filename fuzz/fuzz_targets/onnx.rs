//! Fuzz target: any bytes as an ONNX model file (`load_onnx`), decoded by
//! `tfc::io::onnx::read::decode_model` and, when that succeeds, its
//! signature and initializers converted as `load_onnx` converts them. A
//! panic, a hang or an allocation beyond libFuzzer's limit
//! (`-rss_limit_mb`, 2 GB by default) is a failure; an error is the
//! expected answer to a damaged file, and it must not be an internal error.
//!
//! Run: `cd fuzz && cargo fuzz run onnx -- -runs=1000000`
#![no_main]

use libfuzzer_sys::fuzz_target;
use tfc::diag::{Code, Span};
use tfc::io::onnx::{import, read};

fuzz_target!(|data: &[u8]| {
    match read::decode_model(data) {
        Ok(model) => {
            let checked = import::check_opsets(&model, Span::default())
                .and_then(|_| import::signature(&model, Span::default()));
            if let Err(d) = checked {
                assert!(d.code != Code::Internal, "internal error: {d:?}");
            }
        }
        Err(d) => assert!(d.code != Code::Internal, "internal error: {d:?}"),
    }
});
