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
from gguf import GGUFWriter
from mlx.utils import tree_flatten
from mlx_lm.utils import _get_classes as get_model_classes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf import TEXT, add_hparams, byte_alphabet, gguf_name, learn_bpe, llama_cpp_permute  # noqa: E402

CASES = {
    # name: (model_type, gguf arch, config deltas)
    "llama": ("llama", "llama", {"num_key_value_heads": 2, "tie_word_embeddings": False}),
    "qwen2": ("qwen2", "qwen2", {"num_key_value_heads": 2, "tie_word_embeddings": False}),
    "qwen3": ("qwen3", "qwen3", {"num_key_value_heads": 2, "tie_word_embeddings": True, "head_dim": 64}),
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


def write_f32(path, arch, config, weights, tokens, token_types, merges):
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = GGUFWriter(path, arch)
    add_hparams(w, config, len(tokens))
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")  # llama.cpp's name of GPT-2's pre-tokenizer
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    for hf in sorted(weights):
        x = np.array(weights[hf].astype(mx.float32))
        if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
            x = llama_cpp_permute(x, heads if ".q_proj." in hf else kv)
        w.add_tensor(gguf_name(hf), x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out, tools = sys.argv[1], sys.argv[2]
    alphabet = byte_alphabet()
    merges = learn_bpe(TEXT, alphabet, 40)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + alphabet + [a + b for a, b in merges]
    token_types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    for case, (model_type, arch, deltas) in CASES.items():
        d = os.path.join(out, case)
        os.makedirs(d, exist_ok=True)
        config = {
            "model_type": model_type,
            "hidden_size": 256,
            "num_hidden_layers": 2,
            "intermediate_size": 512,
            "num_attention_heads": 4,
            "rms_norm_eps": 1e-5,
            "vocab_size": len(tokens),
            "max_position_embeddings": 512,
            "rope_theta": 10000.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        }
        config.update(deltas)
        model_class, args_class = get_model_classes(config)
        mx.random.seed(5)
        model = model_class(args_class.from_dict(config))
        params = dict(tree_flatten(model.parameters()))
        for k, v in params.items():
            if k.endswith("norm.weight"):
                params[k] = 1 + 0.2 * mx.random.normal(v.shape)
            elif k.endswith(".bias"):
                params[k] = 0.1 * mx.random.normal(v.shape)
            elif k.endswith("embed_tokens.weight"):
                # larger than mlx's init, so that the logits spread
                params[k] = 0.5 * mx.random.normal(v.shape)
        model.load_weights(list(params.items()))
        mx.eval(model.parameters())
        weights = dict(tree_flatten(model.parameters()))
        f32 = os.path.join(d, "model-F32.gguf")
        write_f32(f32, arch, config, weights, tokens, token_types, merges)
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
