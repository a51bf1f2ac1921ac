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
