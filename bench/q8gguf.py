"""Makes a Q8_0 GGUF from another GGUF with the `gguf` package (gguf-py,
PyPI, pinned with mlx-lm's venv): every quantized tensor is dequantized
and quantized again as Q8_0 by gguf.quants (blocks of 32, one float16
scale each); float tensors (the norms) and every metadata key are copied
as they are.

From the Q4_1 SmolLM2-135M-Instruct, the Q8_0 file holds the Q4_1
weights' values in llama.cpp's 8-bit format: the benchmarks measure
speed on it, the same for every side, not the quality of an 8-bit
quantization.

    .deps/py/bin/python bench/q8gguf.py IN.gguf OUT.gguf
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFValueType, GGUFWriter, quants


def main(src, dst):
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.alignment"):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        if t.tensor_type in (T.F32, T.F16):
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            continue
        shape = [int(d) for d in reversed(t.shape)]  # GGUF lists dims fastest first
        x = quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        q = quants.quantize(x, T.Q8_0)
        w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: q8gguf.py IN.gguf OUT.gguf")
    main(sys.argv[1], sys.argv[2])
