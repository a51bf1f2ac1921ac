//! `load_tfrecord`: TFRecord shards of `tf.train.Example`s as a dataset —
//! the shapes from the first record, shards read in name order, and every
//! damaged or mismatched file a clear E0001 before training starts.

mod support;

use support::{fails, ok, put, scratch, tfrecord, Feature};

/// Examples `from..to` of a small regression set: `x` = [i, 2i, 3i] / 10,
/// `y` = i mod 3.
fn examples(from: usize, to: usize) -> Vec<Vec<(&'static str, Feature)>> {
    (from..to)
        .map(|i| {
            let x = (1..=3).map(|k| (i * k) as f32 / 10.0).collect();
            vec![("x", Feature::Floats(x)), ("y", Feature::Ints(vec![(i % 3) as i64]))]
        })
        .collect()
}

#[test]
fn shards_read_in_name_order_give_the_examples_with_their_shapes() {
    let dir = scratch("tfrecord-shards");
    put(&dir, "train-00001.tfrecord", &tfrecord(&examples(3, 5)));
    put(&dir, "train-00000.tfrecord", &tfrecord(&examples(0, 3)));
    let out = ok(
        &dir,
        r#"let data = load_tfrecord("train-*.tfrecord", "x", "y")
print(count(data))
let (x, y) = collect(data)
print(x)
print(y)
"#,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "5");
    assert!(out.contains("f32[5, 3]"), "{out}");
    assert!(out.contains("[0.4, 0.8, 1.2]") || out.contains("[0.4, 0.8, 1.2000"), "{out}");
    assert!(out.contains("i32[5] [0, 1, 2, 0, 1]"), "{out}");
}

#[test]
fn a_model_trains_on_tfrecord_shards_as_on_the_same_tensors() {
    let dir = scratch("tfrecord-train");
    put(&dir, "a.tfrecord", &tfrecord(&examples(0, 16)));
    put(&dir, "b.tfrecord", &tfrecord(&examples(16, 32)));
    let program = |data: &str| {
        format!(
            r#"use std.nn.{{Dense}}
use std.loss.mse
use std.optim.sgd
model Net {{
    l = Dense(3, 1)
    fn forward(x) = l(x)
}}
let net = Net(seed = 3)
{data}
train net on ds |> batch(8) {{
    loss(x, y) = mse(net(x)[:, 0], cast(y, f32))
    optimizer = sgd(lr = 0.05)
    epochs = 3
}}
print(net.l.w)
"#
        )
    };
    let from_files = ok(&dir, &program(r#"let ds = load_tfrecord(("a.tfrecord", "b.tfrecord"), "x", "y")"#));
    let (x, y): (Vec<f32>, Vec<i32>) =
        ((0..32).flat_map(|i| (1..=3).map(move |k| (i * k) as f32 / 10.0)).collect(), (0..32).map(|i| i % 3).collect());
    let tensors = format!(
        "let ds = from_tensors(reshape({x:?}, [32, 3]), {y:?})",
        x = x.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>(),
        y = y
    )
    .replace('"', "");
    let from_tensors = ok(&dir, &program(&tensors));
    assert_eq!(from_files, from_tensors);
}

#[test]
fn a_corrupted_record_names_the_file_and_record() {
    let dir = scratch("tfrecord-crc");
    let mut bytes = tfrecord(&examples(0, 4));
    let last = bytes.len() - 10;
    bytes[last] ^= 0x40;
    put(&dir, "bad.tfrecord", &bytes);
    fails(
        &dir,
        "let data = load_tfrecord(\"bad.tfrecord\")\nprint(collect(data))\n",
        &["E0001", "bad.tfrecord", "record 3", "CRC"],
    );
}

#[test]
fn a_truncated_shard_is_an_error() {
    let dir = scratch("tfrecord-truncated");
    let bytes = tfrecord(&examples(0, 4));
    put(&dir, "cut.tfrecord", &bytes[..bytes.len() - 7]);
    fails(&dir, "let data = load_tfrecord(\"cut.tfrecord\")\nprint(count(data))\n", &["E0001", "cut.tfrecord"]);
}

#[test]
fn a_pattern_that_matches_nothing_is_an_error() {
    let dir = scratch("tfrecord-glob");
    fails(
        &dir,
        "let data = load_tfrecord(\"shards/none-*.tfrecord\")\nprint(count(data))\n",
        &["E0001", "matches no file"],
    );
}

#[test]
fn an_unknown_feature_lists_the_features_there_are() {
    let dir = scratch("tfrecord-feature");
    put(&dir, "d.tfrecord", &tfrecord(&examples(0, 2)));
    fails(
        &dir,
        "let data = load_tfrecord(\"d.tfrecord\", \"image\")\nprint(count(data))\n",
        &["E0001", "image", "x", "y"],
    );
}

#[test]
fn a_record_whose_feature_changes_length_is_named() {
    let dir = scratch("tfrecord-ragged");
    let mut records = examples(0, 3);
    records[2][0].1 = Feature::Floats(vec![1.0, 2.0]);
    put(&dir, "r.tfrecord", &tfrecord(&records));
    fails(
        &dir,
        "let data = load_tfrecord(\"r.tfrecord\")\nprint(collect(data))\n",
        &["E0001", "r.tfrecord", "record 2", "x"],
    );
}
