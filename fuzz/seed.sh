#!/usr/bin/env bash
# Fills fuzz/corpus/check with the seed corpus: every program of the test
# cases, the examples and the std library, one file each (named by content
# hash, so running it again adds nothing). The fuzzer starts from these
# instead of from nothing, so it reaches the tracer in its first minute.
#
# Run from anywhere: fuzz/seed.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/fuzz/corpus/check"
mkdir -p "$out"
find "$root/tests/cases" "$root/examples" "$root/std" "$root/tests/reference" -name '*.tfl' -print0 2>/dev/null |
    while IFS= read -r -d '' file; do
        cp "$file" "$out/$(sha1sum "$file" | cut -c1-16)"
    done
echo "seed corpus: $(ls "$out" | wc -l) files in $out"

# The loaders' corpora (targets npy, safetensors, idx): a small valid file
# of each format, plus the checkpoints and arrays the examples ship.
mkdir -p "$root/fuzz/corpus/npy" "$root/fuzz/corpus/safetensors" "$root/fuzz/corpus/idx"
header="{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
header=$(printf '%-117s' "$header")
{ printf '\x93NUMPY\x01\x00\x76\x00'; printf '%s\n' "$header"; head -c 24 /dev/zero; } > "$root/fuzz/corpus/npy/small.npy"
json='{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"step":"3"}}'
{ printf "\\x$(printf %02x ${#json})\\x00\\x00\\x00\\x00\\x00\\x00\\x00"; printf '%s' "$json"; head -c 16 /dev/zero; } \
    > "$root/fuzz/corpus/safetensors/small.safetensors"
{ printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02'; head -c 8 /dev/urandom; } > "$root/fuzz/corpus/idx/small.idx"
find "$root/examples" -name '*.safetensors' -size -64k -exec cp {} "$root/fuzz/corpus/safetensors/" \;
echo "loader corpora: $(ls "$root/fuzz/corpus/npy" | wc -l) npy, $(ls "$root/fuzz/corpus/safetensors" | wc -l) safetensors, $(ls "$root/fuzz/corpus/idx" | wc -l) idx"

# TFRecord shards (target tfrecord): two records of an Example with a
# float_list and an int64_list, with valid masked CRC-32Cs (a random start
# would never get past the first CRC).
mkdir -p "$root/fuzz/corpus/tfrecord"
python3 - "$root/fuzz/corpus/tfrecord/two.tfrecord" <<'PY'
import struct, sys
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
def field(num, payload):
    return bytes([num << 3 | 2, len(payload)]) + payload
def example(xs, label):
    floats = field(2, field(1, b"".join(struct.pack("<f", x) for x in xs)))
    ints = field(3, field(1, bytes([label])))
    entries = field(1, field(1, b"x") + field(2, floats)) + field(1, field(1, b"y") + field(2, ints))
    return field(1, entries)
out = b""
for xs, label in [([0.5, 1.5], 3), ([2.0, -1.0], 7)]:
    data = example(xs, label)
    length = struct.pack("<Q", len(data))
    out += length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))
open(sys.argv[1], "wb").write(out)
PY
echo "tfrecord corpus: $(ls "$root/fuzz/corpus/tfrecord" | wc -l) files"

# The ONNX decoder's corpus (target onnx): the models tfc ships, and, when
# the test venv is there, the models of ONNX's node test suite (small,
# valid files of every operator; tests/support/onnx_node_cases.py).
mkdir -p "$root/fuzz/corpus/onnx"
find "$root/examples" -name '*.onnx' -exec cp {} "$root/fuzz/corpus/onnx/" \;
python="${TFC_TEST_PYTHON:-$root/.venv-tests/bin/python}"
if [ -x "$python" ]; then
    cases="$(mktemp -d)"
    "$python" "$root/tests/support/onnx_node_cases.py" "$cases" > /dev/null
    find "$cases" -name model.onnx -print0 | while IFS= read -r -d '' file; do
        cp "$file" "$root/fuzz/corpus/onnx/$(sha1sum "$file" | cut -c1-16).onnx"
    done
    rm -rf "$cases"
fi
echo "onnx corpus: $(ls "$root/fuzz/corpus/onnx" | wc -l) models"
