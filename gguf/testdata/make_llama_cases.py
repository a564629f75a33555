"""Makes the GGUF files of the llama.cpp parity test, and llama.cpp's
logits on each.

Usage: make_llama_cases.py DIR TOOLS_DIR [REAL.gguf]

TOOLS_DIR holds llama.cpp's llama-quantize and bench/llama-logits (made by
`make setup-llama-tools`). For each case, DIR/<case>/ receives:
  model-F32.gguf     a random mlx-lm model of the case's architecture, as
                     llama.cpp's converter lays it out (make_gguf.py's
                     tables), every tensor float32; rows of 256 values or a
                     multiple, so that every K-quant applies
  model-<TYPE>.gguf  that file quantized by llama-quantize (its own choice
                     of types per tensor for the _S/_M mixtures; --pure,
                     every matrix in one type, for the others)
  logits-<TYPE>.npy  llama.cpp's logits for TOKENS on model-<TYPE>.gguf
  tokens.json        TOKENS

With REAL.gguf (SmolLM2-135M-Instruct's Q4_1 file), DIR/real/ receives the
same of it: model-F32.gguf its values decoded by llama-quantize, and its
requantizations to the types people download (REAL_TYPES), beside the file
itself as model-Q4_1.gguf.
"""

import json
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf import gguf_name, llama_cpp_permute, random_model, vocabulary, writer  # noqa: E402

CASES = {
    # name: (model_type, gguf arch, config deltas)
    "llama": ("llama", "llama", {"num_key_value_heads": 2, "tie_word_embeddings": False}),
    "qwen2": ("qwen2", "qwen2", {"num_key_value_heads": 2, "tie_word_embeddings": False}),
    "qwen3": ("qwen3", "qwen3", {"num_key_value_heads": 2, "tie_word_embeddings": True, "head_dim": 64}),
    "olmo2": ("olmo2", "olmo2", {"num_key_value_heads": 2, "tie_word_embeddings": False}),
    "seed_oss": ("seed_oss", "seed_oss", {"num_key_value_heads": 2, "tie_word_embeddings": False, "head_dim": 32,
                                          "attention_bias": True}),
    "granite": ("granite", "granite", {"num_key_value_heads": 2, "tie_word_embeddings": True, "attention_bias": False,
                                        "mlp_bias": False, "logits_scaling": 4.0, "attention_multiplier": 0.0078125,
                                        "embedding_multiplier": 12.0, "residual_multiplier": 0.22}),
    "hunyuan": ("hunyuan_v1_dense", "hunyuan-dense", {"num_key_value_heads": 2, "tie_word_embeddings": True,
                                                     "attention_bias": False, "use_qk_norm": True, "head_dim": 64}),
    # four layers: the fourth has no positions
    "smollm3": ("smollm3", "smollm3", {"num_key_value_heads": 2, "tie_word_embeddings": True, "num_hidden_layers": 4}),
}

# the file's name: (llama-quantize's type, --pure)
TYPES = {
    "Q4_0": ("Q4_0", True),
    "Q4_1": ("Q4_1", True),
    "Q5_0": ("Q5_0", True),
    "Q5_1": ("Q5_1", True),
    "Q8_0": ("Q8_0", True),
    "Q2_K": ("Q2_K", True),
    "Q3_K": ("Q3_K_M", True),
    "Q4_K": ("Q4_K_M", True),
    "Q5_K": ("Q5_K_M", True),
    "Q6_K": ("Q6_K", True),
    "IQ4_NL": ("IQ4_NL", True),
    "IQ4_XS": ("IQ4_XS", True),
    "Q3_K_M": ("Q3_K_M", False),
    "Q4_K_M": ("Q4_K_M", False),
    "Q5_K_M": ("Q5_K_M", False),
}

# the architectures whose converter reorders q and k rows for llama.cpp's
# rope (LlamaModel's subclasses)
PERMUTED = {"llama", "smollm3", "granite"}

TOKENS = [5, 60, 61, 62, 100, 200, 7, 8, 9, 10, 150, 250, 33, 90, 120, 64]

REAL_TYPES = {"Q4_K_M": "Q4_K_M", "Q5_K_M": "Q5_K_M", "Q6_K": "Q6_K", "Q8_0": "Q8_0", "IQ4_XS": "IQ4_XS"}


def quantize(tools, src, dst, qtype, extra=()):
    args = [os.path.join(tools, "llama-quantize"), *extra, src, dst, qtype, "2"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def logits(tools, d, files):
    for name, path in files.items():
        args = [os.path.join(tools, "llama-logits"), path, os.path.join(d, f"logits-{name}.npy")] + [str(t) for t in TOKENS]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(args)}:\n{r.stderr[-2000:]}")
    with open(os.path.join(d, "tokens.json"), "w") as f:
        json.dump(TOKENS, f)


def real(out, tools, src):
    d = os.path.join(out, "real")
    os.makedirs(d, exist_ok=True)
    f32 = os.path.join(d, "model-F32.gguf")
    quantize(tools, src, f32, "F32", ["--allow-requantize"])
    q41 = os.path.join(d, "model-Q4_1.gguf")
    os.symlink(os.path.abspath(src), q41)
    files = {"F32": f32, "Q4_1": q41}
    for name, qtype in REAL_TYPES.items():
        files[name] = os.path.join(d, f"model-{name}.gguf")
        quantize(tools, f32, files[name], qtype)
    logits(tools, d, files)
    print("real made", len(files), "files")


def write_f32(path, arch, config, weights, vocab):
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = writer(path, arch, config, vocab)
    w.add_file_type(0)
    if arch == "granite":
        # as llama.cpp's GraniteModel writes the multipliers
        w.add_attention_scale(config["attention_multiplier"])
        w.add_embedding_scale(config["embedding_multiplier"])
        w.add_residual_scale(config["residual_multiplier"])
        w.add_logit_scale(config["logits_scaling"])
    for hf in sorted(weights):
        x = np.array(weights[hf].astype(mx.float32))
        if arch in PERMUTED and (".q_proj." in hf or ".k_proj." in hf):
            x = llama_cpp_permute(x, heads if ".q_proj." in hf else kv)
        w.add_tensor(gguf_name(hf, arch), x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out, tools = sys.argv[1], sys.argv[2]
    vocab = vocabulary()
    for case, (model_type, arch, deltas) in CASES.items():
        d = os.path.join(out, case)
        os.makedirs(d, exist_ok=True)
        config, weights = random_model(model_type, deltas, len(vocab[0]), 256, 512, 5, embed_scale=0.5)
        f32 = os.path.join(d, "model-F32.gguf")
        write_f32(f32, arch, config, weights, vocab)
        files = {"F32": f32}
        for name, (qtype, pure) in TYPES.items():
            files[name] = os.path.join(d, f"model-{name}.gguf")
            quantize(tools, f32, files[name], qtype, ["--pure"] if pure else [])
        logits(tools, d, files)
        print(case, "made", len(files), "files")
    if len(sys.argv) > 3:
        real(out, tools, sys.argv[3])


if __name__ == "__main__":
    main()
