#!/usr/bin/env python3
"""Writes the zoo's initial weights and fixed batches into examples/zoo/bench/data/.

  <model>_init.safetensors  the weights (and BatchNorm states) of examples/zoo/bench/<model>.tfl
                            under tfc's names (`blocks.0.att.q.w`, `stem.bn.running_var`),
                            f32, row-major, tfc's layouts (Dense w as [in, out], conv w as
                            HWIO), drawn in the order of common.param_specs from one numpy
                            default_rng(0): Glorot-uniform Dense weights, zero biases,
                            LayerNorm/BatchNorm ones and zeros, N(0, 0.02) GPT embeddings,
                            He-normal convolutions, U(±1/sqrt(128)) LSTM/GRU weights
  <model>_batch.npz         the fixed batch, parts x then y: gpt x, y i32[16, 128] (y is x
                            shifted by one: tokens [16, 129] uniform in 0..64 from
                            default_rng(2)); resnet x f32[64, 28, 28, 1], lstm and gru
                            x f32[128, 28, 28], all x ~ N(0, 1) from default_rng(1), labels
                            y i32 uniform in 0..9 from default_rng(2)

Usage: python benches/zoo/make_data.py   (numpy and safetensors; the generators are stable,
so every run writes the same bits)
"""
import os

import common
import numpy as np
from safetensors.numpy import save_file


def main():
    os.makedirs(common.DATA, exist_ok=True)
    for m in common.MODELS:
        save_file(common.draw_params(m), common.init_path(m), metadata={"source": "benches/zoo/make_data.py"})
        # np.savez keeps the keyword order: tfc's load_npy gives one part per array in that order.
        np.savez(common.batch_path(m), **common.draw_batch(m))
    for f in sorted(os.listdir(common.DATA)):
        print(f"wrote examples/zoo/bench/data/{f} ({os.path.getsize(os.path.join(common.DATA, f))} bytes)")


if __name__ == "__main__":
    main()
