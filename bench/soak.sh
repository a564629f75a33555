#!/usr/bin/env bash
# The soak (internal/soak, driven by bench/soak): SOAK_CLIENTS clients for
# SOAK_DURATION against `archrun serve`, then the same load against
# llama.cpp's llama-server (built by bench/setup-llama-tools.sh from the
# pinned sdist) on the same GGUF, SmolLM2-135M-Instruct Q4_1, on loopback.
# Each run's report goes to out/bench/soak/<server>.json and its summary to
# the terminal; archgen's run fails the target on a lost request, a 5xx, a
# leak or a resident peak past the weights plus its memory budget;
# llama-server's is recorded as it is. SOAK_SERVERS picks the sides
# ("archgen llama-server" by default). Both run the agents' mix too (the
# Responses and Messages APIs, forced tool calls, JSON-schema replies) with
# a chat template that writes tool calls (cmd/archrun/testdata/
# chatml_tools.jinja), and archgen's embeddings besides; SOAK_AGENTS=0
# leaves it out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clients=${SOAK_CLIENTS:-32}
duration=${SOAK_DURATION:-10m}
servers=${SOAK_SERVERS:-archgen llama-server}
model=.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf
template=cmd/archrun/testdata/chatml_tools.jinja
agents=()
if [ "${SOAK_AGENTS:-1}" != 0 ]; then agents=(-agents); fi
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

status=0
if [[ " $servers " == *" archgen "* ]]; then
  # archgen: a memory budget of 1.5 GiB (all of the process's memory beyond
  # the weights: its own, a prompt chunk's activations, a prompt cache of
  # 256 MiB, the KV caches); the resident peak may reach the weights plus
  # that budget.
  port=18090
  budget=$((1536 << 20))
  bin/archrun serve -gguf "$model" -served-model-name smollm2 -port $port -max-batch 16 \
    -memory-budget $budget -prompt-cache-bytes 256MiB -access-log off -chat-template "$template" 2>"$out/archgen.log" &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  wait_up "http://127.0.0.1:$port/health"
  growth=$(curl -s "http://127.0.0.1:$port/health" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['weights_bytes'] + $budget - d['resident_bytes'])")
  echo "== archrun serve: $clients clients for $duration"
  bin/soak -root "http://127.0.0.1:$port" -model smollm2 -pid $pid -clients "$clients" -duration "$duration" \
    -max-growth "$growth" "${agents[@]}" ${agents:+-embeddings} -out "$out/archgen.json" || status=$?
  kill $pid; wait $pid 2>/dev/null || true
fi

if [[ " $servers " == *" llama-server "* ]]; then
  # llama-server: 16 slots, as archgen's -max-batch, each with SmolLM2's
  # 8192-token context; two threads, as the machine has cores.
  port=18091
  .deps/llama-tools/bin/llama-server -m "$model" --port $port -np 16 -c $((16 * 8192)) -t "$(nproc)" \
    --jinja --chat-template-file "$template" --log-disable >"$out/llama-server.log" 2>&1 &
  pid=$!
  wait_up "http://127.0.0.1:$port/health"
  echo "== llama-server: $clients clients for $duration"
  bin/soak -root "http://127.0.0.1:$port" -model smollm2 -pid $pid -clients "$clients" -duration "$duration" \
    "${agents[@]}" -out "$out/llama-server.json" || true
  kill $pid; wait $pid 2>/dev/null || true
fi
exit $status
