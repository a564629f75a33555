"""archgen at the sizes and in the formats people run, beside llama.cpp's own
tools (llama-bench), at the defaults each gives a user: `make bench-sizes`.

    .deps/py/bin/python bench/sizes.py [--out out/bench/sizes] [--sizes 1b] [--runs 3]

For each size (a published geometry with random weights, SmolLM2's
vocabulary so that the GGUF files carry its real tokenizer; or, for
smollm2-135m, the real SmolLM2-135M-Instruct Q4_1 file, decoded to F32 and
requantized by llama-quantize to the K-quants its published files come in):
  1. mlx-lm makes the float32 checkpoint (bench/prepare.py random, mlx-lm's
     own init, seeded) and the formats mlx-community publishes from it
     (4-bit and 8-bit affine in groups of 64 with bfloat16 scales, and
     bfloat16), as mlx_lm.convert does;
  2. bench/llama_gguf.py writes it as an F16 GGUF file in llama.cpp's
     layout, and llama.cpp's llama-quantize makes Q4_0, Q4_K_M, Q5_K_M,
     Q6_K and Q8_0 from that, which archgen reads as archgen.Load does
     (package gguf: the K-quants held in their blocks);
  3. llama-bench (-p 512 -n 128 -t 2, --repetitions RUNS) measures each
     GGUF; archgen (bench/gorun, default options) measures each of its
     checkpoints: a 512-token prompt's prefill and 128 tokens decoded after
     a 16-token prompt, RUNS runs after a warm-up, in processes of their own;
     /usr/bin/time records each process's peak resident set;
  4. the table, printed and written to OUT/tables.md, every figure in
     OUT/results.json.

Decode is the goal's measure: archgen's tokens per second over llama.cpp's
best 4-bit rate (whichever of Q4_0 and Q4_K_M it decodes faster). The two
run one after the other, so that a drift of the machine's speed over
minutes falls between them; compare ratios within one run of this script.
"""

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

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
    # Qwen2.5-1.5B's geometry in llama's layout (its q, k and v biases
    # aside: the same products), in the format its GGUF files are most
    # downloaded in
    "qwen2.5-1.5b": ("Qwen2.5-1.5B geometry", {
        "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
        "num_attention_heads": 12, "num_key_value_heads": 2, "head_dim": 128,
        "rope_theta": 1000000.0}),
    # the real SmolLM2-135M-Instruct (no geometry: its own file)
    "smollm2-135m": ("SmolLM2-135M-Instruct, its Q4_1 file requantized", None),
}

# the formats measured at a size, where not every one (names of MLX_FORMATS
# and GGUF_FORMATS, and "GGUF Q4_1", the real file itself)
SIZE_FORMATS = {
    "qwen2.5-1.5b": ["mlx 4-bit g64", "GGUF Q4_K_M"],
    "smollm2-135m": ["GGUF Q4_1", "GGUF Q4_K_M", "GGUF Q6_K", "GGUF Q8_0"],
}

# archgen's formats: name -> bench/prepare.py level.
MLX_FORMATS = {"mlx 4-bit g64": "q4_g64", "mlx 8-bit g64": "q8_g64", "mlx bfloat16": "bfloat16"}
# llama.cpp's: name -> llama-quantize type.
GGUF_FORMATS = {"GGUF Q4_0": "Q4_0", "GGUF Q4_K_M": "Q4_K_M", "GGUF Q5_K_M": "Q5_K_M",
                "GGUF Q6_K": "Q6_K", "GGUF Q8_0": "Q8_0"}
FOUR_BIT_GGUF = ("GGUF Q4_0", "GGUF Q4_1", "GGUF Q4_K_M")


def log(msg):
    print(f"sizes: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    log(" ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


def timed(cmd):
    """cmd's standard output and its peak resident set in bytes."""
    p = run(["/usr/bin/time", "-f", "maxrss_kb=%M", *cmd], capture_output=True, text=True)
    rss = [line for line in p.stderr.splitlines() if line.startswith("maxrss_kb=")]
    return p.stdout, int(rss[-1].split("=")[1]) * 1024


def config(size):
    _, geom = SIZES[size]
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152,
            "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "max_position_embeddings": 131072,
            "torch_dtype": "float32", **geom}


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


def make(models, size):
    """Every checkpoint of size: {format: (archgen's dir, GGUF file or None)}."""
    if SIZES[size][1] is None:
        return make_real(models)
    wanted = SIZE_FORMATS.get(size, [*MLX_FORMATS, *GGUF_FORMATS])
    d = models / size
    d.mkdir(parents=True, exist_ok=True)
    src = d / "float32"
    if not (src / "config.json").exists():
        cfg = d / "config.json"
        cfg.write_text(json.dumps(config(size), indent=2))
        run([PY, "bench/prepare.py", "random", cfg, src])
    out = {}
    for name, level in MLX_FORMATS.items():
        if name not in wanted:
            continue
        dst = d / level
        if not (dst / "config.json").exists():
            run([PY, "bench/prepare.py", "derive", src, dst, level])
        out[name] = (dst, None)
    f16 = d / "model-F16.gguf"
    if not f16.exists():
        run([PY, "bench/llama_gguf.py", src, TOKENIZER_GGUF, f16])
    for name, qtype in GGUF_FORMATS.items():
        if name not in wanted:
            continue
        g = d / f"model-{qtype}.gguf"
        if not g.exists():
            run([TOOLS / "llama-quantize", f16, g, qtype, "2"], capture_output=True)
        out[name] = (g, g)
    return out


def prompts(out, n_vocab):
    path = out / "prompts.json"
    r = random.Random(0)
    items = [{"name": "prefill", "tokens": [r.randrange(100, n_vocab) for _ in range(512)], "gen": 1,
              "warm_tokens": 64, "warm_gen": 1},
             {"name": "decode", "tokens": [r.randrange(100, n_vocab) for _ in range(16)], "gen": 128,
              "warm_gen": 16}]
    path.write_text(json.dumps(items))
    return path


def archgen(model_dir, pf, runs, bin_dir):
    stdout, rss = timed([bin_dir / "gorun", "-model", model_dir, "-prompts", pf, "-runs", runs,
                         "-loads", "1"])
    res = json.loads(stdout)
    med = lambda k, f: statistics.median(r[f] for r in res["runs"][k])  # noqa: E731
    return {"pp512": med("prefill", "prompt_tps"), "tg128": med("decode", "generate_tps"),
            "peak_rss": rss, "dtype": res["dtype"], "kernels": res.get("kernels")}


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


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


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
            name, fmt(a["tg128"]), fmt(tg), fmt(a["tg128"] / tg, 2) + "x" if tg else "-",
            fmt(vs4, 2) + "x" if vs4 else "-", fmt(a["pp512"]), fmt(pp),
            fmt(a["pp512"] / pp, 2) + "x" if pp else "-", a["peak_rss"] >> 20,
            f"{ll['peak_rss'] >> 20} MiB" if ll else "-"))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out/bench/sizes")
    ap.add_argument("--sizes", default="1b", help="comma-separated: " + ", ".join(SIZES))
    ap.add_argument("--runs", default="3")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bin_dir = args.out / "bin"
    run(["go", "build", "-o", bin_dir / "gorun", "./bench/gorun"])
    pf = prompts(args.out, 49152)
    results, md = {}, []
    for size in args.sizes.split(","):
        ckpts = make(args.out / "models", size)
        res = {}
        for name, (d, g) in ckpts.items():
            res[name] = {"archgen": archgen(d, pf, args.runs, bin_dir)}
            if g is not None:
                res[name]["llama.cpp"] = llama_bench(g, args.runs)
        results[size] = res
        md.append(table(size, res))
    text = "\n".join(md)
    print(text)
    (args.out / "tables.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
