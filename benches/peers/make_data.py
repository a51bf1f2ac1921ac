#!/usr/bin/env python3
"""Writes the peers' initial weights and fixed batches for examples/bench/*.tfl.

The peer benchmarks (../shared/bench, common.py) draw their problems from numpy's
default_rng; tfc's own generator gives other numbers, so to reproduce the peers'
loss oracle the .tfl programs load these files instead of initializing:

  data/mlp_init.safetensors  MLP 784 -> 256 -> 256 -> 10: l1.w l1.b l2.w l2.b l3.w l3.b
                             (w as [in, out], Glorot-uniform from default_rng(0), drawn
                             layer by layer; biases zero)
  data/cnn_init.safetensors  CNN: c1.w [3,3,1,16] c1.b, c2.w [3,3,16,32] c2.b (HWIO),
                             out.w [1568,10] (rows in NHWC-flatten order) out.b; the three
                             weights drawn in that order from one default_rng(0)
  data/batch64.npz           x f32[64, 784] ~ N(0,1) from default_rng(1), y i32[64] uniform
                             0..9 from default_rng(2)
  data/batch256.npz          the same for 256 examples (a fresh draw of 256, as the peers do)

The CNN's batch is the peers' batch_data(64, (28, 28, 1)): standard_normal fills its
output in C order, so it holds exactly batch64.npz's x reshaped to [64, 28, 28, 1]
(checked below); cnn.tfl reshapes in its input pipeline instead of storing it twice.

Names follow tfc's `save`/`load` (a parameter's path in the model: `l1.w`).
Usage (numpy only; any numpy >= 1.17 gives these bits, the generators are stable):
  python3 benches/peers/make_data.py [--check ../shared/bench]
With --check (the default when ../shared/bench/common.py exists) every array is
also compared, bit for bit, with what the peers' common.py produces.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "examples", "bench", "data")
MLP_SIZES = [784, 256, 256, 10]


def glorot(rng, fan_in, fan_out, shape):
    lim = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-lim, lim, size=shape).astype(np.float32)


def mlp_params():
    rng = np.random.default_rng(0)
    out = {}
    for k, (i, o) in enumerate(zip(MLP_SIZES[:-1], MLP_SIZES[1:]), start=1):
        out[f"l{k}.w"] = glorot(rng, i, o, (i, o))
        out[f"l{k}.b"] = np.zeros(o, np.float32)
    return out


def cnn_params():
    rng = np.random.default_rng(0)
    w1 = glorot(rng, 3 * 3 * 1, 3 * 3 * 16, (3, 3, 1, 16))
    w2 = glorot(rng, 3 * 3 * 16, 3 * 3 * 32, (3, 3, 16, 32))
    w3 = glorot(rng, 1568, 10, (1568, 10))
    return {
        "c1.w": w1, "c1.b": np.zeros(16, np.float32),
        "c2.w": w2, "c2.b": np.zeros(32, np.float32),
        "out.w": w3, "out.b": np.zeros(10, np.float32),
    }


def batch_data(batch, shape):
    x = np.random.default_rng(1).standard_normal((batch,) + tuple(shape)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 10, size=batch).astype(np.int32)
    return x, y


def write_safetensors(path, tensors):
    """A minimal safetensors writer: 8-byte little-endian header length, JSON header, data."""
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"source": "benches/peers/make_data.py (numpy default_rng, as ../shared/bench/common.py)"}
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(len(js).to_bytes(8, "little"))
        f.write(js)
        for b in blobs:
            f.write(b)


def check_against_peers(bench_dir, mlp, cnn, batches):
    sys.path.insert(0, bench_dir)
    import common  # the peers' own definitions

    for k, (w, b) in enumerate(common.mlp_params(), start=1):
        assert np.array_equal(w, mlp[f"l{k}.w"]) and np.array_equal(b, mlp[f"l{k}.b"]), f"MLP layer {k}"
    for (w, b), name in zip(common.cnn_params(), ("c1", "c2", "out")):
        assert np.array_equal(w, cnn[f"{name}.w"]) and np.array_equal(b, cnn[f"{name}.b"]), name
    for n, (x, y) in batches.items():
        px, py = common.batch_data(n, (784,))
        assert np.array_equal(px, x) and np.array_equal(py, y), f"batch {n}"
    cx, cy = common.batch_data(64, (28, 28, 1))
    assert np.array_equal(cx, batches[64][0].reshape(64, 28, 28, 1)) and np.array_equal(cy, batches[64][1])
    print(f"checked bit for bit against {os.path.join(bench_dir, 'common.py')}")


def main():
    default_check = os.path.normpath(os.path.join(ROOT, "..", "shared", "bench"))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", default=default_check if os.path.exists(os.path.join(default_check, "common.py")) else "",
                   help="folder of the peers' common.py to compare with ('' = no check)")
    args = p.parse_args()

    mlp, cnn = mlp_params(), cnn_params()
    batches = {n: batch_data(n, (784,)) for n in (64, 256)}
    # The CNN batch is the 64-example MLP batch, reshaped (see the docstring).
    cx, _ = batch_data(64, (28, 28, 1))
    assert np.array_equal(cx.reshape(64, 784), batches[64][0])
    if args.check:
        check_against_peers(args.check, mlp, cnn, batches)

    os.makedirs(OUT, exist_ok=True)
    write_safetensors(os.path.join(OUT, "mlp_init.safetensors"), mlp)
    write_safetensors(os.path.join(OUT, "cnn_init.safetensors"), cnn)
    for n, (x, y) in batches.items():
        # np.savez keeps the keyword order, and tfc's load_npy gives one part per array in that order.
        np.savez(os.path.join(OUT, f"batch{n}.npz"), x=x, y=y)
    for f in sorted(os.listdir(OUT)):
        print(f"wrote {os.path.join('examples/bench/data', f)} ({os.path.getsize(os.path.join(OUT, f))} bytes)")


if __name__ == "__main__":
    main()
