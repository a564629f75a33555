"""The prefill logits of a model sharded by mlx-lm itself over MLX's ring
backend: run once per rank with MLX_RANK and MLX_HOSTFILE set, as mlx.launch
starts its ranks. Rank 0 writes the logits (float32, [T, vocab]) as .npy.

usage: mlxlm_shard.py MODEL_DIR TOKENS(1,2,3) OUT.npy
"""
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.utils import load_model


def main():
    model_dir, tokens, out = sys.argv[1], sys.argv[2], sys.argv[3]
    group = mx.distributed.init(strict=True, backend="ring")
    model, _ = load_model(Path(model_dir))
    model.shard(group)
    ids = mx.array([[int(t) for t in tokens.split(",")]])
    logits = model(ids)[0].astype(mx.float32)
    mx.eval(logits)
    if group.rank() == 0:
        np.save(out, np.array(logits))


if __name__ == "__main__":
    main()
