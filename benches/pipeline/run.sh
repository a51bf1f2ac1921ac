#!/bin/sh
# The input-pipeline benchmark of BENCHMARKS.md ("Input pipeline").
# Run from anywhere after `cargo build --release`; prints seconds per epoch
# and per step of the mnist_mlp training step fed by the full pipeline and
# by batches already in memory, and the examples/s of the pipeline alone.
set -e
cd "$(dirname "$0")"
TFC=${TFC:-../../target/release/tfc}
PIPE='train_set |> shuffle(60000, seed = 1) |> batch(64) |> prefetch(auto)'
MEM='train_set |> batch(64) |> cache()'
gen() { sed -e "s/DATA/$1/" -e "s/EPOCHS/$2/" mnist_train.tfl > ".gen-$3.tfl"; }
# Wall-clock milliseconds of one `tfc run`.
ms() {
    s=$(date +%s%N)
    "$TFC" run "$1" > /dev/null 2>&1
    e=$(date +%s%N)
    echo $(( (e - s) / 1000000 ))
}
gen "$PIPE" 1 pipe1; gen "$PIPE" 2 pipe2; gen "$MEM" 1 mem1; gen "$MEM" 2 mem2
printf 'fn prepare(image, label) = (reshape(image, [784]) / 255.0, label)\nlet train_set = load_idx("../../examples/data/mnist/train-images-idx3-ubyte.gz", "../../examples/data/mnist/train-labels-idx1-ubyte.gz") |> map(prepare)\nprint(sum(first(train_set |> batch(64))[0]))\n' > .gen-first.tfl
only=$(ms mnist_pipeline_only.tfl); first=$(ms .gen-first.tfl)
echo "pipeline alone: ${only} ms, startup (load + first batch): ${first} ms"
p1=$(ms .gen-pipe1.tfl); p2=$(ms .gen-pipe2.tfl)
echo "full pipeline: ${p1} ms for 1 epoch, ${p2} ms for 2"
m1=$(ms .gen-mem1.tfl); m2=$(ms .gen-mem2.tfl)
echo "in memory: ${m1} ms for 1 epoch, ${m2} ms for 2"
rm -f .gen-*.tfl
pipe=$((p2 - p1)); mem=$((m2 - m1)); pass=$((only - first))
echo "epoch with the full pipeline:    ${pipe} ms (${p1} ms for 1 epoch, ${p2} ms for 2)"
echo "epoch on batches in memory:      ${mem} ms (${m1} ms for 1 epoch, ${m2} ms for 2)"
echo "step time, pipeline / memory:    $((pipe * 1000 / 938)) us / $((mem * 1000 / 938)) us  (ratio x1000: $((pipe * 1000 / mem)))"
echo "pipeline alone, one pass:        ${pass} ms = $((60000 * 1000 / pass)) examples/s; training consumes $((60000 * 1000 / pipe)) examples/s"
