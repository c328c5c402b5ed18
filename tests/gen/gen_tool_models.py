#!/usr/bin/env python3
"""Tiny models that speak Gemma 4's and FunctionGemma's tool formats, for the server's tool tests: copies of
tests/data/gemma4/gemma4-dense.gguf and tests/data/tiny/gemma3.gguf (random weights) whose vocabularies
have the formats' marker tokens in place of some ordinary words (same vocabulary size, same tensors) and a
context of 4096 (their tiny vocabularies spell a tool declaration almost byte by byte).
Writes tests/data/tools/{gemma4-tools,functiongemma}.gguf.

usage: PYTHONPATH=<llama.cpp>/gguf-py gen_tool_models.py REPO_ROOT"""
import sys
import numpy as np
import gguf

G4 = {"<start_of_turn>": "<|turn>", "<end_of_turn>": "<turn|>"}
G4_NEW = ["<|channel>", "<channel|>", "<|think|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
          "<|tool_response>", "<tool_response|>", "<|\"|>"]
FG_NEW = ["<escape>", "<start_function_declaration>", "<end_function_declaration>", "<start_function_call>",
          "<end_function_call>", "<start_function_response>", "<end_function_response>"]


def field_value(f):
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]].tolist()[0]


def rewrite(src, dst, rename, new):
    r = gguf.GGUFReader(src)
    arch = field_value(r.fields["general.architecture"])
    w = gguf.GGUFWriter(dst, arch)
    toks = field_value(r.fields["tokenizer.ggml.tokens"])
    types = field_value(r.fields["tokenizer.ggml.token_type"])
    for i, t in enumerate(toks):
        if t in rename:
            toks[i] = rename[t]
    # the last ordinary words make room for the markers
    slots = [i for i in range(len(toks)) if types[i] == 1][-len(new):]
    for i, m in zip(slots, new):
        toks[i], types[i] = m, 3
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        t = f.types[0]
        if name == "tokenizer.ggml.tokens":
            w.add_array(name, toks)
        elif name == "tokenizer.ggml.token_type":
            w.add_array(name, types)
        elif name.endswith(".context_length"):  # room for tool declarations spelled almost byte by byte
            w.add_key_value(name, 4096, t)
        elif t == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, field_value(f), t, sub_type=f.types[1])
        else:
            w.add_key_value(name, field_value(f), t)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


root = sys.argv[1]
rewrite(root + "/tests/data/gemma4/gemma4-dense.gguf", root + "/tests/data/tools/gemma4-tools.gguf", G4, G4_NEW)
rewrite(root + "/tests/data/tiny/gemma3.gguf", root + "/tests/data/tools/functiongemma.gguf", {}, FG_NEW)
