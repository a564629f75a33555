#!/usr/bin/env bash
# The soak (internal/soak, driven by bench/soak): SOAK_CLIENTS clients for
# SOAK_DURATION against `archrun serve`, then the same load against
# llama.cpp's llama-server (built by bench/setup-llama-tools.sh from the
# pinned sdist) on the same GGUF, SmolLM2-135M-Instruct Q4_1, on loopback.
# Each run's report goes to out/bench/soak/<server>.json and its summary to
# the terminal; archgen's run fails the target on a lost request, a 5xx, a
# leak or memory past its bound, llama-server's is recorded as it is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clients=${SOAK_CLIENTS:-32}
duration=${SOAK_DURATION:-10m}
model=.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf
out=out/bench/soak
mkdir -p "$out" bin
go build -o bin/archrun ./cmd/archrun
go build -o bin/soak ./bench/soak

wait_up() { # url
  for _ in $(seq 1 600); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "soak: $1 did not come up" >&2
  return 1
}

# archgen: a KV budget of 256 MiB and a prompt cache of 256 MiB; the
# resident memory may grow by 1 GiB in all (TestServeSoak's allowance at 8
# clients is 1.5 GiB above its 128 MiB of budgets).
port=18090
bin/archrun serve -gguf "$model" -served-model-name smollm2 -port $port -max-batch 16 \
  -kv-budget 256MiB -prompt-cache-bytes 256MiB -access-log off 2>"$out/archgen.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_up "http://127.0.0.1:$port/health"
status=0
echo "== archrun serve: $clients clients for $duration"
bin/soak -root "http://127.0.0.1:$port" -model smollm2 -pid $pid -clients "$clients" -duration "$duration" \
  -max-growth $((1024 << 20)) -out "$out/archgen.json" || status=$?
kill $pid; wait $pid 2>/dev/null || true

# llama-server: 16 slots, as archgen's -max-batch, each with SmolLM2's
# 8192-token context; two threads, as the machine has cores.
port=18091
.deps/llama-tools/bin/llama-server -m "$model" --port $port -np 16 -c $((16 * 8192)) -t "$(nproc)" \
  --log-disable >"$out/llama-server.log" 2>&1 &
pid=$!
wait_up "http://127.0.0.1:$port/health"
echo "== llama-server: $clients clients for $duration"
bin/soak -root "http://127.0.0.1:$port" -model smollm2 -pid $pid -clients "$clients" -duration "$duration" \
  -out "$out/llama-server.json" || true
kill $pid; wait $pid 2>/dev/null || true
exit $status
