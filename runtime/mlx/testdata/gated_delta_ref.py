"""Runs mlx-lm's gated delta rule on inputs runtime/mlx's test wrote.

Usage: gated_delta_ref.py IN.safetensors OUT.safetensors

IN holds q, k, v, g, beta, state and, for a masked case, mask. OUT receives
y and state as mlx-lm computes them on the CPU: gated_delta_update takes
gated_delta_ops there (one compiled step graph per token), which this calls
directly with the decay and beta already made.
"""

import sys

import mlx.core as mx
from mlx_lm.models import gated_delta

mx.set_default_device(mx.cpu)
inputs = mx.load(sys.argv[1])
y, state = gated_delta.gated_delta_ops(
    inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"], inputs["state"],
    inputs.get("mask"),
)
mx.save_safetensors(sys.argv[2], {"y": y, "state": state})
