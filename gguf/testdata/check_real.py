"""Compares our run of a real GGUF checkpoint with mlx-lm's on the directory
package gguf converted it to.

Usage: check_real.py MODEL_DIR GO.json

GO.json holds {"prompt": [ids], "logits_file": path of our prefill logits
(.npy, [T, vocab]), "greedy": our greedy continuation, "tol": the bound on
the logits}. mlx-lm loads MODEL_DIR, computes the prefill logits and 16
greedy tokens with its own generate_step; the script prints both errors
and exits non-zero when the logits differ by more than tol (1e-4 if
absent) of their scale or the tokens differ.
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model


def main():
    model, _ = load_model(Path(sys.argv[1]))
    with open(sys.argv[2]) as f:
        ours = json.load(f)
    prompt = ours["prompt"]
    want = np.array(model(mx.array([prompt])).astype(mx.float32))[0]
    got = np.load(ours["logits_file"])
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    tokens = [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=len(ours["greedy"]))]
    print(f"prefill logits: max error {err:.2e} of their scale; greedy mlx-lm {tokens}, ours {ours['greedy']}")
    if err > ours.get("tol", 1e-4) or tokens != ours["greedy"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
