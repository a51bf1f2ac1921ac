//! Fuzz target: any bytes as a TFRecord shard of `tf.train.Example`s (`load_tfrecord`), decoded
//! whole by `tfc::io::loaders::decode_bytes` and record by record as a
//! streamed shard is (`decode_streamed_tfrecord`); the two must agree. A panic, a hang or an
//! allocation beyond libFuzzer's limit (`-rss_limit_mb`, 2 GB by default)
//! is a failure; an error is the expected answer to a damaged file, and it
//! must not be an internal error.
//!
//! Run: `cd fuzz && cargo fuzz run tfrecord -- -runs=1000000`
#![no_main]

use libfuzzer_sys::fuzz_target;
use tfc::ir::plan::FileFormat;

fuzz_target!(|data: &[u8]| {
    let whole = tfc::io::loaders::decode_bytes(FileFormat::TfRecord, data);
    // The streaming reader (record index, then record by record) must
    // agree with the whole-file one: the same tensors, or both an error.
    let streamed = tfc::io::loaders::decode_streamed_tfrecord(data);
    match (&whole, &streamed) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the streamed records differ"),
        (Err(_), Err(_)) => {}
        _ => panic!("whole {:?} but streamed {:?}", whole.as_ref().err(), streamed.as_ref().err()),
    }
    for d in [whole.err(), streamed.err()].into_iter().flatten() {
        assert!(d.code != tfc::diag::Code::Internal, "internal error: {d:?}");
    }
});
