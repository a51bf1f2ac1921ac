#!/usr/bin/env bash
# benches/int8/run.sh — int8 inference of the canonical MLP (784-256-256-10,
# the peers' weights) against tfc's own f32 and ONNX Runtime's
# quantize_dynamic (per-channel s8 weights, dynamic u8 activations), in ONE
# run, one thread, ROUNDS rounds taking turns; prints each round's medians.
# tfc: `tfc bench examples/bench/mlp_int8.tfl` (export fns called in
# process; dynamic and calibrated), and the canonical CNN's inference in
# f32 and int8 (`examples/bench/cnn_int8.tfl`, tfc only). ONNX Runtime: ../shared/bench/bench_ort_int8.py (one `sess.run`
# from Python per call, its overhead included). Peaks: benches/infer/fma_peak.c
# (f32 FMA) measured in the same run.
# Environment: TFC (target/release/tfc), PY (a Python with onnxruntime, onnx,
# numpy), PEERS (../shared/bench), ROUNDS (3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
TFC=${TFC:-$repo/target/release/tfc}
PY=${PY:-/work/.venv-q/bin/python}
PEERS=${PEERS:-$(cd "$repo/.." && pwd)/shared/bench}
ROUNDS=${ROUNDS:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cc -O2 -mavx512f "$repo/benches/infer/fma_peak.c" -o "$tmp/fma_peak"
echo "f32 FMA peak: $("$tmp/fma_peak") GFLOP/s"
for r in $(seq "$ROUNDS"); do
  echo "round $r"
  (cd "$repo/examples/bench" && "$TFC" bench mlp_int8.tfl --threads 1 2>&1 | grep '^export')
  (cd "$repo/examples/bench" && "$TFC" bench cnn_int8.tfl --threads 1 2>&1 | grep '^export')
  "$PY" "$PEERS/bench_ort_int8.py" "$PEERS"
done
