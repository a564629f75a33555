"""What constrained decoding costs: archgen's server and llama.cpp's
llama-server side by side on the same checkpoint, each decoding free text,
JSON-schema replies and forced tool calls.

    .deps/py/bin/python bench/structured_bench.py [--out DIR] [--streams 1,4] [--rounds 3]
        [--max-tokens 128] [--only archgen,llama.cpp]

Both servers run the real SmolLM2-135M-Instruct as llama.cpp's Q4_1 GGUF
(archgen on the file itself, llama-server from the pinned sdist), with the
chat template cmd/archrun/testdata/chatml_tools.jinja (a tool-call format
for both: `-chat-template` and `--jinja --chat-template-file`), as many
slots as the most streams, 2 threads for llama-server.

For each kind of request and each number of concurrent streams C, C clients
each send one streamed chat at once, greedy, max_tokens the same: free
text; response_format json_schema (a bounded object, so that a reply ends by
itself); tool_choice required with one tool. A round ends when the last
answer is in; after a warm-up round, --rounds rounds are measured. Replies
differ in length by kind (a JSON object ends sooner than free text), so the
prompt's share of a request's time differs too: the figure compared is each
request's decode rate, its completion tokens after the first over the time
from its first event to its last (the median over the measured requests);
the aggregate tokens/s (completion tokens over the round's wall time, the
median round) is given beside it. Every constrained reply is checked: a
json_schema reply that ended by itself must parse as JSON, a forced call
must come back as tool_calls. The table gives each kind's decode rate and
its ratio to the same server's free text (the mask's cost), and archgen's
ratio to llama-server. Writes results.json and tables.md under --out.
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import GGUF, LLAMA_SERVER, ROOT, archrun_binary, each_server, log, machine  # noqa: E402

TEMPLATE = ROOT / "cmd/archrun/testdata/chatml_tools.jinja"
SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 32},
    "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}},
    "required": ["title", "year", "tags"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "search", "description": "Search the library", "parameters": {
    "type": "object", "properties": {"query": {"type": "string", "maxLength": 32},
                                     "limit": {"type": "integer", "minimum": 1, "maximum": 20}},
    "required": ["query", "limit"], "additionalProperties": False}}}
PROMPTS = ["Describe a book you like.", "Suggest a film for tonight.", "Name a song and its year.",
           "Tell me about a painting.", "Recommend a board game.", "Pick a novel for a long trip.",
           "Describe a famous bridge.", "Name an album worth hearing."]
KINDS = {
    "free text": {},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "item", "schema": SCHEMA, "strict": True}}},
    "tool_choice required": {"tools": [TOOL], "tool_choice": "required", "parallel_tool_calls": False},
}


def chat(server, body):
    """One streamed chat: (seconds to its first event, seconds to its end,
    completion tokens, the reply's text, its tool calls' names and
    arguments)."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(server.base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first, tokens, text, calls, finish = None, 0, "", {}, None
    with urllib.request.urlopen(req, timeout=900) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            if first is None:
                first = time.perf_counter() - start
            data = line[len("data: "):]
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            for ch in ev.get("choices") or []:
                d = ch.get("delta") or {}
                text += d.get("content") or ""
                for tc in d.get("tool_calls") or []:
                    e = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    e["name"] += fn.get("name") or ""
                    e["arguments"] += fn.get("arguments") or ""
                finish = ch.get("finish_reason") or finish
    return first, time.perf_counter() - start, tokens, text, list(calls.values()), finish


def one_round(server, kind, c, max_tokens):
    """A round of c chats at once: (aggregate tokens/s, each request's
    decode tokens/s after its first event, tokens, invalid replies)."""
    out, errors = [None] * c, []

    def client(i):
        body = {"model": server.model, "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                "max_tokens": max_tokens, "temperature": 0, **KINDS[kind]}
        try:
            out[i] = chat(server, body)
        except Exception as e:  # noqa: BLE001: recorded, and the round fails
            errors.append(f"{kind}, client {i}: {e}")

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError("; ".join(errors))
    tokens, bad, decode = 0, 0, []
    for first, end, n, text, calls, finish in out:
        tokens += n
        if n > 1 and end > first:
            decode.append((n - 1) / (end - first))
        if kind == "json_schema" and finish == "stop":
            try:
                json.loads(text)
            except ValueError:
                bad += 1
        if kind == "tool_choice required" and not calls:
            bad += 1
    return tokens / wall, decode, tokens, bad


def measure(server, c, max_tokens, rounds):
    rows = {}
    for kind in KINDS:
        one_round(server, kind, c, max_tokens)  # warm-up
        rates, decode, bad, toks = [], [], 0, []
        for _ in range(rounds):
            rate, dec, tokens, b = one_round(server, kind, c, max_tokens)
            rates.append(rate)
            decode += dec
            toks.append(tokens)
            bad += b
        rows[kind] = {"tok_s": statistics.median(rates), "decode_tok_s": statistics.median(decode) if decode else 0,
                      "tokens": toks, "invalid": bad}
        log(f"{server.name}, {c} streams, {kind}: {rows[kind]['tok_s']:.1f} tok/s, "
            f"decode {rows[kind]['decode_tok_s']:.1f} tok/s a stream, {bad} invalid")
    return rows


def table(results, streams):
    names = list(results)
    head = "| streams | kind | " + " | ".join(f"{n}: decode tok/s a stream (× its free text); aggregate tok/s" for n in names)
    if len(names) == 2:
        head += f" | decode, {names[0]} / {names[1]}"
    lines = [head + " |", "|" + "---|" * (2 + len(names) + (len(names) == 2))]
    for c in streams:
        for kind in KINDS:
            cells = []
            for n in names:
                row = results[n]["rows"][str(c)]
                v, base = row[kind]["decode_tok_s"], row["free text"]["decode_tok_s"]
                bad = f", {row[kind]['invalid']} invalid" if row[kind]["invalid"] else ""
                cells.append(f"{v:.1f} ({v / base:.2f}×{bad}); {row[kind]['tok_s']:.1f}")
            if len(names) == 2:
                a, b = (results[n]["rows"][str(c)][kind]["decode_tok_s"] for n in names)
                cells.append(f"{a / b:.2f}×")
            lines.append(f"| {c} | {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench/structured")
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="archgen,llama.cpp")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    slots = max(streams)
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    cmds = {
        "archgen": [archrun_binary(), "serve", "-gguf", GGUF, "-port", "{port}", "-max-batch", slots,
                    "-served-model-name", "bench", "-chat-template", TEMPLATE, "-access-log", "off"],
        "llama.cpp": [LLAMA_SERVER, "-m", GGUF, "--port", "{port}", "--host", "127.0.0.1", "-t", "2", "-np", slots,
                      "-c", slots * 1024, "--alias", "bench", "--no-webui", "--jinja", "--chat-template-file", TEMPLATE],
    }
    started = time.time()
    results = each_server(args.only.split(","), cmds, out,
                          lambda srv: {str(c): measure(srv, c, args.max_tokens, args.rounds) for c in streams})
    (out / "results.json").write_text(json.dumps({
        "machine": machine(), "command": "bench/structured_bench.py " + " ".join(sys.argv[1:]),
        "max_tokens": args.max_tokens, "rounds": args.rounds, "streams": streams, "servers": results}, indent=1))
    text = (f"Constrained decoding's cost: decode tokens/s a stream and aggregate tokens/s of streamed chats, SmolLM2-135M-Instruct "
            f"Q4_1 GGUF, greedy, {args.max_tokens} tokens at most, median of {args.rounds} rounds after a "
            f"warm-up; {machine()['cpu']}, {os.cpu_count()} cores; {round((time.time() - started) / 60, 1)} minutes.\n\n"
            + table(results, streams))
    (out / "tables.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
