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

import gguf
import mlx.core as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf import (gguf_name, llama_cpp_permute, qwen35_metadata, qwen35_tensors, random_model,  # noqa: E402
                       vocabulary, writer)

# Gemma 4's sizes and ropes (both cases)
GEMMA4 = {"num_key_value_heads": 2, "head_dim": 64, "global_head_dim": 128, "sliding_window": 4,
          "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
          "rope_parameters": {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                 "rope_theta": 1000000.0},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}

# Nemotron-H's sizes (both cases)
NEMOTRON_H = {"num_hidden_layers": 4, "num_key_value_heads": 2, "mamba_num_heads": 8, "mamba_head_dim": 64,
              "mamba_proj_bias": False, "ssm_state_size": 16, "conv_kernel": 4, "n_groups": 2, "mlp_bias": False,
              "layer_norm_epsilon": 1e-5, "use_bias": False, "use_conv_bias": True, "attention_bias": False,
              "head_dim": 64, "time_step_limit": [0.0, float("inf")], "tie_word_embeddings": False}

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
    "qwen3moe": ("qwen3_moe", "qwen3moe", {"num_key_value_heads": 2, "tie_word_embeddings": False, "head_dim": 64,
                                           "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                                           "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True}),
    "qwen2moe": ("qwen2_moe", "qwen2moe", {"num_key_value_heads": 2, "num_experts": 8, "num_experts_per_tok": 2,
                                           "moe_intermediate_size": 256, "shared_expert_intermediate_size": 512}),
    # llama.cpp's olmoe reads q and k norms of the full width: as many key
    # and value heads as query heads (as OLMoE-1B-7B has)
    "olmoe": ("olmoe", "olmoe", {"num_key_value_heads": 4, "tie_word_embeddings": False, "num_experts": 8,
                                 "num_experts_per_tok": 2, "norm_topk_prob": False, "attention_bias": False,
                                 "mlp_bias": False}),
    # Llama 3.1's rope scaling, which the converter writes as rope_freqs;
    # an original context of 64 so that the scaled dimensions turn
    # measurably within the 16 positions
    "llama3": ("llama", "llama", {"num_key_value_heads": 2, "tie_word_embeddings": True, "rope_theta": 500000.0,
                                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 64}}),
    # Phi-3.5's long-context rope over three quarters of each head; an
    # original context of 32, below llama-logits' 64, so that llama.cpp
    # takes the long factors (as mlx-lm always does)
    "phi3": ("phi3", "phi3", {"num_key_value_heads": 2, "partial_rotary_factor": 0.75,
                              "max_position_embeddings": 131072, "original_max_position_embeddings": 32,
                              "rope_scaling": {"type": "longrope",
                                               "long_factor": [1.0 + 0.25 * i for i in range(24)],
                                               "short_factor": [1.0 + 0.05 * i for i in range(24)]}}),
    # LayerNorm architectures
    "starcoder2": ("starcoder2", "starcoder2", {"num_key_value_heads": 2, "tie_word_embeddings": True,
                                                "norm_epsilon": 1e-5}),
    "stablelm": ("stablelm", "stablelm", {"num_key_value_heads": 2, "tie_word_embeddings": False,
                                          "layer_norm_eps": 1e-5, "use_qkv_bias": True,
                                          "partial_rotary_factor": 0.25}),
    "command-r": ("cohere", "command-r", {"num_key_value_heads": 2, "layer_norm_eps": 1e-5, "logit_scale": 0.25,
                                          "use_qk_norm": False}),
    "phi2": ("phi", "phi2", {"num_key_value_heads": 4, "layer_norm_eps": 1e-5, "partial_rotary_factor": 0.5}),
    "nemotron": ("nemotron", "nemotron", {"num_key_value_heads": 2, "norm_eps": 1e-5, "partial_rotary_factor": 0.5,
                                          "hidden_act": "relu2", "tie_word_embeddings": False}),
    # four layers, every fourth attending fully: OLMo 3 as llama.cpp's
    # converter writes it (olmo2 with a sliding window)
    "olmo3": ("olmo3", "olmo2", {"num_key_value_heads": 2, "num_hidden_layers": 4, "sliding_window": 8}),
    # no window: llama.cpp slides only on its 64-layer files
    "exaone4": ("exaone4", "exaone4", {"num_key_value_heads": 2, "head_dim": 64, "tie_word_embeddings": False,
                                       "rope_scaling": None, "sliding_window": None, "sliding_window_pattern": None}),
    "exaone": ("exaone", "exaone", {"num_key_value_heads": 2, "num_layers": 2, "layer_norm_epsilon": 1e-5,
                                    "tie_word_embeddings": False}),
    "glm4": ("glm4", "glm4", {"num_key_value_heads": 2, "attention_bias": True, "partial_rotary_factor": 0.5,
                              "head_dim": 64}),
    "ernie4_5": ("ernie4_5", "ernie4_5", {"num_key_value_heads": 2, "tie_word_embeddings": True, "head_dim": 64,
                                          "use_bias": False}),
    # vision-language models' text layers, as their GGUF files hold them
    # (the vision tower goes to a projector file of its own)
    "qwen2vl": ("qwen2", "qwen2vl", {"num_key_value_heads": 2, "tie_word_embeddings": False}),
    "qwen3vl": ("qwen3", "qwen3vl", {"num_key_value_heads": 2, "tie_word_embeddings": True, "head_dim": 64}),
    "qwen3vlmoe": ("qwen3_moe", "qwen3vlmoe", {"num_key_value_heads": 2, "tie_word_embeddings": False, "head_dim": 64,
                                              "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                                              "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True}),
    "gpt-oss": ("gpt_oss", "gpt-oss", {"num_key_value_heads": 2, "head_dim": 64, "num_local_experts": 4,
                                       "num_experts_per_tok": 2, "sliding_window": 8, "rope_theta": 150000.0}),
    "granitemoe": ("granitemoe", "granitemoe", {"num_key_value_heads": 2, "tie_word_embeddings": True,
                                                "attention_bias": False, "logits_scaling": 4.0,
                                                "attention_multiplier": 0.0078125, "embedding_multiplier": 12.0,
                                                "residual_multiplier": 0.22, "num_local_experts": 4,
                                                "num_experts_per_tok": 2}),
    # four layers: the fourth attends fully without positions
    "cohere2": ("cohere2", "cohere2", {"num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4,
                                       "layer_norm_eps": 1e-5, "logit_scale": 0.25, "sliding_window": 8,
                                       "sliding_window_pattern": 4, "layer_norm_bias": False}),
    # a dense first layer, then DeepSeek-V3's routing (sigmoid, corrected);
    # as many key and value heads as query heads, as llama.cpp's dots1 reads them
    "dots1": ("dots1", "dots1", {"num_key_value_heads": 4, "head_dim": 64, "first_k_dense_replace": 1,
                                 "moe_intermediate_size": 256, "n_routed_experts": 8, "n_shared_experts": 1,
                                 "num_experts_per_tok": 2, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
                                 "tie_word_embeddings": False}),
    # with a multi-token prediction block, which the file keeps and the
    # model does not run
    "glm4moe": ("glm4_moe", "glm4moe", {"num_key_value_heads": 2, "head_dim": 64, "first_k_dense_replace": 1,
                                        "moe_intermediate_size": 256, "n_routed_experts": 8, "n_shared_experts": 1,
                                        "num_experts_per_tok": 2, "norm_topk_prob": True,
                                        "routed_scaling_factor": 1.5, "n_group": 1, "topk_group": 1,
                                        "attention_bias": True, "partial_rotary_factor": 0.5, "use_qk_norm": True,
                                        "rope_scaling": None, "tie_word_embeddings": False}),
    # xIELU's parameters a layer, which the converter writes as metadata
    "apertus": ("apertus", "apertus", {"num_key_value_heads": 2, "mlp_bias": False, "attention_bias": False,
                                       "post_norm": False, "qk_norm": True, "tie_word_embeddings": False}),
    "deepseek": ("deepseek", "deepseek", {"num_key_value_heads": 2, "first_k_dense_replace": 1,
                                          "moe_intermediate_size": 256, "n_routed_experts": 8, "n_shared_experts": 1,
                                          "num_experts_per_tok": 2, "moe_layer_freq": 1}),
    # rope over half of each head, queries and keys normed over their full
    # width, sigmoid routing with the correction bias. Four experts: with
    # eight, the Q8_0 file's weights moved one router choice of this seed
    # across a near-tie in archgen's run (one position off by 0.25, every
    # other within llama.cpp's distance), a discrete change the distance
    # bounds do not model
    "minimax-m2": ("minimax", "minimax-m2", {"num_key_value_heads": 2, "head_dim": 64, "rotary_dim": 32,
                                             "num_local_experts": 4, "num_experts_per_tok": 2,
                                             "shared_intermediate_size": 0, "use_qk_norm": True,
                                             "tie_word_embeddings": False}),
    "mixtral": ("mixtral", "llama", {"num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "gemma": ("gemma", "gemma", {"num_key_value_heads": 2, "head_dim": 64}),
    "gemma2": ("gemma2", "gemma2", {"num_key_value_heads": 2, "head_dim": 64, "query_pre_attn_scalar": 64,
                                    "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
                                    "sliding_window": 4096}),
    # six layers: every sixth attends fully (llama.cpp's default pattern),
    # the others within 8 positions of the 16
    "gemma3": ("gemma3_text", "gemma3", {"num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 6,
                                         "query_pre_attn_scalar": 64, "sliding_window": 8,
                                         "sliding_window_pattern": 6, "rope_theta": 1000000.0,
                                         "rope_local_base_freq": 10000.0,
                                         "rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
    # classic architectures: learned positions and LayerNorm (GPT-2;
    # StarCoder's one key and value head), Qwen 1's fused projections
    "gpt2": ("gpt2", "gpt2", {"n_embd": 256, "n_head": 4, "n_layer": 2, "n_positions": 512, "n_ctx": 512,
                              "layer_norm_epsilon": 1e-5, "num_key_value_heads": 4, "intermediate_size": 1024}),
    "starcoder": ("gpt_bigcode", "starcoder", {"n_embd": 256, "n_head": 4, "n_layer": 2, "n_inner": 1024,
                                               "n_positions": 512, "layer_norm_epsilon": 1e-5, "multi_query": True,
                                               "num_key_value_heads": 1, "intermediate_size": 1024,
                                               "tie_word_embeddings": False}),
    # a quarter of each head rotated; parallel attention and MLP
    "gptneox": ("gpt_neox", "gptneox", {"num_attention_heads": 4, "num_key_value_heads": 4, "layer_norm_eps": 1e-5,
                                        "rotary_pct": 0.25, "partial_rotary_factor": 0.25, "rotary_emb_base": 10000,
                                        "use_parallel_residual": True, "intermediate_size": 1024,
                                        "tie_word_embeddings": False}),
    # Qwen3.5: gated delta layers (two value heads a key head, which the
    # converter moves to tiled order) beside gated attention, every second
    # layer; a quarter of each attention head rotated
    "qwen35": ("qwen3_5", "qwen35", {"num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4,
                                     "tie_word_embeddings": False, "full_attention_interval": 2,
                                     "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                     "linear_key_head_dim": 64, "linear_value_head_dim": 64,
                                     "linear_conv_kernel_dim": 4, "partial_rotary_factor": 0.25,
                                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                         "partial_rotary_factor": 0.25}}),
    # and its mixture of experts (a shared expert, gated) on every layer
    "qwen35moe": ("qwen3_5", "qwen35moe", {"num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4,
                                           "tie_word_embeddings": False, "full_attention_interval": 2,
                                           "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                           "linear_key_head_dim": 64, "linear_value_head_dim": 64,
                                           "linear_conv_kernel_dim": 4, "partial_rotary_factor": 0.25,
                                           "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                               "partial_rotary_factor": 0.25},
                                           "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                                           "shared_expert_intermediate_size": 256, "norm_topk_prob": True}),
    # Qwen3-Next: the gated delta layers' fused projections as the
    # converter splits them (q, k, v of every head, then z; beta and alpha
    # kept fused, by key head), a mixture with a gated shared expert. Four
    # of eight experts: with two of four, the Q6_K file's weights moved one
    # router choice of this seed across a near-tie in archgen's run (one
    # position 0.24 off llama.cpp's, every other within 0.03)
    "qwen3next": ("qwen3_next", "qwen3next", {"num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4,
                                              "tie_word_embeddings": False, "full_attention_interval": 2,
                                              "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                              "linear_key_head_dim": 64, "linear_value_head_dim": 64,
                                              "linear_conv_kernel_dim": 4, "partial_rotary_factor": 0.25,
                                              "num_experts": 8, "num_experts_per_tok": 4,
                                              "moe_intermediate_size": 256, "shared_expert_intermediate_size": 256,
                                              "norm_topk_prob": True, "decoder_sparse_step": 1,
                                              "mlp_only_layers": []}),
    # LFM2: convolution layers (a count of 0 key/value heads) beside
    # attention, the feed-forward width adjusted as its config says
    "lfm2": ("lfm2", "lfm2", {"num_hidden_layers": 4, "num_key_value_heads": 2, "norm_eps": 1e-5,
                              "layer_types": ["conv", "full_attention", "conv", "full_attention"],
                              "conv_bias": False, "conv_L_cache": 3, "block_dim": 256, "block_ff_dim": 768,
                              "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0,
                              "block_auto_adjust_ff_dim": True, "rope_theta": 1000000.0,
                              "tie_word_embeddings": True}),
    # and its mixture: a dense first layer, then sigmoid routing with an
    # expert bias. Four of eight experts: with two of four or eight, the
    # Q5_1 or Q6_K file's weights moved a router choice of this seed
    # across a near-tie in archgen's run (one logit of 128 off by 3.5
    # where llama.cpp's own distance allowed 3.2, the root mean square
    # closer than llama.cpp's), a discrete change the bounds do not model
    "lfm2moe": ("lfm2_moe", "lfm2moe", {"num_hidden_layers": 4, "num_key_value_heads": 2, "norm_eps": 1e-5,
                                        "layer_types": ["conv", "full_attention", "conv", "full_attention"],
                                        "conv_bias": False, "conv_L_cache": 3, "num_experts": 8,
                                        "num_experts_per_tok": 4, "moe_intermediate_size": 256,
                                        "num_dense_layers": 1, "use_expert_bias": True, "norm_topk_prob": True,
                                        "routed_scaling_factor": 1.0, "rope_theta": 1000000.0,
                                        "tie_word_embeddings": True}),
    # Ministral 3: YaRN over an original context of 8 and the attention's
    # temperature scale, so that both act within the 16 positions (at 4,
    # YaRN's correction range is empty, high below low, which llama.cpp
    # and mlx-lm read differently: no real model has one); and Mistral
    # Small 3's mistral3 files, llama's layers without them
    "ministral3": ("ministral3", "mistral3", {"num_key_value_heads": 2, "head_dim": 64, "tie_word_embeddings": False,
                                              "rope_theta": 1000000.0,
                                              "rope_parameters": {"type": "yarn", "rope_type": "yarn", "factor": 4.0,
                                                                  "original_max_position_embeddings": 8,
                                                                  "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                                                                  "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1,
                                                                  "rope_theta": 1000000.0}}),
    "mistral3": ("llama", "mistral3", {"num_key_value_heads": 2, "head_dim": 64, "tie_word_embeddings": False,
                                       "rope_theta": 1000000.0}),
    # Ernie 4.5's mixture after a dense first layer, with a shared expert
    # and the router's correction bias, which llama.cpp picks with (the
    # converter's exp_probs_b from Hugging Face's moe_statics; mlx-lm's
    # model has none, so it is drawn here)
    "ernie4_5-moe": ("ernie4_5_moe", "ernie4_5-moe", {"num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 3,
                                                     "use_bias": False, "tie_word_embeddings": False,
                                                     "moe_num_experts": 8, "moe_k": 4, "moe_intermediate_size": 256,
                                                     "moe_layer_start_index": 1, "moe_layer_interval": 1,
                                                     "moe_num_shared_experts": 1, "moe_use_aux_free": True}),
    # DeepSeek-V3: latent attention with compressed queries and YaRN (over
    # an original context of 8, so that it acts within the 16 positions;
    # mscale and mscale_all_dim equal, as in DeepSeek's configs), a dense
    # first layer, then sigmoid routing within groups with the correction
    # bias and a shared expert. The key's nope part is 128 wide, as in
    # DeepSeek's models: the key up-projection's rows take llama.cpp's
    # fallback types under the K-quants
    "deepseek2": ("deepseek_v3", "deepseek2", {"num_hidden_layers": 3, "num_key_value_heads": 4, "q_lora_rank": 256, "kv_lora_rank": 256,
                                               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                                               "first_k_dense_replace": 1, "moe_intermediate_size": 256,
                                               "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                                               "n_group": 2, "topk_group": 1, "norm_topk_prob": True,
                                               "routed_scaling_factor": 2.5, "topk_method": "noaux_tc",
                                               "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                                "original_max_position_embeddings": 8,
                                                                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.8,
                                                                "mscale_all_dim": 0.8}}),
    # Mamba2: state-space layers alone (one group: llama.cpp norms the
    # gated output by group, mlx-lm over its full width, which is the same
    # for one)
    "mamba2": ("mamba2", "mamba2", {"num_heads": 8, "head_dim": 64, "intermediate_size": 512, "state_size": 16,
                                    "layer_norm_epsilon": 1e-5, "conv_kernel": 4, "n_groups": 1, "use_bias": False,
                                    "use_conv_bias": True, "tie_word_embeddings": False, "time_step_rank": "auto",
                                    "time_step_limit": [0.0, float("inf")]}),
    # Granite 4.0's hybrids: Mamba2 layers and one attention layer without
    # positions, each with routed experts and a shared expert
    "granitehybrid": ("granitemoehybrid", "granitehybrid", {
        "num_hidden_layers": 4, "num_key_value_heads": 2, "layer_types": ["mamba", "attention", "mamba", "mamba"],
        "position_embedding_type": "nope", "num_local_experts": 8, "num_experts_per_tok": 2,
        "shared_intermediate_size": 512, "intermediate_size": 256, "mamba_n_heads": 8, "mamba_d_head": 64,
        "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_n_groups": 1, "mamba_conv_bias": True,
        "mamba_proj_bias": False, "mamba_expand": 2, "logits_scaling": 4.0, "attention_multiplier": 0.0078125,
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_bias": False,
        "tie_word_embeddings": False, "time_step_limit": [0.0, float("inf")]}),
    # Nemotron-H: one sublayer a layer (Mamba2 in groups of heads,
    # attention without positions, a relu² MLP); and Nemotron 3 Nano's
    # mixture of relu² experts (sigmoid routing with the correction bias,
    # a shared expert) in place of the MLP
    "nemotron_h": ("nemotron_h", "nemotron_h", {**NEMOTRON_H, "hybrid_override_pattern": "M*-M"}),
    "nemotron_h_moe": ("nemotron_h", "nemotron_h_moe", {
        **NEMOTRON_H, "hybrid_override_pattern": "M*EM", "moe_intermediate_size": 256,
        "moe_shared_expert_intermediate_size": 512, "n_group": 1, "topk_group": 1, "n_routed_experts": 8,
        "n_shared_experts": 1, "num_experts_per_tok": 2, "norm_topk_prob": True, "routed_scaling_factor": 2.5}),
    # Gemma 4 as its 26B-A4B and 31B are: sliding layers with heads of
    # head_dim, full-attention layers with heads of global_head_dim whose
    # values are their keys (fewer key/value heads), the proportional rope
    # on a quarter of the full layers' heads, routed experts beside the
    # MLP, layer scalars, the logits soft-capped. Four of eight experts:
    # with two, the Q8_0 file's weights moved a router choice of this seed
    # across a near-tie in archgen's run (3.2 off llama.cpp's where its own
    # distance allowed 0.83), a discrete change the bounds do not model
    "gemma4": ("gemma4_text", "gemma4", {
        **GEMMA4, "num_hidden_layers": 4, "num_global_key_value_heads": 1, "attention_k_eq_v": True,
        "enable_moe_block": True, "num_experts": 8, "top_k_experts": 4, "moe_intermediate_size": 256,
        "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0, "use_double_wide_mlp": False,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}),
    # Gemma 4 as its E2B and E4B are: per-layer inputs, the last layers
    # attending over the keys and values of the last earlier layer of
    # their kind with MLPs twice as wide, one key/value head count. The
    # layers before the sharing ones end sliding, full, as in E2B and E4B:
    # llama.cpp takes the shared keys and values from the last two of
    # those by kind, where mlx-lm takes each kind's last
    "gemma4_e": ("gemma4_text", "gemma4", {
        **GEMMA4, "num_hidden_layers": 5, "attention_k_eq_v": False, "enable_moe_block": False,
        "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 299, "num_kv_shared_layers": 2,
        "use_double_wide_mlp": True,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                        "full_attention"]}),
    # EXAONE MoE (K-EXAONE): pre-norm layers with q and k norms, rope on the
    # sliding layers alone, a dense first layer, then sigmoid routing with
    # the correction bias and a shared expert
    "exaone-moe": ("exaone_moe", "exaone-moe", {
        "num_hidden_layers": 3, "num_key_value_heads": 2, "head_dim": 64, "moe_intermediate_size": 256,
        "num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 1, "sliding_window": 4,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "is_moe_layer": [False, True, True], "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.5,
        "norm_topk_prob": True, "tie_word_embeddings": False}),
    # Falcon-H1: attention and Mamba2 side by side in each layer, then the
    # MLP; its multipliers (drawn away from 1), which the converter folds
    # into the weights
    "falcon-h1": ("falcon_h1", "falcon-h1", {
        "num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 64, "mamba_d_ssm": 512, "mamba_n_heads": 8,
        "mamba_d_head": 64, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_rms_norm": True,
        "tie_word_embeddings": False, "rope_theta": 10000.0, "embedding_multiplier": 1.5, "lm_head_multiplier": 0.5,
        "attention_in_multiplier": 1.1, "attention_out_multiplier": 0.9, "key_multiplier": 0.4,
        "ssm_in_multiplier": 1.25, "ssm_out_multiplier": 0.8, "mlp_multipliers": [0.9, 0.6],
        "ssm_multipliers": [0.35, 0.25, 0.35, 0.5, 0.35]}),
    # Ling 2.0 (BailingMoeV2): fused qkv with q and k norms, rope over half
    # of each head, a dense first layer, then sigmoid routing within
    # groups with the expert bias, a shared expert
    "bailingmoe2": ("bailing_moe", "bailingmoe2", {
        "num_hidden_layers": 3, "num_key_value_heads": 2, "max_position_embeddings": 512, "rope_theta": 10000.0,
        "moe_intermediate_size": 256, "num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 1,
        "first_k_dense_replace": 1, "norm_topk_prob": True, "use_qk_norm": True, "partial_rotary_factor": 0.5,
        "score_function": "sigmoid", "moe_router_enable_expert_bias": True, "n_group": 2, "topk_group": 1,
        "routed_scaling_factor": 2.5, "use_bias": False, "use_qkv_bias": False, "norm_head": False,
        "tie_word_embeddings": False}),
    # Ling 1 (BailingMoe): experts on every layer beside a shared one,
    # softmax routing, q, k and v split by the converter
    "bailingmoe": ("bailing_moe", "bailingmoe", {
        "num_hidden_layers": 2, "num_key_value_heads": 2, "max_position_embeddings": 512, "rope_theta": 10000.0,
        "moe_intermediate_size": 256, "num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 1,
        "first_k_dense_replace": 0, "norm_topk_prob": True, "use_qk_norm": False, "score_function": "softmax",
        "routed_scaling_factor": 1.0, "use_bias": False, "use_qkv_bias": False, "norm_head": False,
        "tie_word_embeddings": False}),
    # InternLM2: Llama's layers under other names, q, k and v fused by
    # key/value head (each head's queries, its key, its value)
    "internlm2": ("internlm2", "internlm2", {"num_key_value_heads": 2, "bias": False, "tie_word_embeddings": False}),
    # MiniCPM: Llama's layers with muP's embedding, residual and logit scales
    "minicpm": ("minicpm", "minicpm", {"num_key_value_heads": 2, "tie_word_embeddings": False, "dim_model_base": 64,
                                        "scale_depth": 1.4, "scale_emb": 12.0}),
    # MiniCPM3: MiniCPM's scales (llama.cpp's constants) around latent
    # attention with its key and value up-projection whole, and Phi-3's
    # long-context rope: an original context of 32, below llama-logits'
    # 64, so that llama.cpp takes the long factors (as mlx-lm always
    # does), and no more positions than that, so that mlx-lm scales no
    # attention (llama.cpp's MiniCPM3 never does)
    "minicpm3": ("minicpm3", "minicpm3", {"num_key_value_heads": 4, "q_lora_rank": 256, "kv_lora_rank": 256,
                                          "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "dim_model_base": 256,
                                          "scale_depth": 1.4, "scale_emb": 12.0, "max_position_embeddings": 32,
                                          "tie_word_embeddings": False,
                                          "rope_scaling": {"type": "longrope", "original_max_position_embeddings": 32,
                                                           "long_factor": [1.0 + 0.25 * i for i in range(16)],
                                                           "short_factor": [1.0 + 0.05 * i for i in range(16)]}}),
    # Mellum: q and k norms, the sliding layers' plain rope and the full
    # layers' YaRN (over an original context of 8, as for ministral3),
    # experts on every layer. One rope base for both kinds: llama.cpp's
    # mellum rotates the sliding layers at the full layers' base whatever
    # rope.freq_base_swa says (archgen reads the file's two bases, as
    # Hugging Face's Mellum runs them)
    "mellum": ("mellum", "mellum", {
        "num_hidden_layers": 3, "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 256, "norm_topk_prob": True, "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"], "tie_word_embeddings": False,
        "rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
                                               "original_max_position_embeddings": 8, "beta_fast": 32.0,
                                               "beta_slow": 1.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0}}}),
    # Mamba: selective-scan layers alone
    "mamba": ("mamba", "mamba", {"intermediate_size": 512, "state_size": 16, "conv_kernel": 4, "use_bias": False,
                                 "use_conv_bias": True, "time_step_rank": 16, "tie_word_embeddings": False}),
    # intermediate_size is twice the MLP's width
    "qwen": ("qwen", "qwen", {"num_attention_heads": 4, "kv_channels": 64, "num_key_value_heads": 4,
                              "intermediate_size": 1024, "layer_norm_epsilon": 1e-5, "no_bias": True}),
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

# types beyond TYPES for a case: gpt-oss as published (experts MXFP4)
CASE_TYPES = {"gpt-oss": {"MXFP4_MOE": ("MXFP4_MOE", False)}}

# the architectures whose converter reorders q and k rows for llama.cpp's
# rope (LlamaModel's subclasses)
PERMUTED = {"llama", "bailingmoe", "internlm2", "minicpm", "smollm3", "granite", "granitemoe", "granitehybrid", "deepseek", "mistral3"}

# what the converter adds to every norm weight (Gemma's norms scale by
# 1 + weight; llama.cpp's by the weight)
NORM_SHIFT = {"gemma": 1.0, "gemma2": 1.0, "gemma3": 1.0, "nemotron": 1.0}

# the LayerNorm architectures' config key of their epsilon, which the
# converter writes as attention.layer_norm_epsilon
LAYER_NORM_EPS = {"starcoder2": "norm_epsilon", "gpt2": "layer_norm_epsilon", "starcoder": "layer_norm_epsilon", "gptneox": "layer_norm_eps", "stablelm": "layer_norm_eps", "command-r": "layer_norm_eps",
                  "cohere2": "layer_norm_eps",
                  "phi2": "layer_norm_eps", "nemotron": "norm_eps", "nemotron_h": "layer_norm_epsilon",
                  "nemotron_h_moe": "layer_norm_epsilon"}

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


def llama3_factors(config):
    """Llama 3.1's rope scaling as one divisor per rotated pair of
    dimensions (llama.cpp's rope_freqs tensor): 1 for short wavelengths,
    factor for long ones, a blend between."""
    rs = config["rope_scaling"]
    dims = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for i in range(0, dims, 2):
        wave = 2 * np.pi * config["rope_theta"] ** (i / dims)
        if wave < old / high:
            out.append(1.0)
        elif wave > old / low:
            out.append(factor)
        else:
            s = (old / wave - low) / (high - low)
            out.append(1 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def routed_mixture(w, config, scale, sigmoid):
    """A DeepSeek-style mixture's metadata (routed and shared experts, dense
    leading layers), as llama.cpp's converters write it: the routed weights'
    scale, and with sigmoid their renormalisation and sigmoid gating."""
    w.add_expert_count(config["n_routed_experts"])
    w.add_expert_used_count(config["num_experts_per_tok"])
    w.add_expert_feed_forward_length(config["moe_intermediate_size"])
    w.add_leading_dense_block_count(config["first_k_dense_replace"])
    w.add_expert_shared_count(config["n_shared_experts"])
    w.add_expert_weights_scale(scale)
    if sigmoid:
        w.add_expert_weights_norm(config["norm_topk_prob"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


def mamba2_file(w, config, weights):
    """A Mamba2 model's header and tensors as llama.cpp's Mamba2Model writes
    them: no heads and no feed-forward width, the scan's sizes, and
    ssd_tensors. Returns the tensors, under gguf_name's names or as gguf:
    names."""
    inner = config["num_heads"] * config["head_dim"]
    ssm_header(w, config, inner, config["num_heads"], config["layer_norm_epsilon"])
    w.add_ssm_group_count(config["n_groups"])
    return ssd_tensors(weights, "mixer", config["n_groups"])


def ssm_header(w, config, inner, dt_rank, eps):
    """The keys Mamba's and Mamba2's converters write alike: no heads and no
    feed-forward width, an arbitrary context, the scan's sizes."""
    w.add_context_length(2**20)
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_block_count(config["num_hidden_layers"])
    w.add_ssm_conv_kernel(config["conv_kernel"])
    w.add_ssm_inner_size(inner)
    w.add_ssm_state_size(config["state_size"])
    w.add_ssm_time_step_rank(dt_rank)
    w.add_layer_norm_rms_eps(eps)


def mamba_file(w, config, weights):
    """A Mamba model's header and tensors as llama.cpp's MambaModel writes
    them: no heads and no feed-forward width, the scan's sizes; the
    convolution without its unit axis, A as -exp(A_log). Returns the
    tensors, under gguf_name's names or as gguf: names."""
    ssm_header(w, config, config["intermediate_size"], config["time_step_rank"], 1e-5)
    w.add_ssm_dt_b_c_rms(False)
    out = {}
    for name, a in weights.items():
        x = np.array(a.astype(mx.float32))
        layer = name.split(".")[2] if name.startswith("backbone.layers.") else None
        if name.endswith(".mixer.A_log"):
            out[f"gguf:blk.{layer}.ssm_a"] = -np.exp(x)
        elif name.endswith(".mixer.D"):
            out[f"gguf:blk.{layer}.ssm_d"] = x
        elif name.endswith(".mixer.conv1d.weight"):
            out[name] = x[..., 0]
        else:
            out[name] = x
    return out


def ssd_tensors(weights, module, groups):
    """Mamba2 layers' tensors (module: the mixer's name within a layer) as
    llama.cpp's Mamba2Model writes them: the convolution without its unit
    axis, A as -exp(A_log) and D each with a unit axis added, the gated
    norm's weight a row a group, dt_bias as ssm_dt.bias. Others are kept."""
    out = {}
    for name, a in weights.items():
        x = np.array(a.astype(mx.float32)) if isinstance(a, mx.array) else a
        layer = name.split(".")[2] if name.startswith(("backbone.layers.", "model.layers.")) else None
        if name.endswith(f".{module}.A_log"):
            out[f"gguf:blk.{layer}.ssm_a"] = -np.exp(x)[:, None]
        elif name.endswith(f".{module}.D"):
            out[f"gguf:blk.{layer}.ssm_d"] = x[:, None]
        elif name.endswith(f".{module}.dt_bias"):
            out[f"gguf:blk.{layer}.ssm_dt.bias"] = x
        elif name.endswith(f".{module}.conv1d.weight"):
            out[name] = x[..., 0]
        elif name.endswith(f".{module}.norm.weight"):
            out[f"gguf:blk.{layer}.ssm_norm.weight"] = x.reshape(groups, -1)
        else:
            out[name] = x
    return out


def gemma4_file(w, config, weights):
    """A Gemma 4 model's header keys beyond add_hparams' and its tensors,
    as llama.cpp's Gemma4Model (after Gemma3Model and TextModel) writes
    them: the two head widths, ropes and key/value head counts, the
    sliding pattern, the double-wide MLP's widths; the proportional rope
    as rope_freqs (1 on the pairs that turn, 1e30 on the others), the
    experts' gate and up fused, the router's scales and the layer scalars
    under llama.cpp's names. The scalars and scales, ones in mlx-lm's
    init, are drawn here, so that a value read into the wrong place
    shows."""
    n = config["num_hidden_layers"]
    types = config["layer_types"]
    swa = [t == "sliding_attention" for t in types]
    rp = config["rope_parameters"]
    full_dim, swa_dim = config["global_head_dim"], config["head_dim"]
    w.add_rope_freq_base_swa(rp["sliding_attention"]["rope_theta"])
    w.add_key_length_swa(swa_dim)
    w.add_value_length_swa(swa_dim)
    w.add_final_logit_softcapping(config["final_logit_softcapping"])
    w.add_sliding_window(config["sliding_window"])
    w.add_sliding_window_pattern(swa)
    w.add_shared_kv_layers(config["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(config["hidden_size_per_layer_input"])
    w.add_rope_dimension_count_swa(swa_dim)
    if config["enable_moe_block"]:
        w.add_expert_count(config["num_experts"])
        w.add_expert_used_count(config["top_k_experts"])
        w.add_expert_feed_forward_length(config["moe_intermediate_size"])
    rot = int(full_dim * rp["full_attention"]["partial_rotary_factor"] / 2)
    w.add_tensor("rope_freqs.weight", np.array([1.0] * rot + [1e30] * (full_dim // 2 - rot), dtype=np.float32))
    rng = np.random.default_rng(6)
    out = {}
    for name, a in weights.items():
        x = np.array(a.astype(mx.float32))
        layer = name.split(".")[2] if name.startswith("model.layers.") else None
        if name.endswith(".layer_scalar"):
            out[f"gguf:blk.{layer}.layer_output_scale.weight"] = 0.5 + rng.random(x.shape)
        elif name.endswith(".router.scale"):
            out[f"gguf:blk.{layer}.ffn_gate_inp.scale"] = 0.5 + rng.random(x.shape)
        elif name.endswith(".router.per_expert_scale"):
            out[f"gguf:blk.{layer}.ffn_down_exps.scale"] = 0.5 + rng.random(x.shape)
        elif name.endswith(".experts.switch_glu.gate_proj.weight"):
            up = np.array(weights[name.replace(".gate_proj.", ".up_proj.")].astype(mx.float32))
            out[f"gguf:blk.{layer}.ffn_gate_up_exps.weight"] = np.concatenate([x, up], axis=1)
        elif name.endswith(".experts.switch_glu.up_proj.weight"):
            continue
        else:
            out[name] = x
    # the layers sharing keys and values keep projections of their own in
    # Hugging Face's checkpoints, which the converter writes (and neither
    # llama.cpp nor mlx-lm runs)
    kv = config["num_key_value_heads"]
    for i in range(n - config["num_kv_shared_layers"], n):
        dim = full_dim if types[i] == "full_attention" else swa_dim
        hidden = config["hidden_size"]
        out[f"gguf:blk.{i}.attn_k.weight"] = 0.05 * rng.standard_normal((kv * dim, hidden))
        out[f"gguf:blk.{i}.attn_v.weight"] = 0.05 * rng.standard_normal((kv * dim, hidden))
        out[f"gguf:blk.{i}.attn_k_norm.weight"] = 1 + 0.2 * rng.standard_normal(dim)
    return out


def qwen3next_tensors(w, config, weights):
    """A Qwen3-Next model's gated delta keys and tensors as llama.cpp's
    Qwen3NextModel writes them: in_proj_qkvz, grouped by key head ([q, k,
    v, z] of each), split into attn_qkv (every head's q, then k, then v)
    and attn_gate (z); in_proj_ba as it is; the convolution without its
    unit axis, A_log as -exp(A_log), dt_bias as ssm_dt.bias."""
    nk, nv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
    per = nv // nk
    w.add_ssm_conv_kernel(config["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(dv * nv)
    w.add_full_attention_interval(config["full_attention_interval"])
    out = {}
    for name, a in weights.items():
        x = np.array(a.astype(mx.float32))
        layer = name.split(".")[2] if name.startswith("model.layers.") else None
        if name.endswith(".in_proj_qkvz.weight"):
            g = x.reshape(nk, 2 * dk + 2 * per * dv, -1)
            q, k = g[:, :dk], g[:, dk:2 * dk]
            v, z = g[:, 2 * dk:2 * dk + per * dv], g[:, 2 * dk + per * dv:]
            out[f"gguf:blk.{layer}.attn_qkv.weight"] = np.concatenate(
                [q.reshape(-1, x.shape[1]), k.reshape(-1, x.shape[1]), v.reshape(-1, x.shape[1])])
            out[f"gguf:blk.{layer}.attn_gate.weight"] = z.reshape(-1, x.shape[1])
        elif name.endswith(".linear_attn.A_log"):
            out[f"gguf:blk.{layer}.ssm_a"] = -np.exp(x)
        elif name.endswith(".linear_attn.dt_bias"):
            out[f"gguf:blk.{layer}.ssm_dt.bias"] = x
        elif name.endswith(".linear_attn.conv1d.weight"):
            out[name] = x[..., 0]
        else:
            out[name] = x
    return out


def falcon_h1_tensors(w, config, weights):
    """A Falcon-H1 model's scan keys and tensors as llama.cpp's
    FalconH1Model writes them: every multiplier folded into the weights it
    scales (in_proj by segment), then ssd_tensors."""
    d, gs, nh = config["mamba_d_ssm"], config["mamba_n_groups"] * config["mamba_d_state"], config["mamba_n_heads"]
    w.add_ssm_conv_kernel(config["mamba_d_conv"])
    w.add_ssm_inner_size(d)
    w.add_ssm_state_size(config["mamba_d_state"])
    w.add_ssm_time_step_rank(d // config["mamba_d_head"])
    w.add_ssm_group_count(config["mamba_n_groups"])
    attn_in = config["attention_in_multiplier"]
    scale = {"feed_forward.down_proj": config["mlp_multipliers"][1], "feed_forward.gate_proj": config["mlp_multipliers"][0],
             "self_attn.k_proj": config["key_multiplier"] * attn_in, "self_attn.q_proj": attn_in,
             "self_attn.v_proj": attn_in, "self_attn.o_proj": config["attention_out_multiplier"],
             "mamba.out_proj": config["ssm_out_multiplier"], "lm_head": config["lm_head_multiplier"],
             "embed_tokens": config["embedding_multiplier"]}
    out = {}
    for name, a in weights.items():
        x = np.array(a.astype(mx.float32))
        module = name.rsplit(".", 1)[0]
        for m, f in scale.items():
            if module.endswith(m):
                x = x * f
        if name.endswith(".pre_ff_layernorm.weight"):
            # (its converter's name, without .weight)
            out[f"gguf:blk.{name.split('.')[2]}.ffn_norm"] = x
            continue
        if name.endswith("mamba.in_proj.weight"):
            x = x * config["ssm_in_multiplier"]
            cuts = [0, d, 2 * d, 2 * d + gs, 2 * d + 2 * gs, 2 * d + 2 * gs + nh]
            for i, m in enumerate(config["ssm_multipliers"]):
                x[cuts[i]:cuts[i + 1]] *= m
        out[name] = x
    return ssd_tensors(out, "mamba", config["mamba_n_groups"])


def write_f32(path, arch, config, weights, vocab):
    if arch in ("mamba", "mamba2"):
        w = writer(path, arch, config, vocab, hparams=False)
        w.add_file_type(0)
        weights = (mamba_file if arch == "mamba" else mamba2_file)(w, config, weights)
        finish(w, arch, config, weights)
        return
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    eps = config[LAYER_NORM_EPS[arch]] if arch in LAYER_NORM_EPS else None
    nextn = 1 if arch == "glm4moe" else 0
    # block_count counts the multi-token prediction blocks
    header = {**config, "num_hidden_layers": config["num_hidden_layers"] + nextn}
    if arch in ("lfm2", "lfm2moe"):
        # as llama.cpp's LFM2Model and LFM2MoeModel write them: the
        # key/value heads a layer, none on the convolution layers
        header["num_key_value_heads"] = [0 if t == "conv" else config["num_key_value_heads"]
                                         for t in config["layer_types"]]
        header["rms_norm_eps"] = config["norm_eps"]
    if arch in ("nemotron_h", "nemotron_h_moe"):
        # as llama.cpp's NemotronHModel writes them: key/value heads on the
        # attention layers, a feed-forward width on the MLP or expert
        # layers, no positions
        pattern = config["hybrid_override_pattern"]
        header["num_key_value_heads"] = [config["num_key_value_heads"] if c == "*" else 0 for c in pattern]
        width = config.get("moe_intermediate_size") if arch == "nemotron_h_moe" else config["intermediate_size"]
        header["intermediate_size"] = [width if c in "-E" else 0 for c in pattern]
        header["max_position_embeddings"] = 2**20
        # (the LayerNorm key, which the RMSNorms read: LAYER_NORM_EPS)
    if arch == "gemma4":
        # as llama.cpp's Gemma4Model writes them: the full-attention
        # layers' head width, rope and rotated width, a key/value head
        # count a layer where the full layers' differ, the MLP's widths a
        # layer where the layers sharing keys and values are twice as wide
        header["head_dim"] = config["global_head_dim"]
        header["rope_theta"] = config["rope_parameters"]["full_attention"]["rope_theta"]
        if config.get("num_global_key_value_heads"):
            header["num_key_value_heads"] = [config["num_key_value_heads"] if t == "sliding_attention"
                                             else config["num_global_key_value_heads"] for t in config["layer_types"]]
        if config["use_double_wide_mlp"]:
            first_shared = config["num_hidden_layers"] - config["num_kv_shared_layers"]
            header["intermediate_size"] = [config["intermediate_size"] * (2 if i >= first_shared else 1)
                                           for i in range(config["num_hidden_layers"])]
        header["qk_rope_head_dim"] = config["global_head_dim"]
    if arch == "mellum":
        # the full layers' rope base (TextModel's rope_freq_base)
        header["rope_theta"] = config["rope_parameters"]["full_attention"]["rope_theta"]
    if arch == "granitehybrid":
        # as llama.cpp's GraniteHybridModel writes them: key/value heads
        # on the attention layers alone, no positions
        header["num_key_value_heads"] = [config["num_key_value_heads"] if t == "attention" else 0
                                         for t in config["layer_types"]]
        header["max_position_embeddings"] = 2**20
    if arch == "minicpm3":
        # as llama.cpp's MiniCPM3Model writes the latent attention's widths
        header.update(gguf_key_length=config["qk_nope_head_dim"] + config["qk_rope_head_dim"])
    if arch == "deepseek2":
        # latent attention as one key/value head, its key the latent and
        # the rotated part, its value the latent
        header.update(num_key_value_heads=1, gguf_key_length=config["kv_lora_rank"] + config["qk_rope_head_dim"],
                      gguf_value_length=config["kv_lora_rank"])
    if arch == "lfm2":
        # and LFM2's adjusted width
        ff = int(2 * config["block_ff_dim"] / 3 * config["block_ffn_dim_multiplier"])
        m = config["block_multiple_of"]
        header["intermediate_size"] = m * ((ff + m - 1) // m)
        header["rms_norm_eps"] = config["norm_eps"]
    w = writer(path, arch, header, vocab, eps)
    w.add_file_type(0)
    if arch in ("command-r", "cohere2"):
        w.add_logit_scale(config["logit_scale"])
    if arch == "cohere2":
        w.add_sliding_window(config["sliding_window"])
    if arch in ("granite", "granitemoe"):
        # as llama.cpp's GraniteModel writes the multipliers
        w.add_attention_scale(config["attention_multiplier"])
        w.add_embedding_scale(config["embedding_multiplier"])
        w.add_residual_scale(config["residual_multiplier"])
        w.add_logit_scale(config["logits_scaling"])
    if arch == "minicpm":
        # as llama.cpp's MiniCPMModel writes the muP scales
        w.add_embedding_scale(config["scale_emb"])
        w.add_residual_scale(config["scale_depth"] / config["num_hidden_layers"] ** 0.5)
        w.add_logit_scale(config["hidden_size"] / config["dim_model_base"])
    if arch == "gemma3":
        # as llama.cpp's TextModel and Gemma3Model write them
        w.add_sliding_window(config["sliding_window"])
        w.add_rope_freq_base_swa(config["rope_local_base_freq"])
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(config["rope_scaling"]["factor"])
    if arch == "olmo2" and "sliding_window" in config:
        # as llama.cpp's Olmo2Model writes OLMo 3's window
        w.add_sliding_window(config["sliding_window"])
        w.add_sliding_window_pattern([(i + 1) % 4 != 0 for i in range(config["num_hidden_layers"])])
    if arch in ("qwen2vl", "qwen3vl", "qwen3vlmoe"):
        # the multi-section rope's sections (pairs of dimensions each)
        w.add_rope_dimension_sections([8, 12, 12, 0])
    if arch == "glm4moe":
        # as llama.cpp's Glm4MoeModel writes the mixture and its MTP block:
        # a copy of the last layer's tensors under the next block number,
        # and the block's own projections and norms
        routed_mixture(w, config, config["routed_scaling_factor"], sigmoid=True)
        w.add_nextn_predict_layers(nextn)
        last, extra = config["num_hidden_layers"] - 1, config["num_hidden_layers"]
        rng = np.random.default_rng(3)
        for hf in sorted(weights):
            if hf.startswith(f"model.layers.{last}."):
                x = np.array(weights[hf].astype(mx.float32))
                name = gguf_name(hf, arch).replace(f"blk.{last}.", f"blk.{extra}.", 1)
                w.add_tensor(name, (x + 0.01 * rng.standard_normal(x.shape)).astype(np.float32))
        hidden = config["hidden_size"]
        w.add_tensor(f"blk.{extra}.nextn.eh_proj.weight", rng.standard_normal((hidden, 2 * hidden)).astype(np.float32) * 0.05)
        for n in ("enorm", "hnorm", "shared_head_norm"):
            w.add_tensor(f"blk.{extra}.nextn.{n}.weight", np.ones(hidden, dtype=np.float32))
    if arch == "gptneox":
        # as llama.cpp's GPTNeoXModel writes it
        w.add_parallel_residual(config["use_parallel_residual"])
    if arch == "qwen3next":
        weights = qwen3next_tensors(w, config, weights)
    if arch == "falcon-h1":
        weights = falcon_h1_tensors(w, config, weights)
    if arch in ("qwen35", "qwen35moe"):
        qwen35_metadata(w, arch, config, [3, 3, 2, 0])
        weights = qwen35_tensors(weights, config)
    if arch == "lfm2moe":
        # (the mixture's sizes below, with every other mixture's)
        w.add_leading_dense_block_count(config["num_dense_layers"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if arch in ("lfm2", "lfm2moe"):
        w.add_shortconv_l_cache(config["conv_L_cache"])
        # the convolution [channels, taps, 1] without its unit axis
        weights = {k: (v[..., 0] if k.endswith("conv.conv.weight") else v) for k, v in weights.items()}
    if arch == "mistral3" and "rope_parameters" in config:
        # as llama.cpp's TextModel and Ministral3Model write Ministral 3's
        rp = config["rope_parameters"]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rp["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(rp["beta_slow"])
        w.add_rope_scaling_yarn_log_mul(rp["mscale_all_dim"])
        w.add_attn_temperature_scale(rp["llama_4_scaling_beta"])
    if arch == "ernie4_5-moe":
        # as llama.cpp's Ernie4_5MoeModel writes the mixture (the shared
        # expert's width as intermediate_size over the key/value heads,
        # which is its width in Ernie 4.5's configs and here)
        w.add_expert_count(config["moe_num_experts"])
        w.add_expert_used_count(config["moe_k"])
        w.add_interleave_moe_layer_step(config["moe_layer_interval"])
        w.add_leading_dense_block_count(config["moe_layer_start_index"])
        w.add_expert_feed_forward_length(config["moe_intermediate_size"])
        w.add_expert_shared_count(config["moe_num_shared_experts"])
        w.add_expert_shared_feed_forward_length(config["intermediate_size"] // config["num_key_value_heads"])
        assert config["intermediate_size"] // config["num_key_value_heads"] == (
            config["moe_intermediate_size"] * config["moe_num_shared_experts"])
        rng = np.random.default_rng(4)
        weights = dict(weights)
        for i in range(config["moe_layer_start_index"], config["num_hidden_layers"]):
            weights[f"gguf:blk.{i}.exp_probs_b.bias"] = 0.05 * rng.standard_normal(config["moe_num_experts"])
    if arch in ("nemotron_h", "nemotron_h_moe"):
        # as llama.cpp's NemotronHModel (after GraniteHybridModel) writes them
        w.add_ssm_conv_kernel(config["conv_kernel"])
        w.add_ssm_state_size(config["ssm_state_size"])
        w.add_ssm_group_count(config["n_groups"])
        w.add_ssm_inner_size(config["mamba_num_heads"] * config["mamba_head_dim"])
        w.add_ssm_time_step_rank(config["mamba_num_heads"])
        w.add_rope_scaling_finetuned(False)
        if arch == "nemotron_h_moe":
            w.add_expert_used_count(config["num_experts_per_tok"])
            w.add_expert_feed_forward_length(config["moe_intermediate_size"])
            w.add_expert_shared_feed_forward_length(config["moe_shared_expert_intermediate_size"])
            w.add_expert_count(config["n_routed_experts"])
            w.add_expert_shared_count(config["n_shared_experts"])
            w.add_expert_weights_norm(config["norm_topk_prob"])
            w.add_expert_weights_scale(config["routed_scaling_factor"])
            w.add_expert_group_count(config["n_group"])
        weights = ssd_tensors(weights, "mixer", config["n_groups"])
    if arch == "gemma4":
        weights = gemma4_file(w, config, weights)
    if arch == "granitehybrid":
        # as llama.cpp's GraniteHybridModel (after GraniteMoeModel and
        # GraniteModel) writes them
        w.add_attention_scale(config["attention_multiplier"])
        w.add_embedding_scale(config["embedding_multiplier"])
        w.add_residual_scale(config["residual_multiplier"])
        w.add_logit_scale(config["logits_scaling"])
        w.add_expert_shared_feed_forward_length(config["shared_intermediate_size"])
        w.add_ssm_conv_kernel(config["mamba_d_conv"])
        w.add_ssm_state_size(config["mamba_d_state"])
        w.add_ssm_group_count(config["mamba_n_groups"])
        w.add_ssm_inner_size(config["mamba_n_heads"] * config["mamba_d_head"])
        w.add_ssm_time_step_rank(config["mamba_n_heads"])
        w.add_rope_scaling_finetuned(False)
        weights = ssd_tensors(weights, "mamba", config["mamba_n_groups"])
        for name in [n for n in weights if n.endswith(".shared_mlp.input_linear.weight")]:
            x, layer = weights.pop(name), name.split(".")[2]
            gate, up = np.split(x, 2)
            weights[f"gguf:blk.{layer}.ffn_gate_shexp.weight"] = gate
            weights[f"gguf:blk.{layer}.ffn_up_shexp.weight"] = up
    if arch == "internlm2":
        # as llama.cpp's InternLM2Model splits wqkv: by key/value head,
        # its queries, its key and its value, then Llama's q and k rows
        # (finish permutes them)
        for name in [n for n in weights if n.endswith(".attention.wqkv.weight")]:
            x, layer = np.array(weights.pop(name).astype(mx.float32)), name.split(".")[2]
            per = heads // kv
            g = x.reshape(kv, per + 2, -1, x.shape[-1])
            weights[f"model.layers.{layer}.self_attn.q_proj.weight"] = g[:, :per].reshape(-1, x.shape[-1])
            weights[f"model.layers.{layer}.self_attn.k_proj.weight"] = g[:, per].reshape(-1, x.shape[-1])
            weights[f"model.layers.{layer}.self_attn.v_proj.weight"] = g[:, per + 1].reshape(-1, x.shape[-1])
    if arch == "mellum":
        # as llama.cpp's MellumModel and TextModel write them
        full, swa = config["rope_parameters"]["full_attention"], config["rope_parameters"]["sliding_attention"]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(full["factor"])
        w.add_rope_scaling_orig_ctx_len(full["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(full["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(full["beta_slow"])
        w.add_rope_freq_base_swa(swa["rope_theta"])
        w.add_sliding_window(config["sliding_window"])
        w.add_sliding_window_pattern([t == "sliding_attention" for t in config["layer_types"]])
    if arch == "bailingmoe2":
        # as llama.cpp's BailingMoeV2Model and TextModel write them
        w.add_leading_dense_block_count(config["first_k_dense_replace"])
        w.add_expert_shared_feed_forward_length(config["moe_intermediate_size"] * config["num_shared_experts"])
        w.add_expert_weights_scale(config["routed_scaling_factor"])
        w.add_expert_shared_count(config["num_shared_experts"])
        w.add_expert_weights_norm(config["norm_topk_prob"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_group_count(config["n_group"])
        w.add_expert_group_used_count(config["topk_group"])
    if arch == "bailingmoe":
        # as llama.cpp's BailingMoeModel and TextModel write them, q, k and
        # v split (finish permutes q and k)
        w.add_leading_dense_block_count(config["first_k_dense_replace"])
        w.add_expert_weights_scale(1.0)
        w.add_expert_shared_count(config["num_shared_experts"])
        w.add_expert_weights_norm(config["norm_topk_prob"])
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        q, k = heads * head_dim, kv * head_dim
        for name in [n for n in weights if n.endswith(".attention.query_key_value.weight")]:
            x, layer = np.array(weights.pop(name).astype(mx.float32)), name.split(".")[2]
            for part, rows in (("q_proj", x[:q]), ("k_proj", x[q:q + k]), ("v_proj", x[q + k:])):
                weights[f"model.layers.{layer}.self_attn.{part}.weight"] = rows
    if arch == "exaone-moe":
        # as llama.cpp's ExaoneMoEModel (after Exaone4Model and TextModel)
        # writes them, the gating function from Hugging Face's scoring_func
        w.add_sliding_window(config["sliding_window"])
        w.add_sliding_window_pattern([t == "sliding_attention" for t in config["layer_types"]])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_shared_count(config["num_shared_experts"])
        w.add_expert_shared_feed_forward_length(config["moe_intermediate_size"] * config["num_shared_experts"])
        w.add_expert_weights_scale(config["routed_scaling_factor"])
        w.add_expert_weights_norm(config["norm_topk_prob"])
        w.add_leading_dense_block_count(config["is_moe_layer"].index(True))
        w.add_nextn_predict_layers(0)
        w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
    if arch == "deepseek2":
        # as llama.cpp's DeepseekV2Model and TextModel write them
        routed_mixture(w, config, config["routed_scaling_factor"], sigmoid=True)
        w.add_expert_group_count(config["n_group"])
        w.add_expert_group_used_count(config["topk_group"])
        w.add_q_lora_rank(config["q_lora_rank"])
        w.add_kv_lora_rank(config["kv_lora_rank"])
        w.add_key_length_mla(config["qk_nope_head_dim"] + config["qk_rope_head_dim"])
        w.add_value_length_mla(config["v_head_dim"])
        rs = config["rope_scaling"]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rs["factor"])
        w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rs["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(rs["beta_slow"])
        w.add_rope_scaling_yarn_log_mul(0.1 * rs["mscale_all_dim"])
    if arch == "deepseek":
        # as llama.cpp's DeepseekModel writes the mixture
        routed_mixture(w, config, 1.0, sigmoid=False)
    if arch == "minimax-m2":
        # as llama.cpp's MiniMaxM2Model writes the mixture
        w.add_expert_feed_forward_length(config["intermediate_size"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if arch == "dots1":
        # as llama.cpp's Dots1Model and TextModel write the mixture
        routed_mixture(w, config, config["routed_scaling_factor"], sigmoid=True)
    if arch == "gpt-oss":
        # as llama.cpp's GptOssModel writes them
        w.add_sliding_window(config["sliding_window"])
        w.add_expert_feed_forward_length(config["intermediate_size"])
    if arch == "gemma2":
        # as llama.cpp's Gemma2Model writes them
        w.add_attn_logit_softcapping(config["attn_logit_softcapping"])
        w.add_final_logit_softcapping(config["final_logit_softcapping"])
        w.add_sliding_window(config["sliding_window"])
    if ("num_experts" in config or "num_local_experts" in config) and arch != "gemma4":
        # as llama.cpp's TextModel and Qwen2MoeModel write a mixture's sizes
        w.add_expert_count(config.get("num_experts") or config["num_local_experts"])
        w.add_expert_used_count(config["num_experts_per_tok"])
        if "moe_intermediate_size" in config:
            w.add_expert_feed_forward_length(config["moe_intermediate_size"])
        if "shared_expert_intermediate_size" in config:
            w.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
    if arch == "minicpm3":
        # as llama.cpp's MiniCPM3Model writes the ranks and the rope's factors
        w.add_q_lora_rank(config["q_lora_rank"])
        w.add_kv_lora_rank(config["kv_lora_rank"])
        rs = config["rope_scaling"]
        w.add_tensor("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float32))
    if arch == "phi3":
        # as llama.cpp's Phi3MiniModel writes the rope
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        rot = int(config["partial_rotary_factor"] * config["hidden_size"]) // config["num_attention_heads"]
        w.add_rope_scaling_orig_ctx_len(config["original_max_position_embeddings"])
        scale = config["max_position_embeddings"] / config["original_max_position_embeddings"]
        w.add_rope_scaling_attn_factors(np.sqrt(1 + np.log(scale) / np.log(config["original_max_position_embeddings"])))
        w.add_sliding_window(0)
        rs = config["rope_scaling"]
        w.add_tensor("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float32))
        assert rot == 2 * len(rs["long_factor"]) and head_dim > rot
    if (config.get("rope_scaling") or {}).get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_factors(config))
    if arch == "apertus":
        # as llama.cpp's ApertusModel writes xIELU's parameters
        layers = range(config["num_hidden_layers"])
        for p in ("alpha_n", "alpha_p", "beta", "eps"):
            # moved apart a layer from the next, so that a value read into
            # the wrong layer shows
            values = [float(np.array(weights.pop(f"model.layers.{i}.mlp.act_fn.{p}").astype(mx.float32)).reshape(-1)[0])
                      + (0.05 * i if p != "eps" else 0.0) for i in layers]
            getattr(w, f"add_xielu_{p}")(values)
    finish(w, arch, config, weights)


def finish(w, arch, config, weights):
    """Writes the tensors (by gguf_name's names, gguf: ones as named, in
    llama.cpp's row orders) and closes the file."""
    heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
    for hf in sorted(weights):
        if hf.startswith("gguf:"):  # named as the file names it
            w.add_tensor(hf.removeprefix("gguf:"), weights[hf].astype(np.float32))
            continue
        x = np.array(weights[hf].astype(mx.float32)) if isinstance(weights[hf], mx.array) else weights[hf]
        if arch in PERMUTED and (".q_proj." in hf or ".k_proj." in hf):
            x = llama_cpp_permute(x, heads if ".q_proj." in hf else kv)
        if arch == "gptneox" and ".query_key_value." in hf:
            # as GPTNeoXModel regroups the rows: each head's q, k and v
            # together in the checkpoint, all q, all k, all v in the file
            x = x.reshape(heads, 3, -1, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)
        if arch in NORM_SHIFT and hf.endswith("norm.weight"):
            x = x + NORM_SHIFT[arch]
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
        for name, (qtype, pure) in {**TYPES, **CASE_TYPES.get(case, {})}.items():
            files[name] = os.path.join(d, f"model-{name}.gguf")
            quantize(tools, f32, files[name], qtype, ["--pure"] if pure else [])
        logits(tools, d, files)
        print(case, "made", len(files), "files")
    if len(sys.argv) > 3:
        real(out, tools, sys.argv[3])


if __name__ == "__main__":
    main()
