"""Latent attention with experts at a published geometry, archgen beside
mlx-lm on the same 4-bit checkpoint: `make bench-latent`.

    .deps/py/bin/python bench/latent.py [--out out/bench/latent] [--layers 4] [--runs 3]

The model is GLM-4.7-Flash's layers (glm4_moe_lite: hidden 2048, 20 heads
over a latent of 512 with rope parts of 64, nope 192, value 256, q rank
768; 64 experts of 1536, 4 a token, one shared; its vocabulary of 154,880),
written by hand from the survey of mlx-lm's modules (the model hub is not
reachable here), with fewer layers (LAYERS: the first dense, the others
sparse) and random weights by mlx-lm's own init, seeded:
  1. mlx-lm makes the bfloat16 checkpoint (bench/prepare.py random) and
     the 4-bit affine one in groups of 64 with bfloat16 scales that
     mlx-community publishes (bench/prepare.py derive ... q4_g64);
  2. archgen (bench/gorun, default options) measures a 512-token prompt's
     prefill and 128 tokens decoded after a 16-token prompt, RUNS runs
     after a warm-up; mlx-lm (bench/mlxlm_run.py, as its users run it) a
     32-token prompt and 16 tokens, RUNS runs after a warm-up, in processes
     of their own, one after the other;
  3. the bytes each keeps a token of context: archgen's cache (the latent
     and the rotated key a layer, float32 under its default float32
     arithmetic; bfloat16 with -dtype checkpoint; 8 bits with a quantized
     cache) beside mlx-lm's (the same two, in the checkpoint's bfloat16),
     computed from the geometry.
The table, printed and written to OUT/tables.md, every figure in
OUT/results.json. Ratios hold for this machine, this geometry, 4-bit g64
and 2 threads; compare them within one run of this script.
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybrid import measure  # noqa: E402
from sizes import PY, ROOT, fmt, log, prompts, run  # noqa: E402

# GLM-4.7-Flash's per-layer geometry (zai-org/GLM-4.7-Flash's config as the
# survey of mlx-lm's modules records it; written by hand).
GEOMETRY = {
    "architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite",
    "hidden_size": 2048, "intermediate_size": 10240, "moe_intermediate_size": 1536,
    "num_attention_heads": 20, "num_key_value_heads": 20,
    "q_lora_rank": 768, "kv_lora_rank": 512, "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64, "v_head_dim": 256,
    "n_routed_experts": 64, "n_shared_experts": 1, "num_experts_per_tok": 4,
    "routed_scaling_factor": 1.8, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
    "topk_method": "noaux_tc", "first_k_dense_replace": 1,
    "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "max_position_embeddings": 202752,
    "vocab_size": 154880, "tie_word_embeddings": False, "attention_bias": False,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out/bench/latent")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--runs", default="3")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bin_dir = args.out / "bin"
    run(["go", "build", "-o", bin_dir / "gorun", "./bench/gorun"])
    cfg = dict(GEOMETRY, num_hidden_layers=args.layers)
    d = args.out / "models" / f"glm-4.7-flash-{args.layers}l"
    d.mkdir(parents=True, exist_ok=True)
    q4 = d / "q4_g64"
    if not (q4 / "config.json").exists():
        src = d / "bfloat16"
        (d / "config.json").write_text(json.dumps(cfg, indent=2))
        run([PY, "bench/prepare.py", "random", d / "config.json", src, "bfloat16"])
        run([PY, "bench/prepare.py", "derive", src, q4, "q4_g64"])
        shutil.rmtree(src)  # only the way to the 4-bit checkpoint
    pf = prompts(d, cfg["vocab_size"])
    slow = d / "prompts-mlxlm.json"
    items = [it for it in json.loads(pf.read_text()) if it["name"] in ("prefill", "decode")]
    for it in items:
        if it["name"] == "prefill":
            it["tokens"] = it["tokens"][:32]
        if it["name"] == "decode":
            it["gen"] = 16
    slow.write_text(json.dumps(items))
    a = measure([bin_dir / "gorun", "-model", q4, "-prompts", pf, "-runs", args.runs, "-loads", "1", "-only", "prefill,decode"])
    log(f"archgen: decode {fmt(a['tg128'])} tok/s, prefill {fmt(a['pp512'])}")
    m = measure([PY, "bench/mlxlm_run.py", "--model", q4, "--prompts", slow, "--runs", args.runs, "--warmup", "1", "--loads", "1"])
    log(f"mlx-lm: decode {fmt(m['tg128'])} tok/s, prefill {fmt(m['pp512'])}")
    latent = (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * args.layers
    expanded = cfg["num_attention_heads"] * (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"] + cfg["v_head_dim"]) * args.layers
    cache = {  # bytes a token of context keeps, all layers
        "archgen float32": latent * 4, "archgen bfloat16": latent * 2,
        "archgen 8-bit": latent + latent // 32 * 2 * 4,
        "mlx-lm bfloat16": latent * 2, "expanded bfloat16": expanded * 2,
    }
    results = {"geometry": cfg, "archgen": a, "mlx-lm": m, "cache_bytes_per_token": cache,
               "weight_bytes": sum(p.stat().st_size for p in q4.glob("*.safetensors"))}
    lines = [f"### Latent attention with experts: GLM-4.7-Flash's layers ({args.layers} of 47), 4-bit g64 (bfloat16 scales), random weights, 2 threads", "",
             "| | archgen | mlx-lm | ratio |", "|---|---|---|---|",
             f"| decode (tok/s; archgen tg128, mlx-lm tg16) | {fmt(a['tg128'])} | {fmt(m['tg128'])} | {fmt(a['tg128'] / m['tg128'], 2)}x |",
             f"| prefill (tok/s; archgen pp512, mlx-lm pp32) | {fmt(a['pp512'])} | {fmt(m['pp512'])} | {fmt(a['pp512'] / m['pp512'], 2)}x |",
             f"| peak resident memory | {a['peak_rss'] >> 20} MiB | {m['peak_rss'] >> 20} MiB | |", "",
             "Cache bytes a token of context keeps (all layers): " + ", ".join(f"{k} {v:,}" for k, v in cache.items()) + ".", ""]
    text = "\n".join(lines)
    print(text)
    (args.out / "tables.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
