#!/usr/bin/env bash
# Installs libmlx, all that building and running archgen needs, into .deps/
# (git-ignored), pinned:
#
#   .deps/wheels/            the mlx-cpu wheel, downloaded once
#   .deps/mlx/               that wheel unpacked: mlx/include, mlx/lib/libmlx.so,
#                            mlx_cpu.libs/ (the BLAS and LAPACK libmlx links)
#   .deps/archgen-mlx.pc     pkg-config file for apps outside this repo
#   .deps/cgo.env            the same flags as CGO_* exports
#
# The Python venv the tests and references use is scripts/setup-py.sh's, the
# npm packages scripts/setup-npm.sh's. Idempotent: a stamp records the
# version installed (an install of that version found in place is kept);
# a second run returns at once. Nothing but registry packages is downloaded.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
mlx_version=0.32.4
python=${PYTHON:-python3}

stamp="$deps/.setup-mlx-$mlx_version"
if [ -f "$stamp" ]; then
  exit 0
fi

inc="$deps/mlx/mlx/include"
lib="$deps/mlx/mlx/lib"
start=$(date +%s)
if [ -d "$deps/mlx/mlx_cpu-$mlx_version.dist-info" ] && [ -f "$lib/libmlx.so" ] && [ -f "$inc/mlx/mlx.h" ] &&
  [ -f "$deps/cgo.env" ] && [ -f "$deps/archgen-mlx.pc" ]; then
  # Installed before this stamp existed: kept as it is.
  touch "$stamp"
  exit 0
else
  echo "setup: mlx-cpu $mlx_version" >&2
  mkdir -p "$deps/wheels"
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
  test -f "$lib/libmlx.so"
  test -f "$inc/mlx/mlx.h"
fi

cat >"$deps/archgen-mlx.pc.tmp" <<PC
prefix=$deps/mlx/mlx
includedir=$inc
libdir=$lib

Name: archgen-mlx
Description: libmlx $mlx_version (mlx-cpu wheel) as archgen's runtime/mlx uses it
Version: $mlx_version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lmlx -Wl,-rpath,\${libdir}
PC
cat >"$deps/cgo.env.tmp" <<ENV
export CGO_ENABLED=1
export CGO_CFLAGS="-I$inc"
export CGO_CXXFLAGS="-I$inc"
export CGO_LDFLAGS="-L$lib -lmlx -Wl,-rpath,$lib"
ENV
mv "$deps/archgen-mlx.pc.tmp" "$deps/archgen-mlx.pc"
mv "$deps/cgo.env.tmp" "$deps/cgo.env"

rm -f "$deps"/.setup-mlx-*
touch "$stamp"
echo "setup: libmlx done in $(( $(date +%s) - start ))s" >&2
