"""Runs mlx-lm's own generation loop for generate's tests.

Usage: mlxlm_generate.py MODEL_DIR OUT.json SPEC.json

SPEC.json is a list of {"name", "prompt": [ids], "max_tokens", "seed",
"temp", "top_p", "min_p", "min_tokens_to_keep", "top_k",
"repetition_penalty", "repetition_context_size"}. For each, the random
generator is seeded with mx.random.seed and mlx_lm.generate.generate_step runs
with make_sampler and make_logits_processors built from those knobs; OUT.json
gets {name: [token ids]}.
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.utils import load_model


def main():
    model, _ = load_model(Path(sys.argv[1]))
    with open(sys.argv[3]) as f:
        specs = json.load(f)
    out = {}
    for s in specs:
        mx.random.seed(s["seed"])
        sampler = make_sampler(
            temp=s["temp"], top_p=s["top_p"], min_p=s["min_p"],
            min_tokens_to_keep=s["min_tokens_to_keep"], top_k=s["top_k"],
        )
        processors = make_logits_processors(
            repetition_penalty=s["repetition_penalty"] or None,
            repetition_context_size=s["repetition_context_size"],
        )
        tokens = []
        for tok, _ in generate_step(
            mx.array(s["prompt"]), model, max_tokens=s["max_tokens"],
            sampler=sampler, logits_processors=processors,
        ):
            tokens.append(int(tok))
        out[s["name"]] = tokens
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
