"""The parity cases: one tiny config.json per (arch, case).

Each config uses the keys a real checkpoint of that model_type carries, at
small sizes, and each case exercises one structural choice of its arch (a
rope scaling type, tied or untied head, biases, sliding layers, NoPE layers,
partial rotary, GQA or plain multi-head attention, a head_dim unlike
hidden/heads). Every linear input width is a multiple of 64 unless a case
says otherwise, so each level quantizes every layer; `mixed_quant` cases
leave one width at 160 on purpose, so that group 64 leaves those layers in
floating point while group 32 quantizes them.

A case's name is part of its reference path (testdata/parity/<arch>/<case>)
and seeds its random weights, so renaming a case regenerates its data.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

# Shared small sizes.
VOCAB = 256
HIDDEN = 64
PROMPT_LEN = 20
DECODE_STEPS = 16
SLIDING_WINDOW = 6  # shorter than the prompt, so the window bites in prefill


@dataclass(frozen=True)
class Layout:
    """How a published checkpoint names its tensors, where mlx-lm saves
    them otherwise: a vision-language model's text model under other
    prefixes, beside a vision tower (and a projector) that loading must
    drop; tensors stored transposed or fused.

    rename maps a prefix of mlx-lm's saved names to the checkpoint's (the
    first that matches); towers are the tensors of the parts loading drops,
    by name and shape, filled with random float32 values."""

    rename: Tuple[Tuple[str, str], ...]
    towers: Tuple[Tuple[str, Tuple[int, ...]], ...]
    # Substrings of the names of two- or three-dimensional tensors stored
    # with their last two axes swapped, as Hugging Face stores the short
    # convolutions ([channels, 1, taps]) and GPT-2's Conv1D weights ([in,
    # out]); mlx-lm's sanitize moves them back.
    transposed: Tuple[str, ...] = ()
    # Latent attention's two per-head up-projections (mlx-lm's embed_q
    # [heads, rank, nope] and unembed_out [heads, value, rank]) stored as
    # Hugging Face's one kv_b_proj [heads * (nope + value), rank], each
    # head's key rows then its value rows; mlx-lm's sanitize splits it.
    fused_kv_b: bool = False
    # Each sparse layer's stacked experts (mlx-lm's switch_mlp gate_proj,
    # up_proj and down_proj, [E, out, in]) stored as transformers'
    # Qwen3-VL-MoE holds them: experts.gate_up_proj [E, in, 2 * out], the
    # gate's columns first, and experts.down_proj [E, in, out].
    transposed_experts: bool = False
    # The stacked experts' module (mlx-lm's <module>.gate_proj, up_proj and
    # down_proj, [E, out, in]) whose matrices are stored as Hugging Face's
    # Gemma 4 holds them, under the module's parent: experts.gate_up_proj
    # [E, 2 * out, in], the gate's rows first, and experts.down_proj, both
    # without a .weight suffix; "" for none.
    fused_experts: str = ""


@dataclass
class Case:
    arch: str  # the descriptor this case belongs to (the config's model_type)
    name: str
    doc: str  # what the case exercises, one line
    config: Dict[str, Any] = field(default_factory=dict)
    # A quantized KV cache to decode with, as mlx-lm's generate_step takes it:
    # {"kv_bits", "kv_group_size", "quantized_kv_start"}; None for its
    # default caches.
    kv_cache: Optional[Dict[str, int]] = None
    # The float32 checkpoint's names, as a published vision-language
    # checkpoint has them; None for what mlx-lm's save_model writes. (Only
    # the float32 level has them: the other levels are saved by mlx-lm.)
    layout: Optional[Layout] = None
    # Modules the saved checkpoint leaves out, by path (a checkpoint whose
    # head is tied by holding no lm_head: gemma3's), [] for none.
    without: List[str] = field(default_factory=list)
    # Levels of this case beyond LEVELS, by name in EXTRA_LEVELS (a
    # quantization mode only its arch uses), [] for none.
    extra_levels: List[str] = field(default_factory=list)
    # The levels of LEVELS this case leaves out, by name, where the oracle's
    # own run of them is wrong, [] for none; left_out says why.
    without_levels: List[str] = field(default_factory=list)
    left_out: str = ""

    @property
    def key(self) -> str:
        return f"{self.arch}/{self.name}"


def _llama_like(model_type: str, arch_name: str, **over) -> Dict[str, Any]:
    """The keys every llama-family config carries, at the shared sizes."""
    cfg = {
        "architectures": [arch_name],
        "model_type": model_type,
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "vocab_size": VOCAB,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    cfg.update(over)
    return cfg


def _without(cfg: Dict[str, Any], *keys: str) -> Dict[str, Any]:
    """cfg less keys: a case whose config leaves them out, so the defaults apply."""
    return {k: v for k, v in cfg.items() if k not in keys}


def _llama_cases() -> List[Case]:
    def llama(**over):
        return _llama_like("llama", "LlamaForCausalLM", **over)

    return [
        Case(
            "llama",
            "base",
            "GQA 4/2, head_dim 32 unlike hidden/heads 16, untied head, no biases",
            llama(head_dim=32, tie_word_embeddings=False, attention_bias=False),
        ),
        Case(
            "llama",
            "mha_tied_bias",
            "plain multi-head, tied head, q/k/v/o and MLP biases, traditional rope, "
            "mixed_quant: intermediate 160 stays float at group 64",
            llama(
                num_key_value_heads=4,
                intermediate_size=160,
                tie_word_embeddings=True,
                attention_bias=True,
                mlp_bias=True,
                rope_traditional=True,
            ),
        ),
        Case(
            "llama",
            "rope_linear",
            "rope_scaling linear, factor 4",
            llama(
                tie_word_embeddings=False,
                rope_scaling={"type": "linear", "factor": 4.0},
            ),
        ),
        Case(
            "llama",
            "rope_dynamic",
            "rope_scaling dynamic (NTK), factor 2, max_position_embeddings 16 so "
            "prefill and decode run past it",
            llama(
                head_dim=32,
                tie_word_embeddings=False,
                max_position_embeddings=16,
                rope_scaling={"type": "dynamic", "factor": 2.0},
            ),
        ),
        Case(
            "llama",
            "rope_llama3",
            "rope_scaling llama3 (factor 8, low 1, high 4, original 32, so most "
            "frequencies scale at these positions), theta 5e5",
            llama(
                head_dim=32,
                tie_word_embeddings=True,
                rope_theta=500000.0,
                max_position_embeddings=131072,
                rope_scaling={
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 32,
                    "rope_type": "llama3",
                },
            ),
        ),
        Case(
            "llama",
            "rope_yarn",
            "rope_scaling yarn (factor 4, original 32768, beta_fast 16, beta_slow 2), "
            "theta 1e6",
            llama(
                head_dim=32,
                tie_word_embeddings=False,
                rope_theta=1000000.0,
                max_position_embeddings=131072,
                rope_scaling={
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                    "beta_fast": 16,
                    "beta_slow": 2,
                },
            ),
        ),
        Case(
            "llama",
            "rope_longrope",
            "rope_scaling longrope (per-frequency long_factor, q/k scale from "
            "max_position_embeddings / original)",
            llama(
                head_dim=32,
                tie_word_embeddings=False,
                max_position_embeddings=131072,
                rope_scaling={
                    "type": "longrope",
                    "original_max_position_embeddings": 4096,
                    "short_factor": [1.0 + 0.05 * i for i in range(16)],
                    "long_factor": [1.0 + 0.9 * i for i in range(16)],
                },
            ),
        ),
        Case(
            "llama",
            "sliding",
            f"layer_types sliding/full/sliding/full with sliding_window "
            f"{SLIDING_WINDOW} < prompt {PROMPT_LEN}: rotating cache on sliding layers",
            llama(
                num_hidden_layers=4,
                tie_word_embeddings=False,
                sliding_window=SLIDING_WINDOW,
                layer_types=[
                    "sliding_attention",
                    "full_attention",
                    "sliding_attention",
                    "full_attention",
                ],
            ),
        ),
        Case(
            "mistral",
            "base",
            "model_type mistral (runs as llama): sliding_window set but no "
            "layer_types, so every layer is full attention; head_dim 32",
            _llama_like(
                "mistral",
                "MistralForCausalLM",
                head_dim=32,
                num_key_value_heads=1,
                tie_word_embeddings=False,
                sliding_window=SLIDING_WINDOW,
                rope_theta=1000000.0,
            ),
        ),
        Case(
            "iquestcoder",
            "base",
            "model_type iquestcoder (runs as llama), GQA, untied",
            _llama_like(
                "iquestcoder",
                "IQuestCoderForCausalLM",
                tie_word_embeddings=False,
                rope_theta=500000.0,
            ),
        ),
        Case(
            "xverse",
            "base",
            "model_type xverse (runs as llama): no num_key_value_heads key, so "
            "plain multi-head; untied",
            {
                k: v
                for k, v in _llama_like(
                    "xverse",
                    "XverseForCausalLM",
                    tie_word_embeddings=False,
                    rms_norm_eps=1e-6,
                ).items()
                if k != "num_key_value_heads"
            },
        ),
    ]


def _smollm3_cases() -> List[Case]:
    def smol(**over):
        return _llama_like("smollm3", "SmolLM3ForCausalLM", **over)

    return [
        Case(
            "smollm3",
            "nope_interval",
            "4 layers, no no_rope_layers key: the default interval 4 leaves layer 3 "
            "without rope; tied head",
            smol(num_hidden_layers=4, tie_word_embeddings=True, rope_theta=2000000.0),
        ),
        Case(
            "smollm3",
            "nope_list",
            "explicit no_rope_layers [1, 0, 0, 1] (0 = no rope), untied head, MHA",
            smol(
                num_hidden_layers=4,
                num_key_value_heads=4,
                tie_word_embeddings=False,
                no_rope_layers=[1, 0, 0, 1],
                no_rope_layer_interval=4,
            ),
        ),
    ]


def _qwen2_cases() -> List[Case]:
    def qwen2(**over):
        cfg = _llama_like("qwen2", "Qwen2ForCausalLM", **over)
        cfg["max_window_layers"] = cfg["num_hidden_layers"]
        cfg["use_sliding_window"] = False
        cfg["sliding_window"] = 32768
        return cfg

    return [
        Case(
            "qwen2",
            "base",
            "biased q/k/v, o without bias, GQA, tied head",
            qwen2(tie_word_embeddings=True, rope_theta=1000000.0),
        ),
        Case(
            "qwen2",
            "untied_yarn",
            "untied head, rope_scaling yarn (factor 4, original 32768); a config "
            "head_dim 32 that qwen2 ignores (it uses hidden/heads 16)",
            qwen2(
                tie_word_embeddings=False,
                head_dim=32,
                rope_theta=1000000.0,
                max_position_embeddings=131072,
                rope_scaling={
                    "type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                },
            ),
        ),
    ]


def _qwen3_cases() -> List[Case]:
    def qwen3(**over):
        cfg = _llama_like("qwen3", "Qwen3ForCausalLM", **over)
        cfg.setdefault("attention_bias", False)
        return cfg

    return [
        Case(
            "qwen3",
            "base",
            "q_norm/k_norm per head, head_dim 32 unlike hidden/heads 16, GQA, untied",
            qwen3(head_dim=32, tie_word_embeddings=False, rope_theta=1000000.0),
        ),
        Case(
            "qwen3",
            "tied_mha",
            "plain multi-head, head_dim 16, tied head",
            qwen3(
                head_dim=16,
                num_key_value_heads=4,
                tie_word_embeddings=True,
                rope_theta=1000000.0,
            ),
        ),
        Case(
            "qwen3",
            "rope_parameters",
            "no top-level rope_theta: theta and a yarn scaling nested in "
            "rope_parameters (the transformers 5 layout)",
            {
                k: v
                for k, v in qwen3(
                    head_dim=32,
                    tie_word_embeddings=False,
                    max_position_embeddings=131072,
                    rope_parameters={
                        "rope_type": "yarn",
                        "rope_theta": 1000000.0,
                        "factor": 4.0,
                        "original_max_position_embeddings": 32768,
                    },
                ).items()
                if k != "rope_theta"
            },
        ),
    ]


def _gemma_cases() -> List[Case]:
    def gemma(**over):
        cfg = _llama_like("gemma", "GemmaForCausalLM", **over)
        cfg["hidden_act"] = "gelu_pytorch_tanh"
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
        cfg["rms_norm_eps"] = 1e-6
        return cfg

    return [
        Case(
            "gemma",
            "base",
            "(1 + w) RMSNorm, sqrt(hidden) embedding scale, gelu MLP, multi-query "
            "(1 kv head), head_dim 32",
            gemma(head_dim=32, num_key_value_heads=1, tie_word_embeddings=True),
        ),
        Case(
            "gemma",
            "mha",
            "plain multi-head, head_dim 16, a rope_scaling that gemma ignores",
            gemma(
                head_dim=16,
                num_key_value_heads=4,
                tie_word_embeddings=True,
                rope_scaling={"type": "linear", "factor": 4.0},
            ),
        ),
    ]


def _gemma2_cases() -> List[Case]:
    def gemma2(**over):
        cfg = _llama_like("gemma2", "Gemma2ForCausalLM", **over)
        cfg["hidden_act"] = "gelu_pytorch_tanh"
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
        cfg["rms_norm_eps"] = 1e-6
        return cfg

    return [
        Case(
            "gemma2",
            "defaults",
            "sandwich norms, soft-capped scores and logits with the defaults "
            "(50, 30, query_pre_attn_scalar 144: none of the keys given), GQA",
            gemma2(head_dim=32, tie_word_embeddings=True),
        ),
        Case(
            "gemma2",
            "capped",
            "attn_logit_softcapping 3, final_logit_softcapping 20 (both bite, "
            "neither saturates), "
            f"query_pre_attn_scalar 16; sliding_window {SLIDING_WINDOW} that "
            "mlx-lm ignores (every layer full attention); plain multi-head",
            gemma2(
                head_dim=16,
                num_key_value_heads=4,
                tie_word_embeddings=True,
                attn_logit_softcapping=3.0,
                final_logit_softcapping=20.0,
                query_pre_attn_scalar=16,
                sliding_window=SLIDING_WINDOW,
                cache_implementation="hybrid",
            ),
        ),
        Case(
            "gemma2",
            "kv_q8",
            "decoded with an 8-bit KV cache (group 32) from the start: "
            "soft-capped attention (cap 5, bites) over quantized keys and values, GQA",
            gemma2(head_dim=32, tie_word_embeddings=True, attn_logit_softcapping=5.0),
            kv_cache={"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 0},
        ),
        Case(
            "gemma2",
            "kv_q4_late",
            "decoded with a 4-bit KV cache (group 32) switched on at offset "
            "22, mid-decode; plain multi-head, cap 5",
            gemma2(
                head_dim=32,
                num_key_value_heads=4,
                tie_word_embeddings=True,
                attn_logit_softcapping=5.0,
            ),
            kv_cache={"kv_bits": 4, "kv_group_size": 32, "quantized_kv_start": 22},
        ),
    ]


def _phi3_cases() -> List[Case]:
    def phi3(**over):
        cfg = _llama_like(
            "phi3",
            "Phi3ForCausalLM",
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
            original_max_position_embeddings=4096,
            tie_word_embeddings=False,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "phi3",
            "base",
            "fused qkv_proj and gate_up_proj, GQA 2/1, head_dim 32 (hidden/heads), "
            "untied",
            phi3(),
        ),
        Case(
            "phi3",
            "longrope_partial",
            "partial_rotary_factor 0.5 with rope_scaling longrope: long_factor on "
            "the 16 rotated dims, q/k scale from 131072 / 4096",
            phi3(
                partial_rotary_factor=0.5,
                max_position_embeddings=131072,
                rope_scaling={
                    "type": "longrope",
                    "short_factor": [1.0 + 0.02 * i for i in range(8)],
                    "long_factor": [1.0 + 1.7 * i for i in range(8)],
                },
            ),
        ),
        Case(
            "phi3",
            "su_mha",
            "rope_scaling type su (the old name of longrope), plain multi-head",
            phi3(
                num_key_value_heads=2,
                max_position_embeddings=131072,
                rope_scaling={
                    "type": "su",
                    "short_factor": [1.0] * 16,
                    "long_factor": [1.0 + 0.5 * i for i in range(16)],
                },
            ),
        ),
        Case(
            "phi3",
            "linear_tied",
            "rope_scaling linear (factor 2), tied head",
            phi3(
                tie_word_embeddings=True,
                rope_scaling={"type": "linear", "factor": 2.0, "long_factor": [1.0]},
            ),
        ),
    ]


def _olmo2_cases() -> List[Case]:
    def olmo2(**over):
        cfg = _llama_like("olmo2", "Olmo2ForCausalLM", **over)
        cfg["rms_norm_eps"] = 1e-6
        cfg["rope_theta"] = 500000.0
        return cfg

    return [
        Case(
            "olmo2",
            "base",
            "post-norm blocks, q/k RMSNorm over the flattened width, head_dim 32, "
            "GQA, untied",
            olmo2(head_dim=32, tie_word_embeddings=False, attention_bias=False),
        ),
        Case(
            "olmo2",
            "tied_bias_linear",
            "tied head, attention and MLP biases, rope_scaling linear factor 2, MHA",
            olmo2(
                num_key_value_heads=4,
                tie_word_embeddings=True,
                attention_bias=True,
                mlp_bias=True,
                rope_scaling={"rope_type": "linear", "factor": 2.0},
            ),
        ),
    ]


def _glm4_cases() -> List[Case]:
    def glm4(**over):
        cfg = _llama_like("glm4", "Glm4ForCausalLM", **over)
        cfg["partial_rotary_factor"] = 0.5
        cfg["pad_token_id"] = 0
        return cfg

    return [
        Case(
            "glm4",
            "base",
            "four norms per block, fused gate_up_proj, biased q/k/v, partial rope "
            "0.5 interleaved (rope_traditional default true), head_dim 32, GQA",
            glm4(head_dim=32, attention_bias=True, tie_word_embeddings=False),
        ),
        Case(
            "glm4",
            "nobias_halfsplit",
            "attention_bias false, rope_traditional false (half-split pairs), MHA, "
            "head_dim 16",
            glm4(
                head_dim=16,
                num_key_value_heads=4,
                attention_bias=False,
                rope_traditional=False,
                tie_word_embeddings=False,
            ),
        ),
    ]


def _granite_cases() -> List[Case]:
    def granite(**over):
        cfg = _llama_like(
            "granite",
            "GraniteForCausalLM",
            attention_multiplier=0.09,
            embedding_multiplier=6.0,
            residual_multiplier=0.3,
            logits_scaling=4.0,
            attention_bias=False,
            mlp_bias=False,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "granite",
            "base",
            "attention, embedding, residual and logits multipliers, GQA, tied head; "
            "mlx-lm keeps o_proj/down_proj/lm_head at 8 bits group 64 when quantizing",
            granite(tie_word_embeddings=True),
        ),
        Case(
            "granite",
            "bias_untied",
            "attention (o too) and MLP biases, untied head, MHA, rope_scaling "
            "llama3",
            granite(
                num_key_value_heads=4,
                tie_word_embeddings=False,
                attention_bias=True,
                mlp_bias=True,
                rope_theta=500000.0,
                rope_scaling={
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 32,
                },
            ),
        ),
    ]


def _starcoder2_cases() -> List[Case]:
    def sc2(**over):
        cfg = {
            "architectures": ["Starcoder2ForCausalLM"],
            "model_type": "starcoder2",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "hidden_act": "gelu_pytorch_tanh",
            "norm_epsilon": 1e-5,
            "vocab_size": VOCAB,
            "max_position_embeddings": 16384,
            "rope_theta": 100000.0,
            "use_bias": True,
            "sliding_window": None,
            "bos_token_id": 0,
            "eos_token_id": 0,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "starcoder2",
            "base",
            "LayerNorm with bias, every projection biased, gelu c_fc/c_proj MLP, "
            "GQA, tied head",
            sc2(tie_word_embeddings=True),
        ),
        Case(
            "starcoder2",
            "untied_mha",
            "untied head (no bias), plain multi-head, norm_epsilon 1e-6, "
            "rope_theta from the default (no key)",
            {
                k: v
                for k, v in sc2(
                    num_key_value_heads=4, tie_word_embeddings=False, norm_epsilon=1e-6
                ).items()
                if k != "rope_theta"
            },
        ),
    ]


def _helium_cases() -> List[Case]:
    def helium(**over):
        cfg = _llama_like(
            "helium",
            "HeliumForCausalLM",
            attention_bias=False,
            mlp_bias=False,
            rms_norm_eps=1e-8,
            rope_theta=100000.0,
            pad_token_id=3,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "helium",
            "base",
            "q/k/v biases (none on o), interleaved rope, untied head, GQA 4/2; a "
            "config head_dim 32 that helium ignores (it uses hidden/heads 16)",
            helium(head_dim=32, attention_bias=True, tie_word_embeddings=False),
        ),
        Case(
            "helium",
            "tied_mlp_bias",
            "tied head with the lm_head mlx-lm builds anyway (dropped at load), MLP "
            "biases, no attention biases, plain multi-head",
            helium(
                head_dim=16,
                num_key_value_heads=4,
                mlp_bias=True,
                tie_word_embeddings=True,
            ),
        ),
    ]


def _ernie4_5_cases() -> List[Case]:
    def ernie(**over):
        cfg = _llama_like(
            "ernie4_5",
            "Ernie4_5_ForCausalLM",
            rope_theta=500000.0,
            pad_token_id=0,
            use_cache=False,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "ernie4_5",
            "base",
            "interleaved plain rope, no biases, tied head, head_dim 32 unlike "
            "hidden/heads 16, GQA 4/2",
            ernie(head_dim=32, use_bias=False, tie_word_embeddings=True),
        ),
        Case(
            "ernie4_5",
            "bias_untied",
            "use_bias on q/k/v/o and the MLP, untied head, plain multi-head; a "
            "rope_scaling that ernie4_5 does not read",
            ernie(
                head_dim=16,
                num_key_value_heads=4,
                use_bias=True,
                tie_word_embeddings=False,
                rope_scaling={"type": "linear", "factor": 4.0},
            ),
        ),
    ]


def _glm_cases() -> List[Case]:
    def glm(**over):
        cfg = _llama_like(
            "glm",
            "GlmForCausalLM",
            partial_rotary_factor=0.5,
            pad_token_id=0,
            rms_norm_eps=1.5625e-07,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "glm",
            "base",
            "fused gate_up_proj, q/k/v biases (none on o), interleaved rope over "
            "the whole head (partial_rotary_factor 0.5 is not read), head_dim 32, "
            "GQA, untied",
            glm(head_dim=32, attention_bias=True, tie_word_embeddings=False),
        ),
        Case(
            "glm",
            "tied_nobias",
            "attention_bias false, tied head (the default), plain multi-head, "
            "head_dim 16, rope_theta 5e5",
            _without(
                glm(
                    head_dim=16,
                    num_key_value_heads=4,
                    attention_bias=False,
                    rope_theta=500000.0,
                ),
                "tie_word_embeddings",
            ),
        ),
    ]


def _internlm3_cases() -> List[Case]:
    def internlm3(**over):
        cfg = _llama_like(
            "internlm3",
            "InternLM3ForCausalLM",
            bias=False,
            qkv_bias=False,
            head_dim=16,
            pad_token_id=2,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "internlm3",
            "qkv_bias_dynamic",
            "qkv_bias on q/k/v/o, untied head (the default), GQA, rope_scaling "
            "dynamic factor 2 with max_position_embeddings 16 so prefill and decode "
            "run past it",
            _without(
                internlm3(
                    qkv_bias=True,
                    max_position_embeddings=16,
                    rope_scaling={"rope_type": "dynamic", "factor": 2.0},
                ),
                "tie_word_embeddings",
            ),
        ),
        Case(
            "internlm3",
            "mlp_bias_linear",
            "bias on the MLP only, tied head, plain multi-head, rope_scaling linear "
            "factor 3, rope_theta 5e4",
            internlm3(
                num_key_value_heads=4,
                bias=True,
                tie_word_embeddings=True,
                rope_theta=50000.0,
                rope_scaling={"rope_type": "linear", "factor": 3.0},
            ),
        ),
    ]


def _mimo_cases() -> List[Case]:
    def mimo(**over):
        cfg = _llama_like(
            "mimo",
            "MiMoForCausalLM",
            rope_theta=640000.0,
            num_nextn_predict_layers=1,
            max_window_layers=2,
            use_sliding_window=False,
            sliding_window=32768,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "mimo",
            "base",
            "biased q/k/v, o without bias, GQA, untied head (the default), "
            "num_nextn_predict_layers 1",
            _without(mimo(), "tie_word_embeddings"),
        ),
        Case(
            "mimo",
            "tied_yarn",
            "tied head, rope_scaling yarn (factor 4, original 32768), plain "
            "multi-head; a config head_dim 32 that mimo ignores",
            mimo(
                num_key_value_heads=4,
                head_dim=32,
                tie_word_embeddings=True,
                max_position_embeddings=131072,
                rope_scaling={
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                },
            ),
        ),
    ]


def _seed_oss_cases() -> List[Case]:
    def seed(**over):
        cfg = _llama_like(
            "seed_oss",
            "SeedOssForCausalLM",
            attention_bias=True,
            attention_out_bias=False,
            mlp_bias=False,
            attention_dropout=0.1,
            residual_dropout=0.1,
            pad_token_id=1,
            rms_norm_eps=1e-6,
            rope_theta=10000000.0,
            tie_word_embeddings=False,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "seed_oss",
            "base",
            "q/k/v biases, o without, head_dim 32 unlike hidden/heads 16, GQA, "
            "untied head",
            seed(head_dim=32),
        ),
        Case(
            "seed_oss",
            "out_mlp_bias_linear",
            "attention_out_bias on o only, MLP biases, plain multi-head, "
            "head_dim 16, rope_scaling linear factor 2",
            seed(
                head_dim=16,
                num_key_value_heads=4,
                attention_bias=False,
                attention_out_bias=True,
                mlp_bias=True,
                rope_scaling={"rope_type": "linear", "factor": 2.0},
            ),
        ),
    ]


def _telechat3_cases() -> List[Case]:
    def telechat3(**over):
        cfg = _llama_like("telechat3", "Telechat3ForCausalLM", pad_token_id=3)
        cfg.update(over)
        return cfg

    return [
        Case(
            "telechat3",
            "base",
            "no biases, untied head (the default), GQA, head_dim 32 unlike "
            "hidden/heads 16",
            _without(telechat3(head_dim=32), "tie_word_embeddings"),
        ),
        Case(
            "telechat3",
            "bias_tied_yarn",
            "attention (o too) and MLP biases, tied head, plain multi-head, "
            "rope_scaling telechat3-yarn (factor 4, original 32, so it bites)",
            telechat3(
                num_key_value_heads=4,
                attention_bias=True,
                mlp_bias=True,
                tie_word_embeddings=True,
                max_position_embeddings=131072,
                rope_scaling={
                    "rope_type": "telechat3-yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32,
                },
            ),
        ),
    ]


def _exaone_cases() -> List[Case]:
    def exaone(**over):
        cfg = {
            "architectures": ["ExaoneForCausalLM"],
            "model_type": "exaone",
            "activation_function": "silu",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "layer_norm_epsilon": 1e-5,
            "vocab_size": VOCAB,
            "max_position_embeddings": 4096,
            "rope_theta": 500000.0,
            "embed_dropout": 0.0,
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "exaone",
            "base",
            "GPT-2 names (transformer.wte/h/ln_f, attn.attention.out_proj, "
            "c_fc_0/c_fc_1/c_proj), num_layers and layer_norm_epsilon, GQA, untied",
            exaone(tie_word_embeddings=False),
        ),
        Case(
            "exaone",
            "tied_bias_llama3",
            "tied head, attention (o too) and MLP biases, plain multi-head, "
            "rope_scaling llama3 (factor 8, original 32)",
            exaone(
                num_key_value_heads=4,
                tie_word_embeddings=True,
                attention_bias=True,
                mlp_bias=True,
                layer_norm_epsilon=1e-6,
                rope_scaling={
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 32,
                },
            ),
        ),
    ]


def _pixtral_cases() -> List[Case]:
    def pixtral(text_config):
        return {
            "architectures": ["LlavaForConditionalGeneration"],
            "model_type": "pixtral",
            "image_token_index": 10,
            "projector_hidden_act": "gelu",
            "multimodal_projector_bias": True,
            "spatial_merge_size": 2,
            "vision_feature_layer": -1,
            "vision_config": {
                "model_type": "pixtral",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "patch_size": 16,
                "image_size": 64,
            },
            "text_config": text_config,
            "torch_dtype": "float32",
        }

    def text(**over):
        cfg = _llama_like("mistral", "MistralForCausalLM", rope_theta=1000000000.0)
        del cfg["architectures"], cfg["torch_dtype"]
        cfg.update(over)
        return cfg

    return [
        Case(
            "pixtral",
            "base",
            "a llama under language_model. read from text_config, head_dim 32, GQA; "
            "the head is never tied (text_config's tie_word_embeddings true is "
            "overridden)",
            pixtral(text(head_dim=32, tie_word_embeddings=True)),
        ),
        Case(
            "pixtral",
            "default_heads",
            "text_config without num_attention_heads or num_key_value_heads: 32 "
            "heads of head_dim 8, plain multi-head",
            pixtral(
                _without(
                    text(head_dim=8), "num_attention_heads", "num_key_value_heads"
                )
            ),
        ),
    ]


def _hunyuan_v1_dense_cases() -> List[Case]:
    def hunyuan(**over):
        cfg = _llama_like(
            "hunyuan_v1_dense",
            "HunYuanDenseV1ForCausalLM",
            use_qk_norm=True,
            attention_bias=False,
            mlp_bias=False,
            pad_token_id=0,
            tie_word_embeddings=True,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "hunyuan_v1_dense",
            "alpha_tied",
            "q/k RMSNorm per head after the rope, rope base scaled by "
            "rope_scaling alpha 1000 (^ 32/30), head_dim 32 unlike hidden/heads "
            "16, GQA, tied head",
            hunyuan(
                head_dim=32,
                rope_scaling={"alpha": 1000.0, "factor": 1.0, "type": "dynamic"},
            ),
        ),
        Case(
            "hunyuan_v1_dense",
            "bias_untied",
            "no rope_scaling (alpha 1), q/k/v/o biases, untied head (the "
            "default), plain multi-head, rope_theta 5e5",
            _without(
                hunyuan(
                    num_key_value_heads=4,
                    attention_bias=True,
                    rope_theta=500000.0,
                ),
                "tie_word_embeddings",
            ),
        ),
    ]


def _stablelm_cases() -> List[Case]:
    def stablelm(**over):
        cfg = {
            "architectures": ["StableLmForCausalLM"],
            "model_type": "stablelm",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "hidden_act": "silu",
            "layer_norm_eps": 1e-5,
            "vocab_size": VOCAB,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "use_qkv_bias": False,
            "use_parallel_residual": False,
            "qk_layernorm": False,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "bos_token_id": 0,
            "eos_token_id": 0,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "stablelm",
            "base",
            "LayerNorms with bias, partial rope 0.25 (4 of 16 dims), attention in "
            "float32 cast back, no q/k/v biases, GQA, untied",
            stablelm(),
        ),
        Case(
            "stablelm",
            "qkv_bias_half_rope",
            "use_qkv_bias on q/k/v (not o), partial_rotary_factor 0.5, plain "
            "multi-head, rope_theta 1e5, layer_norm_eps 1e-6",
            stablelm(
                num_key_value_heads=4,
                use_qkv_bias=True,
                partial_rotary_factor=0.5,
                rope_theta=100000.0,
                layer_norm_eps=1e-6,
            ),
        ),
    ]


def _nemotron_cases() -> List[Case]:
    def nemotron(**over):
        cfg = _llama_like(
            "nemotron",
            "NemotronForCausalLM",
            hidden_act="relu2",
            norm_eps=1e-5,
            partial_rotary_factor=0.5,
        )
        del cfg["rms_norm_eps"]
        cfg.update(over)
        return cfg

    return [
        Case(
            "nemotron",
            "base",
            "LayerNorms scaling by 1 + weight with bias, ungated relu² MLP, partial "
            "rope 0.5 (the default, no key), GQA, untied head (the default), no biases",
            _without(
                nemotron(head_dim=32), "partial_rotary_factor", "tie_word_embeddings"
            ),
        ),
        Case(
            "nemotron",
            "bias_tied_linear",
            "attention (o too) and MLP biases, tied head, plain multi-head, partial "
            "rope 0.25, rope_scaling linear factor 2, norm_eps 1e-6, "
            "rope_traditional true (which nemotron does not use)",
            nemotron(
                num_key_value_heads=4,
                attention_bias=True,
                mlp_bias=True,
                tie_word_embeddings=True,
                partial_rotary_factor=0.25,
                norm_eps=1e-6,
                rope_traditional=True,
                rope_scaling={"type": "linear", "factor": 2.0},
            ),
        ),
    ]


# Vision-language wrappers: mlx-lm runs their text model alone. The configs
# nest it as published ones do, beside a vision_config, and the float32
# checkpoints name their tensors as published ones do, with a small vision
# tower (and projector) that loading must drop.

# Qwen2-VL's and Qwen2.5-VL's vision tower, in miniature.
_QWEN2_VL_TOWER = (
    ("patch_embed.proj.weight", (32, 3, 2, 2, 2)),
    ("blocks.0.norm1.weight", (32,)),
    ("blocks.0.attn.qkv.weight", (96, 32)),
    ("blocks.0.attn.qkv.bias", (96,)),
    ("blocks.0.attn.proj.weight", (32, 32)),
    ("blocks.0.mlp.fc1.weight", (64, 32)),
    ("merger.ln_q.weight", (32,)),
    ("merger.mlp.0.weight", (128, 128)),
    ("merger.mlp.2.weight", (HIDDEN, 128)),
)

# Qwen3-VL's, with a deepstack merger.
_QWEN3_VL_TOWER = (
    ("patch_embed.proj.weight", (32, 3, 2, 2, 2)),
    ("pos_embed.weight", (16, 32)),
    ("blocks.0.attn.qkv.weight", (96, 32)),
    ("blocks.0.mlp.linear_fc1.weight", (64, 32)),
    ("blocks.0.mlp.linear_fc2.weight", (32, 64)),
    ("merger.norm.weight", (32,)),
    ("merger.linear_fc2.weight", (HIDDEN, 128)),
    ("deepstack_merger_list.0.linear_fc1.weight", (128, 128)),
)

# Mistral 3's (and LLaVA's) vision tower and multimodal projector.
_PIXTRAL_TOWER = (
    ("vision_tower.patch_conv.weight", (32, 3, 4, 4)),
    ("vision_tower.ln_pre.weight", (32,)),
    ("vision_tower.transformer.layers.0.attention.q_proj.weight", (32, 32)),
    ("vision_tower.transformer.layers.0.feed_forward.gate_proj.weight", (64, 32)),
    ("multi_modal_projector.norm.weight", (32,)),
    ("multi_modal_projector.patch_merger.merging_layer.weight", (32, 128)),
    ("multi_modal_projector.linear_1.weight", (HIDDEN, 32)),
    ("multi_modal_projector.linear_2.weight", (HIDDEN, HIDDEN)),
)


def _towers(prefix: str, tower) -> Tuple[Tuple[str, Tuple[int, ...]], ...]:
    return tuple((prefix + name, shape) for name, shape in tower)


# Hugging Face's newer layout: the text model under model.language_model.,
# the head at the top.
_HF_NESTED = (("language_model.model.", "model.language_model."), ("language_model.lm_head.", "lm_head."))
# Qwen2-VL's first layout: the text model bare.
_HF_BARE = (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."))


def _qwen_vl_vision(model_type: str) -> Dict[str, Any]:
    return {
        "model_type": model_type,
        "depth": 1,
        "embed_dim": 32,
        "hidden_size": HIDDEN,
        "num_heads": 2,
        "patch_size": 2,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }


def _qwen2_vl_cases() -> List[Case]:
    def flat(model_type, arch_name, **over):
        cfg = _llama_like(model_type, arch_name, rope_theta=1000000.0, rms_norm_eps=1e-6)
        cfg.update(
            vision_config=_qwen_vl_vision(model_type),
            vision_start_token_id=5,
            vision_end_token_id=6,
            image_token_id=7,
            video_token_id=8,
            use_sliding_window=False,
            sliding_window=4096,
            max_window_layers=2,
        )
        cfg.update(over)
        return cfg

    nested_text = _llama_like("qwen2_vl_text", "Qwen2VLForConditionalGeneration", rope_theta=1000000.0)
    del nested_text["architectures"], nested_text["torch_dtype"]
    nested_text.update(
        num_key_value_heads=4,
        tie_word_embeddings=True,
        rope_scaling={"mrope_section": [2, 3, 3], "rope_type": "default", "type": "default"},
    )
    nested = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "text_config": nested_text,
        "vision_config": _qwen_vl_vision("qwen2_vl"),
        "image_token_id": 7,
        "video_token_id": 8,
        # top-level keys that are not the text model's: mlx-lm reads
        # text_config alone
        "tie_word_embeddings": False,
        "vocab_size": 1000,
        "torch_dtype": "float32",
    }

    return [
        Case(
            "qwen2_vl",
            "flat_mrope",
            "the text keys at the top level beside vision_config, rope_scaling "
            "mrope (sections 2/3/3: the plain rope for text), GQA, untied head, "
            "rms_norm_eps 1e-5; "
            "bare tensors (model.layers, lm_head) beside visual.* dropped",
            flat(
                "qwen2_vl",
                "Qwen2VLForConditionalGeneration",
                tie_word_embeddings=False,
                rms_norm_eps=1e-5,
                rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
            ),
            layout=Layout(_HF_BARE, _towers("visual.", _QWEN2_VL_TOWER)),
        ),
        Case(
            "qwen2_vl",
            "text_config_tied",
            "text_config read alone (the top level's tie_word_embeddings false "
            "and vocab_size are not), tied head, plain multi-head, mrope as "
            "rope_type default; model.language_model.* beside model.visual.* dropped",
            nested,
            layout=Layout(_HF_NESTED, _towers("model.visual.", _QWEN2_VL_TOWER)),
        ),
        Case(
            "qwen2_5_vl",
            "base",
            "Qwen2.5-VL (an alias of qwen2_vl): flat config, mrope 2/3/3, GQA, "
            "tied head; model.language_model.* beside model.visual.* dropped",
            flat(
                "qwen2_5_vl",
                "Qwen2_5_VLForConditionalGeneration",
                tie_word_embeddings=True,
                rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
            ),
            layout=Layout(_HF_NESTED, _towers("model.visual.", _QWEN2_VL_TOWER)),
        ),
    ]


def _qwen3_vl_cases() -> List[Case]:
    def text(**over):
        cfg = _llama_like("qwen3_vl_text", "", rope_theta=5000000.0, rms_norm_eps=1e-6)
        del cfg["architectures"], cfg["torch_dtype"]
        cfg.update(attention_bias=False, head_dim=32, max_position_embeddings=262144)
        cfg.update(over)
        return cfg

    def qwen3_vl(text_config, **over):
        cfg = {
            "architectures": ["Qwen3VLForConditionalGeneration"],
            "model_type": "qwen3_vl",
            "text_config": text_config,
            "vision_config": dict(
                _qwen_vl_vision("qwen3_vl"), deepstack_visual_indexes=[0], out_hidden_size=HIDDEN
            ),
            "image_token_id": 7,
            "video_token_id": 8,
            "vision_start_token_id": 5,
            "vision_end_token_id": 6,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    mrope = {"mrope_interleaved": True, "mrope_section": [6, 5, 5], "rope_type": "default"}
    return [
        Case(
            "qwen3_vl",
            "base",
            "Qwen3 under text_config: q/k RMSNorm per head before the rope, "
            "head_dim 32 unlike hidden/heads 16, GQA, untied head, interleaved "
            "mrope (the plain rope for text), rope_theta 5e6; "
            "model.language_model.* beside model.visual.* dropped",
            qwen3_vl(
                text(tie_word_embeddings=False, rope_scaling=mrope),
                tie_word_embeddings=False,
            ),
            layout=Layout(_HF_NESTED, _towers("model.visual.", _QWEN3_VL_TOWER)),
        ),
        Case(
            "qwen3_vl",
            "tied_rope_parameters",
            "transformers 5's text_config: rope_theta (1e6) and the mrope in "
            "rope_parameters, no rope_theta key; tied head, plain multi-head; "
            "visual.* dropped from mlx-lm's language_model.* names",
            qwen3_vl(
                _without(
                    text(
                        num_key_value_heads=4,
                        tie_word_embeddings=True,
                        rope_parameters=dict(mrope, rope_theta=1000000.0),
                    ),
                    "rope_theta",
                ),
                tie_word_embeddings=True,
            ),
            layout=Layout((), _towers("visual.", _QWEN3_VL_TOWER)),
        ),
    ]


def _qwen3_vl_moe_cases() -> List[Case]:
    def text(**over):
        cfg = _llama_like("qwen3_vl_moe_text", "", rope_theta=5000000.0, rms_norm_eps=1e-6, num_hidden_layers=3)
        del cfg["architectures"], cfg["torch_dtype"]
        cfg.update(
            attention_bias=False,
            head_dim=32,
            max_position_embeddings=262144,
            num_experts=8,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            moe_intermediate_size=64,
            norm_topk_prob=True,
            tie_word_embeddings=False,
            rope_scaling={"mrope_interleaved": True, "mrope_section": [6, 5, 5], "rope_type": "default"},
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "qwen3_vl_moe",
            "base",
            "Qwen3-MoE under text_config: every layer sparse, top-2 of 8 renormalised, "
            "q/k norms, GQA, head_dim 32, untied; transformers' layout: "
            "model.language_model.* with each layer's experts stacked transposed "
            "(experts.gate_up_proj, experts.down_proj), model.visual.* dropped",
            {
                "architectures": ["Qwen3VLMoeForConditionalGeneration"],
                "model_type": "qwen3_vl_moe",
                "text_config": text(),
                "vision_config": dict(
                    _qwen_vl_vision("qwen3_vl_moe"), deepstack_visual_indexes=[0], out_hidden_size=HIDDEN
                ),
                "image_token_id": 7,
                "video_token_id": 8,
                "vision_start_token_id": 5,
                "vision_end_token_id": 6,
                "tie_word_embeddings": False,
                "torch_dtype": "float32",
            },
            layout=Layout(_HF_NESTED, _towers("model.visual.", _QWEN3_VL_TOWER), transposed_experts=True),
        ),
    ]


def _mistral3_cases() -> List[Case]:
    def text(model_type, **over):
        cfg = _llama_like(model_type, "", rope_theta=1000000000.0)
        del cfg["architectures"], cfg["torch_dtype"]
        cfg.update(over)
        return cfg

    def wrapper(model_type, arch_name, text_config):
        return {
            "architectures": [arch_name],
            "model_type": model_type,
            "image_token_index": 10,
            "projector_hidden_act": "gelu",
            "multimodal_projector_bias": False,
            "spatial_merge_size": 2,
            "vision_feature_layer": -1,
            "vision_config": {
                "model_type": "pixtral",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "patch_size": 4,
                "image_size": 16,
                "head_dim": 16,
                "rope_theta": 10000.0,
            },
            "text_config": text_config,
            "torch_dtype": "float32",
        }

    return [
        Case(
            "mistral3",
            "base",
            "text_config model_type mistral run as a llama: head_dim 32 unlike "
            "hidden/heads 16, GQA, sliding_window null, no tie_word_embeddings "
            "(an untied head); model.language_model.* and lm_head beside "
            "model.vision_tower.* and model.multi_modal_projector.* dropped",
            wrapper(
                "mistral3",
                "Mistral3ForConditionalGeneration",
                text("mistral", head_dim=32, sliding_window=None),
            ),
            layout=Layout(_HF_NESTED, _towers("model.", _PIXTRAL_TOWER)),
        ),
        Case(
            "mistral3",
            "tied_llama3",
            "text_config model_type llama with tie_word_embeddings true (kept), "
            "plain multi-head, rope_scaling llama3 (factor 8, original 32); "
            "language_model.* beside vision_tower.* and multi_modal_projector.* dropped",
            wrapper(
                "mistral3",
                "Mistral3ForConditionalGeneration",
                text(
                    "llama",
                    num_key_value_heads=4,
                    tie_word_embeddings=True,
                    rope_theta=500000.0,
                    rope_scaling={
                        "rope_type": "llama3",
                        "factor": 8.0,
                        "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 32,
                    },
                ),
            ),
            layout=Layout((), _towers("", _PIXTRAL_TOWER)),
        ),
        Case(
            "mistral3",
            "ministral3_text",
            "text_config model_type ministral3 dispatched to ministral3: "
            "rope_parameters yarn (factor 4, original 8) with rope_theta inside and "
            "llama_4_scaling_beta 0.5 (queries scaled by position), head_dim 32, "
            "GQA 4/2, untied head; model.language_model.* and lm_head beside "
            "model.vision_tower.* and model.multi_modal_projector.* dropped",
            wrapper(
                "mistral3",
                "Mistral3ForConditionalGeneration",
                {
                    **_without(text("ministral3", head_dim=32, tie_word_embeddings=False), "rope_theta"),
                    "rope_parameters": {
                        "type": "yarn",
                        "rope_type": "yarn",
                        "factor": 4.0,
                        "original_max_position_embeddings": 8,
                        "beta_fast": 32.0,
                        "beta_slow": 1.0,
                        "mscale": 1.0,
                        "mscale_all_dim": 1.0,
                        "llama_4_scaling_beta": 0.5,
                        "rope_theta": 1000000.0,
                    },
                },
            ),
            layout=Layout(_HF_NESTED, _towers("model.", _PIXTRAL_TOWER)),
        ),
        Case(
            "llava",
            "base",
            "LLaVA (an alias of mistral3): text_config model_type llama, "
            "tie_word_embeddings false, GQA, traditional rope off, rope_theta 1e4; "
            "language_model.* beside vision_tower.* and multi_modal_projector.* dropped",
            wrapper(
                "llava",
                "LlavaForConditionalGeneration",
                text("llama", tie_word_embeddings=False, rope_theta=10000.0),
            ),
            layout=Layout((), _towers("", _PIXTRAL_TOWER)),
        ),
    ]


def _gemma3_text_cases() -> List[Case]:
    def gemma3_text(**over):
        cfg = _llama_like("gemma3_text", "Gemma3ForCausalLM", **over)
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
        cfg["rms_norm_eps"] = 1e-6
        cfg["num_hidden_layers"] = 4
        cfg["sliding_window"] = SLIDING_WINDOW
        cfg["attn_logit_softcapping"] = None
        cfg["final_logit_softcapping"] = None
        del cfg["hidden_act"]
        cfg.update(over)
        return cfg

    return [
        Case(
            "gemma3_text",
            "base",
            f"every 2nd layer full (sliding_window_pattern 2), the others within "
            f"{SLIDING_WINDOW} on their own rope base (rope_local_base_freq 100); "
            "linear rope scaling (factor 4) on the full layers only; hidden 128, "
            "whose sqrt rounds in bfloat16; query_pre_attn_scalar 24, head_dim 32, "
            "GQA; an lm_head in the checkpoint (untied)",
            gemma3_text(
                hidden_size=128,
                head_dim=32,
                query_pre_attn_scalar=24,
                sliding_window_pattern=2,
                rope_local_base_freq=100.0,
                rope_theta=1000000.0,
                rope_scaling={"rope_type": "linear", "factor": 4.0},
            ),
        ),
        Case(
            "gemma3_text",
            "tied_llama3",
            "no lm_head in the checkpoint (the head is tied); sliding_window_pattern "
            "3 (layer 2 full, 0, 1 and 3 sliding); llama3 rope scaling on the full "
            "layer; head_dim 16, plain multi-head",
            gemma3_text(
                head_dim=16,
                num_key_value_heads=4,
                query_pre_attn_scalar=16,
                sliding_window_pattern=3,
                rope_local_base_freq=10000.0,
                rope_theta=500000.0,
                rope_scaling={
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                },
            ),
            without=["lm_head"],
        ),
    ]


def _gemma3_cases() -> List[Case]:
    def gemma3(text_config, **over):
        cfg = {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "boi_token_index": 3,
            "eoi_token_index": 4,
            "image_token_index": 5,
            "mm_tokens_per_image": 16,
            "vision_config": {
                "model_type": "siglip_vision_model",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "patch_size": 14,
                "image_size": 28,
            },
            "text_config": text_config,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    def text(**over):
        cfg = {
            "model_type": "gemma3_text",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "rms_norm_eps": 1e-6,
            "vocab_size": VOCAB,
            "sliding_window": SLIDING_WINDOW,
            "sliding_window_pattern": 2,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "gemma3",
            "tied_default_heads",
            "a gemma3_text under language_model. read from text_config, which "
            "has no num_attention_heads or num_key_value_heads (8 and 4 heads, "
            "GQA); the top level's vocab_size; no language_model.lm_head, so "
            f"the head is tied; every 2nd layer full, the others within {SLIDING_WINDOW}",
            gemma3(text(), vocab_size=VOCAB),
            without=["language_model.lm_head"],
        ),
        Case(
            "gemma3",
            "untied",
            "a language_model.lm_head in the checkpoint (untied); 4 heads, 1 KV "
            "head; rope_local_base_freq 500 on the sliding layers, sliding_window_pattern 3",
            gemma3(
                text(
                    num_attention_heads=4,
                    num_key_value_heads=1,
                    head_dim=32,
                    query_pre_attn_scalar=32,
                    sliding_window_pattern=3,
                    rope_local_base_freq=500.0,
                ),
                vocab_size=VOCAB,
            ),
        ),
    ]


def _olmo3_cases() -> List[Case]:
    def olmo3(**over):
        cfg = _llama_like("olmo3", "Olmo3ForCausalLM", **over)
        cfg["rms_norm_eps"] = 1e-6
        cfg["num_hidden_layers"] = 4
        cfg["sliding_window"] = SLIDING_WINDOW
        cfg["rope_theta"] = 500000.0
        cfg["pad_token_id"] = 0
        cfg.update(over)
        return cfg

    return [
        Case(
            "olmo3",
            "default_layers",
            "no layer_types: layers 0-2 within a window of "
            f"{SLIDING_WINDOW} on the unscaled rope, layer 3 full with yarn "
            "scaling (factor 4); full-width q and k norms over GQA heads; untied",
            olmo3(
                rope_scaling={
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 64,
                    "attention_factor": 1.0,
                },
            ),
        ),
        Case(
            "olmo3",
            "layer_types_bias_tied",
            "layer_types full, sliding, full, sliding; linear rope scaling "
            "(factor 2) on the full layers only; attention_bias true; head_dim "
            "32 (no head_dim key: hidden // heads with 2 heads), plain "
            "multi-head (num_key_value_heads absent); tied head",
            _without(
                olmo3(
                    num_attention_heads=2,
                    attention_bias=True,
                    tie_word_embeddings=True,
                    layer_types=[
                        "full_attention",
                        "sliding_attention",
                        "full_attention",
                        "sliding_attention",
                    ],
                    rope_scaling={"rope_type": "linear", "factor": 2.0},
                ),
                "num_key_value_heads",
            ),
        ),
    ]


def _exaone4_cases() -> List[Case]:
    def exaone4(**over):
        cfg = _llama_like("exaone4", "Exaone4ForCausalLM")
        cfg.update(
            {
                "num_hidden_layers": 4,
                "head_dim": 32,
                "tie_word_embeddings": False,
                "rope_scaling": None,
                "sliding_window": SLIDING_WINDOW,
                "sliding_window_pattern": "LLLG",
                "attention_dropout": 0.0,
                "initializer_range": 0.02,
            }
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "exaone4",
            "lllg_llama3",
            'sliding_window_pattern "LLLG": layers 0-2 within a window of '
            f"{SLIDING_WINDOW} with rotary positions (llama3 scaling), layer 3 "
            "full without positions (NoPE); per-head q and k norms before the "
            "rope; head_dim 32, GQA; untied",
            exaone4(
                rope_theta=500000.0,
                rope_scaling={
                    "rope_type": "llama3",
                    "factor": 16.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                },
            ),
        ),
        Case(
            "exaone4",
            "lg_cyclic_tied",
            'sliding_window_pattern "LG", read cyclically over 4 layers (L, G, '
            "L, G); linear rope scaling (factor 2); head_dim 16, plain "
            "multi-head; tied head",
            exaone4(
                head_dim=16,
                num_key_value_heads=4,
                tie_word_embeddings=True,
                sliding_window_pattern="LG",
                rope_scaling={"rope_type": "linear", "factor": 2.0},
            ),
        ),
        Case(
            "exaone4",
            "no_pattern",
            "sliding_window_pattern and sliding_window null: every layer full "
            "with rotary positions; 2 layers, untied, GQA",
            exaone4(
                num_hidden_layers=2,
                sliding_window=None,
                sliding_window_pattern=None,
            ),
        ),
    ]


def _llama4_text_cases() -> List[Case]:
    def llama4_text(**over):
        cfg = _llama_like("llama4_text", "Llama4ForCausalLM")
        cfg.update(
            {
                "num_hidden_layers": 4,
                "head_dim": 32,
                "intermediate_size": 32,
                "intermediate_size_mlp": 128,
                "rope_theta": 500000.0,
                "tie_word_embeddings": False,
                "no_rope_layers": [1, 1, 1, 0],
                "use_qk_norm": True,
                "attention_chunk_size": 8192,
                "num_local_experts": 1,
                "num_experts_per_tok": 1,
                "interleave_moe_layer_step": 0,
            }
        )
        cfg.update(over)
        return cfg

    # mlx-lm's tied head multiplies by the embedding table's weight, which a
    # quantized level stores packed: every case is untied so that all seven
    # levels run.
    return [
        Case(
            "llama4_text",
            "nope_qk_norm",
            "no_rope_layers 1, 1, 1, 0: interleaved rotary positions on layers "
            "0-2, none on layer 3; use_qk_norm true (weightless per-head q and k "
            "norms); the MLP of intermediate_size_mlp 128, not intermediate_size "
            "32; head_dim 32, GQA; the head is output",
            llama4_text(),
        ),
        Case(
            "llama4_text",
            "no_qk_norm",
            "use_qk_norm false; no_rope_layers 0, 1 (layer 0 NoPE); head_dim 16, "
            "plain multi-head",
            llama4_text(
                num_hidden_layers=2,
                head_dim=16,
                num_key_value_heads=4,
                no_rope_layers=[0, 1],
                use_qk_norm=False,
            ),
        ),
    ]


def _moe_cases() -> List[Case]:
    """The mixtures of experts: 8 experts, 2 per token, expert width 64;
    dense and sparse layers mixed where the arch allows it."""

    def qwen3_moe(**over):
        cfg = _llama_like("qwen3_moe", "Qwen3MoeForCausalLM", num_hidden_layers=4)
        cfg.update(
            head_dim=32,
            rope_theta=1000000.0,
            tie_word_embeddings=False,
            attention_bias=False,
            num_experts=8,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            moe_intermediate_size=64,
            norm_topk_prob=True,
            router_aux_loss_coef=0.001,
            output_router_logits=False,
        )
        cfg.update(over)
        return cfg

    def mixtral(**over):
        cfg = _llama_like("mixtral", "MixtralForCausalLM", intermediate_size=64)
        cfg.update(
            rope_theta=1000000.0,
            tie_word_embeddings=False,
            num_local_experts=8,
            num_experts_per_tok=2,
            sliding_window=None,
            router_aux_loss_coef=0.02,
            output_router_logits=False,
        )
        cfg.update(over)
        return cfg

    def olmoe(**over):
        cfg = _llama_like("olmoe", "OlmoeForCausalLM", intermediate_size=64)
        cfg.update(
            tie_word_embeddings=False,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            attention_bias=False,
            mlp_bias=False,
            clip_qkv=None,
            router_aux_loss_coef=0.01,
            output_router_logits=False,
        )
        cfg.update(over)
        return cfg

    def qwen2_moe(**over):
        cfg = _llama_like("qwen2_moe", "Qwen2MoeForCausalLM", rope_theta=1000000.0)
        cfg.update(
            tie_word_embeddings=False,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=128,
            decoder_sparse_step=1,
            norm_topk_prob=False,
            mlp_only_layers=[],
            router_aux_loss_coef=0.001,
            output_router_logits=False,
            use_sliding_window=False,
            sliding_window=32768,
            max_window_layers=21,
        )
        cfg.update(over)
        return cfg

    def granitemoe(**over):
        cfg = _llama_like("granitemoe", "GraniteMoeForCausalLM", intermediate_size=64)
        cfg.update(
            logits_scaling=4.0,
            attention_multiplier=0.0625,
            embedding_multiplier=6.0,
            residual_multiplier=0.5,
            attention_bias=False,
            tie_word_embeddings=True,
            num_local_experts=8,
            num_experts_per_tok=2,
            router_aux_loss_coef=0.01,
            output_router_logits=False,
        )
        cfg.update(over)
        return cfg

    def deepseek(**over):
        cfg = _llama_like("deepseek", "DeepseekForCausalLM", num_hidden_layers=4)
        cfg.update(
            moe_intermediate_size=64,
            n_routed_experts=8,
            n_shared_experts=2,
            num_experts_per_tok=2,
            first_k_dense_replace=1,
            moe_layer_freq=1,
            attention_bias=False,
            scoring_func="softmax",
            topk_method="greedy",
            norm_topk_prob=False,
            aux_loss_alpha=0.001,
            seq_aux=True,
        )
        cfg.update(over)
        return cfg

    def dots1(**over):
        cfg = _llama_like("dots1", "Dots1ForCausalLM", num_hidden_layers=3)
        cfg.update(
            head_dim=32,
            rope_theta=10000000.0,
            tie_word_embeddings=False,
            first_k_dense_replace=1,
            moe_intermediate_size=64,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            n_group=1,
            topk_group=1,
            scoring_func="noaux_tc",
            attention_bias=False,
            mlp_bias=False,
        )
        cfg.update(over)
        return cfg

    def ernie4_5_moe(**over):
        cfg = _llama_like("ernie4_5_moe", "Ernie4_5_MoeForCausalLM", num_hidden_layers=3)
        cfg.update(
            head_dim=32,
            rope_theta=500000.0,
            use_bias=False,
            tie_word_embeddings=True,
            moe_num_experts=8,
            moe_layer_start_index=1,
            moe_layer_end_index=2,
            moe_intermediate_size=64,
            moe_capacity=[8, 8, 8],
            moe_k=2,
            moe_layer_interval=1,
            moe_use_aux_free=True,
            moe_num_shared_experts=2,
            moe_gate_act="softmax",
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "dots1",
            "base",
            "layer 0 dense, layers 1-2 sparse: sigmoid router with a correction "
            "bias, top-2 of 8 renormalised, times 2.5, one shared expert, q/k norms",
            dots1(),
        ),
        Case(
            "dots1",
            "groups_top4",
            "4 groups, the best 2 kept (group-limited), top-4 (mlx-lm's sorted "
            "path) not renormalised, plain multi-head, tied head",
            dots1(
                n_group=4,
                topk_group=2,
                num_experts_per_tok=4,
                norm_topk_prob=False,
                num_key_value_heads=4,
                tie_word_embeddings=True,
            ),
        ),
        Case(
            "ernie4_5_moe",
            "tied_softmax",
            "layer 0 dense, layers 1-2 sparse: a float32 softmax router, top-2 of 8 "
            "divided by their sum, two shared experts, tied head",
            ernie4_5_moe(),
        ),
        Case(
            "ernie4_5_moe",
            "sigmoid_bias_top4",
            "a sigmoid router (moe_gate_act), top-4 (mlx-lm's sorted path), every "
            "projection and expert with biases, untied head, default expert size",
            {k: v for k, v in ernie4_5_moe(
                moe_gate_act="sigmoid",
                moe_k=4,
                use_bias=True,
                tie_word_embeddings=False,
                moe_num_shared_experts=0,
                moe_layer_start_index=0,
            ).items() if k not in ("moe_intermediate_size", "moe_layer_end_index")},
        ),
        Case(
            "qwen2_moe",
            "base",
            "every layer sparse, top-2 of 8 not renormalised, a shared expert behind "
            "a sigmoid gate, q/k/v biases, GQA, untied",
            qwen2_moe(),
        ),
        Case(
            "qwen2_moe",
            "top4_mha_tied",
            "top-4 of 8 (mlx-lm's sorted path), plain multi-head, "
            "tie_word_embeddings true (read, not used: the head stays untied)",
            qwen2_moe(num_experts_per_tok=4, num_key_value_heads=4, tie_word_embeddings=True),
        ),
        Case(
            "granitemoe",
            "base",
            "router.layer: top-2 of 8 logits, softmax in float32, the sum cast back; "
            "granite's multipliers, tied head",
            granitemoe(),
        ),
        Case(
            "granitemoe",
            "top4_untied_biased",
            "top-4 of 8 (mlx-lm's sorted path), attention biases, untied head, a "
            "linear rope scaling",
            granitemoe(
                num_experts_per_tok=4,
                attention_bias=True,
                tie_word_embeddings=False,
                rope_scaling={"type": "linear", "factor": 2.0},
            ),
        ),
        Case(
            "deepseek",
            "base",
            "layer 0 dense (first_k_dense_replace 1), layers 1-3 sparse: top-2 of 8 "
            "by a bare-weight router, two shared experts, GQA",
            deepseek(),
        ),
        Case(
            "deepseek",
            "freq2_noshared",
            "moe_layer_freq 2 (layers 0 and 2 sparse), no shared experts, top-4 "
            "(mlx-lm's sorted path), plain multi-head, attention biases",
            {k: v for k, v in deepseek(
                first_k_dense_replace=0,
                moe_layer_freq=2,
                num_experts_per_tok=4,
                num_key_value_heads=4,
                attention_bias=True,
            ).items() if k != "n_shared_experts"},
        ),
        Case(
            "mixtral",
            "base",
            "every layer sparse, top-2 of 8 logits then softmax, GQA, untied",
            mixtral(),
        ),
        Case(
            "mixtral",
            "top4_mha_trad",
            "top-4 of 8 (80 routed rows in prefill: mlx-lm's sorted path), plain "
            "multi-head, interleaved rope, tied head",
            mixtral(
                num_experts_per_tok=4,
                num_key_value_heads=4,
                rope_traditional=True,
                tie_word_embeddings=True,
            ),
        ),
        Case(
            "olmoe",
            "base",
            "q and k normed over their full width, top-2 of 8 not renormalised, GQA, untied",
            olmoe(),
        ),
        Case(
            "olmoe",
            "bias_renorm_tied",
            "expert and attention biases, top-2 renormalised, tied head",
            olmoe(norm_topk_prob=True, mlp_bias=True, attention_bias=True, tie_word_embeddings=True),
        ),
        Case(
            "qwen3_moe",
            "base",
            "layers 0, 2, 3 sparse (layer 1 in mlp_only_layers, dense), top-2 of 8 "
            "renormalised, GQA, head_dim 32, untied",
            qwen3_moe(),
        ),
        Case(
            "qwen3_moe",
            "step2_tied",
            "decoder_sparse_step 2 (layers 1 and 3 sparse), top-4 of 8 not "
            "renormalised (80 routed rows in prefill: mlx-lm's sorted path), "
            "plain multi-head, tied head",
            qwen3_moe(
                decoder_sparse_step=2,
                mlp_only_layers=[],
                num_experts_per_tok=4,
                norm_topk_prob=False,
                num_key_value_heads=4,
                tie_word_embeddings=True,
            ),
        ),
    ]


def _glm4_moe_minimax_cases() -> List[Case]:
    """GLM-4.5's, Solar Open's and MiniMax-M2's mixtures of experts: sigmoid
    routers with a correction bias; 8 experts, dense and sparse layers mixed
    in glm4_moe and solar_open (minimax's layers are all sparse)."""

    def glm4_moe(**over):
        cfg = _llama_like("glm4_moe", "Glm4MoeForCausalLM", num_hidden_layers=3)
        cfg.update(
            head_dim=32,
            rope_theta=1000000.0,
            rope_scaling=None,
            partial_rotary_factor=0.5,
            attention_bias=True,
            use_qk_norm=True,
            tie_word_embeddings=False,
            first_k_dense_replace=1,
            moe_intermediate_size=64,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            n_group=1,
            topk_group=1,
            num_nextn_predict_layers=1,
            pad_token_id=0,
        )
        cfg.update(over)
        return cfg

    def solar_open(**over):
        cfg = glm4_moe(model_type="solar_open", architectures=["SolarOpenForCausalLM"])
        for k in ("attention_bias", "use_qk_norm", "n_group", "topk_group", "num_nextn_predict_layers"):
            del cfg[k]
        cfg.update(over)
        return cfg

    def minimax(model_type="minimax", **over):
        cfg = _llama_like(model_type, "MiniMaxM2ForCausalLM", intermediate_size=64)
        cfg.update(
            head_dim=32,
            rotary_dim=16,
            rope_theta=5000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            num_local_experts=8,
            num_experts_per_tok=2,
            shared_intermediate_size=0,
            scoring_func="sigmoid",
            use_qk_norm=True,
            use_routing_bias=True,
            qk_norm_type="per_layer",
            output_router_logits=False,
            router_aux_loss_coef=0.001,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "glm4_moe",
            "base",
            "layer 0 dense, layers 1-2 sparse: a sigmoid router with a correction bias, "
            "top-2 of 8 renormalised, times 2.5, one shared expert; q/k head norms, "
            "q/k/v biases, rope over half of head_dim 32, GQA, untied",
            glm4_moe(),
        ),
        Case(
            "glm4_moe",
            "groups_top4",
            "every layer sparse: 4 groups, the best 2 kept, top-4 (mlx-lm's sorted "
            "path) not renormalised, no shared experts (null), no q/k norms, no "
            "biases, rope over a quarter of head_dim 16, plain multi-head, "
            "tie_word_embeddings true (read, not used)",
            glm4_moe(
                first_k_dense_replace=0,
                n_group=4,
                topk_group=2,
                num_experts_per_tok=4,
                norm_topk_prob=False,
                routed_scaling_factor=1.0,
                n_shared_experts=None,
                use_qk_norm=False,
                attention_bias=False,
                head_dim=16,
                partial_rotary_factor=0.25,
                num_key_value_heads=4,
                tie_word_embeddings=True,
            ),
        ),
        Case(
            "solar_open",
            "base",
            "glm4_moe's network under solar_open's keys, their defaults taken: no "
            "q/k/v biases, no q/k norms, one group; layer 0 dense, layers 1-2 top-2 "
            "of 8 renormalised, times 2.5, one shared expert",
            solar_open(),
        ),
        Case(
            "minimax",
            "base",
            "every layer sparse: a sigmoid router on float32 input with a correction "
            "bias, top-2 of 8 renormalised; q and k normed over their full width, "
            "rope over 16 of head_dim 32, GQA, untied",
            minimax(),
        ),
        Case(
            "minimax",
            "top4_tied_noqk",
            "top-4 of 8 (mlx-lm's sorted path), use_qk_norm false, no head_dim "
            "(hidden/heads 16), rope over 8, plain multi-head, tied head",
            {k: v for k, v in minimax(
                num_experts_per_tok=4,
                use_qk_norm=False,
                rotary_dim=8,
                num_key_value_heads=4,
                tie_word_embeddings=True,
            ).items() if k != "head_dim"},
        ),
        Case(
            "minimax_m2",
            "base",
            "model_type minimax_m2 (mlx-lm's alias of minimax): top-2 of 8, full-width "
            "q/k norms, rope over 32 of head_dim 64, GQA 4/1, untied",
            minimax("minimax_m2", head_dim=64, rotary_dim=32, num_key_value_heads=1),
        ),
    ]


def _gptj_cases() -> List[Case]:
    """GPT-J: parallel layers under one LayerNorm, an interleaved rope over
    the first rotary_dim features of each head, a 4h gelu_tanh MLP with
    biases, an untied head with a bias; Hugging Face's names (transformer.,
    the attention's mask buffers) on the float32 level of the first case."""

    def gptj(**over):
        cfg = {
            "activation_function": "gelu_new",
            "architectures": ["GPTJForCausalLM"],
            "attn_pdrop": 0.0,
            "bos_token_id": 1,
            "embd_pdrop": 0.0,
            "eos_token_id": 2,
            "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05,
            "model_type": "gptj",
            "n_embd": HIDDEN,
            "n_head": 4,
            "n_inner": None,
            "n_layer": 2,
            "n_positions": 2048,
            "resid_pdrop": 0.0,
            "rotary": True,
            "rotary_dim": 8,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "use_cache": True,
            "vocab_size": VOCAB,
        }
        cfg.update(over)
        return cfg

    hf = Layout(
        (("model.", "transformer."),),
        tuple((f"transformer.h.{i}.attn.{name}", shape) for i in range(2)
              for name, shape in (("bias", (1, 1, 8, 8)), ("masked_bias", (1,)))),
    )
    return [
        Case(
            "gptj",
            "base",
            "parallel block under ln_1, interleaved rope over 8 of head_dim 16, "
            "no attention biases, a 4h gelu_tanh MLP with biases, lm_head bias; "
            "the float32 level in Hugging Face's names (transformer., the "
            "attention's bias and masked_bias buffers, dropped)",
            gptj(),
            layout=hf,
        ),
        Case(
            "gptj",
            "whole_head_rope",
            "rotary_dim 0 (the whole head turns), n_inner set and ignored (the "
            "MLP is 4h), layer_norm_epsilon 1e-6, 8 heads of 8",
            gptj(rotary_dim=0, n_inner=96, layer_norm_epsilon=1e-6, n_head=8),
        ),
    ]


def _minicpm_cases() -> List[Case]:
    """MiniCPM: Llama with muP's scalings (embeddings, residual branches,
    the untied head's input); a checkpoint without lm_head takes the
    embedding table for it, as mlx-lm's sanitize copies it."""

    def minicpm(**over):
        cfg = _llama_like("minicpm", "MiniCPMForCausalLM")
        cfg.update(
            dim_model_base=24,
            scale_depth=1.4,
            scale_emb=12,
            rope_theta=10000.0,
            tie_word_embeddings=False,
            initializer_range=0.1,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "minicpm",
            "base",
            "embeddings times 12, residual branches times 1.4 / sqrt(2), the head's "
            "input divided by 64 / 24 (not a power of two, so that dividing the logits instead would round differently), GQA, untied",
            minicpm(),
        ),
        Case(
            "minicpm",
            "no_head_weight",
            "no lm_head in the checkpoint (the embedding table copied in, still "
            "divided), scale_emb 2.5, scale_depth 0.7, dim_model_base 40, plain "
            "multi-head, rope_theta absent (mlx-lm's 1e6), rope_scaling linear",
            _without(minicpm(scale_emb=2.5, scale_depth=0.7, dim_model_base=40, num_key_value_heads=4,
                             rope_scaling={"type": "linear", "factor": 2.0}), "rope_theta"),
            without=["lm_head"],
        ),
    ]


def _minicpm3_cases() -> List[Case]:
    """MiniCPM3: MiniCPM's muP scalings around DeepSeek-V2's expanded latent
    attention, its shared key and queries turned by Phi-3's SuScaledRoPE."""

    def minicpm3(**over):
        cfg = _llama_like("minicpm3", "MiniCPM3ForCausalLM", num_key_value_heads=4)
        cfg.update(
            dim_model_base=24,
            scale_depth=1.4,
            scale_emb=12,
            rope_theta=10000.0,
            tie_word_embeddings=False,
            initializer_range=0.1,
            q_lora_rank=48,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            max_position_embeddings=32768,
            rope_scaling={
                "type": "longrope",
                "original_max_position_embeddings": 4096,
                "short_factor": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7],
                "long_factor": [1.0, 1.4, 2.1, 3.3, 5.2, 8.0, 11.5, 14.9],
            },
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "minicpm3",
            "base",
            "q rank 48, a latent of 32 over 4 heads (nope 16, rope 16, values 64 / 4), "
            "longrope's long factors over 32768 of 4096 positions (its mscale), "
            "embeddings times 12, residual branches times 1.4 / sqrt(2), the head's "
            "input divided by 64 / 24, untied; rms_norm_eps 1e-6 (the latent's and "
            "queries' norms keep 1e-5)",
            minicpm3(rms_norm_eps=1e-6),
        ),
        Case(
            "minicpm3",
            "tied_su",
            "tied embeddings (no division), an su rope_scaling without "
            "original_max_position_embeddings (4096 taken) over 8192 positions, "
            "biases on q_a/kv_a/o",
            minicpm3(
                tie_word_embeddings=True,
                attention_bias=True,
                max_position_embeddings=8192,
                rope_scaling={"type": "su", "short_factor": [1.0] * 8,
                              "long_factor": [1.0, 1.2, 1.4, 1.8, 2.2, 2.8, 3.4, 4.0]},
            ),
        ),
    ]


def _qwen_cases() -> List[Case]:
    """The first Qwen: one c_attn projection for q, k and v (with a bias),
    a SwiGLU of intermediate_size // 2 with gate w2 and up w1, RMSNorm, the
    stack under transformer; no_bias switches the other biases."""

    def qwen(**over):
        cfg = {
            "architectures": ["QWenLMHeadModel"],
            "attn_dropout_prob": 0.0,
            "auto_map": {"AutoConfig": "configuration_qwen.QWenConfig",
                         "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel"},
            "bf16": False,
            "emb_dropout_prob": 0.0,
            "fp16": False,
            "fp32": False,
            "hidden_size": HIDDEN,
            "intermediate_size": 256,
            "initializer_range": 0.02,
            "kv_channels": 16,
            "layer_norm_epsilon": 1e-06,
            "max_position_embeddings": 2048,
            "model_type": "qwen",
            "no_bias": True,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "onnx_safe": None,
            "rotary_emb_base": 10000,
            "rotary_pct": 1.0,
            "scale_attn_weights": True,
            "seq_length": 2048,
            "tie_word_embeddings": False,
            "tokenizer_class": "QWenTokenizer",
            "torch_dtype": "float32",
            "use_cache": True,
            "use_dynamic_ntk": True,
            "use_flash_attn": "auto",
            "use_logn_attn": True,
            "vocab_size": VOCAB,
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "qwen",
            "base",
            "no_bias true: biases on c_attn alone; 4 heads of 16, a SwiGLU of 128 "
            "(gate w2, up w1), untied head without a bias; rotary_emb_base, "
            "use_dynamic_ntk and use_logn_attn read by no one",
            qwen(),
        ),
        Case(
            "qwen",
            "biases",
            "no_bias false: biases on c_proj, w1, w2, the MLP's c_proj and the "
            "head too; 8 heads of 8, layer_norm_epsilon 1e-5, rotary_emb_base 1e6 "
            "(not read: the rope's base stays 10000)",
            qwen(no_bias=False, num_attention_heads=8, kv_channels=8, layer_norm_epsilon=1e-5,
                 rotary_emb_base=1000000),
        ),
    ]


def _lille_cases() -> List[Case]:
    """Lille 130M: norms inside the sublayers, one qkv_proj for grouped
    heads, an interleaved rope, an MLP of 256 * round(8h/3/256), the head
    always the embedding table; the rope's cached frequencies dropped."""

    def lille(**over):
        cfg = {
            "architectures": ["Lille130M"],
            "model_type": "lille-130m",
            "block_size": 256,
            "layer_norm_eps": 1e-5,
            "n_embd": HIDDEN,
            "n_head": 4,
            "n_kv_heads": 2,
            "n_layer": 2,
            "rope_theta": 10000,
            "vocab_size": VOCAB,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "lille-130m",
            "base",
            "4 query heads over 2 kv heads from one qkv_proj, interleaved rope, an MLP "
            "of 256; the float32 level holds the attention's rotary_emb.inv_freq, dropped",
            lille(),
            layout=Layout((), tuple((f"transformer.layers.{i}.attention.rotary_emb.inv_freq", (8,))
                                    for i in range(2))),
        ),
        Case(
            "lille-130m",
            "mha_wide",
            "n_embd 128 in 4 heads of 32, one kv head each (n_kv_heads 4), an MLP of "
            "256 (round(341 / 256)), rope_theta 1e6, layer_norm_eps 1e-6, "
            "tie_word_embeddings false (read, not used: the head is the table)",
            lille(n_embd=128, n_kv_heads=4, rope_theta=1000000, layer_norm_eps=1e-6,
                  tie_word_embeddings=False),
        ),
    ]


def _gpt_bigcode_cases() -> List[Case]:
    """GPT-BigCode: GPT-2's layers with learned positions (wpe) and
    multi-query attention from one c_attn, no rope, the exact GELU."""

    def bigcode(**over):
        cfg = {
            "activation_function": "gelu_pytorch_tanh",
            "architectures": ["GPTBigCodeForCausalLM"],
            "attention_softmax_in_fp32": True,
            "attn_pdrop": 0.1,
            "bos_token_id": 1,
            "embd_pdrop": 0.1,
            "eos_token_id": 2,
            "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05,
            "model_type": "gpt_bigcode",
            "multi_query": True,
            "n_embd": HIDDEN,
            "n_head": 4,
            "n_inner": 128,
            "n_layer": 2,
            "n_positions": 64,
            "resid_pdrop": 0.1,
            "scale_attention_softmax_in_fp32": True,
            "scale_attn_weights": True,
            "torch_dtype": "float32",
            "use_cache": True,
            "vocab_size": VOCAB,
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "gpt_bigcode",
            "base",
            "multi-query (one key and value head for 4 queries), learned positions "
            "(64 rows), biases everywhere, the exact GELU over n_inner 128, tied head",
            bigcode(),
        ),
        Case(
            "gpt_bigcode",
            "mha_untied",
            "multi_query false (a key and value head per query head), "
            "num_key_value_heads 2 (read, not used), no attention or MLP biases, "
            "untied head, layer_norm_epsilon 1e-6",
            bigcode(multi_query=False, num_key_value_heads=2, attention_bias=False, mlp_bias=False,
                    tie_word_embeddings=False, layer_norm_epsilon=1e-6),
        ),
    ]


def _gpt2_cases() -> List[Case]:
    """GPT-2: pre-norm LayerNorm layers with learned positions, one c_attn
    for q, k and v, a 4h gelu_tanh MLP, the head always the table; the
    float32 level in Hugging Face's bare names with its Conv1D weights
    [in, out] and the attention's mask buffers."""

    def gpt2(**over):
        cfg = {
            "activation_function": "gelu_new",
            "architectures": ["GPT2LMHeadModel"],
            "attn_pdrop": 0.1,
            "bos_token_id": 1,
            "embd_pdrop": 0.1,
            "eos_token_id": 2,
            "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05,
            "model_type": "gpt2",
            "n_ctx": 64,
            "n_embd": HIDDEN,
            "n_head": 4,
            "n_layer": 2,
            "n_positions": 64,
            "resid_pdrop": 0.1,
            "summary_activation": None,
            "summary_first_dropout": 0.1,
            "summary_proj_to_labels": True,
            "summary_type": "cls_index",
            "summary_use_proj": True,
            "torch_dtype": "float32",
            "vocab_size": VOCAB,
        }
        cfg.update(over)
        return cfg

    bare = Layout(
        (("model.", ""),),
        tuple((f"h.{i}.attn.bias", (1, 1, 8, 8)) for i in range(2)),
        transposed=("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"),
    )
    return [
        Case(
            "gpt2",
            "base",
            "4 heads of 16 from one c_attn, learned positions (64 rows), a 4h gelu_tanh "
            "MLP, biases everywhere, the head the table; the float32 level in Hugging "
            "Face's bare names, Conv1D weights [in, out], the mask buffers (dropped)",
            gpt2(),
            layout=bare,
        ),
        Case(
            "gpt2",
            "saved_names",
            "mlx-lm's own names on every level (model.), 8 heads of 8, "
            "layer_norm_epsilon 1e-6, 48 positions",
            gpt2(n_head=8, layer_norm_epsilon=1e-6, n_positions=48, n_ctx=48),
        ),
    ]


def _gpt_neox_cases() -> List[Case]:
    """GPT-NeoX: parallel layers with a norm for each sublayer, one
    query_key_value laid out by head, a partial rope, a 4h gelu_tanh MLP, an
    untied embed_out; the float32 level in Hugging Face's names (gpt_neox.,
    its mask buffers and rope frequencies)."""

    def neox(**over):
        cfg = {
            "architectures": ["GPTNeoXForCausalLM"],
            "attention_bias": True,
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "classifier_dropout": 0.1,
            "eos_token_id": 2,
            "hidden_act": "gelu",
            "hidden_dropout": 0.0,
            "hidden_size": HIDDEN,
            "initializer_range": 0.02,
            "intermediate_size": 256,
            "layer_norm_eps": 1e-05,
            "max_position_embeddings": 2048,
            "model_type": "gpt_neox",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "rope_scaling": None,
            "rotary_emb_base": 10000,
            "rotary_pct": 0.25,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "use_cache": True,
            "use_parallel_residual": True,
            "vocab_size": VOCAB,
        }
        cfg.update(over)
        return cfg

    hf = Layout(
        (("model.h.", "gpt_neox.layers."), ("model.embed_out.", "embed_out."), ("model.", "gpt_neox.")),
        tuple((f"gpt_neox.layers.{i}.attention.{name}", shape) for i in range(2)
              for name, shape in (("bias", (1, 1, 8, 8)), ("masked_bias", (1,)), ("rotary_emb.inv_freq", (2,)))),
    )
    return [
        Case(
            "gpt_neox",
            "base",
            "4 heads of 16, q, k and v side by side in each head's part of "
            "query_key_value, rope over a quarter of the head, two norms in a "
            "parallel layer; the float32 level in Hugging Face's names with the "
            "mask buffers and rope frequencies, dropped",
            neox(),
            layout=hf,
        ),
        Case(
            "gpt_neox",
            "full_rope",
            "rotary_pct 1.0, rotary_emb_base 1e6, 8 heads of 8, layer_norm_eps 1e-6, "
            "intermediate_size not 4h (not read)",
            neox(rotary_pct=1.0, rotary_emb_base=1000000, num_attention_heads=8, layer_norm_eps=1e-6,
                 intermediate_size=96),
        ),
    ]


def _internlm2_cases() -> List[Case]:
    """InternLM2: Llama's layers under other names, one wqkv grouped by
    key-value head (its query heads, then its key, then its value)."""

    def internlm2(**over):
        cfg = _llama_like("internlm2", "InternLM2ForCausalLM")
        cfg.update(
            bias=True,
            rope_theta=1000000,
            tie_word_embeddings=False,
            auto_map={"AutoConfig": "configuration_internlm2.InternLM2Config",
                      "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"},
            attn_implementation="eager",
            pad_token_id=2,
            pretraining_tp=1,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "internlm2",
            "base",
            "4 query heads over 2 kv heads grouped in wqkv (each kv head's 2 query "
            "heads, then its key, then its value), biases on wqkv and wo, untied output",
            internlm2(),
        ),
        Case(
            "internlm2",
            "mha_tied_linear",
            "4 heads with a kv head each, no biases, tied head, rope_scaling linear 2, "
            "num_key_value_heads absent (num_attention_heads)",
            _without(internlm2(bias=False, tie_word_embeddings=True,
                               rope_scaling={"type": "linear", "factor": 2.0}), "num_key_value_heads"),
        ),
    ]


def _phi_cases() -> List[Case]:
    def phi(**over):
        cfg = {
            "architectures": ["PhiForCausalLM"],
            "model_type": "phi",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": None,
            "hidden_act": "gelu_new",
            "layer_norm_eps": 1e-5,
            "vocab_size": VOCAB,
            "max_position_embeddings": 2048,
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.4,
            "qk_layernorm": False,
            "rope_scaling": None,
            "resid_pdrop": 0.1,
            "embd_pdrop": 0.0,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "phi",
            "base",
            "parallel block (one LayerNorm feeds attention and MLP), partial rope "
            "0.4 (6 of 16 dims), biases everywhere, lm_head bias, gelu_tanh MLP, "
            "queries in float32, num_key_value_heads null (plain multi-head)",
            phi(),
        ),
        Case(
            "phi",
            "gqa_half_rope",
            "GQA 4/2, partial_rotary_factor 0.5, rope_theta 1e5, "
            "layer_norm_eps 1e-6, 4 layers",
            phi(
                num_key_value_heads=2,
                partial_rotary_factor=0.5,
                rope_theta=100000.0,
                layer_norm_eps=1e-6,
                num_hidden_layers=4,
            ),
        ),
    ]


def _cohere_cases() -> List[Case]:
    def cohere(**over):
        cfg = {
            "architectures": ["CohereForCausalLM"],
            "model_type": "cohere",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "hidden_act": "silu",
            "layer_norm_eps": 1e-5,
            "vocab_size": VOCAB,
            "max_position_embeddings": 8192,
            "rope_theta": 10000.0,
            "logit_scale": 0.25,
            "attention_bias": False,
            "use_qk_norm": False,
            "attention_dropout": 0.0,
            "bos_token_id": 5,
            "eos_token_id": 255001,
            "pad_token_id": 0,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "cohere",
            "base",
            "parallel block, LayerNorms without bias (layer_norm_bias absent), "
            "interleaved rope, tied head times logit_scale 0.25, GQA 4/2, no biases",
            cohere(),
        ),
        Case(
            "cohere",
            "qk_norm_bias",
            "use_qk_norm (each head its own LayerNorm weight), layer_norm_bias "
            "true, attention_bias true, plain multi-head, logit_scale absent "
            "(0.0625), rope_theta 8e6, layer_norm_eps 1e-6",
            _without(
                cohere(
                    num_key_value_heads=4,
                    use_qk_norm=True,
                    layer_norm_bias=True,
                    attention_bias=True,
                    rope_theta=8000000.0,
                    layer_norm_eps=1e-6,
                ),
                "logit_scale",
            ),
        ),
    ]


def _cohere2_cases() -> List[Case]:
    def cohere2(**over):
        cfg = {
            "architectures": ["Cohere2ForCausalLM"],
            "model_type": "cohere2",
            "hidden_size": HIDDEN,
            "head_dim": 16,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "hidden_act": "silu",
            "layer_norm_eps": 1e-5,
            "vocab_size": VOCAB,
            "max_position_embeddings": 8192,
            "rope_theta": 50000.0,
            "logit_scale": 0.25,
            "attention_bias": False,
            "sliding_window": SLIDING_WINDOW,
            "sliding_window_pattern": 4,
            "cache_implementation": "hybrid",
            "attention_dropout": 0.0,
            "bos_token_id": 5,
            "eos_token_id": 255001,
            "pad_token_id": 0,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "cohere2",
            "base",
            "parallel block, 4 layers with pattern 4 (3 sliding with rope, window "
            "6, then 1 full without rope), bias-free LayerNorms, tied head times "
            "logit_scale 0.25, interleaved rope, GQA 4/2",
            cohere2(),
        ),
        Case(
            "cohere2",
            "pattern2_bias",
            "sliding_window_pattern 2 (sliding, full, sliding, full), head_dim 32 "
            "with 2 heads, plain multi-head, layer_norm_bias and attention_bias "
            "true, logit_scale absent (0.0625), layer_norm_eps 1e-6",
            _without(
                cohere2(
                    sliding_window_pattern=2,
                    head_dim=32,
                    num_attention_heads=2,
                    num_key_value_heads=2,
                    layer_norm_bias=True,
                    attention_bias=True,
                    layer_norm_eps=1e-6,
                ),
                "logit_scale",
            ),
        ),
    ]


def _apertus_cases() -> List[Case]:
    def apertus(**over):
        cfg = _llama_like(
            "apertus",
            "ApertusForCausalLM",
            hidden_act="xielu",
            mlp_bias=False,
            attention_bias=False,
            post_norm=False,
            qk_norm=True,
            tie_word_embeddings=False,
            max_position_embeddings=4096,
            rope_theta=12000000.0,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "apertus",
            "base",
            "XieLU MLP with learned scalars and mlp_bias, per-head RMSNorm q/k "
            "norms, attention_layernorm/feedforward_layernorm names, GQA 4/2, "
            "untied head",
            apertus(mlp_bias=True),
        ),
        Case(
            "apertus",
            "tied_llama3",
            "tied head, rope_scaling llama3 (factor 8, original 256), no MLP "
            "bias, plain multi-head, rope_traditional true, rms_norm_eps 1e-6",
            apertus(
                num_key_value_heads=4,
                tie_word_embeddings=True,
                rope_traditional=True,
                rms_norm_eps=1e-6,
                rope_scaling={
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 256,
                },
            ),
        ),
    ]


def _ministral3_cases() -> List[Case]:
    def ministral3(rope=None, **over):
        cfg = _llama_like("ministral3", "Ministral3ForCausalLM", head_dim=32)
        del cfg["rope_theta"]
        cfg["rope_parameters"] = {
            "type": "yarn",
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 8,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.5,
            "rope_theta": 1000000.0,
            **(rope or {}),
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "ministral3",
            "base",
            "rope_parameters yarn (factor 4, original 8) with rope_theta inside, "
            "queries scaled by 1 + 0.5 log(1 + floor(p / 8)) (4 steps within the "
            "36 positions), head_dim 32, GQA 4/2, tied head (the default)",
            ministral3(),
        ),
        Case(
            "ministral3",
            "sliding_untied",
            "layer_types sliding/full with sliding_window 6, untied head, "
            "rope_parameters default type with llama_4_scaling_beta 0.25 and "
            "original 4, plain multi-head, head_dim absent (16)",
            _without(
                ministral3(
                    rope={"type": "default", "rope_type": "default", "factor": 1.0,
                          "llama_4_scaling_beta": 0.25,
                          "original_max_position_embeddings": 4},
                    num_key_value_heads=4,
                    tie_word_embeddings=False,
                    layer_types=["sliding_attention", "full_attention"],
                    sliding_window=SLIDING_WINDOW,
                ),
                "head_dim",
            ),
        ),
    ]


def _exaone_moe_cases() -> List[Case]:
    """EXAONE's mixture of experts: sliding and full layers (rope on the
    sliding ones only when any slides), q/k norms per head, is_moe_layer's
    dense and sparse layers, a sigmoid router with a correction bias."""

    def exaone_moe(**over):
        cfg = _llama_like("exaone_moe", "ExaoneMoEForCausalLM", num_hidden_layers=4)
        cfg.update(
            head_dim=32,
            rope_theta=1000000.0,
            rope_scaling=None,
            tie_word_embeddings=False,
            moe_intermediate_size=64,
            num_experts=8,
            num_experts_per_tok=2,
            num_shared_experts=1,
            n_group=1,
            topk_group=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            scoring_func="sigmoid",
            topk_method="noaux_tc",
            sliding_window=SLIDING_WINDOW,
            sliding_window_pattern="LLLG",
            layer_types=["sliding_attention"] * 3 + ["full_attention"],
            is_moe_layer=[False, True, True, True],
            first_last_k_dense_replace=1,
            pad_token_id=0,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "exaone_moe",
            "base",
            "layers 0-2 sliding with rope, layer 3 full without (NoPE); layer 0 "
            "dense, 1-3 sparse: sigmoid router with a correction bias, top-2 of 8 "
            "renormalised, times 2.5, one shared expert, q/k norms, GQA, untied",
            exaone_moe(),
        ),
        Case(
            "exaone_moe",
            "groups_top4_allrope",
            "no sliding layer (every layer rotates, linear rope scaling); layers 0 "
            "and 2 sparse: 4 groups, the best 2 kept, top-4 (mlx-lm's sorted "
            "path) not renormalised, times 1.5, two shared experts, plain "
            "multi-head, tied head",
            exaone_moe(
                layer_types=["full_attention"] * 4,
                sliding_window_pattern=None,
                is_moe_layer=[True, False, True, False],
                n_group=4,
                topk_group=2,
                num_experts_per_tok=4,
                norm_topk_prob=False,
                routed_scaling_factor=1.5,
                num_shared_experts=2,
                num_key_value_heads=4,
                tie_word_embeddings=True,
                rope_scaling={"rope_type": "linear", "factor": 2.0},
            ),
        ),
        Case(
            "exaone_moe",
            "noshared_global_first",
            "layer 0 full without rope, 1-3 sliding with it; every layer sparse, "
            "no shared experts (num_shared_experts null), defaults for n_group, "
            "topk_group, routed_scaling_factor and norm_topk_prob, rope base from "
            "rope_parameters",
            _without(
                exaone_moe(
                    layer_types=["full_attention"] + ["sliding_attention"] * 3,
                    is_moe_layer=[True] * 4,
                    num_shared_experts=None,
                    rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                ),
                "n_group",
                "topk_group",
                "routed_scaling_factor",
                "norm_topk_prob",
                "rope_theta",
            ),
        ),
    ]


def _phimoe_cases() -> List[Case]:
    """Phi-3.5-MoE: LayerNorms with bias, biased attention and head, every
    layer sparse with the sparsemixer router, su-scaled rope from
    long_factor with its long_mscale."""

    half = (HIDDEN // 4) // 2  # head_dim 16: 8 frequencies

    def phimoe(**over):
        cfg = _llama_like("phimoe", "PhiMoEForCausalLM", intermediate_size=64)
        cfg.update(
            max_position_embeddings=131072,
            original_max_position_embeddings=4096,
            num_local_experts=8,
            num_experts_per_tok=2,
            router_jitter_noise=0.01,
            input_jitter_noise=0.01,
            router_aux_loss_coef=0.0,
            output_router_logits=False,
            attention_bias=True,
            lm_head_bias=True,
            tie_word_embeddings=False,
            sliding_window=None,
            rope_scaling={
                "type": "longrope",
                "short_factor": [1.0 + 0.05 * i for i in range(half)],
                "long_factor": [1.0 + 0.4 * i for i in range(half)],
                "short_mscale": 1.243163121016122,
                "long_mscale": 1.243163121016122,
                "original_max_position_embeddings": 4096,
            },
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "phimoe",
            "base",
            "sparsemixer top-2 of 8 with the published jitter 0.01, longrope's "
            "long_factor with long_mscale, LayerNorms with bias, biased q/k/v/o "
            "and head, GQA",
            phimoe(),
        ),
        Case(
            "phimoe",
            "wide_band_top4",
            "jitter 0.25 (several logits in each round's softmax), top-4 of 8 "
            "(mlx-lm's sorted path), long_mscale null (the scale from 16384 / "
            "4096 positions), rope_theta 1e5, plain multi-head, 3 layers",
            phimoe(
                router_jitter_noise=0.25,
                num_experts_per_tok=4,
                num_key_value_heads=4,
                num_hidden_layers=3,
                rope_theta=100000.0,
                max_position_embeddings=16384,
                rope_scaling={
                    "type": "su",
                    "short_factor": [1.0] * half,
                    "long_factor": [1.0 + 0.25 * i for i in range(half)],
                    "short_mscale": None,
                    "long_mscale": None,
                },
            ),
        ),
        Case(
            "phimoe",
            "plain_rope_top3",
            "rope_scaling null (a plain rope), sparsemixer top-3 of 8 with "
            "jitter 0.1, rms_norm_eps 1e-6",
            phimoe(
                rope_scaling=None,
                num_experts_per_tok=3,
                router_jitter_noise=0.1,
                rms_norm_eps=1e-6,
            ),
        ),
    ]



def _gpt_oss_cases() -> List[Case]:
    """gpt-oss: attention sinks, sliding and full layers alternating, a
    biased router (top-k, then a softmax), clamped SwiGLU experts with
    biases; 8 experts, expert width 64."""

    def gpt_oss(**over):
        cfg = {
            "architectures": ["GptOssForCausalLM"],
            "model_type": "gpt_oss",
            "hidden_size": HIDDEN,
            "intermediate_size": 64,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "rms_norm_eps": 1e-5,
            "vocab_size": VOCAB,
            "sliding_window": SLIDING_WINDOW,
            "rope_theta": 150000.0,
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 4.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "original_max_position_embeddings": 64,
                "truncate": False,
            },
            "attention_bias": True,
            "tie_word_embeddings": False,
            "max_position_embeddings": 256,
            "swiglu_limit": 7.0,
            "router_aux_loss_coef": 0.9,
            "output_router_logits": False,
            "eos_token_id": 2,
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "gpt_oss",
            "yarn_default_layers",
            "no layer_types: sliding, full, sliding, full (window 6 < prompt); "
            "yarn rope; GQA 4/2; top-2 of 8",
            gpt_oss(),
            extra_levels=["mxfp4"],
        ),
        Case(
            "gpt_oss",
            "layer_types_top4_mha",
            "layer_types full, sliding, sliding; plain rope; multi-head "
            "attention; top-4 of 8 (mlx-lm's sorted path)",
            gpt_oss(
                num_hidden_layers=3,
                layer_types=["full_attention", "sliding_attention", "sliding_attention"],
                num_key_value_heads=4,
                num_experts_per_tok=4,
                rope_scaling=None,
            ),
            extra_levels=["mxfp4"],
        ),
    ]

def _hybrid_cases() -> List[Case]:
    """The hybrids of attention and recurrent token mixers."""

    def qwen3_next(**over):
        cfg = _llama_like("qwen3_next", "Qwen3NextForCausalLM", num_hidden_layers=4)
        cfg.update(
            head_dim=32,
            rope_theta=1000000.0,
            partial_rotary_factor=0.25,
            tie_word_embeddings=False,
            attention_bias=False,
            num_experts=8,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            norm_topk_prob=True,
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            full_attention_interval=2,
            router_aux_loss_coef=0.001,
            output_router_logits=False,
        )
        cfg.update(over)
        return cfg

    def lfm2(**over):
        cfg = {
            "architectures": ["Lfm2ForCausalLM"],
            "model_type": "lfm2",
            "hidden_size": HIDDEN,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": VOCAB,
            "max_position_embeddings": 128000,
            "norm_eps": 1e-5,
            "conv_bias": False,
            "conv_L_cache": 3,
            "block_dim": HIDDEN,
            "block_ff_dim": 192,
            "block_multiple_of": 32,
            "block_ffn_dim_multiplier": 1.0,
            "block_auto_adjust_ff_dim": True,
            "full_attn_idxs": [1, 3],
            "rope_theta": 1000000.0,
            "bos_token_id": 1,
            "eos_token_id": 7,
            "pad_token_id": 0,
            "tie_embedding": True,
            "use_cache": True,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    def qwen3_5_text(**over):
        cfg = {
            "model_type": "qwen3_5_text",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "rms_norm_eps": 1e-6,
            "vocab_size": VOCAB,
            "max_position_embeddings": 262144,
            "linear_num_value_heads": 4,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4,
            "full_attention_interval": 2,
            "tie_word_embeddings": True,
            "attention_bias": False,
            "attn_output_gate": True,
            "hidden_act": "silu",
            "layer_types": ["linear_attention", "full_attention"] * 2,
            "mtp_num_hidden_layers": 1,
            "rope_parameters": {
                "mrope_interleaved": True,
                "mrope_section": [2, 1, 1],
                "rope_type": "default",
                "rope_theta": 10000000.0,
                "partial_rotary_factor": 0.25,
            },
        }
        cfg.update(over)
        return cfg

    def granite_hybrid(**over):
        cfg = {
            "architectures": ["GraniteMoeHybridForCausalLM"],
            "model_type": "granitemoehybrid",
            "hidden_size": HIDDEN,
            "intermediate_size": 64,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5,
            "vocab_size": VOCAB,
            "max_position_embeddings": 4096,
            "attention_bias": False,
            "attention_multiplier": 0.0625,
            "embedding_multiplier": 1.0,
            "residual_multiplier": 0.5,
            "logits_scaling": 4.0,
            "layer_types": ["mamba", "attention", "mamba", "mamba"],
            "position_embedding_type": "nope",
            "rope_theta": 10000.0,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "shared_intermediate_size": 64,
            "mamba_n_heads": 8,
            "mamba_d_head": 16,
            "mamba_d_state": 16,
            "mamba_d_conv": 4,
            "mamba_n_groups": 2,
            "mamba_conv_bias": True,
            "mamba_proj_bias": False,
            "mamba_chunk_size": 256,
            "mamba_expand": 2,
            "tie_word_embeddings": True,
            "hidden_act": "silu",
            "router_aux_loss_coef": 0.0,
            "output_router_logits": False,
        }
        cfg.update(over)
        return cfg

    def nemotron_h(**over):
        cfg = {
            "architectures": ["NemotronHForCausalLM"],
            "model_type": "nemotron_h",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "max_position_embeddings": 4096,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "attention_bias": False,
            "mamba_num_heads": 8,
            "mamba_head_dim": 16,
            "mamba_proj_bias": False,
            "ssm_state_size": 16,
            "conv_kernel": 4,
            "n_groups": 2,
            "mlp_bias": False,
            "layer_norm_epsilon": 1e-5,
            "use_bias": False,
            "use_conv_bias": True,
            "hybrid_override_pattern": "ME*M-E",
            "n_routed_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 64,
            "moe_shared_expert_intermediate_size": 64,
            "n_shared_experts": 1,
            "n_group": 2,
            "topk_group": 1,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
            "mamba_hidden_act": "silu",
            "mlp_hidden_act": "relu2",
            "tie_word_embeddings": False,
            "rope_theta": 10000,
        }
        cfg.update(over)
        return cfg

    def jamba(**over):
        cfg = {
            "architectures": ["JambaForCausalLM"],
            "model_type": "jamba",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "attn_layer_offset": 1,
            "attn_layer_period": 2,
            "expert_layer_offset": 1,
            "expert_layer_period": 2,
            "mamba_d_conv": 4,
            "mamba_d_state": 8,
            "mamba_expand": 2,
            "mamba_dt_rank": "auto",
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 4096,
            "vocab_size": VOCAB,
            "tie_word_embeddings": False,
        }
        cfg.update(over)
        return cfg

    def mamba(**over):
        cfg = {
            "architectures": ["MambaForCausalLM"],
            "model_type": "mamba",
            "hidden_size": HIDDEN,
            "vocab_size": VOCAB,
            "intermediate_size": 128,
            "state_size": 8,
            "num_hidden_layers": 2,
            "conv_kernel": 4,
            "use_bias": False,
            "use_conv_bias": True,
            "time_step_rank": "auto",
            "tie_word_embeddings": True,
            "layer_norm_epsilon": 1e-5,
        }
        cfg.update(over)
        return cfg

    def olmo_hybrid(**over):
        cfg = {
            "architectures": ["OlmoHybridForCausalLM"],
            "model_type": "olmo_hybrid",
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-6,
            "vocab_size": VOCAB,
            "max_position_embeddings": 4096,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4,
            "linear_allow_neg_eigval": True,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "rope_theta": 500000.0,
        }
        cfg.update(over)
        return cfg

    def falcon_h1(**over):
        cfg = {
            "architectures": ["FalconH1ForCausalLM"],
            "model_type": "falcon_h1",
            "hidden_size": HIDDEN,
            "vocab_size": VOCAB,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "mamba_d_ssm": 128,
            "mamba_n_heads": 8,
            "mamba_d_head": 16,
            "mamba_d_state": 16,
            "mamba_n_groups": 2,
            "mamba_d_conv": 4,
            "rope_theta": 10000.0,
            "max_position_embeddings": 4096,
            "tie_word_embeddings": True,
        }
        cfg.update(over)
        return cfg

    def lfm2_moe(**over):
        cfg = {
            "architectures": ["Lfm2MoeForCausalLM"],
            "model_type": "lfm2_moe",
            "hidden_size": HIDDEN,
            "vocab_size": VOCAB,
            "intermediate_size": 128,
            "moe_intermediate_size": 64,
            "num_hidden_layers": 4,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "norm_topk_prob": True,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 128000,
            "use_expert_bias": True,
            "num_dense_layers": 1,
            "norm_eps": 1e-5,
            "conv_bias": False,
            "conv_L_cache": 3,
            "rope_theta": 1000000.0,
            "routed_scaling_factor": 1.5,
            "full_attn_idxs": [1, 3],
            "tie_embedding": True,
        }
        cfg.update(over)
        return cfg

    def recurrent_gemma(**over):
        cfg = {
            "architectures": ["RecurrentGemmaForCausalLM"],
            "model_type": "recurrent_gemma",
            "hidden_size": HIDDEN,
            "intermediate_size": 192,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "num_hidden_layers": 4,
            "vocab_size": VOCAB,
            "rms_norm_eps": 1e-6,
            "attention_window_size": SLIDING_WINDOW,
            "logits_soft_cap": 30.0,
            "attention_bias": False,
            "conv1d_width": 4,
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "embeddings_scale_by_sqrt_dim": True,
            "block_types": ["recurrent", "recurrent", "attention"],
            "hidden_activation": "gelu_pytorch_tanh",
            "final_w_init_variance_scale": 0.5,
            "w_init_variance_scale": 0.01,
            "attention_dropout": 0.0,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "pad_token_id": 0,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    def mamba2(**over):
        cfg = {
            "architectures": ["Mamba2ForCausalLM"],
            "model_type": "mamba2",
            "num_heads": 8,
            "head_dim": 16,
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "state_size": 16,
            "num_hidden_layers": 3,
            "layer_norm_epsilon": 1e-6,
            "conv_kernel": 4,
            "n_groups": 2,
            "use_bias": False,
            "use_conv_bias": True,
            "tie_word_embeddings": True,
            "time_step_limit": [0.0, float("inf")],
            "time_step_rank": "auto",
            "expand": 2,
            "chunk_size": 256,
            "hidden_act": "silu",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "recurrent_gemma",
            "griffin_tied",
            "block_types recurrent, recurrent, attention cycled over 4 layers "
            "(the RG-LRU on 0, 1 and 3: 4 gate heads, 4 taps), local MQA within "
            "a window of 6 on layer 2, rope on half of each head; logits "
            "soft-capped at 30; the head tied by holding no lm_head; conv_1d "
            "stored as Hugging Face does",
            recurrent_gemma(),
            without=["lm_head"],
            layout=Layout((), (), transposed=("conv_1d.weight",)),
        ),
        Case(
            "recurrent_gemma",
            "attention_first_untied",
            "_block_types attention, recurrent over 3 layers (two local "
            "attention layers, window 5, 2 heads of 32), embeddings not "
            "scaled, no soft cap (0), an untied head; conv1d_width 3, "
            "num_key_value_heads 2, rope_theta and attention_bias read and "
            "unused",
            recurrent_gemma(
                num_hidden_layers=3,
                num_attention_heads=2,
                num_key_value_heads=2,
                attention_window_size=5,
                logits_soft_cap=0.0,
                embeddings_scale_by_sqrt_dim=False,
                attention_bias=True,
                conv1d_width=3,
                rope_theta=1000000.0,
                rms_norm_eps=1e-5,
                block_types=None,
                _block_types=["attention", "recurrent"],
            ),
        ),
        Case(
            "recurrent_gemma",
            "window_in_decode",
            "block_types recurrent, attention over 5 layers, 8 heads of 8 (rope "
            "on 4 dims), a window of 28: longer than the prompt, so the window "
            "first bites during the decode; soft cap 10",
            recurrent_gemma(
                num_hidden_layers=5,
                num_attention_heads=8,
                attention_window_size=28,
                logits_soft_cap=10.0,
                block_types=["recurrent", "attention"],
            ),
        ),
        Case(
            "jamba",
            "moe_periods",
            "attention every second layer from 1 (no positions, GQA), the "
            "selective scan with weighted dt, B and C norms on 0 and 2 (inner 128, "
            "state 8, 4 taps, mamba_dt_rank \"auto\"); experts (top-2 of 8) where "
            "(layer + 1) is even, a SwiGLU elsewhere; untied",
            jamba(),
        ),
        Case(
            "jamba",
            "block_types_dense_tied",
            "layers_block_type given (layer 2 attends), one expert (dense "
            "everywhere), biased scan projections, 3 taps without a bias, "
            "mamba_dt_rank 6, state 16; tied head",
            jamba(
                layers_block_type=["mamba", "mamba", "attention", "mamba"],
                num_experts=1,
                num_experts_per_tok=1,
                mamba_proj_bias=True,
                mamba_conv_bias=False,
                mamba_d_conv=3,
                mamba_dt_rank=6,
                mamba_d_state=16,
                tie_word_embeddings=True,
            ),
        ),
        Case(
            "mamba",
            "tied_auto_rank",
            "two layers of the selective scan (inner 128, state 8, 4 taps with a "
            "bias), time_step_rank \"auto\" (ceil(64 / 16) = 4), tied head",
            mamba(),
        ),
        Case(
            "mamba",
            "untied_biased",
            "three layers, state 16, time_step_rank 8, 3 taps without a bias, "
            "biased in and out projections, untied",
            mamba(
                num_hidden_layers=3,
                state_size=16,
                time_step_rank=8,
                conv_kernel=3,
                use_conv_bias=False,
                use_bias=True,
                tie_word_embeddings=False,
            ),
        ),
        Case(
            "falcon_mamba",
            "bcdt_norm",
            "Falcon-Mamba (an alias of mamba): the time-step input, B and C normed "
            "without a weight (mixer_rms_eps 1e-5) before they are used, untied",
            mamba(
                architectures=["FalconMambaForCausalLM"],
                model_type="falcon_mamba",
                mixer_rms_eps=1e-5,
                tie_word_embeddings=False,
            ),
        ),
        Case(
            "olmo_hybrid",
            "default_pattern",
            "layer_types by default (layers 0-2 the gated delta rule, 3 attention): "
            "separate q, k, v, g, b and a projections, a convolution of 4 taps "
            "each for q, k and v, 4 value heads over 2 key heads of 16, the "
            "write strength 2 sigmoid(b); pre-norm there, OLMo 2's post-norm "
            "GQA attention with full-width q and k norms; untied",
            olmo_hybrid(),
        ),
        Case(
            "olmo_hybrid",
            "layer_types_tied",
            "layer_types alternating (1 and 3 attend), the write strength "
            "sigmoid(b), equal key and value heads (2) with key width 32, "
            "convolutions of 3 taps, attention biases, a layer_norm_epsilon of "
            "its own, rope_theta from rope_parameters; tied head",
            _without(
                olmo_hybrid(
                    layer_types=["linear_attention", "full_attention"] * 2,
                    linear_allow_neg_eigval=False,
                    linear_num_value_heads=2,
                    linear_key_head_dim=32,
                    linear_conv_kernel_dim=3,
                    attention_bias=True,
                    layer_norm_epsilon=1e-4,
                    tie_word_embeddings=True,
                    rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
                ),
                "rope_theta",
            ),
        ),
        Case(
            "falcon_h1",
            "tied_defaults",
            "two layers of the state-space scan (8 heads of 16 over 2 groups, "
            "state 16, 4 taps with a bias) beside GQA attention (head_dim 16), "
            "the scan's output gated without a norm, mlx-lm's default muP "
            "multipliers (already folded: mlx-lm's layout), a tied head scaled "
            "by lm_head_multiplier / embedding_multiplier",
            falcon_h1(),
        ),
        Case(
            "falcon_h1",
            "norm_after_gate",
            "mamba_rms_norm (normed over the full width after the gate, beside "
            "2 groups), three layers, biases on the scan's in and out "
            "projections, untied",
            falcon_h1(
                num_hidden_layers=3,
                mamba_rms_norm=True,
                mamba_proj_bias=True,
                projectors_bias=True,
                tie_word_embeddings=False,
            ),
        ),
        Case(
            "falcon_h1",
            "hf_layout_norm_before_gate",
            "Hugging Face's layout (the convolutions [channels, 1, taps], the muP "
            "multipliers apart, which loading folds into embedding, lm_head, q, "
            "k, o, out_proj, gate, down and in_proj by blocks of rows; only the "
            "float32 level, the others saved by mlx-lm, folded): multipliers "
            "away from the defaults, the scan's output normed before the gate, "
            "one group of state 32, attention and MLP biases, untied",
            falcon_h1(
                mamba_n_groups=1,
                mamba_d_state=32,
                mamba_rms_norm=True,
                mamba_norm_before_gate=True,
                attention_bias=True,
                mlp_bias=True,
                tie_word_embeddings=False,
                embedding_multiplier=3.0,
                lm_head_multiplier=0.125,
                attention_in_multiplier=0.75,
                attention_out_multiplier=1.5,
                ssm_in_multiplier=0.8,
                ssm_out_multiplier=0.6,
                mlp_multipliers=[0.9, 0.7],
                ssm_multipliers=[0.5, 0.25, 0.75, 1.25, 0.4],
            ),
            layout=Layout((), (), transposed=("conv1d.weight",)),
        ),
        Case(
            "lfm2_moe",
            "base",
            "full_attn_idxs [1, 3] (0 and 2 short convolutions of 3 taps), GQA "
            "with per-head q and k norms; layer 0 a dense SwiGLU, 1-3 sparse: "
            "top-2 of 8 by sigmoid scores after the expert bias, renormalised, "
            "times 1.5",
            lfm2_moe(),
        ),
        Case(
            "lfm2_moe",
            "layer_types_unbiased",
            "layer_types (layer 2 attends), convolutions of 4 taps with biases; "
            "layers 0 and 1 dense, 2 and 3 sparse: top-3 of 8 by the plain "
            "sigmoid scores (no expert bias), not renormalised, scaling 1.0 by "
            "default; rope_theta from rope_parameters",
            _without(
                lfm2_moe(
                    layer_types=["conv", "conv", "full_attention", "conv"],
                    conv_bias=True,
                    conv_L_cache=4,
                    num_dense_layers=2,
                    num_experts_per_tok=3,
                    use_expert_bias=False,
                    norm_topk_prob=False,
                    rope_parameters={"rope_theta": 500000.0, "rope_type": "default"},
                ),
                "full_attn_idxs",
                "routed_scaling_factor",
                "rope_theta",
            ),
        ),
        Case(
            "mamba2",
            "tied_groups",
            "three state-space layers only (8 heads of 16 over 2 groups of B and "
            "C, state 16, 4 taps with a bias), the output norm over the full "
            "width, time_step_limit [0, Infinity] as Hugging Face writes it, "
            "block norms at eps 1e-5 beside a config eps of 1e-6; tied head",
            mamba2(),
        ),
        Case(
            "mamba2",
            "untied_biased",
            "two layers, 4 heads of 16 in one group, ssm_state_size 32 over a "
            "state_size of 16, 3 taps without a bias, biased projections, "
            "time-step limits (0.001, 10); untied",
            mamba2(
                num_heads=4,
                num_hidden_layers=2,
                ssm_state_size=32,
                conv_kernel=3,
                n_groups=1,
                use_bias=True,
                use_conv_bias=False,
                time_step_limit=[0.001, 10.0],
                tie_word_embeddings=False,
            ),
        ),
        Case(
            "nemotron_h",
            "pattern_moe",
            "hybrid_override_pattern ME*M-E: state-space layers 0 and 3 (8 heads of "
            "16, 2 groups of B and C, state 16, 4 taps with a bias, the output norm "
            "per group), attention on layer 2 (GQA, head_dim 32 beside a width of "
            "16 per head, no positions), a relu² MLP on layer 4, relu² experts on "
            "1 and 5 (top-2 of 8 in the best of 2 groups, renormalised, times 2.5, "
            "a shared expert); time-step limits absent (0, infinity)",
            nemotron_h(),
        ),
        Case(
            "nemotron_h",
            "block_types_dense",
            "layers_block_type in words (mamba, mlp, attention, mlp) and no "
            "experts: scan layer 0 in one group (4 heads of 16, state 32, 3 taps "
            "without a bias, biased projections), head_dim from hidden_size / "
            "heads with biases, time-step limits (0.001, 10)",
            _without(
                nemotron_h(
                    layers_block_type=["mamba", "mlp", "attention", "mlp"],
                    mamba_num_heads=4,
                    ssm_state_size=32,
                    conv_kernel=3,
                    n_groups=1,
                    use_conv_bias=False,
                    mamba_proj_bias=True,
                    attention_bias=True,
                    time_step_limit=[0.001, 10.0],
                ),
                "hybrid_override_pattern",
                "head_dim",
                "n_routed_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "moe_shared_expert_intermediate_size",
                "n_shared_experts",
                "n_group",
                "topk_group",
                "norm_topk_prob",
                "routed_scaling_factor",
            ),
        ),
        Case(
            "granitemoehybrid",
            "moe_nope",
            "Granite 4.0-H's form: layers 0, 2 and 3 the state-space scan (8 heads "
            "of 16 over 2 groups of B and C, state 16, convolution of 4 taps with "
            "a bias), layer 1 attention without positions (GQA); every layer a "
            "mixture (top-2 of 8) plus a fused shared expert; the default "
            "time-step limits; Granite's multipliers; untied",
            granite_hybrid(tie_word_embeddings=False),
        ),
        Case(
            "granitemoehybrid",
            "dense_rope",
            "dense SwiGLU blocks (no num_local_experts), layers 0 and 2 attend with "
            "a rope (rope_parameters' theta), 1 and 3 the scan (4 heads of 16 in "
            "one group, state 32, 3 taps, no convolution bias, biased "
            "projections), time-step limits (0.01, 50); tied head",
            _without(
                granite_hybrid(
                    layer_types=["attention", "mamba", "attention", "mamba"],
                    position_embedding_type="rope",
                    rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                    intermediate_size=128,
                    mamba_n_heads=4,
                    mamba_d_state=32,
                    mamba_d_conv=3,
                    mamba_n_groups=1,
                    mamba_conv_bias=False,
                    mamba_proj_bias=True,
                    time_step_limit=[0.01, 50.0],
                ),
                "num_local_experts",
                "num_experts_per_tok",
                "shared_intermediate_size",
            ),
        ),
        Case(
            "qwen3_5",
            "text_config_tied",
            "a vision-language config (the text model under text_config, "
            "model_type qwen3_5_text): layers 1 and 3 gated attention with a "
            "quarter of head_dim 32 rotated (rope_parameters' theta), 0 and 2 the "
            "gated delta rule with projections side by side, 4 value heads over 2 "
            "key heads; a dense SwiGLU; tied head",
            {
                "architectures": ["Qwen3_5ForConditionalGeneration"],
                "model_type": "qwen3_5",
                "text_config": qwen3_5_text(),
                "vision_config": {"model_type": "qwen3_5", "depth": 2},
                "image_token_id": 250,
                "tie_word_embeddings": True,
            },
        ),
        Case(
            "qwen3_5",
            "flat_moe",
            "a text-only config at the top level: every layer a mixture of "
            "experts (top-2 of 8 renormalised, shared expert behind a sigmoid), "
            "full_attention_interval 4 (layer 3 attends), key width 32 and value "
            "width 16 over equal head counts, convolution of 3 taps, head_dim "
            "from hidden_size / heads (16) with half of it rotated; untied",
            dict(
                qwen3_5_text(
                    model_type="qwen3_5",
                    full_attention_interval=4,
                    linear_num_value_heads=2,
                    linear_key_head_dim=32,
                    linear_conv_kernel_dim=3,
                    num_experts=8,
                    num_experts_per_tok=2,
                    moe_intermediate_size=64,
                    shared_expert_intermediate_size=64,
                    tie_word_embeddings=False,
                    layer_types=["linear_attention"] * 3 + ["full_attention"],
                    rope_parameters={"rope_type": "default", "rope_theta": 100000.0, "partial_rotary_factor": 0.5},
                ),
                architectures=["Qwen3_5MoeForCausalLM"],
                head_dim=None,
            ),
        ),
        Case(
            "qwen3_5_moe",
            "text_config",
            "a vision-language config whose text model is a mixture on every "
            "layer (top-4 of 8 renormalised, shared expert behind a sigmoid), "
            "gated attention on layers 1 and 3, the gated delta rule on 0 and 2; "
            "untied",
            {
                "architectures": ["Qwen3_5MoeForConditionalGeneration"],
                "model_type": "qwen3_5_moe",
                "text_config": qwen3_5_text(
                    model_type="qwen3_5_moe_text",
                    num_experts=8,
                    num_experts_per_tok=4,
                    moe_intermediate_size=64,
                    shared_expert_intermediate_size=64,
                    tie_word_embeddings=False,
                ),
                "vision_config": {"model_type": "qwen3_5_moe", "depth": 2},
                "tie_word_embeddings": False,
            },
        ),
        Case(
            "lfm2",
            "base",
            "full_attn_idxs [1, 3] (layers 0 and 2 short convolutions of 3 taps, "
            "no biases), GQA with per-head q and k norms; the feed-forward width "
            "adjusted from 192 (two thirds, times 1.0, rounded up to 32: 128)",
            lfm2(),
        ),
        Case(
            "lfm2",
            "layer_types_bias",
            "layer_types only (layer 1 attends, 0, 2 and 3 convolve), convolutions "
            "of 4 taps with biases on them and on the in and out projections, plain "
            "multi-head attention; intermediate_size 96 taken as it is (no "
            "adjustment, no multiplier); rope_theta from rope_parameters",
            _without(
                lfm2(
                    layer_types=["conv", "full_attention", "conv", "conv"],
                    conv_bias=True,
                    conv_L_cache=4,
                    num_key_value_heads=4,
                    intermediate_size=96,
                    block_auto_adjust_ff_dim=False,
                    block_ffn_dim_multiplier=None,
                    rope_parameters={"rope_theta": 500000.0, "rope_type": "default"},
                ),
                "full_attn_idxs",
                "block_ff_dim",
                "rope_theta",
            ),
        ),
        Case(
            "lfm2-vl",
            "text_config",
            "a vision-language config whose text_config is an lfm2 (layers 0 and 2 "
            "attend, 1 and 3 convolve over 3 taps, GQA), the tensors under "
            "language_model.",
            {
                "architectures": ["Lfm2VlForConditionalGeneration"],
                "model_type": "lfm2-vl",
                "text_config": lfm2(full_attn_idxs=[0, 2]),
                "vision_config": {"model_type": "siglip2_vision_model", "num_hidden_layers": 2},
                "downsample_factor": 2,
                "image_token_index": 250,
            },
        ),
        Case(
            "qwen3_next",
            "base",
            "full_attention_interval 2 (layers 1 and 3 attend, 0 and 2 gated delta), "
            "4 value heads over 2 key heads of 16, convolution of 4 taps; gated "
            "attention with a quarter of head_dim 32 rotated, GQA; layers 0, 2, 3 "
            "sparse (top-2 of 8 renormalised, shared expert behind a sigmoid), "
            "layer 1 dense; untied",
            qwen3_next(),
        ),
        Case(
            "qwen3_next",
            "interval4_tied",
            "full_attention_interval 4 (layer 3 attends, 0-2 gated delta), key and "
            "value heads equal (2) with key width 32 and value width 16, "
            "convolution of 3 taps; linear rope scaling by 2, attention biases; "
            "decoder_sparse_step 2 (layers 1 and 3 sparse), top-2 not "
            "renormalised; tied head",
            qwen3_next(
                full_attention_interval=4,
                linear_num_value_heads=2,
                linear_key_head_dim=32,
                linear_conv_kernel_dim=3,
                rope_scaling={"rope_type": "linear", "factor": 2.0},
                attention_bias=True,
                decoder_sparse_step=2,
                mlp_only_layers=[],
                norm_topk_prob=False,
                tie_word_embeddings=True,
            ),
        ),
    ]


def _plamo2_cases() -> List[Case]:
    def plamo2(**over):
        cfg = {
            "architectures": ["Plamo2ForCausalLM"],
            "model_type": "plamo2",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "hidden_size_per_head": 16,
            "max_position_embeddings": 2048,
            "attention_window_size": 8,
            "mamba_d_state": 16,
            "mamba_d_conv": 4,
            "mamba_num_heads": 4,
            "mamba_step": 2,
            "mamba_chunk_size": 256,
            "mamba_enabled": True,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "hidden_act": "silu",
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "plamo2",
            "step2_tied",
            "the scan on layers 0 and 2 (4 heads of 16, state 16, 4 taps; z and "
            "x interleaved by head; B, C and dt from bcdt_proj, each normed), "
            "GQA attention (4/2 heads) on 1 and 3 with per-head weighted q and "
            "k norms and full rotation; four offset norms a layer; "
            "attention_window_size 8 read and ignored (shorter than the "
            "prompt); tied head",
            plamo2(),
        ),
        Case(
            "plamo2",
            "step3_mqa_untied",
            "mamba_step 3 (attention on layer 1 alone of 4), one kv head, 8 scan "
            "heads of 8 with state 8 and 3 taps, rms_norm_eps 1e-5, untied head",
            plamo2(
                mamba_step=3,
                num_key_value_heads=1,
                hidden_size_per_head=8,
                mamba_num_heads=8,
                mamba_d_state=8,
                mamba_d_conv=3,
                rms_norm_eps=1e-5,
                tie_word_embeddings=False,
            ),
        ),
    ]


def _gemma4_text_cases() -> List[Case]:
    def gemma4_text(**over):
        cfg = {
            "architectures": ["Gemma4ForCausalLM"],
            "model_type": "gemma4_text",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "global_head_dim": 32,
            "num_kv_shared_layers": 0,
            "hidden_size_per_layer_input": 0,
            "rms_norm_eps": 1e-6,
            "sliding_window": SLIDING_WINDOW,
            "sliding_window_pattern": 2,
            "hidden_activation": "gelu_pytorch_tanh",
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "gemma4_text",
            "k_eq_v",
            "layers 1 and 3 full (sliding_window_pattern 2) with heads of 32 "
            "and one kv head whose values are its keys' projection (no v_proj), "
            "rotated by a proportional rope (a quarter of each head, base 1e6, "
            f"factor 2); layers 0 and 2 within {SLIDING_WINDOW}, heads of 16, "
            "2 kv heads, a plain rope of base 100; values divided by their "
            "rms; each layer's output times its layer_scalar; logits capped at "
            "30; tied head",
            gemma4_text(
                attention_k_eq_v=True,
                num_global_key_value_heads=1,
                final_logit_softcapping=30.0,
                rope_parameters={
                    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                       "rope_theta": 1000000.0, "factor": 2.0},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                },
            ),
        ),
        Case(
            "gemma4_text",
            "layer_types_untied",
            "layer_types given (0 and 3 full, 1 and 2 sliding), every layer with "
            "a v_proj (attention_k_eq_v false), global_head_dim null (every head "
            "16 wide), no rope_parameters (mlx-lm's defaults: the full layers' "
            "proportional rope, the sliding layers' base 1e4), no logit cap "
            "(null), an lm_head (untied)",
            gemma4_text(
                layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                global_head_dim=None,
                final_logit_softcapping=None,
                tie_word_embeddings=False,
            ),
        ),
        Case(
            "gemma4_text",
            "shared_kv",
            "six layers, every 3rd full (2 and 5); the last two (num_kv_shared_layers "
            "2) compute only queries and attend over the keys and values of the last "
            "earlier layer of their type (4 over 3's sliding window, 5 over 2's full "
            "cache, whose values are its keys: attention_k_eq_v) and have MLPs twice "
            "as wide (use_double_wide_mlp); proportional rope with mlx-lm's defaults",
            gemma4_text(
                num_hidden_layers=6,
                sliding_window_pattern=3,
                num_kv_shared_layers=2,
                use_double_wide_mlp=True,
                attention_k_eq_v=True,
                num_global_key_value_heads=1,
            ),
        ),
        Case(
            "gemma4_text",
            "per_layer_inputs",
            "the E2B form: each layer reads an input vector of 8 per token "
            "(hidden_size_per_layer_input) from a table of 8 x 5 columns and a "
            "normed projection of the scaled embeddings, mixed in by a gate after "
            "its MLP; five layers, every 2nd full (1 and 3), the last two sharing "
            "keys and values (3 over 1's full cache, 4 over 2's sliding window) "
            "with double-wide MLPs; untied head",
            gemma4_text(
                num_hidden_layers=5,
                sliding_window_pattern=2,
                num_kv_shared_layers=2,
                hidden_size_per_layer_input=8,
                vocab_size_per_layer_input=VOCAB,
                tie_word_embeddings=False,
            ),
        ),
        Case(
            "gemma4_text",
            "moe_beside",
            "the 26B-A4B form (enable_moe_block): on every layer 8 experts of 32 "
            "(GeGLU) beside the dense MLP, routed from the un-normed stream by a "
            "router RMS-normed with its learned scale over sqrt(hidden), the top 3 "
            "logits' softmax in their own dtype times each expert's learned scale; "
            "the dense and expert outputs each normed, summed, then normed; full "
            "layers' values from their keys; Hugging Face's fused expert tensors "
            "(experts.gate_up_proj [E, 2*32, 64], experts.down_proj)",
            gemma4_text(
                enable_moe_block=True,
                num_experts=8,
                top_k_experts=3,
                moe_intermediate_size=32,
                attention_k_eq_v=True,
                num_global_key_value_heads=1,
            ),
            layout=Layout((), (), fused_experts="experts.switch_glu"),
        ),
    ]


_GEMMA4_TOWERS = (
    ("model.vision_tower.patch_embedder.input_proj.weight", (32, 48)),
    ("model.vision_tower.encoder.layers.0.mlp.gate_proj.weight", (64, 32)),
    ("model.embed_vision.embedding_projection.weight", (64, 32)),
    ("model.audio_tower.subsample_conv_projection.input_proj_linear.weight", (32, 64)),
    ("model.audio_tower.layers.0.feed_forward1.ffw_layer_1.weight", (64, 32)),
    ("model.embed_audio.embedding_projection.weight", (64, 32)),
)


def _gemma4_cases() -> List[Case]:
    text = {
        "model_type": "gemma4_text",
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 5,
        "head_dim": 16,
        "global_head_dim": 32,
        "num_kv_shared_layers": 2,
        "hidden_size_per_layer_input": 8,
        "vocab_size_per_layer_input": VOCAB,
        "rms_norm_eps": 1e-6,
        "sliding_window": SLIDING_WINDOW,
        "sliding_window_pattern": 2,
        "vocab_size": VOCAB,
        "hidden_activation": "gelu_pytorch_tanh",
    }
    return [
        Case(
            "gemma4",
            "e2b_layout",
            "a gemma4_text (per-layer inputs, the last two layers sharing keys and "
            "values) read from text_config, which has no num_attention_heads or "
            "num_key_value_heads (8 and 1); tensors in Hugging Face's layout (model.language_model.) "
            "beside vision and audio towers and their embedders, which loading "
            "drops; tied head",
            {
                "architectures": ["Gemma4ForConditionalGeneration"],
                "model_type": "gemma4",
                "text_config": text,
                "vision_config": {"model_type": "gemma4_vision", "hidden_size": 32},
                "audio_config": {"model_type": "gemma4_audio", "hidden_size": 32},
                "vocab_size": VOCAB,
                "torch_dtype": "bfloat16",
            },
            layout=Layout((("language_model.model.", "model.language_model."),), _GEMMA4_TOWERS),
        ),
        Case(
            "gemma4",
            "moe_layout",
            "the 26B-A4B form read from text_config: 8 experts of 32 beside each "
            "dense MLP (enable_moe_block, 2 per token), 4 heads and 2 kv heads, no "
            "shared keys and values or per-layer inputs; tensors in Hugging Face's "
            "layout (model.language_model., experts.gate_up_proj and "
            "experts.down_proj fused and bare) beside the towers loading drops",
            {
                "architectures": ["Gemma4ForConditionalGeneration"],
                "model_type": "gemma4",
                "text_config": dict(
                    text,
                    num_hidden_layers=4,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    num_kv_shared_layers=0,
                    hidden_size_per_layer_input=0,
                    enable_moe_block=True,
                    num_experts=8,
                    top_k_experts=2,
                    moe_intermediate_size=32,
                ),
                "vision_config": {"model_type": "gemma4_vision", "hidden_size": 32},
                "audio_config": {"model_type": "gemma4_audio", "hidden_size": 32},
                "vocab_size": VOCAB,
                "torch_dtype": "bfloat16",
            },
            layout=Layout((("language_model.model.", "model.language_model."),), _GEMMA4_TOWERS,
                          fused_experts="experts.switch_glu"),
        ),
        Case(
            "gemma4_unified",
            "dense_untied",
            "mlx-lm's remapping of gemma4_unified to gemma4: the dense form (every "
            "layer with keys and values, full layers' values their keys, no "
            "per-layer inputs) with 4 heads and 2 kv heads, an untied head "
            "(language_model.lm_head), in mlx-lm's saved layout",
            {
                "architectures": ["Gemma4ForConditionalGeneration"],
                "model_type": "gemma4_unified",
                "text_config": dict(
                    text,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    num_global_key_value_heads=1,
                    attention_k_eq_v=True,
                    num_kv_shared_layers=0,
                    hidden_size_per_layer_input=0,
                    tie_word_embeddings=False,
                ),
                "vocab_size": VOCAB,
                "torch_dtype": "bfloat16",
            },
        ),
    ]


def _nanochat_cases() -> List[Case]:
    def nanochat(**over):
        cfg = {
            "architectures": ["NanoChatForCausalLM"],
            "model_type": "nanochat",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 256,
            "rope_theta": 10000.0,
            "max_position_embeddings": 2048,
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "nanochat",
            "base",
            "weightless RMS norms after the embedding, before each sublayer and at "
            "the end; a rope turning the other way, then weightless q and k norms; "
            "relu² MLP; logits capped at 15",
            nanochat(),
        ),
        Case(
            "nanochat",
            "gqa_base",
            "2 kv heads for 4 query heads, rope_theta 500",
            nanochat(num_key_value_heads=2, rope_theta=500.0),
        ),
    ]


def _spark2_5_cases() -> List[Case]:
    def spark(**over):
        cfg = {
            "architectures": ["Spark2_5ForCausalLM"],
            "model_type": "spark2_5",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "sliding_window": SLIDING_WINDOW,
            "rope_parameters": {
                "full_attention": {"rope_theta": 5000000.0, "partial_rotary_factor": 0.25},
                "sliding_attention": {"rope_theta": 100.0, "partial_rotary_factor": 1.0},
            },
            "hidden_act": "gelu",
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "spark2_5",
            "tied",
            f"layers 0-2 within {SLIDING_WINDOW} rotating whole heads at base 100, layer 3 "
            "full rotating a quarter of each head at base 5e6; each head's output "
            "gated by sigmoid(g_proj(x)); exact-GELU gated MLP; tied head",
            spark(),
        ),
        Case(
            "spark2_5",
            "biases_untied",
            "layer_types given (0 and 2 full); biases on q_k_v_proj, g_proj, "
            "out_proj and the MLP; an untied lm_head",
            spark(
                layer_types=["full_attention", "sliding_attention", "full_attention", "sliding_attention"],
                attention_bias=True,
                mlp_bias=True,
                tie_word_embeddings=False,
            ),
        ),
    ]


def _baichuan_m1_cases() -> List[Case]:
    def baichuan_m1(**over):
        cfg = {
            "architectures": ["BaichuanM1ForCausalLM"],
            "model_type": "baichuan_m1",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_swa_attention_heads": 8,
            "num_swa_key_value_heads": 4,
            "rope_theta": 10000.0,
            "sliding_window": SLIDING_WINDOW,
            "sliding_window_layers": [1, 3],
            "conv_window": 2,
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 4096,
            "tie_word_embeddings": False,
            "hidden_act": "silu",
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "baichuan_m1",
            "swa_heads",
            "keys and values convolved over time (2 taps a kv head) before the "
            "rope; layers 1 and 3 slide (window 6) with heads of their own (8 "
            "of head_dim 8, 4 kv heads) beside 4 of 16 with 2 kv heads; "
            "lm_head's rows scaled to unit length at load",
            baichuan_m1(),
        ),
        Case(
            "baichuan_m1",
            "shared_heads_mqa",
            "sliding layers 0 and 2 without heads of their own (the swa head "
            "counts null), one kv head, rope_theta 500000, rms_norm_eps 1e-5",
            baichuan_m1(
                sliding_window_layers=[0, 2],
                num_swa_attention_heads=None,
                num_swa_key_value_heads=None,
                num_key_value_heads=1,
                rope_theta=500000.0,
                rms_norm_eps=1e-5,
            ),
        ),
    ]


def _rwkv7_cases() -> List[Case]:
    """RWKV-7: the WKV-7 time mix and the token-shifted channel mix on every
    layer, layer 0's values carried to the later layers."""

    def rwkv7(**over):
        cfg = {
            "architectures": ["RWKV7ForCausalLM"],
            "model_type": "rwkv7",
            "hidden_size": HIDDEN,
            "intermediate_size": 4 * HIDDEN,
            "num_hidden_layers": 3,
            "vocab_size": VOCAB,
            "head_dim": 16,
            "norm_eps": 1e-5,
            "a_low_rank_dim": 16,
            "v_low_rank_dim": 8,
            "gate_low_rank_dim": 64,
            "decay_low_rank_dim": 64,
            "tie_word_embeddings": False,
            "attn_mode": "chunk",
            "hidden_act": "sqrelu",
            "hidden_ratio": 4.0,
            "norm_bias": True,
            "norm_first": True,
            "fuse_norm": False,
            "use_cache": True,
            "bos_token_id": 0,
            "eos_token_id": 0,
            "torch_dtype": "float32",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "rwkv7",
            "heads16_untied",
            "three layers of 4 heads of 16 (state 16x16 a head), LoRA ranks a 16, "
            "v 8, gate 64, decay 64 (the last two's up-projections 8-bit in groups "
            "of 64 at every quantized level, as mlx-lm's quant_predicate says; the "
            "others' left unquantized), untied head",
            rwkv7(),
        ),
        Case(
            "rwkv7",
            "heads32_tied",
            "four layers of 2 heads of 32, intermediate 128, LoRA ranks a 64, v 16, "
            "gate 8, decay 16, norm_eps 1e-6, tied head (an 8-bit embedding at "
            "the quantized levels)",
            rwkv7(
                num_hidden_layers=4,
                head_dim=32,
                intermediate_size=128,
                a_low_rank_dim=64,
                v_low_rank_dim=16,
                gate_low_rank_dim=8,
                decay_low_rank_dim=16,
                norm_eps=1e-6,
                tie_word_embeddings=True,
            ),
        ),
    ]


def _bailing_moe_linear_cases() -> List[Case]:
    """Ring-linear: lightning attention on most layers, attention on the last
    of each group and past the last whole group, MoE from
    first_k_dense_replace on."""

    def bailing(**over):
        cfg = {
            "architectures": ["BailingMoeLinearV2ForCausalLM"],
            "model_type": "bailing_moe_linear",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 5,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-6,
            "partial_rotary_factor": 0.5,
            "use_qk_norm": True,
            "layer_group_size": 2,
            "group_norm_size": 2,
            "first_k_dense_replace": 1,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "num_shared_experts": 1,
            "moe_intermediate_size": 64,
            "moe_shared_expert_intermediate_size": 128,
            "norm_topk_prob": True,
            "score_function": "softmax",
            "n_group": 4,
            "topk_group": 2,
            "routed_scaling_factor": 2.5,
            "moe_router_enable_expert_bias": True,
            "norm_head": False,
            "tie_word_embeddings": False,
            "hidden_act": "silu",
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "bailing_moe_linear",
            "softmax_groups",
            "lightning layers 0 and 2 (4 heads of 16, q and k normed, half the "
            "dims rotated, output normed in 2 groups), attention on 1, 3 and 4 "
            "(the tail past the last whole group of 2; 2 kv heads); layer 0 "
            "dense, the rest 8 experts routed by a softmax with an expert bias, "
            "top-2 within the best 2 of 4 groups, renormalised, times 2.5, "
            "beside one shared expert of 128 (experts of 64, so that groups of 64 "
            "quantize them)",
            bailing(),
        ),
        Case(
            "bailing_moe_linear",
            "sigmoid_mqa_tied",
            "groups of 4 (lightning on 0-2, attention on 3), one kv head, no q "
            "and k norms, full rotation with linear rope scaling by 2, sigmoid "
            "scores without a bias or groups, top-2 not renormalised, two "
            "shared experts of moe_intermediate_size, one output norm group, "
            "tied head",
            bailing(
                num_hidden_layers=4,
                layer_group_size=4,
                num_key_value_heads=1,
                use_qk_norm=False,
                partial_rotary_factor=1.0,
                rope_scaling={"type": "linear", "factor": 2.0},
                group_norm_size=1,
                first_k_dense_replace=0,
                score_function="sigmoid",
                moe_router_enable_expert_bias=False,
                n_group=1,
                norm_topk_prob=False,
                routed_scaling_factor=1.0,
                num_shared_experts=2,
                moe_shared_expert_intermediate_size=None,
                tie_word_embeddings=True,
            ),
        ),
        Case(
            "bailing_moe_linear",
            "dense_norm_head",
            "every layer dense (first_k_dense_replace past the last), 8 heads "
            "of 8 (the slopes of 8), groups of 3 (lightning on 0, 1, 3, 4; "
            "attention on 2 and 5), 4 output norm groups, lm_head's columns "
            "scaled to unit length at load (norm_head); the quantized levels "
            "are left out: mlx-lm's sanitize scales the packed integers of a "
            "quantized lm_head",
            bailing(
                num_hidden_layers=6,
                num_attention_heads=8,
                num_key_value_heads=4,
                layer_group_size=3,
                group_norm_size=4,
                first_k_dense_replace=6,
                norm_head=True,
            ),
            without_levels=["q8_g64", "q8_g32", "q4_g64", "q4_g32"],
            left_out="mlx-lm's sanitize scales the packed integers of a quantized "
            "lm_head when norm_head holds",
        ),
    ]


def _bailing_moe_cases() -> List[Case]:
    """Ling/Ring: fused-qkv attention on every layer, MoE from
    first_k_dense_replace on, routed by the compiled group router."""

    def bailing(**over):
        cfg = {
            "architectures": ["BailingMoeForCausalLM"],
            "model_type": "bailing_moe",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-6,
            "partial_rotary_factor": 0.5,
            "use_qk_norm": True,
            "first_k_dense_replace": 1,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "num_shared_experts": 1,
            "moe_intermediate_size": 64,
            "moe_shared_expert_intermediate_size": 128,
            "norm_topk_prob": True,
            "score_function": "sigmoid",
            "n_group": 4,
            "topk_group": 2,
            "routed_scaling_factor": 2.5,
            "moe_router_enable_expert_bias": True,
            "tie_word_embeddings": False,
            "hidden_act": "silu",
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "bailing_moe",
            "sigmoid_groups",
            "4 heads of 16 (2 kv heads) from one query_key_value, q and k "
            "normed, half the dims rotated; layer 0 dense, then 8 experts "
            "routed by sigmoid scores with an expert bias, top-2 within the "
            "best 2 of 4 groups, renormalised over their sum plus 1e-20, "
            "times 2.5, beside one shared expert of 128 (experts of 64, so that groups of 64 quantize them); untied head",
            bailing(),
        ),
        Case(
            "bailing_moe",
            "softmax_rotary_dim_tied",
            "one kv head, no q and k norms, rotary_dim 12 of 16, a head_dim "
            "key of 32 that is not read, softmax scores without a bias or "
            "groups, top-3 not renormalised, no shared experts, both layers "
            "sparse, tied head",
            bailing(
                num_key_value_heads=1,
                use_qk_norm=False,
                rotary_dim=12,
                head_dim=32,
                score_function="softmax",
                moe_router_enable_expert_bias=False,
                n_group=1,
                num_hidden_layers=2,
                num_experts_per_tok=3,
                norm_topk_prob=False,
                routed_scaling_factor=1.0,
                num_shared_experts=0,
                first_k_dense_replace=0,
                tie_word_embeddings=True,
            ),
        ),
    ]


def _deepseek_v3_cases() -> List[Case]:
    """DeepSeek-V3's multi-head latent attention and its sigmoid router in
    groups: the prefill runs the expanded form, each decode step the
    absorbed one."""

    def v3(**over):
        cfg = _llama_like("deepseek_v3", "DeepseekV3ForCausalLM", num_hidden_layers=3)
        cfg.update(
            q_lora_rank=64,
            kv_lora_rank=64,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
            rms_norm_eps=1e-6,
            first_k_dense_replace=1,
            moe_intermediate_size=64,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            n_group=4,
            topk_group=2,
            topk_method="noaux_tc",
            scoring_func="sigmoid",
            moe_layer_freq=1,
            attention_bias=False,
            tie_word_embeddings=False,
            rope_scaling={
                "type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 512,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
            num_nextn_predict_layers=1,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "deepseek_v3",
            "base",
            "compressed queries (q rank 64), a latent of 64 and rope parts of 16 over "
            "4 heads (nope 32, value 32), yarn factor 4 with mscale_all_dim 1 in the "
            "softmax scale; layer 0 dense, layers 1-2 sparse: 4 groups of 2 kept, "
            "top-2 of 8 renormalised, times 2.5, one shared expert; the float32 "
            "checkpoint holds Hugging Face's kv_b_proj (split at load)",
            v3(),
            layout=Layout((), (), fused_kv_b=True),
            extra_levels=["q4_g32_kv_b"],
        ),
        Case(
            "deepseek_v3",
            "dense_published",
            "every layer dense (no n_routed_experts), compressed queries, a latent of "
            "64 and rope parts of 16 over 4 heads, yarn factor 4; the float32 "
            "checkpoint holds kv_b_proj, and two more levels store the projections "
            "as DeepSeek's FP8 tiles and as compressed-tensors' INT4 (dense: on "
            "base's experts the INT4 level's float32 logits move 1.5e-4 of the "
            "scale between two orders of the quantized products' sums, past the "
            "float32 bound these levels hold)",
            {k: v for k, v in v3(num_hidden_layers=2).items() if k not in ("n_routed_experts", "n_shared_experts")},
            layout=Layout((), (), fused_kv_b=True),
            extra_levels=["fp8_tiles", "int4_packed"],
        ),
        Case(
            "deepseek_v3",
            "uncompressed_queries",
            "q_lora_rank null (q_proj), no rope scaling, biases on q_a/kv_a/o "
            "(attention_bias), a latent of 128 over 2 heads of nope 64, rope 32, "
            "value 64; every second layer sparse (moe_layer_freq 2) from layer 0, "
            "one group, top-3 of 8 not renormalised, no shared experts (null); the "
            "float32 checkpoint as mlx-lm saves it (embed_q, unembed_out)",
            v3(
                q_lora_rank=None,
                kv_lora_rank=128,
                num_attention_heads=2,
                num_key_value_heads=2,
                qk_nope_head_dim=64,
                qk_rope_head_dim=32,
                v_head_dim=64,
                rope_scaling=None,
                rope_theta=50000.0,
                attention_bias=True,
                first_k_dense_replace=0,
                moe_layer_freq=2,
                n_group=1,
                topk_group=1,
                num_experts_per_tok=3,
                norm_topk_prob=False,
                routed_scaling_factor=1.0,
                n_shared_experts=None,
            ),
        ),
        Case(
            "kimi_k2",
            "base",
            "model_type kimi_k2 (mlx-lm's alias of deepseek_v3: Kimi K2's configs): "
            "compressed queries, one group, top-2 of 8 renormalised, times 2.827, one "
            "shared expert, yarn factor 8 with mscale_all_dim 1",
            v3(
                model_type="kimi_k2",
                n_group=1,
                topk_group=1,
                routed_scaling_factor=2.827,
                rope_scaling={
                    "type": "yarn",
                    "factor": 8.0,
                    "original_max_position_embeddings": 256,
                    "beta_fast": 1.0,
                    "beta_slow": 1.0,
                    "mscale": 1.0,
                    "mscale_all_dim": 1.0,
                },
            ),
        ),
        Case(
            "joyai_llm_flash",
            "base",
            "model_type joyai_llm_flash (mlx-lm's alias of deepseek_v3): uncompressed "
            "queries (q_lora_rank null), layers 0-1 dense, top-2 of 8 with a shared "
            "expert; the float32 checkpoint holds Hugging Face's kv_b_proj",
            v3(model_type="joyai_llm_flash", q_lora_rank=None, first_k_dense_replace=2, rope_scaling=None),
            layout=Layout((), (), fused_kv_b=True),
        ),
        Case(
            "glm4_moe_lite",
            "base",
            "GLM-4.7-Flash's form: the latent's and the queries' norms at "
            "rms_norm_eps (1e-2, far from DeepSeek's 1e-6), nope 48 and value 64 "
            "unlike each other, one group, top-2 of 8 renormalised with 1e-20, "
            "times 1.8, one shared expert; the float32 checkpoint holds kv_b_proj",
            v3(
                model_type="glm4_moe_lite",
                architectures=["Glm4MoeLiteForCausalLM"],
                rms_norm_eps=1e-2,
                qk_nope_head_dim=48,
                v_head_dim=64,
                n_group=1,
                topk_group=1,
                routed_scaling_factor=1.8,
                rope_scaling=None,
                rope_theta=1000000.0,
                partial_rotary_factor=1.0,
            ),
            layout=Layout((), (), fused_kv_b=True),
        ),
        Case(
            "kimi_k25",
            "base",
            "Kimi K2.5's wrapper: deepseek_v3 under text_config (compressed queries, "
            "one group, top-2 of 8, one shared expert), its tensors under "
            "language_model.* with kv_b_proj fused, beside vision_tower.* and "
            "mm_projector.* dropped",
            {
                "architectures": ["KimiK25ForConditionalGeneration"],
                "model_type": "kimi_k25",
                "text_config": {k: v for k, v in v3(n_group=1, topk_group=1, rope_scaling=None).items() if k != "architectures"},
                "torch_dtype": "float32",
            },
            layout=Layout((), _towers("", _KIMI_TOWER), fused_kv_b=True),
        ),
        Case(
            "kimi_vl",
            "base",
            "Kimi-VL's wrapper: deepseek_v3 under text_config (uncompressed queries, "
            "layers 0-1 dense, top-2 of 8), its tensors under "
            "language_model.* (the names mlx-lm's kimi_vl reads), beside "
            "vision_tower.* and multi_modal_projector.* dropped",
            {
                "architectures": ["KimiVLForConditionalGeneration"],
                "model_type": "kimi_vl",
                "text_config": {k: v for k, v in v3(q_lora_rank=None, first_k_dense_replace=2, n_group=1, topk_group=1).items() if k != "architectures"},
                "torch_dtype": "float32",
            },
            layout=Layout((), _towers("", _KIMI_TOWER[:3])),
        ),
    ]


# A vision tower and projectors, by name and shape, for the Kimi wrappers'
# layouts (random values that loading must drop; kimi_vl's drops the
# first three).
_KIMI_TOWER = (
    ("vision_tower.patch_embed.proj.weight", (32, 3, 2, 2)),
    ("vision_tower.blocks.0.mlp.fc0.weight", (64, 32)),
    ("multi_modal_projector.linear_1.weight", (64, 128)),
    ("mm_projector.proj.0.weight", (64, 32)),
)


def _youtu_llm_cases() -> List[Case]:
    """Youtu-LLM: a dense model with DeepSeek-V2's expanded latent attention
    under initialize_rope's rope."""

    def youtu(**over):
        cfg = _llama_like("youtu_llm", "YoutuForCausalLM")
        cfg.update(
            q_lora_rank=48,
            kv_lora_rank=64,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
            rms_norm_eps=1e-6,
            rope_theta=1600000.0,
            attention_bias=True,
            tie_word_embeddings=True,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "youtu_llm",
            "base",
            "compressed queries (q rank 48), a latent of 64 over 4 heads (nope 32, rope 16, "
            "value 32), interleaved rope pairs, biases on q_a/kv_a/o, an untied head",
            youtu(tie_word_embeddings=False),
        ),
        Case(
            "youtu_llm",
            "no_q_lora",
            "queries from q_proj (q_lora_rank null), rope in halves under yarn's scaling "
            "(factor 4), no biases, tied embeddings",
            youtu(
                q_lora_rank=None,
                rope_traditional=False,
                rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
                attention_bias=False,
            ),
        ),
    ]


def _deepseek_v2_cases() -> List[Case]:
    """DeepSeek-V2's latent attention (mlx-lm expands every head's keys and
    values and caches them; archgen caches the latent) under its own yarn
    rope, and its softmax router, greedy or within groups by their best
    probability."""

    def v2(**over):
        cfg = _llama_like("deepseek_v2", "DeepseekV2ForCausalLM", num_hidden_layers=3)
        cfg.update(
            q_lora_rank=None,
            kv_lora_rank=64,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
            rms_norm_eps=1e-6,
            first_k_dense_replace=1,
            moe_intermediate_size=64,
            n_routed_experts=8,
            n_shared_experts=2,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            routed_scaling_factor=1.0,
            n_group=1,
            topk_group=1,
            topk_method="greedy",
            scoring_func="softmax",
            moe_layer_freq=1,
            attention_bias=False,
            tie_word_embeddings=False,
            rope_scaling={
                "type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 512,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 0.707,
                "mscale_all_dim": 0.707,
            },
            aux_loss_alpha=0.001,
            seq_aux=True,
        )
        cfg.update(over)
        return cfg

    return [
        Case(
            "deepseek_v2",
            "lite",
            "V2-Lite's form: uncompressed queries, a latent of 64 over 4 heads (nope "
            "32, rope 16, value 32), yarn factor 4 with mscale and mscale_all_dim "
            "0.707; layer 0 dense, then top-2 of 8 greedy, weighted by the softmax "
            "unrenormalised, two shared experts; the quantized levels keep kv_b_proj "
            "quantized whole",
            v2(),
        ),
        Case(
            "deepseek_v2",
            "grouped",
            "compressed queries (q rank 64), biases on q_a/kv_a/o, group_limited_greedy: "
            "4 groups scored by their best probability, 2 kept, top-3, times 16; "
            "every second layer sparse from layer 0, no shared experts (null)",
            v2(
                q_lora_rank=64,
                attention_bias=True,
                topk_method="group_limited_greedy",
                n_group=4,
                topk_group=2,
                num_experts_per_tok=3,
                routed_scaling_factor=16.0,
                first_k_dense_replace=0,
                moe_layer_freq=2,
                n_shared_experts=None,
            ),
        ),
    ]


def _laguna_cases() -> List[Case]:
    def laguna(**over):
        cfg = {
            "architectures": ["LagunaForCausalLM"],
            "model_type": "laguna",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "sliding_window": SLIDING_WINDOW,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "num_attention_heads_per_layer": [4, 2, 4, 2],
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "moe_routed_scaling_factor": 2.5,
            "partial_rotary_factor": 0.75,
            "rope_parameters": {
                "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 8, "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            },
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "laguna",
            "base",
            f"layers 0 and 2 within {SLIDING_WINDOW} with 4 query heads, a plain rope of "
            "base 100 over 12 of 16 features (the top-level partial_rotary_factor); 1 "
            "and 3 full with 2 query heads and a yarn rope over 8 (their own factor); "
            "q and k normed per head; each head's output times softplus of g_proj(x); "
            "layer 0 dense, the others a sigmoid router (float32, correction bias) over "
            "8 experts, top 2 renormalised, times 2.5, plus a shared expert; untied head",
            laguna(),
        ),
        Case(
            "laguna",
            "sqrt_softplus_capped",
            "every layer full with 4 heads and a plain rope (no rope_parameters); "
            "router logits capped at 5 and scored by sqrt(softplus); layers 0 and 2 "
            "sparse (mlp_layer_types); no head gate (gating false); biases on q, k, v "
            "and o; tied head",
            laguna(
                layer_types=["full_attention"] * 4,
                num_attention_heads_per_layer=None,
                rope_parameters=None,
                partial_rotary_factor=None,
                moe_router_score_func="sqrtsoftplus",
                moe_router_logit_softcapping=5.0,
                mlp_layer_types=["sparse", "dense", "sparse", "dense"],
                gating=False,
                qkv_bias=True,
                attention_bias=True,
                tie_word_embeddings=True,
                moe_routed_scaling_factor=1.0,
            ),
        ),
    ]


def _mellum_cases() -> List[Case]:
    def mellum(**over):
        cfg = {
            "architectures": ["MellumForCausalLM"],
            "model_type": "mellum",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "num_hidden_layers": 4,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
            "max_position_embeddings": 4096,
            "norm_topk_prob": True,
            "sliding_window": SLIDING_WINDOW,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "rope_parameters": {
                "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 8},
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            },
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "mellum",
            "base",
            f"layers 0 and 2 within {SLIDING_WINDOW} with a plain rope of base 100, 1 "
            "and 3 full with a yarn rope (factor 4 over an original 8 positions, base "
            "5e5); q and k RMS-normed per head; every layer a softmax router over 8 "
            "experts of 32, the 2 most probable renormalised; untied head",
            mellum(),
        ),
        Case(
            "mellum",
            "linear_tied",
            "every layer full; rope_type linear (factor 8), which mlx-lm reads as an "
            "unscaled rope of its base 1e4; the top-2 weights not renormalised; tied "
            "head",
            mellum(
                layer_types=["full_attention"] * 4,
                rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 8.0}},
                norm_topk_prob=False,
                tie_word_embeddings=True,
            ),
        ),
    ]


def _phixtral_cases() -> List[Case]:
    def phixtral(**over):
        cfg = {
            "model_type": "phixtral",
            "num_vocab": VOCAB,
            "vocab_size": VOCAB,  # read by the prompt maker; phixtral reads num_vocab
            "model_dim": HIDDEN,
            "num_heads": 4,
            "num_layers": 3,
            "rotary_dim": 8,
            "num_experts_per_tok": 2,
            "num_local_experts": 8,
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "phixtral",
            "base",
            "parallel layers behind one LayerNorm; attention from a biased Wqkv, "
            "4 heads of 16, a rope over 8 of each head's features, in float32; "
            "the 2 largest of 8 router logits, a softmax over them, each expert "
            "an ungated fc2(gelu(fc1(x))) of 256 (tanh-approximate GELU) with biases; head lm_head.ln "
            "then lm_head.linear with a bias",
            phixtral(),
        ),
        Case(
            "phi-msft",
            "six_experts",
            "the phi-msft model_type (mlx-lm's remapping to phixtral), 6 experts with two per "
            "token, 8 heads of 8 turned over 4 features",
            phixtral(model_type="phi-msft", num_local_experts=6, num_heads=8, rotary_dim=4),
        ),
    ]


def _plamo_cases() -> List[Case]:
    def plamo(**over):
        cfg = {
            "architectures": ["PlamoForCausalLM"],
            "model_type": "plamo",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "num_hidden_layers": 3,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "n_shared_head": 2,
            "rms_norm_eps": 1e-6,
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "plamo",
            "base",
            "parallel layers behind one RMSNorm; 4 query heads over 2 key-value "
            "heads tiled across them (head h reads h mod 2, n_shared_head 2); "
            "SwiGLU; untied head",
            plamo(),
        ),
        Case(
            "plamo",
            "tiled_four",
            "8 query heads of 8 over 2 key-value heads tiled four times "
            "(n_shared_head 4), a traditional rope of base 500",
            plamo(num_attention_heads=8, n_shared_head=4, rope_traditional=True, rope_theta=500.0),
        ),
    ]


def _openelm_cases() -> List[Case]:
    def openelm(**over):
        cfg = {
            "architectures": ["OpenELMForCausalLM"],
            "model_type": "openelm",
            "vocab_size": VOCAB,
            "model_dim": HIDDEN,
            "num_transformer_layers": 4,
            "head_dim": 16,
            "num_query_heads": [2, 4, 4, 2],
            "num_kv_heads": [1, 2, 1, 2],
            "ffn_multipliers": [0.7, 1.0, 1.5, 2.0],
            "ffn_dim_divisor": 32,
            "rope_freq_constant": 10000,
            "torch_dtype": "bfloat16",
        }
        cfg.update(over)
        return cfg

    return [
        Case(
            "openelm",
            "base",
            "four layers of their own geometry: 2, 4, 4, 2 query heads over 1, 2, 1, "
            "2 kv heads of 16 from one qkv_proj; q and k RMS-normed per head; MLP "
            "widths 64 (0.7 * 64 rounded down to 32 lost more than a tenth: up a "
            "step), 64, 96 and 128, gate and up fused in proj_1; tied head",
            openelm(),
        ),
        Case(
            "openelm",
            "untied_no_qk_norm",
            "normalize_qk_projections false (no q and k norms), an lm_head "
            "(share_input_output_layers false), rope base 500, eps 1e-5",
            openelm(normalize_qk_projections=False, share_input_output_layers=False,
                    rope_freq_constant=500.0, rms_norm_eps=1e-5),
        ),
    ]


CASES: List[Case] = (
    _llama_cases()
    + _smollm3_cases()
    + _qwen2_cases()
    + _qwen3_cases()
    + _gemma_cases()
    + _gemma2_cases()
    + _phi3_cases()
    + _olmo2_cases()
    + _glm4_cases()
    + _granite_cases()
    + _starcoder2_cases()
    + _helium_cases()
    + _ernie4_5_cases()
    + _glm_cases()
    + _internlm3_cases()
    + _mimo_cases()
    + _seed_oss_cases()
    + _telechat3_cases()
    + _exaone_cases()
    + _pixtral_cases()
    + _hunyuan_v1_dense_cases()
    + _stablelm_cases()
    + _nemotron_cases()
    + _qwen2_vl_cases()
    + _qwen3_vl_cases()
    + _qwen3_vl_moe_cases()
    + _mistral3_cases()
    + _gemma3_text_cases()
    + _gemma3_cases()
    + _olmo3_cases()
    + _exaone4_cases()
    + _llama4_text_cases()
    + _moe_cases()
    + _glm4_moe_minimax_cases()
    + _phi_cases()
    + _gptj_cases()
    + _minicpm_cases()
    + _qwen_cases()
    + _lille_cases()
    + _gpt_bigcode_cases()
    + _gpt2_cases()
    + _gpt_neox_cases()
    + _internlm2_cases()
    + _cohere_cases()
    + _cohere2_cases()
    + _apertus_cases()
    + _gpt_oss_cases()
    + _ministral3_cases()
    + _exaone_moe_cases()
    + _phimoe_cases()
    + _hybrid_cases()
    + _plamo2_cases()
    + _baichuan_m1_cases()
    + _gemma4_text_cases()
    + _gemma4_cases()
    + _nanochat_cases()
    + _spark2_5_cases()
    + _openelm_cases()
    + _plamo_cases()
    + _phixtral_cases()
    + _mellum_cases()
    + _laguna_cases()
    + _rwkv7_cases()
    + _bailing_moe_linear_cases()
    + _bailing_moe_cases()
    + _deepseek_v3_cases()
    + _deepseek_v2_cases()
    + _youtu_llm_cases()
    + _minicpm3_cases()
)


@dataclass(frozen=True)
class Level:
    """A precision: the dtype of the floating weights, and affine quantization
    (bits, group_size) or none. Quantized levels start from bfloat16 weights,
    as `mlx_lm.convert --dtype bfloat16 -q` does."""

    name: str
    dtype: str
    bits: int = 0
    group_size: int = 0
    mode: str = "affine"
    # The latent-attention up-projections stored as one quantized
    # kv_b_proj (how mlx-lm converted DeepSeek-V3 before its MultiLinear):
    # the float32 checkpoint's kv_b_proj cast to dtype and quantized at
    # bits and group_size, in place of the quantized embed_q and
    # unembed_out the conversion writes.
    fused_kv_b: bool = False
    # A published layout of another quantizer, written from the float32
    # checkpoint for the 2-D projections of attention and of the dense and
    # shared MLPs (not the experts' stacks, not the router, the embedding
    # or the head): "fp8_tiles", DeepSeek-V3's FP8 (F8_E4M3 codes, a float32
    # weight_scale_inv per 128 x 128 tile, quantization_config quant_method
    # fp8); "int4_packed", compressed-tensors' pack-quantized (Kimi K2's
    # INT4: symmetric 4-bit integers in groups of 32, eight to an int32
    # word, weight_scale and weight_shape beside them). mlx-lm's sanitize
    # reads both, the level's dtype is float32.
    published: str = ""


LEVELS: List[Level] = [
    Level("float32", "float32"),
    Level("bfloat16", "bfloat16"),
    Level("float16", "float16"),
    Level("q8_g64", "bfloat16", 8, 64),
    Level("q8_g32", "bfloat16", 8, 32),
    Level("q4_g64", "bfloat16", 4, 64),
    Level("q4_g32", "bfloat16", 4, 32),
]

# Levels a case asks for by name (Case.extra_levels), beside LEVELS.
EXTRA_LEVELS: Dict[str, Level] = {
    # MLX's mxfp4 mode, as `mlx_lm.convert -q --q-mode mxfp4` makes it from
    # bfloat16: 4-bit floats in groups of 32 with a power-of-two scale, and
    # whatever the model's quant_predicate says instead (gpt-oss's router
    # at 8 bits, affine, group 64).
    "mxfp4": Level("mxfp4", "bfloat16", 4, 32, "mxfp4"),
    # A latent-attention checkpoint whose kv_b_proj is quantized whole
    # (4 bits, groups of 32): mlx-lm's sanitize dequantizes it, splits it
    # and quantizes both parts again at its bits and group size.
    "q4_g32_kv_b": Level("q4_g32_kv_b", "bfloat16", 4, 32, fused_kv_b=True),
    "fp8_tiles": Level("fp8_tiles", "float32", published="fp8_tiles"),
    "int4_packed": Level("int4_packed", "float32", published="int4_packed"),
}
