#!/usr/bin/env bash
# Data-parallel throughput of tfc against TensorFlow's
# MultiWorkerMirroredStrategy, same machine, same run: the MLP (per-rank
# batch 256) and the CNN (per-rank batch 64) on 1 and 2 processes, one
# thread each. Weak scaling keeps the per-rank batch (the global batch
# doubles); strong scaling keeps the global batch (each rank gets half).
# tfc's figure is the examples per second of its last progress line (the
# median of 3 runs); TF's is its script's median step.
# Usage: benches/dist/run.sh [TFC] [PYTHON]   (TFC built with --features mpi)
set -euo pipefail
cd "$(dirname "$0")"
TFC=${1:-../../target/release/tfc}
PY=${2:-/work/.venv-tf/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# median examples/s of 3 runs of `tfc run` on MODEL with global BATCH.
tfc_rate() {
  local model=$1 batch=$2 epochs=$3; shift 3
  sed "s/BATCH/$batch/g; s/EPOCHS/$epochs/" "$model.tfl" > "$work/$model-$batch.tfl"
  for i in 1 2 3; do
    "$TFC" run "$work/$model-$batch.tfl" --threads 1 "$@" 2>&1 | grep -o '[0-9]* ex/s' | tail -1 | cut -d' ' -f1
  done | sort -n | sed -n 2p
}

# TF's examples/s on MODEL with N workers of per-worker batch B.
tf_rate() {
  local model=$1 n=$2 b=$3 port=$((20000 + RANDOM % 20000))
  for ((i = 1; i < n; i++)); do "$PY" tf_mwms.py "$model" "$n" "$i" "$port" "$b" >/dev/null 2>&1 & done
  "$PY" tf_mwms.py "$model" "$n" 0 "$port" "$b" 2>/dev/null | tail -1 | sed 's/.*"examples_per_s": \([0-9]*\).*/\1/'
  wait
}

echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; commit $(git rev-parse --short HEAD); $(date -u +%F)"
printf '%-5s %-26s %12s %12s\n' model run tfc_ex_s tf_ex_s
for spec in "mlp 256 30" "cnn 64 6"; do
  read -r model b epochs <<< "$spec"
  one=$(tfc_rate "$model" "$b" "$epochs")
  weak=$(tfc_rate "$model" $((2 * b)) "$epochs" --workers 2 --shards 2)
  strong=$(tfc_rate "$model" "$b" "$epochs" --workers 2 --shards 2)
  tf_one=$(tf_rate "$model" 1 "$b")
  tf_weak=$(tf_rate "$model" 2 "$b")
  tf_strong=$(tf_rate "$model" 2 $((b / 2)))
  printf '%-5s %-26s %12s %12s\n' "$model" "1 rank, batch $b" "$one" "$tf_one"
  printf '%-5s %-26s %12s %12s\n' "$model" "2 ranks, weak (2x$b)" "$weak" "$tf_weak"
  printf '%-5s %-26s %12s %12s\n' "$model" "2 ranks, strong (2x$((b / 2)))" "$strong" "$tf_strong"
  awk -v a="$one" -v w="$weak" -v s="$strong" -v ta="$tf_one" -v tw="$tf_weak" -v ts="$tf_strong" -v m="$model" \
    'BEGIN { printf "%-5s scaling: tfc weak %.2fx strong %.2fx; TF weak %.2fx strong %.2fx; tfc/TF at 2 ranks weak %.2fx\n", m, w/a, s/a, tw/ta, ts/ta, w/tw }'
  # The split of a weak-scaling step: gradients, exchange, update.
  sed "s/BATCH/$((2 * b))/g; s/EPOCHS/$epochs/" "$model.tfl" > "$work/split.tfl"
  "$TFC" run "$work/split.tfl" --threads 1 --workers 2 --shards 2 --verbose 2>&1 | grep '^data-parallel' | sed "s/^/$model /"
done
