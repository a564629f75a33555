"""mlx-lm's side of the ArraysCache file tests (runtime/kv states_test.go).

Usage:
  states_refs.py write FILE   mlx-lm saves a prompt cache of four layers
                              (a KVCache, an ArraysCache with both slots
                              set, one with its first slot empty, and a
                              CacheList of an ArraysCache and a KVCache)
                              with save_prompt_cache, and beside it, in
                              FILE.arrays.safetensors, the arrays it saved.
  states_refs.py read FILE OUT  mlx-lm loads FILE with load_prompt_cache and
                              writes OUT: each ArraysCache slot as
                              "<layer>.<slot>", each KVCache's keys and
                              values as "<layer>.keys" and "<layer>.values"
                              (a CacheList's part k as "<layer>.<k>.<...>"),
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
    ssm = cache_mod.ArraysCache(2)
    ssm[0] = mx.random.normal((1, 3, 10))
    ssm[1] = mx.random.normal((1, 2, 4, 5))
    attn = cache_mod.KVCache()
    k3 = mx.random.normal((1, 1, 4, 8))
    v3 = mx.random.normal((1, 1, 4, 8))
    attn.update_and_fetch(k3, v3)
    both = cache_mod.CacheList(ssm, attn)
    cache_mod.save_prompt_cache(path, [kv, full, half, both], {"who": "mlx-lm"})
    mx.save_safetensors(
        path + ".arrays.safetensors",
        {"0.keys": k, "0.values": v, "1.0": full[0], "1.1": full[1], "2.1": half[1],
         "3.0.0": ssm[0], "3.0.1": ssm[1], "3.1.keys": k3, "3.1.values": v3},
    )


def read(path, out):
    caches, meta = cache_mod.load_prompt_cache(path, return_metadata=True)
    arrays, info = {}, {"meta": ",".join(f"{k}={v}" for k, v in sorted(meta.items()))}

    def report(name, c):
        info[f"class.{name}"] = type(c).__name__
        if isinstance(c, cache_mod.CacheList):
            for k, part in enumerate(c.caches):
                report(f"{name}.{k}", part)
        elif isinstance(c, cache_mod.ArraysCache):
            for j, a in enumerate(c.cache):
                if a is None:
                    info[f"empty.{name}.{j}"] = "1"
                else:
                    arrays[f"{name}.{j}"] = a
        else:
            arrays[f"{name}.keys"], arrays[f"{name}.values"] = c.state[0], c.state[1]

    for i, c in enumerate(caches):
        report(str(i), c)
    mx.save_safetensors(out, arrays, info)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "read":
        read(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
