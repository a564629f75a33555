"""Runs mlx-lm's lightning attention recurrence on inputs runtime/mlx's test
wrote.

Usage: lightning_ref.py IN.safetensors OUT.safetensors SCALE

IN holds q, k and v [B, T, H, D], g (the log of each head's decay) and,
where the case has one, state. OUT receives y [B, T, H, Dv] and state as
mlx-lm's bailing_moe_linear computes them (recurrent_gla, one step after
another); q, k and v go in as its attention transposes them, [B, H, T, D].
"""

import sys

import mlx.core as mx
from mlx_lm.models import bailing_moe_linear

mx.set_default_device(mx.cpu)
inputs = mx.load(sys.argv[1])


def heads(x):
    return x.transpose(0, 2, 1, 3)


y, state = bailing_moe_linear.recurrent_gla(
    heads(inputs["q"]),
    heads(inputs["k"]),
    heads(inputs["v"]),
    inputs["g"],
    float(sys.argv[3]),
    inputs.get("state"),
)
mx.save_safetensors(sys.argv[2], {"y": heads(y), "state": state})
