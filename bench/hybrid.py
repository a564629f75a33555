"""The hybrid models (attention beside recurrent layers) at published
geometries, archgen beside mlx-lm on the same 4-bit checkpoints, and beside
an attention model: `make bench-hybrid`.

    .deps/py/bin/python bench/hybrid.py [--out out/bench/hybrid] [--models qwen3.5-0.8b,lfm2-1.2b] [--runs 3] [--rounds 3]

For each model (a published geometry, written by hand: the model hub is not
reachable here; random weights by mlx-lm's own init, seeded):
  1. mlx-lm makes the float32 checkpoint (bench/prepare.py random) and the
     4-bit affine one in groups of 64 with bfloat16 scales that
     mlx-community publishes (bench/prepare.py derive ... q4_g64);
  2. archgen (bench/gorun, default options) and mlx-lm (bench/mlxlm_run.py,
     as its users run it) each measure a prompt's prefill and the tokens
     decoded after a 16-token prompt, in processes of their own, one after
     the other: archgen a 512-token prompt and 128 tokens, RUNS runs after a
     warm-up; mlx-lm, which on this CPU takes about 6 s a token in prefill
     and decode alike (0.163, 0.165 and 0.168 tokens/s for 1, 16 and 64
     tokens at once on the LFM2 geometry, measured), a 32-token prompt and 4
     tokens, one run without warm-up, so that its rates take minutes, not
     hours;
  3. the attention model beside each hybrid (Llama's layers at the hybrid's
     width, depth and vocabulary, its MLP widened until its weights weigh
     what the hybrid's do) is measured by archgen the same way: decoding is
     a pass over the weights per token, so equal bytes should decode at
     equal speed, and the hybrid's rate over the attention model's is the
     cost of its recurrent layers. The two run in turns, ROUNDS rounds of
     a hybrid process then a twin process, so that both meet the same
     state of the machine: the table gives the median of each side's
     rates and the median of the rounds' ratios, with their range.
The table, printed and written to OUT/tables.md, every figure in
OUT/results.json. Ratios hold for this machine, these geometries, 4-bit g64
and 2 threads; compare them within one run of this script.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sizes import PY, ROOT, fmt, log, prompts, run, timed  # noqa: E402

# Published geometries (written by hand, from the models' configs as
# published; the per-token work of the layers is the model's own).
MODELS = {
    "qwen3.5-0.8b": ("Qwen3.5-0.8B geometry (text model)", {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5",
        "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 24,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
        "linear_num_key_heads": 16, "linear_num_value_heads": 16,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
        "rms_norm_eps": 1e-6, "vocab_size": 248320, "tie_word_embeddings": True,
        "max_position_embeddings": 262144,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}}),
    "lfm2-1.2b": ("LFM2-1.2B geometry", {
        "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2",
        "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 65536, "max_position_embeddings": 128000,
        "norm_eps": 1e-5, "conv_bias": False, "conv_L_cache": 3, "block_dim": 2048,
        "block_ff_dim": 12288, "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": True, "full_attn_idxs": [2, 5, 8, 10, 12, 14],
        "rope_theta": 1000000.0}),
}


def attention_twin(geom, width):
    """A Llama config of the hybrid's width, depth, heads and vocabulary,
    with an MLP of width."""
    h, layers = geom["hidden_size"], geom["num_hidden_layers"]
    heads = geom["num_attention_heads"]
    kv = geom.get("num_key_value_heads", heads)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": h // heads, "intermediate_size": width,
            "rms_norm_eps": 1e-5, "vocab_size": geom["vocab_size"], "tie_word_embeddings": True,
            "max_position_embeddings": 131072, "rope_theta": 1000000.0}


def weight_bytes(d):
    return sum(p.stat().st_size for p in Path(d).glob("*.safetensors"))


def make(models, name, cfg):
    """The float32 and 4-bit checkpoints of cfg under models/name."""
    d = models / name
    d.mkdir(parents=True, exist_ok=True)
    src, q4 = d / "float32", d / "q4_g64"
    if (q4 / "config.json").exists():
        return q4  # the float32 checkpoint is only the way to it (and may be deleted)
    if not (src / "config.json").exists():
        (d / "config.json").write_text(json.dumps(cfg, indent=2))
        run([PY, "bench/prepare.py", "random", d / "config.json", src])
    run([PY, "bench/prepare.py", "derive", src, q4, "q4_g64"])
    return q4


def twin(models, name, geom, target):
    """The attention model of about target bytes beside hybrid name: the MLP
    width found from two probes (its bytes are linear in the width)."""
    def build(width):
        cfg = attention_twin(geom, width)
        return make(models, f"{name}-attention-{width}", cfg)
    lo, hi = 512, 4096
    b_lo, b_hi = weight_bytes(build(lo)), weight_bytes(build(hi))
    per = (b_hi - b_lo) / (hi - lo)
    width = max(256, int(round((lo + (target - b_lo) / per) / 256)) * 256)
    return build(width), width


def measure(cmd):
    stdout, rss = timed(cmd)
    res = json.loads(stdout)
    med = lambda k, f: statistics.median(r[f] for r in res["runs"][k])  # noqa: E731
    return {"pp512": med("prefill", "prompt_tps"), "tg128": med("decode", "generate_tps"), "peak_rss": rss}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out/bench/hybrid")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runs", default="3")
    ap.add_argument("--rounds", type=int, default=3, help="turns of the hybrid and its attention twin")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bin_dir = args.out / "bin"
    run(["go", "build", "-o", bin_dir / "gorun", "./bench/gorun"])
    results = {}
    lines = ["### Hybrid models, 4-bit g64 (bfloat16 scales), random weights, 2 threads", "",
             "| model | weights | archgen tg128 | mlx-lm tg4 | ratio | archgen pp512 | mlx-lm pp32 | ratio | attention twin (weights) | its tg128 | hybrid / twin |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.models.split(","):
        title, cfg = MODELS[name]
        q4 = make(args.out / "models", name, cfg)
        pf = prompts(args.out / "models" / name, cfg["vocab_size"])
        slow = args.out / "models" / name / "prompts-mlxlm.json"
        items = json.loads(pf.read_text())
        for it in items:
            if it["name"] == "prefill":
                it["tokens"] = it["tokens"][:32]
            if it["name"] == "decode":
                it["gen"] = 4
        slow.write_text(json.dumps(items))
        tq4, width = twin(args.out / "models", name, cfg, weight_bytes(q4))
        rounds = []
        for _ in range(args.rounds):
            ra = measure([bin_dir / "gorun", "-model", q4, "-prompts", pf, "-runs", args.runs, "-loads", "1"])
            rt = measure([bin_dir / "gorun", "-model", tq4, "-prompts", pf, "-runs", args.runs, "-loads", "1"])
            rounds.append((ra, rt))
            log(f"{name} round {len(rounds)}: hybrid tg128 {fmt(ra['tg128'])}, twin {fmt(rt['tg128'])}")
        a = {k: statistics.median(r[0][k] for r in rounds) for k in ("pp512", "tg128", "peak_rss")}
        t = {k: statistics.median(r[1][k] for r in rounds) for k in ("pp512", "tg128", "peak_rss")}
        ratios = [r[0]["tg128"] / r[1]["tg128"] for r in rounds]
        m = measure([PY, "bench/mlxlm_run.py", "--model", q4, "--prompts", slow, "--runs", "1", "--warmup", "0", "--loads", "1"])
        results[name] = {"title": title, "weight_bytes": weight_bytes(q4), "archgen": a, "mlx-lm": m,
                         "twin": {"intermediate_size": width, "weight_bytes": weight_bytes(tq4), **t},
                         "rounds": [{"archgen": r[0], "twin": r[1]} for r in rounds],
                         "hybrid_over_twin": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}}
        lines.append("| {} | {} MiB | {} | {} | {}x | {} | {} | {}x | MLP {} ({} MiB) | {} | {}x ({}-{}, {} rounds) |".format(
            title, weight_bytes(q4) >> 20, fmt(a["tg128"]), fmt(m["tg128"]), fmt(a["tg128"] / m["tg128"], 2),
            fmt(a["pp512"]), fmt(m["pp512"]), fmt(a["pp512"] / m["pp512"], 2),
            width, weight_bytes(tq4) >> 20, fmt(t["tg128"]), fmt(statistics.median(ratios), 2),
            fmt(min(ratios), 2), fmt(max(ratios), 2), len(rounds)))
        log(lines[-1])
    text = "\n".join(lines) + "\n"
    print(text)
    (args.out / "tables.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
