"""Three OpenAI-compatible servers side by side on SmolLM2-135M 4-bit: what
`make bench` (and `make bench-serve` alone) runs.

    .deps/py/bin/python bench/serve_bench.py [--out out/bench/serve] [--streams 1,4,16]
        [--max-tokens 128] [--rounds 3] [--only archgen,mlx-lm,llama.cpp]

The servers, one at a time, each in a process of its own on a loopback port:
  - archgen: `archrun serve -model DIR -max-batch 16` (continuous batching);
  - mlx-lm: `python -m mlx_lm server --model DIR` (its batched generation,
    decode concurrency 32 by default) on the same model dir;
  - llama.cpp: `python -m llama_cpp.server --model GGUF` (llama-cpp-python's
    server extra, one thread per core) on the GGUF the model dir was made from.

For each number of concurrent streams C, C clients each send one
/v1/completions request at once, each with its own prompt (the same
prompts, in the same order, for every server), greedy (temperature 0),
max_tokens the same; a round ends when the last answer is in. After a
warm-up round, --rounds rounds are measured:
  - aggregate tok/s: the completion tokens of the round (usage) over its
    wall time, the median over rounds;
  - latency: each request's time from sending to its whole answer, the
    median and the largest over every measured request.
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
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / ".deps/py/bin/python"
LLAMA_PY = ROOT / ".deps/llama/bin/python"
GGUF = ROOT / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"

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


def log(msg):
    print(f"serve-bench: {msg}", file=sys.stderr, flush=True)


def loadavg():
    return Path("/proc/loadavg").read_text().split()[:3]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=1800):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


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


def one_round(server, prompts, max_tokens):
    """Sends every prompt at once; returns the wall time and each request's
    (latency, completion tokens, text)."""
    results = [None] * len(prompts)
    start = threading.Barrier(len(prompts) + 1)

    def client(i):
        body = {"model": server.model, "prompt": prompts[i], "max_tokens": max_tokens, "temperature": 0.0,
                "stream": False}
        start.wait()
        t0 = time.perf_counter()
        for attempt in range(10):
            try:
                r = post(server.base + "/completions", body)
                results[i] = (time.perf_counter() - t0, r["usage"]["completion_tokens"], r["choices"][0]["text"])
                return
            except (ConnectionResetError, ConnectionRefusedError, http.client.RemoteDisconnected) as e:
                # A server whose listen backlog is short (mlx_lm.server's
                # is socketserver's 5) resets connections past it: the
                # client tries again, as openai's does, and the wait counts
                # in the request's latency.
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


def measure(server, streams, max_tokens, rounds):
    rows = {}
    for c in streams:
        prompts = PROMPTS[:c]
        one_round(server, prompts, max_tokens)  # warm-up
        tps, lats, toks, texts = [], [], [], None
        for _ in range(rounds):
            wall, res = one_round(server, prompts, max_tokens)
            n = sum(r[1] for r in res)
            tps.append(n / wall)
            lats += [r[0] for r in res]
            toks.append(n)
            texts = [r[2] for r in res]
        rows[str(c)] = {"streams": c, "tok_s": statistics.median(tps), "tok_s_rounds": tps,
                        "latency_median_s": statistics.median(lats), "latency_max_s": max(lats),
                        "tokens_per_round": toks, "texts": texts}
        log(f"{server.name} x{c}: {rows[str(c)]['tok_s']:.1f} tok/s, latency median "
            f"{rows[str(c)]['latency_median_s']:.2f} s, max {rows[str(c)]['latency_max_s']:.2f} s, tokens {toks}")
    return rows


def servers(args, model_dir, bin_dir):
    threads = os.cpu_count()
    return {
        "archgen": ([bin_dir / "archrun", "serve", "-model", model_dir, "-port", "{port}", "-max-batch", "16",
                     "-served-model-name", "smollm2"], "smollm2"),
        "mlx-lm": ([PY, "-m", "mlx_lm", "server", "--model", model_dir, "--port", "{port}",
                    "--log-level", "WARNING"], str(model_dir)),
        "llama.cpp": ([LLAMA_PY, "-m", "llama_cpp.server", "--model", GGUF, "--port", "{port}",
                       "--host", "127.0.0.1", "--n_ctx", "4096", "--n_threads", threads,
                       "--n_threads_batch", threads, "--model_alias", "smollm2", "--verbose", "False"], "smollm2"),
    }


def table(results, streams):
    names = [n for n in ("archgen", "mlx-lm", "llama.cpp") if n in results]
    lines = ["| streams | " + " | ".join(f"{n} tok/s" for n in names) + " | archgen / mlx-lm | archgen / llama.cpp | "
             + " | ".join(f"{n} latency median (max)" for n in names) + " |",
             "|---" * (1 + 2 * len(names) + 2) + "|"]
    for c in streams:
        row = [results[n]["rows"].get(str(c)) for n in names]
        tps = {n: r["tok_s"] for n, r in zip(names, row) if r}

        def ratio(other):
            return f"{tps['archgen'] / tps[other]:.2f}×" if "archgen" in tps and other in tps else "—"

        lines.append(f"| {c} | " + " | ".join(f"{r['tok_s']:.1f}" if r else "—" for r in row)
                     + f" | {ratio('mlx-lm')} | {ratio('llama.cpp')} | "
                     + " | ".join(f"{r['latency_median_s']:.2f} s ({r['latency_max_s']:.2f} s)" if r else "—" for r in row)
                     + " |")
    lines.append("")
    for n in names:
        r = results[n]
        lines.append(f"- {n}: {r['version']}; load average {' '.join(r['load_start'])} at its start, "
                     f"{' '.join(r['load_end'])} at its end.")
    return "\n".join(lines)


def versions():
    v = {}
    out = subprocess.run([PY, "-c", "import mlx_lm, mlx.core as mx; print(mlx_lm.__version__, mx.__version__)"],
                         capture_output=True, text=True).stdout.split()
    if out:
        v["mlx-lm"] = f"mlx-lm {out[0]}, mlx {out[1]}"
    if LLAMA_PY.exists():
        out = subprocess.run([LLAMA_PY, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                             capture_output=True, text=True).stdout.strip()
        v["llama.cpp"] = f"llama-cpp-python {out}, {os.cpu_count()} threads, on the GGUF"
    v["archgen"] = "archrun serve, -max-batch 16, on the model dir"
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench/serve")
    ap.add_argument("--models", default="out/bench/models", help="where bench.py keeps its checkpoints")
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="archgen,mlx-lm,llama.cpp")
    ap.add_argument("--merge", action="store_true",
                    help="keep the previous results.json's servers not run now (same settings)")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    model_dir = ROOT / args.models / "smollm2-135m-q4"
    if not (model_dir / "config.json").exists():
        subprocess.run(["go", "run", "./bench/ggufdir", "-in", GGUF, "-out", model_dir], cwd=ROOT, check=True)
    bin_dir = ROOT / "out/bench/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", bin_dir / "archrun", "./cmd/archrun"], cwd=ROOT, check=True)

    ver = versions()
    path = out / "results.json"
    results = {}
    if args.merge and path.exists():
        old = json.loads(path.read_text())
        if (old["max_tokens"], old["rounds"]) == (args.max_tokens, args.rounds):
            results = old["servers"]
    cmds = servers(args, model_dir, bin_dir)
    started = time.time()
    for name in args.only.split(","):
        if name == "llama.cpp" and not LLAMA_PY.exists():
            log("no .deps/llama: run `make bench-llama` for llama.cpp's column")
            continue
        cmd, model = cmds[name]
        srv = Server(name, cmd, model, out / f"{name}.log")
        try:
            srv.wait_ready()
            load_start = loadavg()
            rows = measure(srv, streams, args.max_tokens, args.rounds)
            results[name] = {"rows": rows, "version": ver.get(name, "?"), "load_start": load_start,
                             "load_end": loadavg(), "command": [str(c) for c in cmd]}
        finally:
            srv.stop()
        path.write_text(json.dumps({"machine": machine(), "max_tokens": args.max_tokens, "rounds": args.rounds,
                                    "servers": results}, indent=1))
    text = (f"Aggregate generated tokens/s and per-request latency, SmolLM2-135M-Instruct 4-bit (Q4_1), "
            f"{args.max_tokens} tokens per request at most, greedy, median of {args.rounds} rounds after a warm-up; "
            f"{machine()['cpu']}, {os.cpu_count()} cores; {round((time.time() - started) / 60, 1)} minutes.\n\n"
            + table(results, streams))
    (out / "tables.md").write_text(text + "\n")
    print(text)


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
