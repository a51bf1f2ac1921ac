#!/usr/bin/env bash
# scripts/gpu-check.sh — the one-command check of tfc's GPU backend on a
# machine with a real GPU, which needs no Rust toolchain there.
#
#   scripts/gpu-check.sh pack [BUNDLE.tar.gz]
#       Here (a machine that builds tfc): `cargo build --release --features
#       gpu`, then a bundle of the binary, this script, the programs it runs
#       and, when apt can fetch it, Debian's libvulkan1 unpacked (the Vulkan
#       loader, for a GPU machine that lacks one). Default: tfc-gpu-check.tar.gz.
#   scripts/gpu-check.sh [RESULTS]
#       There (in the unpacked bundle, or in a checkout after the release
#       build): writes RESULTS (default gpu-check-results.txt) and prints it:
#         - the adapter wgpu picks (`tfc run --device auto`);
#         - correctness: every run case (tests/cases/run) and the MLP and CNN
#           benchmark programs (219 Adam steps each) print the same values on
#           `--device gpu` as on `--device cpu` (numbers within 1e-3
#           relative, as tests/gpu.rs);
#         - step times (`tfc bench`, median of 100 steps) of the MLP, CNN and
#           transformer training steps on the GPU and the CPU;
#         - a memory-bound step's effective bandwidth
#           (scripts/gpu-check/bandwidth.tfl: 20 bytes per weight) as a
#           fraction of the device's copy bandwidth measured by PyTorch, or
#           of its data-sheet peak when PyTorch is missing;
#         - PyTorch CUDA's step times for the same models when
#           `python3 -c 'import torch'` works (scripts/gpu-check/torch_peer.py).
#       It takes under 5 minutes on a data-center GPU.
# Environment: TFC (the binary; default ./tfc, else target/release/tfc),
# PYTHON (default python3), VK_DRIVER_FILES (an ICD json, found or written
# for NVIDIA's driver when unset and the loader finds none), QUICK=1 (a
# trial of the script itself on a slow device such as lavapipe: 3 timed
# steps, and the benchmark programs left out of the correctness run).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = pack ]; then
    repo=$(cd "$here/.." && pwd)
    bundle=$(realpath -m "${2:-tfc-gpu-check.tar.gz}")
    (cd "$repo" && cargo build --release --features gpu) || exit 1
    stage=$(mktemp -d)
    root="$stage/tfc-gpu-check"
    mkdir -p "$root/scripts" "$root/tests/cases" "$root/examples"
    cp "$repo/target/release/tfc" "$root/tfc"
    # Without its debug information: a fifth of the size.
    strip "$root/tfc" 2>/dev/null || true
    cp "$repo/scripts/gpu-check.sh" "$root/scripts/"
    cp -r "$repo/scripts/gpu-check" "$root/scripts/"
    cp -r "$repo/tests/cases/run" "$root/tests/cases/"
    cp -r "$repo/examples/bench" "$root/examples/"
    cp "$repo/examples/transformer.tfl" "$root/examples/"
    # The Vulkan loader, unpacked (a GPU machine may have the driver but not
    # the loader); leaving it out only means the loader must be there.
    if (cd "$stage" && apt-get download libvulkan1 >/dev/null 2>&1); then
        dpkg -x "$stage"/libvulkan1_*.deb "$root/vulkan" && rm -f "$stage"/libvulkan1_*.deb
    else
        echo "gpu-check: could not fetch libvulkan1; the bundle relies on the GPU machine's loader" >&2
    fi
    tar -C "$stage" -czf "$bundle" tfc-gpu-check && rm -rf "$stage"
    echo "gpu-check: wrote $bundle ($(du -h "$bundle" | cut -f1)); on the GPU machine:"
    echo "  tar xzf $(basename "$bundle") && cd tfc-gpu-check && scripts/gpu-check.sh"
    exit 0
fi

root=$(cd "$here/.." && pwd)
cd "$root" || exit 1
results=$(realpath -m "${1:-gpu-check-results.txt}")
TFC=${TFC:-}
if [ -z "$TFC" ]; then
    if [ -x ./tfc ]; then TFC=./tfc; else TFC=target/release/tfc; fi
fi
[ -x "$TFC" ] || { echo "gpu-check: no tfc binary at $TFC (scripts/gpu-check.sh pack, or cargo build --release --features gpu)" >&2; exit 1; }
PYTHON=${PYTHON:-python3}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}

# The Vulkan loader: the system's, else the bundle's.
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 ' && [ -d vulkan ]; then
    export LD_LIBRARY_PATH="$root/vulkan/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# NVIDIA's ICD: a container may have the driver's libraries without the
# json that points the loader at them.
if [ -z "${VK_DRIVER_FILES:-}" ]; then
    icd=$(ls /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -n 1)
    if [ -z "$icd" ] && ldconfig -p 2>/dev/null | grep -q libGLX_nvidia.so.0; then
        icd="$root/nvidia_icd.json"
        printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.3"}}\n' > "$icd"
    fi
    [ -n "$icd" ] && export VK_DRIVER_FILES="$icd"
fi

: > "$results"
say() { echo "$*" | tee -a "$results"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say "# tfc GPU check, $(date -u '+%F %H:%M UTC')"
say "tfc: $("$TFC" --version 2>&1 | head -n 1); host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
command -v nvidia-smi >/dev/null && say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)"
echo 'print(1)' > "$work/probe.tfl"
say "adapter: $("$TFC" run "$work/probe.tfl" --device auto 2>&1 >/dev/null | head -n 1)"
if ! "$TFC" run "$work/probe.tfl" --device gpu >/dev/null 2>"$work/err"; then
    say "no GPU: $(head -n 3 "$work/err" | tr '\n' ' ')"
    exit 1
fi

# Correctness: every program prints what the CPU backend prints.
compare() {
    if command -v "$PYTHON" >/dev/null; then
        "$PYTHON" scripts/gpu-check/compare.py "$1" "$2" 1e-3
    else
        cmp -s "$1" "$2" || { echo "differs (no python3 to compare numbers within 1e-3)"; return 1; }
    fi
}
QUICK=${QUICK:-}
steps=100
warmup=10
programs=(tests/cases/run/*.tfl examples/bench/mlp.tfl examples/bench/cnn.tfl)
if [ -n "$QUICK" ]; then
    steps=3
    warmup=1
    programs=(tests/cases/run/*.tfl)
fi
passed=0
failed=()
for program in "${programs[@]}"; do
    for device in gpu cpu; do
        timeout 120 "$TFC" run "$program" --device "$device" > "$work/$device.out" 2> "$work/$device.err"
        echo "exit $?" >> "$work/$device.out"
    done
    if why=$(compare "$work/gpu.out" "$work/cpu.out"); then
        passed=$((passed + 1))
    else
        failed+=("$program: $why")
    fi
done
say "correctness: $passed of $((passed + ${#failed[@]})) programs print the CPU's values on the GPU"
for f in "${failed[@]}"; do say "  FAILED $f"; done

# Step times.
median() { sed -n 's/.*"step_ms":{"median":\([0-9.]*\).*/\1/p' | head -n 1 | awk '{ printf "%.3f", $1 }'; }
declare -A tfc_ms
say ""
say "median training step of $steps (tfc bench; PyTorch: scripts/gpu-check/torch_peer.py):"
say "| model | tfc --device gpu (ms) | tfc --device cpu (ms) | PyTorch CUDA (ms) |"
say "|---|---|---|---|"
for model in mlp cnn transformer; do
    file=examples/bench/$model.tfl
    [ "$model" = transformer ] && file=examples/transformer.tfl
    for device in gpu cpu; do
        tfc_ms[$model.$device]=$(timeout 120 "$TFC" bench "$file" --device "$device" --steps "$steps" --warmup "$warmup" --json 2>/dev/null | grep '"kind":"train"' | median)
    done
done
torch_json=""
if "$PYTHON" -c 'import torch' 2>/dev/null; then
    torch_json=$(timeout 180 "$PYTHON" scripts/gpu-check/torch_peer.py 2>"$work/torch.err")
fi
for model in mlp cnn transformer; do
    torch_ms=$(echo "$torch_json" | grep "\"model\": \"$model\"" | sed -n 's/.*"step_ms_median": \([0-9.]*\).*/\1/p')
    say "| $model | ${tfc_ms[$model.gpu]:-failed} | ${tfc_ms[$model.cpu]:-failed} | ${torch_ms:-no torch} |"
done
[ -z "$torch_json" ] && say "(PyTorch CUDA: $(head -n 1 "$work/torch.err" 2>/dev/null || echo 'python3 -c "import torch" fails'))"

# Bandwidth of a memory-bound step against the device's peak.
# 32M weights (640 MB a step, so launch costs do not dominate); a quick
# trial takes 1M, which lavapipe's 128 MiB bindings hold.
weights=33554432
[ -n "$QUICK" ] && weights=1048576
sed "s/33554432/$weights/g" scripts/gpu-check/bandwidth.tfl > "$work/bandwidth.tfl"
bw_ms=$(timeout 120 "$TFC" bench "$work/bandwidth.tfl" --device gpu --steps "$steps" --warmup "$warmup" --json 2>"$work/bw.err" | grep '"kind":"train"' | median)
peak=$(echo "$torch_json" | sed -n 's/.*"copy_gb_per_s": \([0-9.]*\).*/\1/p')
peak_from="PyTorch's measured device-to-device copy"
if [ -z "$peak" ]; then
    name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    case "$name" in
        *H200*) peak=4800 ;; *H100*PCIe*) peak=2000 ;; *H100*) peak=3350 ;;
        *A100*80GB*) peak=2039 ;; *A100*) peak=1555 ;; *L40S*) peak=864 ;; *L4*) peak=300 ;;
        *A10*) peak=600 ;; *T4*) peak=320 ;; *4090*) peak=1008 ;;
    esac
    peak_from="the data sheet of ${name:-an unknown device}"
fi
say ""
if [ -n "$bw_ms" ]; then
    gbs=$(awk -v ms="$bw_ms" -v w="$weights" 'BEGIN { printf "%.1f", 20 * w / (ms / 1000) / 1e9 }')
    if [ -n "$peak" ]; then
        say "bandwidth: memory-bound step ($weights weights) $bw_ms ms = $gbs GB/s, $(awk -v a="$gbs" -v p="$peak" 'BEGIN { printf "%.0f", 100 * a / p }')% of $peak GB/s ($peak_from)"
    else
        say "bandwidth: memory-bound step ($weights weights) $bw_ms ms = $gbs GB/s (no peak known for this device)"
    fi
else
    say "bandwidth: the step failed: $(head -n 2 "$work/bw.err" | tr '\n' ' ')"
fi
say ""
say "results: $results"
[ ${#failed[@]} -eq 0 ]
