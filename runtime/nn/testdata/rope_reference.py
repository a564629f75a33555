"""Writes rope.json: mlx-lm's rotary embeddings applied to a fixed input.

Each case names how the rope is built (plain nn.RoPE, rope_utils'
initialize_rope, or phi3's attention), its parameters, the offset, and the
output for x = sin(0.37 * arange(B*H*L*D)) shaped [B, H, L, D]. rope_test.go
builds the same ropes with nn.NewRope and compares.

Run it with the project's venv: make rope-reference.
"""

import json
import os

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import phi3
from mlx_lm.models.rope_utils import initialize_rope

B, H, L = 1, 2, 3


def x_for(d):
    return mx.sin(mx.arange(B * H * L * d, dtype=mx.float32) * 0.37).reshape(B, H, L, d)


cases = []


def add(name, kind, rope, head_dim, offset, **spec):
    y = rope(x_for(head_dim), offset=offset)
    mx.eval(y)
    cases.append(dict(name=name, kind=kind, head_dim=head_dim, offset=offset,
                      out=[float(v) for v in y.reshape(-1).tolist()], **spec))


def scaled(name, dims, base, traditional, scaling, max_pos, offset, head_dim=None):
    rope = initialize_rope(dims, base, traditional, scaling, max_pos)
    add(name, "scaled", rope, head_dim or dims, offset, dims=dims, base=base,
        traditional=traditional, scaling=scaling, max_positions=max_pos or 0)


add("plain", "plain", nn.RoPE(16, traditional=False, base=10000.0), 16, 5,
    dims=16, base=10000.0, traditional=False, scaling=None, max_positions=0)
add("plain-traditional-partial", "plain", nn.RoPE(8, traditional=True, base=10000.0), 16, 2,
    dims=8, base=10000.0, traditional=True, scaling=None, max_positions=0)
scaled("default", 16, 500000.0, False, None, None, 3)
scaled("default-rope-type", 16, 10000.0, False, {"rope_type": "default", "rope_theta": 10000.0}, 4096, 0)
scaled("linear", 16, 10000.0, False, {"type": "linear", "factor": 4.0}, 4096, 7)
scaled("dynamic-short", 16, 10000.0, False, {"type": "dynamic", "factor": 2.0}, 64, 1)
scaled("dynamic-beyond", 16, 10000.0, False, {"type": "dynamic", "factor": 2.0}, 4, 9)
scaled("llama3", 32, 500000.0, False, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072, 11)
scaled("llama3-defaults-traditional", 32, 10000.0, True, {"rope_type": "llama3", "factor": 8.0}, 8192, 2)
scaled("yarn", 32, 1000000.0, False, {"type": "yarn", "factor": 4.0,
       "original_max_position_embeddings": 32768}, 131072, 4)
scaled("yarn-mscale", 32, 10000.0, False, {"type": "yarn", "factor": 40.0, "beta_fast": 32, "beta_slow": 1,
       "mscale": 1.0, "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096}, 163840, 6)
scaled("deepseek-yarn", 16, 10000.0, False, {"type": "deepseek_yarn", "factor": 2.0}, 8192, 1)
scaled("longrope", 16, 10000.0, False, {"type": "longrope", "original_max_position_embeddings": 4096,
       "short_factor": [1.0] * 8, "long_factor": [1.0 + 0.5 * i for i in range(8)]}, 131072, 3)
scaled("proportional", 16, 10000.0, False, {"rope_type": "proportional", "factor": 1.0,
       "partial_rotary_factor": 0.5}, 4096, 2)
scaled("mrope", 16, 10000.0, False, {"rope_type": "mrope", "mrope_section": [2, 3, 3]}, 4096, 2)


def phi3_rope(name, head_dim, partial, max_pos, orig, scaling, offset):
    args = phi3.ModelArgs(model_type="phi3", hidden_size=head_dim * 2, num_hidden_layers=1,
                          intermediate_size=8, num_attention_heads=2, rms_norm_eps=1e-5,
                          vocab_size=8, rope_scaling=scaling, partial_rotary_factor=partial,
                          max_position_embeddings=max_pos, original_max_position_embeddings=orig)
    rope = phi3.Attention(args).rope
    add(name, "su", rope, head_dim, offset, dims=int(head_dim * partial), base=10000.0,
        traditional=False, scaling=args.rope_scaling, max_positions=max_pos,
        original_max_positions=orig)


long = [1.0 + 0.25 * i for i in range(8)]
phi3_rope("su-longrope", 16, 1.0, 131072, 4096, {"type": "longrope", "long_factor": long, "short_factor": long}, 5)
phi3_rope("su-partial", 32, 0.5, 131072, 4096, {"type": "su", "long_factor": long, "short_factor": long}, 2)
phi3_rope("su-short-context", 16, 1.0, 4096, 4096, {"type": "longrope", "long_factor": long, "short_factor": long}, 1)
phi3_rope("su-linear", 16, 1.0, 4096, 4096, {"type": "linear", "long_factor": long, "factor": 2.0}, 3)
phi3_rope("su-off", 16, 1.0, 4096, 4096, None, 3)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "rope.json"), "w") as f:
    json.dump({"B": B, "H": H, "L": L, "cases": cases}, f, indent=1)
    f.write("\n")
