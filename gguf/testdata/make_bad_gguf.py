"""Writes GGUF files that package gguf must refuse, with llama.cpp's gguf
library, for its fault tests.

Usage: make_bad_gguf.py DIR

  iq2_xxs.gguf a llama file whose token_embd.weight is IQ2_XXS, a type
               archgen's kernels do not run
  tq1_0.gguf   a llama file whose token_embd.weight is TQ1_0, another
  q4_norm.gguf a llama file whose output_norm.weight (a vector) is Q4_0
  q4_k.gguf    a llama file whose token_embd.weight is Q4_K (rows of 256),
               which the tests rewrite to rows of 128
  rwkv6.gguf   a file of architecture rwkv6, which has no mapping
  f32.gguf     a llama file of F32 tensors, which the tests cut short
  gptneox_qkv.gguf a gptneox file whose fused qkv has 190 rows, which do
               not split into q, k and v of its 4 heads
  gptneox_kv.gguf  a gptneox file of 2 key/value heads for 4 query heads
  qwen35_conv_q8.gguf a qwen35 file whose gated delta convolution is Q8_0,
               which the reader cannot give back its unit axis
  lfm2_kv_mixed.gguf, lfm2_kv_none.gguf, lfm2_kv_short.gguf
               lfm2 files whose key/value head counts a layer differ
               between attention layers, give no layer attention, or are
               fewer than the layers
  gemma4_widths.gguf, gemma4_kv.gguf, gemma4_rope.gguf, gemma4_split.gguf
               gemma4 files whose feed-forward widths a layer are not one
               width and twice it, whose full-attention layers have
               different key/value head counts, whose rope_freqs holds a
               factor other than 1 and 1e30, and whose fused experts' gate
               and up have rows that do not halve
  bailingmoe2_gating.gguf a bailingmoe2 file whose expert_gating_func is 3
               (llama.cpp's sqrt-softplus), which no config word names
  qwen3next_groups.gguf a qwen3next file of 3 key heads whose fused beta
               and alpha projection has 8 rows, which do not split into
               3 groups of two parts
  nemotron_h_widths.gguf a nemotron_h file of 3 layers whose feed-forward
               widths a layer are 2
  internlm2_groups.gguf an internlm2 file of 2 key/value heads whose v
               rows (5; q stored as Q8_0, k and v as float32) do not split
               into the 2 groups wqkv joins them in
  mamba2_heads.gguf a mamba2 file whose scan width (ssm.inner_size, 100)
               does not split into its heads (ssm.time_step_rank, 3)
  deepseek2_softmax.gguf a deepseek2 file routing by softmax
               (expert_gating_func 1: DeepSeek-V2's), which no descriptor
               reads
"""

import os
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.quants import quantize


def write(path, arch, tensors):
    w = GGUFWriter(path, arch)
    w.add_uint32(arch + ".block_count", 1)
    for name, data, kind in tensors:
        w.add_tensor(name, data, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gptneox(path, kv_heads, qkv_rows, rng, x):
    """A one-layer gptneox file of 4 heads of 16 (kv_heads key and value
    heads) whose fused qkv has qkv_rows rows."""
    w = GGUFWriter(path, "gptneox")
    for k, v in (("block_count", 1), ("embedding_length", 64), ("feed_forward_length", 256), ("context_length", 64),
                 ("attention.head_count", 4), ("attention.head_count_kv", kv_heads), ("rope.dimension_count", 4)):
        w.add_uint32("gptneox." + k, v)
    w.add_float32("gptneox.attention.layer_norm_epsilon", 1e-5)
    w.add_bool("gptneox.use_parallel_residual", True)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([chr(65 + i) for i in range(4)])
    w.add_tensor("token_embd.weight", x, raw_dtype=T.F32)
    w.add_tensor("blk.0.attn_qkv.weight", rng.standard_normal((qkv_rows, 64)).astype(np.float32), raw_dtype=T.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def small(path, arch, keys, tensors, vocab=True):
    """A file of arch with keys (within its namespace: whole numbers as
    uint32, lists as arrays, bools as bools), a four-token vocabulary
    unless not vocab, and tensors (name, data, type)."""
    w = GGUFWriter(path, arch)
    for k, v in keys.items():
        if isinstance(v, list):
            w.add_array(f"{arch}.{k}", v)
        elif isinstance(v, bool):
            w.add_bool(f"{arch}.{k}", v)
        else:
            w.add_uint32(f"{arch}.{k}", v)
    if vocab:
        w.add_tokenizer_model("gpt2")
        w.add_token_list([chr(65 + i) for i in range(4)])
    for name, data, kind in tensors:
        w.add_tensor(name, data, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def lfm2(path, layers, kv, x):
    """An lfm2 file of layers blocks whose key/value head counts a layer
    are kv."""
    w = GGUFWriter(path, "lfm2")
    for k, v in (("block_count", layers), ("embedding_length", 64), ("feed_forward_length", 256),
                 ("context_length", 64), ("attention.head_count", 4)):
        w.add_uint32("lfm2." + k, v)
    w.add_array("lfm2.attention.head_count_kv", kv)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([chr(65 + i) for i in range(4)])
    w.add_tensor("token_embd.weight", x, raw_dtype=T.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    d = sys.argv[1]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    norm = np.ones(64, dtype=np.float32)
    block, size = GGML_QUANT_SIZES[T.IQ2_XXS]
    write(os.path.join(d, "iq2_xxs.gguf"), "llama", [
        ("output_norm.weight", norm, T.F32),
        ("token_embd.weight", np.zeros((4, 256 // block * size), dtype=np.uint8), T.IQ2_XXS),
    ])
    block, size = GGML_QUANT_SIZES[T.TQ1_0]
    raw = np.zeros((4, 256 // block * size), dtype=np.uint8)
    write(os.path.join(d, "tq1_0.gguf"), "llama", [
        ("output_norm.weight", norm, T.F32),
        ("token_embd.weight", raw, T.TQ1_0),
    ])
    block, size = GGML_QUANT_SIZES[T.Q4_0]
    write(os.path.join(d, "q4_norm.gguf"), "llama", [
        ("output_norm.weight", np.zeros(64 // block * size, dtype=np.uint8), T.Q4_0),
        ("token_embd.weight", x, T.F32),
    ])
    block, size = GGML_QUANT_SIZES[T.Q4_K]
    write(os.path.join(d, "q4_k.gguf"), "llama", [
        ("output_norm.weight", norm, T.F32),
        ("token_embd.weight", np.zeros((4, 256 // block * size), dtype=np.uint8), T.Q4_K),
    ])
    write(os.path.join(d, "rwkv6.gguf"), "rwkv6", [("token_embd.weight", x, T.F32)])
    gptneox(os.path.join(d, "gptneox_qkv.gguf"), 4, 190, rng, x)
    gptneox(os.path.join(d, "gptneox_kv.gguf"), 2, 128, rng, x)
    w = GGUFWriter(os.path.join(d, "qwen35_conv_q8.gguf"), "qwen35")
    for k, v in (("block_count", 1), ("embedding_length", 64), ("feed_forward_length", 256), ("context_length", 64),
                 ("attention.head_count", 4), ("attention.head_count_kv", 2), ("attention.key_length", 16),
                 ("ssm.conv_kernel", 32), ("ssm.state_size", 8), ("ssm.group_count", 1), ("ssm.time_step_rank", 1),
                 ("full_attention_interval", 2)):
        w.add_uint32("qwen35." + k, v)
    w.add_float32("qwen35.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([chr(65 + i) for i in range(4)])
    w.add_tensor("token_embd.weight", x, raw_dtype=T.F32)
    block, size = GGML_QUANT_SIZES[T.Q8_0]
    w.add_tensor("blk.0.ssm_conv1d.weight", np.zeros((24, 32 // block * size), dtype=np.uint8), raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    lfm2(os.path.join(d, "lfm2_kv_mixed.gguf"), 3, [0, 2, 4], x)
    lfm2(os.path.join(d, "lfm2_kv_none.gguf"), 2, [0, 0], x)
    lfm2(os.path.join(d, "lfm2_kv_short.gguf"), 3, [0, 2], x)
    for name, ff, kv, freqs, fused in (
            ("gemma4_widths", [64, 96, 64, 64], 2, None, None),
            ("gemma4_kv", 64, [2, 1, 2, 3], None, None),
            ("gemma4_rope", 64, 2, [1.0, 0.5, 1e30, 1e30], None),
            ("gemma4_split", 64, 2, None, rng.standard_normal((2, 3, 64)).astype(np.float32))):
        tensors = [("token_embd.weight", x, T.F32)]
        if freqs is not None:
            tensors.append(("rope_freqs.weight", np.array(freqs, dtype=np.float32), T.F32))
        if fused is not None:
            tensors.append(("blk.0.ffn_gate_up_exps.weight", fused, T.F32))
        small(os.path.join(d, name + ".gguf"), "gemma4",
              {"block_count": 4, "embedding_length": 64, "context_length": 64, "attention.head_count": 4,
               "attention.key_length": 16, "attention.key_length_swa": 8, "feed_forward_length": ff,
               "attention.head_count_kv": kv, "attention.sliding_window_pattern": [True, False, True, False]},
              tensors)
    small(os.path.join(d, "bailingmoe2_gating.gguf"), "bailingmoe2",
          {"block_count": 1, "embedding_length": 64, "context_length": 64, "feed_forward_length": 64,
           "attention.head_count": 4, "expert_gating_func": 3}, [("token_embd.weight", x, T.F32)])
    small(os.path.join(d, "qwen3next_groups.gguf"), "qwen3next",
          {"block_count": 1, "embedding_length": 64, "context_length": 64, "feed_forward_length": 64,
           "attention.head_count": 4, "attention.head_count_kv": 2, "ssm.group_count": 3},
          [("token_embd.weight", x, T.F32), ("blk.0.ssm_ba.weight", rng.standard_normal((8, 64)).astype(np.float32), T.F32)])
    small(os.path.join(d, "nemotron_h_widths.gguf"), "nemotron_h",
          {"block_count": 3, "embedding_length": 64, "context_length": 64, "attention.head_count": 4,
           "attention.head_count_kv": [0, 2, 0], "feed_forward_length": [0, 64]}, [("token_embd.weight", x, T.F32)])
    shexp = rng.standard_normal((64, 64)).astype(np.float32)
    small(os.path.join(d, "internlm2_groups.gguf"), "internlm2",
          {"block_count": 1, "embedding_length": 64, "context_length": 64, "feed_forward_length": 64,
           "attention.head_count": 4, "attention.head_count_kv": 2},
          [("token_embd.weight", x, T.F32), ("blk.0.attn_q.weight", quantize(shexp[:8], T.Q8_0), T.Q8_0),
           ("blk.0.attn_k.weight", shexp[:4], T.F32), ("blk.0.attn_v.weight", shexp[:5], T.F32)])
    small(os.path.join(d, "mamba2_heads.gguf"), "mamba2",
          {"block_count": 1, "embedding_length": 64, "context_length": 64, "feed_forward_length": 0,
           "attention.head_count": 0, "ssm.inner_size": 100, "ssm.time_step_rank": 3}, [("token_embd.weight", x, T.F32)])
    small(os.path.join(d, "deepseek2_softmax.gguf"), "deepseek2", {"block_count": 1, "expert_gating_func": 1},
          [("token_embd.weight", x, T.F32)], vocab=False)
    write(os.path.join(d, "f32.gguf"), "llama", [
        ("output_norm.weight", norm, T.F32),
        ("token_embd.weight", x, T.F32),
    ])


if __name__ == "__main__":
    main()
