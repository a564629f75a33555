"""What bench/mlxlm_run.py and bench/llama_run.py share: the prompt of each
run, the timing of a token stream, a run's figures and their medians. Only
the standard library, as each side runs in its own virtual environment."""

import statistics
import sys
import time


def run_prompt(p, i, warmup):
    """The prompt tokens and the number of tokens to generate of run i of
    prompt p; the first warmup runs are the short warm-up."""
    tokens, gen = p["tokens"], p["gen"]
    if i < warmup:
        tokens = tokens[: p.get("warm_tokens") or len(tokens)]
        gen = min(gen, p.get("warm_gen") or gen)
    return tokens, gen


def timed(stream):
    """Reads a stream of token ids to its end: the ids, and the seconds from
    the call to the first and to the last of them."""
    out = []
    start = time.perf_counter()
    first = last = None
    for tok in stream:
        last = time.perf_counter() - start
        if first is None:
            first = last
        out.append(int(tok))
    return out, first, last


def figures(prompt_len, out, first, last, **extra):
    """One run's figures: prefill tok/s (the prompt over the time to the
    first token), decode tok/s (the tokens after the first over the time
    from the first to the last), the time to the first token."""
    decode = (len(out) - 1) / (last - first) if len(out) > 1 and last > first else 0.0
    return {"prompt_tps": prompt_len / first, "generate_tps": decode, "ttft_s": first,
            **extra, "tokens": len(out)}


def report(who, name, runs):
    pt = statistics.median(r["prompt_tps"] for r in runs)
    gt = statistics.median(r["generate_tps"] for r in runs)
    print(f"{who}: {name}: prompt {pt:.1f} tok/s, decode {gt:.1f} tok/s (medians of {len(runs)})",
          file=sys.stderr)
