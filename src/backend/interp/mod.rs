//! The reference interpreter as a backend: a region runs node by node in
//! topological order, each node computed by `tensor::eval_node` (the op
//! semantics every other backend is compared with). It follows no plan —
//! the optimizer's kernels, schedule and memory plan are for compiled
//! backends — so it also runs unoptimized programs.
//!
//! Contract: [`InterpBackend::prepare`] copies the values the region reads
//! from outside once; [`InterpUnit::run`] binds the inputs, evaluates the
//! region's nodes and returns its outputs; with `check_numerics` the first
//! NaN or infinity is an error at the op that produced it. Carried values
//! (a training step's parameters) are held between runs like any backend
//! holds them. An `all_reduce_sum` sums over the processes the region was
//! prepared with (`Prepare::collectives`), or is the identity without.
//!
//! Example: `BackendKind::Interp.get().prepare(&request)?.run(&inputs)?`
//! (the runtime does this for every region under `--backend interp`).

use super::{Backend, Collectives, Prepare, PreparedUnit, StepCounts, StepTime, Summand};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{NodeId, Op, TensorType};
use crate::tensor::{eval_node, Tensor};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The reference interpreter.
pub struct InterpBackend;

/// Where an operand of a prepared node comes from.
#[derive(Clone, Copy, Debug)]
enum Operand {
    /// A bound input, by position.
    Input(usize),
    /// A value from outside the region, copied at `prepare`.
    Fixed(usize),
    /// An earlier node of the region, by position.
    Local(usize),
}

/// One node of the region, ready to evaluate.
struct Node {
    op: Op,
    ty: TensorType,
    span: Span,
    args: Vec<Operand>,
}

/// A region prepared for the interpreter.
pub struct InterpUnit {
    nodes: Vec<Node>,
    fixed: Vec<Tensor>,
    outputs: Vec<Operand>,
    carried: usize,
    /// The carried values between runs (`run_head`).
    carry: Mutex<Vec<Tensor>>,
    check_numerics: bool,
    collectives: Option<std::sync::Arc<dyn Collectives>>,
    profiling: AtomicBool,
    node_nanos: Vec<AtomicU64>,
}

impl Backend for InterpBackend {
    fn name(&self) -> &'static str {
        "interp"
    }

    fn prepare(&self, r: &Prepare<'_>) -> Result<Box<dyn PreparedUnit>, Diagnostic> {
        let g = &r.program.graph;
        let local: HashMap<NodeId, usize> = r.nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut fixed: Vec<Tensor> = Vec::new();
        let mut fixed_at: HashMap<NodeId, usize> = HashMap::new();
        let mut operand = |n: NodeId| -> Result<Operand, Diagnostic> {
            if let Some(&l) = local.get(&n) {
                return Ok(Operand::Local(l));
            }
            if let Some(&f) = fixed_at.get(&n) {
                return Ok(Operand::Fixed(f));
            }
            let value = r
                .outside
                .get(&n)
                .ok_or_else(|| Diagnostic::internal(format!("interp: node {n:?} read by a region was not computed")))?;
            fixed.push(value.clone());
            fixed_at.insert(n, fixed.len() - 1);
            Ok(Operand::Fixed(fixed.len() - 1))
        };
        let mut nodes = Vec::with_capacity(r.nodes.len());
        for &n in r.nodes {
            let node = g.node(n);
            let args = match &node.op {
                Op::Slot { slot, .. } => match r.slot_pos.get(slot) {
                    Some(&p) => vec![Operand::Input(p)],
                    None => return Err(Diagnostic::internal(format!("interp: region input slot {slot} is unbound"))),
                },
                _ => g.inputs(n).into_iter().map(&mut operand).collect::<Result<_, _>>()?,
            };
            nodes.push(Node { op: node.op.clone(), ty: node.ty.clone(), span: node.span, args });
        }
        let outputs = r.region.outputs.iter().map(|&o| operand(o)).collect::<Result<_, _>>()?;
        Ok(Box::new(InterpUnit {
            node_nanos: (0..nodes.len()).map(|_| AtomicU64::new(0)).collect(),
            nodes,
            fixed,
            outputs,
            carried: r.carried,
            carry: Mutex::new(Vec::new()),
            check_numerics: r.check_numerics,
            collectives: r.collectives.cloned(),
            profiling: AtomicBool::new(false),
        }))
    }
}

impl InterpUnit {
    fn carry(&self) -> Result<std::sync::MutexGuard<'_, Vec<Tensor>>, Diagnostic> {
        self.carry.lock().map_err(|_| Diagnostic::internal("interp: a previous run of this unit panicked"))
    }
}

impl PreparedUnit for InterpUnit {
    fn backend(&self) -> &'static str {
        "interp"
    }

    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        let profiling = self.profiling.load(Ordering::Relaxed);
        let mut local: Vec<Tensor> = Vec::with_capacity(self.nodes.len());
        let get = |local: &[Tensor], a: Operand| operand_value(inputs, &self.fixed, local, a).cloned();
        for (i, node) in self.nodes.iter().enumerate() {
            crate::interrupt::check()?;
            let start = profiling.then(std::time::Instant::now);
            let value = match (&node.op, node.args.as_slice()) {
                (Op::Slot { .. }, [input]) => get(&local, *input)?,
                (Op::AllReduce, [input]) => match self.collectives.as_deref() {
                    Some(c) => all_reduce(c, get(&local, *input)?)?,
                    // One process: the identity, as `eval_node` has it.
                    None => get(&local, *input)?,
                },
                (op, args) => {
                    let args =
                        args.iter()
                            .map(|&a| operand_value(inputs, &self.fixed, &local, a))
                            .collect::<Result<Vec<&Tensor>, _>>()?;
                    eval_node(op, &args, &node.ty)
                        .map_err(|d| d.label(node.span, format!("while computing this `{}`", op.name())))?
                }
            };
            if self.check_numerics {
                check_finite(&node.op, node.span, &node.ty, &value)?;
            }
            if let Some(start) = start {
                self.node_nanos[i].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            local.push(value);
        }
        self.outputs.iter().map(|&o| get(&local, o)).collect()
    }

    fn run_head(&self, head: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        let mut carry = self.carry()?;
        let mut inputs = head.to_vec();
        inputs.extend(carry.iter().cloned());
        let mut out = self.run(&inputs)?;
        *carry = out.split_off(out.len().saturating_sub(self.carried));
        Ok(out)
    }

    fn load_carried(&self, values: &[Tensor]) -> Result<(), Diagnostic> {
        if values.len() != self.carried {
            return Err(Diagnostic::internal(format!("interp: {} carried values for {}", values.len(), self.carried)));
        }
        *self.carry()? = values.to_vec();
        Ok(())
    }

    fn read_carried(&self) -> Result<Vec<Tensor>, Diagnostic> {
        Ok(self.carry()?.clone())
    }

    fn counts(&self) -> StepCounts {
        let computed = self.nodes.iter().filter(|n| !matches!(n.op, Op::Slot { .. })).count();
        StepCounts { interp: computed, ..StepCounts::default() }
    }

    fn arena_bytes(&self) -> usize {
        0
    }

    fn is_threaded(&self) -> bool {
        false
    }

    fn set_profiling(&self, on: bool) {
        if on {
            self.node_nanos.iter().for_each(|n| n.store(0, Ordering::Relaxed));
        }
        self.profiling.store(on, Ordering::Relaxed);
    }

    fn profile(&self) -> Vec<StepTime> {
        let times = self.nodes.iter().zip(&self.node_nanos).enumerate();
        times
            .map(|(index, (node, n))| StepTime {
                index,
                label: format!("interpreted: {} {}", node.op.name(), node.ty),
                seconds: n.load(Ordering::Relaxed) as f64 * 1e-9,
                within: None,
            })
            .collect()
    }
}

/// `t` summed over the processes `c` reaches.
fn all_reduce(c: &dyn Collectives, t: Tensor) -> Result<Tensor, Diagnostic> {
    use crate::tensor::{flat, Data};
    let (dtype, shape) = (t.dtype(), t.shape().to_vec());
    match t.data() {
        Data::F32(a) => {
            let mut values = flat(a);
            c.all_reduce_sum(Summand::F32(&mut values))?;
            Tensor::from_vec(dtype, &shape, values)
        }
        Data::F64(a) => {
            let mut values = flat(a);
            c.all_reduce_sum(Summand::F64(&mut values))?;
            Tensor::from_vec(dtype, &shape, values)
        }
        _ => Err(Diagnostic::internal(format!("interp: an all-reduce of {dtype}"))),
    }
}

/// The value of operand `a`.
fn operand_value<'a>(
    inputs: &'a [Tensor],
    fixed: &'a [Tensor],
    local: &'a [Tensor],
    a: Operand,
) -> Result<&'a Tensor, Diagnostic> {
    match a {
        Operand::Input(p) => inputs.get(p),
        Operand::Fixed(f) => fixed.get(f),
        Operand::Local(l) => local.get(l),
    }
    .ok_or_else(|| Diagnostic::internal("interp: a region operand is missing"))
}

/// With `--check-numerics`: the first NaN or infinity is an error at the op
/// (`span`) that produced it.
pub fn check_finite(op: &Op, span: Span, ty: &TensorType, value: &Tensor) -> Result<(), Diagnostic> {
    if !value.dtype().is_float() || value.to_f64_vec().iter().all(|x| x.is_finite()) {
        return Ok(());
    }
    Err(Diagnostic::new(Code::Runtime, format!("`{}` produced a NaN or infinity", op.name()))
        .label(span, format!("first non-finite value computed here ({ty})")))
}
