"""JAX (jax.jit, XLA:CPU) peer of examples/transformer.tfl: one training step
(forward + backward + Adam) of the same small causal transformer, same shapes.

  /work/.venv-anchors/bin/python benches/transformer/bench_jax.py --threads 1
  /work/.venv-anchors/bin/python benches/transformer/bench_jax.py --threads 2 --steps 200 --warmup 20

Model (as examples/transformer.tfl): vocab 32, context T = 32, d_model 64, 4 heads of 16,
token embedding [32, 64] + learned positions [32, 64], 2 pre-norm blocks
  a = h + attn(LN1(h));  out = a + down(gelu_tanh(up(LN2(a))))
attention: Dense q, k, v (bias) -> [B, T, 4, 16] -> transpose [0, 2, 1, 3],
  s = q @ k^T / sqrt(16), where(row >= col, s, -1e9), softmax(last axis), p @ v,
  transpose back, reshape [B, T, 64], Dense o (bias);
LayerNorm eps 1e-5 (population variance), MLP 64 -> 256 -> 64, final LayerNorm,
Dense head 64 -> 32. Loss: mean softmax cross-entropy over the B*T positions
(logits [B*T, 32], integer labels). Batch 16, int32 ids. Adam(lr 3e-3, 0.9, 0.999,
1e-8) written out by hand, as ../shared/bench/bench_jax.py does.

Weights: numpy default_rng(0): Glorot-uniform dense weights, zero biases, LayerNorm
ones/zeros, uniform(-0.05, 0.05) token table and positions. Data: one fixed batch
(reused every step, not timed): a sequence s of shape [16, 33] of ids in [0, 32) from
default_rng(1), x = s[:, 1:], y = s[:, :-1] (the previous token, the .tfl's task).

Threads and output follow the anchors in ../shared/bench (its common.py is imported
from there): PJRT_NPROC=N, XLA_FLAGS=--xla_cpu_multi_thread_eigen=false for N = 1,
set before jax is imported. Prints one JSON line on stdout (the version line goes
to stderr); --out FILE also appends it to FILE.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("PEERS") or os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "bench"))
sys.path.insert(0, SHARED)
import common  # noqa: E402  (standard library only at import time)

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--warmup", type=int, default=20, help="warm-up steps, the first (compile) call included")
p.add_argument("--steps", type=int, default=200, help="timed steps")
p.add_argument("--out", default="", help="JSONL file to append to ('' = none, the default)")
args = p.parse_args()
common.set_thread_env(args.threads)  # before numpy / jax are loaded
args._t_start = time.perf_counter()

import numpy as np  # noqa: E402

t_imp = time.perf_counter()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import_s = time.perf_counter() - t_imp
rss_import = common.rss_mb()

VOCAB, T, D, HEADS, DH = 32, 32, 64, 4, 16
LR, B1, B2, EPS = 3e-3, 0.9, 0.999, 1e-8
LN_EPS = 1e-5


# ---------------------------------------------------------------- parameters
def dense_np(rng, i, o):
    return {"w": common.glorot(rng, i, o, (i, o)), "b": np.zeros(o, np.float32)}


def ln_np(d):
    return {"gamma": np.ones(d, np.float32), "beta": np.zeros(d, np.float32)}


def init_params():
    rng = np.random.default_rng(0)
    uni = lambda shape: rng.uniform(-0.05, 0.05, size=shape).astype(np.float32)  # noqa: E731
    params = {"tok": uni((VOCAB, D)), "pos": uni((T, D))}
    for name in ("b1", "b2"):
        params[name] = {
            "n1": ln_np(D),
            "att": {k: dense_np(rng, D, D) for k in ("q", "k", "v", "o")},
            "n2": ln_np(D),
            "up": dense_np(rng, D, 4 * D),
            "down": dense_np(rng, 4 * D, D),
        }
    params["norm"] = ln_np(D)
    params["head"] = dense_np(rng, D, VOCAB)
    return params


# ---------------------------------------------------------------- model
def dense(p, x):
    return x @ p["w"] + p["b"]


def layer_norm(p, x):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    c = x - mu
    var = jnp.mean(c * c, axis=-1, keepdims=True)
    return c * jax.lax.rsqrt(var + LN_EPS) * p["gamma"] + p["beta"]


def attention(p, h):
    b, t, _ = h.shape
    split = lambda x: jnp.transpose(x.reshape(b, t, HEADS, DH), (0, 2, 1, 3))  # noqa: E731
    q, k, v = split(dense(p["q"], h)), split(dense(p["k"], h)), split(dense(p["v"], h))
    s = q @ jnp.transpose(k, (0, 1, 3, 2)) / jnp.sqrt(jnp.float32(DH))
    causal = jnp.arange(t).reshape(t, 1) >= jnp.arange(t).reshape(1, t)
    pr = jax.nn.softmax(jnp.where(causal, s, jnp.float32(-1e9)), axis=-1)
    return dense(p["o"], jnp.transpose(pr @ v, (0, 2, 1, 3)).reshape(b, t, D))


def block(p, h):
    a = h + attention(p["att"], layer_norm(p["n1"], h))
    return a + dense(p["down"], jax.nn.gelu(dense(p["up"], layer_norm(p["n2"], a)), approximate=True))


def forward(params, ids):
    h = jnp.take(params["tok"], ids, axis=0) + params["pos"]
    h = block(params["b2"], block(params["b1"], h))
    return dense(params["head"], layer_norm(params["norm"], h))


def loss_fn(params, x, y):
    logits = forward(params, x).reshape(-1, VOCAB)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y.reshape(-1, 1), axis=1))


def train_step(params, m, v, t, x, y):
    loss, g = jax.value_and_grad(loss_fn)(params, x, y)
    t = t + 1
    m = jax.tree.map(lambda m_, g_: B1 * m_ + (1 - B1) * g_, m, g)
    v = jax.tree.map(lambda v_, g_: B2 * v_ + (1 - B2) * g_ * g_, v, g)
    c1 = 1 - B1 ** t
    c2 = 1 - B2 ** t
    params = jax.tree.map(lambda p_, m_, v_: p_ - LR * (m_ / c1) / (jnp.sqrt(v_ / c2) + EPS), params, m, v)
    return params, m, v, t, loss


def main():
    print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices(), file=sys.stderr, flush=True)
    p_np = init_params()
    n_params = sum(a.size for a in jax.tree.leaves(p_np))
    seq = np.random.default_rng(1).integers(0, VOCAB, size=(args.batch, T + 1)).astype(np.int32)
    x, y = jnp.asarray(seq[:, 1:]), jnp.asarray(seq[:, :-1])
    params = jax.tree.map(jnp.asarray, p_np)
    state = {
        "p": params,
        "m": jax.tree.map(jnp.zeros_like, params),
        "v": jax.tree.map(jnp.zeros_like, params),
        "t": jnp.zeros((), jnp.float32),
    }
    step_fn = jax.jit(train_step, donate_argnums=(0, 1, 2))

    def step():
        state["p"], state["m"], state["v"], state["t"], loss = step_fn(
            state["p"], state["m"], state["v"], state["t"], x, y)
        return loss

    r = common.time_loop(step, lambda l: l.block_until_ready(), args.warmup, args.steps)
    r.update(peer="jax", framework="jax", variant="jit", bench="transformer", batch=args.batch,
             compile_s=round(r["first_call_ms"] / 1e3, 3) if r["first_call_ms"] is not None else None,
             n_params=int(n_params), jax_version=jax.__version__, jaxlib_version=jaxlib.__version__,
             import_s=round(import_s, 2), rss_after_import_mb=round(rss_import, 1))
    common.emit(args, r)


if __name__ == "__main__":
    main()
