"""OpenAI Responses against `gemma serve` (/v1/responses, /v1/responses/input_tokens, /v1/responses/{id}) with
the official openai client (pinned in scripts/test-venv.sh) and raw HTTP: the response object and its output
items field by field against openai/types/responses (the SDK's models accept extra fields, so the raw JSON is
checked too), the streamed event sequence (sequence numbers, indices, deltas that add up to the final text,
function_call_arguments.done), function tools round trip on the default Gemma 3 model, responses.parse with a
pydantic model (text.format json_schema through the grammar), previous_response_id through the store (per API
key, evicted, off), input_tokens, greedy output equal to /v1/chat/completions for the same conversation, images,
and misuse as 400s in OpenAI's error shape.

usage: test_responses.py GEMMA MODEL MMPROJ TOOL_MODELS_DIR"""
import json
import os
import sys

import jsonschema
import openai
import pydantic

from srvtest import Server, run_tests
from test_vision import data_uri, gradient

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 20},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}}
ASK = "What is the weather in Paris?"
SAN = bool(os.environ.get("GM_SANITIZER_BUILD"))  # ~10x slower there: fewer and shorter requests
N = 6 if SAN else 12  # max_output_tokens of most requests

# the fields of openai.types.responses.Response this server writes, and of its parts
RESPONSE_KEYS = {"id", "object", "created_at", "status", "background", "error", "incomplete_details", "instructions",
                 "max_output_tokens", "max_tool_calls", "metadata", "model", "output", "parallel_tool_calls",
                 "previous_response_id", "reasoning", "service_tier", "store", "temperature", "text", "tool_choice",
                 "tools", "top_logprobs", "top_p", "truncation", "usage", "user"}
USAGE_KEYS = {"input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"}
MESSAGE_KEYS = {"id", "type", "status", "role", "content"}
OUTPUT_TEXT_KEYS = {"type", "text", "annotations", "logprobs"}
CALL_KEYS = {"id", "type", "status", "arguments", "call_id", "name"}
ERROR_KEYS = {"message", "type", "param", "code"}


def client_of(srv, key="none"):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=key, max_retries=0)


def create(srv, **body):
    body.setdefault("max_output_tokens", N)
    body.setdefault("temperature", 0)
    st, r = srv.post("/v1/responses", body)
    assert st == 200, (st, r)
    check_response(r)
    return r


def chat(srv, messages, max_tokens=N, **kw):
    st, r = srv.post("/v1/chat/completions", dict(messages=messages, max_tokens=max_tokens, temperature=0, **kw))
    assert st == 200, (st, r)
    return r


def check_response(r, status=None):
    """A response object as openai.types.responses.Response has it, field by field."""
    assert set(r) == RESPONSE_KEYS, set(r) ^ RESPONSE_KEYS
    assert r["id"].startswith("resp_") and r["object"] == "response" and isinstance(r["created_at"], (int, float))
    assert r["status"] in ("completed", "incomplete", "in_progress", "failed"), r["status"]
    if status:
        assert r["status"] == status, r["status"]
    assert r["background"] is False and r["error"] is None and r["max_tool_calls"] is None
    if r["status"] == "incomplete":
        assert r["incomplete_details"] == {"reason": "max_output_tokens"}, r["incomplete_details"]
    else:
        assert r["incomplete_details"] is None, r["incomplete_details"]
    assert isinstance(r["tools"], list) and isinstance(r["metadata"], dict) and isinstance(r["parallel_tool_calls"], bool)
    assert r["truncation"] == "disabled" and isinstance(r["store"], bool) and r["top_logprobs"] == 0
    assert set(r["reasoning"]) == {"effort", "summary"} and set(r["text"]) == {"format", "verbosity"}
    assert isinstance(r["temperature"], (int, float)) and isinstance(r["top_p"], (int, float))
    if r["status"] == "in_progress":
        assert r["usage"] is None and r["output"] == []
        return
    u = r["usage"]
    assert set(u) == USAGE_KEYS, u
    assert set(u["input_tokens_details"]) == {"cached_tokens"} and set(u["output_tokens_details"]) == {"reasoning_tokens"}
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"] and u["input_tokens"] > 0, u
    assert 0 <= u["input_tokens_details"]["cached_tokens"] <= u["input_tokens"], u
    for it in r["output"]:
        check_item(it, r["status"])
    openai.types.responses.Response.model_validate(r)


def check_item(it, status="completed"):
    if it["type"] == "message":
        assert set(it) == MESSAGE_KEYS and it["id"].startswith("msg_") and it["role"] == "assistant", it
        assert it["status"] in ("completed", "incomplete", "in_progress"), it
        for part in it["content"]:
            assert set(part) == OUTPUT_TEXT_KEYS and part["type"] == "output_text", part
            assert part["annotations"] == [] and part["logprobs"] == [] and isinstance(part["text"], str)
    elif it["type"] == "function_call":
        assert set(it) == CALL_KEYS and it["id"].startswith("fc_") and it["call_id"].startswith("call_"), it
        assert it["id"][3:] == it["call_id"][5:] and it["status"] in ("completed", "in_progress"), it
        assert isinstance(it["arguments"], str) and isinstance(it["name"], str), it
    else:
        assert it["type"] == "reasoning" and it["id"].startswith("rs_") and it["summary"] == [], it


def text_of(r):
    return "".join(p["text"] for it in r["output"] if it["type"] == "message" for p in it["content"])


def check_error(st, r, status, code=None, words=None):
    assert st == status, (st, r)
    assert set(r) == {"error"} and set(r["error"]) == ERROR_KEYS, r
    assert r["error"]["type"] == "invalid_request_error" and r["error"]["message"], r
    if code:
        assert r["error"]["code"] == code, r
    if words:
        assert words in r["error"]["message"], r


# ---------------------------------------------------------------- tests


def test_create(env):
    """responses.create with a string, with items and instructions; the raw object field by field."""
    srv = env["srv"]
    c = client_of(srv)
    r = c.responses.create(model="gemma", input="Say hello.", max_output_tokens=N, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.output_text, r
    assert r.usage.output_tokens <= N and r.status in ("completed", "incomplete"), r
    assert r.output[0].type == "message" and r.output[0].content[0].type == "output_text"
    r2 = c.responses.create(model="gemma", instructions="Answer in French.", temperature=0, max_output_tokens=N,
                            metadata={"k": "v"}, user="u1",
                            input=[{"role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}])
    assert r2.instructions == "Answer in French." and r2.metadata == {"k": "v"} and r2.user == "u1", r2
    assert r2.usage.input_tokens > r.usage.input_tokens, (r.usage, r2.usage)
    raw = create(srv, input="Say hello.", max_output_tokens=1)
    assert raw["status"] == "incomplete" and raw["output"][0]["status"] == "incomplete", raw
    assert raw["max_output_tokens"] == 1 and raw["tool_choice"] == "auto" and raw["text"]["format"] == {"type": "text"}


def test_greedy_equals_chat(env):
    """One conversation is one prompt through both APIs: the same tokens in, the same greedy text out."""
    srv = env["srv"]
    sys_text, user = "You are terse.", "Name three colours."
    want = chat(srv, [{"role": "system", "content": sys_text}, {"role": "user", "content": user}])
    got = create(srv, instructions=sys_text, input=user)
    assert text_of(got) == want["choices"][0]["message"]["content"], (got, want)
    assert got["usage"]["input_tokens"] == want["usage"]["prompt_tokens"], (got["usage"], want["usage"])
    assert got["usage"]["output_tokens"] == want["usage"]["completion_tokens"]
    # items: developer message (= system), a user turn of two input_text parts, an assistant turn, a user turn
    conv = [{"role": "system", "content": sys_text}, {"role": "user", "content": "Hi.\n\nName a colour."},
            {"role": "assistant", "content": "Red."}, {"role": "user", "content": user}]
    want = chat(srv, conv)
    got = create(srv, input=[
        {"type": "message", "role": "developer", "content": sys_text},
        {"role": "user", "content": [{"type": "input_text", "text": "Hi."}]},
        {"role": "user", "content": "Name a colour."},  # consecutive user items are one turn
        {"type": "message", "role": "assistant", "status": "completed", "id": "msg_x",
         "content": [{"type": "output_text", "text": "Red.", "annotations": []}]},
        {"role": "user", "content": user}])
    assert text_of(got) == want["choices"][0]["message"]["content"], (got, want)
    assert got["usage"]["input_tokens"] == want["usage"]["prompt_tokens"]


def sse(raw):
    """Responses' SSE: (event name, data) pairs; every block has an event line naming the data's type."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-50:]
    out = []
    for block in text.split("\n\n")[:-1]:
        lines = [l for l in block.split("\n") if not l.startswith(":")]
        if not lines:
            continue
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = json.loads(lines[1][6:])
        assert data["type"] == lines[0][7:], block
        out.append(data)
    return out


def check_sequence(events, final_status="completed"):
    """The event grammar: created, in_progress, per item added ... done, then the final event; numbers 0..n-1."""
    assert [e["sequence_number"] for e in events] == list(range(len(events))), [e["sequence_number"] for e in events]
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] == "response." + final_status, types
    for e in events[:2]:
        check_response(e["response"], "in_progress")
    final = events[-1]["response"]
    check_response(final)
    open_items, texts = {}, {}
    for e in events[2:-1]:
        t = e["type"]
        if t == "response.output_item.added":
            assert e["output_index"] == len(open_items), e  # items are announced in output order
            open_items[e["output_index"]] = e["item"]
            assert e["item"]["status"] == "in_progress", e
        elif t == "response.output_item.done":
            assert e["output_index"] in open_items, e
            assert e["item"] == final["output"][e["output_index"]], (e["item"], final["output"])
            check_item(e["item"])
        elif t == "response.content_part.added":
            assert e["content_index"] == 0 and e["item_id"] == open_items[e["output_index"]]["id"], e
            assert e["part"]["text"] == "", e
        elif t == "response.output_text.delta":
            assert set(e) == {"type", "sequence_number", "output_index", "item_id", "content_index", "delta", "logprobs"}
            texts[e["output_index"]] = texts.get(e["output_index"], "") + e["delta"]
        elif t == "response.output_text.done":
            assert e["text"] == texts.get(e["output_index"], ""), (e, texts)
            assert e["item_id"] == open_items[e["output_index"]]["id"] and e["content_index"] == 0
        elif t == "response.content_part.done":
            assert e["part"]["text"] == texts.get(e["output_index"], ""), e
        elif t == "response.function_call_arguments.delta":
            assert set(e) == {"type", "sequence_number", "output_index", "item_id", "delta"}, e
            texts[e["output_index"]] = texts.get(e["output_index"], "") + e["delta"]
        elif t == "response.function_call_arguments.done":
            assert set(e) == {"type", "sequence_number", "output_index", "item_id", "name", "arguments"}, e
            assert e["arguments"] == texts[e["output_index"]] == final["output"][e["output_index"]]["arguments"]
            assert e["item_id"] == open_items[e["output_index"]]["id"] and e["name"], e
        else:
            assert t in ("response.reasoning_text.delta", "response.reasoning_text.done"), t
    assert sorted(open_items) == list(range(len(final["output"]))), (open_items, final["output"])
    return final


def test_stream(env):
    """Streamed: the event sequence by the SDK and raw; the deltas make the text of the non-streamed answer."""
    srv = env["srv"]
    plain = create(srv, instructions="Be brief.", input="Tell me about the sea.")
    body = {"instructions": "Be brief.", "input": "Tell me about the sea.", "max_output_tokens": N, "temperature": 0,
            "stream": True}
    st, headers, raw = srv.request("POST", "/v1/responses", body)
    assert st == 200 and dict(headers)["Content-Type"] == "text/event-stream", (st, headers)
    events = sse(raw)
    final = check_sequence(events, "incomplete" if plain["status"] == "incomplete" else "completed")
    assert text_of(final) == text_of(plain), (final, plain)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == text_of(plain)
    assert final["usage"]["output_tokens"] == plain["usage"]["output_tokens"]
    # the official client: typed events, the same sequence
    c = client_of(srv)
    got = list(c.responses.create(model="gemma", input="Tell me about the sea.", instructions="Be brief.",
                                  max_output_tokens=N, temperature=0, stream=True))
    assert [e.type for e in got] == [e["type"] for e in events], [e.type for e in got]
    assert got[-1].response.output_text == text_of(plain)
    if SAN:
        return
    # the SDK's stream helper wants response.completed: an answer that ends within its budget (the grammar
    # of a schema ends it), parsed as it streams
    short = c.responses.parse(model="gemma", input="Describe Paris as JSON.", text_format=City, temperature=0,
                              max_output_tokens=60)
    with c.responses.stream(model="gemma", input="Describe Paris as JSON.", text_format=City, temperature=0,
                            max_output_tokens=60) as s:
        for _ in s:
            pass
        final = s.get_final_response()
    assert final.output_text == short.output_text and final.output_parsed == short.output_parsed, final


def test_tools_round_trip(env):
    """tool_choice required on Gemma 3 -> a function_call item (streamed too), then the call and its output
    sent back as items -> a message; the arguments validate against the function's parameters."""
    srv = env["srv"]
    c = client_of(srv)
    r = c.responses.create(model="gemma", input=ASK, tools=[WEATHER], tool_choice="required", temperature=0,
                           max_output_tokens=100)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_"), r.output
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
    if not SAN:
        raw = create(srv, input=ASK, tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
                     parallel_tool_calls=False, max_output_tokens=100)
        assert raw["output"][0]["type"] == "function_call" and raw["parallel_tool_calls"] is False, raw
        assert raw["tools"] == [WEATHER] and raw["tool_choice"] == {"type": "function", "name": "get_weather"}
    # streamed: the call's events, the same call
    st, _, body = srv.request("POST", "/v1/responses", {"input": ASK, "tools": [WEATHER], "tool_choice": "required",
                                                         "temperature": 0, "max_output_tokens": 100, "stream": True})
    events = sse(body)
    final = check_sequence(events)
    types = [e["type"] for e in events]
    assert "response.function_call_arguments.done" in types and "response.output_text.delta" not in types, types
    assert [(o["name"], o["arguments"]) for o in final["output"]] == [(o.name, o.arguments) for o in calls]
    # the round trip: the output items go back with their results
    follow = [{"role": "user", "content": ASK}] + [o.model_dump(exclude_none=True) for o in r.output]
    follow += [{"type": "function_call_output", "call_id": o.call_id, "output": "sunny, 21 C"} for o in calls]
    r2 = c.responses.create(model="gemma", input=follow, tools=[WEATHER], tool_choice="none", temperature=0,
                            max_output_tokens=N)
    assert r2.output[0].type == "message" and r2.output_text, r2.output
    # the same conversation through chat completions: the same prompt and text
    conv = [{"role": "user", "content": ASK},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": o.call_id, "type": "function", "function": {"name": o.name, "arguments": o.arguments}}
                for o in calls]}]
    conv += [{"role": "tool", "tool_call_id": o.call_id, "content": "sunny, 21 C"} for o in calls]
    want = chat(srv, conv, tools=[{"type": "function", "function": {k: WEATHER[k] for k in
                                                                     ("name", "description", "parameters")}}],
                tool_choice="none")
    assert r2.output_text == want["choices"][0]["message"]["content"], (r2.output_text, want)
    assert r2.usage.input_tokens == want["usage"]["prompt_tokens"]
    if SAN:
        return
    r3 = c.responses.create(model="gemma", input=follow, tools=[WEATHER], temperature=0, max_output_tokens=60)
    for o in r3.output:  # auto: text or calls, valid either way
        if o.type == "function_call":
            jsonschema.validate(json.loads(o.arguments), WEATHER["parameters"])


class City(pydantic.BaseModel):
    name: str
    population: int


def test_parse(env):
    """responses.parse with a pydantic model: text.format json_schema, held to the schema by the grammar."""
    srv = env["srv"]
    c = client_of(srv)
    r = c.responses.parse(model="gemma", input="Describe Paris as JSON.", text_format=City, temperature=0,
                          max_output_tokens=60)
    assert isinstance(r.output_parsed, City), r
    assert r.text.format.type == "json_schema", r.text
    obj = create(srv, input="Describe Paris as JSON.", text={"format": {"type": "json_object"}}, max_output_tokens=40)
    if obj["status"] == "completed":
        assert isinstance(json.loads(text_of(obj)), dict), obj


def test_input_tokens(env):
    srv = env["srv"]
    c = client_of(srv)
    n = c.responses.input_tokens.count(model="gemma", input="Say hello.", instructions="Be brief.")
    assert n.object == "response.input_tokens" and n.input_tokens > 0, n
    r = create(srv, input="Say hello.", instructions="Be brief.", max_output_tokens=1)
    assert r["usage"]["input_tokens"] == n.input_tokens, (r["usage"], n)
    st, raw = srv.post("/v1/responses/input_tokens", {"input": "Say hello.", "tools": [WEATHER]})
    assert st == 200 and set(raw) == {"object", "input_tokens"} and raw["input_tokens"] > n.input_tokens, raw
    st, raw = srv.post("/v1/responses/input_tokens", {"input": "x", "max_output_tokens": 5})
    check_error(st, raw, 400, "unsupported_field", "max_output_tokens")


def test_previous_response(env):
    """previous_response_id continues a conversation: the same prompt as the whole conversation sent again;
    GET and DELETE /v1/responses/{id}; an unknown id is a 404."""
    srv = env["srv"]
    c = client_of(srv)
    r1 = c.responses.create(model="gemma", input="My name is Ada.", instructions="Be brief.", temperature=0,
                            max_output_tokens=N)
    assert r1.store is True
    r2 = c.responses.create(model="gemma", input="What is my name?", previous_response_id=r1.id, temperature=0,
                            max_output_tokens=N)
    assert r2.previous_response_id == r1.id and r2.usage.input_tokens > r1.usage.input_tokens
    assert r2.usage.input_tokens_details.cached_tokens > 0, r2.usage  # r1's prompt is a prefix of r2's
    # instructions are not carried over (OpenAI's rule): the conversation without them
    want = chat(srv, [{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": r1.output_text},
                      {"role": "user", "content": "What is my name?"}])
    assert r2.output_text == want["choices"][0]["message"]["content"], (r2.output_text, want)
    if not SAN:
        r3 = create(srv, input="And again?", previous_response_id=r2.id, instructions="Be brief.")
        assert r3["previous_response_id"] == r2.id and r3["usage"]["input_tokens"] > r2.usage.input_tokens
    st, got = srv.request("GET", "/v1/responses/" + r1.id)[::2]
    got = json.loads(got)
    assert st == 200 and got["id"] == r1.id and got["output"] == r1.model_dump()["output"], got
    assert c.responses.retrieve(r2.id).output_text == r2.output_text
    c.responses.delete(r1.id)
    try:
        c.responses.retrieve(r1.id)
        raise AssertionError("a deleted response is still there")
    except openai.NotFoundError:
        pass
    # r2 holds the whole conversation: it goes on without r1
    create(srv, input="Thanks.", previous_response_id=r2.id, max_output_tokens=1)
    st, r = srv.post("/v1/responses", {"input": "x", "previous_response_id": "resp_nope"})
    check_error(st, r, 404, "previous_response_not_found", "resp_nope")
    # store: false is not kept
    r4 = create(srv, input="Hi", store=False)
    assert r4["store"] is False
    st, r = srv.post("/v1/responses", {"input": "x", "previous_response_id": r4["id"]})
    check_error(st, r, 404)


def test_store_limits(env):
    """Kept per API key (not found under another), the oldest evicted past --responses-store; with 0 none
    is kept and previous_response_id is a 400."""
    with Server(env["bin"], "--responses-store", "2", "--api-key", "ka", "--api-key", "kb", model=env["model"],
                parallel=2) as srv:
        a, b = client_of(srv, "ka"), client_of(srv, "kb")
        ids = [a.responses.create(model="g", input="Hi %d" % i, max_output_tokens=2).id for i in range(3)]
        try:
            b.responses.create(model="g", input="x", previous_response_id=ids[2], max_output_tokens=2)
            raise AssertionError("another key's response was found")
        except openai.NotFoundError as e:
            assert e.body["code"] == "previous_response_not_found", e.body
        assert a.responses.create(model="g", input="x", previous_response_id=ids[2], max_output_tokens=2).id
        for gone in ids[:2]:  # three more kept since: the first two are gone (2 kept)
            st, r = srv.request("GET", "/v1/responses/" + gone, headers={"Authorization": "Bearer ka"})[::2]
            check_error(st, json.loads(r), 404)
        st, r = srv.request("GET", "/v1/responses/" + ids[2], headers={"Authorization": "Bearer kb"})[::2]
        check_error(st, json.loads(r), 404)
        st, r = srv.request("GET", "/v1/responses/" + ids[2], headers={})[::2]
        assert st == 401, (st, r)
    with Server(env["bin"], "--responses-store", "0", model=env["model"], parallel=2) as srv:
        r = create(srv, input="Hi", max_output_tokens=2)
        assert r["store"] is False, r
        st, e = srv.post("/v1/responses", {"input": "x", "previous_response_id": r["id"]})
        check_error(st, e, 400, "responses_not_stored", "--responses-store")


def test_vision(env):
    """An input_image part (a data: URL) is an image in the user's turn, as image_url is for chat."""
    with Server(env["bin"], "--mmproj", env["mmproj"], model=env["model"], parallel=2) as srv:
        uri = data_uri(gradient())
        want = chat(srv, [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}},
                                                        {"type": "text", "text": "What is this?"}]}], max_tokens=4)
        got = create(srv, max_output_tokens=4, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": uri, "detail": "auto"}, {"type": "input_text", "text": "What is this?"}]}])
        assert got["usage"]["input_tokens"] == want["usage"]["prompt_tokens"], (got["usage"], want["usage"])
        assert text_of(got) == want["choices"][0]["message"]["content"]
        st, r = srv.post("/v1/responses", {"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/x.png", "detail": "auto"}]}]})
        assert st == 400, (st, r)


def test_gemma4(env):
    """Gemma 4's marker format (a tiny random model with its tool tokens): a required call streamed with its
    events; reasoning items go back as the turn's thoughts (the same prompt as chat's reasoning_content)."""
    with Server(env["bin"], model=env["tools_dir"] + "/gemma4-tools.gguf", parallel=2) as srv:
        st, _, raw = srv.request("POST", "/v1/responses", {"input": ASK, "tools": [WEATHER], "tool_choice": "required",
                                                            "temperature": 0, "max_output_tokens": 100, "stream": True})
        assert st == 200, st
        final = check_sequence(sse(raw))
        call = [o for o in final["output"] if o["type"] == "function_call"][0]
        jsonschema.validate(json.loads(call["arguments"]), WEATHER["parameters"])
        thought = {"type": "reasoning", "id": "rs_1", "summary": [],
                   "content": [{"type": "reasoning_text", "text": "The user wants the weather."}]}
        items = [{"role": "user", "content": ASK}, thought, call,
                 {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]
        c = client_of(srv)
        n = c.responses.input_tokens.count(model="g", input=items, tools=[WEATHER]).input_tokens
        without = c.responses.input_tokens.count(model="g", input=[i for i in items if i is not thought],
                                                 tools=[WEATHER]).input_tokens
        assert n > without, (n, without)
        conv = [{"role": "user", "content": ASK},
                {"role": "assistant", "content": None, "reasoning_content": "The user wants the weather.",
                 "tool_calls": [{"id": call["call_id"], "type": "function",
                                 "function": {"name": call["name"], "arguments": call["arguments"]}}]},
                {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny"}]
        want = chat(srv, conv, max_tokens=1, tools=[{"type": "function", "function": {
            k: WEATHER[k] for k in ("name", "description", "parameters")}}])
        assert want["usage"]["prompt_tokens"] == n, (want["usage"], n)


def test_errors(env):
    """Unknown or unsupported fields and malformed items: 400s in OpenAI's error shape, naming the field."""
    srv = env["srv"]
    bad = [
        ({"input": "x", "frobnicate": 1}, "unsupported_field", "frobnicate"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {}}, "extra": 1}},
         "unsupported_field", "text.extra"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "unsupported_tool", "web_search"),
        ({"input": "x", "tools": [dict(WEATHER, extra=1)]}, "unsupported_field", "tools[0].extra"),
        ({"input": "x", "include": ["file_search_call.results"]}, None, "file_search_call.results"),
        ({"input": "x", "truncation": "auto"}, None, "truncation"),
        ({"input": "x", "background": True}, None, "background"),
        ({"input": "x", "temperature": 3}, None, "temperature"),
        ({"input": "x", "max_output_tokens": 0}, None, "max_output_tokens"),
        ({"input": 5}, None, "input"),
        ({}, None, "input"),
        ({"input": [{"type": "file_search_call", "id": "x"}]}, "unsupported_item", "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "unsupported_content",
         "input_file"),
        ({"input": [{"role": "robot", "content": "x"}]}, None, "input[0]"),
        ({"input": [{"role": "user", "content": "x"}, {"role": "system", "content": "late"}]}, None, "input[1]"),
        ({"input": [{"role": "user", "content": "x"}, {"type": "function_call_output", "call_id": "c", "output": "r"}]},
         None, None),
        ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, None, "nope"),
        ({"input": "x", "tool_choice": "required"}, None, "tool_choice"),
        ({"input": "x", "tools": [WEATHER], "text": {"format": {"type": "json_object"}}, "tool_choice": "required"},
         None, None),
        ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, None, "name"),
        ({"input": "x", "reasoning": {"effort": "extreme"}}, None, "reasoning.effort"),
        ({"input": "x", "metadata": {"k": 1}}, None, "metadata"),
    ]
    for body, code, words in bad:
        st, r = srv.post("/v1/responses", body)
        check_error(st, r, 400, code, words)
    st, r = srv.post("/v1/responses", "{not json")
    check_error(st, r, 400)
    st, r = srv.request("PUT", "/v1/responses/resp_x", None)[::2]
    check_error(st, json.loads(r), 405)
    try:
        client_of(srv).responses.create(model="g", input="x", extra_body={"nope": True})
        raise AssertionError("an unknown field was accepted")
    except openai.BadRequestError as e:
        assert "nope" in e.message, e
    # accepted and documented as ignored: hints that do not change the tokens
    create(srv, input="x", max_output_tokens=1, service_tier="auto", prompt_cache_key="k", safety_identifier="s",
           reasoning={"effort": "low", "summary": "auto"}, include=["reasoning.encrypted_content"],
           text={"format": {"type": "text"}, "verbosity": "low"}, stream_options=None, seed=3, top_p=0.5)
    m = srv.metrics()
    assert any('endpoint="/v1/responses"' in k for k in m), [k for k in m if "responses" in k]


def main():
    binary, model, mmproj, tools_dir = sys.argv[1:5]
    env = {"bin": binary, "model": model, "mmproj": mmproj, "tools_dir": tools_dir}
    with Server(binary, model=model, parallel=2) as srv:
        env["srv"] = srv
        rc = run_tests([test_create, test_greedy_equals_chat, test_stream, test_tools_round_trip, test_parse,
                        test_input_tokens, test_previous_response, test_errors, test_store_limits, test_vision, test_gemma4], env)
        if rc:
            print("".join(srv.log[-30:]))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
