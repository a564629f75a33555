"""mlx-lm's side of the prompt-cache test of a recurrent model
(runtime/nn wkv7_test.go).

Usage:
  prompt_cache_refs.py MODEL_DIR IDS N OUT
      mlx-lm loads the model in MODEL_DIR, runs the first N of IDS (a JSON
      list of token ids) over make_prompt_cache's caches, saves them with
      save_prompt_cache as OUT/cache.safetensors, runs the rest of IDS over
      them, and writes those logits [len(IDS) - N, vocab] as "logits" in
      OUT/logits.safetensors.
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, save_prompt_cache
from mlx_lm.utils import load_model

mx.set_default_device(mx.cpu)


def main(model_dir, ids, n, out):
    model, _ = load_model(Path(model_dir))
    ids = json.loads(ids)
    n = int(n)
    out = Path(out)
    cache = make_prompt_cache(model)
    model(mx.array([ids[:n]]), cache=cache)
    save_prompt_cache(str(out / "cache.safetensors"), cache)
    logits = model(mx.array([ids[n:]]), cache=cache)
    mx.save_safetensors(str(out / "logits.safetensors"), {"logits": logits[0].astype(mx.float32)})


if __name__ == "__main__":
    main(*sys.argv[1:])
