#!/usr/bin/env bash
# Weak scaling of a data-parallel model against its ceiling on this host,
# alternated in rounds: one rank at per-rank batch B; two ranks (global
# batch 2B) with their sums through shared memory; the same through MPI
# (TFC_DIST_SHM=0); and two independent one-rank runs at once, which never
# talk (their summed rate is what two ranks could reach with a free
# exchange). One thread each; examples per second of the last progress line.
# Usage: benches/dist/bound.sh [TFC] [ROUNDS]   (env: M=mlp|cnn B=256 E=30)
set -euo pipefail
cd "$(dirname "$0")"
TFC=${1:-../../target/release/tfc}
ROUNDS=${2:-7}
M=${M:-mlp}; B=${B:-256}; E=${E:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s/BATCH/$B/g; s/EPOCHS/$E/" "$M.tfl" > "$work/one.tfl"
sed "s/BATCH/$((2 * B))/g; s/EPOCHS/$E/" "$M.tfl" > "$work/two.tfl"
rate() { grep -o -E '[0-9]+ ex/s' | tail -1 | cut -d' ' -f1; }
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; commit $(git rev-parse --short HEAD); $(date -u +%FT%TZ)"
for _ in $(seq "$ROUNDS"); do
  one=$("$TFC" run "$work/one.tfl" --threads 1 2>&1 | rate)
  shm=$("$TFC" run "$work/two.tfl" --threads 1 --workers 2 --shards 2 2>&1 | rate)
  mpi=$(TFC_DIST_SHM=0 "$TFC" run "$work/two.tfl" --threads 1 --workers 2 --shards 2 2>&1 | rate)
  "$TFC" run "$work/one.tfl" --threads 1 > "$work/a.out" 2>&1 &
  "$TFC" run "$work/one.tfl" --threads 1 > "$work/b.out" 2>&1
  wait
  apart=$(($(rate < "$work/a.out") + $(rate < "$work/b.out")))
  awk -v o="$one" -v s="$shm" -v m="$mpi" -v a="$apart" 'BEGIN {
    printf "one %d  shm %d (%.2fx)  mpi %d (%.2fx)  two apart %d (%.2fx)\n", o, s, s / o, m, m / o, a, a / o }'
done
