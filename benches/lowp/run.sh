#!/usr/bin/env bash
# benches/lowp/run.sh — mixed precision against f32, and tfc against JAX's f32, in ONE run.
#
# Times, one after the other on this machine, at one thread, ROUNDS alternating rounds:
#   - the core's register-only peaks (peak.c: f32 FMA, vdpbf16ps, vpdpbusd, AMX tiles);
#   - bf16 GEMM n = 1024 on every tier this CPU has (bf16_gemm.tfl, TFC_ISA=…), and
#     f32 SGEMM n = 1024 (../peers/sgemm.tfl), each as its step minus its control step;
#   - the MLP b64, MLP b256 and CNN b64 training steps (examples/bench/*.tfl) with
#     --precision f32, bf16 and f16, and JAX's f32 step of the same problem
#     (../shared/bench/bench_jax.py);
# then prints markdown tables of the medians over the rounds.
#
# Usage: benches/lowp/run.sh            (prints the tables on stdout)
# Environment:
#   TFC     the tfc binary      (default: target/release/tfc; cargo build --release)
#   PY      the peers' Python   (default: /work/.venv-anchors/bin/python; without it JAX is left out)
#   PEERS   the peers' scripts  (default: ../shared/bench beside the repository)
#   ROUNDS, STEPS, WARMUP       (default 3, 100, 20)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
TFC=${TFC:-$repo/target/release/tfc}
PY=${PY:-/work/.venv-anchors/bin/python}
PEERS=${PEERS:-$(cd "$repo/.." && pwd)/shared/bench}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-20}
OUT=$(mktemp -t tfc-lowp-XXXXXX.jsonl)

[ -x "$TFC" ] || { echo "run.sh: no tfc binary at $TFC (cargo build --release)" >&2; exit 1; }
have_jax=1
{ [ -x "$PY" ] && "$PY" -c 'import jax' 2> /dev/null; } || { have_jax=0; echo "run.sh: no JAX at $PY, left out" >&2; }

# tag KEY: the JSON lines of stdin, each tagged with "key".
tag() { python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line); r["key"] = sys.argv[1]; print(json.dumps(r))' "$1" >> "$OUT"; }

echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $("$TFC" --version --verbose | tail -1)"
gcc -O2 -mavx512f -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16 -mamx-int8 -o "$OUT.peak" "$here/peak.c" \
    && "$OUT.peak" | tail -n 6 | sed 's/^/peak: /'

tiers=""
for isa in portable avx512 amx; do
    TFC_ISA=$isa "$TFC" --version > /dev/null 2>&1 && TFC_ISA=$isa "$TFC" check "$here/bf16_gemm.tfl" 2> /dev/null \
        && tiers="$tiers $isa"
done
echo "tiers:$tiers"

for round in $(seq "$ROUNDS"); do
    echo "[$(date +%H:%M:%S)] round $round" >&2
    for isa in $tiers; do
        TFC_ISA=$isa "$TFC" bench "$here/bf16_gemm.tfl" --threads 1 --warmup 3 --steps 30 --json | tag "gemm bf16 $isa"
    done
    "$TFC" bench "$repo/benches/peers/sgemm.tfl" --threads 1 --warmup 3 --steps 30 --json | tag "gemm f32"
    for w in "mlp 64 mlp.tfl" "mlp 256 mlp256.tfl" "cnn 64 cnn.tfl"; do
        set -- $w
        for p in f32 bf16 f16; do
            "$TFC" bench "$repo/examples/bench/$3" --precision "$p" --threads 1 --warmup "$WARMUP" --steps "$STEPS" \
                --json | tag "$1-b$2 tfc $p"
        done
        [ $have_jax = 1 ] && "$PY" "$PEERS/bench_jax.py" --bench "$1" --batch "$2" --threads 1 --warmup "$WARMUP" \
            --steps "$STEPS" --out '' 2> /dev/null | tag "$1-b$2 jax f32"
    done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    ms = r["step_ms"]["median"] if "step_ms" in r else r.get("median_ms")
    rows.setdefault(r["key"], []).append((r.get("name", ""), ms))
med = lambda xs: statistics.median(xs)
print("\n| GEMM n = 1024, one thread | step − control (ms) | GFLOP/s |\n|---|---|---|")
for key in sorted(k for k in rows if k.startswith("gemm")):
    steps = [ms for name, ms in rows[key] if name.startswith("train 0")]
    controls = [ms for name, ms in rows[key] if name.startswith("train 1")]
    d = med(steps) - med(controls)
    print(f"| {key[5:]} | {d:.3f} | {2 * 1024**3 / d / 1e6:.0f} |")
print("\n| step, one thread | tfc f32 (ms) | tfc bf16 | tfc f16 | JAX f32 | f32 / bf16 | JAX / bf16 |\n|---|---|---|---|---|---|---|")
for w in ["mlp-b64", "mlp-b256", "cnn-b64"]:
    m = {p: med([ms for _, ms in rows.get(f"{w} tfc {p}", [("", float("nan"))])]) for p in ["f32", "bf16", "f16"]}
    jax = med([ms for _, ms in rows.get(f"{w} jax f32", [("", float("nan"))])])
    print(f"| {w} | {m['f32']:.3f} | {m['bf16']:.3f} | {m['f16']:.3f} | {jax:.3f} | {m['f32'] / m['bf16']:.2f}x | {jax / m['bf16']:.2f}x |")
PY
echo "raw results: $OUT" >&2
