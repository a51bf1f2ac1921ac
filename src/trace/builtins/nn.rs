//! Linear algebra and neural-network built-ins: `matmul (@)`, `conv2d`,
//! `max_pool2d`, `avg_pool2d`, `one_hot`, `gather`, `embedding`, `dropout`,
//! and sampling a class from logits, `categorical`.

use super::tensor;
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{BinaryOp, DType, Distribution, Op, Patches, PoolKind, TensorType};
use crate::trace::args::BuiltinArgs;
use crate::trace::value::Value;
use crate::trace::{TResult, Tracer};

impl Tracer<'_> {
    /// `a @ b` with NumPy's matmul rules: vectors are promoted (and the
    /// added axis dropped again), leading batch dimensions broadcast.
    pub(crate) fn matmul(&mut self, a: (&Value, Span), b: (&Value, Span), span: Span) -> TResult<Value> {
        let ops = self.operands(&[a, b])?;
        self.observe_for_calibration(&ops[0], &ops[1], None);
        if let Some(product) = self.quantized_product(&ops[0], &ops[1], None, span)? {
            return Ok(tensor(product));
        }
        let (mut x, mut w) = (ops[0].clone(), ops[1].clone());
        self.same_dtype(&ops, "`@`", span)?;
        if x.ty.rank() == 0 || w.ty.rank() == 0 {
            return Err(Diagnostic::new(
                Code::MatmulShape,
                format!("`@` needs tensors of rank ≥ 1: {} @ {}", x.ty, w.ty),
            )
            .label(span, "needs rank ≥ 1")
            .label(x.span, x.ty.to_string())
            .label(w.span, w.ty.to_string())
            .help("use `*` to multiply by a scalar")
            .into());
        }
        let (xv, wv) = (x.ty.rank() == 1, w.ty.rank() == 1);
        if xv {
            x = self.reshape(&x, vec![1, x.ty.shape[0]], x.span)?;
        }
        if wv {
            w = self.reshape(&w, vec![w.ty.shape[0], 1], w.span)?;
        }
        let (rx, rw) = (x.ty.rank(), w.ty.rank());
        let (k1, k2) = (x.ty.shape[rx - 1], w.ty.shape[rw - 2]);
        if k1 != k2 {
            return Err(Diagnostic::new(
                Code::MatmulShape,
                format!("`@`: inner dimensions differ: {} @ {} ({k1} ≠ {k2})", ops[0].ty, ops[1].ty),
            )
            .label(span, "inner dimensions differ")
            .label(ops[0].span, format!("{} has {k1} columns", ops[0].ty))
            .label(ops[1].span, format!("{} has {k2} rows", ops[1].ty))
            .into());
        }
        let batch =
            crate::ir::infer::broadcast_shapes(&x.ty.shape[..rx - 2], &w.ty.shape[..rw - 2]).ok_or_else(|| {
                Diagnostic::new(
                    Code::MatmulShape,
                    format!("`@`: batch dimensions cannot be broadcast: {} @ {}", x.ty, w.ty),
                )
                .label(span, "batch dimensions differ")
                .label(x.span, x.ty.to_string())
                .label(w.span, w.ty.to_string())
            })?;
        let mut out = if rw == 2 && rx > 2 {
            // A batch of rows times one matrix (a dense layer over a
            // sequence, `[B, T, D] @ [D, E]`) is one product of all the rows,
            // `[B·T, D] @ [D, E]`: the matrix is not broadcast to every batch
            // element, and its gradient is one product instead of a batch of
            // products summed (what XLA's `dot_general` does).
            let (m, n) = (x.ty.shape[rx - 2], w.ty.shape[1]);
            let rows = x.ty.shape[..rx - 1].iter().product();
            let flat = self.reshape(&x, vec![rows, k1], span)?;
            let product = self.node(Op::MatMul, &[&flat, &w], span)?;
            let mut shape = batch.clone();
            shape.extend([m, n]);
            self.reshape(&product, shape, span)?
        } else {
            let mut xs = batch.clone();
            xs.extend_from_slice(&x.ty.shape[rx - 2..]);
            let mut ws = batch.clone();
            ws.extend_from_slice(&w.ty.shape[rw - 2..]);
            let x = self.broadcast_to(&x, &xs, span)?;
            let w = self.broadcast_to(&w, &ws, span)?;
            self.node(Op::MatMul, &[&x, &w], span)?
        };
        let mut shape = out.ty.shape.clone();
        if wv {
            shape.pop();
        }
        if xv {
            shape.remove(shape.len() - if wv { 1 } else { 2 });
        }
        out = self.reshape(&out, shape, span)?;
        Ok(tensor(out))
    }

    pub(crate) fn nn_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        match a.name {
            "conv2d" => self.conv2d(a),
            "categorical" => self.categorical(a),
            "max_pool2d" | "avg_pool2d" => self.pool2d(a),
            "one_hot" => {
                let labels = self.arg_tensor(a, 0, Some(DType::I32))?;
                let depth = a.int(1)?;
                if depth <= 0 {
                    return Err(a.bad_value(1, format!("depth must be positive, not {depth}")));
                }
                let dtype = a.dtype_or(2, DType::F32)?;
                Ok(tensor(self.node(Op::OneHot { depth: depth as usize, dtype }, &[&labels], a.span)?))
            }
            "gather" | "embedding" => {
                let params = self.arg_tensor(a, 0, None)?;
                let idx = self.arg_tensor(a, 1, Some(DType::I32))?;
                let axis = if a.name == "gather" { a.axis(2, params.ty.rank(), 0)? } else { 0 };
                Ok(tensor(self.node(Op::Gather { axis }, &[&params, &idx], a.span)?))
            }
            _ => self.dropout(a),
        }
    }

    /// Inverted dropout: keeps each element with probability `1 - rate`
    /// and scales kept ones by `1 / (1 - rate)`; the mask comes from the
    /// counter-based generator, so it is the same at any thread count.
    fn dropout(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let x = self.arg_tensor(a, 0, None)?;
        let rate = a.float_or(1, 0.0)?;
        if !(0.0..1.0).contains(&rate) {
            return Err(a.bad_value(1, format!("rate must be in [0, 1), not {rate}")));
        }
        if !x.ty.dtype.is_float() {
            return Err(a.bad(0, "a float tensor"));
        }
        let seed = a.int_or(2, 0)? as u64;
        let u = self.fresh_uniform(x.ty.clone(), seed, a.span)?;
        let r = self.scalar(rate, x.ty.dtype, a.span)?;
        let r = self.broadcast_to(&r, &x.ty.shape, a.span)?;
        let keep = self.node(Op::Binary(BinaryOp::Ge), &[&u, &r], a.span)?;
        let scale = self.scalar(1.0 / (1.0 - rate), x.ty.dtype, a.span)?;
        let scale = self.broadcast_to(&scale, &x.ty.shape, a.span)?;
        let scaled = self.node(Op::Binary(BinaryOp::Mul), &[&x, &scale], a.span)?;
        let zero = self.scalar(0.0, x.ty.dtype, a.span)?;
        let zero = self.broadcast_to(&zero, &x.ty.shape, a.span)?;
        Ok(tensor(self.node(Op::Select, &[&keep, &scaled, &zero], a.span)?))
    }

    /// Uniform `[0, 1)` values of type `ty` from `seed`, fresh for every
    /// training step (and every dataset element inside `map`). Without the
    /// step counter the random op would depend on no step input, be
    /// computed once, and every step would draw the same values (dropout
    /// would drop a fixed sub-network; sampling would repeat itself).
    fn fresh_uniform(&mut self, ty: TensorType, seed: u64, span: Span) -> TResult<crate::trace::tensor::Operand> {
        let random = Op::Random { ty, dist: Distribution::Uniform, seed };
        match self.random_counter(span)? {
            Some(step) => {
                let ty = self.graph.node(step).ty.clone();
                let step = crate::trace::tensor::Operand { id: step, ty, span };
                self.node(random, &[&step], span)
            }
            None => self.node(random, &[], span),
        }
    }

    /// `categorical(logits, seed = 0)`: one class index (i32) per row of
    /// unnormalized log-probabilities along the last axis, drawn with the
    /// Gumbel-max trick, `argmax(logits - log(-log(u)))` with `u` uniform
    /// (`jax.random.categorical`'s method): class `i` wins with probability
    /// `softmax(logits)[i]`. `u = 0` gives noise `-inf` (that class cannot
    /// win that draw), never NaN.
    fn categorical(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let logits = self.arg_tensor(a, 0, None)?;
        if !logits.ty.dtype.is_float() || logits.ty.rank() == 0 {
            return Err(a.bad(0, "float logits of rank ≥ 1"));
        }
        let seed = a.int_or(1, 0)? as u64;
        let span = a.span;
        let u = self.fresh_uniform(logits.ty.clone(), seed, span)?;
        let log_u = self.node(Op::Unary(crate::ir::UnaryOp::Log), &[&u], span)?;
        let minus_log_u = self.node(Op::Unary(crate::ir::UnaryOp::Neg), &[&log_u], span)?;
        let log_log = self.node(Op::Unary(crate::ir::UnaryOp::Log), &[&minus_log_u], span)?;
        let perturbed = self.node(Op::Binary(BinaryOp::Sub), &[&logits, &log_log], span)?;
        let axis = logits.ty.rank() - 1;
        Ok(tensor(self.node(Op::ArgMax { axis, keepdims: false }, &[&perturbed], span)?))
    }

    fn conv2d(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let x = self.arg_tensor(a, 0, None)?;
        let w = self.arg_tensor(a, 1, Some(x.ty.dtype))?;
        if x.ty.rank() != 4 || w.ty.rank() != 4 {
            // The operand whose rank is wrong is the primary span.
            let (bad, other) = if x.ty.rank() != 4 { (&x, &w) } else { (&w, &x) };
            return Err(Diagnostic::new(
                Code::Rank,
                format!("`conv2d` takes NHWC input and HWIO weights (rank 4): {} and {}", x.ty, w.ty),
            )
            .label(bad.span, format!("{} has rank {}", bad.ty, bad.ty.rank()))
            .label(other.span, other.ty.to_string())
            .help("input is [batch, height, width, channels], weights [height, width, in_channels, out_channels]")
            .into());
        }
        let stride = self.pair(a, 2, 1)?;
        let dilation = self.pair(a, 4, 1)?;
        let groups = a.int_or(5, 1)?;
        if groups <= 0 {
            return Err(a.bad_value(5, format!("groups must be positive, not {groups}")));
        }
        // Channel mismatches are checked here rather than left to `infer`, so
        // the message speaks of channels and layouts, not of a formula.
        let (c_in, w_in, g) = (x.ty.shape[3], w.ty.shape[2], groups as usize);
        let divisible = c_in.is_multiple_of(g) && w.ty.shape[3].is_multiple_of(g);
        if x.ty.dtype == w.ty.dtype && (!divisible || c_in / g != w_in) {
            let message = if g == 1 {
                format!(
                    "`conv2d`: the input has {}, but the weights expect {w_in} input {}",
                    channels(c_in),
                    plural(w_in, "channel")
                )
            } else if !divisible {
                format!(
                    "`conv2d`: groups = {g} must divide the input's {c_in} channels and the weights' {} output channels",
                    w.ty.shape[3]
                )
            } else {
                format!(
                    "`conv2d`: with groups = {g}, each group sees {} of the input's {c_in} channels, \
                     but the weights expect {w_in}",
                    c_in / g
                )
            };
            let d = Diagnostic::new(Code::ConvShape, message)
                .label(a.span, "channels differ")
                .label(x.span, format!("{}: {} (NHWC)", x.ty, channels(c_in)))
                .label(w.span, format!("{}: {w_in} input {} (HWIO)", w.ty, plural(w_in, "channel")));
            return Err(if divisible {
                d.help(format!(
                    "weights are [height, width, in_channels, out_channels]; in_channels must be {}",
                    c_in / g
                ))
            } else {
                d
            }
            .into());
        }
        let window = [w.ty.shape[0], w.ty.shape[1]];
        let padding = self.padding(a, 3, "same", &x.ty, window, stride, dilation)?;
        // A quantized model's filter: the convolution runs on int8.
        if groups == 1 {
            let patches = Some(Patches { kernel: window, stride, padding, dilation });
            self.observe_for_calibration(&x, &w, patches);
            if let Some(product) = self.quantized_product(&x, &w, patches, a.span)? {
                return Ok(tensor(product));
            }
        }
        let op = Op::Conv2d { stride, padding, dilation, groups: groups as usize };
        Ok(tensor(self.node(op, &[&x, &w], a.span)?))
    }

    fn pool2d(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let x = self.arg_tensor(a, 0, None)?;
        if x.ty.rank() != 4 {
            return Err(Diagnostic::new(Code::Rank, format!("`{}` takes NHWC input (rank 4), found {}", a.name, x.ty))
                .label(x.span, x.ty.to_string())
                .into());
        }
        let size = self.pair(a, 1, 1)?;
        let stride = if a.get(2).is_some() { self.pair(a, 2, 1)? } else { size };
        let padding = self.padding(a, 3, "valid", &x.ty, size, stride, [1, 1])?;
        let kind = if a.name == "max_pool2d" { PoolKind::Max } else { PoolKind::Avg };
        Ok(tensor(self.node(Op::Pool2d { kind, size, stride, padding }, &[&x], a.span)?))
    }

    /// An int or `[h, w]` argument of positive values.
    fn pair(&mut self, a: &BuiltinArgs, i: usize, default: i64) -> TResult<[usize; 2]> {
        let v = match a.get(i) {
            None => vec![default],
            Some(_) => self.arg_ints(a, i)?,
        };
        let p = match v.as_slice() {
            [n] => [*n, *n],
            [h, w] => [*h, *w],
            _ => return Err(a.bad(i, "an int or [h, w]")),
        };
        if p.iter().any(|&n| n <= 0) {
            return Err(a.bad_value(i, format!("values must be positive, found {p:?}")));
        }
        Ok([p[0] as usize, p[1] as usize])
    }

    /// Resolves `"same"`, `"valid"`, an int, or `[top, bottom, left, right]`
    /// into explicit paddings (TensorFlow's SAME puts the extra row last).
    #[allow(clippy::too_many_arguments)]
    fn padding(
        &mut self,
        a: &BuiltinArgs,
        i: usize,
        default: &str,
        x: &TensorType,
        window: [usize; 2],
        stride: [usize; 2],
        dilation: [usize; 2],
    ) -> TResult<[usize; 4]> {
        match a.get(i) {
            None | Some((Value::Str(_), _)) => {
                let mode = a.str_or(i, default)?;
                match mode.as_str() {
                    "valid" => Ok([0; 4]),
                    "same" => {
                        let mut p = [0; 4];
                        for d in 0..2 {
                            let input = x.shape[1 + d];
                            let out = input.div_ceil(stride[d]);
                            let eff = dilation[d] * (window[d].max(1) - 1) + 1;
                            let total = ((out.max(1) - 1) * stride[d] + eff).saturating_sub(input);
                            p[2 * d] = total / 2;
                            p[2 * d + 1] = total - total / 2;
                        }
                        Ok(p)
                    }
                    other => {
                        Err(a.bad_value(i, format!("padding must be \"same\", \"valid\" or an int, not \"{other}\"")))
                    }
                }
            }
            Some(_) => {
                let v = self.arg_ints(a, i)?;
                if v.iter().any(|&n| n < 0) {
                    return Err(a.bad_value(i, "paddings cannot be negative".into()));
                }
                match v.as_slice() {
                    [n] => Ok([*n as usize; 4]),
                    [t, b, l, r] => Ok([*t as usize, *b as usize, *l as usize, *r as usize]),
                    _ => Err(a.bad(i, "\"same\", \"valid\", an int or [top, bottom, left, right]")),
                }
            }
        }
    }
}

/// `n channels`, singular for one.
fn channels(n: usize) -> String {
    format!("{n} {}", plural(n, "channel"))
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.to_string()
    } else {
        format!("{word}s")
    }
}
