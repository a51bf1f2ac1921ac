#!/usr/bin/env bash
# benches/zoo/run.sh — tfc and its peers on the model zoo, in ONE run.
#
# Times, one after the other on this machine, at 1 and then 2 threads, the training
# steps of examples/zoo/bench/{gpt,resnet,lstm,gru}.tfl (tfc bench) and of their peers
# (bench_jax.py; bench_torch.py --mode eager and --mode compile): WARMUP untimed steps
# (the first call, which compiles, among them) then STEPS timed ones, each process on
# one model from the same weights and batch (make_data.py). With the defaults (70 + 30)
# every runner reports the losses of step 1 and step 100, the zoo's oracle.
# Then prints the markdown tables of table.py.
#
# Usage: benches/zoo/run.sh             (from anywhere; the tables go to stdout)
# Environment:
#   TFC      the tfc binary      (default: target/release/tfc; cargo build --release)
#   PY       the peers' Python   (default: /work/.venv-zoo/bin/python; see README.md)
#   OUT      the raw JSON lines  (default: a temporary file; named at the end)
#   THREADS  the thread counts   (default: "1 2")
#   MODELS   the models          (default: "gpt resnet lstm gru")
#   SKIP     peers to leave out, among: jax torch torch-compile
#   STEPS, WARMUP                (default 30 and 70)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
TFC=${TFC:-$repo/target/release/tfc}
PY=${PY:-/work/.venv-zoo/bin/python}
OUT=${OUT:-$(mktemp -t tfc-zoo-XXXXXX.jsonl)}
THREADS=${THREADS:-1 2}
MODELS=${MODELS:-gpt resnet lstm gru}
SKIP=${SKIP:-}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-70}

[ -x "$TFC" ] || { echo "run.sh: no tfc binary at $TFC (cargo build --release)" >&2; exit 1; }
[ -x "$PY" ] || { echo "run.sh: no Python at $PY (see benches/zoo/README.md)" >&2; exit 1; }
: > "$OUT"

skipped() { case " $SKIP " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# record MODEL WHO THREADS CMD...: runs CMD, keeps the JSON lines it prints (stdout lines
# that start with `{`), each tagged with the model, who ran it, the thread count and the
# load average when it finished.
record() {
    local model=$1 who=$2 threads=$3
    shift 3
    skipped "$who" && return 0
    echo "[$(date +%H:%M:%S)] $model, $threads thread(s): $who  (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    local log
    log=$(mktemp)
    if ! "$@" > "$log" 2> "$log.err"; then
        echo "  failed: $(tail -n 3 "$log.err" | tr '\n' ' ')" >&2
    fi
    grep '^{' "$log" | "$PY" -c '
import json, os, sys
for line in sys.stdin:
    r = json.loads(line)
    r["model"], r["who"], r["threads"] = sys.argv[1], sys.argv[2], int(sys.argv[3])
    r["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    print(json.dumps(r, sort_keys=True))' "$model" "$who" "$threads" >> "$OUT"
    rm -f "$log" "$log.err"
}

echo "run.sh: $(uptime)" >&2
for n in $THREADS; do
    for m in $MODELS; do
        record "$m" tfc "$n" "$TFC" bench "$repo/examples/zoo/bench/$m.tfl" --backend jit --threads "$n" \
            --warmup "$WARMUP" --steps "$STEPS" --json
        peer=(--threads "$n" --model "$m" --warmup "$WARMUP" --steps "$STEPS")
        record "$m" jax "$n" "$PY" "$here/bench_jax.py" "${peer[@]}"
        record "$m" torch "$n" "$PY" "$here/bench_torch.py" "${peer[@]}" --mode eager
        record "$m" torch-compile "$n" "$PY" "$here/bench_torch.py" "${peer[@]}" --mode compile
    done
done
echo "run.sh: $(uptime)" >&2
echo "raw results: $OUT" >&2
"$PY" "$here/table.py" "$OUT"
