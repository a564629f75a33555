"""The reference for archgen's encoders that neither mlx-lm nor
mlx-embeddings has a module for: llama.cpp (the pinned tree's
llama-logits --embed, bench/llama-logits), on the GGUF file llama.cpp's
converter makes of the checkpoint. Random checkpoints only: this script
makes them.

    llama_ref.py < jobs.json > replies.json

Each job is one of:

  {"make": DIR, "arch": "nomic_bert", "config": {...}, "seed": int, "tokenizer": DIR2}
      Writes DIR, a nomic-bert checkpoint as Nomic's files hold it
      (config.json in Nomic's own key names, which the job's config gives,
      and model.safetensors with random float32 weights under Nomic's
      tensor names: embeddings.word_embeddings, embeddings.token_type_embeddings,
      emb_ln, encoder.layers.N.attn.Wqkv and attn.out_proj,
      encoder.layers.N.mlp.fc11, fc12 and fc2, encoder.layers.N.norm1 and
      norm2; the norms moved off 1 and 0), with DIR2's tokenizer files and a
      sentence-transformers folder that pools by the mean. Beside it,
      DIR/model.gguf: the F32 GGUF file of it, made as llama.cpp's converter
      makes one (conversion/bert.py's NomicBertModel, which imports torch,
      not installed here: its facts applied with gguf-py): arch nomic-bert,
      the tensors by gguf-py's name table, context length 2048 for
      n_positions 8192 with max_trained_positions 2048, rope base
      rotary_emb_base, causal attention off, the folder's pooling, and the
      WordPiece vocabulary in the converter's phantom-space spelling
      (bench/bert_gguf.py). Replies {}.

  {"quantize": GGUF, "out": PATH, "type": TYPE}
      Writes PATH, the GGUF file llama.cpp's llama-quantize makes of GGUF at
      TYPE (Q8_0, F16, Q4_K_M, ...). Replies {}.

  {"run": GGUF, "ids": [[int]]}
      Runs each input alone through llama.cpp and replies {"hidden":
      [[[float]]]}: every position's final hidden state (llama.cpp's
      pooling "none").
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import bert_gguf  # noqa: E402 - the converter's BERT vocabulary, and gguf-py from the pinned tree

gguf = bert_gguf.gguf
LLAMA_TOOLS = ROOT / ".deps" / "llama-tools" / "bin"
LLAMA_LOGITS = LLAMA_TOOLS / "llama-logits"


def hparam(config, *names, default=None):
    """The first of names config holds, as the converter's find_hparam reads them."""
    for n in names:
        if n in config:
            return config[n]
    if default is None:
        raise SystemExit(f"llama_ref: the config holds none of {names}")
    return default


def make_nomic(job):
    out = Path(job["make"])
    out.mkdir(parents=True, exist_ok=True)
    config = dict(job["config"], model_type="nomic_bert", architectures=["NomicBertModel"])
    hidden = hparam(config, "n_embd")
    layers, inner = hparam(config, "n_layer"), hparam(config, "n_inner")
    vocab, types = config["vocab_size"], config.get("type_vocab_size", 2)
    rng = np.random.default_rng(job["seed"])

    def normal(*shape, scale=0.1):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    def norm(name):
        return {name + ".weight": 1 + normal(hidden, scale=0.2), name + ".bias": normal(hidden, scale=0.2)}

    weights = {"embeddings.word_embeddings.weight": normal(vocab, hidden, scale=0.5),
               "embeddings.token_type_embeddings.weight": normal(types, hidden, scale=0.5)}
    weights.update(norm("emb_ln"))
    for i in range(layers):
        p = f"encoder.layers.{i}."
        weights[p + "attn.Wqkv.weight"] = normal(3 * hidden, hidden)
        weights[p + "attn.out_proj.weight"] = normal(hidden, hidden)
        weights[p + "mlp.fc11.weight"] = normal(inner, hidden)
        weights[p + "mlp.fc12.weight"] = normal(inner, hidden)
        weights[p + "mlp.fc2.weight"] = normal(hidden, inner)
        weights.update(norm(p + "norm1"))
        weights.update(norm(p + "norm2"))
    from safetensors.numpy import save_file

    save_file(weights, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tok = Path(job["tokenizer"])
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (tok / f).exists():
            (out / f).write_bytes((tok / f).read_bytes())
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": hidden, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_lasttoken": False}))
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    write_nomic_gguf(out, config, weights)
    return {}


def write_nomic_gguf(out, config, weights):
    """model.gguf in out: the converter's NomicBertModel facts (see the
    docstring)."""
    npos, trained = config.get("n_positions", 8192), config.get("max_trained_positions", 2048)
    if (npos, trained) != (8192, 2048):
        raise SystemExit(f"llama_ref: n_positions {npos} with max_trained_positions {trained}: the converter refuses it")
    layers = hparam(config, "n_layer")
    w = gguf.GGUFWriter(str(out / "model.gguf"), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.NOMIC_BERT])
    w.add_name(out.name)
    w.add_block_count(layers)
    w.add_context_length(2048)
    w.add_embedding_length(hparam(config, "n_embd"))
    w.add_feed_forward_length(hparam(config, "n_inner"))
    w.add_head_count(hparam(config, "n_head"))
    w.add_rope_freq_base(hparam(config, "rotary_emb_base"))
    w.add_layer_norm_eps(hparam(config, "layer_norm_epsilon"))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_causal_attention(False)
    w.add_pooling_type(bert_gguf.pooling(out))
    tokens, types = bert_gguf.vocabulary(out, config["vocab_size"])
    w.add_token_type_count(config.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(out, n_vocab=len(tokens)).add_to_gguf(w)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.NOMIC_BERT, layers)
    for name in sorted(weights):
        to = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if to is None:
            raise SystemExit(f"llama_ref: {name}: no llama.cpp name")
        w.add_tensor(to, weights[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run(job):
    if not LLAMA_LOGITS.exists():
        raise SystemExit(f"{LLAMA_LOGITS} is missing: run make setup-llama-tools")
    hidden = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hidden.npy")
        for ids in job["ids"]:
            subprocess.run([str(LLAMA_LOGITS), "--embed", job["run"], path] + [str(i) for i in ids], check=True)
            hidden.append(np.load(path).tolist())
    return {"hidden": hidden}


def quantize(job):
    tool = LLAMA_TOOLS / "llama-quantize"
    if not tool.exists():
        raise SystemExit(f"{tool} is missing: run make setup-llama-tools")
    subprocess.run([str(tool), job["quantize"], job["out"], job["type"], "2"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return {}


def main():
    replies = []
    for job in json.load(sys.stdin):
        if "make" in job and job.get("arch") == "nomic_bert":
            replies.append(make_nomic(job))
        elif "quantize" in job:
            replies.append(quantize(job))
        elif "run" in job:
            replies.append(run(job))
        else:
            raise SystemExit(f"unknown job {sorted(job)}")
    json.dump(replies, sys.stdout)


if __name__ == "__main__":
    main()
