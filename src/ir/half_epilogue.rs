//! The epilogue of a `bf16` product recognized in a spec, so that a
//! backend can apply it in one native pass over the product's `f32` sums
//! instead of rounding them, then running compiled code over them: the
//! layer's `round(relu(round(p) + bias))` of a mixed-precision forward
//! pass, with the ReLU's mask for the backward pass, and the backward's
//! `round(select(mask, round(p), 0))`.
//!
//! Contract: [`Spec::bf16_epilogue`] accepts a spec with `x = select(keep,
//! y, 0)` or `y`, `y = relu(s)` or `s`, `s = p + bias` (either order) or
//! `p`, where `p` is the product read at the written index, `bias` an
//! `f32` value per position of an inner extent of `channels`, `keep` a
//! `bool` value read at the written index and `0` a load of `+0`
//! everywhere (`is_zero`), whose outputs are, each at most once and at
//! least one of the first two: `Round(BF16, x)` stored in two bytes (the
//! next product's operand), `x` stored as `f32` (a backward pass's
//! gradient, which a bias gradient sums unrounded, or an activation a
//! pooling reads), and `s > 0` stored as a mask (the ReLU's gradient
//! mask). Everything else is `None`. Expressions no output reads do not matter.
//! The product's own rounding to `bf16` is part of what a backend applies
//! (the product node is `bf16`, its value the rounded sum).
//!
//! Example: the mixed-precision MLP's first layer, `relu(x @ w + b)` with
//! `x`, `w` in bf16, has the epilogue spec `{Round(BF16, Relu(Add(p,
//! b))), Gt(Add(p, b), 0)}`: `Bf16Epilogue { bias: Some(b), relu: true,
//! keep_where: None, positive: Some(1), unrounded: None, result: Some(0) }`.

use super::op::BinaryOp;
use super::spec::{Expr, Kind, Spec};
use super::NodeId;

/// What a `bf16` product's epilogue does (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bf16Epilogue {
    /// The per-channel `f32` bias added to the rounded product.
    pub bias: Option<NodeId>,
    pub relu: bool,
    /// A `bool` value: the result is `+0` where it is false.
    pub keep_where: Option<NodeId>,
    /// The output (position in `Spec::outputs`) that stores `s > 0`.
    pub positive: Option<usize>,
    /// The output that stores `x`, before its rounding, as `f32`.
    pub unrounded: Option<usize>,
    /// The output that stores the rounded result in two bytes.
    pub result: Option<usize>,
}

impl Spec {
    /// This spec as the epilogue of the `bf16` product `product` (see the
    /// module docs), or `None`.
    pub fn bf16_epilogue(
        &self,
        product: NodeId,
        channels: usize,
        is_zero: impl Fn(NodeId) -> bool,
    ) -> Option<Bf16Epilogue> {
        if self.outputs.len() > 3 {
            return None;
        }
        let at_index =
            |e: usize, kinds: &[Kind]| self.load_of(e).filter(|l| kinds.contains(&l.kind) && self.reads_at_index(l));
        let is_product = |e: usize| at_index(e, &[Kind::BF16, Kind::F32]).is_some_and(|l| l.node == product);
        let zero = |e: usize| self.load_of(e).is_some_and(|l| is_zero(l.node));
        // The stored value before its rounding: what a two-byte output
        // rounds, else the `f32` output that is not a comparison.
        let result = self.stores.iter().position(|&k| k == Kind::BF16);
        let x = match result.map(|o| self.exprs[self.outputs[o]].0) {
            Some(Expr::Round(Kind::BF16, x)) => x,
            Some(_) => return None,
            None => {
                let o = self.stores.iter().position(|&k| k == Kind::F32)?;
                self.outputs[o]
            }
        };
        let (kept, keep_where) = match self.exprs[x].0 {
            Expr::Select(condition, kept, otherwise) if zero(otherwise) => {
                (kept, Some(at_index(condition, &[Kind::Mask])?.node))
            }
            _ => (x, None),
        };
        let (sum, relu, bias) = self.biased_relu(kept, is_product, channels)?;
        let (mut positive, mut unrounded) = (None, None);
        for o in (0..self.outputs.len()).filter(|&o| Some(o) != result) {
            let e = self.outputs[o];
            match (self.exprs[e].0, self.stores[o]) {
                (Expr::Binary(BinaryOp::Gt, s, z), Kind::Mask) if s == sum && zero(z) && positive.is_none() => {
                    positive = Some(o)
                }
                (_, Kind::F32) if e == x && unrounded.is_none() => unrounded = Some(o),
                _ => return None,
            }
        }
        Some(Bf16Epilogue { bias, relu, keep_where, positive, unrounded, result })
    }
}
