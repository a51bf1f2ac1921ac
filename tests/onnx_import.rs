//! `load_onnx(path)`: models tfc exported (`tfc build FILE --emit onnx`)
//! loaded back reproduce the exporting program's outputs, an imported
//! model fine-tunes (its initializers are parameters: a few training steps
//! lower the loss, and `save`/`load` carry the tuned values), and bad
//! files, unsupported operators and wrong arguments are diagnostics.
//! ONNX's own node tests are in tests/onnx_node_suite.rs.

mod support;

use std::path::Path;
use std::process::Command;
use support::{fails, ok, put, scratch, values};
use tfc::io::proto::Message;

fn inputs(dir: &Path, shape: &[usize]) {
    let n: usize = shape.iter().product();
    let x: Vec<u8> = values(n, 1).iter().flat_map(|v| v.to_le_bytes()).collect();
    put(dir, "x.npy", &support::npy("<f4", shape, false, &x));
    let y: Vec<u8> = values(shape[0], 2).iter().flat_map(|v| (((v + 1.0) * 5.0) as i32).min(9).to_le_bytes()).collect();
    put(dir, "y.npy", &support::npy("<i4", &shape[..1], false, &y));
}

/// `tfc build main.tfl --emit onnx -o model.onnx` in `dir`; its stdout.
fn export(dir: &Path, program: &str) -> String {
    put(dir, "main.tfl", program.as_bytes());
    let out = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .current_dir(dir)
        .args(["build", "main.tfl", "--emit", "onnx", "-o", "model.onnx"])
        .env("NO_COLOR", "1")
        .output()
        .expect("run tfc");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The numbers of printed output, in order.
fn numbers(text: &str) -> Vec<f64> {
    text.split(|c: char| !(c.is_ascii_digit() || "-.eE".contains(c))).filter_map(|w| w.parse::<f64>().ok()).collect()
}

fn assert_close(got: &str, want: &str, tol: f64) {
    let (g, w) = (numbers(got), numbers(want));
    assert_eq!(g.len(), w.len(), "got:\n{got}\nwant:\n{want}");
    for (a, b) in g.iter().zip(&w) {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{a} vs {b}\ngot:\n{got}\nwant:\n{want}");
    }
}

#[test]
fn an_exported_mlp_loads_back_and_fine_tunes() {
    let dir = scratch("onnx-import-mlp");
    inputs(&dir, &[16, 784]);
    let exported = export(
        &dir,
        &support::trained_mlp(
            1,
            "export fn logits(x: f32[B, 784]) -> f32[B, 10] = net(x)\nprint(logits(x), full = true)\n",
        ),
    );
    let program = r#"
use std.loss.{softmax_cross_entropy}
use std.optim.{adam}
let net = load_onnx("model.onnx")
let x = collect(load_npy("x.npy"))
let y = collect(load_npy("y.npy"))
print(net(x), full = true)
print(net(x[0:3]) |> shape)
print(mean(softmax_cross_entropy(net(x), y)))
train net on from_tensors(x, y) |> batch(8) {
    loss(x, y) = softmax_cross_entropy(net(x), y)
    optimizer = adam(lr = 1e-2)
    epochs = 3
}
print(mean(softmax_cross_entropy(net(x), y)))
save(net, "tuned.safetensors")
let again = load_onnx("model.onnx")
load(again, "tuned.safetensors")
print(mean(softmax_cross_entropy(again(x), y)))
"#;
    let out = ok(&dir, program);
    let lines: Vec<&str> = out.lines().collect();
    // The batch size stays open: 16 rows and 3 rows.
    assert_close(lines[0], exported.trim(), 1e-6);
    assert_eq!(lines[1], "(3, 10)", "{out}");
    let loss = |l: &str| numbers(l).last().copied().unwrap_or(f64::NAN);
    let (before, after, reloaded) = (loss(lines[2]), loss(lines[3]), loss(lines[4]));
    assert!(after < before * 0.5, "fine-tuning did not lower the loss: {before} → {after}");
    assert_eq!(after, reloaded, "the checkpoint did not carry the tuned parameters");
}

#[test]
fn an_exported_cnn_loads_back_with_its_outputs() {
    let dir = scratch("onnx-import-cnn");
    inputs(&dir, &[4, 12, 12, 1]);
    let program = r#"
use std.nn.{Conv2d, BatchNorm, Flatten, Dense}
model CNN {
    c1 = Conv2d(1, 4, kernel = 3)
    bn = BatchNorm(4)
    c2 = Conv2d(4, 4, kernel = 3, stride = 2, padding = "valid")
    fc = Dense(4, 10)
    fn forward(x) {
        let h = max_pool2d(relu(bn(c1(x))), 2)
        fc(Flatten()(avg_pool2d(relu(c2(h)), 2, padding = "same")))
    }
}
let net = CNN()
let x = collect(load_npy("x.npy"))
export fn predict(x: f32[N, 12, 12, 1]) = (net(x), argmax(net(x), axis = 1))
let (logits, classes) = predict(x)
print(logits, full = true)
print(classes, full = true)
"#;
    let exported = export(&dir, program);
    let back = "let net = load_onnx(\"model.onnx\")\nlet (logits, classes) = net(collect(load_npy(\"x.npy\")))\n\
                print(logits, full = true)\nprint(classes, full = true)\n";
    let out = ok(&dir, back);
    assert_close(&out, &exported, 1e-5);
    assert!(out.lines().nth(1).is_some_and(|l| l.starts_with("i32[4]")), "{out}");
}

/// A one-node model: `op` over input `x: f32[2, 3]`, output `y`.
fn one_node(op: &str, opset: i64) -> Vec<u8> {
    let dims = [2, 3].map(|d| Message::new().int(1, d));
    let shape = Message::new().message(1, &dims[0]).message(1, &dims[1]);
    let ty = Message::new().message(1, &Message::new().int(1, 1).message(2, &shape));
    let x = Message::new().text(1, "x").message(2, &ty);
    let y = Message::new().text(1, "y").message(2, &ty);
    let node = Message::new().text(1, "x").text(2, "y").text(3, "the_node").text(4, op);
    let graph = Message::new().message(1, &node).text(2, "g").message(11, &x).message(12, &y);
    let opset = Message::new().text(1, "").int(2, opset);
    Message::new().int(1, 8).message(7, &graph).message(8, &opset).into_bytes()
}

#[test]
fn bad_files_and_unsupported_models_are_diagnostics() {
    let dir = scratch("onnx-import-bad");
    put(&dir, "relu.onnx", &one_node("Relu", 17));
    let out = ok(&dir, "let m = load_onnx(\"relu.onnx\")\nprint(m([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]]))\n");
    assert_eq!(out.trim(), "f32[2, 3] [[0, 2, 0], [4, 0, 6]]");
    let call = |file: &str| format!("let m = load_onnx(\"{file}\")\nprint(m(ones([2, 3])))\n");
    put(&dir, "einsum.onnx", &one_node("Einsum", 17));
    fails(&dir, &call("einsum.onnx"), &["E0343", "node 0 (`the_node`, Einsum)", "operator `Einsum` is not supported"]);
    put(&dir, "old.onnx", &one_node("Relu", 5));
    fails(&dir, &call("old.onnx"), &["E0343", "opset 5", "opsets 7 to 28"]);
    let bytes = one_node("Relu", 17);
    put(&dir, "cut.onnx", &bytes[..bytes.len() - 9]);
    fails(&dir, &call("cut.onnx"), &["E0342", "does not parse as ONNX"]);
    put(&dir, "junk.onnx", b"not a model at all");
    fails(&dir, &call("junk.onnx"), &["E0342"]);
    fails(&dir, &call("missing.onnx"), &["E0001", "missing.onnx"]);
    fails(&dir, "let m = load_onnx(\"relu.onnx\")\nprint(m(ones([3, 2])))\n", &["E0308", "f32[2, 3]", "f32[3, 2]"]);
    fails(
        &dir,
        "let m = load_onnx(\"relu.onnx\")\nprint(m(ones([2, 3]), ones([2, 3])))\n",
        &["E0206", "takes 1 inputs"],
    );
}
