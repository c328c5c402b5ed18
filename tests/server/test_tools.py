"""OpenAI tools against `gemma serve`: for each Gemma tool format (Gemma 3's pythonic calls on the default
model; Gemma 4's and FunctionGemma's marker formats on tiny random models with those tokens), calls required
or named come back as tool_calls whose arguments validate against the function's parameters (the grammar
guarantees it: a random model makes valid calls), streamed calls reassembled by the openai client equal the
non-streamed ones, a conversation carrying calls and results continues, and misuse is a 400.

usage: test_tools.py GEMMA MODEL TOOL_MODELS_DIR"""
import json
import sys

import jsonschema
import openai

from srvtest import Server, run_tests, sse_events

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "JST"]}},
                   "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time in Tokyo?"}]


def check_calls(calls, names=None):
    assert calls, "no tool calls"
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_"), c
        name = c["function"]["name"]
        assert name in PARAMS and (names is None or name in names), c
        jsonschema.validate(json.loads(c["function"]["arguments"]), PARAMS[name])


def call(srv, **kw):
    body = {"messages": ASK, "tools": TOOLS, "temperature": 0, "max_tokens": 200}
    body.update(kw)
    st, r = srv.post("/v1/chat/completions", body)
    assert st == 200, (st, r)
    return r["choices"][0]


def test_required(env):
    srv = env["srv"]
    ch = call(srv, tool_choice="required")
    assert ch["finish_reason"] == "tool_calls", ch
    assert ch["message"]["content"] is None, ch["message"]
    check_calls(ch["message"]["tool_calls"])
    # sampled too: every call still validates
    for seed in range(3):
        ch = call(srv, tool_choice="required", temperature=1, seed=seed)
        assert ch["finish_reason"] == "tool_calls", ch
        check_calls(ch["message"]["tool_calls"])


def test_named_and_parallel(env):
    srv = env["srv"]
    for name in ("get_weather", "get_time"):
        ch = call(srv, tool_choice={"type": "function", "function": {"name": name}}, parallel_tool_calls=False)
        check_calls(ch["message"]["tool_calls"], names={name})
        assert len(ch["message"]["tool_calls"]) == 1, ch
    ch = call(srv, tool_choice="required", parallel_tool_calls=True, temperature=1, seed=7)
    assert 1 <= len(ch["message"]["tool_calls"]) <= 8, ch
    check_calls(ch["message"]["tool_calls"])


def test_stream_equals_plain(env):
    srv = env["srv"]
    plain = call(srv, tool_choice="required")["message"]["tool_calls"]
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x")
    with client.chat.completions.stream(model="m", messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
                                        max_tokens=200) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    got = final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == "tool_calls", final
    assert [(c.function.name, c.function.arguments) for c in got] == \
           [(c["function"]["name"], c["function"]["arguments"]) for c in plain], (got, plain)
    # the wire: the call announced (index, id, type, name, empty arguments), then its arguments
    st, _, raw = srv.request("POST", "/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "tool_choice": "required",
                                                             "temperature": 0, "max_tokens": 200, "stream": True})
    deltas = [json.loads(e)["choices"][0]["delta"] for e in sse_events(raw)[:-1] if json.loads(e)["choices"]]
    tc = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert tc[0]["index"] == 0 and tc[0]["id"].startswith("call_") and tc[0]["function"]["arguments"] == "", tc[0]
    assert "id" not in tc[1] and tc[1]["function"]["arguments"] == plain[0]["function"]["arguments"], tc[1]


def test_history_round_trip(env):
    srv = env["srv"]
    first = call(srv, tool_choice="required")["message"]
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": first["tool_calls"]}]
    history += [{"role": "tool", "tool_call_id": c["id"], "content": "sunny, 21 C"} for c in first["tool_calls"]]
    for choice in ("auto", "none"):
        ch = call(srv, messages=history, tool_choice=choice, max_tokens=30)
        assert ch["finish_reason"] in ("stop", "length", "tool_calls"), ch
        if ch["message"].get("tool_calls"):
            check_calls(ch["message"]["tool_calls"])
    # auto on the first turn: text or calls, never an error
    ch = call(srv, max_tokens=60)
    if ch["message"].get("tool_calls"):
        check_calls(ch["message"]["tool_calls"])


def test_errors(env):
    srv = env["srv"]
    bad = [
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tools": TOOLS, "tool_choice": "sometimes"},
        {"tool_choice": "required"},
        {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
            "x": {"not": {"type": "string"}}}}}}], "tool_choice": "required"},
        {"tools": TOOLS, "response_format": {"type": "json_object"}},
        {"tools": [WEATHER, WEATHER]},
        {"tools": TOOLS, "messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "a", "content": "r"}]},
        {"tools": TOOLS, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_time", "arguments": "[1]"}}]}]},
    ]
    for extra in bad:
        body = {"messages": ASK, "max_tokens": 5}
        body.update(extra)
        st, r = srv.post("/v1/chat/completions", body)
        assert st == 400 and r["error"]["message"], (extra, st, r)
    st, r = srv.post("/v1/completions", {"prompt": "x", "tools": TOOLS, "max_tokens": 2})
    assert st == 400, (st, r)


def family_tests(env, model):
    """The marker formats on a tiny model: required and named calls, stream == plain, the round trip."""
    with Server(env["bin"], model=model) as srv:
        sub = dict(env, srv=srv)
        test_required(sub)
        test_named_and_parallel(sub)
        test_stream_equals_plain(sub)
        test_history_round_trip(sub)


def test_gemma4_format(env):
    family_tests(env, env["dir"] + "/gemma4-tools.gguf")


def test_functiongemma_format(env):
    family_tests(env, env["dir"] + "/functiongemma.gguf")


def main():
    binary, model, tool_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    env = {"bin": binary, "model": model, "dir": tool_dir}
    with Server(binary, model=model) as srv:
        env["srv"] = srv
        rc = run_tests([test_required, test_named_and_parallel, test_stream_equals_plain, test_history_round_trip,
                        test_errors, test_gemma4_format, test_functiongemma_format], env)
        if rc:
            print("".join(srv.log[-30:]))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
