"""archgen at the sizes and in the formats people run, beside llama.cpp's own
tools (llama-bench), at the defaults each gives a user: `make bench-sizes`.

    .deps/py/bin/python bench/sizes.py [--out out/bench/sizes] [--sizes 1b,3b] [--runs 3]
        [--long 1b] [--flags 1b] [--merge] [--prepare]

For each size (a published geometry with random weights, SmolLM2's
vocabulary so that the GGUF files carry its real tokenizer; or, for
smollm2-135m, the real SmolLM2-135M-Instruct Q4_1 file, decoded to F32 and
requantized by llama-quantize to the K-quants its published files come in):
  1. mlx-lm makes the bfloat16 checkpoint (bench/prepare.py random, mlx-lm's
     own init, seeded) and the formats mlx-community publishes from it
     (4-bit and 8-bit affine in groups of 64 with bfloat16 scales), as
     mlx_lm.convert does; SmolLM2's tokenizer files go beside them, so
     that archrun serve runs them too;
  2. bench/llama_gguf.py writes it as an F16 GGUF file in llama.cpp's
     layout, and llama.cpp's llama-quantize makes Q4_0, Q4_K_M and Q8_0
     from that (and Q5_K_M and Q6_K at 1B), which archgen reads as
     archgen.Load does (package gguf: the K-quants held in their blocks);
  3. llama-bench (-p 512 -n 128 -t 2, --repetitions RUNS) measures each
     GGUF; archgen (bench/gorun, default options) measures each of its
     checkpoints: a 512-token prompt's prefill and 128 tokens decoded after
     a 16-token prompt, RUNS runs after a warm-up, in one process;
     /usr/bin/time records each process's peak resident set;
  4. --long sizes: archgen's 4-bit formats prefill an 8,192-token prompt
     and decode 128 tokens after it (and after 32,768 tokens, one run),
     beside llama-bench's pp8192 and tg128 at depth 8192 and 32768, with
     and without flash attention;
  5. --flags sizes: archgen's rows again with its other settings (the
     checkpoint's half-precision arithmetic; the tile unit off);
  6. the tables, printed and written to OUT/tables.md, every figure in
     OUT/results.json (bench/report.py writes docs/BENCHMARKS.md from it).

Decode is the goal's measure: archgen's tokens per second over llama.cpp's
best 4-bit rate (whichever of Q4_0 and Q4_K_M it decodes faster). The two
run one after the other, so that a drift of the machine's speed over
minutes falls between them; compare ratios within one run of this script.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from serve_bench import machine  # noqa: E402  (bench/ is the script's directory)

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / ".deps/py/bin/python"
TOOLS = ROOT / ".deps/llama-tools/bin"
TOKENIZER_GGUF = ROOT / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# Published geometries, written by hand (the model hub is not reachable
# here): the sizes these models are known by. Only the vocabulary is
# SmolLM2's (49,152 tokens, tied), so that the files carry a real
# tokenizer; the per-token work of the layers is the model's own.
SIZES = {
    "1b": ("Llama-3.2-1B geometry", {
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "rope_theta": 500000.0}),
    "3b": ("Llama-3.2-3B geometry", {
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
        "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
        "rope_theta": 500000.0}),
    "8b": ("Llama-3.1-8B geometry", {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "rope_theta": 500000.0}),
    # Qwen3's own layout (q and k RMSNorms per head; model_type qwen3 in
    # both engines)
    "qwen3-1.7b": ("Qwen3-1.7B geometry", {
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-06,
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "rope_theta": 1000000.0}),
    "qwen3-4b": ("Qwen3-4B geometry", {
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-06,
        "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "rope_theta": 1000000.0}),
    # Qwen2.5-1.5B's geometry in llama's layout (its q, k and v biases
    # aside: the same products), in the format its GGUF files are most
    # downloaded in
    "qwen2.5-1.5b": ("Qwen2.5-1.5B geometry", {
        "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
        "num_attention_heads": 12, "num_key_value_heads": 2, "head_dim": 128,
        "rope_theta": 1000000.0}),
    # Qwen3.5-0.8B's text geometry (gen/testdata/configs/qwen3_5_text's
    # hand-written 0.8B config): gated delta layers (16 key and value heads
    # of 128) and gated attention on every fourth layer
    "qwen3.5-0.8b": ("Qwen3.5-0.8B geometry (hand-written)", {
        "model_type": "qwen3_5", "architectures": ["Qwen3_5ForCausalLM"], "rms_norm_eps": 1e-06,
        "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 24,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
        "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
        "attn_output_gate": True, "partial_rotary_factor": 0.25, "rope_theta": 10000000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True}}),
    # the real SmolLM2-135M-Instruct (no geometry: its own file)
    "smollm2-135m": ("SmolLM2-135M-Instruct, its Q4_1 file requantized", None),
}

# archgen's formats: name -> bench/prepare.py level ("bfloat16" is the
# random source itself).
MLX_FORMATS = {"mlx 4-bit g64": "q4_g64", "mlx 8-bit g64": "q8_g64", "mlx bfloat16": "bfloat16"}
# llama.cpp's: name -> llama-quantize type.
GGUF_FORMATS = {"GGUF Q4_0": "Q4_0", "GGUF Q4_K_M": "Q4_K_M", "GGUF Q5_K_M": "Q5_K_M",
                "GGUF Q6_K": "Q6_K", "GGUF Q8_0": "Q8_0"}

# The formats measured at a size: the ones users download at every size
# (mlx-community's three, llama.cpp's Q4_0, Q4_K_M and Q8_0), the other
# K-quants at 1B, where the GGUF issue's kernels are compared.
COMMON_FORMATS = ["mlx 4-bit g64", "mlx 8-bit g64", "mlx bfloat16", "GGUF Q4_0", "GGUF Q4_K_M", "GGUF Q8_0"]
SIZE_FORMATS = {
    "1b": [*MLX_FORMATS, *GGUF_FORMATS],
    "qwen2.5-1.5b": ["mlx 4-bit g64", "GGUF Q4_K_M"],
    "qwen3.5-0.8b": ["mlx 4-bit g64", "GGUF Q4_K_M"],
    "smollm2-135m": ["GGUF Q4_1", "GGUF Q4_K_M", "GGUF Q6_K", "GGUF Q8_0"],
}

# Long context (--long): at 1B, archgen's 4-bit formats beside llama-bench
# on the GGUF with and without flash attention: the prefill of an 8k
# prompt, and 128 tokens decoded after 8k; after 32k (--long-depths), the
# first format beside llama-bench with flash attention.
LONG_FORMATS = ["mlx 4-bit g64", "GGUF Q4_K_M"]
LONG_GGUF = "GGUF Q4_K_M"

FOUR_BIT_GGUF = ("GGUF Q4_0", "GGUF Q4_1", "GGUF Q4_K_M")


def log(msg):
    print(f"sizes: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    log(" ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


def timed(cmd, env=None):
    """cmd's standard output and its peak resident set in bytes; env: more
    environment variables."""
    p = run(["/usr/bin/time", "-f", "maxrss_kb=%M", *cmd], capture_output=True, text=True,
            env={**os.environ, **(env or {})})
    rss = [line for line in p.stderr.splitlines() if line.startswith("maxrss_kb=")]
    return p.stdout, int(rss[-1].split("=")[1]) * 1024


def config(size):
    _, geom = SIZES[size]
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152,
            "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "max_position_embeddings": 131072,
            **geom}


def tokenizer_dir(models, bin_dir):
    """SmolLM2's tokenizer files, from its GGUF file (bench/ggufdir), for
    the random checkpoints' directories: so that archrun serve runs them."""
    d = models / "smollm2-135m-dir"
    if not (d / "tokenizer.json").exists():
        run([bin_dir / "ggufdir", "-in", TOKENIZER_GGUF, "-out", d])
    return d


def make_real(models):
    """The real SmolLM2 file and its requantizations: {format: (file, file)}."""
    d = models / "smollm2-135m"
    d.mkdir(parents=True, exist_ok=True)
    f32 = d / "model-F32.gguf"
    if not f32.exists():
        run([TOOLS / "llama-quantize", "--allow-requantize", TOKENIZER_GGUF, f32, "F32", "2"], capture_output=True)
    out = {"GGUF Q4_1": (TOKENIZER_GGUF, TOKENIZER_GGUF)}
    for name in SIZE_FORMATS["smollm2-135m"][1:]:
        qtype = GGUF_FORMATS[name]
        g = d / f"model-{qtype}.gguf"
        if not g.exists():
            run([TOOLS / "llama-quantize", f32, g, qtype, "2"], capture_output=True)
        out[name] = (g, g)
    return out


def make(models, size, tok_dir):
    """Every checkpoint of size: {format: (archgen's dir or file, GGUF file or None)}.

    The random source is bfloat16 (mlx-lm's init, cast): mlx_lm.convert
    quantizes from bfloat16 too, so the quantized formats are the ones a
    float32 source would give, and an 8B source fits in memory. The F16 GGUF
    file is made only while a quantization of it is missing, and removed
    after (llama-quantize reads it; nothing measures it)."""
    if SIZES[size][1] is None:
        return make_real(models)
    wanted = SIZE_FORMATS.get(size, COMMON_FORMATS)
    d = models / size
    d.mkdir(parents=True, exist_ok=True)
    src = d / "bfloat16"
    if not (src / "config.json").exists():
        cfg = d / "config.json"
        cfg.write_text(json.dumps(config(size), indent=2))
        run([PY, "bench/prepare.py", "random", cfg, src, "bfloat16"])
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if not (src / f).exists():
            shutil.copy(tok_dir / f, src / f)
    out = {}
    for name, level in MLX_FORMATS.items():
        if name not in wanted:
            continue
        dst = d / level
        if level != "bfloat16" and not (dst / "config.json").exists():
            run([PY, "bench/prepare.py", "derive", src, dst, level])
        out[name] = (dst, None)
    ggufs = {name: d / f"model-{qtype}.gguf" for name, qtype in GGUF_FORMATS.items() if name in wanted}
    f16 = d / "model-F16.gguf"
    if any(not g.exists() for g in ggufs.values()) and not f16.exists():
        run([PY, "bench/llama_gguf.py", src, TOKENIZER_GGUF, f16])
    for name, g in ggufs.items():
        if not g.exists():
            run([TOOLS / "llama-quantize", f16, g, GGUF_FORMATS[name], "2"], capture_output=True)
        out[name] = (g, g)
    f16.unlink(missing_ok=True)
    return out


def prompts(out, n_vocab):
    """The prompts file: a 512-token prompt (prefill), 128 tokens after a
    16-token prompt (decode), and 8192- and 32768-token prompts with 128
    tokens after each (long context), random token ids, seeded."""
    path = out / "prompts.json"
    r = random.Random(0)
    toks = lambda n: [r.randrange(100, n_vocab) for _ in range(n)]  # noqa: E731
    items = [{"name": "prefill", "tokens": toks(512), "gen": 1, "warm_tokens": 64, "warm_gen": 1},
             {"name": "decode", "tokens": toks(16), "gen": 128, "warm_gen": 16},
             {"name": "long8k", "tokens": toks(8192), "gen": 128, "warm_tokens": 64, "warm_gen": 16},
             {"name": "long32k", "tokens": toks(32768), "gen": 128, "warm_tokens": 64, "warm_gen": 16}]
    path.write_text(json.dumps(items))
    return path


def gorun(model, pf, runs, bin_dir, only, env=None, dtype=None):
    """bench/gorun on the prompts only names (comma-separated), in one
    process, as llama-bench runs its tests: ({prompt: (median prompt tok/s,
    median generate tok/s)}, the process's peak RSS, its JSON)."""
    cmd = [bin_dir / "gorun", "-model", model, "-prompts", pf, "-runs", runs, "-loads", "1", "-only", only]
    if dtype and dtype.startswith("kv:"):
        cmd += ["-kv-dtype", dtype[3:]]
    elif dtype:
        cmd += ["-dtype", dtype]
    stdout, rss = timed(cmd, env)
    res = json.loads(stdout)
    med = {k: (statistics.median(r["prompt_tps"] for r in rs), statistics.median(r["generate_tps"] for r in rs))
           for k, rs in res["runs"].items()}
    return med, rss, res


def archgen(model, pf, runs, bin_dir, env=None, dtype=None):
    med, rss, res = gorun(model, pf, runs, bin_dir, "prefill,decode", env, dtype)
    return {"pp512": med["prefill"][0], "tg128": med["decode"][1], "peak_rss": rss, "dtype": res["dtype"],
            "kernels": res.get("kernels")}


def archgen_long(model, pf, runs, bin_dir, deep):
    """pp8192 and decode after 8192 tokens, and where deep, after 32768 (one run)."""
    med, rss8k, res = gorun(model, pf, runs, bin_dir, "long8k")
    (pp8k, tg8k) = med["long8k"]
    out = {"pp8192": pp8k, "tg128@8192": tg8k, "peak_rss@8192": rss8k, "kernels": res.get("kernels")}
    if deep:
        med, rss32k, _ = gorun(model, pf, "1", bin_dir, "long32k")
        out.update({"pp32768": med["long32k"][0], "tg128@32768": med["long32k"][1], "peak_rss@32768": rss32k})
    return out


def llama_bench(gguf, runs):
    stdout, rss = timed([TOOLS / "llama-bench", "-m", gguf, "-p", "512", "-n", "128", "-t", "2",
                         "-r", runs, "-o", "json"])
    rows = json.loads(stdout)
    out = {"peak_rss": rss}
    for r in rows:
        if r.get("n_prompt") == 512 and r.get("n_gen") == 0:
            out["pp512"] = r["avg_ts"]
        elif r.get("n_gen") == 128 and r.get("n_prompt") == 0:
            out["tg128"] = r["avg_ts"]
    out["build"] = rows[0].get("build_commit") if rows else None
    return out


def llama_bench_long(gguf, runs, deep):
    """llama-bench at depth, without and with flash attention (-fa off/on):
    pp8192 and tg128 after 8192 tokens of context (-d; the context's own
    prefill is not timed, as in archgen's decode rate), and where deep,
    tg128 after 32768 with flash attention (one repetition: the goal's
    measure, and the setting that runs it fastest)."""
    out = {}
    for fa in ("off", "on"):
        stdout, rss8k = timed([TOOLS / "llama-bench", "-m", gguf, "-t", "2", "-fa", fa, "-o", "json",
                               "-p", "8192", "-n", "0", "-r", runs])
        rows = json.loads(stdout)
        stdout, rss8kd = timed([TOOLS / "llama-bench", "-m", gguf, "-t", "2", "-fa", fa, "-o", "json",
                                "-p", "0", "-n", "128", "-d", "8192", "-r", runs])
        rows += json.loads(stdout)
        f = {"peak_rss@8192": max(rss8k, rss8kd)}
        if deep and fa == "on":
            stdout, f["peak_rss@32768"] = timed([TOOLS / "llama-bench", "-m", gguf, "-t", "2", "-fa", fa, "-o",
                                                 "json", "-p", "0", "-n", "128", "-d", "32768", "-r", "1"])
            rows += json.loads(stdout)
        for r in rows:
            depth = r.get("n_depth", 0)
            if r.get("n_prompt") == 8192 and r.get("n_gen") == 0:
                f["pp8192"] = r["avg_ts"]
            elif r.get("n_gen") == 128 and r.get("n_prompt") == 0 and depth in (8192, 32768):
                f[f"tg128@{depth}"] = r["avg_ts"]
        out["-fa on" if fa == "on" else "-fa off"] = f
    return out


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return fmt(a / b, 2) + "x" if a and b else "-"


def table(size, res):
    title, _ = SIZES[size]
    best4 = max((res[n]["llama.cpp"]["tg128"] for n in FOUR_BIT_GGUF if n in res), default=None)
    weights = "its own weights" if SIZES[size][1] is None else "random weights"
    kernels = sorted({r["archgen"].get("kernels") or "?" for r in res.values()})
    lines = [f"### {size}: {title}, {weights}, 2 threads", "",
             f"archgen's CPU kernels: {', '.join(kernels)}", "",
             "| format | archgen tg128 | llama.cpp tg128 | ratio | vs best 4-bit | archgen pp512 | llama.cpp pp512 | ratio | archgen peak RSS | llama.cpp peak RSS |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in res.items():
        a, ll = r["archgen"], r.get("llama.cpp")
        tg = ll["tg128"] if ll else None
        pp = ll["pp512"] if ll else None
        vs4 = a["tg128"] / best4 if best4 and name in ("mlx 4-bit g64", *FOUR_BIT_GGUF) else None
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} MiB | {} |".format(
            name, fmt(a["tg128"]), fmt(tg), ratio(a["tg128"], tg),
            fmt(vs4, 2) + "x" if vs4 else "-", fmt(a["pp512"]), fmt(pp),
            ratio(a["pp512"], pp), a["peak_rss"] >> 20,
            f"{ll['peak_rss'] >> 20} MiB" if ll else "-"))
    return "\n".join(lines) + "\n"


def long_table(size, res):
    """archgen's rows beside llama-bench's on LONG_GGUF, with and without
    flash attention."""
    ll = res["llama.cpp"]
    lines = [f"### {size}: long context ({SIZES[size][0]}, random weights, 2 threads)", "",
             f"llama.cpp on {LONG_GGUF}, without and with flash attention; archgen at its defaults.", "",
             "| engine, format | pp8192 | tg128 after 8192 | tg128 after 32768 | peak RSS at 8192 | peak RSS at 32768 |",
             "|---|---|---|---|---|---|"]
    mib = lambda r, k: f"{r[k] >> 20} MiB" if k in r else "-"  # noqa: E731
    for name, r in res["archgen"].items():
        lines.append(f"| archgen, {name} | {fmt(r['pp8192'])} | {fmt(r['tg128@8192'])} | {fmt(r.get('tg128@32768'))} "
                     f"| {mib(r, 'peak_rss@8192')} | {mib(r, 'peak_rss@32768')} |")
    for fa, r in ll.items():
        lines.append(f"| llama.cpp, {LONG_GGUF}, {fa} | {fmt(r.get('pp8192'))} | {fmt(r.get('tg128@8192'))} "
                     f"| {fmt(r.get('tg128@32768'))} | {mib(r, 'peak_rss@8192')} | {mib(r, 'peak_rss@32768')} |")
    return "\n".join(lines) + "\n"


# archgen's settings a user can choose, beside the default: the checkpoint's
# own (half-precision) arithmetic, the prompt products off the tile unit, the
# quantized products on x as it is (not rounded to 16 bits per group, so on
# the float32 kernels), and a float32 KV cache (the default holds the
# checkpoint's half precision).
FLAG_SETTINGS = {"-dtype checkpoint": ({}, "checkpoint"), "ARCHGEN_MLX_TILES=0": ({"ARCHGEN_MLX_TILES": "0"}, None),
                 "ARCHGEN_MLX_NATIVE_QMM16=0": ({"ARCHGEN_MLX_NATIVE_QMM16": "0"}, None),
                 "ARCHGEN_MLX_NATIVE_QMV16=0": ({"ARCHGEN_MLX_NATIVE_QMV16": "0"}, None),
                 "-kv-dtype float32": ({}, "kv:float32")}
FLAG_FORMATS = ["mlx 4-bit g64", "mlx bfloat16", "GGUF Q4_K_M"]


def flags_table(size, res):
    lines = [f"### {size}: the default beside archgen's other settings", "",
             "| format | setting | tg128 | pp512 | default / best tg128 | default / best pp512 |",
             "|---|---|---|---|---|---|"]
    for name, settings in res.items():
        best_tg = max(r["tg128"] for r in settings.values())
        best_pp = max(r["pp512"] for r in settings.values())
        for setting, r in settings.items():
            lines.append(f"| {name} | {setting} | {fmt(r['tg128'])} | {fmt(r['pp512'])} | "
                         + (f"{settings['default']['tg128'] / best_tg:.2f} | {settings['default']['pp512'] / best_pp:.2f} |"
                            if setting == "default" else "| |"))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out/bench/sizes")
    ap.add_argument("--sizes", default="1b", help="comma-separated: " + ", ".join(SIZES))
    ap.add_argument("--long", default="", help="sizes that also get the long-context rows (comma-separated)")
    ap.add_argument("--long-depths", default="8192,32768",
                    help="8192, or 8192,32768 (decode after 32k too: about 40 minutes more at 1B)")
    ap.add_argument("--flags", default="", help="sizes whose rows also run archgen's other settings")
    ap.add_argument("--runs", default="3")
    ap.add_argument("--merge", action="store_true",
                    help="keep the previous results.json's sizes and rows not measured now")
    ap.add_argument("--prepare", action="store_true", help="make the sizes' checkpoints, measure nothing")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bin_dir = args.out / "bin"
    for cmd in ("gorun", "ggufdir"):
        run(["go", "build", "-o", bin_dir / cmd, f"./bench/{cmd}"])
    pf = prompts(args.out, 49152)
    path = args.out / "results.json"
    results = {"sizes": {}, "long": {}, "flags": {}}
    if args.merge and path.exists():
        results.update(json.loads(path.read_text()))
    # The commands whose rows the file holds: this one, and with --merge the
    # earlier ones whose rows it keeps.
    command = "bench/sizes.py " + " ".join(sys.argv[1:])
    earlier = results.get("commands") or ([results["command"]] if results.get("command") else [])
    results.update({"machine": machine(), "runs": int(args.runs), "threads": 2, "command": command,
                    "commands": [c for c in earlier if c != command] + [command]})
    tok_dir = tokenizer_dir(args.out / "models", bin_dir)

    def save():
        path.write_text(json.dumps(results, indent=2))

    sizes = [s for s in args.sizes.split(",") if s]
    if args.prepare:
        for size in sizes:
            make(args.out / "models", size, tok_dir)
        return
    for size in sizes:
        ckpts = make(args.out / "models", size, tok_dir)
        res = {}
        for name, (d, g) in ckpts.items():
            res[name] = {"archgen": archgen(d, pf, args.runs, bin_dir)}
            if g is not None:
                res[name]["llama.cpp"] = llama_bench(g, args.runs)
            results["sizes"][size] = {"title": SIZES[size][0], "rows": res}
            save()
        if size in args.flags.split(","):
            fl = {}
            for name in FLAG_FORMATS:
                if name not in ckpts:
                    continue
                fl[name] = {"default": {k: res[name]["archgen"][k] for k in ("tg128", "pp512")}}
                for setting, (env, dtype) in FLAG_SETTINGS.items():
                    # the half-precision arithmetic is slow: one run
                    slow = dtype == "checkpoint"
                    r = archgen(ckpts[name][0], pf, "1" if slow else args.runs, bin_dir, env, dtype)
                    fl[name][setting] = {"tg128": r["tg128"], "pp512": r["pp512"], "dtype": r["dtype"]}
                results["flags"][size] = fl
                save()
        if size in args.long.split(","):
            deep = "32768" in args.long_depths.split(",")
            lr = {"archgen": {}, "llama.cpp": None}
            for i, name in enumerate(LONG_FORMATS):
                # 32k: archgen's first format alone (its prefill takes minutes)
                lr["archgen"][name] = archgen_long(ckpts[name][0], pf, args.runs, bin_dir, deep and i == 0)
                results["long"][size] = lr
                save()
            lr["llama.cpp"] = llama_bench_long(ckpts[LONG_GGUF][1], args.runs, deep)
            results["long"][size] = lr
            save()
    md = [table(size, r["rows"]) for size, r in results["sizes"].items()]
    md += [flags_table(size, r) for size, r in results["flags"].items()]
    md += [long_table(size, r) for size, r in results["long"].items() if r.get("llama.cpp")]
    text = "\n".join(md)
    print(text)
    (args.out / "tables.md").write_text(text)


if __name__ == "__main__":
    main()
