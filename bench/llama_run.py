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
import json
import os
import resource
import sys
import time
from pathlib import Path

import llama_cpp


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
            tokens, gen = p["tokens"], p["gen"]
            if i < args.warmup:
                tokens = tokens[: p.get("warm_tokens") or len(tokens)]
                gen = min(gen, p.get("warm_gen") or gen)
            out = []
            # Forget the previous run's tokens, so that generate evaluates
            # the whole prompt rather than reusing the cached prefix.
            llm.reset()
            start = time.perf_counter()
            first = last = None
            for tok in llm.generate(tokens, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                    repeat_penalty=1.0, reset=True):
                now = time.perf_counter()
                if first is None:
                    first = now
                last = now
                out.append(int(tok))
                if len(out) == gen:
                    break
            if len(out) != gen:
                sys.exit(f"llama_run: {p['name']}: generated {len(out)} tokens, want {gen}")
            if i < args.warmup:
                continue
            ttft = first - start
            runs.append({
                "prompt_tps": len(tokens) / ttft,
                "generate_tps": (len(out) - 1) / (last - first) if len(out) > 1 else 0.0,
                "ttft_s": ttft,
                # llama.cpp has no allocator figure like MLX's: the process's
                # peak resident set, interpreter included, stands in.
                "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "tokens": len(out),
            })
            res["outputs"][p["name"]] = out
        res["runs"][p["name"]] = runs
        pt = sorted(r["prompt_tps"] for r in runs)
        gt = sorted(r["generate_tps"] for r in runs)
        print(f"llama_run: {p['name']}: prompt {pt[len(pt)//2]:.1f} tok/s, decode "
              f"{gt[len(gt)//2]:.1f} tok/s (medians of {len(runs)})", file=sys.stderr)
    llm.close()
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
