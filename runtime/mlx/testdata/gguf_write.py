"""Writes a small GGUF file with llama.cpp's own gguf library, and the values
its tensors hold as .npy files, for runtime/mlx's GGUF test.

Usage: gguf_write.py DIR   (writes DIR/test.gguf and DIR/<tensor>.npy)
"""

import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize


def main():
    d = sys.argv[1]
    rng = np.random.default_rng(5)
    w = GGUFWriter(os.path.join(d, "test.gguf"), "llama")
    w.add_string("test.name", "tiny")
    w.add_uint32("test.count", 7)
    w.add_float32("test.eps", 1e-5)
    w.add_bool("test.flag", True)
    w.add_array("test.words", ["a", "bc", "def"])
    w.add_array("test.numbers", [3, 1, 4])
    tensors = {
        "f32": (T.F32, rng.standard_normal((3, 5)).astype(np.float32)),
        "f16": (T.F16, rng.standard_normal((4, 8)).astype(np.float32)),
        "q8_0": (T.Q8_0, rng.standard_normal((2, 64)).astype(np.float32)),
        "q4_0": (T.Q4_0, rng.standard_normal((3, 64)).astype(np.float32)),
        "q4_1": (T.Q4_1, rng.standard_normal((2, 64)).astype(np.float32)),
    }
    for name, (kind, x) in tensors.items():
        if kind == T.F32:
            data, held = x, x
        elif kind == T.F16:
            data = x.astype(np.float16)
            held = data.astype(np.float32)
        else:
            data = quantize(x, kind)
            held = dequantize(data, kind).astype(np.float32)
        w.add_tensor(name + ".weight", data, raw_dtype=kind)
        np.save(os.path.join(d, name + ".npy"), held)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
