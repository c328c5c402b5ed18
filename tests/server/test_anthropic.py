"""Anthropic's Messages API on `gemma serve` (POST /v1/messages, /v1/messages/count_tokens) through the official
`anthropic` client and raw HTTP: the answer's and the stream's shapes field by field (event names and order,
content block indices), greedy text equal to /v1/chat/completions for the same conversation, tool_use ->
tool_result round trips on the default Gemma 3 model, count_tokens, stop_sequences and max_tokens stop
reasons, structured output, x-api-key, image blocks on a vision server, Gemma 4's and FunctionGemma's tool
tokens (tiny random models), and every refusal a 400 (or 401,
405, 415) in Anthropic's error shape.

usage: test_anthropic.py GEMMA MODEL [MMPROJ [TOOL_MODELS_DIR]]"""
import base64
import json
import os
import struct
import sys
import zlib

import anthropic
import jsonschema

from srvtest import Server, run_tests

SYSTEM = "You are a terse assistant."
ASK = "Name three colours of the rainbow."
GREEDY = {"temperature": 0}  # the anthropic SDK 2.x has no sampling parameters: they go in extra_body
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 20},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}}
ROWS = 4  # the tiny test encoder's rows per image
SAN = bool(os.environ.get("GM_SANITIZER_BUILD"))  # ~10x slower there: fewer repeats of what is checked once already

MESSAGE_KEYS = {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}
STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use", "model_context_window_exceeded"}


def client(srv, key="none"):
    return anthropic.Anthropic(base_url=srv.base, api_key=key, max_retries=0, timeout=300)


def messages(srv, body, headers=None):
    h = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
    h.update(headers or {})
    return srv.request("POST", "/v1/messages", body, headers=h)


def create_raw(srv, **kw):
    body = {"model": "gemma", "max_tokens": 16, "system": SYSTEM, "messages": [{"role": "user", "content": ASK}]}
    body.update(GREEDY)
    body.update(kw)
    st, _, data = messages(srv, body)
    return st, json.loads(data)


def check_message(m, text_only=False):
    """A non-streaming answer against Anthropic's Message schema."""
    assert set(m) == MESSAGE_KEYS, set(m) ^ MESSAGE_KEYS
    assert m["id"].startswith("msg_") and len(m["id"]) > 8, m["id"]
    assert m["type"] == "message" and m["role"] == "assistant" and isinstance(m["model"], str), m
    assert m["stop_reason"] in STOP_REASONS, m
    assert m["stop_sequence"] is None or (m["stop_reason"] == "stop_sequence" and isinstance(m["stop_sequence"], str))
    assert set(m["usage"]) == USAGE_KEYS and all(isinstance(v, int) and v >= 0 for v in m["usage"].values()), m["usage"]
    assert m["usage"]["cache_creation_input_tokens"] == 0
    assert m["content"], "there is always a content block"
    for b in m["content"]:
        if b["type"] == "text":
            assert set(b) == {"type", "text"} and isinstance(b["text"], str), b
        elif b["type"] == "tool_use":
            assert not text_only
            assert set(b) == {"type", "id", "name", "input"} and b["id"].startswith("toolu_"), b
            assert isinstance(b["input"], dict), b
        else:
            assert b["type"] == "thinking" and set(b) == {"type", "thinking", "signature"}, b


def check_error(st, data, status, etype, words=()):
    body = json.loads(data) if isinstance(data, (bytes, str)) else data
    assert st == status, (st, body)
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == etype, body
    for w in words:
        assert w in body["error"]["message"], (w, body)


def sse(raw):
    """Anthropic's SSE body as [(event, data)]: every event has an `event:` line naming its data's type."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-200:]
    out = []
    for block in text.split("\n\n")[:-1]:
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name, (name, data)
        out.append((name, data))
    return out


def check_stream_shape(events):
    """The order Anthropic's streams follow, and each event's fields. Returns the blocks and the message."""
    events = [(n, d) for n, d in events if n != "ping"]
    assert events[0][0] == "message_start" and events[-2][0] == "message_delta" and events[-1][0] == "message_stop"
    msg = events[0][1]["message"]
    assert set(msg) == MESSAGE_KEYS and msg["content"] == [] and msg["stop_reason"] is None, msg
    assert msg["id"].startswith("msg_") and set(msg["usage"]) == USAGE_KEYS
    blocks, open_index = [], None
    for name, d in events[1:-2]:
        if name == "content_block_start":
            assert open_index is None and set(d) == {"type", "index", "content_block"}, d
            assert d["index"] == len(blocks), (d, len(blocks))  # indices count up from 0
            open_index = d["index"]
            blocks.append(dict(d["content_block"]))
            b = blocks[-1]
            assert b in ({"type": "text", "text": ""}, {"type": "thinking", "thinking": "", "signature": ""}) or \
                   (b["type"] == "tool_use" and set(b) == {"type", "id", "name", "input"} and b["input"] == {}), b
            if b["type"] == "tool_use":
                b["partial"] = ""
        elif name == "content_block_delta":
            assert d["index"] == open_index and set(d) == {"type", "index", "delta"}, d
            delta, b = d["delta"], blocks[open_index]
            if delta["type"] == "text_delta":
                assert b["type"] == "text" and set(delta) == {"type", "text"}, delta
                b["text"] += delta["text"]
            elif delta["type"] in ("thinking_delta", "signature_delta"):
                key = delta["type"][:-6]
                assert b["type"] == "thinking" and set(delta) == {"type", key}, delta
                b[key] += delta[key]
            else:
                assert delta["type"] == "input_json_delta" and b["type"] == "tool_use", delta
                assert set(delta) == {"type", "partial_json"}, delta
                b["partial"] += delta["partial_json"]
        else:
            assert name == "content_block_stop" and d == {"type": name, "index": open_index}, (name, d)
            open_index = None
    assert open_index is None and blocks, "every block closed, at least one"
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = json.loads(b.pop("partial"))
    md = events[-2][1]
    assert set(md) == {"type", "delta", "usage"} and set(md["delta"]) == {"stop_reason", "stop_sequence"}, md
    assert md["delta"]["stop_reason"] in STOP_REASONS and set(md["usage"]) == USAGE_KEYS, md
    assert events[-1][1] == {"type": "message_stop"}
    return blocks, md


# ---------------------------------------------------------------- the official client

def test_create(env):
    srv = env["srv"]
    r = client(srv).messages.create(model="gemma", max_tokens=16, system=SYSTEM,
                                    messages=[{"role": "user", "content": ASK}], extra_body=GREEDY)
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_"), r
    assert r.content[0].type == "text" and r.stop_reason in ("end_turn", "max_tokens"), r
    assert r.usage.output_tokens > 0 and r.usage.input_tokens + r.usage.cache_read_input_tokens > 10, r.usage
    st, raw = create_raw(srv)
    assert st == 200, raw
    check_message(raw, text_only=True)
    assert raw["content"][0]["text"] == r.content[0].text, (raw, r)
    # the same request again: its prompt comes from the prefix cache, counted apart as Anthropic does
    st, again = create_raw(srv)
    u, u0 = again["usage"], raw["usage"]
    assert u["cache_read_input_tokens"] > 0 and u["input_tokens"] + u["cache_read_input_tokens"] == \
        u0["input_tokens"] + u0["cache_read_input_tokens"], (u, u0)


def test_greedy_equals_chat(env):
    """One conversation, two protocols: one prompt, so the same greedy text and token counts."""
    srv = env["srv"]
    st, chat = srv.post("/v1/chat/completions", {"messages": [{"role": "system", "content": SYSTEM},
                                                             {"role": "user", "content": ASK}],
                                                "max_tokens": 16, "temperature": 0})
    assert st == 200, chat
    st, m = create_raw(srv, max_tokens=16)
    assert st == 200, m
    assert m["content"][0]["text"] == chat["choices"][0]["message"]["content"], (m, chat)
    assert m["usage"]["input_tokens"] + m["usage"]["cache_read_input_tokens"] == chat["usage"]["prompt_tokens"]
    assert m["usage"]["output_tokens"] == chat["usage"]["completion_tokens"]
    # the same conversation as content blocks (system as text blocks, the user's text in two blocks)
    st, blocks = create_raw(srv, max_tokens=16, system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                            messages=[{"role": "user", "content": [{"type": "text", "text": ASK[:10]},
                                                                   {"type": "text", "text": ASK[10:]}]}])
    assert st == 200 and blocks["content"] == m["content"], (blocks, m)


def test_stream(env):
    srv = env["srv"]
    st, whole = create_raw(srv, max_tokens=16)
    with client(srv).messages.stream(model="gemma", max_tokens=16, system=SYSTEM,
                                     messages=[{"role": "user", "content": ASK}], extra_body=GREEDY) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == whole["content"][0]["text"] == final.content[0].text, (text, whole, final)
    assert final.stop_reason == whole["stop_reason"] and final.usage.output_tokens == whole["usage"]["output_tokens"]
    # the wire, event by event
    body = {"model": "gemma", "max_tokens": 16, "system": SYSTEM, "messages": [{"role": "user", "content": ASK}],
            "stream": True, **GREEDY}
    st, headers, raw = messages(srv, body)
    assert st == 200 and dict(headers)["Content-Type"] == "text/event-stream", headers
    events = sse(raw)
    assert [n for n, _ in events[:2]] == ["message_start", "ping"], events[:2]
    start, end = events[0][1]["message"]["usage"], [d for n, d in events if n == "message_delta"][0]["usage"]
    assert start["output_tokens"] == 0 and start["input_tokens"] == end["input_tokens"] and \
        start["cache_read_input_tokens"] == end["cache_read_input_tokens"], (start, end)
    blocks, md = check_stream_shape(events)
    assert blocks == [{"type": "text", "text": whole["content"][0]["text"]}], blocks
    assert md["delta"] == {"stop_reason": whole["stop_reason"], "stop_sequence": None}, md
    assert md["usage"]["output_tokens"] == whole["usage"]["output_tokens"]


def test_tools_round_trip(env):
    srv = env["srv"]
    c = client(srv)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = c.messages.create(model="gemma", max_tokens=64, messages=ask, tools=[WEATHER], tool_choice={"type": "any"},
                          extra_body=GREEDY)
    assert r.stop_reason == "tool_use", r
    calls = [b for b in r.content if b.type == "tool_use"]
    assert calls and all(b.name == "get_weather" and b.id.startswith("toolu_") for b in calls), r.content
    for b in calls:
        jsonschema.validate(b.input, WEATHER["input_schema"])
    # raw: the same call, the shape field by field; disable_parallel_tool_use: one call
    st, raw = create_raw(srv, max_tokens=64, system=None, messages=ask, tools=[WEATHER],
                         tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    assert st == 200, raw
    check_message(raw)
    assert raw["stop_reason"] == "tool_use" and [b["type"] for b in raw["content"]] == ["tool_use"], raw
    assert raw["content"][0]["input"] == calls[0].input, (raw, calls)
    # streamed: the same call, reassembled by the client and on the wire
    if not SAN:
        with c.messages.stream(model="gemma", max_tokens=64, messages=ask, tools=[WEATHER], tool_choice={"type": "any"},
                               extra_body=GREEDY) as s:
            final = s.get_final_message()
        assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [(b.name, b.input) for b in calls]
        assert final.stop_reason == "tool_use"
    st, _, wire = messages(srv, {"model": "g", "max_tokens": 64, "messages": ask, "tools": [WEATHER],
                                 "tool_choice": {"type": "any"}, "stream": True, **GREEDY})
    blocks, md = check_stream_shape(sse(wire))
    assert [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"] == [(b.name, b.input) for b in calls]
    assert md["delta"]["stop_reason"] == "tool_use"
    # the results go back (an error, as text blocks, then the user's text); the conversation continues
    history = ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": b.id, "is_error": True,
                          "content": [{"type": "text", "text": "timeout"}, {"type": "text", "text": " after 5 s"}]}
                         for b in calls] + [{"type": "text", "text": "Thanks. Summarise."}]}]
    for choice in ({"type": "auto"},) if SAN else ({"type": "auto"}, {"type": "none"}):
        r2 = c.messages.create(model="gemma", max_tokens=16, messages=history, tools=[WEATHER], tool_choice=choice,
                               extra_body=GREEDY)
        assert r2.stop_reason in ("end_turn", "max_tokens", "tool_use"), r2
        if choice["type"] == "none":
            assert all(b.type == "text" for b in r2.content), r2
    # the tool result changes the prompt
    n1 = c.messages.count_tokens(model="gemma", messages=history, tools=[WEATHER]).input_tokens
    history[-1]["content"][0]["content"] = [{"type": "text", "text": "timeout after 5 s; the weather service is down"}]
    assert c.messages.count_tokens(model="gemma", messages=history, tools=[WEATHER]).input_tokens > n1


def test_count_tokens(env):
    srv = env["srv"]
    c = client(srv)
    n = c.messages.count_tokens(model="gemma", system=SYSTEM, messages=[{"role": "user", "content": ASK}])
    st, m = create_raw(srv, max_tokens=1)
    assert n.input_tokens == m["usage"]["input_tokens"] + m["usage"]["cache_read_input_tokens"], (n, m["usage"])
    with_tools = c.messages.count_tokens(model="gemma", system=SYSTEM, messages=[{"role": "user", "content": ASK}],
                                         tools=[WEATHER], thinking={"type": "enabled", "budget_tokens": 2048})
    assert with_tools.input_tokens > n.input_tokens, (with_tools, n)
    # Claude Code's billing stamp (new every request) is not part of the prompt: the prefix cache keeps working
    stamped = c.messages.count_tokens(model="gemma", messages=[{"role": "user", "content": ASK}], system=[
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0; cch=1f2e3;"}, {"type": "text", "text": SYSTEM}])
    assert stamped.input_tokens == n.input_tokens, (stamped, n)
    st, _, data = srv.request("POST", "/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}]},
                              headers={"Content-Type": "application/json"})
    assert st == 200 and set(json.loads(data)) == {"input_tokens"}, data
    # a prompt this server cannot take is refused when counted too
    st, _, data = srv.request("POST", "/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "many words " * 1500}]},
                              headers={"Content-Type": "application/json"})
    check_error(st, data, 400, "invalid_request_error", ["tokens"])
    # the fields of a reply are not count_tokens' (as Anthropic's API answers them)
    st, _, data = srv.request("POST", "/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}],
                                                                    "max_tokens": 5},
                              headers={"Content-Type": "application/json"})
    check_error(st, data, 400, "invalid_request_error", ["max_tokens"])


def test_stop_sequences_and_max_tokens(env):
    srv = env["srv"]
    st, whole = create_raw(srv, max_tokens=16)
    text = whole["content"][0]["text"]
    words = [w for w in text.split() if len(w) > 2 and text.index(w) > 0]
    assert words, text
    stop = words[0]
    st, m = create_raw(srv, max_tokens=16, stop_sequences=["\u2603never", stop])
    assert st == 200 and m["stop_reason"] == "stop_sequence" and m["stop_sequence"] == stop, m
    assert m["content"][0]["text"] == text[:text.index(stop)], (m, text)
    r = client(srv).messages.create(model="gemma", max_tokens=16, system=SYSTEM, stop_sequences=[stop],
                                    messages=[{"role": "user", "content": ASK}], extra_body=GREEDY)
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop, r
    st, _, raw = messages(srv, {"model": "g", "max_tokens": 16, "system": SYSTEM, "stop_sequences": [stop],
                                "messages": [{"role": "user", "content": ASK}], "stream": True, **GREEDY})
    blocks, md = check_stream_shape(sse(raw))
    assert md["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop} and blocks[0]["text"] == m["content"][0]["text"]
    # max_tokens: the reply stops there
    st, m = create_raw(srv, max_tokens=3)
    assert st == 200 and m["stop_reason"] == "max_tokens" and m["usage"]["output_tokens"] == 3, m
    # larger than the context leaves: the reply may run to the end of the context (not a 400); a thinking budget
    # is checked against the max_tokens asked for
    st, m = create_raw(srv, max_tokens=10 ** 6, stop_sequences=[" "], messages=[{"role": "user", "content": "Say hello world"}],
                       thinking={"type": "enabled", "budget_tokens": 4096})
    assert st == 200 and m["stop_reason"] in STOP_REASONS, m
    # required, as Anthropic requires it
    body = {"model": "g", "messages": [{"role": "user", "content": "hi"}]}
    st, _, data = messages(srv, body)
    check_error(st, data, 400, "invalid_request_error", ["max_tokens"])


def test_structured_output(env):
    srv = env["srv"]
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["answer"], "additionalProperties": False}
    st, m = create_raw(srv, max_tokens=32, output_config={"format": {"type": "json_schema", "schema": schema}},
                       messages=[{"role": "user", "content": "Is the sky blue? Answer in JSON."}])
    assert st == 200 and m["stop_reason"] == "end_turn", m
    jsonschema.validate(json.loads(m["content"][0]["text"]), schema)


def test_errors(env):
    srv = env["srv"]
    ok = {"model": "g", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}

    def bad(change, words, status=400, etype="invalid_request_error"):
        body = dict(ok)
        body.update(change)
        st, _, data = messages(srv, body)
        check_error(st, data, status, etype, words)

    bad({"frobnicate": 1}, ["frobnicate"])
    bad({"mcp_servers": [{"type": "url", "url": "https://example.com", "name": "x"}]}, ["mcp_servers"])
    bad({"context_management": "auto"}, ["context_management"])
    bad({"messages": [{"role": "user", "content": "hi", "name": "x"}]}, ["messages[0].name"])
    bad({"messages": [{"role": "system", "content": "hi"}]}, ["role"])
    bad({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, ["document"])
    bad({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "colour": 1}]}]}, ["colour"])
    bad({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}]}, ["prefill"])
    bad({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, ["web_search_20250305"])
    bad({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, ["nope"])
    bad({"tool_choice": {"type": "any"}}, ["needs tools"])
    bad({"thinking": {"type": "enabled", "budget_tokens": 100}}, ["budget_tokens"])
    bad({"thinking": {"type": "enabled", "budget_tokens": 2048}}, ["max_tokens"])
    bad({"temperature": 1.5}, ["temperature"])
    bad({"max_tokens": 0}, ["max_tokens"])
    bad({"stop_sequences": "x"}, ["stop_sequences"])
    bad({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}, ["image"])  # a text-only server
    # the client raises its typed errors
    try:
        client(srv).messages.create(model="g", max_tokens=4, messages=[{"role": "user", "content": "hi"}],
                                    extra_body={"frobnicate": True})
        raise AssertionError("accepted an unknown field")
    except anthropic.BadRequestError as e:
        assert e.status_code == 400 and e.body["error"]["type"] == "invalid_request_error", e.body
    # accepted and ignored, or accepted with no effect on the prompt
    st, _, data = messages(srv, dict(ok, metadata={"user_id": "u1"}, service_tier="auto", top_k=5, top_p=0.9,
                                     thinking={"type": "disabled"}, cache_control={"type": "ephemeral"},
                                     context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
                                     tools=[dict(WEATHER, defer_loading=True, cache_control={"type": "ephemeral"})]))
    assert st == 200, data
    # early refusals of the HTTP layer come in Anthropic's shape too
    st, _, data = srv.request("GET", "/v1/messages", headers={})
    check_error(st, data, 405, "invalid_request_error")
    st, _, data = srv.request("POST", "/v1/messages", json.dumps(ok), headers={"Content-Type": "text/plain"})
    check_error(st, data, 415, "invalid_request_error")
    st, _, data = srv.request("POST", "/v1/messages", "{not json", headers={"Content-Type": "application/json"})
    check_error(st, data, 400, "invalid_request_error")


def test_metrics(env):
    m = env["srv"].metrics()
    assert m.get('gemma_requests_total{endpoint="/v1/messages",status="200"}', 0) > 0, m
    assert m.get('gemma_requests_total{endpoint="/v1/messages/count_tokens",status="200"}', 0) > 0, m


# ---------------------------------------------------------------- servers of their own

def test_api_key(env):
    with Server(env["bin"], "--api-key", "sekrit", model=env["model"], parallel=1) as s:
        try:
            client(s, key="wrong").messages.create(model="g", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
            raise AssertionError("a wrong key was accepted")
        except anthropic.AuthenticationError as e:
            assert e.status_code == 401 and e.body["type"] == "error" and e.body["error"]["type"] == "authentication_error"
        st, _, data = messages(s, {"model": "g", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        check_error(st, data, 401, "authentication_error")
        r = client(s, key="sekrit").messages.create(model="g", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
        assert r.usage.output_tokens >= 1  # the client sends the key as x-api-key
        assert client(s, key="sekrit").messages.count_tokens(model="g", messages=[{"role": "user", "content": "hi"}]).input_tokens > 0


def png(w, h, rgb):
    raw = b"".join(b"\0" + rgb[y * w * 3:(y + 1) * w * 3] for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_image_block(env):
    if not env.get("mmproj"):
        print("  (no mmproj given: image blocks not tested)")
        return
    data = base64.b64encode(png(24, 16, bytes((x * 7 + y) % 256 for y in range(16) for x in range(24) for _ in range(3)))).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    question = {"type": "text", "text": "What is in this image?"}
    with Server(env["bin"], "--mmproj", env["mmproj"], model=env["model"], parallel=2) as s:
        c = client(s)
        r = c.messages.create(model="g", max_tokens=8, messages=[{"role": "user", "content": [image, question]}],
                              extra_body=GREEDY)
        text = c.messages.create(model="g", max_tokens=8, messages=[{"role": "user", "content": [question]}],
                                 extra_body=GREEDY)
        n = lambda u: u.input_tokens + (u.cache_read_input_tokens or 0)  # noqa: E731
        assert n(r.usage) >= n(text.usage) + ROWS + 2, (r.usage, text.usage)
        counted = c.messages.count_tokens(model="g", messages=[{"role": "user", "content": [image, question]}])
        assert counted.input_tokens == n(r.usage), (counted, r.usage)
        # the same pixels as a data: URL source, and the same reply as OpenAI's image_url part
        url = {"type": "image", "source": {"type": "url", "url": "data:image/png;base64," + data}}
        again = c.messages.create(model="g", max_tokens=8, messages=[{"role": "user", "content": [url, question]}],
                                  extra_body=GREEDY)
        assert again.content[0].text == r.content[0].text
        st, chat = s.post("/v1/chat/completions", {"max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}}, {"type": "text", "text": question["text"]}]}]})
        assert st == 200 and chat["choices"][0]["message"]["content"] == r.content[0].text, (chat, r)
        # remote URLs are refused, as for image_url parts; an image in a tool result too
        remote = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
        st, _, data2 = messages(s, {"model": "g", "max_tokens": 4, "messages": [{"role": "user", "content": [remote]}]})
        check_error(st, data2, 400, "invalid_request_error")
        st, _, data2 = messages(s, {"model": "g", "max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [image]}]}]})
        check_error(st, data2, 400, "invalid_request_error", ["tool result"])


def test_marker_formats(env):
    """Gemma 4's and FunctionGemma's tool tokens (tiny random models): calls required, the same calls as
    /v1/chat/completions asks for, streamed the same, and the results going back."""
    if not env.get("tools"):
        print("  (no tool models given: marker formats not tested)")
        return
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    openai_tool = {"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                     "parameters": WEATHER["input_schema"]}}
    for name in ("gemma4-tools.gguf", "functiongemma.gguf"):
        with Server(env["bin"], model=os.path.join(env["tools"], name), parallel=1) as s:
            c = client(s)
            one = {"type": "any", "disable_parallel_tool_use": True}  # random models call on and on otherwise
            r = c.messages.create(model="g", max_tokens=200, messages=ask, tools=[WEATHER], tool_choice=one,
                                  extra_body=GREEDY)
            calls = [(b.name, b.input) for b in r.content if b.type == "tool_use"]
            assert r.stop_reason == "tool_use" and calls, (name, r)
            for _, args in calls:
                jsonschema.validate(args, WEATHER["input_schema"])
            st, chat = s.post("/v1/chat/completions", {"messages": ask, "tools": [openai_tool], "tool_choice": "required",
                                                      "parallel_tool_calls": False, "max_tokens": 200, "temperature": 0})
            assert st == 200 and [(t["function"]["name"], json.loads(t["function"]["arguments"]))
                                  for t in chat["choices"][0]["message"]["tool_calls"]] == calls, (name, chat, calls)
            with c.messages.stream(model="g", max_tokens=200, messages=ask, tools=[WEATHER], tool_choice=one,
                                   extra_body=GREEDY) as st_:
                final = st_.get_final_message()
            assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == calls, (name, final)
            history = ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "sunny"}
                                                          for b in r.content if b.type == "tool_use"]}]
            r2 = c.messages.create(model="g", max_tokens=8, messages=history, tools=[WEATHER], extra_body=GREEDY)
            assert r2.stop_reason in STOP_REASONS, (name, r2)
            if name.startswith("gemma4"):
                thinking_stream(s)


def thinking_stream(s):
    """Gemma 4's thought channel streamed as thinking blocks. The random model opens it now and then when it
    samples (~1 reply in 10 of 200 tokens): streams are drawn until one has thoughts."""
    body = {"model": "g", "max_tokens": 200, "temperature": 1, "stream": True, "tools": [WEATHER],
            "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(100):
        st, _, raw = messages(s, body)
        assert st == 200, raw
        blocks, md = check_stream_shape(sse(raw))
        thoughts = [b for b in blocks if b["type"] == "thinking"]
        if thoughts:
            assert all(b["thinking"] and b["signature"] == "" for b in thoughts), thoughts
            return
    raise AssertionError("no thinking block in 100 sampled streams")


def main():
    binary, model = sys.argv[1], sys.argv[2]
    env = {"bin": binary, "model": model, "mmproj": sys.argv[3] if len(sys.argv) > 3 else None,
           "tools": sys.argv[4] if len(sys.argv) > 4 else None}
    tests = [test_create, test_greedy_equals_chat, test_stream, test_tools_round_trip, test_count_tokens,
             test_stop_sequences_and_max_tokens, test_structured_output, test_errors, test_metrics, test_api_key,
             test_image_block, test_marker_formats]
    only = os.environ.get("ONLY")
    if only:
        tests = [t for t in tests if t.__name__ in only.split(",")]
    with Server(binary, model=model, parallel=2) as srv:
        env["srv"] = srv
        rc = run_tests(tests, env)
        if rc:
            print("".join(srv.log[-30:]))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
