"""archgen's benchmarks, side by side with mlx-lm and llama.cpp: what `make bench` runs.

    .deps/py/bin/python bench/bench.py [--out out/bench] [--only SUBSTRING] [--runs N]

Steps, each skipped when its output is there already:
  1. the checkpoints, into out/bench/models: the tiny llama of the parity
     tests, SmolLM2-135M-Instruct (its GGUF converted once by gguf.Read and
     WriteDir, then its float forms), and a Qwen2.5-0.5B-shaped checkpoint
     with random weights made by mlx-lm; float32, bfloat16 and 4-bit each;
  2. the memory bandwidth of this machine (bench/membw);
  3. for every checkpoint, archgen (bench/gorun) and mlx-lm
     (bench/mlxlm_run.py), each in a process of its own, on the same model
     directory, the same libmlx and the same prompt tokens; llama.cpp
     (bench/llama_run.py) on the GGUF;
  4. the tables, printed and written to out/bench/tables.md, with every
     figure in out/bench/results.json.

Each figure is the median of 5 measured runs after a warm-up, on every
checkpoint and prompt: about an hour and three quarters on two cores, most
of it mlx-lm on the Qwen2.5-0.5B shape. --quick (BENCH_QUICK=1) runs the
plan below instead, in about half an hour; --runs N (BENCH_RUNS=N) runs
every checkpoint N times on every prompt.
"""

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / ".deps/py/bin/python"
LLAMA_PY = ROOT / ".deps/llama/bin/python"
GGUF = ROOT / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_SRC = ROOT / "testdata/parity/llama/base/model"
QWEN_CONFIG = ROOT / "gen/testdata/configs/qwen2/qwen2.5-0.5b.json"
# Mixtures of experts: published per-token shapes with fewer layers
# (bench/configs/README.md).
OLMOE_CONFIG = ROOT / "bench/configs/olmoe-1b-7b-shape.json"
QWEN3_MOE_CONFIG = ROOT / "bench/configs/qwen3-30b-a3b-shape.json"

# The checkpoints: name -> (family, level, how it is made).
MODELS = {
    "tiny-float32": ("tiny llama (parity)", "float32", ("derive", TINY_SRC, "float32")),
    "tiny-bfloat16": ("tiny llama (parity)", "bfloat16", ("derive", TINY_SRC, "bfloat16")),
    "tiny-q4": ("tiny llama (parity)", "4-bit g64", ("derive", TINY_SRC, "q4_g64")),
    "smollm2-135m-q4": ("SmolLM2-135M (real)", "4-bit g32 (Q4_1 GGUF)", ("gguf", GGUF)),
    # The same checkpoint after a 2,048-token prompt: the step's attention
    # reads 2,048 cached positions per layer.
    "smollm2-135m-q4-ctx2048": ("SmolLM2-135M (real), 2,048-token prompt", "4-bit g32 (Q4_1 GGUF)",
                                ("alias", "smollm2-135m-q4", GGUF)),
    # A Q8_0 GGUF made from the Q4_1 one by bench/q8gguf.py (gguf-py's
    # quantizer), for llama.cpp's 8-bit kernels beside archgen's.
    "smollm2-135m-q8": ("SmolLM2-135M (real)", "8-bit g32 (Q8_0 GGUF, from the Q4_1)", ("gguf-q8", GGUF)),
    "smollm2-135m-float32": ("SmolLM2-135M (real)", "float32", ("derive", "smollm2-135m-q4", "float32")),
    "smollm2-135m-bfloat16": ("SmolLM2-135M (real)", "bfloat16", ("derive", "smollm2-135m-q4", "bfloat16")),
    "qwen2.5-0.5b-float32": ("Qwen2.5-0.5B shape (random)", "float32", ("random", QWEN_CONFIG)),
    "qwen2.5-0.5b-bfloat16": ("Qwen2.5-0.5B shape (random)", "bfloat16", ("derive", "qwen2.5-0.5b-float32", "bfloat16")),
    "qwen2.5-0.5b-q4": ("Qwen2.5-0.5B shape (random)", "4-bit g64, float32 scales", ("derive", "qwen2.5-0.5b-float32", "q4_g64_float32")),
    # The MoE rows: 4-bit from float32 (float32 scales, as the Qwen2.5
    # shape's, for the same reason), the routers at 8 bits by the models'
    # own quant_predicate where they have one (qwen3_moe), as mlx_lm.convert
    # makes them.
    "olmoe-1b-7b-q4": ("OLMoE-1B-7B shape, 4 of 16 layers (random)", "4-bit g64, float32 scales",
                       ("derive", "olmoe-1b-7b-float32", "q4_g64_float32")),
    "qwen3-30b-a3b-q4": ("Qwen3-30B-A3B shape, 2 of 48 layers (random)", "4-bit g64, float32 scales",
                         ("derive", "qwen3-30b-a3b-float32", "q4_g64_float32")),
}

# Checkpoints made only as the sources of others, not measured themselves.
SOURCES = {
    "olmoe-1b-7b-float32": ("random", OLMOE_CONFIG),
    "qwen3-30b-a3b-float32": ("random", QWEN3_MOE_CONFIG),
}


def how_made(name):
    return MODELS[name][2] if name in MODELS else SOURCES[name]

# What each checkpoint runs: measured runs, and the prompts (name, prompt
# tokens, tokens generated). "decode" generates 128 tokens after a
# 128-token prompt (the prefill-128 figures come from it too); "prefill512"
# is a 512-token prompt and its first token.
FULL = [("decode", 128, 128), ("prefill512", 512, 1)]
PLAN = {name: {"runs": 5, "prompts": FULL} for name in MODELS}
# The quick plan: libmlx's CPU kernels make mlx-lm take 1.5 minutes
# (SmolLM2 float32 and bfloat16) to 2.5 minutes (the Qwen2.5-0.5B shape)
# per run on two cores, so those checkpoints run fewer times and the Qwen
# shape the decode prompt only.
QUICK = dict(PLAN)
for name in ("smollm2-135m-float32", "smollm2-135m-bfloat16"):
    QUICK[name] = {"runs": 3, "prompts": FULL}
for name in ("qwen2.5-0.5b-float32", "qwen2.5-0.5b-bfloat16", "qwen2.5-0.5b-q4"):
    QUICK[name] = {"runs": 1, "prompts": FULL[:1]}
# The long-context row decodes 128 tokens after a 2,048-token prompt (its
# "prefill 128" columns are that prompt's); mlx-lm's prefill of it takes
# about 3 minutes here, so it runs 3 times in the full plan and once in
# the quick one, whatever --runs says.
LONG = [("decode", 2048, 128)]
PLAN["smollm2-135m-q4-ctx2048"] = {"runs": 3, "prompts": LONG, "fixed": True}
QUICK["smollm2-135m-q4-ctx2048"] = {"runs": 1, "prompts": LONG, "fixed": True}
# The MoE rows: mlx-lm's expert layers run on libmlx's scalar, single-threaded
# CPU gather_qmm (about 0.3 GFLOP/s here), which makes its 128-token prefill
# and 128 decode steps take minutes on these shapes: one run, the decode
# prompt only, in both plans.
for name in ("olmoe-1b-7b-q4", "qwen3-30b-a3b-q4"):
    PLAN[name] = {"runs": 1, "prompts": FULL[:1], "fixed": True}
    QUICK[name] = {"runs": 1, "prompts": FULL[:1], "fixed": True}
# Warm-ups run a 16-token prompt and 8 tokens: the same code and kernels.
WARM_TOKENS, WARM_GEN = 16, 8


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    log(" ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


def prepare(models_dir, names):
    models_dir.mkdir(parents=True, exist_ok=True)
    order = sorted(names, key=lambda n: how_made(n)[0] == "derive")  # sources first
    for name in order:
        dst = models_dir / name
        if (dst / "config.json").exists():
            continue
        how = how_made(name)
        if how[0] == "alias":
            prepare(models_dir, [how[1]])
            continue
        if how[0] in ("gguf", "gguf-q8"):
            run(["go", "run", "./bench/ggufdir", "-in", gguf_of(models_dir, name), "-out", dst])
        elif how[0] == "random":
            run([PY, "bench/prepare.py", "random", how[1], dst])
        else:
            src = how[1] if isinstance(how[1], Path) else models_dir / how[1]
            if not (src / "config.json").exists():
                prepare(models_dir, [how[1]])
            run([PY, "bench/prepare.py", "derive", src, dst, how[2]])


def gguf_of(models_dir, name):
    """The GGUF a checkpoint comes from (made first, for the Q8_0 one)."""
    how = MODELS[name][2]
    if how[0] == "gguf-q8":
        q8 = models_dir.parent / "gguf" / (how[1].name.rsplit(".", 2)[0] + ".Q8_0.gguf")
        if not q8.exists():
            q8.parent.mkdir(parents=True, exist_ok=True)
            run([PY, "bench/q8gguf.py", how[1], q8])
        return q8
    return how[-1]


def model_dir(models_dir, name):
    how = MODELS[name][2]
    return models_dir / (how[1] if how[0] == "alias" else name)


def step_bytes(model_dir):
    """Bytes of weights one decode step reads: every tensor but an untied
    embedding table, of which a step reads one row, and of a mixture of
    experts' stacked expert tensors (mlx-lm's switch_mlp) the share of the
    experts one token runs (num_experts_per_tok of num_experts)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    tied = cfg.get("tie_word_embeddings", True)
    routed = cfg.get("num_experts_per_tok", 1) / cfg.get("num_experts", 1)
    total = embed = 0
    for f in model_dir.glob("*.safetensors"):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k == "__metadata__":
                continue
            size = v["data_offsets"][1] - v["data_offsets"][0]
            if ".switch_mlp." in k:
                size = int(size * routed)
            total += size
            if k.startswith("model.embed_tokens."):
                embed += size
    return total if tied else total - embed


def prompts_file(out, vocab, prompts, seed=0):
    r = random.Random(seed)
    items = [{"name": n, "tokens": [r.randrange(min(100, vocab // 2), vocab) for _ in range(p)], "gen": g,
              "warm_tokens": WARM_TOKENS, "warm_gen": WARM_GEN}
             for n, p, g in prompts]
    path = out / f"prompts-{vocab}-{'-'.join(f'{n}{p}' for n, p, _ in prompts)}.json"
    path.write_text(json.dumps(items))
    return path


def med(xs):
    return statistics.median(xs) if xs else None


def alternate(bin_dir, d, gguf, pf, runs):
    """archgen and llama.cpp on the same prompts, one measured run of each
    per round, each round's pair of processes one after the other (each
    with its warm-up and loads): the machine's speed drifts over minutes
    here, and alternating puts the drift on both sides alike. Returns each
    side's results as one process of all the rounds would give them."""
    go_parts, ll_parts = [], []
    for i in range(runs):
        loads = "5" if i == 0 else "1"
        go_parts.append(json.loads(run([bin_dir / "gorun", "-model", d, "-prompts", pf, "-runs", "1", "-loads", loads],
                                       capture_output=True, text=True).stdout))
        ll_parts.append(json.loads(run([LLAMA_PY, "bench/llama_run.py", "--model", gguf, "--prompts", pf,
                                        "--runs", "1", "--loads", loads], capture_output=True, text=True).stdout))
    return merge_runs(go_parts), merge_runs(ll_parts)


def merge_runs(parts):
    """One runner's results from several processes: the first's, with every
    process's runs and loads."""
    out = dict(parts[0])
    out["runs"] = {k: list(v) for k, v in parts[0].get("runs", {}).items()}
    out["load_s"] = list(parts[0].get("load_s", []))
    for p in parts[1:]:
        for k, v in p.get("runs", {}).items():
            out["runs"].setdefault(k, []).extend(v)
        out["load_s"].extend(p.get("load_s", []))
    out["measured"] = len(parts) * parts[0].get("measured", 1)
    out["processes"] = len(parts)
    return out


def summarize(res):
    s = {"load_s": med(res.get("load_s", [])), "weight_bytes": res.get("weight_bytes")}
    runs = res.get("runs", {})
    if "decode" in runs:
        r = runs["decode"]
        s["prefill128"] = med([x["prompt_tps"] for x in r])
        s["ttft128"] = med([x["ttft_s"] for x in r])
        s["decode"] = med([x["generate_tps"] for x in r])
    if "prefill512" in runs:
        r = runs["prefill512"]
        s["prefill512"] = med([x["prompt_tps"] for x in r])
        s["ttft512"] = med([x["ttft_s"] for x in r])
    peaks = [x.get("peak_memory") or x.get("peak_rss") for rs in runs.values() for x in rs]
    s["peak"] = max(p for p in peaks if p) if any(peaks) else None
    s["runs"] = min((len(v) for v in runs.values()), default=0)
    return s


def machine():
    info = {"platform": platform.platform(), "cores": os.cpu_count()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        info["cpu"] = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines()
                            if l.startswith("Model name")), "?")
    except OSError:
        info["cpu"] = "?"
    mem = Path("/proc/meminfo").read_text().split("\n")[0].split()[1]
    info["memory_gib"] = round(int(mem) / 2**20, 1)
    info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    return info


def fmt(x, digits=1):
    if x is None:
        return "—"
    if isinstance(x, float) and abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}f}"


def ratio(a, b, higher_better=True):
    if not a or not b:
        return "—"
    r = a / b if higher_better else b / a
    return f"{r:.2f}×"


def tables(results, bw):
    bw_gbs = bw["copy_gb_s"]
    lines = []
    lines.append(f"Memory copy bandwidth (bench/membw, {bw['threads']} threads, bytes read + written): "
                 f"{bw_gbs:.1f} GB/s; the bound on decode is that over the bytes of weights one step reads.")
    lines.append("")
    lines.append("Decode (tokens/s over 128 tokens after a 128-token prompt; ratio = archgen / mlx-lm):")
    lines.append("")
    lines.append("| model | dtype | runs | archgen | mlx-lm | ratio | llama.cpp | weights/step | bound | archgen % of bound | mlx-lm % of bound | same tokens |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        a, m = r["archgen"], r["mlx-lm"]
        bound = bw_gbs * 1e9 / r["step_bytes"]
        ll = r.get("llama.cpp", {}).get("decode")
        pct = lambda v: f"{100 * v / bound:.0f}%" if v else "—"
        lines.append(f"| {r['family']} | {r['level']} | {a['runs']} | {fmt(a.get('decode'))} | {fmt(m.get('decode'))} | "
                     f"{ratio(a.get('decode'), m.get('decode'))} | {fmt(ll)} | {r['step_bytes'] / 1e6:.1f} MB | "
                     f"{fmt(bound)} | {pct(a.get('decode'))} | {pct(m.get('decode'))} | {r['same_tokens']} |")
    lines.append("")
    lines.append("Prefill (prompt tokens/s, prompt length over the time to the first token) and time to first token:")
    lines.append("")
    lines.append("| model | dtype | 128: archgen | mlx-lm | ratio | llama.cpp | 512: archgen | mlx-lm | ratio | llama.cpp | TTFT 128: archgen | mlx-lm |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        a, m, l = r["archgen"], r["mlx-lm"], r.get("llama.cpp", {})
        lines.append(f"| {r['family']} | {r['level']} | {fmt(a.get('prefill128'))} | {fmt(m.get('prefill128'))} | "
                     f"{ratio(a.get('prefill128'), m.get('prefill128'))} | {fmt(l.get('prefill128'))} | "
                     f"{fmt(a.get('prefill512'))} | {fmt(m.get('prefill512'))} | "
                     f"{ratio(a.get('prefill512'), m.get('prefill512'))} | {fmt(l.get('prefill512'))} | "
                     f"{fmt(a.get('ttft128'), 3)} s | {fmt(m.get('ttft128'), 3)} s |")
    lines.append("")
    lines.append("Load time (median of 5 loads after one) and peak memory (MLX's allocator, from the start of a "
                 "generation to its end, weights included; ratios are mlx-lm / archgen, above 1 is archgen better):")
    lines.append("")
    lines.append("| model | dtype | load: archgen | mlx-lm | ratio | peak: archgen | mlx-lm | ratio |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for r in results:
        a, m = r["archgen"], r["mlx-lm"]
        mb = lambda v: f"{v / 2**20:.0f} MiB" if v else "—"
        lines.append(f"| {r['family']} | {r['level']} | {fmt(a.get('load_s'), 3)} s | {fmt(m.get('load_s'), 3)} s | "
                     f"{ratio(a.get('load_s'), m.get('load_s'), False)} | {mb(a.get('peak'))} | {mb(m.get('peak'))} | "
                     f"{ratio(a.get('peak'), m.get('peak'), False)} |")
    for r in results:
        if "llama.cpp" in r:
            l = r["llama.cpp"]
            lines.append("")
            lines.append(f"llama.cpp ({r['llama_note']}): load {fmt(l.get('load_s'), 3)} s, peak resident set "
                         f"{l['peak'] / 2**20:.0f} MiB (the whole Python process; MLX's figures above count arrays only).")
    return "\n".join(lines)


def same_tokens(a, b):
    x, y = a.get("outputs", {}).get("decode"), b.get("outputs", {}).get("decode")
    if not x or not y:
        return "—"
    n = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return "all" if n == len(x) == len(y) else f"first {n}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--only", default="", help="run only the checkpoint of this name, or those whose name contains this")
    ap.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS") or 0),
                    help="measured runs per checkpoint, every prompt (default: the plan's)")
    ap.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK", "") not in ("", "0"),
                    help="fewer runs of the slow checkpoints (about half an hour)")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--no-mlxlm", action="store_true",
                    help="leave mlx-lm out (its columns read —): for the long-context row, whose "
                         "2,048-token prefill takes mlx-lm minutes on libmlx's CPU kernels")
    ap.add_argument("--merge", action="store_true",
                    help="keep the previous results.json's figures for checkpoints not run now")
    args = ap.parse_args()
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    names = [args.only] if args.only in MODELS else [n for n in MODELS if args.only in n]
    started = time.time()
    info = machine()

    prepare(out / "models", names)
    bin_dir = out / "bin"
    bin_dir.mkdir(exist_ok=True)
    run(["go", "build", "-o", bin_dir / "gorun", "./bench/gorun"])
    run(["go", "build", "-o", bin_dir / "membw", "./bench/membw"])
    bw = json.loads(run([bin_dir / "membw"], capture_output=True, text=True).stdout)
    best = max(bw["figures"], key=lambda f: f["copy_gb_s"])

    results = []
    if args.merge and (out / "results.json").exists():
        # Keep the figures of checkpoints this run does not measure.
        old = json.loads((out / "results.json").read_text())
        results = [r for r in old["results"] if r["name"] not in names]
        info = old["machine"] | {"rerun": names, "loadavg_rerun_start": info["loadavg_start"]}
    for name in names:
        d = model_dir(out / "models", name)
        cfg = json.loads((d / "config.json").read_text())
        plan = (QUICK if args.quick else PLAN)[name]
        runs = plan["runs"] if plan.get("fixed") else (args.runs or plan["runs"])
        prompts = plan["prompts"] if plan.get("fixed") or not args.runs else FULL
        pf = prompts_file(out, cfg["vocab_size"], prompts)
        pair = MODELS[name][2][0] in ("gguf", "gguf-q8", "alias") and not args.no_llama and LLAMA_PY.exists()
        if pair:
            go, ll = alternate(bin_dir, d, gguf_of(out / "models", name), pf, int(runs))
        else:
            go = json.loads(run([bin_dir / "gorun", "-model", d, "-prompts", pf, "-runs", runs],
                                capture_output=True, text=True).stdout)
        ml = {} if args.no_mlxlm else json.loads(run(
            [PY, "bench/mlxlm_run.py", "--model", d, "--prompts", pf, "--runs", runs],
            capture_output=True, text=True).stdout)
        r = {"name": name, "family": MODELS[name][0], "level": MODELS[name][1], "step_bytes": step_bytes(d),
             "archgen": summarize(go), "mlx-lm": summarize(ml), "same_tokens": same_tokens(go, ml),
             "raw": {"archgen": go, "mlx-lm": ml}}
        if pair:
            r["llama.cpp"] = summarize(ll)
            r["raw"]["llama.cpp"] = ll
            r["llama_note"] = f"llama-cpp-python {ll['llama_cpp_python']}, {ll['threads']} threads, on the GGUF itself"
        results.append(r)
        results.sort(key=lambda r: list(MODELS).index(r["name"]))
        (out / "results.json").write_text(json.dumps({"machine": info, "bandwidth": bw, "results": results}, indent=1))

    info["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    info["minutes"] = round((time.time() - started) / 60, 1) + (info.get("minutes", 0) if args.merge else 0)
    text = tables(results, best)
    header = (f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB; load average "
              f"{' '.join(info['loadavg_start'])} at the start, {' '.join(info['loadavg_end'])} at the end; "
              f"{info['minutes']} minutes.\n\n")
    (out / "tables.md").write_text(header + text + "\n")
    (out / "results.json").write_text(json.dumps({"machine": info, "bandwidth": bw, "results": results}, indent=1))
    print(header + text)


if __name__ == "__main__":
    main()
