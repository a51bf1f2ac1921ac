#!/usr/bin/env bash
# benches/transformer/run.sh — tfc against JAX (jax.jit, XLA:CPU) on the training step of
# examples/transformer.tfl, in ONE run.
#
# For each of ROUNDS rounds and each thread count N in THREADS, runs (alternating, so that
# drifts in the machine's load hit both alike)
#   tfc bench examples/transformer.tfl --warmup W --steps S --threads N --json
#   python benches/transformer/bench_jax.py --threads N --warmup W --steps S
# then prints a markdown table: per thread count, the median over the rounds of each
# side's step median (ms), the per-round medians and tfc's / JAX's (below 1: tfc faster).
#
# Usage: benches/transformer/run.sh      (from anywhere; it works from the repository root)
# Environment:
#   TFC      the tfc binary        (default: target/release/tfc; cargo build --release)
#   PY       Python with jax       (default: /work/.venv-anchors/bin/python)
#   ROUNDS   rounds                (default 3)
#   THREADS  thread counts         (default "1 2")
#   STEPS, WARMUP                  (default 200 and 20)
#   OUT      the raw JSON lines    (default: a temporary file; named at the end)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo" || exit 1
TFC=${TFC:-target/release/tfc}
PY=${PY:-/work/.venv-anchors/bin/python}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-"1 2"}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
OUT=${OUT:-$(mktemp -t tfc-transformer-XXXXXX.jsonl)}

[ -x "$TFC" ] || { echo "run.sh: no tfc binary at $TFC (cargo build --release)" >&2; exit 1; }
[ -x "$PY" ] || { echo "run.sh: no Python at $PY (see ../shared/bench/README.md)" >&2; exit 1; }
"$PY" -c 'import jax' 2> /dev/null || { echo "run.sh: $PY cannot import jax" >&2; exit 1; }
: > "$OUT"

# record WHO THREADS ROUND CMD...: runs CMD and keeps the JSON lines it prints on stdout
# (those starting with `{`), each tagged with who ran it, the thread count and the round.
record() {
    local who=$1 n=$2 round=$3
    shift 3
    echo "[$(date +%H:%M:%S)] round $round, $n thread(s): $who" >&2
    local log
    log=$(mktemp)
    if ! "$@" > "$log" 2> "$log.err"; then
        echo "  failed (left out): $(tail -n 3 "$log.err" | tr '\n' ' ')" >&2
    fi
    grep '^{' "$log" | "$PY" -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    r["who"], r["nthreads"], r["round"] = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(r, sort_keys=True))' "$who" "$n" "$round" >> "$OUT"
    rm -f "$log" "$log.err"
}

for round in $(seq 1 "$ROUNDS"); do
    for n in $THREADS; do
        record tfc "$n" "$round" "$TFC" bench examples/transformer.tfl --warmup "$WARMUP" --steps "$STEPS" --threads "$n" --json
        record jax "$n" "$round" "$PY" "$here/bench_jax.py" --threads "$n" --warmup "$WARMUP" --steps "$STEPS"
    done
done

echo "raw results: $OUT" >&2
"$PY" - "$OUT" "$STEPS" "$WARMUP" << 'EOF'
import json, statistics, sys

path, steps, warmup = sys.argv[1], sys.argv[2], sys.argv[3]
recs = {}
with open(path) as f:
    for line in f:
        r = json.loads(line)
        recs.setdefault((r["nthreads"], r["who"]), []).append(r)


def med(r):  # tfc bench --json: step_ms.median; the JAX peer: median_ms
    return r["step_ms"]["median"] if "step_ms" in r else r["median_ms"]


def compile_s(r):
    return r["compile_ms"] / 1e3 if "compile_ms" in r else r["compile_s"]


def cell(rs, f, fmt):
    return fmt.format(statistics.median(f(r) for r in rs)) if rs else "—"


print(f"Transformer training step (examples/transformer.tfl, batch 16), {warmup} warm-up + {steps} timed steps;")
print("medians over the rounds of each run's step median (ms); the rounds columns list each round's median.\n")
print("| threads | tfc ms | JAX jit ms | tfc / JAX | tfc rounds | JAX rounds | compile s (tfc / JAX) | loss first→last (tfc / JAX) |")
print("|---|---|---|---|---|---|---|---|")
for n in sorted({k[0] for k in recs}):
    t, j = recs.get((n, "tfc"), []), recs.get((n, "jax"), [])
    tm = statistics.median(med(r) for r in t) if t else None
    jm = statistics.median(med(r) for r in j) if j else None
    ratio = f"{tm / jm:.2f}" if tm and jm else "—"
    rounds = lambda rs: ", ".join(f"{med(r):.3f}" for r in sorted(rs, key=lambda r: r["round"])) or "—"
    loss = lambda rs: f"{rs[-1]['loss_first']:.4f}→{rs[-1]['loss_last']:.4g}" if rs else "—"
    print(f"| {n} | {cell(t, med, '{:.3f}')} | {cell(j, med, '{:.3f}')} | {ratio} | {rounds(t)} | {rounds(j)} "
          f"| {cell(t, compile_s, '{:.2f}')} / {cell(j, compile_s, '{:.2f}')} | {loss(t)} / {loss(j)} |")
EOF
