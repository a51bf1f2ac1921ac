#!/usr/bin/env bash
# benches/peers/run.sh — tfc and its peers on the canonical problems, in ONE run.
#
# Times, one after the other on this machine, at one thread:
#   MLP b64, MLP b256, CNN b64 training steps (examples/bench/{mlp,mlp256,cnn}.tfl for
#   tfc; the peers' bench_*.py --bench mlp|cnn), 20 warm-up + 200 timed steps each, and
#   SGEMM n = 1024 (benches/peers/sgemm.tfl for tfc; the peers' --bench sgemm),
# then prints markdown tables of the medians, tfc's ratio to each peer, and the losses
# of step 1 and step 220 next to the oracle (../shared/bench/README.md).
#
# Usage: benches/peers/run.sh            (from anywhere; prints the tables on stdout)
# Environment:
#   TFC      the tfc binary            (default: target/release/tfc; build it first:
#                                       cargo build --release)
#   PY       the peers' Python         (default: /work/.venv-anchors/bin/python; make it with
#                                       ../shared/bench/setup_venv.sh)
#   PEERS    the peers' scripts        (default: ../shared/bench beside the repository)
#   OUT      the raw JSON lines        (default: a temporary file; kept and named at the end)
#   SKIP     space-separated peers to leave out, among: jax tf tf-xla torch torch-compile numpy
#   STEPS, WARMUP                      (default 200 and 20, as the peers' defaults)
# A peer that is not installed (an import fails) is reported and left out of the tables.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
TFC=${TFC:-$repo/target/release/tfc}
PY=${PY:-/work/.venv-anchors/bin/python}
PEERS=${PEERS:-$(cd "$repo/.." && pwd)/shared/bench}
OUT=${OUT:-$(mktemp -t tfc-peers-XXXXXX.jsonl)}
SKIP=${SKIP:-}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}

[ -x "$TFC" ] || { echo "run.sh: no tfc binary at $TFC (cargo build --release)" >&2; exit 1; }
[ -x "$PY" ] || { echo "run.sh: no Python at $PY (see ../shared/bench/README.md)" >&2; exit 1; }
[ -f "$PEERS/common.py" ] || { echo "run.sh: the peers' scripts are not in $PEERS" >&2; exit 1; }
: > "$OUT"

skipped() { case " $SKIP " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# record WORKLOAD WHO CMD...: runs CMD, keeps the JSON lines it prints (stdout lines that
# start with `{`), each tagged with the workload and who ran it.
record() {
    local workload=$1 who=$2
    shift 2
    echo "[$(date +%H:%M:%S)] $workload: $who" >&2
    local log
    log=$(mktemp)
    if ! "$@" > "$log" 2> "$log.err"; then
        echo "  failed (left out): $(tail -n 3 "$log.err" | tr '\n' ' ')" >&2
    fi
    grep '^{' "$log" | "$PY" -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    r["workload"], r["who"] = sys.argv[1], sys.argv[2]
    print(json.dumps(r, sort_keys=True))' "$workload" "$who" >> "$OUT"
    rm -f "$log" "$log.err"
}

peer() {  # peer WORKLOAD WHO SCRIPT ARGS...
    local workload=$1 who=$2 script=$3
    shift 3
    skipped "$who" && return 0
    record "$workload" "$who" "$PY" "$PEERS/$script" --threads 1 --warmup "$WARMUP" --steps "$STEPS" --out '' "$@"
}

have_torch=1
"$PY" -c 'import torch' 2> /dev/null || { have_torch=0; echo "run.sh: torch is not installed, left out" >&2; }

for w in "mlp 64 mlp.tfl" "mlp 256 mlp256.tfl" "cnn 64 cnn.tfl"; do
    set -- $w
    name="$1-b$2"
    record "$name" tfc "$TFC" bench "$repo/examples/bench/$3" --backend jit --threads 1 --warmup "$WARMUP" --steps "$STEPS" --json
    peer "$name" jax bench_jax.py --bench "$1" --batch "$2"
    peer "$name" tf bench_tf.py --bench "$1" --batch "$2"
    peer "$name" tf-xla bench_tf.py --bench "$1" --batch "$2" --xla
    if [ $have_torch = 1 ]; then
        peer "$name" torch bench_torch.py --bench "$1" --batch "$2" --mode eager
        peer "$name" torch-compile bench_torch.py --bench "$1" --batch "$2" --mode compile
    fi
done

record sgemm tfc "$TFC" bench "$here/sgemm.tfl" --backend jit --threads 1 --warmup 3 --steps 30 --json
skipped numpy || record sgemm numpy env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" "$PEERS/bench_numpy.py" --threads 1 --bench sgemm --out ''
peer sgemm jax bench_jax.py --bench sgemm
peer sgemm tf bench_tf.py --bench sgemm
[ $have_torch = 1 ] && peer sgemm torch bench_torch.py --bench sgemm

echo "raw results: $OUT" >&2
"$PY" "$here/table.py" "$OUT"
