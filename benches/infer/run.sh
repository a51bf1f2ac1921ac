#!/usr/bin/env bash
# benches/infer/run.sh — the canonical MLP's inference (784-256-256-10, the
# peers' weights), tfc against ONNX Runtime in ONE run, at one thread.
#
# tfc: `tfc bench examples/bench/mlp_infer.tfl` times the program's two
# `export fn`s (batch 1 and batch 64) called in process: the compiled
# function on fixed inputs, with the output copied back (no Python, no
# C boundary). ONNX Runtime: the peers' ../shared/bench/bench_ort.py (its
# own graph of the same weights, one `sess.run` from Python per call, the
# per-call overhead of Python included). Each runs ROUNDS times, taking
# turns; the table has the median of the rounds' medians.
#
# Usage: benches/infer/run.sh   (prints a markdown table)
# Environment:
#   TFC     the tfc binary       (default: target/release/tfc)
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
[ -f "$PEERS/bench_ort.py" ] || { echo "run.sh: no bench_ort.py in $PEERS" >&2; exit 1; }
out=$(mktemp)
for r in $(seq "$ROUNDS"); do
    echo "[$(date +%H:%M:%S)] round $r" >&2
    "$TFC" bench "$repo/examples/bench/mlp_infer.tfl" --threads 1 --warmup 500 --steps 5000 --json |
        sed 's/^/tfc /' >> "$out"
    (cd "$PEERS" && "$PY" bench_ort.py --threads 1 --bench infer) | grep '^{' | sed 's/^/ort /' >> "$out"
done
"$PY" - "$out" <<'PY'
import json, statistics, sys
tfc, ort = {1: [], 64: []}, {1: [], 64: []}
for line in open(sys.argv[1]):
    who, _, body = line.partition(" ")
    r = json.loads(body)
    if who == "tfc":
        batch = 1 if r["name"].endswith("logits1") else 64
        tfc[batch].append(r["step_ms"]["median"] * 1e3)
    else:
        for b in r["infer"]:
            ort[b["batch"]].append(b["median_us"])
print("| batch | tfc (export fn, in process) | ONNX Runtime (Python sess.run) | tfc / ORT |")
print("|---|---|---|---|")
for b in (1, 64):
    t, o = statistics.median(tfc[b]), statistics.median(ort[b])
    print(f"| {b} | {t:.1f} µs | {o:.1f} µs | {t / o:.2f} |")
PY
rm -f "$out"
