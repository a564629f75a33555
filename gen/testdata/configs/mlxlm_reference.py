"""Writes what mlx-lm makes of each published config.json in this folder.

For every <arch>/<name>.json, <arch>/<name>.mlxlm.json holds either
{"args": ...}, the fields of the architecture's ModelArgs after
__post_init__ (dataclasses.asdict), or {"error": ...}, what mlx-lm raised
reading the config or building the model from it. The Go registry's
TestConfigReference compares each generated ParseConfig with these.

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

from mlx_lm.utils import _get_classes  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
for path in sorted(glob.glob(os.path.join(here, "*", "*.json"))):
    if path.endswith(".mlxlm.json"):
        continue
    with open(path) as f:
        config = json.load(f)
    try:
        model_class, args_class = _get_classes(config)
        args = args_class.from_dict(config)
        model_class(args)
        out = {"args": dataclasses.asdict(args)}
    except Exception as e:  # noqa: BLE001 - any refusal is the reference
        out = {"error": f"{type(e).__name__}: {e}"}
    with open(path[: -len(".json")] + ".mlxlm.json", "w") as f:
        json.dump(out, f, indent=2, sort_keys=True)
        f.write("\n")
    print(os.path.relpath(path, here), "error" if "error" in out else "ok", file=sys.stderr)
