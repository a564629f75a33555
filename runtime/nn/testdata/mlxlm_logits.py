"""Writes mlx-lm's logits for a model directory, for runtime/nn's fault tests.

Usage: mlxlm_logits.py MODEL_DIR OUT.npy TOKEN,TOKEN,...

The directory is loaded with mlx_lm.utils.load_model and the tokens run
through the model as one batch of one sequence; OUT.npy gets the logits
[L, vocab] as float32.
"""

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.utils import load_model


def main():
    model, _ = load_model(Path(sys.argv[1]))
    tokens = mx.array([[int(t) for t in sys.argv[3].split(",")]])
    logits = model(tokens)[0].astype(mx.float32)
    mx.eval(logits)
    np.save(sys.argv[2], np.array(logits))


if __name__ == "__main__":
    main()
