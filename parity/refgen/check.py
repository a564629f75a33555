"""Fails unless the committed references are exactly what refgen.py makes now.

    python parity/refgen/check.py [--refs testdata/parity] [--keep DIR]

Regenerates every case into a fresh folder with mlx-lm and compares the
result with the committed tree: the same files, each byte for byte. A
difference is reported per file, and for a .safetensors file per tensor (the
largest absolute difference), so a hand-edited or stale reference, or mlx-lm
computing something else than when the references were made, fails here.
Exit status 0 when everything matches, 1 otherwise.
"""

import argparse
import contextlib
import difflib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import refgen  # noqa: E402


def files_under(root: Path):
    paths = (p for p in root.rglob("*") if p.is_file())
    return sorted(p.relative_to(root).as_posix() for p in paths)


def describe_tensor_diff(a: Path, b: Path):
    import mlx.core as mx

    ta, tb = mx.load(str(a)), mx.load(str(b))
    lines = []
    for name in sorted(set(ta) | set(tb)):
        if name not in ta or name not in tb:
            where = "committed" if name in ta else "fresh"
            lines.append(f"    tensor {name}: only in {where}")
            continue
        x, y = ta[name], tb[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            lines.append(
                f"    tensor {name}: {x.dtype}{list(x.shape)} "
                f"vs {y.dtype}{list(y.shape)}"
            )
            continue
        if not mx.array_equal(x, y).item():
            # numpy has no bfloat16; every other stored dtype converts as is
            xa, ya = (
                np.array(t.astype(mx.float32) if t.dtype == mx.bfloat16 else t)
                for t in (x, y)
            )
            diff = np.abs(xa.astype(np.float64) - ya.astype(np.float64))
            lines.append(
                f"    tensor {name}: {int((diff > 0).sum())} of {diff.size} values "
                f"differ, max abs {diff.max():.3g}"
            )
    if not lines:
        lines.append("    every tensor equal; the header or metadata differs")
    return lines


def json_paths_differing(a, b, path="$"):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                yield f"{path}.{k}: only in {'committed' if k in a else 'fresh'}"
            else:
                yield from json_paths_differing(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from json_paths_differing(x, y, f"{path}[{i}]")
    elif a != b or type(a) is not type(b):
        yield f"{path}: committed {json.dumps(a)[:60]}, fresh {json.dumps(b)[:60]}"


def describe_json_diff(a: Path, b: Path, limit=12):
    try:
        old, new = json.loads(a.read_text()), json.loads(b.read_text())
        paths = list(json_paths_differing(old, new))
    except json.JSONDecodeError as e:
        return [f"    not valid JSON: {e}"]
    if not paths:
        diff = difflib.unified_diff(
            a.read_text().splitlines(), b.read_text().splitlines(),
            "committed", "fresh", lineterm="", n=0,
        )
        paths = ["same values, other formatting:"] + list(diff)[2:]
    out = [f"    {p}" for p in paths]
    return out[:limit] + (["    ..."] if len(out) > limit else [])


def compare(committed: Path, fresh: Path):
    problems = []
    a, b = set(files_under(committed)), set(files_under(fresh))
    for rel in sorted(a - b):
        problems.append(f"{rel}: committed, but refgen.py no longer makes it")
    for rel in sorted(b - a):
        problems.append(f"{rel}: made by refgen.py, but not committed")
    for rel in sorted(a & b):
        x, y = committed / rel, fresh / rel
        if x.read_bytes() == y.read_bytes():
            continue
        problems.append(f"{rel}: differs")
        if rel.endswith(".safetensors"):
            problems.extend(describe_tensor_diff(x, y))
        elif rel.endswith(".json"):
            problems.extend(describe_json_diff(x, y))
    return problems, len(a & b)


def main(argv=None):
    root = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--refs", type=Path, default=root / "testdata" / "parity")
    ap.add_argument("--keep", type=Path, help="regenerate here and keep the result")
    args = ap.parse_args(argv)

    if not (args.refs / "index.json").is_file():
        print(f"refs-check: {args.refs}/index.json is missing; run `make refs`")
        return 1
    start = time.time()
    tmp = tempfile.mkdtemp(prefix="refs-check-")
    try:
        fresh = args.keep or Path(tmp) / "refs"
        if fresh.exists():
            shutil.rmtree(fresh)
        with contextlib.redirect_stdout(io.StringIO()):
            refgen.generate(fresh, Path(tmp) / "levels")
        problems, n = compare(args.refs, fresh)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    took = time.time() - start
    if problems:
        print(f"refs-check: {args.refs} differs from a fresh mlx-lm run ({took:.0f}s):")
        for p in problems:
            print(f"  {p}")
        print("refs-check: if the change is intended, run `make refs` and commit it")
        return 1
    print(f"refs-check: {n} files in {args.refs} match a fresh mlx-lm run "
          f"({took:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
