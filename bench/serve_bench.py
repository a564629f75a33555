"""OpenAI-compatible servers side by side: what `make bench` (and `make
bench-serve` alone) runs.

    .deps/py/bin/python bench/serve_bench.py [--model smollm2|1b] [--out DIR] [--streams 1,4,16,64]
        [--max-tokens 128] [--rounds 3] [--only archgen,mlx-lm,llama.cpp]

The models (--model):
  - smollm2: the real SmolLM2-135M-Instruct, 4-bit (its Q4_1 GGUF; archgen
    and mlx-lm on the model dir bench/ggufdir makes of it, llama.cpp on the
    file itself), streams 1, 4 and 16;
  - 1b: the Llama-3.2-1B geometry of bench/sizes.py (random weights,
    SmolLM2's tokenizer): archgen on the mlx-community 4-bit g64 dir,
    llama.cpp on the Q4_K_M file (its faster 4-bit decode at this size),
    streams 1, 4, 16 and 64. mlx-lm is left out at this size: it decodes
    at under 1 tok/s here, and a round would take hours.

The servers, one at a time, each in a process of its own on a loopback port,
each with as many slots as the most streams measured:
  - archgen: `archrun serve -model DIR -max-batch SLOTS` (continuous batching);
  - mlx-lm: `python -m mlx_lm server --model DIR` (its batched generation);
  - llama.cpp: its own `llama-server -np SLOTS` (continuous batching, its
    default), built by `make setup-llama-tools`, SLOTS x 512 tokens of
    context, 2 threads.

For each number of concurrent streams C, C clients each send one streamed
/v1/completions request at once, each with its own prompt (the same
prompts, in the same order, for every server), greedy (temperature 0),
max_tokens the same; a round ends when the last answer is in. After a
warm-up round, --rounds rounds are measured:
  - aggregate tok/s: the completion tokens of the round (usage) over its
    wall time, the median over rounds;
  - time to first token (TTFT): from sending a request to its first
    streamed token, p50 and p99 over every measured request;
  - latency: each request's time from sending to its whole answer, the
    median and the largest.
The load average (/proc/loadavg) is recorded when each server starts and
ends. Writes results.json and tables.md under --out and prints the table.
"""

import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / ".deps/py/bin/python"
LLAMA_SERVER = ROOT / ".deps/llama-tools/bin/llama-server"
GGUF = ROOT / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"
SIZES_MODELS = ROOT / "out/bench/sizes/models"

# Sixteen story openings: plain completions, which a 135M model continues
# for the whole max_tokens far more often than it ends them.
PROMPTS = [
    "The old lighthouse keeper climbed the stairs one last time and",
    "In the year 2150, the first city on Mars was",
    "The recipe for my grandmother's apple pie begins with",
    "When the train stopped in the middle of the desert, the passengers",
    "The history of the printing press starts in",
    "A small robot woke up in an empty warehouse and",
    "The rules of chess are simple to learn:",
    "On the first day of school, the new teacher told the class that",
    "The river had flooded the village twice before, so this time",
    "Photosynthesis is the process by which plants",
    "The detective looked at the broken window and said",
    "Every winter the birds of the northern forest",
    "The best way to learn a new language is",
    "At the bottom of the ocean, far from any light,",
    "The inventor showed the crowd her new machine, which",
    "Long ago, in a kingdom between two mountains,",
]
# Past 16 streams, each opening again under another heading, so that every
# request has a prompt of its own.
HEADINGS = ["", "Chapter one. ", "A short story. ", "From the archive: "]


def prompts_for(c):
    return [HEADINGS[i // len(PROMPTS) % len(HEADINGS)] + PROMPTS[i % len(PROMPTS)] for i in range(c)]


def log(msg):
    print(f"serve-bench: {msg}", file=sys.stderr, flush=True)


def loadavg():
    return Path("/proc/loadavg").read_text().split()[:3]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free loopback port, stopped on exit."""

    def __init__(self, name, cmd, model, log_path):
        self.name, self.model = name, model
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/v1"
        cmd = [str(c).replace("{port}", str(self.port)) for c in cmd]
        log(" ".join(cmd))
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, limit=600):
        deadline = time.time() + limit
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.base + "/models", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not answer within {limit} s; see {self.log.name}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def stream_completion(server, body):
    """One streamed /v1/completions request: (seconds to its first token,
    seconds to its end, completion tokens, text)."""
    u = urllib.parse.urlsplit(server.base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=1800)
    try:
        t0 = time.perf_counter()
        conn.request("POST", u.path + "/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"status {resp.status}: {resp.read()[:300]!r}")
        first, chunks, usage, text = None, 0, None, []
        for line in resp:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                if first is None:
                    first = time.perf_counter() - t0
                chunks += 1
                text.append(ch.get("text") or "")
        end = time.perf_counter() - t0
    finally:
        conn.close()
    n = usage["completion_tokens"] if usage else chunks
    return first if first is not None else end, end, n, "".join(text)


def one_round(server, prompts, max_tokens):
    """Sends every prompt at once; returns the wall time and each request's
    (ttft, latency, completion tokens, text)."""
    results = [None] * len(prompts)
    start = threading.Barrier(len(prompts) + 1)

    def client(i):
        body = {"model": server.model, "prompt": prompts[i], "max_tokens": max_tokens, "temperature": 0.0,
                "stream": True, "stream_options": {"include_usage": True}}
        start.wait()
        t0 = time.perf_counter()
        for attempt in range(10):
            try:
                waited = time.perf_counter() - t0
                ttft, end, n, text = stream_completion(server, body)
                results[i] = (waited + ttft, waited + end, n, text)
                return
            except (ConnectionResetError, ConnectionRefusedError, http.client.RemoteDisconnected) as e:
                # A server whose listen backlog is short (mlx_lm.server's
                # is socketserver's 5) resets connections past it: the
                # client tries again, as openai's does, and the wait counts
                # in the request's latency and time to first token.
                results[i] = e
                time.sleep(0.2 * (attempt + 1))
            except Exception as e:  # reported, and the round fails
                results[i] = e
                return

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for i, r in enumerate(results):
        if isinstance(r, Exception):
            raise RuntimeError(f"{server.name}: request {i}: {r!r}")
    return wall, results


def percentile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def measure(server, c, max_tokens, rounds):
    prompts = prompts_for(c)
    one_round(server, prompts, max_tokens)  # warm-up
    tps, ttfts, lats, toks, texts = [], [], [], [], None
    for _ in range(rounds):
        wall, res = one_round(server, prompts, max_tokens)
        n = sum(r[2] for r in res)
        tps.append(n / wall)
        ttfts += [r[0] for r in res]
        lats += [r[1] for r in res]
        toks.append(n)
        texts = [r[3] for r in res]
    row = {"streams": c, "tok_s": statistics.median(tps), "tok_s_rounds": tps,
           "ttft_p50_s": percentile(ttfts, 0.5), "ttft_p99_s": percentile(ttfts, 0.99),
           "latency_median_s": statistics.median(lats), "latency_max_s": max(lats),
           "tokens_per_round": toks, "texts": texts}
    log(f"{server.name} x{c}: {row['tok_s']:.1f} tok/s, TTFT p50 {row['ttft_p50_s']:.2f} s, "
        f"p99 {row['ttft_p99_s']:.2f} s, latency median {row['latency_median_s']:.2f} s, tokens {toks}")
    return row


# --model: (title, archgen's and mlx-lm's model dir, llama.cpp's GGUF,
# the servers, default streams)
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct 4-bit (Q4_1)", ROOT / "out/bench/models/smollm2-135m-q4", GGUF,
                "archgen,mlx-lm,llama.cpp", "1,4,16"),
    "1b": ("Llama-3.2-1B geometry, random weights: archgen on mlx 4-bit g64, llama.cpp on Q4_K_M",
           SIZES_MODELS / "1b/q4_g64", SIZES_MODELS / "1b/model-Q4_K_M.gguf", "archgen,llama.cpp", "1,4,16,64"),
}


def servers(model_dir, gguf, bin_dir, slots):
    return {
        "archgen": ([bin_dir / "archrun", "serve", "-model", model_dir, "-port", "{port}", "-max-batch", slots,
                     "-served-model-name", "bench"], "bench"),
        "mlx-lm": ([PY, "-m", "mlx_lm", "server", "--model", model_dir, "--port", "{port}",
                    "--log-level", "WARNING"], str(model_dir)),
        "llama.cpp": ([LLAMA_SERVER, "-m", gguf, "--port", "{port}", "--host", "127.0.0.1", "-t", "2",
                       "-np", slots, "-c", slots * 512, "--alias", "bench", "--no-webui"], "bench"),
    }


def table(results, streams):
    names = [n for n in ("archgen", "mlx-lm", "llama.cpp") if n in results]
    others = [n for n in names if n != "archgen"]
    head = (["streams"] + [f"{n} tok/s" for n in names] + [f"archgen / {n}" for n in others]
            + [f"{n} TTFT p50 (p99)" for n in names] + [f"{n} latency median (max)" for n in names])
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for c in streams:
        row = {n: results[n]["rows"].get(str(c)) for n in names}

        def ratio(other):
            a, b = row.get("archgen"), row.get(other)
            return f"{a['tok_s'] / b['tok_s']:.2f}x" if a and b else "-"

        cells = ([str(c)] + [f"{row[n]['tok_s']:.1f}" if row[n] else "-" for n in names]
                 + [ratio(n) for n in others]
                 + [f"{row[n]['ttft_p50_s']:.2f} s ({row[n]['ttft_p99_s']:.2f} s)" if row[n] else "-" for n in names]
                 + [f"{row[n]['latency_median_s']:.2f} s ({row[n]['latency_max_s']:.2f} s)" if row[n] else "-"
                    for n in names])
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for n in names:
        r = results[n]
        lines.append(f"- {n}: {r['version']}; load average {' '.join(r['load_start'])} at its start, "
                     f"{' '.join(r['load_end'])} at its end.")
    return "\n".join(lines)


def versions(slots):
    v = {}
    out = subprocess.run([PY, "-c", "import mlx_lm, mlx.core as mx; print(mlx_lm.__version__, mx.__version__)"],
                         capture_output=True, text=True).stdout.split()
    if out:
        v["mlx-lm"] = f"mlx-lm {out[0]}, mlx {out[1]}, on the model dir"
    if LLAMA_SERVER.exists():
        out = subprocess.run([LLAMA_SERVER, "--version"], capture_output=True, text=True)
        ver = next((l for l in (out.stdout + out.stderr).splitlines() if l.startswith("version")), "version ?")
        v["llama.cpp"] = f"llama-server ({ver}), -np {slots}, 2 threads, on the GGUF"
    v["archgen"] = f"archrun serve, -max-batch {slots}, on the model dir"
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", choices=sorted(MODELS))
    ap.add_argument("--out", help="default: out/bench/serve (smollm2), out/bench/serve-MODEL otherwise")
    ap.add_argument("--streams", help="default: the model's (1,4,16 or 1,4,16,64)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="default: the model's servers")
    ap.add_argument("--merge", action="store_true",
                    help="keep the previous results.json's servers not run now (same settings)")
    args = ap.parse_args()
    title, model_dir, gguf, only, streams = MODELS[args.model]
    streams = [int(s) for s in (args.streams or streams).split(",")]
    slots = max(streams)
    out = ROOT / (args.out or ("out/bench/serve" if args.model == "smollm2" else f"out/bench/serve-{args.model}"))
    out.mkdir(parents=True, exist_ok=True)
    if args.model == "smollm2" and not (model_dir / "config.json").exists():
        subprocess.run(["go", "run", "./bench/ggufdir", "-in", GGUF, "-out", model_dir], cwd=ROOT, check=True)
    for f in (model_dir / "config.json", gguf):
        if not f.exists():
            sys.exit(f"serve-bench: {f} is missing: `make bench-sizes` makes the 1b checkpoints")
    bin_dir = archrun_binary().parent

    ver = versions(slots)
    path = out / "results.json"
    results = {}
    if args.merge and path.exists():
        old = json.loads(path.read_text())
        if (old["max_tokens"], old["rounds"], old.get("model")) == (args.max_tokens, args.rounds, args.model):
            results = old["servers"]
    cmds = servers(model_dir, gguf, bin_dir, slots)
    started = time.time()
    for name in (args.only or only).split(","):
        if name == "llama.cpp" and not LLAMA_SERVER.exists():
            log("no .deps/llama-tools: run `make setup-llama-tools` for llama.cpp's column")
            continue
        cmd, model = cmds[name]
        srv = Server(name, cmd, model, out / f"{name}.log")
        try:
            srv.wait_ready()
            load_start = loadavg()
            rows = {str(c): measure(srv, c, args.max_tokens, args.rounds) for c in streams}
            results[name] = {"rows": rows, "version": ver.get(name, "?"), "load_start": load_start,
                             "load_end": loadavg(), "command": [str(c) for c in cmd]}
        finally:
            srv.stop()
        path.write_text(json.dumps({"machine": machine(), "model": args.model, "title": title,
                                    "command": "bench/serve_bench.py " + " ".join(sys.argv[1:]),
                                    "max_tokens": args.max_tokens, "rounds": args.rounds, "streams": streams,
                                    "servers": results}, indent=1))
    text = (f"Aggregate generated tokens/s, time to first token and per-request latency, {title}, "
            f"{args.max_tokens} tokens per request at most, greedy, streamed; median of {args.rounds} rounds "
            f"after a warm-up; {machine()['cpu']}, {os.cpu_count()} cores; "
            f"{round((time.time() - started) / 60, 1)} minutes.\n\n" + table(results, streams))
    (out / "tables.md").write_text(text + "\n")
    print(text)


def archrun_binary():
    """archrun, built into out/bench/bin for the server benchmarks."""
    bin_dir = ROOT / "out/bench/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", bin_dir / "archrun", "./cmd/archrun"], cwd=ROOT, check=True)
    return bin_dir / "archrun"


def each_server(names, cmds, out, measure):
    """Starts each named server of cmds in turn (llama.cpp's where it is
    built), with the model id "bench" and its log under out, and records
    what measure(server) gives as its rows, with the load average around
    them and the command."""
    results = {}
    for name in names:
        if name == "llama.cpp" and not LLAMA_SERVER.exists():
            log("no .deps/llama-tools: run `make setup-llama-tools` for llama.cpp's column")
            continue
        srv = Server(name, cmds[name], "bench", out / f"{name}.log")
        try:
            srv.wait_ready()
            load_start = loadavg()
            rows = measure(srv)
            results[name] = {"rows": rows, "load_start": load_start, "load_end": loadavg(),
                             "command": [str(x) for x in cmds[name]]}
        finally:
            srv.stop()
    return results


def machine():
    info = {"platform": platform.platform(), "cores": os.cpu_count(), "cpu": "?"}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        info["cpu"] = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
    except OSError:
        pass
    return info


if __name__ == "__main__":
    main()
