"""Writes a llama, qwen3 or qwen3_5 model dir (mlx-lm's layout, float
weights) as an F16 GGUF file the way llama.cpp's converter lays one out, for
llama-quantize to quantize further: llama.cpp's tensor names and metadata
keys (gguf-py, the `gguf` package pinned with mlx-lm's venv), llama's q and
k rows in the converter's order for its rope (qwen3's rope needs none),
Qwen3.5's gated delta layers as its converter stores them (value heads in
tiled order, A as -exp(A_log), the convolution float32 without its unit
axis), norms kept float32,
and the tokenizer of another GGUF file of the same vocabulary (its
tokenizer.* keys copied as they are). Tensors go through a temporary file as
they are converted, so an 8B model needs memory for one tensor at a time,
not for the whole file.

    .deps/py/bin/python bench/llama_gguf.py MODEL_DIR TOKENIZER.gguf OUT.gguf

The converter itself (convert_hf_to_gguf.py) imports torch, which this
machine does not install; gguf/testdata/make_gguf.py's name table and row
order and hyperparameter keys, checked there against archgen's reader and
mlx-lm, are reused.
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gguf" / "testdata"))
from make_gguf import add_hparams, gguf_name, llama_cpp_permute, qwen35_metadata, qwen35_tensors  # noqa: E402


def copy_tokenizer(src, w):
    """Every tokenizer.* key of the GGUF file src, into the writer w."""
    r = GGUFReader(src)
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vtype, sub_type=sub)
    return len(r.fields["tokenizer.ggml.tokens"].contents())


def main(model_dir, tok_gguf, out):
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    arch = {"qwen3_5": "qwen35"}.get(config["model_type"], config["model_type"])
    if arch not in ("llama", "qwen3", "qwen35"):
        sys.exit(f"llama_gguf: {model_dir}: model_type {config['model_type']!r}, want llama, qwen3 or qwen3_5")
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = GGUFWriter(out, arch, use_temp_file=True)
    w.add_name(model_dir.name)
    add_hparams(w, config, config["vocab_size"])
    w.add_file_type(LlamaFileType.MOSTLY_F16)
    n = copy_tokenizer(tok_gguf, w)
    if n != config["vocab_size"]:
        sys.exit(f"llama_gguf: {tok_gguf} has {n} tokens, the model a vocabulary of {config['vocab_size']}")
    weights = {}
    for f in sorted(model_dir.glob("model*.safetensors")):
        weights.update(mx.load(str(f)))
    if arch == "qwen35":
        # its rope's sections (pairs of dimensions) as Qwen3.5's configs give them
        rp = config["rope_parameters"]
        qwen35_metadata(w, arch, config, [*rp["mrope_section"], 0])
        weights = qwen35_tensors(weights, config)
        for hf in sorted(weights):
            x = weights.pop(hf)
            name = hf.removeprefix("gguf:") if hf.startswith("gguf:") else gguf_name(hf, arch)
            w.add_tensor(name, x.astype(np.float16) if x.ndim == 2 and "ssm_conv1d" not in name else x)
        weights = {}
    for hf in sorted(weights):
        x = np.array(weights.pop(hf).astype(mx.float32))
        if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
            x = llama_cpp_permute(x, heads if ".q_proj." in hf else kv)
        w.add_tensor(gguf_name(hf, arch), x.astype(np.float16) if x.ndim == 2 else x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    main(*sys.argv[1:])
