"""Makes the GGUF test cases of package gguf from an mlx-lm model.

Usage: make_gguf.py DIR

For each case, DIR/<case>/ receives:
  hf/                config.json + model.safetensors: a tiny random model made
                     and saved by mlx-lm, the safetensors form of the weights
  model-<TYPE>.gguf  the same weights as llama.cpp's converter lays them out
                     (tensor names, metadata keys, q/k rows reordered for its
                     rope on llama), written with llama.cpp's gguf library, its
                     matrices stored as TYPE (F32, F16, Q8_0, Q4_0, Q4_1)
  expected-<TYPE>.safetensors
                     what each tensor holds once read back, dequantized by the
                     gguf library, under its Hugging Face name and in Hugging
                     Face row order

The vocabulary is a byte-level BPE learned on a fixed text, with three control
tokens, so the files carry a real tokenizer.
"""

import json
import os
import sys
from collections import Counter

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize
from mlx.utils import tree_flatten
from mlx_lm.utils import _get_classes as get_model_classes

TYPES = {"F32": T.F32, "F16": T.F16, "Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "Q4_1": T.Q4_1}

TEXT = (
    "the quick brown fox jumps over the lazy dog. the dog sleeps; the fox runs "
    "and the other fox thinks about the weather, then the rain."
)


def byte_alphabet():
    """GPT-2's printable spelling of the 256 byte values."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = dict((b, chr(b)) for b in keep)
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def merge_pairs(words, n_merges):
    """BPE's merges learned on words (a Counter of symbol tuples): the most
    frequent adjacent pair joined, n_merges times (ties to the smallest
    pair)."""
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        nxt = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nxt[tuple(out)] += c
        words = nxt
    return merges


def learn_bpe(text, alphabet, n_merges):
    words = Counter()
    for i, w in enumerate(text.split(" ")):
        word = (" " if i else "") + w
        words[tuple(alphabet[b] for b in word.encode())] += 1
    return merge_pairs(words, n_merges)


CASES = {
    # name: (model_type, gguf arch, config deltas)
    "llama_gqa_untied": ("llama", "llama", {"num_key_value_heads": 2, "tie_word_embeddings": False}),
    "llama_tied": ("llama", "llama", {"num_key_value_heads": 4, "tie_word_embeddings": True}),
    "qwen2": ("qwen2", "qwen2", {"num_key_value_heads": 2, "tie_word_embeddings": False}),
    "qwen3": ("qwen3", "qwen3", {"num_key_value_heads": 2, "tie_word_embeddings": True, "head_dim": 32}),
}

BLOCK = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    # LayerNorm archs' MLPs (StarCoder 2's, Phi-2's) and Phi-2's output
    "mlp.c_fc": "ffn_up",
    "mlp.c_proj": "ffn_down",
    "mlp.fc1": "ffn_up",
    "mlp.fc2": "ffn_down",
    "self_attn.dense": "attn_output",
    # a mixture of experts' router and stacked experts (mlx-lm's names)
    "mlp.gate": "ffn_gate_inp",
    "mlp.switch_mlp.gate_proj": "ffn_gate_exps",
    "mlp.switch_mlp.up_proj": "ffn_up_exps",
    "mlp.switch_mlp.down_proj": "ffn_down_exps",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
    "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp",
    "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
    "mlp.shared_experts.gate_proj": "ffn_gate_shexp",
    "mlp.shared_experts.up_proj": "ffn_up_shexp",
    "mlp.shared_experts.down_proj": "ffn_down_shexp",
    # fused projections (Phi-3's): q, k and v; gate and up
    "self_attn.qkv_proj": "attn_qkv",
    "mlp.gate_up_proj": "ffn_up",
    "mlp.router": "ffn_gate_inp",
    "mlp.experts.gate_proj": "ffn_gate_exps",
    "mlp.experts.up_proj": "ffn_up_exps",
    "mlp.experts.down_proj": "ffn_down_exps",
    "block_sparse_moe.router.layer": "ffn_gate_inp",
    "block_sparse_moe.gate": "ffn_gate_inp",
    "block_sparse_moe.switch_mlp.gate_proj": "ffn_gate_exps",
    "block_sparse_moe.switch_mlp.up_proj": "ffn_up_exps",
    "block_sparse_moe.switch_mlp.down_proj": "ffn_down_exps",
}
# Where an architecture's names differ from BLOCK's (gguf-py's constants):
# OLMo 2 norms after its sublayers, not before; Seed-OSS names its norm
# before the MLP post_attention_norm; Hunyuan's q and k norms have names of
# their own in its checkpoints.
ARCH_BLOCK = {
    "olmo2": {"post_attention_layernorm": "post_attention_norm", "post_feedforward_layernorm": "post_ffw_norm"},
    "seed_oss": {"post_attention_layernorm": "post_attention_norm"},
    "hunyuan-dense": {"self_attn.query_layernorm": "attn_q_norm", "self_attn.key_layernorm": "attn_k_norm"},
    # Gemma 2 and 3 norm before and after each sublayer
    "exaone": {"ln_1": "attn_norm", "attn.attention.q_proj": "attn_q", "attn.attention.k_proj": "attn_k",
               "attn.attention.v_proj": "attn_v", "attn.attention.out_proj": "attn_output", "ln_2": "ffn_norm",
               "mlp.c_fc_0": "ffn_gate", "mlp.c_fc_1": "ffn_up", "mlp.c_proj": "ffn_down"},
    "exaone4": {"post_attention_layernorm": "post_attention_norm", "post_feedforward_layernorm": "post_ffw_norm"},
    # GPT-2's and StarCoder's layers (Qwen 1's, whose MLP multiplies up
    # by the activation of gate: w1 is up, w2 gate)
    "gpt2": {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"},
    "qwen": {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.w1": "ffn_up", "mlp.w2": "ffn_gate", "mlp.c_proj": "ffn_down"},
    "gptneox": {"attention.query_key_value": "attn_qkv", "attention.dense": "attn_output",
                "mlp.dense_h_to_4h": "ffn_up", "mlp.dense_4h_to_h": "ffn_down"},
    # Qwen3.5's gated delta layers (A_log and dt_bias, tensors without a
    # module, are named by make_llama_cases.py)
    "qwen35": {"post_attention_layernorm": "post_attention_norm", "linear_attn.in_proj_qkv": "attn_qkv",
               "linear_attn.in_proj_z": "attn_gate", "linear_attn.in_proj_b": "ssm_beta",
               "linear_attn.in_proj_a": "ssm_alpha", "linear_attn.conv1d": "ssm_conv1d",
               "linear_attn.norm": "ssm_norm", "linear_attn.out_proj": "ssm_out"},
    # LFM2's convolution layers and its attention's names
    "lfm2": {"operator_norm": "attn_norm", "ffn_norm": "ffn_norm", "conv.conv": "shortconv.conv",
             "conv.in_proj": "shortconv.in_proj", "conv.out_proj": "shortconv.out_proj",
             "self_attn.out_proj": "attn_output", "self_attn.q_layernorm": "attn_q_norm",
             "self_attn.k_layernorm": "attn_k_norm", "feed_forward.w1": "ffn_gate", "feed_forward.w3": "ffn_up",
             "feed_forward.w2": "ffn_down"},
    "ernie4_5-moe": {"mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
                     "mlp.shared_experts.down_proj": "ffn_down_shexp"},
    "glm4": {"post_self_attn_layernorm": "post_attention_norm", "post_attention_layernorm": "ffn_norm",
             "post_mlp_layernorm": "post_ffw_norm"},
    "gpt-oss": {"post_attention_layernorm": "post_attention_norm"},
    "apertus": {"attention_layernorm": "attn_norm", "feedforward_layernorm": "ffn_norm"},
    "glm4moe": {"post_attention_layernorm": "post_attention_norm"},
    # DeepSeek-V3's latent attention: the key and value up-projections are
    # mlx-lm's embed_q and unembed_out, which is how the converter splits
    # Hugging Face's kv_b_proj
    "deepseek2": {"self_attn.q_a_proj": "attn_q_a", "self_attn.q_a_layernorm": "attn_q_a_norm",
                  "self_attn.q_b_proj": "attn_q_b", "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
                  "self_attn.kv_a_layernorm": "attn_kv_a_norm", "self_attn.embed_q": "attn_k_b",
                  "self_attn.unembed_out": "attn_v_b"},
    # MiniCPM3's, its key and value up-projection whole
    "minicpm3": {"self_attn.q_a_proj": "attn_q_a", "self_attn.q_a_layernorm": "attn_q_a_norm",
                 "self_attn.q_b_proj": "attn_q_b", "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
                 "self_attn.kv_a_layernorm": "attn_kv_a_norm", "self_attn.kv_b_proj": "attn_kv_b"},
    "gemma2": {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"},
    "gemma3": {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"},
}
# Mamba2's layers (A_log, D and dt_bias, tensors without a module, are
# named by make_llama_cases.py)
# InternLM2's (its fused wqkv the converter splits: make_llama_cases.py)
ARCH_BLOCK["internlm2"] = {"attention_norm": "attn_norm", "ffn_norm": "ffn_norm", "attention.wo": "attn_output", "feed_forward.w1": "ffn_gate",
                           "feed_forward.w3": "ffn_up", "feed_forward.w2": "ffn_down"}
ARCH_BLOCK["mamba2"] = {"norm": "attn_norm", "mixer.in_proj": "ssm_in", "mixer.conv1d": "ssm_conv1d",
                        "mixer.norm": "ssm_norm", "mixer.out_proj": "ssm_out"}
# Granite 4.0's hybrids: Mamba2 layers under mamba., attention layers,
# routed experts and a shared expert (whose gate and up the converter
# splits, named by make_llama_cases.py)
ARCH_BLOCK["granitehybrid"] = {"mamba.in_proj": "ssm_in", "mamba.conv1d": "ssm_conv1d", "mamba.norm": "ssm_norm",
                               "mamba.out_proj": "ssm_out", "shared_mlp.output_linear": "ffn_down_shexp",
                               "block_sparse_moe.router.layer": "ffn_gate_inp",
                               "block_sparse_moe.switch_mlp.gate_proj": "ffn_gate_exps",
                               "block_sparse_moe.switch_mlp.up_proj": "ffn_up_exps",
                               "block_sparse_moe.switch_mlp.down_proj": "ffn_down_exps"}
# Nemotron-H's: one sublayer a layer, all under mixer.
ARCH_BLOCK["nemotron_h"] = {"norm": "attn_norm", "mixer.in_proj": "ssm_in", "mixer.conv1d": "ssm_conv1d",
                            "mixer.norm": "ssm_norm", "mixer.out_proj": "ssm_out", "mixer.q_proj": "attn_q",
                            "mixer.k_proj": "attn_k", "mixer.v_proj": "attn_v", "mixer.o_proj": "attn_output",
                            "mixer.up_proj": "ffn_up", "mixer.down_proj": "ffn_down", "mixer.gate": "ffn_gate_inp",
                            "mixer.switch_mlp.fc1": "ffn_up_exps", "mixer.switch_mlp.fc2": "ffn_down_exps",
                            "mixer.shared_experts.up_proj": "ffn_up_shexp",
                            "mixer.shared_experts.down_proj": "ffn_down_shexp"}
ARCH_BLOCK["nemotron_h_moe"] = ARCH_BLOCK["nemotron_h"]
# Gemma 4's: sandwich norms, a mixture beside the MLP with norms of its
# own, per-layer inputs (the layer scalar, the router's scales and the
# fused experts are named by make_llama_cases.py)
ARCH_BLOCK["gemma4"] = {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                        "post_feedforward_layernorm": "post_ffw_norm", "router.proj": "ffn_gate_inp",
                        "experts.switch_glu.down_proj": "ffn_down_exps",
                        "pre_feedforward_layernorm_2": "pre_ffw_norm_2",
                        "post_feedforward_layernorm_1": "post_ffw_norm_1",
                        "post_feedforward_layernorm_2": "post_ffw_norm_2", "per_layer_input_gate": "inp_gate",
                        "per_layer_projection": "proj", "post_per_layer_input_norm": "post_norm"}
ARCH_BLOCK["mamba"] = {"norm": "attn_norm", "mixer.in_proj": "ssm_in", "mixer.conv1d": "ssm_conv1d",
                       "mixer.x_proj": "ssm_x", "mixer.dt_proj": "ssm_dt", "mixer.out_proj": "ssm_out"}
# Qwen3-Next's, as the converter splits and names them
ARCH_BLOCK["qwen3next"] = {"post_attention_layernorm": "post_attention_norm", "linear_attn.in_proj_ba": "ssm_ba", "linear_attn.conv1d": "ssm_conv1d",
                           "linear_attn.norm": "ssm_norm", "linear_attn.out_proj": "ssm_out"}
# Falcon-H1's: attention and Mamba2 side by side, then the MLP
ARCH_BLOCK["falcon-h1"] = {"pre_ff_layernorm": "ffn_norm", "mamba.in_proj": "ssm_in", "mamba.conv1d": "ssm_conv1d",
                           "mamba.norm": "ssm_norm", "mamba.out_proj": "ssm_out", "feed_forward.gate_proj": "ffn_gate",
                           "feed_forward.up_proj": "ffn_up", "feed_forward.down_proj": "ffn_down"}
# Ling 2.0's (BailingMoeV2)
ARCH_BLOCK["bailingmoe2"] = {"attention.query_key_value": "attn_qkv", "attention.dense": "attn_output",
                             "attention.query_layernorm": "attn_q_norm", "attention.key_layernorm": "attn_k_norm",
                             "mlp.gate.gate_proj": "ffn_gate_inp"}
# the same names under other architectures' files
ARCH_BLOCK["bailingmoe"] = ARCH_BLOCK["bailingmoe2"]
ARCH_BLOCK["starcoder"] = ARCH_BLOCK["gpt2"]
ARCH_BLOCK["qwen35moe"] = ARCH_BLOCK["qwen35"]
ARCH_BLOCK["lfm2moe"] = {
    **{k: v for k, v in ARCH_BLOCK["lfm2"].items() if not k.startswith("feed_forward.w")},
    # LFM2-MoE's dense MLP under mlx-lm's names, and its mixture
    "feed_forward.gate_proj": "ffn_gate", "feed_forward.up_proj": "ffn_up", "feed_forward.down_proj": "ffn_down",
    "feed_forward.gate": "ffn_gate_inp", "feed_forward.switch_mlp.gate_proj": "ffn_gate_exps",
    "feed_forward.switch_mlp.up_proj": "ffn_up_exps", "feed_forward.switch_mlp.down_proj": "ffn_down_exps"}
TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "model.final_layernorm": "output_norm",
       "transformer.wte": "token_embd", "transformer.ln_f": "output_norm", "lm_head": "output",
       # GPT-2's (under model.) and StarCoder's learned positions
       "model.wte": "token_embd", "model.wpe": "position_embd", "model.ln_f": "output_norm",
       "transformer.wpe": "position_embd",
       # GPT-NeoX's
       "model.embed_in": "token_embd", "model.final_layer_norm": "output_norm", "model.embed_out": "output",
       # LFM2's final norm, which llama.cpp names as the embeddings'
       "model.embedding_norm": "token_embd_norm",
       # Mamba's
       "backbone.embeddings": "token_embd", "backbone.norm_f": "output_norm",
       # Ling's
       "model.word_embeddings": "token_embd",
       # InternLM2's
       "model.tok_embeddings": "token_embd", "output": "output",
       # Gemma 4's per-layer inputs
       "model.embed_tokens_per_layer": "per_layer_token_embd",
       "model.per_layer_model_projection": "per_layer_model_proj",
       "model.per_layer_projection_norm": "per_layer_proj_norm"}


def gguf_name(hf, arch="llama"):
    if hf.endswith(".self_attn.sinks"):  # gpt-oss's, a tensor without a suffix
        return f"blk.{hf.split('.')[2]}.attn_sinks.weight"
    if hf.endswith((".e_score_correction_bias", ".expert_bias")):  # DeepSeek-V3-style routers' bias
        return f"blk.{hf.split('.')[2]}.exp_probs_b.bias"
    module, _, suffix = hf.rpartition(".")
    stack = next((p for p in ("model.layers.", "transformer.h.", "model.h.", "backbone.layers.") if module.startswith(p)),
                 None)
    if stack:
        _, _, rest = module.partition(stack)
        layer, _, part = rest.partition(".")
        names = {**BLOCK, **ARCH_BLOCK.get(arch, {})}
        return f"blk.{layer}.{names[part]}.{suffix}"
    return f"{TOP[module]}.{suffix}"


def add_hparams(w, config, n_vocab, layer_norm_eps=None):
    """The model's hyperparameters as llama.cpp's converter writes them
    (under the writer's architecture)."""
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    w.add_block_count(config["num_hidden_layers"])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(config["num_key_value_heads"])
    # (latent attention's widths differ: the header gives them)
    w.add_key_length(config.get("gguf_key_length", head_dim))
    w.add_value_length(config.get("gguf_value_length", head_dim))
    w.add_rope_freq_base(config["rope_theta"])
    if layer_norm_eps is None:
        w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    else:
        w.add_layer_norm_eps(layer_norm_eps)
    w.add_vocab_size(n_vocab)
    w.add_rope_dimension_count(config.get("qk_rope_head_dim") or config.get("rotary_dim")
                               or int(head_dim * config.get("partial_rotary_factor", 1.0)))


def tiled(x, axis, groups, per, width):
    """x with the heads along axis moved from grouped order ([groups, per]
    heads of width, per heads to each key head) to llama.cpp's tiled order
    ([per, groups])."""
    x = np.moveaxis(x, axis, 0)
    shape = x.shape
    x = x.reshape(groups, per, width, *shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.moveaxis(x, 0, axis)


def qwen35_tensors(weights, config):
    """A Qwen3.5 model's tensors (mlx-lm's, under language_model.) as
    llama.cpp's converter writes them, by the names gguf_name reads: the
    value heads of the gated delta layers in tiled order, the convolution
    without its unit axis, A_log as -exp(A_log); the norms as mlx-lm holds
    them (Hugging Face's plus one, which is what the converter adds)."""
    nk, nv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
    per = nv // nk
    out = {}
    for name, a in weights.items():
        name = name.removeprefix("language_model.")
        x = np.array(a.astype(mx.float32))
        if ".linear_attn." in name:
            if ".in_proj_qkv." in name or ".conv1d." in name:
                if ".conv1d." in name:
                    x = x[..., 0]
                qk = 2 * nk * dk
                x = np.concatenate([x[:qk], tiled(x[qk:], 0, nk, per, dv)])
            elif ".in_proj_z." in name:
                x = tiled(x, 0, nk, per, dv)
            elif ".in_proj_b." in name or ".in_proj_a." in name or name.endswith((".A_log", ".dt_bias")):
                x = tiled(x, 0, nk, per, 1)
            elif ".out_proj." in name:
                x = tiled(x, 1, nk, per, dv)
            if name.endswith(".A_log"):
                layer = name.split(".")[2]
                out[f"gguf:blk.{layer}.ssm_a"] = -np.exp(x)
                continue
            if name.endswith(".dt_bias"):
                out[f"gguf:blk.{name.split('.')[2]}.ssm_dt.bias"] = x
                continue
        out[name] = x
    return out


def qwen35_metadata(w, arch, config, sections):
    """A Qwen3.5 model's gated delta and layer-pattern keys, as llama.cpp's
    Qwen3NextModel and Qwen3_5TextModel write them; sections are the
    multi-section rope's (pairs of dimensions each)."""
    n = config["num_hidden_layers"]
    w.add_ssm_conv_kernel(config["linear_conv_kernel_dim"])
    w.add_ssm_state_size(config["linear_key_head_dim"])
    w.add_ssm_group_count(config["linear_num_key_heads"])
    w.add_ssm_time_step_rank(config["linear_num_value_heads"])
    w.add_ssm_inner_size(config["linear_value_head_dim"] * config["linear_num_value_heads"])
    # (add_recurrent_layers of the tree's gguf-py, which the installed one lacks)
    w.add_array(f"{arch}.attention.recurrent_layers", [(i + 1) % config["full_attention_interval"] != 0 for i in range(n)])
    w.add_full_attention_interval(config["full_attention_interval"])
    w.add_rope_dimension_sections(sections)


def llama_cpp_permute(w, n_head):
    """The row order llama.cpp's converter gives q and k on llama."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def vocabulary():
    """The test vocabulary: tokens, their llama.cpp token types, merges."""
    alphabet = byte_alphabet()
    merges = learn_bpe(TEXT, alphabet, 40)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + alphabet + [a + b for a, b in merges]
    token_types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    return tokens, token_types, merges


def random_model(model_type, deltas, n_vocab, hidden, intermediate, seed, embed_scale=None):
    """A random mlx-lm model of model_type: its config and weights. Norm
    weights are moved away from 1 and biases away from 0, so that a wrong
    mapping shows; embed_scale, when given, scales the embedding (so that
    the logits spread)."""
    config = {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": 2,
        "intermediate_size": intermediate,
        "num_attention_heads": 4,
        "rms_norm_eps": 1e-5,
        "vocab_size": n_vocab,
        "max_position_embeddings": 512,
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    config.update(deltas)
    model_class, args_class = get_model_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    params = dict(tree_flatten(model.parameters()))
    for k, v in params.items():
        if k.endswith("norm.weight") or k.split(".")[-2].startswith("ln_"):
            params[k] = 1 + 0.2 * mx.random.normal(v.shape)
        elif k.endswith((".bias", "correction_bias", "expert_bias")):
            params[k] = 0.1 * mx.random.normal(v.shape)
        elif embed_scale is not None and k.endswith(("embed_tokens.weight", "wte.weight", "embed_in.weight")):
            params[k] = embed_scale * mx.random.normal(v.shape)
    model.load_weights(list(params.items()))
    mx.eval(model.parameters())
    return config, dict(tree_flatten(model.parameters()))


def writer(path, arch, config, vocab, layer_norm_eps=None, pre="gpt-2", hparams=True):
    """A GGUFWriter with the model's hyperparameters (unless not hparams:
    the caller writes them) and the vocabulary's tokenizer, as llama.cpp's
    converter writes them (a LayerNorm's epsilon where layer_norm_eps is
    given, else the RMSNorm's), under the pre-tokenizer type pre (llama.cpp's
    name; GPT-2's by default)."""
    tokens, token_types, merges = vocab
    w = GGUFWriter(path, arch)
    if hparams:
        add_hparams(w, config, len(tokens), layer_norm_eps)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    return w


def main():
    out = sys.argv[1]
    vocab = vocabulary()
    for case, (model_type, arch, deltas) in CASES.items():
        d = os.path.join(out, case)
        os.makedirs(os.path.join(d, "hf"), exist_ok=True)
        config, weights = random_model(model_type, deltas, len(vocab[0]), 64, 128, 11)
        mx.save_safetensors(os.path.join(d, "hf", "model.safetensors"), weights, metadata={"format": "mlx"})
        with open(os.path.join(d, "hf", "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
        for tname, ttype in TYPES.items():
            w = writer(os.path.join(d, f"model-{tname}.gguf"), arch, config, vocab)
            w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
            expected = {}
            for hf in sorted(weights):
                x = np.array(weights[hf].astype(mx.float32))
                if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
                    x = llama_cpp_permute(x, heads if ".q_proj." in hf else kv)
                if x.ndim == 2 and ttype != T.F32:
                    if ttype == T.F16:
                        data = x.astype(np.float16)
                        held = data.astype(np.float32)
                    else:
                        data = quantize(x, ttype)
                        held = dequantize(data, ttype).astype(np.float32)
                    w.add_tensor(gguf_name(hf), data, raw_dtype=ttype)
                else:
                    w.add_tensor(gguf_name(hf), x)
                    held = x
                if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
                    n = heads if ".q_proj." in hf else kv
                    # Undo the converter's order, for the Hugging Face view.
                    held = held.reshape(n, held.shape[0] // n // 2, 2, *held.shape[1:]).swapaxes(1, 2).reshape(held.shape)
                expected[hf] = mx.array(held)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            mx.save_safetensors(os.path.join(d, f"expected-{tname}.safetensors"), expected)


if __name__ == "__main__":
    main()
