"""Measures llama.cpp (llama-cpp-python) on a GGUF file as bench/gorun and
bench/mlxlm_run.py measure archgen and mlx-lm: load time, then for each
prompt a warm-up and N measured greedy generations of the same length,
timed at each token the generator yields (prompt tokens/s is the prompt
length over the time to the first token; generation tokens/s counts the
tokens after the first over the time from the first to the last). Threads:
one per core. Runs in .deps/llama's venv.

    .deps/llama/bin/python bench/llama_run.py --model x.gguf --prompts p.json
"""

import argparse
import itertools
import json
import os
import resource
import sys
import time
from pathlib import Path

import llama_cpp
from runs import figures, report, run_prompt, timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    prompts = json.loads(Path(args.prompts).read_text())
    n_ctx = max(len(p["tokens"]) + p["gen"] for p in prompts) + 16
    n_batch = max(len(p["tokens"]) for p in prompts)

    res = {"side": "llama.cpp", "model": args.model, "runs": {}, "outputs": {}, "load_s": [],
           "llama_cpp_python": llama_cpp.__version__, "threads": args.threads,
           "warmups": args.warmup, "measured": args.runs}
    llm = None
    for i in range(args.loads + 1):
        if llm is not None:
            llm.close()
            llm = None
        t = time.perf_counter()
        llm = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, n_batch=n_batch,
                              n_ubatch=n_batch, n_threads=args.threads,
                              n_threads_batch=args.threads, verbose=False)
        if i > 0:
            res["load_s"].append(time.perf_counter() - t)
    res["weight_bytes"] = Path(args.model).stat().st_size

    for p in prompts:
        runs = []
        for i in range(args.warmup + args.runs):
            tokens, gen = run_prompt(p, i, args.warmup)
            # Forget the previous run's tokens, so that generate evaluates
            # the whole prompt rather than reusing the cached prefix.
            llm.reset()
            out, first, last = timed(itertools.islice(
                llm.generate(tokens, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                             repeat_penalty=1.0, reset=True), gen))
            if len(out) != gen:
                sys.exit(f"llama_run: {p['name']}: generated {len(out)} tokens, want {gen}")
            if i >= args.warmup:
                # llama.cpp has no allocator figure like MLX's: the process's
                # peak resident set, interpreter included, stands in.
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                runs.append(figures(len(tokens), out, first, last, peak_rss=rss))
                res["outputs"][p["name"]] = out
        res["runs"][p["name"]] = runs
        report("llama_run", p["name"], runs)
    llm.close()
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
