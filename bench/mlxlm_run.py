"""Measures mlx-lm on one model directory as bench/gorun measures archgen.

mlx-lm runs as its users run it: mlx_lm.utils.load_model, then
mlx_lm.generate.generate_step (the loop stream_generate drives) with the
default greedy sampler, the default KV cache, and the default prefill step.
Every token is read with .item() as stream_generate does; timing follows
stream_generate's: prompt tokens/s is the prompt length over the time to the
first token, and generation tokens/s counts the tokens after the first over
the time from the first token to the last.

    python bench/mlxlm_run.py --model DIR --prompts prompts.json --runs 5

Prints one JSON object, the same fields as gorun's.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model
from runs import figures, report, run_prompt, timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--only", default="")
    args = ap.parse_args()

    prompts = json.loads(Path(args.prompts).read_text())
    res = {
        "side": "mlx-lm",
        "model": args.model,
        "runs": {},
        "outputs": {},
        "load_s": [],
        "mlx": mx.__version__,
        "warmups": args.warmup,
        "measured": args.runs,
    }

    model = None
    for i in range(args.loads + 1):
        if model is not None:
            del model
            mx.clear_cache()
        t = time.perf_counter()
        # load_model evaluates the parameters before it returns (lazy=False).
        model, _ = load_model(Path(args.model))
        if i > 0:
            res["load_s"].append(time.perf_counter() - t)
    leaves = [v for _, v in _flatten(model.parameters())]
    res["weight_bytes"] = sum(v.nbytes for v in leaves)
    res["dtype"] = str(model.model.embed_tokens.weight.dtype).removeprefix("mlx.core.") \
        if not hasattr(model.model.embed_tokens, "scales") else \
        str(model.model.embed_tokens.scales.dtype).removeprefix("mlx.core.")

    for p in prompts:
        if args.only and p["name"] != args.only:
            continue
        runs = []
        for i in range(args.warmup + args.runs):
            tokens, gen = run_prompt(p, i, args.warmup)
            prompt = mx.array(tokens, dtype=mx.uint32)
            mx.reset_peak_memory()
            out, first, last = timed(tok for tok, _ in generate_step(prompt, model, max_tokens=gen))
            peak = mx.get_peak_memory()
            mx.clear_cache()
            if len(out) != gen:
                sys.exit(f"mlxlm_run: {p['name']}: generated {len(out)} tokens, want {gen}")
            if i >= args.warmup:
                runs.append(figures(len(tokens), out, first, last, peak_memory=peak))
                res["outputs"][p["name"]] = out
        res["runs"][p["name"]] = runs
        report(f"mlxlm_run: {args.model}", p["name"], runs)
    json.dump(res, sys.stdout)
    print()


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flatten(v, f"{prefix}{k}.")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _flatten(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], tree


if __name__ == "__main__":
    main()
