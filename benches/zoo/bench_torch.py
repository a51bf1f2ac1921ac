#!/usr/bin/env python3
"""PyTorch (CPU) peers of examples/zoo/bench/*.tfl: eager and torch.compile training steps.

  python benches/zoo/bench_torch.py --threads 1 --model gpt --mode eager
  python benches/zoo/bench_torch.py --threads 2 --model all --mode compile

Each model is built from torch.nn layers and loaded with the weights of
examples/zoo/bench/data/<model>_init.safetensors (Dense weights transposed to
nn.Linear's [out, in], HWIO convolutions to OIHW, the NHWC batch to NCHW):
  gpt     nn.Embedding + positions, nn.LayerNorm, nn.Linear q, k, v, o and
          F.scaled_dot_product_attention(is_causal=True), gelu(approximate="tanh")
  resnet  nn.Conv2d(bias=False, padding=1), nn.BatchNorm2d(momentum=0.1, eps=1e-5), train mode
  lstm    nn.LSTM(28, 128): weight_ih = wx^T, weight_hh = wh^T, bias_ih = b and bias_hh
          frozen at zero (the zoo's LSTM has one bias; two trained biases would each get
          the whole gradient and move twice as fast under Adam)
  gru     nn.GRU(28, 128): weight_ih = wx^T, weight_hh = wh^T, bias_ih = bx, bias_hh = bh
          (the same gate order r, z, n and n = tanh(W_in x + b_in + r * (W_hn h + b_hn)))
One step: zero_grad(set_to_none) + cross_entropy(model(x), y) + backward + torch.optim.Adam.step.
--mode compile wraps the forward + loss in torch.compile (inductor; AOTAutograd compiles the
backward) and the optimizer step too, as ../shared/bench/bench_torch.py does; a compile that
fails is reported as a record with "error" and the script goes on with the next model.
Threads: torch.set_num_threads(N), set_num_interop_threads(1), OMP/MKL_NUM_THREADS=N.
Inductor's cache is a fresh temporary folder, so first_call_ms is a cold compile.
"""
import common

args = common.early_setup(__doc__, [("--mode", {"default": "eager", "choices": ["eager", "compile"]})])

import atexit  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

os.environ["TORCHINDUCTOR_CACHE_DIR"] = _cache = tempfile.mkdtemp(prefix="zoo-inductor-")
atexit.register(shutil.rmtree, _cache, True)

t_imp = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import_s = time.perf_counter() - t_imp
torch.set_num_threads(args.threads)
torch.set_num_interop_threads(1)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def set_linear(lin, p, name):
    with torch.no_grad():
        lin.weight.copy_(t(p[f"{name}.w"].T))
        lin.bias.copy_(t(p[f"{name}.b"]))
    return lin


def set_norm(norm, p, name):
    with torch.no_grad():
        norm.weight.copy_(t(p[f"{name}.gamma"]))
        norm.bias.copy_(t(p[f"{name}.beta"]))
    return norm


# ---------------------------------------------------------------- gpt
class Block(nn.Module):
    def __init__(self, p, name, g):
        super().__init__()
        d, self.heads = g["d"], g["heads"]
        self.n1 = set_norm(nn.LayerNorm(d, eps=1e-5), p, f"{name}.n1")
        self.q, self.k, self.v, self.o = (set_linear(nn.Linear(d, d), p, f"{name}.att.{c}") for c in "qkvo")
        self.n2 = set_norm(nn.LayerNorm(d, eps=1e-5), p, f"{name}.n2")
        self.up = set_linear(nn.Linear(d, g["hidden"]), p, f"{name}.up")
        self.down = set_linear(nn.Linear(g["hidden"], d), p, f"{name}.down")

    def attention(self, h):
        b, n, d = h.shape

        def split(z):
            return z.view(b, n, self.heads, d // self.heads).transpose(1, 2)

        a = F.scaled_dot_product_attention(split(self.q(h)), split(self.k(h)), split(self.v(h)), is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, n, d))

    def forward(self, h):
        h = h + self.attention(self.n1(h))
        return h + self.down(F.gelu(self.up(self.n2(h)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, p):
        super().__init__()
        g = common.GPT
        self.tok = nn.Embedding(g["vocab"], g["d"])
        with torch.no_grad():
            self.tok.weight.copy_(t(p["tok.table"]))
        self.pos = nn.Parameter(t(p["pos"]).clone())
        self.blocks = nn.ModuleList(Block(p, f"blocks.{i}", g) for i in range(g["layers"]))
        self.norm = set_norm(nn.LayerNorm(g["d"], eps=1e-5), p, "norm")
        self.head = set_linear(nn.Linear(g["d"], g["vocab"]), p, "head")

    def forward(self, ids):
        h = self.tok(ids) + self.pos
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h)).reshape(-1, common.GPT["vocab"])


# ---------------------------------------------------------------- resnet
class ConvBn(nn.Module):
    def __init__(self, p, name, stride=1):
        super().__init__()
        w = p[f"{name}.w"]  # HWIO
        k, _, cin, cout = w.shape
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
        with torch.no_grad():
            self.conv.weight.copy_(t(w.transpose(3, 2, 0, 1)))
            set_norm(self.bn, p, f"{name}.bn")
            self.bn.running_mean.copy_(t(p[f"{name}.bn.running_mean"]))
            self.bn.running_var.copy_(t(p[f"{name}.bn.running_var"]))

    def forward(self, x):
        return self.bn(self.conv(x))


class BasicBlock(nn.Module):
    def __init__(self, p, name, stride):
        super().__init__()
        self.c1 = ConvBn(p, f"{name}.c1", stride)
        self.c2 = ConvBn(p, f"{name}.c2")
        self.proj = None
        if stride != 1:
            w = p[f"{name}.proj"]
            self.proj = nn.Conv2d(w.shape[2], w.shape[3], 1, stride=stride, bias=False)
            with torch.no_grad():
                self.proj.weight.copy_(t(w.transpose(3, 2, 0, 1)))

    def forward(self, x):
        short = x if self.proj is None else self.proj(x)
        return F.relu(short + self.c2(F.relu(self.c1(x))))


class ResNet(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.stem = ConvBn(p, "stem")
        self.blocks = nn.Sequential(*(BasicBlock(p, name, stride)
                                      for name, (_, _, stride) in zip(common.RESNET_BLOCKS, common.RESNET_STAGES)))
        self.head = set_linear(nn.Linear(64, 10), p, "head")

    def forward(self, x):
        h = self.blocks(F.relu(self.stem(x)))
        return self.head(h.mean(dim=(2, 3)))


# ---------------------------------------------------------------- lstm, gru
class Rnn(nn.Module):
    def __init__(self, p, kind):
        super().__init__()
        h = common.RNN["hidden"]
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(common.RNN["cols"], h, batch_first=True)
        with torch.no_grad():
            self.rnn.weight_ih_l0.copy_(t(p["rnn.wx"].T))
            self.rnn.weight_hh_l0.copy_(t(p["rnn.wh"].T))
            if kind == "lstm":
                self.rnn.bias_ih_l0.copy_(t(p["rnn.b"]))
                self.rnn.bias_hh_l0.zero_()
                self.rnn.bias_hh_l0.requires_grad_(False)  # one bias, as the zoo's LSTM
            else:
                self.rnn.bias_ih_l0.copy_(t(p["rnn.bx"]))
                self.rnn.bias_hh_l0.copy_(t(p["rnn.bh"]))
        self.head = set_linear(nn.Linear(h, 10), p, "head")

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def build(kind):
    p = common.load_params(kind)
    x, y = common.load_batch(kind)
    if kind == "gpt":
        return Gpt(p), t(x.astype(np.int64)), t(y.reshape(-1).astype(np.int64))
    if kind == "resnet":
        return ResNet(p), t(x.transpose(0, 3, 1, 2)), t(y.astype(np.int64))  # NHWC -> NCHW
    return Rnn(p, kind), t(x), t(y.astype(np.int64))


def bench(kind):
    model, x, y = build(kind)
    model.train()
    opt = torch.optim.Adam([q for q in model.parameters() if q.requires_grad], lr=common.LR[kind],
                           betas=(common.B1, common.B2), eps=common.EPS)

    def fwd_loss(x, y):
        return F.cross_entropy(model(x), y)

    if args.mode == "compile":
        fwd = torch.compile(fwd_loss)

        @torch.compile(fullgraph=False)
        def opt_step():
            opt.step()
    else:
        fwd, opt_step = fwd_loss, opt.step

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fwd(x, y)
        loss.backward()
        opt_step()
        return loss

    r = common.time_loop(step, args.warmup, args.steps, value=lambda v: v.detach().item())
    variant = "eager" if args.mode == "eager" else "torch.compile(inductor)"
    if os.environ.get("OMP_WAIT_POLICY"):
        variant += " OMP_WAIT_POLICY=" + os.environ["OMP_WAIT_POLICY"]
    r.update(framework="torch", who="torch" if args.mode == "eager" else "torch-compile", variant=variant,
             model=kind, torch=torch.__version__, import_s=round(import_s, 2))
    return r


if __name__ == "__main__":
    for m in args.models:
        try:
            rec = bench(m)
        except Exception as e:  # noqa: BLE001  (a failed compile is a result to report)
            traceback.print_exc()
            rec = {"framework": "torch", "who": "torch" if args.mode == "eager" else "torch-compile", "model": m,
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]}
        common.emit(args, rec)
