#!/usr/bin/env python3
"""JAX (jax.jit, XLA:CPU) peers of examples/zoo/bench/*.tfl: one training step, jitted.

  python benches/zoo/bench_jax.py --threads 1 --model gpt
  python benches/zoo/bench_jax.py --threads 2 --model all

The parameters are the dict of examples/zoo/bench/data/<model>_init.safetensors itself
(tfc's names and layouts: Dense w [in, out], convolutions HWIO over NHWC input), so
the forward passes below read them by tfc's names:
  gpt     embedding + positions, pre-norm blocks, attention written out (q k^T / sqrt(32),
          where(row >= col, s, -1e9), softmax, p v), jax.nn.gelu (tanh approximation)
  resnet  lax.conv_general_dilated(padding 1 on every side), BatchNorm with the batch's
          mean and biased variance (the running statistics are updated too, as state)
  lstm    lax.scan over the 28 rows, z = x wx + h wh + b, gates i, f, g, o
  gru     lax.scan, PyTorch's GRU (gates r, z, n)
Adam is written out by hand (../shared/bench/bench_jax.py's update rule:
p - lr * (m / c1) / (sqrt(v / c2) + eps)); the step is jitted with the parameters,
the Adam moments and the BatchNorm states donated.
Threads: PJRT_NPROC=N and XLA_FLAGS=--xla_cpu_multi_thread_eigen=false for N = 1, set
before jax is imported (common.set_thread_env).
"""
import common

args = common.early_setup(__doc__)

import time  # noqa: E402

t_imp = time.perf_counter()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import_s = time.perf_counter() - t_imp
LN_EPS = BN_EPS = 1e-5
BN_MOMENTUM = 0.1


def layer_norm(x, p, name):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    c = x - mu
    return c * lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + LN_EPS) * p[f"{name}.gamma"] + p[f"{name}.beta"]


def dense(x, p, name):
    return x @ p[f"{name}.w"] + p[f"{name}.b"]


# ---------------------------------------------------------------- gpt
def gpt_forward(p, s, ids):
    g = common.GPT
    b, n = ids.shape
    heads, dh = g["heads"], g["d"] // g["heads"]
    causal = jnp.arange(n)[:, None] >= jnp.arange(n)[None, :]

    def split(z):
        return z.reshape(b, n, heads, dh).transpose(0, 2, 1, 3)

    h = p["tok.table"][ids] + p["pos"]
    for i in range(g["layers"]):
        blk = f"blocks.{i}"
        a = layer_norm(h, p, f"{blk}.n1")
        q, k, v = (split(dense(a, p, f"{blk}.att.{c}")) for c in "qkv")
        sc = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(jnp.float32(dh))
        att = jax.nn.softmax(jnp.where(causal, sc, -1e9), axis=-1) @ v
        h = h + dense(att.transpose(0, 2, 1, 3).reshape(b, n, g["d"]), p, f"{blk}.att.o")
        m = jax.nn.gelu(dense(layer_norm(h, p, f"{blk}.n2"), p, f"{blk}.up"), approximate=True)
        h = h + dense(m, p, f"{blk}.down")
    return dense(layer_norm(h, p, "norm"), p, "head").reshape(-1, g["vocab"]), s


# ---------------------------------------------------------------- resnet
def conv(x, w, stride):
    pad = w.shape[0] // 2
    return lax.conv_general_dilated(x, w, (stride, stride), ((pad, pad), (pad, pad)),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv_bn(x, p, s, name, stride=1):
    """conv then BatchNorm (training mode); returns (y, the updated running statistics)."""
    y = conv(x, p[f"{name}.w"], stride)
    n = y.shape[0] * y.shape[1] * y.shape[2]
    mu = jnp.mean(y, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(y - mu), axis=(0, 1, 2))
    bn = f"{name}.bn"
    new = {f"{bn}.running_mean": (1 - BN_MOMENTUM) * s[f"{bn}.running_mean"] + BN_MOMENTUM * mu,
           f"{bn}.running_var": (1 - BN_MOMENTUM) * s[f"{bn}.running_var"]
           + BN_MOMENTUM * lax.stop_gradient(var) * n / (n - 1)}
    new = {k: lax.stop_gradient(v) for k, v in new.items()}
    return (y - mu) * lax.rsqrt(var + BN_EPS) * p[f"{bn}.gamma"] + p[f"{bn}.beta"], new


def resnet_forward(p, s, x):
    new = {}
    h, u = conv_bn(x, p, s, "stem")
    new.update(u)
    h = jax.nn.relu(h)
    for name, (_, _, stride) in zip(common.RESNET_BLOCKS, common.RESNET_STAGES):
        a, u1 = conv_bn(h, p, s, f"{name}.c1", stride)
        a, u2 = conv_bn(jax.nn.relu(a), p, s, f"{name}.c2")
        new.update(u1)
        new.update(u2)
        short = h if stride == 1 else conv(h, p[f"{name}.proj"], stride)
        h = jax.nn.relu(short + a)
    return dense(jnp.mean(h, axis=(1, 2)), p, "head"), new


# ---------------------------------------------------------------- lstm, gru
def lstm_forward(p, s, x):
    hid = common.RNN["hidden"]

    def cell(carry, xt):
        h, c = carry
        z = xt @ p["rnn.wx"] + h @ p["rnn.wh"] + p["rnn.b"]
        i, f, g, o = (z[:, k * hid:(k + 1) * hid] for k in range(4))
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), None

    zero = jnp.zeros((x.shape[0], hid), jnp.float32)
    (h, _), _ = lax.scan(cell, (zero, zero), x.transpose(1, 0, 2))
    return dense(h, p, "head"), s


def gru_forward(p, s, x):
    hid = common.RNN["hidden"]

    def cell(h, xt):
        gx = xt @ p["rnn.wx"] + p["rnn.bx"]
        gh = h @ p["rnn.wh"] + p["rnn.bh"]
        r = jax.nn.sigmoid(gx[:, :hid] + gh[:, :hid])
        z = jax.nn.sigmoid(gx[:, hid:2 * hid] + gh[:, hid:2 * hid])
        n = jnp.tanh(gx[:, 2 * hid:] + r * gh[:, 2 * hid:])
        return (1 - z) * n + z * h, None

    h, _ = lax.scan(cell, jnp.zeros((x.shape[0], hid), jnp.float32), x.transpose(1, 0, 2))
    return dense(h, p, "head"), s


FORWARD = {"gpt": gpt_forward, "resnet": resnet_forward, "lstm": lstm_forward, "gru": gru_forward}


def make_step(kind):
    forward, lr = FORWARD[kind], common.LR[kind]
    b1, b2, eps = common.B1, common.B2, common.EPS

    def loss_fn(p, s, x, y):
        logits, new_s = forward(p, s, x)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1)), new_s

    def step(p, m, v, s, t, x, y):
        (loss, s), g = jax.value_and_grad(loss_fn, has_aux=True)(p, s, x, y)
        t = t + 1
        m = jax.tree.map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
        v = jax.tree.map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree.map(lambda p_, m_, v_: p_ - lr * (m_ / c1) / (jnp.sqrt(v_ / c2) + eps), p, m, v)
        return p, m, v, s, t, loss

    return jax.jit(step, donate_argnums=(0, 1, 2, 3))


def bench(kind):
    weights = common.load_params(kind)
    states = {k: jnp.asarray(a) for k, a in weights.items() if ".running_" in k}
    params = {k: jnp.asarray(a) for k, a in weights.items() if ".running_" not in k}
    x, y = common.load_batch(kind)
    x, y = jnp.asarray(x), jnp.asarray(y.reshape(-1))
    st = {"p": params, "m": jax.tree.map(jnp.zeros_like, params), "v": jax.tree.map(jnp.zeros_like, params),
          "s": states, "t": jnp.zeros((), jnp.float32)}
    step_fn = make_step(kind)

    def step():
        st["p"], st["m"], st["v"], st["s"], st["t"], loss = step_fn(st["p"], st["m"], st["v"], st["s"], st["t"], x, y)
        return loss.block_until_ready()

    r = common.time_loop(step, args.warmup, args.steps)
    r.update(framework="jax", who="jax", variant="jit", model=kind, jax=jax.__version__, import_s=round(import_s, 2))
    return r


if __name__ == "__main__":
    for m in args.models:
        common.emit(args, bench(m))
