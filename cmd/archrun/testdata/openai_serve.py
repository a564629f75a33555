"""Drives `archrun serve` with the official openai client, as a user would.

Usage: python openai_serve.py BASE_URL EXPECTED.json

EXPECTED.json holds what the archgen library gives for each prompt alone
(greedy): {"model", "max_tokens", "chats": [{"prompt", "text", "tokens",
"finish"}], "completion": {...}, "sampled": {...}} (sampled: temperature 0.8, top_p 0.9,
top_k 40, min_p 0.05, repetition_penalty 1.1, seed 7). Every
check that fails is printed; the exit status is 1 if any did.
"""

import json
import sys
import threading
import time
import urllib.error
import urllib.request

import openai

base, expected_path = sys.argv[1], sys.argv[2]
with open(expected_path) as f:
    want = json.load(f)
model, max_tokens = want["model"], want["max_tokens"]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=600)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def health():
    with urllib.request.urlopen(base.removesuffix("/v1") + "/health") as r:
        return json.load(r)


def chat(prompt, **kw):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, **kw)


# /v1/models
ids = [m.id for m in client.models.list().data]
check(ids == [model], f"/v1/models lists {ids}")

# chat, not streamed, then streamed
first = want["chats"][0]
r = chat(first["prompt"])
c = r.choices[0]
check(c.message.content == first["text"], f"chat: {c.message.content!r} == {first['text']!r}")
check(c.finish_reason == first["finish"], f"chat finish_reason {c.finish_reason} == {first['finish']}")
check(r.usage.completion_tokens == first["tokens"], f"chat usage.completion_tokens {r.usage.completion_tokens} == {first['tokens']}")
check(r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
      f"chat usage {r.usage.prompt_tokens} + {r.usage.completion_tokens} = {r.usage.total_tokens}")

text, finish, usage = "", None, None
for chunk in chat(first["prompt"], stream=True):
    for ch in chunk.choices:
        text += ch.delta.content or ""
        finish = ch.finish_reason or finish
    usage = chunk.usage or usage
check(text == first["text"], f"streamed chat: {text!r} == {first['text']!r}")
check(finish == first["finish"], f"streamed chat finish_reason {finish} == {first['finish']}")
check(usage is not None and usage.completion_tokens == first["tokens"], f"streamed chat usage {usage}")
check(health()["prompt_cache"]["hits"] >= 1, "the repeated prompt hit the prompt cache (/health)")

# logprobs: the chosen token heads its alternatives under greedy decoding
r = chat(first["prompt"], logprobs=True, top_logprobs=3)
content = r.choices[0].logprobs.content
check(len(content) == r.usage.completion_tokens, f"logprobs: {len(content)} entries for {r.usage.completion_tokens} tokens")
check(all(len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token and e.logprob <= 0 for e in content),
      "logprobs: each token is its top alternative, with 3 alternatives")
check("".join(e.token for e in content) == first["text"], "logprobs: the tokens spell the text")

# seeded sampling with every filter gives the library's draws
sampled = want["sampled"]
kw = dict(temperature=0.8, top_p=0.9, seed=7, extra_body={"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1})
r = chat(sampled["prompt"], **kw)
check((r.choices[0].message.content, r.usage.completion_tokens) == (sampled["text"], sampled["tokens"]),
      f"seeded sampling: {r.choices[0].message.content!r} == {sampled['text']!r}")

# stop strings end the text before them
if len(first["text"]) > 8:
    stop = first["text"][4:8]
    r = chat(first["prompt"], stop=[stop])
    cut = first["text"][: first["text"].index(stop)]
    check(r.choices[0].message.content == cut and r.choices[0].finish_reason == "stop",
          f"stop {stop!r}: {r.choices[0].message.content!r} == {cut!r}, finish {r.choices[0].finish_reason}")

# text completions, not streamed and streamed
comp = want["completion"]
r = client.completions.create(model=model, prompt=comp["prompt"], max_tokens=max_tokens)
check(r.choices[0].text == comp["text"], f"completion: {r.choices[0].text!r} == {comp['text']!r}")
check(r.choices[0].finish_reason == comp["finish"] and r.usage.completion_tokens == comp["tokens"],
      f"completion finish {r.choices[0].finish_reason}, {r.usage.completion_tokens} tokens")
text, finish, usage = "", None, None
for chunk in client.completions.create(model=model, prompt=comp["prompt"], max_tokens=max_tokens, stream=True,
                                       stream_options={"include_usage": True}):
    for ch in chunk.choices:
        text += ch.text
        finish = ch.finish_reason or finish
    usage = chunk.usage or usage
check(text == comp["text"] and finish == comp["finish"], f"streamed completion: {text!r}, finish {finish}")
check(usage is not None and usage.completion_tokens == comp["tokens"], f"streamed completion usage {usage}")

# concurrent clients, each with its own prompt, get exactly their solo
# greedy tokens: each token's bytes (logprobs), which name one id each in
# this vocabulary, as the expected file lists them, and the same text
results = {}
start = threading.Barrier(len(want["chats"]))


def worker(i, case):
    try:
        start.wait()
        r = chat(case["prompt"], logprobs=True)
        c = r.choices[0]
        results[i] = (c.message.content, [e.bytes for e in c.logprobs.content], r.usage.completion_tokens,
                      c.finish_reason)
    except Exception as e:  # reported below as a mismatch
        results[i] = repr(e)


max_before = health()["max_active"]
threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(want["chats"])]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i, case in enumerate(want["chats"]):
    got = results.get(i)
    expect = (case["text"], case["token_bytes"], case["tokens"], case["finish"])
    if got == expect:
        check(True, f"concurrent client {i}: its {case['tokens']} solo greedy tokens {case['ids'][:6]}...")
        continue
    if isinstance(got, tuple):
        n = next((k for k, (a, b) in enumerate(zip(got[1], case["token_bytes"])) if a != b),
                 min(len(got[1]), len(case["token_bytes"])))
        check(False, f"concurrent client {i}: tokens differ from token {n} (solo id {case['ids'][n:n + 1]}): "
                     f"{got!r} != {expect!r}")
    else:
        check(False, f"concurrent client {i}: {got!r}")
h = health()
check(max_before == 1 and h["max_active"] >= 2,
      f"the concurrent requests decoded together (max_active {max_before} before, {h['max_active']} after)")

# a client that disconnects mid-stream: its request leaves the batch
before = health()["requests"]
stream = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Write a long story about a dragon."}],
    max_tokens=4000, stream=True)
got = 0
for chunk in stream:
    got += 1
    if got == 3:
        break
stream.close()
deadline, h = time.time() + 60, None
while time.time() < deadline:
    h = health()
    if h["queue"]["active"] == 0 and h["queue"]["prefilling"] == 0 and h["requests"] > before:
        break
    time.sleep(0.1)
check(h["queue"]["active"] == 0 and h["requests"] == before + 1,
      f"a disconnected stream ends its request: {h['queue']}, requests {before} -> {h['requests']}")
check(h["generated_tokens"] < 10000, f"the disconnected request stopped early ({h['generated_tokens']} tokens generated in all)")


# 500 requests one after another: what MLX holds with the server idle,
# less the prompt cache's own bytes, stays flat (the repeated prompt
# replaces its own prompt-cache entry). A response reaches the client
# before the engine has freed the request's caches, so each reading waits
# for an idle queue and keeps the least of a few.
def held_when_idle():
    least = None
    for _ in range(10):
        h = health()
        q = h["queue"]
        if q["active"] == 0 and q["prefilling"] == 0 and q["queued"] == 0:
            v = h["active_memory"] - h["prompt_cache"]["bytes"]
            least = v if least is None else min(least, v)
        time.sleep(0.05)
    return least


mem = []
for i in range(500):
    r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=4)
    if r.usage.completion_tokens != 4:
        check(False, f"sequential request {i}: {r.usage.completion_tokens} tokens")
        break
    if i in (99, 499):
        mem.append(held_when_idle())
check(len(mem) == 2 and None not in mem and abs(mem[1] - mem[0]) < (1 << 20),
      f"500 sequential requests: active memory less the prompt cache, idle, after the 100th and the 500th {mem} (within 1 MiB)")


# bad requests: the openai client's errors, then raw bodies it cannot send
def expect_error(call, status, param, code, what):
    try:
        call()
    except openai.APIStatusError as e:
        err = (e.body or {}) if isinstance(e.body, dict) else {}
        ok = (e.status_code == status and err.get("param") == param and err.get("code") == code
              and err.get("type") and err.get("message"))
        check(bool(ok), f"{what}: {e.status_code} {err}")
        return
    check(False, f"{what}: no error")


msgs = [{"role": "user", "content": "hi"}]
expect_error(lambda: client.chat.completions.create(model=model, messages=msgs, n=2), 422, "n", "unsupported_value", "n > 1")
r = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": first["prompt"]}], max_tokens=max_tokens)
check(r.choices[0].message.content == first["text"] and r.model == model,
      f"another model's name is served: {r.model!r}, {r.choices[0].message.content!r}")
expect_error(lambda: client.chat.completions.create(model=model, messages=[]), 400, "messages", "empty_messages", "empty messages")
expect_error(lambda: client.chat.completions.create(model=model, messages=msgs, max_tokens="ten"), 400, "max_tokens", "invalid_type", "max_tokens a string")
expect_error(lambda: client.chat.completions.create(model=model, messages=msgs, temperature="hot"), 400, "temperature", "invalid_type", "temperature a string")
expect_error(lambda: client.chat.completions.create(model=model, messages=[{"role": "user", "content": 5}]), 400, "messages[0].content", "invalid_type", "content a number")
expect_error(lambda: client.chat.completions.create(model=model, messages=msgs, top_p=1.5), 400, "top_p", "invalid_value", "top_p out of range")
expect_error(lambda: client.chat.completions.create(model=model, messages=msgs, top_logprobs=50, logprobs=True), 400, "top_logprobs", "invalid_value", "top_logprobs out of range")
expect_error(lambda: client.completions.create(model=model, prompt="hello " * 9000, max_tokens=4), 400, "prompt", "context_length_exceeded", "a prompt longer than the context")
expect_error(lambda: client.completions.create(model=model, prompt=["a", "b"], max_tokens=4), 422, "prompt", "unsupported_value", "several prompts")


def raw(body, status, param, code, what, path="/chat/completions"):
    req = urllib.request.Request(base + path, data=body, headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req)
        check(False, f"{what}: no error")
    except urllib.error.HTTPError as e:
        err = json.load(e).get("error", {})
        check(e.code == status and err.get("param") == param and err.get("code") == code,
              f"{what}: {e.code} {err}")


raw(b'{"messages": [', 400, None, "invalid_json", "malformed JSON")
raw(b'[1, 2]', 400, None, "invalid_type", "a body that is not an object")
raw(b'{"prompt": "x"}', 404, None, "not_found", "an unknown path", path="/engines")
m = json.dumps(model)
raw(f'{{"model": {m}, "messages": [{{"role": "user", "content": "hi"}}], "stop": 5}}'.encode(), 400, "stop", "invalid_type",
    "stop a number")
raw(f'{{"model": {m}, "messages": ["hi"]}}'.encode(), 400, "messages[0]", "invalid_type", "a message that is not an object")
raw(f'{{"model": {m}, "messages": [{{"role": "", "content": "hi"}}]}}'.encode(), 400, "messages[0].role", "invalid_value",
    "an empty role")
raw(f'{{"model": {m}, "messages": [{{"role": "user", "content": [{{"type": "image_url", "image_url": {{"url": "x"}}}}]}}]}}'.encode(),
    422, "messages[0].content[0]", "unsupported_value", "a content part that is not text")
raw(f'{{"model": {m}, "max_tokens": 4}}'.encode(), 400, "prompt", "missing_prompt", "no prompt", path="/completions")
raw(f'{{"model": {m}, "prompt": {{"a": 1}}}}'.encode(), 400, "prompt", "invalid_type", "a prompt that is an object",
    path="/completions")
raw(f'{{"model": {m}, "prompt": [1, 99999999]}}'.encode(), 400, "prompt", "invalid_value", "a token id past the vocabulary",
    path="/completions")
raw(f'{{"model": {m}, "prompt": ""}}'.encode(), 400, "prompt", "empty_prompt", "an empty prompt", path="/completions")
check(health()["status"] == "ok", "the server still answers after every bad request")

if failures:
    print(f"{len(failures)} checks failed", flush=True)
    sys.exit(1)
print("all checks passed", flush=True)
