"""Writes a BERT sentence-transformers folder (all-MiniLM-L6-v2's) as the F32
GGUF file llama.cpp's converter makes of it, so that llama-server can serve
the same embedding model archgen serves: llama.cpp's BERT tensor names (by
gguf-py's own name table, from the pinned llama.cpp tree), its metadata
(non-causal attention, the folder's pooling), and its WordPiece vocabulary
in the converter's "phantom space" spelling (a word-start piece gets a
leading U+2581, a continuation piece loses its ##, control tokens stay as
they are), with the special tokens gguf-py's SpecialVocab reads from the
folder. The pooler and the pretraining heads are left out, as the
converter leaves them.

    .deps/py/bin/python bench/bert_gguf.py MODEL_DIR OUT.gguf

convert_hf_to_gguf.py itself imports torch, which this machine does not
install; these are the facts of its BertModel class (conversion/bert.py
in the same tree), applied with gguf-py and transformers.
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".deps" / "llama-tools" / "src" / "gguf-py"))
import gguf  # noqa: E402 - llama.cpp's own gguf-py, the tree llama-server is built from

POOLING = {"pooling_mode_mean_tokens": gguf.PoolingType.MEAN, "pooling_mode_cls_token": gguf.PoolingType.CLS,
           "pooling_mode_lasttoken": gguf.PoolingType.LAST}


def pooling(model_dir):
    """The pooling the folder's sentence-transformers files ask for."""
    modules = json.loads((model_dir / "modules.json").read_text())
    for m in modules:
        if m["type"].endswith(".Pooling"):
            cfg = json.loads((model_dir / m["path"] / "config.json").read_text())
            on = [k for k, v in cfg.items() if v is True and k in POOLING]
            if len(on) == 1:
                return POOLING[on[0]]
    sys.exit(f"bert_gguf: {model_dir}: no single pooling mode llama.cpp has")


def vocabulary(model_dir, n_vocab):
    """The converter's tokens and token types for a WordPiece vocabulary."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    reverse = {i: t for t, i in tok.vocab.items()}
    added = tok.get_added_vocab()
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = reverse[i]
        if t in added and tok.added_tokens_decoder[i].special:
            types.append(gguf.TokenType.CONTROL)
        else:
            types.append(gguf.TokenType.USER_DEFINED if t in added else gguf.TokenType.NORMAL)
        tokens.append(t)
    phantom = [t if ty == gguf.TokenType.CONTROL else (t[2:] if t.startswith("##") else "\u2581" + t)
               for t, ty in zip(tokens, types)]
    return phantom, types


def main(model_dir, out):
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "bert":
        sys.exit(f"bert_gguf: {model_dir}: model_type {config.get('model_type')!r}, want bert")
    n_layers, n_vocab = config["num_hidden_layers"], config["vocab_size"]
    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    w.add_name(model_dir.name)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_block_count(n_layers)
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_eps(config.get("layer_norm_eps", 1e-12))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_causal_attention(False)
    w.add_pooling_type(pooling(model_dir))
    tokens, types = vocabulary(model_dir, n_vocab)
    w.add_token_type_count(config.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(w)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layers)
    weights = mx.load(str(model_dir / "model.safetensors"))
    skip = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
    for name in sorted(weights):
        hf = name[len("bert."):] if name.startswith("bert.") else name
        if hf in skip or hf.startswith("cls."):
            continue
        to = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if to is None:
            sys.exit(f"bert_gguf: {name}: no llama.cpp name")
        w.add_tensor(to, np.array(weights[name].astype(mx.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
