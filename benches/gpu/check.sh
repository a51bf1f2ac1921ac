#!/usr/bin/env bash
# The GPU check, for a machine with a real GPU (a session lent one runs
# this in one call): which adapter wgpu picks, the GPU tests against the
# interpreter on it, and the MLP and CNN training steps timed on the GPU
# and on the CPU in the same run (`tfc bench`, median step of 100).
# Usage: benches/gpu/check.sh   (from the repository root; needs cargo and
# a Vulkan driver: NVIDIA's, or mesa-vulkan-drivers for lavapipe)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --features gpu 2>&1 | tail -1
TFC=target/release/tfc
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; commit $(git rev-parse --short HEAD); $(date -u '+%F %H:%M UTC')"
echo 'print(1)' > /tmp/tfc-gpu-probe.tfl
"$TFC" run /tmp/tfc-gpu-probe.tfl --device auto 2>&1 | head -1
timeout 900 cargo test --release --features gpu --test gpu 2>&1 | grep -E '^test |test result'
for model in mlp cnn; do
  for device in cpu gpu; do
    printf '%s on %s: ' "$model" "$device"
    "$TFC" bench "examples/bench/$model.tfl" --device "$device" --json 2>/dev/null | grep '"kind":"train"' | head -1 |
      sed 's/.*"step_ms":{"median":\([0-9.]*\).*/median step \1 ms/'
  done
done
