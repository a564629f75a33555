"""Embeddings' throughput: archgen's POST /v1/embeddings beside llama.cpp's
llama-server on the same checkpoint.

    .deps/py/bin/python bench/embed_bench.py [--model smollm2|minilm] [--out DIR]
        [--batches 1,8,32] [--rounds 3] [--only archgen,llama.cpp]

With --model smollm2 (the default) both servers run the real
SmolLM2-135M-Instruct as llama.cpp's Q4_1 GGUF (archgen on the file itself;
llama-server from the pinned sdist with `--embeddings --pooling last`, its
generative model's pooled final hidden states, as archgen's default pooling
is; 2 threads, 8 slots, each 512 tokens of context). With --model minilm
they run the real encoder all-MiniLM-L6-v2 (`make models`) in float32:
archgen on its sentence-transformers folder, llama-server on the F32 GGUF
bench/bert_gguf.py makes of it the way llama.cpp's converter does, both
pooling by the mean as the folder says. Inputs are sentences of 20-40 tokens, the same for both
servers. For each batch size B, one client sends requests of B inputs, one
after another, for --rounds rounds of 4 requests after a warm-up; the figure
is inputs (and input tokens) a second over the round's wall time, the
median round. Each server's vectors are checked: as many as inputs, of the
model's width, of unit length; and the two servers' vectors for the same
input are compared (cosine similarity; llama-server computes in its own
precision, archgen in float32, so they agree closely, not exactly).
Writes results.json and tables.md under --out.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import GGUF, LLAMA_SERVER, ROOT, archrun_binary, each_server, log, machine  # noqa: E402

WORDS = ("the river city morning light market street window garden winter summer bridge stone paper letter "
         "music evening forest mountain harbor train station coffee bread table friend teacher village road "
         "field storm quiet bright old new small large early late").split()


def sentence(i):
    n = 20 + (i * 7) % 20
    return " ".join(WORDS[(i * 13 + k * 5) % len(WORDS)] for k in range(n)) + "."


def embed(server, inputs):
    body = {"model": server.model, "input": inputs, "encoding_format": "float"}
    req = urllib.request.Request(server.base + "/embeddings", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        out = json.load(r)
    return [d["embedding"] for d in sorted(out["data"], key=lambda d: d["index"])], out["usage"]["prompt_tokens"]


def measure(server, batches, rounds):
    rows, vectors = {}, {}
    for b in batches:
        inputs = [sentence(i) for i in range(b)]
        embed(server, inputs)  # warm-up
        rates, tok_rates = [], []
        for _ in range(rounds):
            start, n, toks = time.perf_counter(), 0, 0
            for _ in range(4):
                vecs, t = embed(server, inputs)
                n, toks = n + len(vecs), toks + t
                bad = [i for i, v in enumerate(vecs) if abs(math.sqrt(sum(x * x for x in v)) - 1) > 1e-3]
                if len(vecs) != b or bad:
                    raise RuntimeError(f"{server.name}: {len(vecs)} vectors for {b} inputs, not of unit length: {bad[:5]}")
            wall = time.perf_counter() - start
            rates.append(n / wall)
            tok_rates.append(toks / wall)
            vectors = {i: v for i, v in enumerate(vecs)}
        rows[str(b)] = {"inputs_s": statistics.median(rates), "tokens_s": statistics.median(tok_rates)}
        log(f"{server.name}, batch {b}: {rows[str(b)]['inputs_s']:.1f} inputs/s, {rows[str(b)]['tokens_s']:.0f} tokens/s")
    return rows, vectors


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench/embed")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="archgen,llama.cpp")
    ap.add_argument("--model", default="smollm2", choices=["smollm2", "minilm"])
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.model == "smollm2":
        what = "SmolLM2-135M-Instruct Q4_1 GGUF, last-token pooling"
        archgen, llama, pool = ["-gguf", GGUF], GGUF, "last"
    else:
        what = "all-MiniLM-L6-v2 (BERT) in float32, mean pooling"
        folder = ROOT / ".deps" / "models" / "all-MiniLM-L6-v2"
        gguf = out / "all-MiniLM-L6-v2.F32.gguf"
        if not gguf.exists():
            subprocess.run([sys.executable, str(ROOT / "bench" / "bert_gguf.py"), str(folder), str(gguf)], check=True)
        archgen, llama, pool = ["-model", str(folder)], str(gguf), "mean"
    cmds = {
        "archgen": [archrun_binary(), "serve", *archgen, "-port", "{port}", "-served-model-name", "bench",
                    "-access-log", "off"],
        "llama.cpp": [LLAMA_SERVER, "-m", llama, "--port", "{port}", "--host", "127.0.0.1", "-t", "2", "-np", 8,
                      "-c", 8 * 512, "-b", 4096, "-ub", 4096, "--alias", "bench", "--no-webui", "--embeddings",
                      "--pooling", pool],
    }
    vecs, started = {}, time.time()

    def run(srv):
        rows, vecs[srv.name] = measure(srv, batches, args.rounds)
        return rows

    results = each_server(args.only.split(","), cmds, out, run)
    agree = None
    if len(vecs) == 2:
        a, b = vecs.values()
        agree = min(cosine(a[i], b[i]) for i in a if i in b)
    (out / "results.json").write_text(json.dumps({
        "machine": machine(), "command": "bench/embed_bench.py " + " ".join(sys.argv[1:]), "model": args.model,
        "rounds": args.rounds,
        "batches": batches, "servers": results, "min_cosine": agree}, indent=1))
    names = list(results)
    lines = ["| inputs a request | " + " | ".join(f"{n}: inputs/s (tokens/s)" for n in names)
             + (f" | {names[0]} / {names[1]}" if len(names) == 2 else "") + " |",
             "|" + "---|" * (1 + len(names) + (len(names) == 2))]
    for b in batches:
        cells = [f"{results[n]['rows'][str(b)]['inputs_s']:.1f} ({results[n]['rows'][str(b)]['tokens_s']:.0f})" for n in names]
        if len(names) == 2:
            x, y = (results[n]["rows"][str(b)]["inputs_s"] for n in names)
            cells.append(f"{x / y:.2f}×")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    text = (f"Embeddings' throughput, {what}, inputs of 20-40 tokens, "
            f"one client, median of {args.rounds} rounds of 4 requests after a warm-up; {machine()['cpu']}, "
            f"{os.cpu_count()} cores; {round((time.time() - started) / 60, 1)} minutes"
            + (f"; the two servers' vectors agree to a cosine similarity of {agree:.5f} at least" if agree else "")
            + ".\n\n" + "\n".join(lines))
    (out / "tables.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
