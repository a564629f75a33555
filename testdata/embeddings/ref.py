"""The reference embeddings for archgen's Embed: mlx-lm's inner model on a
checkpoint, pooled and normalized in numpy.

    ref.py < jobs.json > replies.json

jobs: a list of {"model": DIR, "inputs": [str] or "ids": [[int]],
"dimensions": int, "float32": bool}; replies: one per job,
{"tokens": [[int]], "last": FORMS, "mean": FORMS}, where FORMS is
{"raw": [[float]], "normalized": [[float]], "truncated": [[float]]}.

With "inputs", the checkpoint's tokenizer (as mlx-lm loads it) encodes
each text with its special tokens (transformers' encode); with "ids", the
ids are the inputs and no tokenizer is read. Each input runs alone
through mlx-lm's inner model, `inner(model)`: the embedding, the layers
and the final norm, without the head, with no cache. "last" is the last
position's hidden state, "mean" the mean over every position;
"normalized" is scaled to unit L2 length, "truncated" keeps the first
`dimensions` values and then normalizes them. With "float32", every
floating parameter (quantized layers' scales and biases included) is
widened to float32 before running, so that mlx-lm computes in float32 as
archgen does by default.
"""

import inspect
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_map  # noqa: E402
from mlx_lm.utils import load, load_model  # noqa: E402


def inner(model):
    """The module of model that ends at the final norm: a wrapper's text
    model's, then the inner module (model, backbone or transformer)."""
    text = getattr(model, "language_model", None)
    if text is not None:
        model = text
    for name in ("model", "backbone", "transformer"):
        m = getattr(model, name, None)
        if m is not None:
            return m
    raise SystemExit(f"{type(model).__name__}: no inner model (model, backbone, transformer)")


def layers_and_norm(embed, layers, norm):
    """An inner model's hidden states by its own parts (named embed, layers
    and norm), where its call applies the head too: the embedding, every
    layer under the causal mask, the final norm."""

    def hidden(body, x):
        from mlx_lm.models.base import create_attention_mask

        h = getattr(body, embed)(x)
        mask = create_attention_mask(h, None)
        for layer in getattr(body, layers):
            h = layer(h, mask, cache=None)
        return getattr(body, norm)(h)

    return hidden


# Inner models, by class, whose call ends with the head (Lille 130M's with
# the table, GPT-NeoX's with embed_out).
WITH_HEAD = {
    "Lille130": layers_and_norm("tok_embeddings", "layers", "norm"),
    "GPTNeoXModel": layers_and_norm("embed_in", "h", "final_layer_norm"),
}


def phixtral_hidden(model, x):
    """Phixtral's hidden states: its inner model (which takes the mask
    positionally) stops before the final norm, which its head holds
    (lm_head.ln)."""
    from mlx_lm.models.base import create_attention_mask

    return model.lm_head.ln(model.transformer(x, create_attention_mask(x, None), None))


# Models whose inner model stops before the final norm, by module: their
# hidden states from the whole model's parts.
NORM_IN_HEAD = {"mlx_lm.models.phixtral": phixtral_hidden}


def call(body, x):
    """body's hidden states for x with no cache (some inner models take one
    positionally)."""
    if type(body).__name__ in WITH_HEAD:
        return WITH_HEAD[type(body).__name__](body, x)
    if "cache" in inspect.signature(body.__call__).parameters:
        return body(x, cache=None)
    return body(x)


def unit(v):
    n = np.linalg.norm(v.astype(np.float64))
    return (v / n if n > 0 else v).astype(np.float32)


def run(job):
    if "ids" in job:
        model, _ = load_model(Path(job["model"]))
        inputs = job["ids"]
    else:
        model, tokenizer = load(job["model"])
        inputs = [tokenizer.encode(text) for text in job["inputs"]]
    if job.get("float32"):
        widen = lambda p: p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p  # noqa: E731
        model.update(tree_map(widen, model.parameters()))
        mx.eval(model.parameters())
    whole = NORM_IN_HEAD.get(type(model).__module__)
    body = model if whole else inner(model)
    d = job["dimensions"]
    out = {"tokens": [list(ids) for ids in inputs]}
    pooled = {"last": [], "mean": []}
    for ids in inputs:
        x = mx.array(ids)[None]
        h = np.array((whole(body, x) if whole else call(body, x))[0].astype(mx.float32))  # [L, hidden]
        pooled["last"].append(h[-1])
        pooled["mean"].append(h.mean(axis=0, dtype=np.float64).astype(np.float32))
    for pooling, rows in pooled.items():
        out[pooling] = {
            "raw": [r.tolist() for r in rows],
            "normalized": [unit(r).tolist() for r in rows],
            "truncated": [unit(r[:d]).tolist() for r in rows],
        }
    return out


def main():
    json.dump([run(job) for job in json.load(sys.stdin)], sys.stdout)


if __name__ == "__main__":
    main()
