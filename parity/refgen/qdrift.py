"""How far mlx-lm's quantized levels are from the same quantized weights
multiplied with float32 sums.

mlx's CPU quantized_matmul, for a bfloat16 input with bfloat16 scales (every
q* level), accumulates in bfloat16; a kernel that sums in float32 is closer
to the exact product and so lands elsewhere. This measures that distance on
the parity cases, with mlx-lm itself on both sides: for each case and
quantized level, mlx-lm's forward over the prompt and its own greedy tokens
(from the committed dumps: the teacher-forced sequence) as it runs, and the
same forward with every quantized_matmul of a half-precision input replaced
by the dequantized weights in float32, a float32 product and one rounding
to the input's dtype. It prints, per level, the largest difference over
every position's logits relative to that position's largest reference
logit, and the case where it happens.

    python parity/refgen/qdrift.py --refs testdata/parity --levels out/parity
"""
import argparse
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.utils import load_model

stock_qmm = mx.quantized_matmul


def f32_qmm(x, w, scales, biases=None, transpose=True, group_size=None, bits=None,
            mode="affine", **kw):
    if x.dtype == mx.float32 or mode != "affine" or biases is None:
        return stock_qmm(x, w, scales, biases, transpose=transpose, group_size=group_size,
                         bits=bits, mode=mode, **kw)
    wd = mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32),
                       group_size=group_size, bits=bits, mode=mode)
    if transpose:
        wd = wd.T
    return (x.astype(mx.float32) @ wd).astype(x.dtype)


def logits(model, seq):
    out = model(mx.array(seq, dtype=mx.int32)[None])[0].astype(mx.float32)
    mx.eval(out)
    return np.array(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--refs", type=Path, default=Path("testdata/parity"))
    ap.add_argument("--levels", type=Path, default=Path("out/parity"))
    args = ap.parse_args()
    index = json.loads((args.refs / "index.json").read_text())
    worst = {}
    for entry in index["cases"]:
        arch, case = entry["arch"], entry["case"]
        refs = json.loads((args.refs / arch / case / "refs.json").read_text())
        for name, lv in refs["levels"].items():
            if not lv.get("bits") or "decode_tokens" not in lv:
                continue
            seq = list(refs["prompt"]) + list(lv["decode_tokens"])[:-1]
            model, _ = load_model(args.levels / arch / case / name)
            mx.quantized_matmul = stock_qmm
            a = logits(model, seq)
            mx.quantized_matmul = f32_qmm
            b = logits(model, seq)
            mx.quantized_matmul = stock_qmm
            rel = float((np.abs(a - b).max(axis=-1) / np.abs(a).max(axis=-1)).max())
            print(f"{arch}/{case:24s} {name:7s} {rel:.4f}", flush=True)
            if rel > worst.get(name, (0, ""))[0]:
                worst[name] = (rel, f"{arch}/{case}")
    for name, (rel, where) in sorted(worst.items()):
        print(f"largest at {name}: {rel:.4f} of the position's scale ({where})")


if __name__ == "__main__":
    sys.exit(main())
