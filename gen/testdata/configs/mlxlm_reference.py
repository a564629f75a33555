"""Writes what mlx-lm makes of each published config.json in this folder.

For every <arch>/<name>.json, <arch>/<name>.mlxlm.json holds either
{"args": ...}, the fields of the architecture's ModelArgs after
__post_init__ (dataclasses.asdict; for a wrapper whose language_model reads
text_config with ModelArgs of its own, those fields, under the top-level
model_type), or {"error": ...}, what mlx-lm raised
reading the config or building the model from it. A text model's
model_type that mlx-lm reads only as a wrapper's section (SECTION_OF) is
read as that wrapper reads its text_config. An encoder mlx-lm has no
module for (ENCODERS) is read by mlx-embeddings' module of it instead (its
ModelArgs and Model), the reference its parity tests use; one that
neither has (TRANSFORMERS_CONFIGS) by transformers' config class of it
(its dataclass fields; transformers imports no torch for these). The Go
registry's TestConfigReference compares each generated ParseConfig with
these.

Run it with the project's venv: make config-reference.
"""

import dataclasses
import glob
import json
import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0":
    # Messages that print a set must print it the same way every run.
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

from mlx_lm.utils import _decode_tagged_floats, _get_classes  # noqa: E402

# Text models' model_types mlx-lm has no module for, only a wrapper that
# reads them as its text_config: the wrapper's model_type.
SECTION_OF = {"qwen3_5_text": "qwen3_5"}

# Encoders, by model_type: the mlx-embeddings module that reads them
# (testdata/encoders/ref.py loads
# it without the package's __init__, which imports mlx-vlm).
ENCODERS = {"bert": "bert", "xlm-roberta": "xlm_roberta", "modernbert": "modernbert"}
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "testdata", "encoders"))

# Encoders neither mlx-lm nor mlx-embeddings has a module for, by
# model_type: transformers' config class that reads them.
TRANSFORMERS_CONFIGS = {"nomic_bert": "NomicBertConfig"}


def transformers_fields(config):
    import transformers  # noqa: E402

    cls = getattr(transformers, TRANSFORMERS_CONFIGS[config["model_type"]])
    cfg = cls.from_dict(config)
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def encoder_classes(config):
    from ref import module  # noqa: E402 - testdata/encoders/ref.py

    mod = module(ENCODERS[config["model_type"]])
    return mod.Model, mod.ModelArgs

here = os.path.dirname(os.path.abspath(__file__))
for path in sorted(glob.glob(os.path.join(here, "*", "*.json"))):
    if path.endswith(".mlxlm.json"):
        continue
    with open(path) as f:
        # as mlx-lm's load_config reads it: {"__float__": "Infinity"} is a float
        config = _decode_tagged_floats(json.load(f))
    try:
        section_type = config.get("model_type")
        if section_type in SECTION_OF:
            config = {"model_type": SECTION_OF[section_type], "text_config": config}
        if config.get("model_type") in TRANSFORMERS_CONFIGS:
            fields = transformers_fields(config)
        else:
            if config.get("model_type") in ENCODERS:
                model_class, args_class = encoder_classes(config)
            else:
                model_class, args_class = _get_classes(config)
            args = args_class.from_dict(config)
            model = model_class(args)
            fields = dataclasses.asdict(args)
            inner = getattr(getattr(model, "language_model", None), "args", None)
            if isinstance(fields.get("text_config"), dict) and dataclasses.is_dataclass(inner):
                # A wrapper whose text model reads text_config with its own
                # ModelArgs: the reference is what that text model reads.
                fields = {**dataclasses.asdict(inner), "model_type": fields["model_type"]}
                if section_type in SECTION_OF:
                    fields["model_type"] = section_type
        out = {"args": fields}
    except Exception as e:  # noqa: BLE001 - any refusal is the reference
        out = {"error": f"{type(e).__name__}: {e}"}
    with open(path[: -len(".json")] + ".mlxlm.json", "w") as f:
        json.dump(out, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
    print(os.path.relpath(path, here), "error" if "error" in out else "ok", file=sys.stderr)
