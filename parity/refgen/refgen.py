"""Makes archgen's parity references with mlx-lm, the reference implementation.

    python parity/refgen/refgen.py generate --out testdata/parity [--levels out/parity]
    python parity/refgen/refgen.py levels --src testdata/parity --out out/parity

`generate` builds every case of cases.py: its config goes through mlx-lm's own
model class, random weights from the case's seed fill it, and mlx-lm's
save_model/save_config write the float32 model dir. Each level (a dtype, and
affine quantization or none) is then derived from that dir the way
`mlx_lm.convert` does it (cast the floating parameters, quantize_model), saved
as a model dir, loaded back with mlx-lm's load_model, and run: the prefill
logits of the case's prompt, and a greedy decode with mlx-lm's prompt cache,
quantized as generate_step's kv_bits does where the case gives a kv_cache
(cross-checked against mlx-lm's own generate_step). The float32 model dir, the
dumps and a refs.json per case are written under --out; the level dirs go to
--levels (a temporary folder when not given).

`levels` derives the level dirs again from the committed float32 dirs, which
is how the Go parity tests get their quantized and bfloat16 checkpoints.

README.md in this folder defines the layout of what both commands write.
"""

import argparse
import contextlib
import hashlib
import io
import json
import multiprocessing
import os
import re
import shutil
import struct
import sys
import tempfile
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
import numpy as np
from mlx.utils import tree_flatten, tree_map, tree_map_with_path, tree_unflatten
from mlx_lm.generate import generate_step, maybe_quantize_kv_cache
from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear
from mlx_lm.models.cache import (
    ChunkedKVCache,
    ConcatenateKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    make_prompt_cache,
)
from mlx_lm.utils import (
    _get_classes,
    load_model,
    quantize_model,
    save_config,
    save_model,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import CASES, DECODE_STEPS, EXTRA_LEVELS, LEVELS, PROMPT_LEN, Case, Level  # noqa: E402

# Bumped when the layout of what this script writes changes.
FORMAT = 1

# Scales of the random weights, chosen so that a wrong formula shows in the
# logits: norm weights spread around 1 (never all ones), biases clearly
# nonzero, linear weights ~1/sqrt(fan_in) so activations stay O(1), and an
# output head wide enough that greedy picks are not near-ties.
NORM_WEIGHT_SPREAD = 0.3
NORM_BIAS_STD = 0.2
LINEAR_BIAS_STD = 0.3
CORRECTION_BIAS_STD = 0.05
SINK_STD = 1.0
HEAD_GAIN = 3.0
DT_BIAS_SPREAD = 0.5
D_SPREAD = 0.5
# An activation's learned scalars (XieLU's alpha_p, alpha_n, beta) move this
# far from mlx-lm's initial values; an eps stays at its own.
ACT_SCALAR_SPREAD = 0.3
# A per-head, per-channel scale of a recurrence (RWKV-7's k_k, k_a and r_k)
# spreads this far around its centre.
HEAD_SCALE_SPREAD = 0.3


def versions():
    return {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__}


def case_seed(case: Case) -> int:
    return zlib.crc32(case.key.encode())


def case_prompt(case: Case):
    """A fixed token sequence per case, drawn from the case's seed."""
    rng = np.random.default_rng([case_seed(case), 0])
    vocab = case.config.get("text_config", case.config)["vocab_size"]
    return [int(t) for t in rng.integers(3, vocab, size=PROMPT_LEN)]


def _norm_modules(model):
    return {
        path
        for path, module in model.named_modules()
        if type(module).__name__.endswith(("Norm", "NormGated", "NormPerHead"))
        or isinstance(module, (nn.LayerNorm, nn.RMSNorm))
    }


def random_weights(model, seed: int):
    """Random values for every parameter of an mlx-lm model, by its path.

    Each tensor draws from its own generator seeded by (case seed, path), so
    a tensor's values do not depend on the order of the others.
    """
    norms = _norm_modules(model)
    out = {}
    for path, p in tree_flatten(model.parameters()):
        rng = np.random.default_rng([seed, zlib.crc32(path.encode())])
        module, _, leaf = path.rpartition(".")
        shape = tuple(p.shape)
        z = rng.standard_normal(shape, dtype=np.float32)
        if module in norms:
            if leaf == "weight":
                v = 1.0 + NORM_WEIGHT_SPREAD * z
            elif leaf == "bias":
                v = NORM_BIAS_STD * z
            else:
                raise ValueError(f"unexpected norm parameter {path}")
        elif leaf in ("conv_k", "conv_v") and len(shape) == 5:
            # keys' and values' convolution over time, [1, 1, kv heads, 1,
            # taps]: each head's taps as a linear over them (mlx-lm starts
            # them at zero, which would zero every key)
            v = z * np.float32(1.0 / np.sqrt(shape[-1]))
        elif leaf.endswith("_norm_weight") or leaf in ("q_weight", "k_weight"):
            # a norm's weight held bare by the module that applies it (the
            # scan's B, C and dt norms; per-head q and k scales [heads, dim])
            v = 1.0 + NORM_WEIGHT_SPREAD * z
        elif leaf == "weight" and len(shape) == 2:
            if module.endswith(("embed_tokens", "embd.wte")):
                # token embeddings of unit scale (phixtral's table is
                # embd.wte), above the biases every layer adds to all
                # tokens alike
                v = z
            else:
                gain = HEAD_GAIN if module == "lm_head" else 1.0
                v = z * np.float32(gain / np.sqrt(shape[1]))
        elif leaf == "bias" and len(shape) == 1:
            v = LINEAR_BIAS_STD * z
        elif leaf == "weight" and len(shape) == 3 and shape[2] == 1:
            # a depthwise short convolution [channels, taps, 1]: each
            # channel's taps as a linear over them
            v = z * np.float32(1.0 / np.sqrt(shape[1]))
        elif leaf == "A_log" and len(shape) in (1, 2):
            # a recurrence's decay rate per head (or per channel and state,
            # Mamba's), log A with A in [1, 16) (mlx-lm draws A from [0, 16))
            v = np.log(rng.uniform(1.0, 16.0, shape)).astype(np.float32)
        elif leaf == "dt_bias" and len(shape) == 1:
            # the time step's bias per head, around mlx-lm's 1
            v = 1.0 + DT_BIAS_SPREAD * z
        elif leaf == "D" and len(shape) == 1:
            # a state-space layer's skip connection per head, around
            # mlx-lm's 1
            v = 1.0 + D_SPREAD * z
        elif leaf.endswith("_gate_weight") and len(shape) == 3:
            # block-diagonal gates [heads, in, out] (the RG-LRU's), x times
            # each block: each as a linear over its input
            v = z * np.float32(1.0 / np.sqrt(shape[1]))
        elif leaf.endswith("_gate_bias") and len(shape) == 2:
            # their biases [heads, out]
            v = LINEAR_BIAS_STD * z
        elif leaf == "recurrent_param" and len(shape) == 1:
            # the RG-LRU's Λ: softplus(Λ) set so that, at a gate of 1/2, the
            # decay exp(-4 softplus(Λ)) lies in [0.5, 0.99]: the state both
            # carries and forgets over the prompt
            a = rng.uniform(0.5, 0.99, shape)
            v = np.log(np.expm1(-np.log(a) / 4.0)).astype(np.float32)
        elif leaf == "weight" and len(shape) == 3:
            # stacked experts [E, out, in]: each expert as a linear
            v = z * np.float32(1.0 / np.sqrt(shape[2]))
        elif leaf in ("e_score_correction_bias", "expert_bias") and len(shape) == 1:
            # a router's correction bias, on sigmoid scores in (0, 1): small
            # enough that it reorders near scores without routing every
            # token to a few experts
            v = CORRECTION_BIAS_STD * z
        elif leaf == "sinks" and len(shape) == 1:
            # attention sinks, a logit per head: of the scores' size, so
            # that they take a real share of each softmax
            v = SINK_STD * z
        elif leaf == "bias" and len(shape) == 2:
            # the experts' biases [E, out]
            v = LINEAR_BIAS_STD * z
        elif leaf.startswith("x_") and shape[-1] > 1 and all(d == 1 for d in shape[:-1]):
            # a token shift's mix per channel (RWKV's x_r, x_k, ...): a
            # weight between the token and the one before it, in [0, 1)
            v = rng.uniform(0.0, 1.0, shape).astype(np.float32)
        elif leaf in ("k_k", "k_a") and len(shape) == 2:
            # a per-head key scale [heads, head_dim], around 1
            v = 1.0 + HEAD_SCALE_SPREAD * z
        elif leaf == "r_k" and len(shape) == 2:
            # the per-head bonus of the current token [heads, head_dim]
            v = HEAD_SCALE_SPREAD * z
        elif leaf in ("scale", "per_expert_scale") and len(shape) == 1 and ".router." in path:
            # a router's learned gains, on its input's channels (scale) and
            # on each expert's weight (per_expert_scale): around mlx-lm's 1,
            # never exactly it
            v = 1.0 + NORM_WEIGHT_SPREAD * z
        elif leaf == "layer_scalar" and shape == (1,):
            # a learned gain on a layer's whole output, [1]: around
            # mlx-lm's 1, never exactly it
            v = 1.0 + NORM_WEIGHT_SPREAD * z
        elif len(shape) == 0:
            v = np.array(p, dtype=np.float32)
            if leaf != "eps":
                v = v + ACT_SCALAR_SPREAD * z
        else:
            raise ValueError(f"no initialization rule for parameter {path} {shape}")
        out[path] = mx.array(v.astype(np.float32))
    return out


def build_model_dir(case: Case, dst: Path):
    """The case's float32 checkpoint, made and saved by mlx-lm."""
    config = json.loads(json.dumps(case.config))
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    model.update(tree_unflatten(list(random_weights(model, case_seed(case)).items())))
    for path in case.without:
        parent, _, name = path.rpartition(".")
        owner = model
        for part in parent.split(".") if parent else []:
            owner = owner[part]
        owner.pop(name)
    mx.eval(model.parameters())
    save_model(dst, model)
    save_config(config, config_path=dst / "config.json")
    if case.layout is not None:
        relayout(dst, case)


def relayout(dst: Path, case: Case):
    """Renames the tensors of the saved float32 checkpoint to the case's
    published layout and adds the towers loading drops (random float32
    values seeded like the parameters), rewriting the index to match."""
    seed = case_seed(case)
    path = dst / "model.safetensors"
    saved = mx.load(str(path))
    out = {}
    for name, value in saved.items():
        if value.ndim in (2, 3) and any(t in name for t in case.layout.transposed):
            value = mx.contiguous(mx.swapaxes(value, -2, -1))
        for old, new in case.layout.rename:
            if name.startswith(old):
                name = new + name[len(old):]
                break
        out[name] = value
    if case.layout.fused_kv_b:
        out = fuse_kv_b(out, case.config)
    if case.layout.transposed_experts:
        out = transpose_experts(out)
    if case.layout.fused_experts:
        out = fuse_experts(out, case.layout.fused_experts)
    for name, shape in case.layout.towers:
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        out[name] = mx.array(rng.standard_normal(shape, dtype=np.float32))
    fused = sum(1 for k in out if k.endswith(".kv_b_proj.weight")) + sum(1 for k in out if k.endswith(".experts.gate_up_proj"))
    if len(out) + fused != len(saved) + len(case.layout.towers):
        raise ValueError(f"{case.key}: the layout maps two tensors to one name")
    out = {k: out[k] for k in sorted(out)}
    mx.save_safetensors(str(path), out, metadata={"format": "pt"})
    index_path = dst / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["metadata"]["total_size"] = sum(v.nbytes for v in out.values())
    index["weight_map"] = {k: "model.safetensors" for k in out}
    index_path.write_text(json.dumps(index, indent=4))


def fuse_kv_b(tensors, config):
    """tensors with each latent-attention layer's embed_q [heads, rank,
    nope] and unembed_out [heads, value, rank] stored as Hugging Face's
    kv_b_proj [heads * (nope + value), rank]: per head, the key rows
    (embed_q transposed) then the value rows."""
    out = {}
    for name, value in tensors.items():
        if name.endswith(".embed_q.weight"):
            prefix = name[: -len("embed_q.weight")]
            k = mx.swapaxes(value, -1, -2)
            v = tensors[prefix + "unembed_out.weight"]
            kv = mx.concatenate([k, v], axis=1)
            out[prefix + "kv_b_proj.weight"] = mx.contiguous(kv.reshape(-1, kv.shape[-1]))
        elif not name.endswith(".unembed_out.weight"):
            out[name] = value
    return out


def fuse_experts(tensors, module):
    """tensors with the stacked experts under module (gate_proj, up_proj
    and down_proj, [E, out, in]) stored as Hugging Face's Gemma 4 stores
    them, under module's parent: experts.gate_up_proj, the gate's and up's
    matrices stacked by rows ([E, 2 * out, in]), and experts.down_proj, with
    no .weight suffix."""
    parent = module.rpartition(".")[0]
    out = {}
    for name, value in tensors.items():
        if name.endswith(f".{module}.gate_proj.weight"):
            prefix = name[: -len(f"{module}.gate_proj.weight")]
            up = tensors[prefix + f"{module}.up_proj.weight"]
            out[prefix + f"{parent}.gate_up_proj"] = mx.contiguous(mx.concatenate([value, up], axis=-2))
        elif name.endswith(f".{module}.down_proj.weight"):
            prefix = name[: -len(f"{module}.down_proj.weight")]
            out[prefix + f"{parent}.down_proj"] = value
        elif not name.endswith(f".{module}.up_proj.weight"):
            out[name] = value
    return out


def transpose_experts(tensors):
    """tensors with each sparse layer's switch_mlp gate_proj, up_proj and
    down_proj ([E, out, in]) stored as transformers' Qwen3-VL-MoE stores
    them: experts.gate_up_proj, the gate's and up's matrices transposed and
    side by side ([E, in, 2 * out]), and experts.down_proj transposed."""
    out = {}
    for name, value in tensors.items():
        if name.endswith(".switch_mlp.gate_proj.weight"):
            prefix = name[: -len("switch_mlp.gate_proj.weight")]
            up = tensors[prefix + "switch_mlp.up_proj.weight"]
            gate_up = mx.concatenate([mx.swapaxes(value, -1, -2), mx.swapaxes(up, -1, -2)], axis=-1)
            out[prefix + "experts.gate_up_proj"] = mx.contiguous(gate_up)
        elif name.endswith(".switch_mlp.down_proj.weight"):
            prefix = name[: -len("switch_mlp.down_proj.weight")]
            out[prefix + "experts.down_proj"] = mx.contiguous(mx.swapaxes(value, -1, -2))
        elif not name.endswith(".switch_mlp.up_proj.weight"):
            out[name] = value
    return out


def convert(model, config, dtype_name: str, bits: int, group_size: int, mode: str = "affine"):
    """What mlx_lm.convert does to a loaded model: cast the floating
    parameters the model lets cast to dtype_name, then quantize (in mode,
    affine unless a level says otherwise) when bits is not 0. Returns the
    model and its updated config."""
    dtype = getattr(mx, dtype_name)
    cast_predicate = getattr(model, "cast_predicate", lambda _: True)

    def set_dtype(k, v):
        if cast_predicate(k) and mx.issubdtype(v.dtype, mx.floating):
            return v.astype(dtype)
        return v

    model.update(tree_map_with_path(set_dtype, model.parameters()))
    if bits:
        with contextlib.redirect_stdout(io.StringIO()):
            model, config = quantize_model(model, config, group_size, bits, mode=mode)
    return model, config


def derive_level(src: Path, level: Level, dst: Path):
    """A level's checkpoint from the float32 one, as mlx_lm.convert makes it:
    load, cast the floating parameters the model lets cast, quantize. The
    float32 level is the float32 checkpoint itself, copied byte for byte (for
    most cases what loading and saving it writes too; a case with a
    published layout keeps its names and towers there)."""
    if level.dtype == "float32" and not level.bits:
        shutil.copytree(src, dst)
        if level.published:
            write_published(dst, level.published)
        return
    model, config = load_model(src)
    model, config = convert(model, config, level.dtype, level.bits, level.group_size, level.mode)
    save_model(dst, model)
    save_config(config, config_path=dst / "config.json")
    if level.fused_kv_b:
        quantize_kv_b(src, level, dst)


# The 2-D projections a published quantizer's layout stores quantized.
_PUBLISHED_PROJ = re.compile(r"\.(self_attn|mlp|mlp\.shared_experts)\.[a-z_]+_proj\.weight$")


def write_published(dst: Path, layout: str):
    """Rewrites the float32 checkpoint in dst into a published quantizer's
    layout (Level.published), with the config's quantization_config."""
    path = dst / "model.safetensors"
    saved = mx.load(str(path))
    out, fp8 = {}, []
    for name, w in saved.items():
        if w.ndim != 2 or not _PUBLISHED_PROJ.search(name):
            out[name] = w
            continue
        base = name[: -len("weight")]
        if layout == "fp8_tiles":
            m, n = w.shape
            tm, tn = -(-m // 128), -(-n // 128)
            padded = mx.pad(w, ((0, tm * 128 - m), (0, tn * 128 - n)))
            tiles = padded.reshape(tm, 128, tn, 128)
            scale = mx.max(mx.abs(tiles), axis=(1, 3)) / 448.0
            scale = mx.where(scale > 0, scale, 1.0)
            codes = mx.to_fp8(tiles / scale[:, None, :, None]).reshape(tm * 128, tn * 128)[:m, :n]
            out[name] = mx.contiguous(codes)
            out[name + "_scale_inv"] = scale.astype(mx.float32)
            fp8.append(name)
        elif layout == "int4_packed":
            rows, cols = w.shape
            groups = w.reshape(rows, cols // 32, 32)
            scale = mx.max(mx.abs(groups), axis=-1) / 7.0
            scale = mx.where(scale > 0, scale, 1.0)
            q = mx.clip(mx.round(groups / scale[..., None]), -8, 7) + 8
            q = q.astype(mx.uint32).reshape(rows, cols // 8, 8)
            shifts = mx.arange(8, dtype=mx.uint32) * 4
            words = mx.sum(q << shifts, axis=-1).astype(mx.uint32)
            out[base + "weight_packed"] = mx.contiguous(words.view(mx.int32))
            out[base + "weight_scale"] = scale.astype(mx.float32)
            out[base + "weight_shape"] = mx.array([rows, cols], dtype=mx.int32)
        else:
            raise ValueError(f"unknown published layout {layout!r}")
    out = {k: out[k] for k in sorted(out)}
    mx.save_safetensors(str(path), out, metadata={"format": "pt"})
    if fp8:
        mark_fp8(path, fp8)
    index_path = dst / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["metadata"]["total_size"] = sum(v.nbytes for v in out.values())
    index["weight_map"] = {k: "model.safetensors" for k in out}
    index_path.write_text(json.dumps(index, indent=4))
    config_path = dst / "config.json"
    config = json.loads(config_path.read_text())
    if layout == "fp8_tiles":
        config["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
    else:
        config["quantization_config"] = {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}}},
        }
    config_path.write_text(json.dumps(config, indent=4))


def mark_fp8(path: Path, names):
    """Rewrites the safetensors header of path so the named uint8 tensors are
    F8_E4M3, as an FP8 checkpoint stores its codes (the data unchanged)."""
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    for name in names:
        if header[name]["dtype"] != "U8":
            raise ValueError(f"{path}: {name} is {header[name]['dtype']}, want U8")
        header[name]["dtype"] = "F8_E4M3"
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data[8 + n :])


def quantize_kv_b(src: Path, level: Level, dst: Path):
    """Replaces the quantized embed_q and unembed_out of the level's
    checkpoint by src's kv_b_proj (the float32 checkpoint's, in Hugging
    Face's layout) cast to the level's dtype and quantized whole at its bits
    and group size, rewriting the index to match."""
    fused = {k: v for k, v in mx.load(str(src / "model.safetensors")).items() if k.endswith(".kv_b_proj.weight")}
    if not fused:
        raise ValueError(f"{src}: no kv_b_proj to quantize (the case needs the fused_kv_b layout)")
    path = dst / "model.safetensors"
    saved = mx.load(str(path))
    out = {k: v for k, v in saved.items() if ".embed_q." not in k and ".unembed_out." not in k}
    for name, w in fused.items():
        prefix = name[: -len("weight")]
        q, scales, biases = mx.quantize(w.astype(getattr(mx, level.dtype)), level.group_size, level.bits)
        out[prefix + "weight"], out[prefix + "scales"], out[prefix + "biases"] = q, scales, biases
    out = {k: out[k] for k in sorted(out)}
    mx.save_safetensors(str(path), out, metadata={"format": "mlx"})
    index_path = dst / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["metadata"]["total_size"] = sum(v.nbytes for v in out.values())
    index["weight_map"] = {k: "model.safetensors" for k in out}
    index_path.write_text(json.dumps(index, indent=4))


class DequantizingKVCache(QuantizedKVCache):
    """mlx-lm's QuantizedKVCache, handing attention its keys and values
    dequantized (mx.dequantize of the very triples it stores).

    Attention written out by hand in mlx-lm (gemma2's, for its soft cap)
    cannot read a quantized cache's triples: with kv_bits its generate_step
    fails there (expand_dims on a list). Everything else, when the cache
    switches, what it quantizes and how, stays mlx-lm's; the scores are then
    q @ dequantize(k)^T, what a quantized matmul on the triples computes up
    to the order of its float operations."""

    def update_and_fetch(self, keys, values):
        k, v = super().update_and_fetch(keys, values)
        return (
            mx.dequantize(*k, group_size=self.group_size, bits=self.bits),
            mx.dequantize(*v, group_size=self.group_size, bits=self.bits),
        )


class SwitchingKVCache(KVCache):
    """mlx-lm's KVCache, converted by maybe_quantize_kv_cache into a
    DequantizingKVCache of the same contents as its to_quantized makes."""

    def to_quantized(self, group_size: int = 64, bits: int = 4):
        q = super().to_quantized(group_size=group_size, bits=bits)
        out = DequantizingKVCache(group_size=group_size, bits=bits)
        out.keys, out.values, out.offset = q.keys, q.values, q.offset
        return out


def decode_cache(model, kv_cache):
    """The caches a decode starts with: mlx-lm's make_prompt_cache, or with
    kv_cache, SwitchingKVCaches where it makes plain KVCaches."""
    cache = make_prompt_cache(model)
    if kv_cache is None:
        return cache
    if any(type(c) is not KVCache for c in cache):
        raise ValueError("a quantized KV cache case needs plain KVCaches on every layer")
    return [SwitchingKVCache() for _ in cache]


def kv_quantizer(kv_cache):
    """What generate_step does to the caches after each model call: with
    kv_cache (kv_bits, kv_group_size, quantized_kv_start), quantize them
    once their offset reaches the start; without, nothing."""
    kv = kv_cache or {}

    def quantize(cache):
        maybe_quantize_kv_cache(
            cache,
            quantized_kv_start=kv.get("quantized_kv_start", 0),
            kv_group_size=kv.get("kv_group_size", 64),
            kv_bits=kv.get("kv_bits"),
        )

    return quantize


def run_level(level_dir: Path, prompt, kv_cache=None):
    """Loads a level's dir with mlx-lm and records what mlx-lm computes.

    Logits keep the dtype mlx-lm returns them in (float32 for the float32
    level, bfloat16 for the others), so each stored value is exactly mlx-lm's.
    With kv_cache (the case's kv_bits, kv_group_size, quantized_kv_start) the
    decode quantizes its KV cache as generate_step does.
    """
    model, _ = load_model(level_dir)
    tokens = mx.array(prompt, dtype=mx.int32)[None]
    quantize = kv_quantizer(kv_cache)

    # Prefill: the whole prompt in one call, no cache.
    prefill = model(tokens)[0]

    # Greedy decode as generate_step runs it: prompt[:-1] into the cache in one
    # call, then the last prompt token, then each picked token, one at a time,
    # the cache quantized after each call once its offset reaches the start.
    cache = decode_cache(model, kv_cache)
    model(tokens[:, :-1], cache=cache)
    quantize(cache)
    mx.eval([c.state for c in cache])
    logits = model(tokens[:, -1:], cache=cache)[0, -1]
    quantize(cache)
    picked, rows, logprob_rows = [], [], []
    for step in range(DECODE_STEPS):
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        tok = mx.argmax(logprobs, axis=-1)
        mx.eval(tok, logits, logprobs)
        picked.append(int(tok.item()))
        rows.append(logits)
        logprob_rows.append(logprobs)
        if step + 1 < DECODE_STEPS:
            logits = model(tok.reshape(1, 1), cache=cache)[0, -1]
            quantize(cache)
    decode = mx.stack(rows)
    mx.eval(prefill, decode)
    if kv_cache is not None and not any(
        isinstance(c, QuantizedKVCache) for c in cache
    ):
        raise RuntimeError(f"{level_dir}: the KV cache never switched to quantized")

    # mlx-lm's own generation loop must agree token for token.
    theirs, their_logprobs = [], []
    extra = {}
    if kv_cache is not None:
        extra = dict(kv_cache, prompt_cache=decode_cache(model, kv_cache))
    for tok, lp in generate_step(
        mx.array(prompt, dtype=mx.int32), model, max_tokens=DECODE_STEPS, **extra
    ):
        theirs.append(int(tok.item()) if isinstance(tok, mx.array) else int(tok))
        their_logprobs.append(lp)
    if theirs != picked:
        raise RuntimeError(
            f"{level_dir}: the decode loop picked {picked}, generate_step {theirs}"
        )
    for step, (a, b) in enumerate(zip(logprob_rows, their_logprobs)):
        if not mx.array_equal(a, b).item():
            raise RuntimeError(
                f"{level_dir}: step {step} logprobs differ from generate_step's"
            )

    pre = np.array(prefill.astype(mx.float32))
    dec = np.array(decode.astype(mx.float32))
    top2 = np.sort(dec, axis=-1)[:, -2:]
    stats = {
        "logits_dtype": str(prefill.dtype).removeprefix("mlx.core."),
        "prefill_absmax": float(np.abs(pre).max()),
        "prefill_std": float(pre.std()),
        "decode_tokens": picked,
        # top-1 minus top-2 logit at each step: how near a tie each pick was
        "decode_margins": [float(m) for m in top2[:, 1] - top2[:, 0]],
    }
    dumps = {
        "prompt": mx.array(prompt, dtype=mx.int32),
        "prefill_logits": prefill,
        "decode_tokens": mx.array(picked, dtype=mx.int32),
        "decode_logits": decode,
    }
    return dumps, stats


def case_levels(case: Case):
    """The levels a case runs at: LEVELS but those it leaves out, then its own
    extra levels."""
    return [l for l in LEVELS if l.name not in case.without_levels] + [EXTRA_LEVELS[name] for name in case.extra_levels]


def quantization_summary(level_dir: Path):
    config = json.loads((level_dir / "config.json").read_text())
    return config.get("quantization")


def to_json(obj, indent=0):
    """JSON with one key per line and lists of numbers or strings on one line."""
    pad = "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [
            f"{pad}{json.dumps(k)}: {to_json(v, indent + 1)}" for k, v in obj.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [f"{pad}{to_json(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + "  " * indent + "]"
    return json.dumps(obj)


def write_json(path: Path, obj):
    path.write_text(to_json(obj) + "\n")


def generate(out: Path, levels_out: Path, only=None):
    out.mkdir(parents=True, exist_ok=True)
    index = {
        "format": FORMAT,
        **versions(),
        "prompt_len": PROMPT_LEN,
        "decode_steps": DECODE_STEPS,
        "levels": [
            {
                "name": lv.name,
                "dtype": lv.dtype,
                "bits": lv.bits,
                "group_size": lv.group_size,
            }
            for lv in LEVELS
        ],
        # Every case of the table, whichever are remade: the index is a
        # function of cases.py, so remaking a few (--only) keeps it whole.
        "cases": [{"arch": c.arch, "case": c.name, "doc": c.doc} for c in CASES],
    }
    keys = [c.key for c in CASES if not only or c.key in only]
    for printed in in_workers(generate_case, [(k, out, levels_out) for k in keys]):
        print(printed, end="", flush=True)
    write_json(out / "index.json", index)


def generate_case(job):
    """One case of generate: its float32 checkpoint, its levels under
    levels_out, and its references under out; job is (case key, out,
    levels_out). Returns what it printed."""
    key, out, levels_out = job
    case = next(c for c in CASES if c.key == key)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        case_dir = out / case.arch / case.name
        if case_dir.exists():
            shutil.rmtree(case_dir)
        model_dir = case_dir / "model"
        build_model_dir(case, model_dir)
        prompt = case_prompt(case)
        refs = {
            "format": FORMAT,
            **versions(),
            "arch": case.arch,
            "case": case.name,
            "model_type": case.config["model_type"],
            "doc": case.doc,
            "seed": case_seed(case),
            "prompt": prompt,
            "decode_calls": [PROMPT_LEN - 1] + [1] * DECODE_STEPS,
        }
        if case.kv_cache is not None:
            refs["kv_cache"] = case.kv_cache
        refs["levels"] = {}
        for level in LEVELS:
            if level.name in case.without_levels:
                # the oracle's run of it is wrong: no reference
                refs["levels"][level.name] = {
                    "dtype": level.dtype,
                    "bits": level.bits,
                    "group_size": level.group_size,
                    "left_out": case.left_out,
                }
        for level in case_levels(case):
            level_dir = levels_out / case.arch / case.name / level.name
            if level_dir.exists():
                shutil.rmtree(level_dir)
            derive_level(model_dir, level, level_dir)
            try:
                dumps, stats = run_level(level_dir, prompt, case.kv_cache)
            except RuntimeError as e:
                # mlx itself cannot run this level (on the CPU, gather_mm
                # takes float32 only): the reference is that refusal.
                refs["levels"][level.name] = {
                    "dtype": level.dtype,
                    "bits": level.bits,
                    "group_size": level.group_size,
                    "mlx_lm_refuses": str(e),
                }
                print(f"{case.key:30s} {level.name:9s} mlx-lm refuses: {e}", flush=True)
                continue
            mx.save_safetensors(
                str(case_dir / f"{level.name}.safetensors"),
                dumps,
                metadata={
                    "format": "archgen-parity",
                    "case": case.key,
                    "level": level.name,
                    **versions(),
                },
            )
            refs["levels"][level.name] = {
                "dtype": level.dtype,
                "bits": level.bits,
                "group_size": level.group_size,
                **({"mode": level.mode} if level.mode != "affine" else {}),
                "quantization": quantization_summary(level_dir),
                **stats,
            }
            print(
                f"{case.key:30s} {level.name:9s} min margin "
                f"{min(stats['decode_margins']):8.4f} tokens {stats['decode_tokens']}",
                flush=True,
            )
        write_json(case_dir / "refs.json", refs)
    return buf.getvalue()


def levels_key(src: Path) -> str:
    """What the level dirs are derived from: the committed float32 dirs, the
    index, this script and the case table, and the mlx and mlx-lm versions."""
    h = hashlib.sha256(json.dumps(versions(), sort_keys=True).encode())
    here = Path(__file__).resolve().parent
    inputs = [src / "index.json", here / "refgen.py", here / "cases.py"]
    inputs += sorted(src.glob("*/*/model/*"))
    for path in inputs:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def levels(src: Path, out: Path):
    """Derives every level dir from the committed float32 dirs into out; a
    no-op when out already holds them for the same inputs."""
    key = levels_key(src)
    stamp = out / ".derived"
    index = json.loads((src / "index.json").read_text())
    extra = {c.key: c.extra_levels for c in CASES}
    names = {
        (entry["arch"], entry["case"]): [lv["name"] for lv in index["levels"]]
        + extra.get(f"{entry['arch']}/{entry['case']}", [])
        for entry in index["cases"]
    }
    dirs = [out / a / c / name for (a, c), ns in names.items() for name in ns]
    if (
        stamp.is_file()
        and stamp.read_text().strip() == key
        and all((d / "config.json").is_file() for d in dirs)
    ):
        return
    if out.exists():
        shutil.rmtree(out)
    jobs = [(src / arch / case / "model", name, out / arch / case / name) for (arch, case), ns in names.items() for name in ns]
    in_workers(derive_level_job, jobs)
    stamp.write_text(key + "\n")
    print(f"refgen: derived {len(index['cases'])} cases x {len(index['levels'])} "
          f"levels into {out}")


def derive_level_job(job):
    """derive_level of job, (model dir, level name, level dir)."""
    model_dir, name, level_dir = job
    by_name = {lv.name: lv for lv in LEVELS}
    by_name.update(EXTRA_LEVELS)
    derive_level(model_dir, by_name[name], level_dir)


def jobs_wanted() -> int:
    """How many worker processes take the per-case work: ARCHGEN_REFGEN_JOBS,
    or one per CPU."""
    env = os.environ.get("ARCHGEN_REFGEN_JOBS", "")
    if env:
        n = int(env)
        if n < 1:
            raise ValueError(f"ARCHGEN_REFGEN_JOBS={env}: want a count of at least 1")
        return n
    return os.cpu_count() or 1


def in_workers(fn, jobs):
    """[fn(j) for j in jobs], in order, fanned out to fresh worker processes
    (each job is independent: its own files, its own seeds), or in this one
    where one worker is wanted."""
    n = min(jobs_wanted(), len(jobs))
    if n <= 1:
        return [fn(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as ex:
        return list(ex.map(fn, jobs, chunksize=1))


def upcast(model):
    """model with every floating parameter cast to float32 (exactly): the
    same weights, computed in float32. Packed quantized weights and mxfp4's
    uint8 scales are no floats and stay as they are."""

    def widen(v):
        if mx.issubdtype(v.dtype, mx.floating) and v.dtype != mx.float32:
            return v.astype(mx.float32)
        return v

    model.update(tree_map(widen, model.parameters()))
    mx.eval(model.parameters())
    return model


def decode_rows(model, prompt, kv_cache=None, force=None):
    """The greedy decode of run_level (generate_step's chunking and cache
    quantization), as float32 rows: its picks and the logits of each; with
    force, step i feeds force[i] instead of its own pick (teacher forcing),
    so that every step has force's history."""
    quantize = kv_quantizer(kv_cache)

    tokens = mx.array(prompt, dtype=mx.int32)[None]
    cache = decode_cache(model, kv_cache)
    model(tokens[:, :-1], cache=cache)
    quantize(cache)
    logits = model(tokens[:, -1:], cache=cache)[0, -1]
    quantize(cache)
    picked, rows = [], []
    for step in range(DECODE_STEPS):
        tok = mx.argmax(logits - mx.logsumexp(logits, keepdims=True), axis=-1)
        mx.eval(tok, logits)
        picked.append(int(tok.item()))
        rows.append(logits.astype(mx.float32))
        if step + 1 < DECODE_STEPS:
            feed = picked[-1] if force is None else force[step]
            logits = model(mx.array([[feed]], dtype=mx.int32), cache=cache)[0, -1]
            quantize(cache)
    decode = mx.stack(rows)
    mx.eval(decode)
    return picked, decode


FLOAT32_RUN = "float32-run.safetensors"

# mlx-lm's caches whose update_and_fetch stores a step's keys and values.
STORING_CACHES = (KVCache, RotatingKVCache, ChunkedKVCache, ConcatenateKVCache, QuantizedKVCache)


@contextlib.contextmanager
def caches_holding(dtype):
    """mlx-lm's caches storing each step's keys and values cast to dtype
    (a quantized cache quantizing them from there), and handing attention
    what they store, as archgen's caches hold them under float32 compute on
    a half-precision checkpoint (nn.Params.CacheDtype)."""
    saved = {cls: cls.__dict__["update_and_fetch"] for cls in STORING_CACHES}

    def cast(update):
        def update_and_fetch(self, keys, values):
            return update(self, keys.astype(dtype), values.astype(dtype))

        return update_and_fetch

    for cls, update in saved.items():
        cls.update_and_fetch = cast(update)
    try:
        yield
    finally:
        for cls, update in saved.items():
            cls.update_and_fetch = update


def half_dtype(model):
    """The half-precision dtype that holds most of model's parameter bytes
    (bfloat16 on a tie), or None, and None in a model that routes tokens to
    experts: archgen's rule for the dtype its caches hold under float32
    compute (nn.Params.CacheDtype)."""
    if any(isinstance(m, (SwitchLinear, QuantizedSwitchLinear)) for m in model.modules()):
        return None
    held = {mx.bfloat16: 0, mx.float16: 0}
    for _, v in tree_flatten(model.parameters()):
        if v.dtype in held:
            held[v.dtype] += v.nbytes
    if not any(held.values()):
        return None
    return mx.float16 if held[mx.float16] > held[mx.bfloat16] else mx.bfloat16


def float32_run(level_dir: Path, prompt, kv_cache=None):
    """What mlx-lm computes in float32 on a level's weights (its floating
    parameters widened to float32), and how far its own run at the level's
    dtype is from that: the tensors of FLOAT32_RUN.

    prefill_logits, decode_tokens, decode_logits: the float32 run, as
    run_level records a level (float32 logits). level_prefill_logits and
    level_decode_logits: mlx-lm at the level's own dtype, its decode fed the
    float32 run's picks, so that each of its rows has the float32 run's
    history; absent where mlx-lm cannot run the level.

    cache_prefill_logits and cache_decode_logits: the float32 run again with
    its caches holding keys and values in the level's half-precision dtype
    (caches_holding(half_dtype)), the prefill through a cache, the decode
    fed the float32 run's picks: what rounding the cache alone costs, as
    mlx-lm computes it; absent where the level holds no half-precision
    parameter."""
    tokens = mx.array(prompt, dtype=mx.int32)[None]
    level_model, _ = load_model(level_dir)
    held = half_dtype(level_model)
    model = upcast(load_model(level_dir)[0])
    prefill = model(tokens)[0].astype(mx.float32)
    picked, decode = decode_rows(model, prompt, kv_cache)
    out = {
        "prompt": mx.array(prompt, dtype=mx.int32),
        "prefill_logits": prefill,
        "decode_tokens": mx.array(picked, dtype=mx.int32),
        "decode_logits": decode,
    }
    if held is not None:
        with caches_holding(held):
            cache_prefill = model(tokens, cache=make_prompt_cache(model))[0].astype(mx.float32)
            _, cache_decode = decode_rows(model, prompt, kv_cache, force=picked)
            mx.eval(cache_prefill, cache_decode)
        out["cache_prefill_logits"] = cache_prefill
        out["cache_decode_logits"] = cache_decode
    del model
    try:
        level_prefill = level_model(tokens)[0].astype(mx.float32)
        _, level_decode = decode_rows(level_model, prompt, kv_cache, force=picked)
        mx.eval(level_prefill)
    except RuntimeError:
        return out  # mlx-lm refuses the level (gather_mm on the CPU)
    out["level_prefill_logits"] = level_prefill
    out["level_decode_logits"] = level_decode
    return out


def float32_run_job(job):
    """float32_run of job, (level dir, case key, level name, prompt, kv cache
    options), saved beside the level as FLOAT32_RUN."""
    level_dir, key, name, prompt, kv_cache = job
    dumps = float32_run(level_dir, prompt, kv_cache)
    mx.save_safetensors(
        str(level_dir / FLOAT32_RUN),
        dumps,
        metadata={
            "format": "archgen-parity-float32-run",
            "case": key,
            "level": name,
            **versions(),
        },
    )


def float32_runs_key(src: Path) -> str:
    return levels_key(src) + "-float32-runs"


def float32_runs(src: Path, out: Path):
    """For every case and every level but float32, float32_run of the level
    dir under out (derived by levels first) into FLOAT32_RUN beside it; a
    no-op when out holds them for the same inputs."""
    levels(src, out)
    key = float32_runs_key(src)
    stamp = out / ".float32-runs"
    if stamp.is_file() and stamp.read_text().strip() == key:
        return
    index = json.loads((src / "index.json").read_text())
    jobs = []
    for entry in index["cases"]:
        refs = json.loads((src / entry["arch"] / entry["case"] / "refs.json").read_text())
        for name in refs["levels"]:
            if name != "float32":
                jobs.append((out / entry["arch"] / entry["case"] / name, f"{entry['arch']}/{entry['case']}", name,
                             refs["prompt"], refs.get("kv_cache")))
    in_workers(float32_run_job, jobs)
    n = len(jobs)
    stamp.write_text(key + "\n")
    print(f"refgen: mlx-lm's float32 runs of {n} levels into {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="make every reference")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--levels", type=Path, help="where the level dirs go")
    g.add_argument("--only", nargs="*", help="arch/case keys to remake")
    lv = sub.add_parser("levels", help="derive the level dirs of committed cases")
    lv.add_argument("--src", type=Path, required=True)
    lv.add_argument("--out", type=Path, required=True)
    fr = sub.add_parser(
        "float32-runs",
        help="derive the level dirs, then mlx-lm's float32 run on each level's weights",
    )
    fr.add_argument("--src", type=Path, required=True)
    fr.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    if args.cmd == "generate":
        if args.levels is not None:
            generate(args.out, args.levels, args.only)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                generate(args.out, Path(tmp), args.only)
    elif args.cmd == "float32-runs":
        float32_runs(args.src, args.out)
    else:
        levels(args.src, args.out)


if __name__ == "__main__":
    main()
