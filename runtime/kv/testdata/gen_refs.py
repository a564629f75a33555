"""Reference data for runtime/kv's tests, made by mlx-lm's own cache classes.

The Go tests run this script (with the venv of `make setup`) into a
temporary directory, so every number they compare against comes from
mlx-lm itself, never from the Go side.

  gen_refs.py refs OUT_DIR
      OUT_DIR/refs.safetensors: for each scenario, the inputs fed to one of
      mlx-lm's caches (KVCache, RotatingKVCache, QuantizedKVCache), the keys
      and values its update_and_fetch returned and the masks its make_mask
      gave before each update; metadata "scenarios" (JSON) lists the steps,
      and "nocache" the masks create_attention_mask gives without a cache
      (arrays "nocache.<i>").
      OUT_DIR/mlxlm_cache.safetensors: a prompt cache written by
      save_prompt_cache, and OUT_DIR/mlxlm_next.safetensors: the inputs and
      outputs of one more decode step and one more prefill on each of its
      layers (metadata "layers", JSON).

  gen_refs.py load IN_FILE OUT_FILE
      Reads IN_FILE with load_prompt_cache and writes to OUT_FILE what it
      found (metadata "layers" and "metadata", JSON) and the inputs and
      outputs of one more decode step and one more prefill on each non-empty
      layer.
"""

import json
import sys

import mlx.core as mx
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import (
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    load_prompt_cache,
    save_prompt_cache,
)

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


def make_cache(spec):
    cls = spec["class"]
    if cls == "KVCache":
        return KVCache()
    if cls == "RotatingKVCache":
        return RotatingKVCache(max_size=spec["max_size"], keep=spec["keep"])
    if cls == "QuantizedKVCache":
        return QuantizedKVCache(group_size=spec["group_size"], bits=spec["bits"])
    raise ValueError(cls)


def parts(x):
    """The arrays of a returned keys or values (one, or a quantized triple),
    as they are now. The caches write into their buffers with __setitem__,
    which changes the array objects they returned earlier in place; the
    mx.array copy keeps the value of this step."""
    return [mx.array(a) for a in x] if isinstance(x, (tuple, list)) else [mx.array(x)]


def mask_kind(m):
    if m is None:
        return "none"
    if isinstance(m, str):
        return m
    return "array"


# Each scenario: a cache, the shape of its inputs, and its steps. An update
# step asks for the masks listed in "masks" (window, return_array) first.
PLAIN_MASKS = [[None, False], [None, True], [3, False], [3, True]]
ROT_MASKS = [[None, False], [None, True], [8, False], [4, False], [4, True]]


def steps(*items):
    out = []
    for it in items:
        if isinstance(it, tuple) and it[0] == "repeat":
            _, count, n = it
            out += [{"op": "update", "n": n}] * count
        elif isinstance(it, int):
            out.append({"op": "update", "n": it})
        else:
            out.append(it)
    return out


def trim(n):
    return {"op": "trim", "n": n}


def to_quantized(group_size, bits):
    return {"op": "to_quantized", "group_size": group_size, "bits": bits}


SCENARIOS = [
    {
        "name": "plain_basic",
        "cache": {"class": "KVCache"},
        "shape": [1, 2, 8, 8],
        "dtype": "float32",
        "masks": PLAIN_MASKS,
        "steps": steps(5, ("repeat", 3, 1), 4, trim(2), 1, 3, trim(20), 2),
    },
    {
        "name": "plain_grow",
        "cache": {"class": "KVCache"},
        "shape": [1, 2, 4, 4],
        "dtype": "float32",
        "masks": [[None, False], [2, False]],
        "steps": steps(250, ("repeat", 8, 1), 300, 1),
    },
    {
        "name": "plain_f16_batch",
        "cache": {"class": "KVCache"},
        "shape": [2, 3, 8, 16],
        "dtype": "float16",
        "masks": [[None, False]],
        "steps": steps(3, 1, 2, ("repeat", 2, 1)),
    },
    {
        "name": "rot_wrap",
        "cache": {"class": "RotatingKVCache", "max_size": 8, "keep": 0},
        "shape": [1, 2, 8, 8],
        "dtype": "float32",
        "masks": ROT_MASKS,
        "steps": steps(5, ("repeat", 6, 1), 4, ("repeat", 3, 1), 9, ("repeat", 2, 1)),
    },
    {
        "name": "rot_keep",
        "cache": {"class": "RotatingKVCache", "max_size": 8, "keep": 2},
        "shape": [1, 2, 8, 8],
        "dtype": "float32",
        "masks": ROT_MASKS,
        "steps": steps(12, ("repeat", 10, 1), 3, ("repeat", 2, 1)),
    },
    {
        "name": "rot_decode_only",
        "cache": {"class": "RotatingKVCache", "max_size": 6, "keep": 0},
        "shape": [1, 2, 4, 8],
        "dtype": "float32",
        "masks": [[None, False], [6, False], [3, False], [3, True]],
        "steps": steps(("repeat", 15, 1)),
    },
    {
        "name": "rot_trim",
        "cache": {"class": "RotatingKVCache", "max_size": 16, "keep": 0},
        "shape": [1, 1, 4, 8],
        "dtype": "float32",
        "masks": [[None, False], [16, False], [5, False]],
        "steps": steps(5, trim(2), 1, 3, trim(1), ("repeat", 14, 1), trim(1), 2, trim(1)),
    },
    {
        "name": "rot_big",
        "cache": {"class": "RotatingKVCache", "max_size": 260, "keep": 4},
        "shape": [1, 1, 4, 4],
        "dtype": "float32",
        "masks": [[None, False], [100, False]],
        "steps": steps(3, ("repeat", 262, 1), 5, 1),
    },
    {
        "name": "quant8",
        "cache": {"class": "QuantizedKVCache", "group_size": 64, "bits": 8},
        "shape": [1, 2, 8, 64],
        "dtype": "float32",
        "masks": PLAIN_MASKS,
        "steps": steps(5, ("repeat", 3, 1), trim(2), 2, 1),
    },
    {
        "name": "quant4_grow",
        "cache": {"class": "QuantizedKVCache", "group_size": 64, "bits": 4},
        "shape": [1, 2, 4, 64],
        "dtype": "float32",
        "masks": [[None, False]],
        "steps": steps(254, ("repeat", 4, 1)),
    },
    {
        "name": "quant_bf16_g32",
        "cache": {"class": "QuantizedKVCache", "group_size": 32, "bits": 8},
        "shape": [1, 2, 4, 64],
        "dtype": "bfloat16",
        "masks": [[None, False]],
        "steps": steps(3, ("repeat", 2, 1)),
    },
    {
        "name": "plain_to_quantized",
        "cache": {"class": "KVCache"},
        "shape": [1, 2, 8, 64],
        "dtype": "float32",
        "masks": [[None, False], [None, True]],
        "steps": steps(6, ("repeat", 2, 1), to_quantized(64, 4), ("repeat", 2, 1), 3),
    },
]


def run_scenario(si, sc, tensors):
    B, H, _, D = sc["shape"]
    dtype = DTYPES[sc["dtype"]]
    c = make_cache(sc["cache"])
    key = mx.random.key(1000 + si)
    log = []
    for j, st in enumerate(sc["steps"]):
        p = f"{si}.{j}"
        if st["op"] == "update":
            n = st["n"]
            key, kk, kv = mx.random.split(key, 3)
            k = mx.random.normal((B, H, n, D), key=kk).astype(dtype)
            v = mx.random.normal((B, H, n, D), key=kv).astype(dtype)
            # Copies: a cache may keep k and v themselves and write into them.
            tensors[p + ".k"], tensors[p + ".v"] = mx.array(k), mx.array(v)
            masks = []
            for mi, (window, array) in enumerate(sc["masks"]):
                m = c.make_mask(n, window_size=window, return_array=array)
                masks.append(mask_kind(m))
                if mask_kind(m) == "array":
                    tensors[f"{p}.m{mi}"] = m
            ok, ov = c.update_and_fetch(k, v)
            for t, a in enumerate(parts(ok)):
                tensors[f"{p}.ok{t}"] = a
            for t, a in enumerate(parts(ov)):
                tensors[f"{p}.ov{t}"] = a
            log.append({"op": "update", "n": n, "masks": masks, "offset": c.offset})
        elif st["op"] == "trim":
            trimmable = c.is_trimmable()
            ret = c.trim(st["n"]) if trimmable else 0
            log.append({"op": "trim", "n": st["n"], "trimmable": trimmable, "ret": ret, "offset": c.offset})
        elif st["op"] == "to_quantized":
            c = c.to_quantized(group_size=st["group_size"], bits=st["bits"])
            log.append(dict(st, offset=c.offset))
        else:
            raise ValueError(st)
    out = dict(sc)
    out["steps"] = log
    return out


def continue_layers(caches, tensors, key):
    """Feeds one decode step and one 3-position prefill to each non-empty
    cache and records inputs and outputs; returns the per-layer log."""
    layers = []
    for i, c in enumerate(caches):
        info = {"class": type(c).__name__, "offset": c.offset}
        if isinstance(c, RotatingKVCache):
            info.update(keep=c.keep, max_size=c.max_size, idx=c._idx)
        if isinstance(c, QuantizedKVCache):
            info.update(group_size=c.group_size, bits=c.bits)
        if c.keys is None:
            layers.append(info)
            continue
        k0 = c.keys[0] if isinstance(c, QuantizedKVCache) else c.keys
        B, H = k0.shape[0], k0.shape[1]
        D = k0.shape[3] * 32 // c.bits if isinstance(c, QuantizedKVCache) else k0.shape[3]
        dtype = c.keys[1].dtype if isinstance(c, QuantizedKVCache) else c.keys.dtype
        for j, n in enumerate([1, 3]):
            p = f"{i}.{j}"
            key, kk, kv = mx.random.split(key, 3)
            k = mx.random.normal((B, H, n, D), key=kk).astype(dtype)
            v = mx.random.normal((B, H, n, D), key=kv).astype(dtype)
            # Copies: a cache may keep k and v themselves and write into them.
            tensors[p + ".k"], tensors[p + ".v"] = mx.array(k), mx.array(v)
            ok, ov = c.update_and_fetch(k, v)
            for t, a in enumerate(parts(ok)):
                tensors[f"{p}.ok{t}"] = a
            for t, a in enumerate(parts(ov)):
                tensors[f"{p}.ov{t}"] = a
        info["continued"] = True
        layers.append(info)
    return layers


def cacheless_masks(tensors):
    """create_attention_mask without a cache, for assorted lengths and
    windows; arrays go to tensors as "nocache.<i>"."""
    log = []
    for n in [1, 3, 9]:
        for window in [None, 2, 4, 16]:
            for array in [False, True]:
                h = mx.zeros((1, n, 8))
                m = create_attention_mask(h, None, window_size=window, return_array=array)
                entry = {"n": n, "window": window, "array": array, "kind": mask_kind(m)}
                if mask_kind(m) == "array":
                    tensors[f"nocache.{len(log)}"] = m
                log.append(entry)
    return log


def refs(out_dir):
    tensors = {}
    log = [run_scenario(si, sc, tensors) for si, sc in enumerate(SCENARIOS)]
    nocache = cacheless_masks(tensors)
    mx.eval(tensors)
    meta = {"scenarios": json.dumps(log), "nocache": json.dumps(nocache)}
    mx.save_safetensors(f"{out_dir}/refs.safetensors", tensors, meta)

    # A prompt cache of mixed kinds, more than ten layers, one empty.
    key = mx.random.key(7)
    B, H, D = 1, 2, 64

    def feed(c, sizes):
        nonlocal key
        for n in sizes:
            key, kk, kv = mx.random.split(key, 3)
            c.update_and_fetch(
                mx.random.normal((B, H, n, D), key=kk), mx.random.normal((B, H, n, D), key=kv)
            )
        return c

    caches = [
        feed(KVCache(), [5, 1, 1]),
        feed(RotatingKVCache(max_size=8), [5] + [1] * 6),
        feed(RotatingKVCache(max_size=8, keep=2), [12]),
        feed(QuantizedKVCache(group_size=64, bits=8), [5, 1]),
        KVCache(),
        feed(RotatingKVCache(max_size=8, keep=2), [3, 1]),
    ]
    caches += [feed(KVCache(), [2 + i]) for i in range(7)]
    save_prompt_cache(
        f"{out_dir}/mlxlm_cache.safetensors", caches, {"model": "tiny", "purpose": "test"}
    )
    tensors = {}
    layers = continue_layers(caches, tensors, mx.random.key(8))
    mx.eval(tensors)
    mx.save_safetensors(f"{out_dir}/mlxlm_next.safetensors", tensors, {"layers": json.dumps(layers)})


def load(in_file, out_file):
    caches, metadata = load_prompt_cache(in_file, return_metadata=True)
    tensors = {}
    layers = continue_layers(caches, tensors, mx.random.key(9))
    mx.eval(tensors)
    meta = {"layers": json.dumps(layers), "metadata": json.dumps(metadata)}
    mx.save_safetensors(out_file, tensors, meta)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "refs":
        refs(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "load":
        load(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
