"""Computes the expected results of runtime/mlx's op tests with numpy alone.

Usage: numpy_ref.py DIR

DIR holds manifest.json, a list of cases {"name", "expr", "inputs": [file...]},
and the input .npy files. Each case's expression is evaluated with numpy, the
case's inputs bound to a, b, c, ... in order, and the result is written to
DIR/<name>.out.npy (or <name>.out.<i>.npy for a list of results). Nothing here
imports MLX: the formulas below are the ops' mathematical definitions.
"""

import json
import math
import os
import sys

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(x.astype(np.float64)).astype(x.dtype)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def gelu(x):
    return x * (1.0 + erf(x / np.sqrt(2.0))) / 2.0


def gelu_approx(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def logsumexp(x, axis=-1, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


def rms_norm(x, w, eps):
    x64 = x.astype(np.float64)
    r = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return (r * w).astype(np.float32)


def layer_norm(x, w, b, eps):
    x64 = x.astype(np.float64)
    mu = np.mean(x64, axis=-1, keepdims=True)
    var = np.mean((x64 - mu) ** 2, axis=-1, keepdims=True)
    return ((x64 - mu) / np.sqrt(var + eps) * w + b).astype(np.float32)


def rope(x, dims, traditional, base, scale, offset, freqs=None):
    """Rotary embedding of x [B, H, T, D] for positions offset + t.

    offset is an int or one int per batch row. The angle of position p and
    pair i is p * scale / f_i, with f_i = base ** (2i / dims) unless
    frequencies are given.
    """
    x = x.astype(np.float64)
    B, H, T, D = x.shape
    half = dims // 2
    if freqs is None:
        f = base ** (np.arange(half) / half)
    else:
        f = freqs.astype(np.float64)
    off = np.asarray(offset, dtype=np.float64).reshape(-1, 1, 1, 1)
    pos = (np.arange(T).reshape(1, 1, T, 1) + off) * scale
    theta = pos / f.reshape(1, 1, 1, half)
    c, s = np.cos(theta), np.sin(theta)
    out = x.copy()
    if traditional:
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
        out[..., 0:dims:2] = x1 * c - x2 * s
        out[..., 1:dims:2] = x1 * s + x2 * c
    else:
        x1, x2 = x[..., :half], x[..., half:dims]
        out[..., :half] = x1 * c - x2 * s
        out[..., half:dims] = x1 * s + x2 * c
    return out.astype(np.float32)


def sdpa(q, k, v, scale, mask=None):
    """Attention with q [B, Hq, L, D], k and v [B, Hkv, S, D].

    mask: None, "causal" (query i of L sees keys up to S - L + i), or a
    boolean array broadcast against the scores (True attends).
    """
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    rep = Hq // Hkv
    k = np.repeat(k, rep, axis=1).astype(np.float64)
    v = np.repeat(v, rep, axis=1).astype(np.float64)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * scale
    if isinstance(mask, str) and mask == "causal":
        m = np.arange(L)[:, None] + (S - L) >= np.arange(S)[None, :]
        s = np.where(m, s, -np.inf)
    elif mask is not None:
        s = np.where(mask, s, -np.inf)
    return (softmax(s) @ v).astype(np.float32)


def dequantize(wq, scales, biases, group_size, bits):
    """Unpacks affine-quantized rows: element j of a row is stored in bits
    consecutive bits, least significant first, of the row's uint32 words."""
    rows = wq.shape[0]
    words = wq.astype(np.uint64)
    per_word = 32 // bits
    vals = []
    for i in range(per_word):
        vals.append((words >> (bits * i)) & ((1 << bits) - 1))
    q = np.stack(vals, axis=-1).reshape(rows, -1).astype(np.float64)
    s = np.repeat(scales.astype(np.float64), group_size, axis=-1)
    b = np.repeat(biases.astype(np.float64), group_size, axis=-1)
    return (q * s + b).astype(np.float32)


def bf16(x):
    """Rounds float32 values to bfloat16 (nearest, ties to even), as float32."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json")) as f:
        cases = json.load(f)
    env = {k: v for k, v in globals().items() if not k.startswith("_")}
    for case in cases:
        args = [np.load(os.path.join(d, p)) for p in case["inputs"]]
        scope = dict(env)
        for name, val in zip("abcdefgh", args):
            scope[name] = val
        out = eval(case["expr"], scope)
        if isinstance(out, (list, tuple)):
            for i, o in enumerate(out):
                np.save(os.path.join(d, f"{case['name']}.out.{i}.npy"), np.array(o, order="C"))
        else:
            np.save(os.path.join(d, f"{case['name']}.out.npy"), np.array(out, order="C"))


if __name__ == "__main__":
    main()
