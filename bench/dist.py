"""Tensor parallelism on one machine: the same checkpoint run by one
process with 2 kernel threads and by a group of processes with 1 each
(MLX's ring backend over loopback). What `make bench-dist` runs, and
`make bench` at its end.

    .deps/py/bin/python bench/dist.py [--out out/bench/dist] [--only SUBSTRING] [--runs N] [--gen N]

For every checkpoint (made as bench/bench.py makes them, into
out/bench/models) and every layout (processes x threads: 1 x 2, 1 x 1,
2 x 1), bench/gorun runs the decode prompt (a 128-token prompt, 128 tokens
generated) after a warm-up, --runs times; in a group every rank is a gorun
started with MLX_RANK and MLX_HOSTFILE (a hostfile of free loopback
ports), as `archrun launch` starts its ranks, and ARCHGEN_MLX_THREADS sets
the threads of archgen's CPU kernels in each process. A group size that
the model's head counts do not divide is refused by the loader; the row
then says so with the loader's message, and the next group size that
divides them (3 for SmolLM2-135M's 9 heads and 3 KV heads) runs instead.

Each row gives prefill and decode tokens/s (medians; rank 0's clock in a
group, which every rank's steps wait on), and for each process its peak
resident set (getrusage), MLX allocator peak, weights, and CPU time in
user and system mode; and the load average when the row started and
ended. A group's rows also give the all_sum traffic: the ops and the bytes
of their inputs in the prefill (the prompt's tokens but its last, in one
forward call) and per decode step (one token). The tables are printed and
written to OUT/tables.md, every figure to OUT/results.json.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench  # bench/bench.py: the checkpoints, prompts and helpers it shares

ROOT = bench.ROOT

# The checkpoints (bench.MODELS names) and the layouts (processes,
# threads per process) each runs.
CHECKPOINTS = ["smollm2-135m-q4", "qwen2.5-0.5b-q4", "qwen2.5-0.5b-float32"]
LAYOUTS = [(1, 2), (1, 1), (2, 1)]
# A group size the loader refuses gives way to the next of these that it
# takes.
FALLBACK = [3, 4]
DEFAULT_RUNS, PROMPT_TOKENS, DEFAULT_GEN = 3, 128, 128
# How long one layout may take before its processes are killed.
LAYOUT_TIMEOUT_S = 3600


def loadavg():
    return Path("/proc/loadavg").read_text().split()[0]


def hostfile(n, path):
    """The ring's hostfile for n ranks on free ports of 127.0.0.1."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        path.write_text(json.dumps([[f"127.0.0.1:{s.getsockname()[1]}"] for s in socks]))
    finally:
        for s in socks:
            s.close()


def run_layout(gorun, model, prompts, n, threads, runs, tmp):
    """Runs gorun as n processes of `threads` kernel threads each: every
    rank's JSON, or the error the first failing rank printed."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLX_RANK", "MLX_HOSTFILE")}
    env["ARCHGEN_MLX_THREADS"] = str(threads)
    if n > 1:
        hf = tmp / f"ring-{n}.json"
        hostfile(n, hf)
        env["MLX_HOSTFILE"] = str(hf)
    cmd = [str(gorun), "-model", str(model), "-prompts", str(prompts), "-runs", str(runs), "-loads", "1"]
    bench.log(f"{n} x {threads}: {' '.join(cmd)}")
    procs = []
    for r in range(n):
        e = dict(env, MLX_RANK=str(r)) if n > 1 else env
        out, err = open(tmp / f"rank{r}.out", "w+"), open(tmp / f"rank{r}.err", "w+")
        procs.append((subprocess.Popen(cmd, env=e, cwd=ROOT, stdout=out, stderr=err), out, err))
    deadline = time.time() + LAYOUT_TIMEOUT_S
    failed = None
    for p, _, _ in procs:
        try:
            p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            failed = failed or f"still running after {LAYOUT_TIMEOUT_S} s"
    for p, _, _ in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    results = []
    for r, (p, out, err) in enumerate(procs):
        out.seek(0)
        err.seek(0)
        text = err.read()
        if p.returncode != 0 and failed is None:
            lines = [l for l in text.splitlines() if l.startswith("gorun: ")]
            failed = lines[-1][len("gorun: "):] if lines else f"rank {r} exited with {p.returncode}:\n{text}"
        if p.returncode == 0:
            results.append(json.loads(out.read()))
    return (None, failed) if failed else (results, None)


def summarize(ranks):
    """A layout's row from its ranks' figures."""
    r0 = ranks[0]["runs"]["decode"]
    s = {
        "runs": len(r0),
        "prefill": bench.med([x["prompt_tps"] for x in r0]),
        "decode": bench.med([x["generate_tps"] for x in r0]),
        "peak_rss": [r["peak_rss"] for r in ranks],
        "peak_mlx": [max(x["peak_memory"] for x in r["runs"]["decode"]) for r in ranks],
        "weights": [r["weight_bytes"] for r in ranks],
        "cpu": [(r.get("user_s"), r.get("sys_s")) for r in ranks],
        "tokens": ranks[0]["outputs"]["decode"],
    }
    if len(ranks) > 1:
        x = r0[-1]
        s["sums"] = {k: x[k] for k in ("prefill_all_sums", "prefill_all_sum_bytes", "decode_all_sums",
                                       "decode_all_sum_bytes", "prefill_tokens", "decode_calls")}
    return s


def mib(v):
    return f"{v / 2**20:.0f}"


def tables(rows, gen):
    out = [f"Throughput and memory (prefill: the {PROMPT_TOKENS}-token prompt over the time to the first token; decode: "
           f"the {gen - 1} tokens after the first over their time; ratios against 1 process x 2 threads; memory in "
           "MiB, one figure per process; CPU: each process's user and system seconds from its start to its end, load and warm-up included; load: the 1-minute load average at the row's start and end):", "",
           "| model | dtype | processes x threads | runs | prefill tok/s | ratio | decode tok/s | ratio | "
           "peak resident set | MLX peak | weights | CPU s, user + system | same tokens | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {}
    for r in rows:
        key = (r["name"], f"{r['processes']} x {r['threads']}")
        if r.get("refused"):
            out.append(f"| {r['family']} | {r['level']} | {key[1]} | — | refused: `{r['refused']}` "
                       f"| | | | | | | | | {r['load'][0]} |")
            continue
        s = r["summary"]
        if (r["processes"], r["threads"]) == (1, 2):
            base[r["name"]] = s
        b = base.get(r["name"], {})
        same = "—"
        if b.get("tokens") is not None:
            same = "yes" if s["tokens"] == b["tokens"] else next(
                f"first {i}" for i, (p, q) in enumerate(zip(s["tokens"] + [None], b["tokens"] + [None])) if p != q)
        per = lambda vs: " / ".join(mib(v) for v in vs)
        cpu = " / ".join(f"{u:.0f} + {y:.0f}" if u is not None else "—" for u, y in s["cpu"])
        out.append(f"| {r['family']} | {r['level']} | {key[1]} | {s['runs']} | {bench.fmt(s['prefill'])} | "
                   f"{bench.ratio(s['prefill'], b.get('prefill'))} | {bench.fmt(s['decode'])} | "
                   f"{bench.ratio(s['decode'], b.get('decode'))} | {per(s['peak_rss'])} | {per(s['peak_mlx'])} | "
                   f"{per(s['weights'])} | {cpu} | {same} | {r['load'][0]} → {r['load'][1]} |")
    out += ["", "all_sum traffic of a group, per rank (the bytes of the ops' inputs, as mlx.Group.AllSumStats "
            "counts them when the graph is built; a ring all-reduce sends about 2(N-1)/N of them per rank):", "",
            "| model | dtype | processes | prefill: ops | bytes | per prompt token | decode: ops per step | "
            "bytes per step | ring bytes sent per step |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r.get("summary", {}).get("sums")
        if not g:
            continue
        n = r["processes"]
        step = g["decode_all_sum_bytes"] / g["decode_calls"]
        out.append(f"| {r['family']} | {r['level']} | {n} | {g['prefill_all_sums']} | {g['prefill_all_sum_bytes']:,} | "
                   f"{g['prefill_all_sum_bytes'] / g['prefill_tokens']:,.0f} | "
                   f"{g['decode_all_sums'] / g['decode_calls']:.0f} | {step:,.0f} | {2 * (n - 1) / n * step:,.0f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench/dist")
    ap.add_argument("--models", default="out/bench/models", help="where the checkpoints are made (shared with bench.py)")
    ap.add_argument("--only", default="", help="run only the checkpoints whose name contains this, "
                    "or another of bench.py's checkpoints named whole (smollm2-135m-float32)")
    ap.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS") or DEFAULT_RUNS))
    ap.add_argument("--gen", type=int, default=DEFAULT_GEN, help="tokens generated after the prompt")
    args = ap.parse_args()
    out, models = ROOT / args.out, ROOT / args.models
    out.mkdir(parents=True, exist_ok=True)
    # --only also takes any checkpoint bench.py makes, by its whole name
    names = [args.only] if args.only in bench.MODELS and args.only not in CHECKPOINTS else \
        [n for n in CHECKPOINTS if args.only in n]
    started = time.time()
    info = bench.machine()
    bench.prepare(models, names)
    gorun = out / "gorun"
    bench.run(["go", "build", "-o", gorun, "./bench/gorun"])
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name in names:
            d = bench.model_dir(models, name)
            cfg = json.loads((d / "config.json").read_text())
            prompts = bench.prompts_file(out, cfg["vocab_size"], [("decode", PROMPT_TOKENS, args.gen)])
            layouts = list(LAYOUTS)
            while layouts:
                n, threads = layouts.pop(0)
                row = {"name": name, "family": bench.MODELS[name][0], "level": bench.MODELS[name][1],
                       "processes": n, "threads": threads, "load": [loadavg()]}
                ranks, err = run_layout(gorun, d.relative_to(ROOT), prompts, n, threads, args.runs, tmp)
                row["load"].append(loadavg())
                if err:
                    if "cannot shard over" not in err:
                        sys.exit(f"dist: {name}, {n} x {threads}: {err}")
                    row["refused"] = err
                    bigger = [m for m in FALLBACK if m > n and (m, threads) not in layouts]
                    if bigger:
                        layouts.insert(0, (bigger[0], threads))
                else:
                    row["summary"] = summarize(ranks)
                    row["raw"] = ranks
                rows.append(row)
                bench.log(f"{name}, {n} x {threads}: " + (row.get("refused") or
                          f"prefill {row['summary']['prefill']:.1f} tok/s, decode {row['summary']['decode']:.1f} tok/s"))
                (out / "results.json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    info["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    info["minutes"] = round((time.time() - started) / 60, 1)
    header = (f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB; load average "
              f"{' '.join(info['loadavg_start'])} at the start, {' '.join(info['loadavg_end'])} at the end; "
              f"{info['minutes']} minutes; {args.runs} measured runs of a {PROMPT_TOKENS}-token prompt and "
              f"{args.gen} tokens per row.\n\n")
    text = header + tables(rows, args.gen)
    (out / "tables.md").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
