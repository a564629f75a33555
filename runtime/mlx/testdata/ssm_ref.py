"""Runs mlx-lm's Mamba2 scan on inputs runtime/mlx's test wrote.

Usage: ssm_ref.py IN.safetensors OUT.safetensors LO HI

IN holds x, A_log, B, C, D, dt, dt_bias and, when the case has one, state.
OUT receives y and state as mlx-lm's ssm_update computes them on the CPU
(it takes ssm_attn there), with time_step_limit (LO, HI).
"""

import sys

import mlx.core as mx
from mlx_lm.models import ssm

mx.set_default_device(mx.cpu)
t = mx.load(sys.argv[1])
y, state = ssm.ssm_update(
    t["x"], t["A_log"], t["B"], t["C"], t["D"], t["dt"], t["dt_bias"], t.get("state"),
    (float(sys.argv[3]), float(sys.argv[4])),
)
mx.save_safetensors(sys.argv[2], {"y": y, "state": state})
