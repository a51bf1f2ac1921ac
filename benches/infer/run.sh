#!/usr/bin/env bash
# benches/infer/run.sh — the canonical MLP's inference (784-256-256-10, the
# peers' weights), tfc against ONNX Runtime in ONE run, at one thread.
#
# tfc from C: `tfc build --emit lib` writes the program's two `export fn`s
# (batch 1 and batch 64) as a library; tests/library/run_export.c, linked
# with it and target/release/libtfc.a, times single calls (the median of
# CALLS calls). tfc in process: `tfc bench examples/bench/mlp_infer.tfl`
# times the same functions called in process (inputs and outputs as
# tensors). ONNX Runtime: the peers' ../shared/bench/bench_ort.py (its own
# graph of the same weights, one `sess.run` from Python per call, the
# per-call overhead of Python included). The roofline: 34.4 MFLOP at batch
# 64 at this core's FMA peak (benches/infer/fma_peak.c, measured in the same
# run). Each runs ROUNDS times, taking turns; the table has the median of
# the rounds' medians.
#
# Usage: benches/infer/run.sh   (prints a markdown table)
# Environment:
#   TFC     the tfc binary       (default: target/release/tfc; its
#                                 target/release/libtfc.a beside it)
#   PY      a Python with onnxruntime, onnx, numpy, psutil
#                                (default: /work/.venv-zoo/bin/python)
#   PEERS   the peers' scripts   (default: ../shared/bench beside the repository)
#   ROUNDS  (default 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
TFC=${TFC:-$repo/target/release/tfc}
PY=${PY:-/work/.venv-zoo/bin/python}
PEERS=${PEERS:-$(cd "$repo/.." && pwd)/shared/bench}
ROUNDS=${ROUNDS:-3}
[ -x "$TFC" ] || { echo "run.sh: no tfc binary at $TFC (cargo build --release)" >&2; exit 1; }
runtime=$(dirname "$TFC")
[ -f "$runtime/libtfc.a" ] || { echo "run.sh: no libtfc.a beside $TFC (cargo build --release)" >&2; exit 1; }
[ -f "$PEERS/bench_ort.py" ] || { echo "run.sh: no bench_ort.py in $PEERS" >&2; exit 1; }
out=$(mktemp)
lib=$(mktemp -d)
trap 'rm -rf "$out" "$lib"' EXIT
"$TFC" build "$repo/examples/bench/mlp_infer.tfl" --emit lib -o "$lib/mlp" > /dev/null
for f in logits1 logits64; do
    F=$(echo "mlp_$f" | tr a-z A-Z)
    cc -O2 -include "$lib/mlp.h" -DCALL="mlp_$f" -DIN_ELEMS="${F}_X_ELEMENTS" -DOUT_ELEMS="${F}_OUT0_ELEMENTS" \
        -DARENA_BYTES="${F}_ARENA_BYTES" "$repo/tests/library/run_export.c" "$lib/mlp.o" \
        -L"$runtime" -ltfc -lm -lpthread -ldl -Wl,--gc-sections -o "$lib/$f"
    n=$(awk "/define ${F}_X_ELEMENTS/ {print \$3}" "$lib/mlp.h")
    "$PY" -c "import numpy as np; np.linspace(-0.5, 0.5, $n, dtype=np.float32).tofile('$lib/$f.in')"
done
cc -O2 -mavx512f "$here/fma_peak.c" -o "$lib/fma_peak"
echo "peak $("$lib/fma_peak")" >> "$out"
for r in $(seq "$ROUNDS"); do
    echo "[$(date +%H:%M:%S)] round $r" >&2
    echo "c 1 $("$lib/logits1" "$lib/logits1.in" "$lib/out" 20000)" >> "$out"
    echo "c 64 $("$lib/logits64" "$lib/logits64.in" "$lib/out" 2000)" >> "$out"
    "$TFC" bench "$repo/examples/bench/mlp_infer.tfl" --threads 1 --warmup 500 --steps 5000 --json |
        sed 's/^/tfc /' >> "$out"
    (cd "$PEERS" && "$PY" bench_ort.py --threads 1 --bench infer) | grep '^{' | sed 's/^/ort /' >> "$out"
done
"$PY" - "$out" <<'PY'
import json, statistics, sys
tfc, ort, c = {1: [], 64: []}, {1: [], 64: []}, {1: [], 64: []}
peak = None
for line in open(sys.argv[1]):
    who, _, body = line.partition(" ")
    if who == "peak":
        peak = float(body)
    elif who == "c":
        batch, us = body.split()
        c[int(batch)].append(float(us))
    elif who == "tfc":
        r = json.loads(body)
        batch = 1 if r["name"].endswith("logits1") else 64
        tfc[batch].append(r["step_ms"]["median"] * 1e3)
    else:
        for b in json.loads(body)["infer"]:
            ort[b["batch"]].append(b["median_us"])
print("| batch | tfc library, called from C | tfc in process | ONNX Runtime (Python sess.run) | ORT / tfc from C |")
print("|---|---|---|---|---|")
for b in (1, 64):
    l, t, o = statistics.median(c[b]), statistics.median(tfc[b]), statistics.median(ort[b])
    print(f"| {b} | {l:.1f} µs | {t:.1f} µs | {o:.1f} µs | {o / l:.2f}x |")
flops = 2 * 64 * (784 * 256 + 256 * 256 + 256 * 10)
roof = flops / (peak * 1e3)
print(f"\nFMA peak {peak:.1f} GFLOP/s (one core); batch 64: {flops / 1e6:.1f} MFLOP, roofline {roof:.1f} µs; "
      f"tfc from C at {roof / statistics.median(c[64]) * 100:.0f}% of it.")
PY
