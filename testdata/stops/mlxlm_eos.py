"""Prints the stop set mlx-lm builds for each model directory named.

For every directory on the command line, one JSON line: the sorted
eos_token_ids of the tokenizer mlx-lm's load() returns, reading config.json
and generation_config.json with mlx_lm.utils.load_config and the tokenizer
with mlx_lm.tokenizer_utils.load, as mlx_lm.utils.load does (the weights are
not read). The archgen package's TestStopTokensMatchMLXLM runs it.
"""

import json
import sys
from pathlib import Path

from mlx_lm.tokenizer_utils import load as load_tokenizer
from mlx_lm.utils import load_config

for arg in sys.argv[1:]:
    path = Path(arg)
    config = load_config(path)
    tok = load_tokenizer(path, eos_token_ids=config.get("eos_token_id", None))
    print(json.dumps(sorted(int(i) for i in tok.eos_token_ids)))
