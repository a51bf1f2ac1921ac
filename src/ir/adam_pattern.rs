//! Adam's parameter update recognized in a loop nest: the expressions of
//! `std.optim.adam`'s update, so that a pass can name the fusion
//! (`passes::adam_update`) and a backend can run it as one native loop
//! (the CPU's `kernels::adam`, PyTorch's `Adam(fused=True)`).
//!
//! Contract: [`adam_roles`] accepts a [`Spec`] whose expressions are, with
//! these operand orders, `m' = b1·m + c·g`, `v' = b2·v + (d·g)·g`,
//! `p' = p - (lr·(m' / k1)) / (sqrt(v' / k2) + eps)` (the scalars `b1 c b2
//! d lr k1 k2 eps` splat loads, `m g v p` read at the written index, the
//! three results its outputs in any order, all `f32`) and returns which
//! load or output plays each role, in the order of the position constants
//! below. The gradient `g` may be read times a splat scalar (`g · s`, a
//! data-parallel step's mean of the summed gradients), the same wherever
//! it is read. [`adam_update_with_half_gradient`] also accepts `g` read from a
//! `bf16`/`f16` value (a mixed-precision step's weight gradient, the
//! output of a `bf16` product, widened exactly): a plan names that update
//! too, and a backend whose native loop reads only `f32` runs it natively
//! once the gradient lies in `f32` storage (the CPU backend keeps a
//! product it computed in `f32` scratch, rounded there). Anything else
//! (AdamW, another operand order) is not Adam's update. Expressions
//! outside the three results' trees write nothing, so they do not matter.
//!
//! Example: the bench MLP's update of its first weight (`[784, 256]`) is
//! a spec of 11 loads and 3 outputs whose roles are found.

use super::op::{BinaryOp, UnaryOp};
use super::spec::{Expr, Inner, Kind, Spec};

/// The scalars, the read tensors and the results, in `update_rows`'s
/// argument order.
const SCALARS: usize = 9;
const TENSORS: usize = 4;
const RESULTS: usize = 3;

/// Positions in the argument list: the scalars `b1 c b2 d lr k1 k2 eps`,
/// then `m g v p`, then the results `m' v' p'`.
pub const B1: usize = 0;
pub const C: usize = 1;
pub const B2: usize = 2;
pub const D: usize = 3;
pub const LR: usize = 4;
pub const K1: usize = 5;
pub const K2: usize = 6;
pub const EPS: usize = 7;
/// A factor the gradient is read times (`g = load · scale`: a data-parallel
/// step's mean of the ranks' summed gradients); when the gradient is read
/// as it is, this role names `B1`'s load, which is never read for it.
pub const SCALE: usize = 8;
pub const M: usize = SCALARS;
pub const G: usize = SCALARS + 1;
pub const V: usize = SCALARS + 2;
pub const P: usize = SCALARS + 3;
pub const M1: usize = SCALARS + TENSORS;
pub const V1: usize = SCALARS + TENSORS + 1;
pub const P1: usize = SCALARS + TENSORS + 2;

/// A pattern over a spec's expressions.
enum Pat {
    /// A splat (one value for the whole kernel) load, bound to a scalar role.
    Scalar(usize),
    /// A load read at the written index, bound to a tensor role.
    Tensor(usize),
    Bin(BinaryOp, Box<Pat>, Box<Pat>),
    Sqrt(Box<Pat>),
    /// The gradient: the `G` load, or that load times the `SCALE` splat
    /// (in either order) — the same form wherever it is read.
    Gradient,
}

/// `SCALE`'s binding while the gradient is read unscaled.
const UNSCALED: usize = usize::MAX;

fn bin(op: BinaryOp, x: Pat, y: Pat) -> Pat {
    Pat::Bin(op, Box::new(x), Box::new(y))
}

/// The three results' patterns: `m'`, `v'`, `p'`.
fn patterns() -> [Pat; RESULTS] {
    use BinaryOp::{Add, Div, Mul, Sub};
    use Pat::{Scalar as S, Tensor as T};
    let g = || Pat::Gradient;
    let m1 = || bin(Add, bin(Mul, S(B1), T(M)), bin(Mul, S(C), g()));
    let v1 = || bin(Add, bin(Mul, S(B2), T(V)), bin(Mul, bin(Mul, S(D), g()), g()));
    let step = bin(Mul, S(LR), bin(Div, m1(), S(K1)));
    let denominator = bin(Add, Pat::Sqrt(Box::new(bin(Div, v1(), S(K2)))), S(EPS));
    [m1(), v1(), bin(Sub, T(P), bin(Div, step, denominator))]
}

/// Whether expression `e` of `spec` matches `pat`, binding each role to a
/// load (a role seen twice must be the same load); `half_gradient`: the
/// gradient may be a two-byte load.
fn matches(spec: &Spec, e: usize, pat: &Pat, roles: &mut [Option<usize>], half_gradient: bool) -> bool {
    let mut bind = |role: usize, l: usize| *roles[role].get_or_insert(l) == l;
    let stored_as_wanted = |role: usize, kind: Kind| {
        kind == Kind::F32 || (half_gradient && role == G && matches!(kind, Kind::BF16 | Kind::F16))
    };
    let matches = |e: usize, pat: &Pat, roles: &mut [Option<usize>]| matches(spec, e, pat, roles, half_gradient);
    match (spec.exprs[e], pat) {
        ((Expr::Load(l), Kind::F32), Pat::Scalar(role)) => {
            let load = &spec.loads[l];
            load.kind == Kind::F32 && load.inner == Inner::Splat && load.outer.iter().all(|&s| s == 0) && bind(*role, l)
        }
        ((Expr::Load(l), Kind::F32), Pat::Tensor(role)) => {
            let load = &spec.loads[l];
            stored_as_wanted(*role, load.kind) && spec.reads_at_index(load) && bind(*role, l)
        }
        ((Expr::Binary(op, x, y), Kind::F32), Pat::Bin(want, px, py)) => {
            op == *want && matches(x, px, roles) && matches(y, py, roles)
        }
        ((Expr::Unary(UnaryOp::Sqrt, x), Kind::F32), Pat::Sqrt(px)) => matches(x, px, roles),
        ((Expr::Load(_), _), Pat::Gradient) => {
            matches(e, &Pat::Tensor(G), roles) && *roles[SCALE].get_or_insert(UNSCALED) == UNSCALED
        }
        ((Expr::Binary(BinaryOp::Mul, x, y), Kind::F32), Pat::Gradient) => {
            let scaled = |t: usize, s: usize, roles: &mut [Option<usize>]| {
                let mut attempt = roles.to_vec();
                let ok = matches(t, &Pat::Tensor(G), &mut attempt) && matches(s, &Pat::Scalar(SCALE), &mut attempt);
                if ok {
                    roles.copy_from_slice(&attempt);
                }
                ok
            };
            scaled(x, y, roles) || scaled(y, x, roles)
        }
        _ => false,
    }
}

/// The load or output index (outputs after the loads) of each role of
/// Adam's update in `spec`, in the order `b1 c b2 d lr k1 k2 eps scale m
/// g v p m' v' p'`, when `spec` is that update with every operand in
/// `f32` storage (see the module docs), and whether the gradient is read
/// times `scale`.
pub fn adam_roles(spec: &Spec) -> Option<(Vec<usize>, bool)> {
    roles(spec, false)
}

/// Whether `spec` is Adam's update, its gradient possibly read from a
/// half-precision value (see the module docs).
pub fn adam_update_with_half_gradient(spec: &Spec) -> bool {
    roles(spec, true).is_some()
}

fn roles(spec: &Spec, half_gradient: bool) -> Option<(Vec<usize>, bool)> {
    if spec.outputs.len() != RESULTS || spec.stores.iter().any(|&k| k != Kind::F32) {
        return None;
    }
    let mut roles = [None; SCALARS + TENSORS];
    let mut results = [None; RESULTS];
    for (r, pat) in patterns().iter().enumerate() {
        // A failed attempt may have bound roles: each starts from the
        // bindings of the results matched so far.
        let (o, bound) = spec.outputs.iter().enumerate().find_map(|(o, &e)| {
            let mut attempt = roles;
            matches(spec, e, pat, &mut attempt, half_gradient).then_some((o, attempt))
        })?;
        roles = bound;
        results[r] = Some(spec.loads.len() + o);
    }
    let scaled = roles[SCALE] != Some(UNSCALED);
    if !scaled {
        roles[SCALE] = roles[B1];
    }
    Some((roles.iter().chain(&results).copied().collect::<Option<Vec<_>>>()?, scaled))
}
