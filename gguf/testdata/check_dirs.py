"""Checks the model directories package gguf wrote, with mlx-lm and the
Hugging Face libraries.

Usage: check_dirs.py CASES_DIR

For each DIR/<case>/out-<TYPE>/ (written by gguf.WriteDir from
model-<TYPE>.gguf):
  - mlx-lm loads it, and its logits on fixed tokens match mlx-lm's logits for
    the same weights in float form: hf/ itself for F32, and the model of
    hf/config.json with expected-<TYPE>.safetensors otherwise;
  - our Go forward pass on the GGUF file (go_logits.npy, written by the Go
    test) matches mlx-lm's on the directory: the same weights, run by each;
  - its tokenizer.json, loaded by the tokenizers library, encodes a text to the
    ids of the tokenizer transformers builds from the GGUF file itself.
Prints one line per directory and exits non-zero on any mismatch.
"""

import glob
import json
import os
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.utils import _get_classes, load_model
from tokenizers import Tokenizer
from gguf import GGUFReader
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    GGUF_TOKENIZER_MAPPING,
    convert_gguf_tokenizer,
)

TOKENS = [[5, 60, 61, 62, 100, 200, 7, 8, 9, 10, 150, 250]]
TEXT = "the quick brown fox, then 12 dogs!\n  the other fox <|im_start|>user x<|im_end|>"
# Largest logit error allowed, relative to the largest logit. F32 and F16
# weights are the reference's own values, so only summation order differs.
# Quantized modules run MLX's quantized matmul, which dequantizes through
# float16 scales and sums in its own order, where the reference multiplies
# the float32 dequantized weights: a few parts in a thousand. A wrong layout
# (rows out of order, wrong bits or groups) is off by the logits' own size.
# Our forward pass and mlx-lm's on the very same weights: the parity
# matrix's float32 bound (the same ops; summation order aside).
GO_TOL = 1e-4

TOL = {"F32": 1e-4, "F16": 1e-3, "Q8_0": 2e-2, "Q4_0": 2e-2, "Q4_1": 2e-2}


def reference_logits(case_dir, kind):
    if kind == "F32":
        model, _ = load_model(Path(case_dir, "hf"))
    else:
        with open(os.path.join(case_dir, "hf", "config.json")) as f:
            config = json.load(f)
        cls, args = _get_classes(config)
        model = cls(args.from_dict(config))
        model.load_weights(os.path.join(case_dir, f"expected-{kind}.safetensors"))
    return np.array(model(mx.array(TOKENS)).astype(mx.float32))


def field_value(field):
    """A metadata field's value, as gguf's reader holds it."""
    parts = [field.parts[i] for i in field.data]
    if field.types[0].name == "STRING":
        return bytes(parts[0]).decode()
    if field.types[0].name == "ARRAY":
        if field.types[-1].name == "STRING":
            return [bytes(p).decode() for p in parts]
        return [p.tolist()[0] for p in parts]
    return parts[0].tolist()[0]


def reference_tokenizer(path):
    """The tokenizer transformers builds from a GGUF file's vocabulary."""
    fields = GGUFReader(path).fields
    tokenizer_dict = {
        name: field_value(fields["tokenizer." + key])
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
        if "tokenizer." + key in fields
    }
    arch = field_value(fields["general.architecture"])
    tok, _ = convert_gguf_tokenizer(arch, tokenizer_dict)
    return tok


def main():
    bad = 0
    for out in sorted(glob.glob(os.path.join(sys.argv[1], "*", "out-*"))):
        case_dir = os.path.dirname(out)
        kind = os.path.basename(out)[len("out-"):]
        model, _ = load_model(Path(out))
        got = np.array(model(mx.array(TOKENS)).astype(mx.float32))
        want = reference_logits(case_dir, kind)
        err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-9))
        ok = err <= TOL[kind]

        go = np.load(os.path.join(out, "go_logits.npy"))
        go_err = float(np.max(np.abs(go - got)) / (np.max(np.abs(got)) + 1e-9))
        go_ok = go.shape == got.shape and go_err <= GO_TOL
        ok = ok and go_ok

        ref_tok = reference_tokenizer(os.path.join(case_dir, f"model-{kind}.gguf"))
        ours = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        ids_ours = ours.encode(TEXT).ids
        ids_ref = ref_tok.encode(TEXT).ids
        tok_ok = ids_ours == ids_ref and ours.decode(ids_ours) == ref_tok.decode(ids_ref)
        print(f"{os.path.relpath(out, sys.argv[1])}: logits rel err {err:.2e} (tol {TOL[kind]:.0e}), "
              f"go vs mlx-lm {go_err:.2e} (tol {GO_TOL:.0e}) "
              f"{'ok' if ok else 'FAIL'}; tokenizer {'ok' if tok_ok else 'FAIL'}")
        if not tok_ok:
            print("  ours:", ids_ours)
            print("  ref: ", ids_ref)
        bad += (not ok) + (not tok_ok)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
