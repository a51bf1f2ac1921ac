"""Shared helpers of the model-zoo peer benchmarks (benches/zoo).

The four zoo models (their shapes are fixed; see README.md):
  gpt     char-level GPT: vocab 65, 4 pre-norm blocks, d_model 128, 4 heads of 32,
          context 128, MLP 128 -> 512 -> 128 with gelu (tanh approximation, tfc's
          `gelu` default), final LayerNorm, Dense(128, 65); batch 16; Adam lr 3e-4
  resnet  MNIST-shaped NHWC [64, 28, 28, 1]: conv3x3(1->16)+BN+relu, 3 stages of two
          basic blocks (16, 32, 64 channels; the first block of stages 2 and 3 has
          stride 2 and a 1x1 stride-2 projection conv, no BN, on the shortcut),
          global average pool, Dense(64, 10); convs without bias; BN momentum 0.1,
          eps 1e-5 (PyTorch), training mode; Adam lr 1e-3
  lstm    28 rows of 28 pixels, batch 128, LSTM hidden 128 (gates i, f, g, o,
          z = x@wx + h@wh + b), the last h -> Dense(128, 10); Adam lr 1e-3
  gru     the same with a GRU (PyTorch's formulation, gates r, z, n); Adam lr 1e-3
All f32; Adam beta 0.9 / 0.999, eps 1e-8; one fixed batch reused every step.

Every peer script calls `early_setup()` FIRST, before numpy or a framework is
imported: the runtimes read their thread-count variables once, when loaded.
"""
import argparse
import json
import os
import platform
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "examples", "zoo", "bench", "data")
MODELS = ["gpt", "resnet", "lstm", "gru"]
LR = {"gpt": 3e-4, "resnet": 1e-3, "lstm": 1e-3, "gru": 1e-3}
B1, B2, EPS = 0.9, 0.999, 1e-8
# The steps whose losses are reported (the oracle): `tfc bench --warmup 70 --steps 30`
# reports steps 1 and 100, so the peers default to the same split.
LOSS_STEPS = (1, 10, 100)

GPT = dict(vocab=65, layers=4, d=128, heads=4, context=128, hidden=512, batch=16)
RESNET_STAGES = [(16, 16, 1), (16, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2), (64, 64, 1)]
RESNET_BLOCKS = ["s1b1", "s1b2", "s2b1", "s2b2", "s3b1", "s3b2"]
RNN = dict(rows=28, cols=28, hidden=128, batch=128)
BATCH = {"gpt": GPT["batch"], "resnet": 64, "lstm": RNN["batch"], "gru": RNN["batch"]}


# ---------------------------------------------------------------- the parameters
def param_specs(model):
    """[(name, shape, init)] in drawing order; `name` is tfc's path of the parameter
    (or state) in examples/zoo/bench/<model>.tfl, `shape` tfc's layout (Dense w as
    [in, out], conv w as HWIO). init: ("glorot", fan_in, fan_out), ("normal", std),
    ("uniform", bound), "zeros", "ones"."""
    s = []

    def dense(name, i, o):
        s.extend([(f"{name}.w", (i, o), ("glorot", i, o)), (f"{name}.b", (o,), "zeros")])

    def norm(name, c):
        s.extend([(f"{name}.gamma", (c,), "ones"), (f"{name}.beta", (c,), "zeros")])

    def conv_bn(name, k, cin, cout):
        s.append((f"{name}.w", (k, k, cin, cout), ("normal", (2.0 / (k * k * cin)) ** 0.5)))  # He normal
        norm(f"{name}.bn", cout)
        s.extend([(f"{name}.bn.running_mean", (cout,), "zeros"), (f"{name}.bn.running_var", (cout,), "ones")])

    if model == "gpt":
        g = GPT
        s.append(("tok.table", (g["vocab"], g["d"]), ("normal", 0.02)))
        s.append(("pos", (g["context"], g["d"]), ("normal", 0.02)))
        for i in range(g["layers"]):
            b = f"blocks.{i}"
            norm(f"{b}.n1", g["d"])
            for p in "qkvo":
                dense(f"{b}.att.{p}", g["d"], g["d"])
            norm(f"{b}.n2", g["d"])
            dense(f"{b}.up", g["d"], g["hidden"])
            dense(f"{b}.down", g["hidden"], g["d"])
        norm("norm", g["d"])
        dense("head", g["d"], g["vocab"])
    elif model == "resnet":
        conv_bn("stem", 3, 1, 16)
        for name, (cin, cout, stride) in zip(RESNET_BLOCKS, RESNET_STAGES):
            conv_bn(f"{name}.c1", 3, cin, cout)
            conv_bn(f"{name}.c2", 3, cout, cout)
            if stride != 1:
                s.append((f"{name}.proj", (1, 1, cin, cout), ("normal", (2.0 / cin) ** 0.5)))
        dense("head", 64, 10)
    elif model in ("lstm", "gru"):
        h, gates = RNN["hidden"], (4 if model == "lstm" else 3)
        u = ("uniform", h ** -0.5)  # PyTorch's default RNN initialization
        s.append(("rnn.wx", (RNN["cols"], gates * h), u))
        s.append(("rnn.wh", (h, gates * h), u))
        if model == "lstm":
            s.append(("rnn.b", (gates * h,), u))
        else:
            s.extend([("rnn.bx", (gates * h,), u), ("rnn.bh", (gates * h,), u)])
        dense("head", h, 10)
    else:
        raise ValueError(model)
    return s


def draw_params(model):
    """{name: f32 array}: the specs drawn in order from one numpy default_rng(0)."""
    import numpy as np

    rng = np.random.default_rng(0)
    out = {}
    for name, shape, init in param_specs(model):
        if init == "zeros":
            a = np.zeros(shape)
        elif init == "ones":
            a = np.ones(shape)
        elif init[0] == "glorot":
            lim = np.sqrt(6.0 / (init[1] + init[2]))
            a = rng.uniform(-lim, lim, size=shape)
        elif init[0] == "normal":
            a = rng.standard_normal(shape) * init[1]
        elif init[0] == "uniform":
            a = rng.uniform(-init[1], init[1], size=shape)
        else:
            raise ValueError(init)
        out[name] = a.astype(np.float32)
    return out


def draw_batch(model):
    """The fixed batch as {part: array}, in the order tfc's load_npy gives the parts."""
    import numpy as np

    if model == "gpt":
        tokens = np.random.default_rng(2).integers(0, GPT["vocab"], size=(GPT["batch"], GPT["context"] + 1))
        tokens = tokens.astype(np.int32)
        return {"x": tokens[:, :-1].copy(), "y": tokens[:, 1:].copy()}
    shape = (28, 28, 1) if model == "resnet" else (28, 28)
    x = np.random.default_rng(1).standard_normal((BATCH[model],) + shape).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 10, size=BATCH[model]).astype(np.int32)
    return {"x": x, "y": y}


def init_path(model):
    return os.path.join(DATA, f"{model}_init.safetensors")


def batch_path(model):
    return os.path.join(DATA, f"{model}_batch.npz")


def load_params(model):
    """The initial weights make_data.py wrote: {name: f32 array}."""
    from safetensors.numpy import load_file

    return load_file(init_path(model))


def load_batch(model):
    """(x, y) of the fixed batch make_data.py wrote."""
    import numpy as np

    with np.load(batch_path(model)) as z:
        return z["x"], z["y"]


# ---------------------------------------------------------------- threads and timing
THREAD_ENV_VARS = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PJRT_NPROC", "XLA_FLAGS",
                   "OMP_WAIT_POLICY"]


def set_thread_env(n):
    """Every thread-count knob on the environment side, as ../shared/bench/common.py sets them."""
    n = str(int(n))
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "PJRT_NPROC"):  # the XLA:CPU PjRt client's thread pool
        os.environ[k] = n
    # XLA: single-threaded Eigen for dots and convolutions when one thread is asked for.
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_cpu_multi_thread_eigen")]
    flags.append("--xla_cpu_multi_thread_eigen=" + ("false" if n == "1" else "true"))
    os.environ["XLA_FLAGS"] = " ".join(flags)


def early_setup(description, extra_args=()):
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", choices=MODELS + ["all"], default="all")
    p.add_argument("--warmup", type=int, default=70, help="untimed steps, the first (compile) call included")
    p.add_argument("--steps", type=int, default=30, help="timed steps (after the warm-up)")
    p.add_argument("--out", default="", help="JSONL file to append to ('' = none, the default)")
    for a, kw in extra_args:
        p.add_argument(a, **kw)
    args = p.parse_args()
    set_thread_env(args.threads)
    args.models = MODELS if args.model == "all" else [args.model]
    return args


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def median(vals):
    s = sorted(vals)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def time_loop(step, warmup, steps, value=float):
    """Runs step() (one training step, synchronized, returning its loss) warmup + steps
    times. The first call (trace, compile) is timed on its own; the losses of the steps
    in LOSS_STEPS (1-based) and of the last step are kept, as full-precision floats."""
    times, losses = [], {}
    first_ms = None
    total = warmup + steps
    for i in range(1, total + 1):
        t0 = time.perf_counter()
        res = step()
        dt = (time.perf_counter() - t0) * 1e3
        if i == 1:
            first_ms = dt
        if i > warmup:
            times.append(dt)
        if i in LOSS_STEPS or i == total:
            losses[str(i)] = value(res)
    s = sorted(times)
    return {
        "first_call_ms": round(first_ms, 3),
        "median_ms": round(median(s), 4) if s else None,
        "min_ms": round(s[0], 4) if s else None,
        "timed_steps": steps,
        "warmup_steps": warmup,
        "losses": losses,
        "loss_first": losses["1"],
        "loss_last": losses[str(total)],
    }


def emit(args, record):
    """Prints one JSON record (and appends it to args.out)."""
    record = dict(record)
    record["threads"] = args.threads
    record["peak_rss_mb"] = round(peak_rss_mb(), 1)
    record["python"] = platform.python_version()
    record["loadavg"] = [round(v, 2) for v in os.getloadavg()]
    record["thread_env"] = {k: os.environ.get(k) for k in THREAD_ENV_VARS}
    record["argv"] = sys.argv[1:]
    line = json.dumps(record, sort_keys=True)
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
