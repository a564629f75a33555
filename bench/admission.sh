#!/usr/bin/env bash
# Admission by memory, measured: 64 clients each send one chat of a
# 2,000-token prompt to `archrun serve` (SmolLM2-135M-Instruct Q4_1,
# -max-batch 64) whose memory budget (-memory-budget: all of the process's
# memory beyond the weights) holds 8 such requests at their longest beside
# what the process reserves for itself. Every request must be answered,
# and the resident memory's peak must stay under the weights plus the
# budget; the report gives the most rows that ran at once, the KV bytes'
# peak against their share, and the resident peak. Into
# out/bench/admission.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
model=.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf
out=out/bench/admission
mkdir -p "$out" bin
go build -o bin/archrun ./cmd/archrun
go build -o bin/soak ./bench/soak
port=18095
up() {
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "admission: the server did not come up" >&2; return 1
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# the bytes a position takes and the process's reserve, as the server
# measures them
bin/archrun serve -gguf "$model" -port $port -memory-budget 8GiB -prompt-cache-bytes 0 -access-log off 2>/dev/null &
pid=$!
up
read -r per reserve weights < <(curl -s "http://127.0.0.1:$port/health" | json "d['kv']['per_position'], d['kv']['reserve'], d['weights_bytes']" | tr -d '(),')
kill $pid; wait $pid 2>/dev/null || true

words=1950 max=32
# a row at its longest: about 2,000 prompt tokens (words measured below),
# 32 tokens, and a growth step of 256 positions; eight of them, with the
# quarter more a join's copy of the caches takes, beside the reserve
budget=$((reserve + 8 * (2100 + max + 255) * per * 5 / 4))
bin/archrun serve -gguf "$model" -port $port -max-batch 64 -max-queue 0 -memory-budget "$budget" \
  -prompt-cache-bytes 0 -access-log "$out/access.jsonl" 2>"$out/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
up
rm -f "$out/access.jsonl.tmp"
(while kill -0 $pid 2>/dev/null; do curl -s "http://127.0.0.1:$port/health" | json "d['kv']['bytes'], d['queue']['active']" 2>/dev/null; sleep 0.2; done) >"$out/kv.txt" &
(while kill -0 $pid 2>/dev/null; do curl -s "http://127.0.0.1:$port/metrics" | grep -E '^(archgen_memory_(active|cache)_bytes|process_resident_memory_bytes) ' | tr '\n' ' '; echo; sleep 1; done) >"$out/memory.txt" &
status=0
bin/soak -root "http://127.0.0.1:$port" -pid $pid -clients "${ADMISSION_CLIENTS:-64}" -requests 1 -prompt-words $words -max-tokens $max \
  -duration 30m -max-growth "$budget" -out "$out/report.json" >"$out/summary.txt" || status=$?
cat "$out/summary.txt"
kill $pid; wait $pid 2>/dev/null || true
python3 - "$out" "$budget" "$reserve" "$weights" <<'PY' || status=1
import json, sys
out, budget, reserve, weights = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
kv = [tuple(map(float, l.split())) for l in open(f"{out}/kv.txt") if len(l.split()) == 2]
prompts = [json.loads(l)["prompt_tokens"] for l in open(f"{out}/access.jsonl") if '"prompt_tokens"' in l]
peak = json.load(open(f"{out}/report.json"))["RSSPeak"]  # sampled by the soak
print(f"prompts: {min(prompts)}-{max(prompts)} tokens; memory budget {budget >> 20} MiB "
      f"(reserve {reserve >> 20} MiB, KV {(budget - reserve) >> 20} MiB); "
      f"KV peak {int(max(b for b, _ in kv)) >> 20} MiB; most rows at once {int(max(a for _, a in kv))}; "
      f"resident peak {peak >> 20} MiB, weights {weights >> 20} MiB + budget {budget >> 20} MiB = {(weights + budget) >> 20} MiB")
if peak > weights + budget:
    print(f"FAIL: the resident peak is {(peak - weights - budget) >> 20} MiB over the weights and the budget")
    sys.exit(1)
PY
exit $status
