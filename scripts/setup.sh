#!/usr/bin/env bash
# Installs everything archgen needs into .deps/ (git-ignored), pinned:
#
#   .deps/wheels/            the mlx-cpu wheel, downloaded once
#   .deps/mlx/               that wheel unpacked: mlx/include, mlx/lib/libmlx.so,
#                            mlx_cpu.libs/ (the BLAS and LAPACK libmlx links)
#   .deps/py/                a Python venv with mlx, mlx-lm and numpy for the
#                            parity references, using the same mlx-cpu wheel
#   .deps/archgen-mlx.pc     pkg-config file for apps outside this repo
#   .deps/cgo.env            the same flags as CGO_* exports
#
# Idempotent: a stamp records what was installed; a second run with the same
# pins returns at once. Nothing but registry packages is downloaded.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
mlx_version=0.32.4
lock="$root/scripts/requirements.lock"
python=${PYTHON:-python3}

key=$( (echo "$mlx_version"; cat "$lock" "$0") | sha256sum | cut -c1-16)
stamp="$deps/.setup-$key"
if [ -f "$stamp" ]; then
  exit 0
fi

start=$(date +%s)
mkdir -p "$deps/wheels"

echo "setup: mlx-cpu $mlx_version" >&2
wheel=$(ls "$deps/wheels"/mlx_cpu-"$mlx_version"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: -d "$deps/wheels" "mlx-cpu==$mlx_version"
  wheel=$(ls "$deps/wheels"/mlx_cpu-"$mlx_version"-*.whl | head -1)
fi

rm -rf "$deps/mlx.tmp"
mkdir -p "$deps/mlx.tmp"
"$python" -m zipfile -e "$wheel" "$deps/mlx.tmp"
rm -rf "$deps/mlx"
mv "$deps/mlx.tmp" "$deps/mlx"
test -f "$deps/mlx/mlx/lib/libmlx.so"
test -f "$deps/mlx/mlx/include/mlx/mlx.h"

echo "setup: python venv (mlx $mlx_version, mlx-lm, numpy)" >&2
if [ ! -x "$deps/py/bin/python" ]; then
  "$python" -m venv "$deps/py"
fi
"$deps/py/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  --find-links "$deps/wheels" -r "$lock"
got=$("$deps/py/bin/python" -c 'import mlx.core as mx; print(mx.__version__)')
if [ "$got" != "$mlx_version" ]; then
  echo "setup: the venv's mlx is $got, want $mlx_version" >&2
  exit 1
fi

inc="$deps/mlx/mlx/include"
lib="$deps/mlx/mlx/lib"
cat >"$deps/archgen-mlx.pc" <<EOF
prefix=$deps/mlx/mlx
includedir=$inc
libdir=$lib

Name: archgen-mlx
Description: libmlx $mlx_version (mlx-cpu wheel) as archgen's runtime/mlx uses it
Version: $mlx_version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lmlx -Wl,-rpath,\${libdir}
EOF
cat >"$deps/cgo.env" <<EOF
export CGO_ENABLED=1
export CGO_CFLAGS="-I$inc"
export CGO_CXXFLAGS="-I$inc"
export CGO_LDFLAGS="-L$lib -lmlx -Wl,-rpath,$lib"
EOF

rm -f "$deps"/.setup-*
touch "$stamp"
echo "setup: done in $(( $(date +%s) - start ))s" >&2
