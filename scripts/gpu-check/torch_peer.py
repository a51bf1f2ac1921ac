"""PyTorch CUDA peers of the GPU check's models, for the same shapes as
tfc's: examples/bench/mlp.tfl (784-256-256-10, ReLU, batch 64),
examples/bench/cnn.tfl (conv 3x3 1->16, pool, conv 3x3 16->32, pool,
dense 1568->10, batch 64), examples/transformer.tfl (2 pre-norm blocks,
d_model 64, 4 heads, context 32, vocab 32, batch 16). One step:
zero_grad + cross_entropy + backward + Adam.step, eager, float32 (TF32
off: tfc's WGSL has no tensor cores). Also the device's copy bandwidth
(a 1 GiB device-to-device copy), the measured peak that scripts/gpu-check.sh
quotes fractions of.

  python3 torch_peer.py [--steps 100] [--warmup 20] [--device cuda|cpu]

(`--device cpu` runs the same models on the CPU: a check of this script
on a machine without CUDA.)

Prints one JSON line per model ({"model", "step_ms_median", "device"}) and
one for the bandwidth ({"copy_gb_per_s"}); exits 3 without CUDA.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
        self.out = nn.Linear(7 * 7 * 32, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.c1(x)), 2)
        h = F.max_pool2d(F.relu(self.c2(h)), 2)
        return self.out(h.flatten(1))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attention(self, h):
        b, t, d = h.shape
        split = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        s = split(self.q(h)) @ split(self.k(h)).transpose(-1, -2) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
        p = torch.softmax(s.masked_fill(~causal, -1e9), -1)
        return self.o((p @ split(self.v(h))).transpose(1, 2).reshape(b, t, d))

    def forward(self, h):
        a = h + self.attention(self.n1(h))
        return a + self.down(F.gelu(self.up(self.n2(a)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab=32, d=64, heads=4, context=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.empty(context, d).uniform_(-0.05, 0.05))
        self.blocks = nn.Sequential(Block(d, heads), Block(d, heads))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.norm(self.blocks(self.tok(ids) + self.pos)))


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def median_step_ms(model, x, y, flat, steps, warmup, dev):
    model = model.to(dev)
    x, y = x.to(dev), y.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]) if flat else out, y.reshape(-1))
        loss.backward()
        opt.step()
        sync(dev)
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("torch_peer.py: torch has no CUDA device here", file=sys.stderr)
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    cases = [
        ("mlp", Mlp(), torch.randn(64, 784), torch.randint(0, 10, (64,)), False),
        ("cnn", Cnn(), torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,)), False),
        ("transformer", Gpt(), torch.randint(0, 32, (16, 32)), torch.randint(0, 32, (16, 32)), True),
    ]
    for model_name, model, x, y, flat in cases:
        ms = median_step_ms(model, x, y, flat, args.steps, args.warmup, dev)
        print(json.dumps({"model": model_name, "step_ms_median": ms, "device": name, "torch": torch.__version__}))
    a = torch.empty(1 << (28 if dev.type == "cuda" else 24), device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    sync(dev)
    start = time.perf_counter()
    reps = 20
    for _ in range(reps):
        b.copy_(a)
    sync(dev)
    seconds = (time.perf_counter() - start) / reps
    print(json.dumps({"copy_gb_per_s": 2 * a.numel() * 4 / seconds / 1e9, "device": name}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
