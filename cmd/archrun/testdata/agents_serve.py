"""Drives `archrun serve` as agent programs do: tool calls, structured output,
the Responses API (openai client), the Messages API (anthropic client), and
the openai-agents SDK's agent loop over both of OpenAI's APIs.

Usage: python agents_serve.py BASE_URL SCHEMAS.json OUT.json

The server runs a chat template with a tool-call format (testdata/
chatml_tools.jinja). Every check that fails is printed; the exit status is 1
if any did. OUT.json receives each structured reply and tool call, which the
Go test validates against its schema with a JSON-schema validator.
"""

import json
import sys

import agents
import anthropic
import openai

base, schemas_path, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
with open(schemas_path) as f:
    spec = json.load(f)
weather, clock = spec["weather_tool"], spec["time_tool"]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=600)
claude = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key="unused", max_retries=0, timeout=600)
failures = []
record = {"structured": [], "calls": []}


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def expect_error(call, status, param, what):
    try:
        call()
    except (openai.APIStatusError, anthropic.APIStatusError) as e:
        body = e.body if isinstance(e.body, dict) else {}
        err = body.get("error", body) if isinstance(body, dict) else {}
        check(e.status_code == status and err.get("param") == param and bool(err.get("message")),
              f"{what}: {e.status_code} {err}")
        return
    check(False, f"{what}: no error")


ask = [{"role": "user", "content": "What is the weather in Paris?"}]

# An agent's loop: a call forced by tool_choice required, its result fed
# back, an answer.
r = client.chat.completions.create(model="any", messages=ask, tools=[weather], tool_choice="required", max_tokens=200)
c = r.choices[0]
calls = c.message.tool_calls or []
check(c.finish_reason == "tool_calls" and len(calls) >= 1, f"tool_choice required: finish {c.finish_reason}, {len(calls)} calls")
for call in calls:
    check(call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_"),
          f"the call: {call.type} {call.function.name} {call.id}")
    record["calls"].append({"tool": "get_weather", "arguments": call.function.arguments})
check(not c.message.content, f"no content beside the calls: {c.message.content!r}")
if calls:
    history = ask + [c.message.model_dump(exclude_none=True)]
    for call in calls:
        history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})})
    r2 = client.chat.completions.create(model="any", messages=history, tools=[weather], tool_choice="none", max_tokens=16)
    check(r2.choices[0].finish_reason in ("stop", "length") and not r2.choices[0].message.tool_calls,
          f"the answer after the tool's result: {r2.choices[0].finish_reason} {r2.choices[0].message.content!r}")
    check(r2.usage.prompt_tokens > r.usage.prompt_tokens, "the tool's result is in the second prompt")

    # Streamed, the same call arrives as tool_calls deltas.
    streamed, finish = {}, None
    for chunk in client.chat.completions.create(model="any", messages=ask, tools=[weather], tool_choice="required",
                                                max_tokens=200, stream=True):
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                e = streamed.setdefault(d.index, {"name": "", "arguments": ""})
                e["name"] += (d.function.name or "") if d.function else ""
                e["arguments"] += (d.function.arguments or "") if d.function else ""
            finish = ch.finish_reason or finish
    got = [(v["name"], json.loads(v["arguments"])) for _, v in sorted(streamed.items())]
    want = [(x.function.name, json.loads(x.function.arguments)) for x in calls]
    check(got == want and finish == "tool_calls", f"streamed calls {got} == {want}, finish {finish}")

# A named function among two.
r = client.chat.completions.create(model="any", messages=ask, tools=[weather, clock],
                                   tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=120)
calls = r.choices[0].message.tool_calls or []
check(len(calls) == 1 and calls[0].function.name == "get_time", f"named tool_choice: {[x.function.name for x in calls]}")
for call in calls:
    record["calls"].append({"tool": "get_time", "arguments": call.function.arguments})
r = client.chat.completions.create(model="any", messages=ask, tools=[weather, clock], tool_choice="required",
                                   parallel_tool_calls=False, max_tokens=200)
check(len(r.choices[0].message.tool_calls or []) == 1, "parallel_tool_calls false: one call")

# Structured output over every schema, greedy and sampled.
prompt = [{"role": "user", "content": "Answer in JSON."}]
for name, schema in spec["schemas"].items():
    fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    for mode, kw in [("greedy", {}), ("seed 1", {"temperature": 1.0, "seed": 1}), ("seed 2", {"temperature": 1.0, "seed": 2})]:
        r = client.chat.completions.create(model="any", messages=prompt, response_format=fmt, max_tokens=400, **kw)
        record["structured"].append({"schema": name, "mode": mode, "text": r.choices[0].message.content,
                                     "finish": r.choices[0].finish_reason})
# json_object bounds no key's count: a small model may write keys until its
# budget ends. Every reply that ends by itself must be one JSON object, and
# some seed's must.
finished = 0
for seed in range(6):
    r = client.chat.completions.create(model="any", messages=prompt, response_format={"type": "json_object"},
                                       max_tokens=200, temperature=1.0, seed=seed)
    text, finish = r.choices[0].message.content, r.choices[0].finish_reason
    if finish != "stop":
        check(text.lstrip().startswith("{"), f"json_object, seed {seed}, cut off: starts as an object")
        continue
    finished += 1
    try:
        check(isinstance(json.loads(text), dict), f"json_object, seed {seed}: {text!r}")
    except ValueError:
        check(False, f"json_object, seed {seed}: not JSON: {text!r}")
check(finished > 0, f"json_object: {finished} of 6 seeds' replies ended by themselves")
r = client.completions.create(model="any", prompt="The answer is", max_tokens=8, extra_body={"guided_choice": ["yes", "no"]})
check(r.choices[0].text in ("yes", "no"), f"guided_choice on a completion: {r.choices[0].text!r}")
r = client.completions.create(model="any", prompt="The code is", max_tokens=12, extra_body={"guided_regex": "[A-Z]{3}-[0-9]{3}"})
check(len(r.choices[0].text) == 7 and r.choices[0].text[3] == "-", f"guided_regex: {r.choices[0].text!r}")

# Requests the constraints refuse, naming their fields.
expect_error(lambda: client.chat.completions.create(model="any", messages=prompt, response_format={
    "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "wat"}}}}}),
    400, "response_format.json_schema.schema", "a schema that does not compile")
expect_error(lambda: client.chat.completions.create(model="any", messages=ask, tools=[weather],
             tool_choice={"type": "function", "function": {"name": "nope"}}), 400, "tool_choice", "a named function not among the tools")
expect_error(lambda: client.chat.completions.create(model="any", messages=ask, tool_choice="required"),
             400, "tool_choice", "tool_choice required without tools")
expect_error(lambda: client.chat.completions.create(model="any", messages=ask,
             tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": 5}}}}}],
             tool_choice="required"), 400, "tools", "a tool whose parameters do not compile")
expect_error(lambda: client.completions.create(model="any", prompt="x", extra_body={"grammar": "root ::= (("}),
             400, "grammar", "a grammar that does not parse")

# The Responses API.
resp = client.responses.create(model="any", instructions="Be brief.", input="Name a color.", max_output_tokens=12)
chat = client.chat.completions.create(model="any", messages=[{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "Name a color."}], max_tokens=12)
check(resp.output_text == chat.choices[0].message.content, f"responses: {resp.output_text!r} == chat {chat.choices[0].message.content!r}")
check(resp.usage.input_tokens == chat.usage.prompt_tokens, "responses: input tokens as the chat's")
text = ""
with client.responses.stream(model="any", instructions="Be brief.", input="Name a color.", max_output_tokens=12) as s:
    for ev in s:
        if ev.type == "response.output_text.delta":
            text += ev.delta
    final = s.get_final_response()
check(text == resp.output_text and final.output_text == text, f"responses streamed: {text!r}")
second = client.responses.create(model="any", previous_response_id=resp.id, input="Another.", max_output_tokens=8)
check(second.usage.input_tokens > resp.usage.input_tokens and second.previous_response_id == resp.id,
      f"previous_response_id: {second.usage.input_tokens} input tokens after {resp.usage.input_tokens}")
fr = client.responses.create(model="any", input="Weather in Oslo?", max_output_tokens=200, tool_choice="required",
                             tools=[{"type": "function", "name": "get_weather", "parameters": weather["function"]["parameters"]}])
fcalls = [o for o in fr.output if o.type == "function_call"]
check(len(fcalls) >= 1 and fcalls[0].name == "get_weather", f"responses function_call items: {[o.type for o in fr.output]}")
for o in fcalls:
    record["calls"].append({"tool": "get_weather", "arguments": o.arguments})
if fcalls:
    follow = client.responses.create(model="any", previous_response_id=fr.id, max_output_tokens=8,
                                     input=[{"type": "function_call_output", "call_id": fcalls[0].call_id, "output": "18 C"}])
    check(follow.status in ("completed", "incomplete"), f"a function's output fed back: {follow.status}")
sr = client.responses.create(model="any", input="Answer in JSON.", max_output_tokens=400,
                             text={"format": {"type": "json_schema", "name": "flat", "schema": spec["schemas"]["flat"], "strict": True}})
record["structured"].append({"schema": "flat", "mode": "responses", "text": sr.output_text, "finish": sr.status})

# The Messages API.
msg = claude.messages.create(model="claude-any", max_tokens=12, system="Be brief.",
                             messages=[{"role": "user", "content": "Name a color."}])
check(msg.content[0].type == "text" and msg.content[0].text == chat.choices[0].message.content,
      f"messages: {msg.content[0].text!r} == chat {chat.choices[0].message.content!r}")
check(msg.usage.input_tokens == chat.usage.prompt_tokens and msg.stop_reason in ("end_turn", "max_tokens"),
      f"messages usage {msg.usage.input_tokens}, stop {msg.stop_reason}")
with claude.messages.stream(model="claude-any", max_tokens=12, system="Be brief.",
                            messages=[{"role": "user", "content": "Name a color."}]) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
check(text == msg.content[0].text and final.stop_reason == msg.stop_reason, f"messages streamed: {text!r}")
count = claude.messages.count_tokens(model="claude-any", system="Be brief.", messages=[{"role": "user", "content": "Name a color."}])
check(count.input_tokens == msg.usage.input_tokens, f"count_tokens {count.input_tokens}")
tm = claude.messages.create(model="claude-any", max_tokens=200, messages=[{"role": "user", "content": "Weather in Rome?"}],
                            tools=[{"name": "get_weather", "description": "weather", "input_schema": weather["function"]["parameters"]}],
                            tool_choice={"type": "any"})
uses = [b for b in tm.content if b.type == "tool_use"]
check(tm.stop_reason == "tool_use" and len(uses) >= 1 and uses[0].name == "get_weather" and uses[0].id.startswith("toolu_"),
      f"messages tool_use: {tm.stop_reason} {[b.type for b in tm.content]}")
for u in uses:
    record["calls"].append({"tool": "get_weather", "arguments": json.dumps(u.input)})
if uses:
    back = claude.messages.create(model="claude-any", max_tokens=8, tools=[{"name": "get_weather", "input_schema": weather["function"]["parameters"]}],
                                  messages=[{"role": "user", "content": "Weather in Rome?"},
                                            {"role": "assistant", "content": [u.model_dump() for u in uses]},
                                            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "18 C"}]}])
    check(back.stop_reason in ("end_turn", "max_tokens"), f"a tool_result fed back: {back.stop_reason}")
expect_error(lambda: claude.messages.create(model="claude-any", max_tokens=8, messages=[{"role": "system", "content": "x"}]),
             400, "messages[0].role", "messages: a system role in messages")

# The openai-agents SDK: an agent with a function tool, the call forced, the
# tool run, its result fed back, a final answer; over the chat completions
# API and over the Responses API (the SDK's default).
agents.set_tracing_disabled(True)
async_client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=600)
ran = []


@agents.function_tool
def get_weather(city: str) -> str:
    """The weather in a city now."""
    ran.append(city)
    return "18 degrees and clear"


for api, model in [("chat completions", agents.OpenAIChatCompletionsModel(model="any", openai_client=async_client)),
                   ("responses", agents.OpenAIResponsesModel(model="any", openai_client=async_client))]:
    agent = agents.Agent(name="weather", instructions="Answer with the tool's help.", tools=[get_weather], model=model,
                         model_settings=agents.ModelSettings(tool_choice="required", max_tokens=64, temperature=0))
    before = len(ran)
    try:
        result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    except Exception as e:  # noqa: BLE001: reported as a failed check
        check(False, f"openai-agents over {api}: {type(e).__name__}: {e}")
        continue
    kinds = [type(i).__name__ for i in result.new_items]
    check(len(ran) > before and all(isinstance(c, str) and c for c in ran[before:]) and "ToolCallOutputItem" in kinds
          and kinds[-1] == "MessageOutputItem" and isinstance(result.final_output, str),
          f"openai-agents over {api}: the tool ran for {ran[before:]}, items {kinds}, answer {result.final_output!r}")

with open(out_path, "w") as f:
    json.dump(record, f)
if failures:
    print(f"{len(failures)} checks failed", flush=True)
    sys.exit(1)
print("all checks passed", flush=True)
