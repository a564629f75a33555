"""Makes the benchmark checkpoints with mlx-lm, as mlx_lm.convert would.

    python bench/prepare.py derive SRC DST LEVEL   # LEVEL: float32, bfloat16, q4_g64, q4_g64_float32, mxfp4_float32, ...
    python bench/prepare.py random CONFIG DST [DTYPE]  # random weights, mlx-lm's own init (float32 by default)

derive loads SRC with mlx-lm, dequantizes it if it is quantized
(mlx_lm.convert --dequantize), casts the floating parameters the model lets
cast to the level's dtype, quantizes (affine) for the q levels, and saves it
with save_model/save_config; tokenizer files SRC has are copied. random
makes the model class of CONFIG's model_type with mlx's default
initialization, seeded, and saves it in float32 (or DTYPE: bfloat16 holds an
8B model in 16 GB, where float32 would not fit this machine's memory).
"""

import json
import shutil
import sys
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_map_with_path
from mlx_lm.utils import (
    _get_classes,
    dequantize_model,
    load_model,
    save_config,
    save_model,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "parity" / "refgen"))
from refgen import convert  # noqa: E402  (mlx_lm.convert's cast and quantize)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def parse_level(level):
    if level in ("float32", "bfloat16", "float16"):
        return level, 0, 0
    if level.startswith("q") and "_g" in level:
        # q4_g64 quantizes from bfloat16 (mlx_lm.convert's default dtype);
        # q4_g64_float32 from float32, so scales and activations stay float32.
        spec, _, dtype = level.partition("_float")
        bits, group = spec[1:].split("_g")
        return ("float" + dtype) if dtype else "bfloat16", int(bits), int(group)
    if level in ("mxfp4", "mxfp4_float32"):
        # MLX's mxfp4 mode: 4 bits in groups of 32 (level_mode says so)
        return "float32" if level.endswith("_float32") else "bfloat16", 4, 32
    sys.exit(f"prepare: unknown level {level!r}")


def derive(src, dst, level):
    dtype_name, bits, group = parse_level(level)
    model, config = load_model(Path(src))
    if "quantization" in config:
        model = dequantize_model(model)
        config.pop("quantization", None)
        config.pop("quantization_config", None)
    mode = "mxfp4" if level.startswith("mxfp4") else "affine"
    model, config = convert(model, config, dtype_name, bits, group, mode)
    write(model, config, Path(dst), Path(src))


def random(config_path, dst, dtype="float32"):
    config = json.loads(Path(config_path).read_text())
    mx.random.seed(0)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    dt = getattr(mx, dtype)
    model.update(tree_map_with_path(lambda _, v: v.astype(dt), model.parameters()))
    config["torch_dtype"] = dtype
    write(model, config, Path(dst), None)


def write(model, config, dst, src):
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    mx.eval(model.parameters())
    save_model(tmp, model)
    save_config(config, config_path=tmp / "config.json")
    for f in TOKENIZER_FILES:
        if src is not None and (src / f).exists():
            shutil.copy(src / f, tmp / f)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"derive": derive, "random": random}[cmd](*args)
