"""mlx-lm's side of the ArraysCache file tests (runtime/kv states_test.go).

Usage:
  states_refs.py write FILE   mlx-lm saves a prompt cache of three layers
                              (a KVCache, an ArraysCache with both slots
                              set, one with its first slot empty) with
                              save_prompt_cache, and beside it, in
                              FILE.arrays.safetensors, the arrays it saved.
  states_refs.py read FILE OUT  mlx-lm loads FILE with load_prompt_cache and
                              writes OUT: each ArraysCache slot as
                              "<layer>.<slot>", each KVCache's keys and
                              values as "<layer>.keys" and "<layer>.values",
                              with the classes and empty slots in its
                              metadata.
"""

import sys

import mlx.core as mx
from mlx_lm.models import cache as cache_mod

mx.set_default_device(mx.cpu)


def write(path):
    mx.random.seed(3)
    kv = cache_mod.KVCache()
    k = mx.random.normal((1, 2, 5, 8))
    v = mx.random.normal((1, 2, 5, 8))
    kv.update_and_fetch(k, v)
    full = cache_mod.ArraysCache(2)
    full[0] = mx.random.normal((1, 3, 12)).astype(mx.bfloat16)
    full[1] = mx.random.normal((1, 2, 4, 6))
    half = cache_mod.ArraysCache(2)
    half[1] = mx.random.normal((1, 2, 4, 6))
    cache_mod.save_prompt_cache(path, [kv, full, half], {"who": "mlx-lm"})
    mx.save_safetensors(
        path + ".arrays.safetensors",
        {"0.keys": k, "0.values": v, "1.0": full[0], "1.1": full[1], "2.1": half[1]},
    )


def read(path, out):
    caches, meta = cache_mod.load_prompt_cache(path, return_metadata=True)
    arrays, info = {}, {"meta": ",".join(f"{k}={v}" for k, v in sorted(meta.items()))}
    for i, c in enumerate(caches):
        info[f"class.{i}"] = type(c).__name__
        if isinstance(c, cache_mod.ArraysCache):
            for j, a in enumerate(c.cache):
                if a is None:
                    info[f"empty.{i}.{j}"] = "1"
                else:
                    arrays[f"{i}.{j}"] = a
        else:
            k, v = c.state[0], c.state[1]
            arrays[f"{i}.keys"], arrays[f"{i}.values"] = k, v
    mx.save_safetensors(out, arrays, info)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "read":
        read(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
