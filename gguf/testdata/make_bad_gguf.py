"""Writes GGUF files that package gguf must refuse, with llama.cpp's gguf
library, for its fault tests.

Usage: make_bad_gguf.py DIR

  iq2_xxs.gguf a llama file whose token_embd.weight is IQ2_XXS, a type
               archgen's kernels do not run
  tq1_0.gguf   a llama file whose token_embd.weight is TQ1_0, another
  q4_norm.gguf a llama file whose output_norm.weight (a vector) is Q4_0
  q4_k.gguf    a llama file whose token_embd.weight is Q4_K (rows of 256),
               which the tests rewrite to rows of 128
  mamba.gguf   a file of architecture mamba, which has no mapping
  f32.gguf     a llama file of F32 tensors, which the tests cut short
"""

import os
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import GGUFWriter


def write(path, arch, tensors):
    w = GGUFWriter(path, arch)
    w.add_uint32(arch + ".block_count", 1)
    for name, data, kind in tensors:
        w.add_tensor(name, data, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    d = sys.argv[1]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    norm = np.ones(64, dtype=np.float32)
    block, size = GGML_QUANT_SIZES[T.IQ2_XXS]
    write(os.path.join(d, "iq2_xxs.gguf"), "llama", [
        ("output_norm.weight", norm, T.F32),
        ("token_embd.weight", np.zeros((4, 256 // block * size), dtype=np.uint8), T.IQ2_XXS),
    ])
    block, size = GGML_QUANT_SIZES[T.TQ1_0]
    raw = np.zeros((4, 256 // block * size), dtype=np.uint8)
    write(os.path.join(d, "tq1_0.gguf"), "llama", [
        ("output_norm.weight", norm, T.F32),
        ("token_embd.weight", raw, T.TQ1_0),
    ])
    block, size = GGML_QUANT_SIZES[T.Q4_0]
    write(os.path.join(d, "q4_norm.gguf"), "llama", [
        ("output_norm.weight", np.zeros(64 // block * size, dtype=np.uint8), T.Q4_0),
        ("token_embd.weight", x, T.F32),
    ])
    block, size = GGML_QUANT_SIZES[T.Q4_K]
    write(os.path.join(d, "q4_k.gguf"), "llama", [
        ("output_norm.weight", norm, T.F32),
        ("token_embd.weight", np.zeros((4, 256 // block * size), dtype=np.uint8), T.Q4_K),
    ])
    write(os.path.join(d, "mamba.gguf"), "mamba", [("token_embd.weight", x, T.F32)])
    write(os.path.join(d, "f32.gguf"), "llama", [
        ("output_norm.weight", norm, T.F32),
        ("token_embd.weight", x, T.F32),
    ])


if __name__ == "__main__":
    main()
