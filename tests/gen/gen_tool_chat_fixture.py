#!/usr/bin/env python3
"""Renders tool conversations with Gemma 4's official chat template (llama.cpp's
models/templates/google-gemma-4-31B-it.jinja, read from a llama.cpp tree: not copied into this repo) by
jinja2, the independent reference of tests/test_tools.c. Writes tests/data/tokenizer/tools_gemma4.json:
{"cases": [{"tools": [...], "messages": [...], "rendered": "..."}]} with every call's arguments as a JSON
string (what OpenAI clients send; the template is given them parsed, as llama.cpp's server does).

usage: gen_tool_chat_fixture.py LLAMA_CPP_TREE OUT.json"""
import copy, json, sys
import jinja2

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "description": "Forecast days"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "filters": {"type": "object", "description": "Filters", "properties": {
            "site": {"type": "string"}, "recent": {"type": "boolean"}}, "required": ["site"]},
        "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["query", "filters"]}}}
NOARGS = {"type": "function", "function": {"name": "now", "description": "The time"}}

def call(i, name, args):
    return {"id": "call_%d" % i, "type": "function", "function": {"name": name, "arguments": args}}

CASES = [
    dict(tools=[WEATHER], messages=[{"role": "user", "content": "Weather in Paris?"}]),
    dict(tools=[WEATHER, SEARCH, NOARGS], messages=[{"role": "system", "content": " Be brief. "},
                                                    {"role": "user", "content": "hi"}]),
    dict(tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call(1, "get_weather", {"city": "Paris", "days": 3})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"}]),
    dict(tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call(1, "get_weather", {"city": "Paris", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"},
        {"role": "assistant", "content": "It is 18 degrees."},
        {"role": "user", "content": "Thanks"}]),
    dict(tools=[WEATHER, SEARCH], messages=[
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Two things"},
        {"role": "assistant", "content": "", "reasoning_content": "Need both tools.",
         "tool_calls": [call(1, "get_weather", {"city": "Oslo"}),
                        call(2, "search", {"query": "news", "filters": {"site": "x.org", "recent": True},
                                           "tags": ["a", "b"], "n": 1.5, "z": None})]},
        {"role": "tool", "tool_call_id": "call_2", "content": "nothing new"},
        {"role": "tool", "tool_call_id": "call_1", "content": "cold"}]),
    dict(tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call(1, "get_weather", {"city": "Rome"})]}]),
]

def main():
    tree, out = sys.argv[1], sys.argv[2]
    src = open(tree + "/models/templates/google-gemma-4-31B-it.jinja").read()
    t = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True).from_string(src)
    cases = []
    for c in CASES:
        text = t.render(messages=c["messages"], tools=c["tools"], add_generation_prompt=True, bos_token="<bos>")
        msgs = copy.deepcopy(c["messages"])
        for m in msgs:
            for tc in m.get("tool_calls", []):
                tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"])
        cases.append({"tools": c["tools"], "messages": msgs, "rendered": text})
    json.dump({"template": "google-gemma-4-31B-it.jinja (llama.cpp, llama-cpp-python 0.3.36)", "cases": cases},
              open(out, "w"), indent=1, ensure_ascii=False)

main()
