//! ONNX's own node test suite through tfc's importer: the `onnx` package's
//! `collect_testcases()` (about 1,900 cases, each a one-operator model with
//! inputs and the outputs ONNX's reference implementation computes) is
//! written to a scratch directory by `tests/support/onnx_node_cases.py`,
//! and every case is imported in process (`io::onnx::import`, what
//! `load_onnx` runs) and evaluated by the reference interpreter.
//!
//! A case passes when every output has the expected dtype and shape and
//! its elements agree within a tolerance for the dtype (or the case's own,
//! if looser); it is unsupported when tfc refuses it with E0343 naming the
//! operator or attribute; anything else — another error, a wrong value —
//! fails the test. Inputs that an operator needs while checking (a
//! `Reshape`'s shape) are bound as constants, as an initializer would be.
//! Without Python the test is skipped locally (required under CI=true).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use tfc::diag::{Code, Diagnostic, Span};
use tfc::io::onnx::import::{self, Val};
use tfc::io::onnx::model::TensorProto;
use tfc::io::onnx::read::{decode_model, decode_tensor};
use tfc::ir::{DType, Graph, Op};
use tfc::tensor::Tensor;

enum Outcome {
    Passed,
    Unsupported(String),
    Failed(String),
}

fn read_tensor(path: &Path) -> Result<Tensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let proto: TensorProto = decode_tensor(&bytes).map_err(|d| d.message)?;
    proto.to_tensor()
}

/// Relative and absolute tolerance for a dtype.
fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-7, 1e-10),
        DType::F32 => (1e-4, 1e-5),
        DType::F16 => (1e-2, 1e-3),
        DType::BF16 => (2e-2, 1e-2),
        _ => (0.0, 0.0),
    }
}

fn compare(got: &Tensor, want: &Tensor, case_tol: (f64, f64)) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {} {:?}, expected {} {:?}", got.dtype(), got.shape(), want.dtype(), want.shape()));
    }
    let (rtol, atol) = tolerance(want.dtype());
    let (rtol, atol) = if want.dtype().is_float() { (rtol.max(case_tol.0), atol.max(case_tol.1)) } else { (0.0, 0.0) };
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let same = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= atol + rtol * b.abs();
        if !same {
            return Err(format!("element {i}: got {a}, expected {b}"));
        }
    }
    Ok(())
}

fn refused(d: Diagnostic) -> Outcome {
    if d.code == Code::OnnxUnsupported {
        Outcome::Unsupported(d.message)
    } else {
        Outcome::Failed(format!("{}: {}", d.code.as_str(), d.message))
    }
}

fn run_case(dir: &Path) -> Outcome {
    let span = Span::default();
    let bytes = match std::fs::read(dir.join("model.onnx")) {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let model = match decode_model(&bytes) {
        Ok(m) => m,
        Err(d) => return Outcome::Failed(d.message),
    };
    let sig = match import::check_opsets(&model, span).and_then(|_| import::signature(&model, span)) {
        Ok(s) => s,
        Err(d) => return refused(d),
    };
    let case_tol: (f64, f64) = std::fs::read_to_string(dir.join("tolerance"))
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<f64>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((0.0, 0.0));
    let known = import::read_while_checking(&model);
    let mut sets: Vec<_> = std::fs::read_dir(dir).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    sets.retain(|p: &std::path::PathBuf| p.is_dir());
    sets.sort();
    if sets.is_empty() {
        return Outcome::Failed("no data sets".into());
    }
    for set in sets {
        if set.join("not_tensors").exists() {
            return Outcome::Failed("a data set holds values that are not tensors, but the model was accepted".into());
        }
        let mut g = Graph::new();
        let mut bound = rustc_hash::FxHashMap::default();
        let bind = |g: &mut Graph, t: Tensor, known: bool| {
            let ty = t.ty();
            let id = g.add(Op::Constant { value: t.to_literal(), ty: ty.clone() }, &[], ty.clone(), span);
            Val { id, ty, known: known.then(|| std::rc::Rc::new(t)) }
        };
        for (name, t) in &sig.initializers {
            bound.insert(name.clone(), bind(&mut g, t.clone(), !import::is_parameter(name, t, &known)));
        }
        for (i, input) in sig.inputs.iter().enumerate() {
            let t = match read_tensor(&set.join(format!("input_{i}.pb"))) {
                Ok(t) => t,
                Err(e) => return Outcome::Failed(format!("input {i}: {e}")),
            };
            bound.insert(input.name.clone(), bind(&mut g, t, known.contains(&input.name)));
        }
        let outs = match import::import(&model, &mut g, &bound, span) {
            Ok(o) => o,
            Err(d) => return refused(d),
        };
        let values = match tfc::tensor::evaluate(&g) {
            Ok(v) => v,
            Err(d) => return Outcome::Failed(format!("run: {}: {}", d.code.as_str(), d.message)),
        };
        for (k, out) in outs.iter().enumerate() {
            let want = match read_tensor(&set.join(format!("output_{k}.pb"))) {
                Ok(t) => t,
                Err(e) => return Outcome::Failed(format!("expected output {k}: {e}")),
            };
            if let Err(e) = compare(&values[&out.id], &want, case_tol) {
                return Outcome::Failed(format!("{}: output {k}: {e}", set.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    Outcome::Passed
}

#[test]
fn onnx_node_suite() {
    let Some(python) = support::test_python() else { return };
    let dir = support::scratch("onnx-node-suite");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/onnx_node_cases.py");
    let out = std::process::Command::new(&python).arg(&script).arg(&*dir).output().expect("run the case writer");
    assert!(out.status.success(), "the case writer failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let mut cases: Vec<_> = std::fs::read_dir(&*dir).unwrap().flatten().map(|e| e.path()).collect();
    cases.sort();
    assert!(cases.len() > 1000, "only {} cases were written", cases.len());
    let (mut passed, mut failed, mut unsupported) = (Vec::new(), Vec::new(), Vec::new());
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        match run_case(case) {
            Outcome::Passed => passed.push(name),
            Outcome::Unsupported(why) => {
                // "cannot import ONNX node 0 (Foo): why" → the operator and why.
                let op = why.split(['(', ')']).nth(1).unwrap_or("").rsplit(", ").next().unwrap_or("").to_string();
                *reasons.entry(op).or_default() += 1;
                unsupported.push(name)
            }
            Outcome::Failed(why) => failed.push(format!("{name}: {why}")),
        }
    }
    println!(
        "ONNX node suite: {} cases: {} passed, {} failed, {} unsupported",
        cases.len(),
        passed.len(),
        failed.len(),
        unsupported.len()
    );
    println!("unsupported, by operator: {reasons:?}");
    for f in &failed {
        println!("FAILED {f}");
    }
    if let Ok(path) = std::env::var("TFC_ONNX_SUITE_REPORT") {
        let text = format!(
            "passed {}\nfailed {}\nunsupported {}\n{}\n",
            passed.len(),
            failed.len(),
            unsupported.len(),
            passed.join("\n")
        );
        std::fs::write(path, text).expect("write the report");
    }
    assert!(failed.is_empty(), "{} node tests failed (listed above)", failed.len());
    assert!(passed.len() >= 900, "only {} node tests passed", passed.len());
}
