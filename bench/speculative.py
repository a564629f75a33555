"""Speculative decoding's speed: archrun generate with and without a draft
model, and with prompt lookup, on the real SmolLM2-135M-Instruct.

    .deps/py/bin/python bench/speculative.py [--out DIR] [--runs 3] [--max-tokens 256]

The model is the float32 file llama.cpp's llama-quantize makes of the Q4_1
GGUF (the same values, unpacked: `make setup-llama-tools` builds the
tool), and the draft is the Q4_1 file itself: the same tokenizer and, the
values being the same, a real agreement (the products round differently
in the two forms, so the draft is not always right). Prompt lookup runs on
both files with an editing prompt, whose reply repeats most of its input.
Every run is greedy, so each setting must write the text the model writes
alone: the table says so. Each figure is the median over --runs runs of
archrun's own "Generation" rate (tokens after the first over their time)
and its count of drafts kept. The server's rows: `archrun serve` on the
float32 file with the Q4_1 file as -draft-model, one streamed greedy chat
request at a time (so each runs alone and drafts), the story's prompt,
with and without `"speculative": false`; the rate is the streamed tokens
after the first over their time, the drafts kept the usage's
accepted_prediction_tokens. Writes results.json and tables.md under
--out.
"""

import argparse
import http.client
import json
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GGUF = ROOT / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"
QUANTIZE = ROOT / ".deps/llama-tools/bin/llama-quantize"

STORY = "Write a short story about a lighthouse keeper who finds a message in a bottle."
EDIT = ("Correct the spelling in this paragraph and write it out again in full:\n\n"
        "The lighthouse keeper walked down to the shore every mornng. One day he found a botle "
        "half buried in the sand. Inside was a leter written in faded ink. It asked whoever found "
        "it to light the lamp one more time, so that a ship lost long ago could find its way home. "
        "That night he climbed the stairs and lit the lamp, and far out at sea a light answered.")


def log(msg):
    print(f"speculative: {msg}", file=sys.stderr, flush=True)


def generate(binary, model, prompt, max_tokens, extra):
    cmd = [str(binary), "generate", "-m", str(model), "-p", prompt, "-n", str(max_tokens), "-seed", "1"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rate = float(re.search(r"Generation: \d+ tokens, ([\d.]+) tokens-per-sec", p.stderr).group(1))
    m = re.search(r"Draft: (\d+) of (\d+) drafted tokens accepted", p.stderr)
    kept, drafted = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    return p.stdout, rate, kept, drafted


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(port, prompt, max_tokens, speculative):
    """One streamed greedy chat request: its text, its rate (tokens after
    the first over their time) and its drafts kept and drafted."""
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    if not speculative:
        body["speculative"] = False
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    times, text, usage = [], [], None
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
            continue
        ev = json.loads(line[5:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                times.append(time.perf_counter())
                text.append(piece)
    conn.close()
    n = usage["completion_tokens"]
    details = usage.get("completion_tokens_details") or {}
    kept = details.get("accepted_prediction_tokens", 0)
    drafted = kept + details.get("rejected_prediction_tokens", 0)
    return "".join(text), (n - 1) / (times[-1] - times[0]), kept, drafted


def serve_rows(binary, f32, max_tokens, runs):
    port = free_port()
    srv = subprocess.Popen([str(binary), "serve", "-gguf", str(f32), "-draft-model", str(GGUF),
                            "-num-draft-tokens", "3", "-port", str(port), "-access-log", "off"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        chat(port, STORY, 8, True)  # warm-up
        rows, ref = [], None
        for name, spec in (("serve, alone", False), ("serve, Q4_1 drafts 3", True)):
            texts, rates, kept, drafted = [], [], 0, 0
            for _ in range(runs):
                text, rate, kept, drafted = chat(port, STORY, max_tokens, spec)
                texts.append(text)
                rates.append(rate)
            rate = statistics.median(rates)
            if ref is None:
                ref = (texts[0], rate)
            rows.append({"model": "float32", "task": "story", "setting": name, "tokens_per_s": rate, "runs": rates,
                         "kept": kept, "drafted": drafted, "same_text": all(t == ref[0] for t in texts),
                         "speedup": rate / ref[1]})
            log(f"float32 story {name}: {rate:.1f} tok/s ({rows[-1]['speedup']:.2f}x), kept {kept}/{drafted}")
        return rows
    finally:
        srv.terminate()
        srv.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out/bench/speculative")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    f32 = args.out / "SmolLM2-135M-Instruct.F32.gguf"
    if not f32.exists():
        log(f"making {f32.name} with llama-quantize")
        subprocess.run([str(QUANTIZE), "--allow-requantize", str(GGUF), str(f32), "F32"], check=True,
                       capture_output=True)
    binary = args.out / "archrun"
    subprocess.run(["go", "build", "-o", str(binary), "./cmd/archrun"], cwd=ROOT, check=True)
    settings = [
        ("float32", f32, STORY, "alone", []),
        ("float32", f32, STORY, "Q4_1 drafts 2", ["-draft-model", str(GGUF), "-num-draft-tokens", "2"]),
        ("float32", f32, STORY, "Q4_1 drafts 3", ["-draft-model", str(GGUF), "-num-draft-tokens", "3"]),
        ("float32", f32, STORY, "Q4_1 drafts 5", ["-draft-model", str(GGUF), "-num-draft-tokens", "5"]),
        ("float32", f32, EDIT, "alone", []),
        ("float32", f32, EDIT, "lookup 3", ["-lookup", "-num-draft-tokens", "3"]),
        ("float32", f32, EDIT, "lookup 6", ["-lookup", "-num-draft-tokens", "6"]),
        ("Q4_1", GGUF, EDIT, "alone", []),
        ("Q4_1", GGUF, EDIT, "lookup 3", ["-lookup", "-num-draft-tokens", "3"]),
        ("Q4_1", GGUF, EDIT, "lookup 6", ["-lookup", "-num-draft-tokens", "6"]),
    ]
    rows, base = [], {}
    for model, path, prompt, name, extra in settings:
        task = "story" if prompt is STORY else "edit"
        texts, rates, kept, drafted = [], [], 0, 0
        for _ in range(args.runs):
            text, rate, k, d = generate(binary, path, prompt, args.max_tokens, extra)
            texts.append(text)
            rates.append(rate)
            kept, drafted = k, d
        rate = statistics.median(rates)
        if name == "alone":
            base[(model, task)] = (texts[0], rate)
        ref_text, ref_rate = base[(model, task)]
        row = {"model": model, "task": task, "setting": name, "tokens_per_s": rate, "runs": rates,
               "kept": kept, "drafted": drafted, "same_text": all(t == ref_text for t in texts),
               "speedup": rate / ref_rate}
        rows.append(row)
        log(f"{model} {task} {name}: {rate:.1f} tok/s ({row['speedup']:.2f}x), kept {kept}/{drafted}, "
            f"same text {row['same_text']}")
    rows += serve_rows(binary, f32, args.max_tokens, args.runs)
    lines = ["| model | task | setting | tokens/s | vs alone | drafts kept | same text |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        share = f"{r['kept']} / {r['drafted']} ({100 * r['kept'] / r['drafted']:.0f}%)" if r["drafted"] else ""
        lines.append(f"| {r['model']} | {r['task']} | {r['setting']} | {r['tokens_per_s']:.1f} | "
                     f"{r['speedup']:.2f}x | {share} | {'yes' if r['same_text'] else 'no'} |")
    table = "\n".join(lines) + "\n"
    (args.out / "results.json").write_text(json.dumps({"max_tokens": args.max_tokens, "runs": args.runs,
                                                       "rows": rows}, indent=1))
    (args.out / "tables.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
