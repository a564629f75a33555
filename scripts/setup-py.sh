#!/usr/bin/env bash
# Installs the Python venv the tests, the parity references and the
# benchmarks use, into .deps/py (git-ignored): mlx (on the same mlx-cpu
# wheel as libmlx, which scripts/setup.sh fetches first), mlx-lm and what
# its scripts import, every package pinned by scripts/requirements.lock.
#
# Idempotent: a stamp records the lock installed (a venv already holding
# every pinned version is kept); a second run returns at once. Nothing but
# registry packages is downloaded.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
lock="$root/scripts/requirements.lock"
python=${PYTHON:-python3}
mlx_version=$(sed -n 's/^mlx==//p' "$lock")

bash "$root/scripts/setup.sh"
key=$(sha256sum "$lock" | cut -c1-16)
stamp="$deps/.setup-py-$key"
if [ -f "$stamp" ]; then
  exit 0
fi

# has_all tells whether the venv holds every pinned package at its version.
has_all() {
  local site
  site=$(ls -d "$deps"/py/lib/python3*/site-packages 2>/dev/null | head -1)
  [ -n "$site" ] || return 1
  local have
  have=$(ls "$site" | sed -n 's/\.dist-info$//p' | tr 'A-Z.-' 'a-z__')
  while IFS= read -r line; do
    case "$line" in '#'* | '') continue ;; esac
    local want
    want=$(echo "$line" | sed 's/==/-/' | tr 'A-Z.-' 'a-z__')
    grep -qx "$want" <<<"$have" || return 1
  done <"$lock"
}

start=$(date +%s)
if has_all; then
  echo "setup: the python venv is in place" >&2
else
  echo "setup: python venv (mlx $mlx_version, mlx-lm, numpy)" >&2
  if [ ! -x "$deps/py/bin/python" ]; then
    "$python" -m venv "$deps/py"
  fi
  "$deps/py/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --find-links "$deps/wheels" -r "$lock"
fi
got=$("$deps/py/bin/python" -c 'import mlx.core as mx; print(mx.__version__)')
if [ "$got" != "$mlx_version" ]; then
  echo "setup: the venv's mlx is $got, want $mlx_version" >&2
  exit 1
fi
rm -f "$deps"/.setup-py-*
touch "$stamp"
echo "setup: python venv done in $(( $(date +%s) - start ))s" >&2
