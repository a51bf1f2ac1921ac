//! Fuzz target: any bytes as a TFRecord shard of `tf.train.Example`s (`load_tfrecord`), decoded
//! whole by `tfc::io::loaders::decode_bytes`. A panic, a hang or an
//! allocation beyond libFuzzer's limit (`-rss_limit_mb`, 2 GB by default)
//! is a failure; an error is the expected answer to a damaged file, and it
//! must not be an internal error.
//!
//! Run: `cd fuzz && cargo fuzz run tfrecord -- -runs=1000000`
#![no_main]

use libfuzzer_sys::fuzz_target;
use tfc::ir::plan::FileFormat;

fuzz_target!(|data: &[u8]| {
    if let Err(d) = tfc::io::loaders::decode_bytes(FileFormat::TfRecord, data) {
        assert!(d.code != tfc::diag::Code::Internal, "internal error: {d:?}");
    }
});
