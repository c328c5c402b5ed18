"""Ollama's native API on `gemma serve` through the official `ollama` client and raw HTTP: the model endpoints
clients call first (GET / for API clients and browsers, /api/version, /api/tags, /api/show with capabilities,
/api/ps), /api/chat and /api/generate streamed (NDJSON, checked line by line) and not, the same greedy text as
/v1/chat/completions for the same conversation (one session underneath), options, `format` with a JSON schema
(the output validates), a declared tool called with object arguments and a history carrying the call and its
result, images on a vision server, /api/embed on the embedding test model (and its 400 on a generator), and
errors in Ollama's shape ({"error": "..."}) for unknown fields, options and models.

usage: test_ollama.py GEMMA MODEL SOURCE_DIR"""
import base64
import json
import os
import struct
import sys
import zlib

import jsonschema
import ollama

from srvtest import Server, run_tests

SAN = bool(os.environ.get("GM_SANITIZER_BUILD"))
ASK = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}]
COUNTERS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    # keys in the order the client's pydantic model writes them (the declaration's text is part of the prompt)
    "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}
# one example of the tool in use, then a new question: the small model answers with a call in Gemma 3's
# pythonic format, `[get_weather(city="London")]` (then it rambles: the test stops it right after the call)
TOOL_HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_name": "get_weather", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny, 21 C."},
    {"role": "user", "content": "What is the weather in London?"}]


def client(srv):
    return ollama.Client(host=srv.base, timeout=120)


def name_of(env):
    return os.path.basename(env["model"])


def check_error(st, body, status, *words):
    assert st == status, (st, body)
    assert isinstance(body, dict) and list(body) == ["error"] and isinstance(body["error"], str), body
    for w in words:
        assert w in body["error"], (w, body)


def check_final(o, name, kind="chat"):
    """The last object of an answer: done, why, and the counters (integers, nanoseconds for durations)."""
    assert o["done"] is True and o["done_reason"] in ("stop", "length"), o
    assert o["model"] == name and o["created_at"].endswith("Z") and "T" in o["created_at"], o
    for k in COUNTERS:
        assert isinstance(o[k], int) and o[k] >= 0, (k, o)
    assert o["prompt_eval_count"] > 0 and o["total_duration"] >= o["eval_duration"], o
    if kind == "chat":
        assert o["message"]["role"] == "assistant" and isinstance(o["message"]["content"], str), o
    else:
        assert isinstance(o["response"], str), o


def ndjson(srv, path, body):
    """A streamed answer read raw: its Content-Type and each line as a JSON object."""
    st, headers, data = srv.request("POST", path, body)
    assert st == 200, (st, data)
    assert dict(headers)["Content-Type"] == "application/x-ndjson", headers
    text = data.decode()
    assert text.endswith("\n"), text[-80:]
    lines = [json.loads(l) for l in text.split("\n")[:-1]]
    assert all(isinstance(o, dict) for o in lines)
    # a slow step (a sanitizer build) may bring keep-alive lines: empty pieces without model and time
    keepalive = {"/api/chat": {"message": {"role": "assistant", "content": ""}, "done": False},
                 "/api/generate": {"response": "", "done": False}}[path]
    assert all(o == keepalive for o in lines if "model" not in o), lines
    return [o for o in lines if "model" in o]


def openai_chat(srv, messages, n):
    st, r = srv.post("/v1/chat/completions", {"messages": messages, "temperature": 0, "max_tokens": n})
    assert st == 200, r
    return r


# ---------------------------------------------------------------- the model endpoints

def test_root_and_version(env):
    srv = env["srv"]
    st, h, data = srv.request("GET", "/", headers={})
    assert st == 200 and data == b"Ollama is running" and dict(h)["Content-Type"].startswith("text/plain"), (st, data)
    st, h, data = srv.request("GET", "/", headers={"Accept": "application/json"})
    assert st == 200 and data == b"Ollama is running", (st, data)
    st, h, data = srv.request("HEAD", "/", headers={})
    assert st == 200 and data == b"", (st, data)
    st, h, data = srv.request("GET", "/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert st == 200 and dict(h)["Content-Type"].startswith("text/html") and b"<html" in data[:200], (st, data[:80])
    st, h, data = srv.request("GET", "/api/version", headers={})
    v = json.loads(data)
    assert st == 200 and list(v) == ["version"], v
    major, minor, patch = (int(x) for x in v["version"].split("."))  # numeric x.y.z (VS Code's provider checks it)
    assert (major, minor) >= (0, 6), v  # capabilities in /api/show came with 0.6.4


def check_details(d):
    assert d["format"] == "gguf" and d["family"] == "gemma3" and d["families"] == ["gemma3"], d
    assert d["parameter_size"] == "268.10M" and d["quantization_level"] == "Q4_K_M", d


def test_tags_show_ps(env):
    srv, name = env["srv"], name_of(env)
    c = client(srv)
    lst = c.list()
    assert len(lst.models) == 1 and lst.models[0].model == name + ":latest", lst
    assert lst.models[0].size == os.path.getsize(env["model"]) and lst.models[0].modified_at is not None, lst
    st, h, data = srv.request("GET", "/api/tags", headers={})
    m = json.loads(data)["models"][0]
    assert set(m) == {"name", "model", "modified_at", "size", "digest", "details"}, m
    assert m["name"] == m["model"] == name + ":latest" and len(m["digest"]) == 64, m
    int(m["digest"], 16)
    check_details(m["details"])
    for model in (name, name + ":latest"):
        s = c.show(model)
        assert s.capabilities == ["completion", "tools"], s.capabilities  # Gemma 3: no vision without --mmproj
        info = s.modelinfo
        assert info["general.architecture"] == "gemma3" and info["gemma3.context_length"] == 2048, info
        assert info["gemma3.embedding_length"] == 640 and info["general.parameter_count"] == 268098176, info
        check_details(s.details.model_dump())
    st, r = srv.post("/api/show", {"name": name})  # the older field name
    assert st == 200 and r["capabilities"] == ["completion", "tools"], r
    ps = c.ps()
    assert len(ps.models) == 1 and ps.models[0].model == name + ":latest" and ps.models[0].context_length == 2048, ps
    assert ps.models[0].size_vram == 0 and ps.models[0].expires_at is not None, ps
    for bad in ("nope", name + ":7b", "nope:latest"):
        st, r = srv.post("/api/show", {"model": bad})
        check_error(st, r, 404, bad)
        try:
            c.show(bad)
            raise AssertionError("no 404")
        except ollama.ResponseError as e:
            assert e.status_code == 404 and bad in e.error, e


# ---------------------------------------------------------------- chat and generate

def test_chat(env):
    srv, name = env["srv"], name_of(env)
    c = client(srv)
    opts = {"temperature": 0, "num_predict": 16}
    r = c.chat(model=name, messages=ASK, options=opts, stream=False)
    assert r.message.role == "assistant" and r.message.content and r.done and r.done_reason in ("stop", "length"), r
    assert r.eval_count <= 16 and r.prompt_eval_count > 0 and r.total_duration > 0, r
    parts = list(c.chat(model=name, messages=ASK, options=opts, stream=True))  # the client sends stream false unless told
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].eval_count == r.eval_count, parts[-1]
    assert "".join(p.message.content for p in parts) == r.message.content
    # the same conversation through /v1/chat/completions: one session, the same prompt, the same greedy text
    o = openai_chat(srv, ASK, 16)
    assert o["choices"][0]["message"]["content"] == r.message.content, (o, r)
    assert o["usage"]["prompt_tokens"] == r.prompt_eval_count and o["usage"]["completion_tokens"] == r.eval_count
    assert (r.done_reason == "length") == (o["choices"][0]["finish_reason"] == "length")


def test_ndjson_shape(env):
    srv, name = env["srv"], name_of(env)
    lines = ndjson(srv, "/api/chat", {"model": name, "messages": ASK, "options": {"temperature": 0, "num_predict": 12}})
    assert len(lines) >= 2
    for o in lines[:-1]:
        assert set(o) == {"model", "created_at", "message", "done"} and o["done"] is False, o
        assert o["model"] == name and set(o["message"]) >= {"role", "content"} and o["message"]["role"] == "assistant", o
    last = lines[-1]
    assert set(last) == {"model", "created_at", "message", "done", "done_reason"} | set(COUNTERS), last
    check_final(last, name)
    assert last["message"]["content"] == "" and last["eval_count"] == 12 and last["done_reason"] == "length", last
    text = "".join(o["message"]["content"] for o in lines)
    assert text == openai_chat(srv, ASK, 12)["choices"][0]["message"]["content"]
    st, r = srv.post("/api/chat", {"model": name, "messages": ASK, "stream": False, "options": {"temperature": 0, "num_predict": 12}})
    assert st == 200 and set(r) == set(last) and r["message"]["content"] == text, r
    check_final(r, name)
    # generate: "response" in place of "message"
    lines = ndjson(srv, "/api/generate", {"model": name, "prompt": "Name three colours.", "options": {"temperature": 0, "num_predict": 8}})
    for o in lines[:-1]:
        assert set(o) == {"model", "created_at", "response", "done"} and o["done"] is False, o
    assert set(lines[-1]) == {"model", "created_at", "response", "done", "done_reason"} | set(COUNTERS), lines[-1]
    check_final(lines[-1], name, "generate")


def test_generate(env):
    srv, name = env["srv"], name_of(env)
    c = client(srv)
    opts = {"temperature": 0, "num_predict": 10}
    r = c.generate(model=name, prompt="Name three colours.", system="You are terse.", options=opts, stream=False)
    assert r.response and r.done and r.eval_count <= 10, r
    # a prompt with a system text is the same conversation as the chat's
    assert r.response == c.chat(model=name, messages=ASK, options=opts, stream=False).message.content
    parts = list(c.generate(model=name, prompt="Name three colours.", system="You are terse.", options=opts, stream=True))
    assert "".join(p.response for p in parts) == r.response and parts[-1].done
    # raw: the prompt as it is, templates written by the caller
    raw = "<start_of_turn>user\nYou are terse.\n\nName three colours.<end_of_turn>\n<start_of_turn>model\n"
    rr = c.generate(model=name, prompt=raw, raw=True, options=opts, stream=False)
    assert rr.response == r.response and rr.prompt_eval_count == r.prompt_eval_count, (rr, r)
    # an empty prompt loads the model (keep_alive 0 "unloads": the one model stays loaded)
    for body, why in (({"model": name}, "load"), ({"model": name, "prompt": "", "keep_alive": 0}, "unload")):
        st, o = srv.post("/api/generate", body)
        assert st == 200 and o["done"] is True and o["done_reason"] == why and o["response"] == "", o
    st, o = srv.post("/api/chat", {"model": name, "messages": []})
    assert st == 200 and o["done_reason"] == "load" and o["message"] == {"role": "assistant", "content": ""}, o
    for field, value in (("suffix", "end"), ("context", [1, 2, 3]), ("template", "{{ .Prompt }}")):
        st, o = srv.post("/api/generate", {"model": name, "prompt": "x", field: value})
        check_error(st, o, 400, field)
    st, o = srv.post("/api/generate", {"model": name, "prompt": "x", "context": [], "options": {"num_predict": 2}})  # empty: nothing asked
    assert st == 200, o


def test_options(env):
    srv, name = env["srv"], name_of(env)
    c = client(srv)
    msgs = [{"role": "user", "content": "Write a long story about a cat."}]
    r = c.chat(model=name, messages=msgs, options={"temperature": 0, "num_predict": 5}, stream=False)
    assert r.eval_count == 5 and r.done_reason == "length", r
    a = c.chat(model=name, messages=msgs, options={"temperature": 1, "seed": 42, "num_predict": 8, "top_k": 40,
                                                   "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.1,
                                                   "repeat_last_n": 32, "presence_penalty": 0.5,
                                                   "frequency_penalty": 0.5, "num_thread": 2, "mirostat": 0},
               stream=False)
    b = c.chat(model=name, messages=msgs, options={"temperature": 1, "seed": 42, "num_predict": 8, "top_k": 40,
                                                   "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.1,
                                                   "repeat_last_n": 32, "presence_penalty": 0.5,
                                                   "frequency_penalty": 0.5}, stream=False)
    assert a.message.content == b.message.content, (a, b)  # a seed reproduces; load-time options change nothing
    # stop strings cut the text
    g = c.generate(model=name, prompt="Count: 1, 2, 3,", raw=True, options={"temperature": 0, "num_predict": 20, "stop": ["6"]},
                   stream=False)
    assert "6" not in g.response and g.done_reason == "stop", g
    # num_ctx: larger than the server's is the server's; smaller bounds this request's context
    big = c.chat(model=name, messages=msgs, options={"temperature": 0, "num_predict": 5, "num_ctx": 1 << 20}, stream=False)
    assert big.message.content == r.message.content
    small = c.chat(model=name, messages=msgs, options={"temperature": 0, "num_ctx": r.prompt_eval_count + 3}, stream=False)
    assert small.eval_count == 3 and small.done_reason == "length", small
    st, o = srv.post("/api/chat", {"model": name, "messages": msgs, "options": {"num_ctx": 4}})
    check_error(st, o, 400, "prompt")
    for opt, words in (({"foo": 1}, ["options.foo"]), ({"mirostat": 2}, ["options.mirostat"]),
                       ({"typical_p": 0.5}, ["options.typical_p"]), ({"temperature": "hot"}, ["options.temperature"]),
                       ({"top_p": 2}, ["options.top_p"]), ({"num_predict": 1.5}, ["options.num_predict"])):
        st, o = srv.post("/api/chat", {"model": name, "messages": msgs, "options": opt})
        check_error(st, o, 400, *words)


def test_format_schema(env):
    srv, name = env["srv"], name_of(env)
    c = client(srv)
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    msgs = [{"role": "user", "content": "Invent a person. Reply in JSON."}]
    for seed in range(1 if SAN else 3):
        r = c.chat(model=name, messages=msgs, format=schema, options={"temperature": 1, "seed": seed, "num_predict": 64},
                   stream=False)
        assert r.done_reason == "stop", r
        jsonschema.validate(json.loads(r.message.content), schema)
    if not SAN:
        g = c.generate(model=name, prompt="Invent a person. Reply in JSON.", format="json",
                       options={"temperature": 0, "num_predict": 64}, stream=False)
        assert g.done_reason == "stop" and isinstance(json.loads(g.response), dict), g
    parts = list(c.chat(model=name, messages=msgs, format=schema, options={"temperature": 0, "num_predict": 64}, stream=True))
    jsonschema.validate(json.loads("".join(p.message.content for p in parts)), schema)
    st, o = srv.post("/api/chat", {"model": name, "messages": msgs, "format": "yaml"})
    check_error(st, o, 400, "format")
    st, o = srv.post("/api/chat", {"model": name, "messages": msgs, "format": "json", "tools": [WEATHER]})
    check_error(st, o, 400)


def call_tokens(srv, text):
    st, r = srv.post("/tokenize", {"content": text})
    assert st == 200, r
    return len(r["tokens"])


def test_tools(env):
    srv, name = env["srv"], name_of(env)
    c = client(srv)
    # greedy, the model writes the call and then goes on (Ollama has no tool_choice to end it): num_predict stops it
    # right after the call, whose text the reply parser then reads as a call
    k = call_tokens(srv, '[get_weather(city="London")]')
    r = c.chat(model=name, messages=TOOL_HISTORY, tools=[WEATHER], options={"temperature": 0, "num_predict": k}, stream=False)
    assert r.message.tool_calls and r.message.content == "", r
    call = r.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "London"}, call
    st, raw = srv.post("/api/chat", {"model": name, "messages": TOOL_HISTORY, "tools": [WEATHER], "stream": False,
                                     "options": {"temperature": 0, "num_predict": k}})
    assert st == 200 and raw["message"]["tool_calls"] == [{"function": {"index": 0, "name": "get_weather",
                                                                        "arguments": {"city": "London"}}}], raw
    parts = list(c.chat(model=name, messages=TOOL_HISTORY, tools=[WEATHER], options={"temperature": 0, "num_predict": k},
                        stream=True))
    streamed = [t for p in parts for t in (p.message.tool_calls or [])]
    assert [t.model_dump() for t in streamed] == [t.model_dump() for t in r.message.tool_calls], parts
    # the round trip: the call and its result go back, the conversation continues
    history = TOOL_HISTORY + [{"role": "assistant", "content": "", "tool_calls": [call.model_dump()]},
                              {"role": "tool", "tool_name": "get_weather", "content": "rainy, 12 C"}]
    nxt = c.chat(model=name, messages=history, tools=[WEATHER], options={"temperature": 0, "num_predict": 12}, stream=False)
    assert nxt.done and nxt.done_reason in ("stop", "length") and (nxt.message.content or nxt.message.tool_calls), nxt
    # the same history through the OpenAI API (calls with ids, arguments as text): the same prompt
    oa = [dict(m) for m in TOOL_HISTORY[:1]] + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"}] + TOOL_HISTORY[3:]
    st, o = srv.post("/v1/chat/completions", {"messages": oa, "tools": [WEATHER], "temperature": 0, "max_tokens": k})
    assert st == 200 and o["usage"]["prompt_tokens"] == r.prompt_eval_count, (o, r)
    assert json.loads(o["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "London"}, o


def test_errors(env):
    srv, name = env["srv"], name_of(env)
    msgs = [{"role": "user", "content": "hi"}]
    cases = [
        ({"model": name, "messages": msgs, "temprature": 1}, 400, ["temprature"]),
        ({"model": name, "messages": msgs, "tool_choice": "required", "tools": [WEATHER]}, 400, ["tool_choice"]),
        ({"model": name, "messages": [{"role": "user", "content": "hi", "name": "bob"}]}, 400, ["messages[0].name"]),
        ({"model": name, "messages": [{"role": "robot", "content": "hi"}]}, 400, ["role"]),
        ({"model": name, "messages": msgs + [{"role": "system", "content": "late"}]}, 400, ["system"]),
        ({"model": name, "messages": [{"role": "user", "content": "hi", "images": ["iVBORw0KGgo="]}]}, 400, ["--mmproj"]),
        ({"model": name, "messages": msgs, "think": True}, 400, ["thinking"]),
        ({"model": name, "messages": msgs, "logprobs": True}, 400, ["logprobs"]),
        ({"model": name, "messages": msgs, "options": []}, 400, ["options"]),
        ({"model": name, "messages": msgs, "stream": "yes"}, 400, ["stream"]),
        ({"messages": msgs}, 400, ["model"]),
        ({"model": "other", "messages": msgs}, 404, ["other"]),
        ({"model": name, "messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}],
          "tools": [WEATHER]}, 400, ["tool_calls"]),
    ]
    for body, status, words in cases:
        st, o = srv.post("/api/chat", body)
        check_error(st, o, status, *words)
    st, o = srv.post("/api/generate", {"model": name, "prompt": "x", "bogus": 1})
    check_error(st, o, 400, "bogus")
    st, o = srv.post("/api/chat", "{not json")
    check_error(st, o, 400)
    st, h, data = srv.request("GET", "/api/chat", headers={})  # early errors in Ollama's shape too
    check_error(st, json.loads(data), 405)
    st, o = srv.post("/api/chat", "{}", headers={"Content-Type": "text/plain"})
    check_error(st, o, 415)
    st, o = srv.post("/api/pull", {"model": "llama3"})  # what this server does not do: 404 in Ollama's shape
    check_error(st, o, 404)
    # think: false, keep_alive and empty format are accepted
    st, o = srv.post("/api/chat", {"model": name, "messages": msgs, "think": False, "keep_alive": "5m", "format": "",
                                   "stream": False, "options": {"num_predict": 2}})
    assert st == 200 and o["done"], o
    try:
        client(srv).chat(model="nope", messages=msgs)
        raise AssertionError("no error")
    except ollama.ResponseError as e:
        assert e.status_code == 404 and "nope" in e.error, e
    # a generative model has no /api/embed
    st, o = srv.post("/api/embed", {"model": name, "input": "hi"})
    check_error(st, o, 400, "embedding")


def test_metrics(env):
    m = env["srv"].metrics()
    assert any('endpoint="/api/chat"' in k for k in m), [k for k in m if "requests" in k][:5]


# ---------------------------------------------------------------- images, embeddings (their own servers)

def png(w, h, rgb):
    raw = b"".join(b"\0" + rgb[y * w * 3:(y + 1) * w * 3] for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_vision(env):
    img = png(24, 16, bytes(((x * 10 + y * 3) % 256) for y in range(16) for x in range(24) for _ in range(3)))
    b64 = base64.b64encode(img).decode()
    with Server(env["bin"], "--mmproj", env["mmproj"], model=env["model"], parallel=2) as srv:
        name = name_of(env)
        c = client(srv)
        assert c.show(name).capabilities == ["completion", "tools", "vision"]
        opts = {"temperature": 0, "num_predict": 8}
        r = c.chat(model=name, messages=[{"role": "user", "content": "What is in this image?", "images": [img]}], options=opts,
                   stream=False)
        text_only = c.chat(model=name, messages=[{"role": "user", "content": "What is in this image?"}], options=opts, stream=False)
        assert r.prompt_eval_count >= text_only.prompt_eval_count + 4 + 2, (r, text_only)  # 4 rows and the markers
        # the images go before the text: the OpenAI request with the image part first is the same prompt
        o = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64}},
            {"type": "text", "text": "What is in this image?"}]}], "temperature": 0, "max_tokens": 8})[1]
        assert o["choices"][0]["message"]["content"] == r.message.content and o["usage"]["prompt_tokens"] == r.prompt_eval_count
        g = c.generate(model=name, prompt="What is in this image?", images=[b64], options=opts, stream=False)
        assert g.response == r.message.content and g.prompt_eval_count == r.prompt_eval_count, g
        st, o = srv.post("/api/chat", {"model": name, "messages": [{"role": "user", "content": "x", "images": ["bm90IGFuIGltYWdl"]}]})
        check_error(st, o, 400)
        st, o = srv.post("/api/chat", {"model": name, "messages": [{"role": "assistant", "content": "x", "images": [b64]}]})
        check_error(st, o, 400, "user")


def test_embed(env):
    model = os.path.join(env["src"], "tests/data/embedding/plain.gguf")
    with Server(env["bin"], model=model, ctx=32, parallel=2) as srv:
        c = client(srv)
        assert c.show("plain.gguf").capabilities == ["embedding"]
        texts = ["the cat", "of and the"]
        r = c.embed(model="plain.gguf", input=texts)
        st, oa = srv.post("/v1/embeddings", {"input": texts})
        assert st == 200 and len(r.embeddings) == 2 and r.model == "plain.gguf", r
        for got, want in zip(r.embeddings, oa["data"]):
            assert max(abs(a - b) for a, b in zip(got, want["embedding"])) < 1e-6
        assert r.prompt_eval_count == oa["usage"]["prompt_tokens"] and r.total_duration > 0, r
        one = c.embed(model="plain.gguf:latest", input="the cat")
        assert one.embeddings == [r.embeddings[0]]
        st, raw = srv.post("/api/embed", {"model": "plain.gguf", "input": "the cat", "dimensions": 16, "truncate": True})
        assert st == 200 and set(raw) == {"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"}, raw
        assert len(raw["embeddings"][0]) == 16
        for body, status in (({"model": "plain.gguf", "input": [1, 2]}, 400), ({"model": "plain.gguf", "input": ""}, 400),
                             ({"model": "x", "input": "a"}, 404), ({"model": "plain.gguf", "input": "a", "pooling": 1}, 400),
                             ({"model": "plain.gguf", "input": "a " * 200}, 400)):
            st, o = srv.post("/api/embed", body)
            check_error(st, o, status)
        st, o = srv.post("/api/chat", {"model": "plain.gguf", "messages": [{"role": "user", "content": "hi"}]})
        check_error(st, o, 400, "embedding model")


def test_gemma4_capabilities(env):
    """A model whose vocabulary has Gemma 4's tool and thought markers (a tiny random one) thinks and calls tools."""
    model = os.path.join(env["src"], "tests/data/tools/gemma4-tools.gguf")
    with Server(env["bin"], model=model, ctx=256, parallel=2) as srv:
        c = client(srv)
        assert c.show("gemma4-tools.gguf").capabilities == ["completion", "tools", "thinking"]
        r = c.chat(model="gemma4-tools.gguf", messages=[{"role": "user", "content": "hi"}], think=True,
                   options={"num_predict": 3}, stream=False)
        assert r.done and r.eval_count <= 3, r


def main():
    binary, model, src = sys.argv[1], sys.argv[2], sys.argv[3]
    env = {"bin": binary, "model": model, "src": src, "mmproj": os.path.join(src, "tests/data/vision/mmproj-640.gguf")}
    with Server(binary, model=model, parallel=4) as srv:
        env["srv"] = srv
        rc = run_tests([test_root_and_version, test_tags_show_ps, test_chat, test_ndjson_shape, test_generate, test_options,
                        test_format_schema, test_tools, test_errors, test_metrics, test_vision, test_embed,
                        test_gemma4_capabilities], env)
        if rc:
            print("".join(srv.log[-30:]))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
