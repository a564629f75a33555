"""Random rows of each of llama.cpp's block-quantized types, and their values
as llama.cpp's own reference dequantization (gguf-py) gives them.

usage: block_ref.py OUT_DIR ROWS VALUES_PER_ROW

For each type NAME it writes NAME.bin (ROWS rows of blocks, raw bytes) and
NAME.npy (float32 [ROWS, VALUES_PER_ROW]). Every byte is random, but the
half-precision scales, which are set to finite values (a few of them
subnormal or zero) so that the values are numbers; MXFP4's exponent bytes
are kept near 2^0 for the same reason.
"""

import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# the byte offsets of each type's float16 fields within a block
HALVES = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0], "MXFP4": [],
}


def main():
    out, rows, k = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    for name, halves in HALVES.items():
        qt = T[name]
        values, size = GGML_QUANT_SIZES[qt]
        assert k % values == 0, (name, k)
        blocks = rng.integers(0, 256, size=(rows * (k // values), size), dtype=np.uint8)
        for off in halves:
            h = rng.uniform(-0.05, 0.05, size=blocks.shape[0]).astype(np.float16)
            h[::17] = np.float16(3e-6)  # subnormal in float16
            h[5::29] = np.float16(0)
            blocks[:, off:off + 2] = h.view(np.uint8).reshape(-1, 2)
        if name == "MXFP4":
            blocks[:, 0] = rng.integers(120, 132, size=blocks.shape[0], dtype=np.uint8)
            blocks[::13, 0] = 0
            blocks[1::13, 0] = 1
        raw = blocks.reshape(rows, -1)
        vals = dequantize(raw, qt).astype(np.float32)
        assert vals.shape == (rows, k), (name, vals.shape)
        raw.tofile(out / f"{name}.bin")
        np.save(out / f"{name}.npy", vals)


if __name__ == "__main__":
    main()
