#!/usr/bin/env python3
"""Generates tests/data/bad/: malformed GGUF and safetensors files (and HF folders) that every
reader must refuse with a clear error, never a crash, a hang or an absurd allocation.

Run from the repository root:  python3 tests/gen/make_bad_files.py
The output is committed; CI only reads it (tests/test_bad_files.c). Files are tiny (< 2 KB each).
Only the standard library is used, so the bytes are exactly what this script says.
"""
import json
import os
import shutil
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "bad")

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml tensor types
T_F32, T_F16, T_Q8_0, T_Q2_K = 0, 1, 8, 10


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def kv_u32(key, v):
    return kv(key, U32, struct.pack("<I", v))


def kv_str(key, v):
    return kv(key, STRING, s(v))


def tinfo(name, dims, ttype, offset):
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ttype, offset)


def gguf(kvs, tinfos, data=b"", version=3, n_tensors=None, n_kv=None, alignment=32, magic=b"GGUF", pad=True):
    head = magic + struct.pack("<IQQ", version, len(tinfos) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tinfos)
    if pad:
        body += b"\0" * ((-len(body)) % alignment)
    return body + data


BASE_KVS = [kv_str("general.architecture", "gemma3"), kv_u32("gemma3.block_count", 1),
            kv(("tokenizer.ggml.tokens"), ARRAY, struct.pack("<IQ", STRING, 3) + s("<pad>") + s("<eos>") + s("a"))]
F32_8x2 = struct.pack("<16f", *[float(i) for i in range(16)])  # 64 bytes


def q8_block():
    return struct.pack("<H", 0x3C00) + bytes(range(32))  # d = 1.0, 34 bytes


def valid_gguf():
    data = F32_8x2 + q8_block()
    return gguf(BASE_KVS, [tinfo("a.weight", [8, 2], T_F32, 0), tinfo("b.weight", [32], T_Q8_0, 64)], data)


def gguf_cases():
    c = {}
    v = valid_gguf()
    for cut in [3, 4, 8, 16, 23, 40, 70, 100, len(v) - 100, len(v) - 60, len(v) - 35, len(v) - 1]:
        c["truncated_at_%d.gguf" % cut] = v[:cut]
    c["bad_magic.gguf"] = b"GGUG" + v[4:]
    c["version1.gguf"] = v[:4] + struct.pack("<I", 1) + v[8:]
    c["version99.gguf"] = v[:4] + struct.pack("<I", 99) + v[8:]
    c["big_endian.gguf"] = v[:4] + struct.pack(">I", 3) + v[8:]
    c["tensors_2p60.gguf"] = gguf(BASE_KVS, [], n_tensors=1 << 60)
    c["kv_2p60.gguf"] = gguf(BASE_KVS, [], n_kv=1 << 60)
    c["key_len_2p63.gguf"] = gguf([struct.pack("<Q", 1 << 63) + b"general.architecture"], [])
    c["string_2p63.gguf"] = gguf([kv("general.name", STRING, struct.pack("<Q", (1 << 63) + 5) + b"abc")], [])
    c["array_2p62.gguf"] = gguf([kv("x.arr", ARRAY, struct.pack("<IQ", U32, 1 << 62) + b"\0" * 16)], [])
    c["string_array_2p61.gguf"] = gguf([kv("x.arr", ARRAY, struct.pack("<IQ", STRING, 1 << 61) + s("a"))], [])
    bomb = struct.pack("<IQ", ARRAY, 1) * 1000 + struct.pack("<IQ", U8, 0)
    c["nested_array_bomb.gguf"] = gguf([kv("x.nest", ARRAY, bomb)], [])
    c["bad_value_type.gguf"] = gguf([kv("x.v", 13, b"\0" * 8)], [])
    c["bad_array_elem_type.gguf"] = gguf([kv("x.arr", ARRAY, struct.pack("<IQ", 99, 1) + b"\0" * 8)], [])
    c["empty_key.gguf"] = gguf([kv("", U32, b"\0" * 4)], [])
    c["duplicate_key.gguf"] = gguf(BASE_KVS + [kv_u32("gemma3.block_count", 2)], [])
    c["alignment_48.gguf"] = gguf(BASE_KVS + [kv_u32("general.alignment", 48)],
                                  [tinfo("a.weight", [8, 2], T_F32, 0)], F32_8x2, alignment=48)
    c["alignment_0.gguf"] = gguf(BASE_KVS + [kv_u32("general.alignment", 0)], [tinfo("a.weight", [8, 2], T_F32, 0)],
                                 F32_8x2)
    c["alignment_string.gguf"] = gguf(BASE_KVS + [kv_str("general.alignment", "32")],
                                      [tinfo("a.weight", [8, 2], T_F32, 0)], F32_8x2)
    one = lambda ti, data=F32_8x2: gguf(BASE_KVS, ti, data)
    c["offset_past_eof.gguf"] = one([tinfo("a.weight", [8, 2], T_F32, 1 << 40)])
    c["offset_wraps.gguf"] = one([tinfo("a.weight", [8, 2], T_F32, (1 << 64) - 32)])
    c["data_past_eof.gguf"] = one([tinfo("a.weight", [8, 4], T_F32, 0)])
    c["overlapping_tensors.gguf"] = one([tinfo("a.weight", [8, 2], T_F32, 0), tinfo("b.weight", [8], T_F32, 32)])
    c["unaligned_offset.gguf"] = one([tinfo("a.weight", [4], T_F32, 8)])
    c["unknown_type_99.gguf"] = one([tinfo("a.weight", [8, 2], 99, 0)])
    c["unsupported_type_q2_k.gguf"] = one([tinfo("a.weight", [256], T_Q2_K, 0)], b"\0" * 96)
    c["type_id_2p31.gguf"] = one([tinfo("a.weight", [8, 2], 0x80000000, 0)])
    c["ndims_0.gguf"] = one([tinfo("a.weight", [], T_F32, 0)])
    c["ndims_5.gguf"] = one([tinfo("a.weight", [2, 2, 2, 1, 1], T_F32, 0)])
    c["dim_0.gguf"] = one([tinfo("a.weight", [8, 0], T_F32, 0)])
    c["dims_overflow.gguf"] = one([tinfo("a.weight", [1 << 40, 1 << 40], T_F32, 0)])
    c["dims_huge_bytes.gguf"] = one([tinfo("a.weight", [1 << 61], T_F32, 0)])
    c["q8_row_not_block_multiple.gguf"] = one([tinfo("a.weight", [33], T_Q8_0, 0)])
    c["duplicate_tensor_name.gguf"] = one([tinfo("a.weight", [8], T_F32, 0), tinfo("a.weight", [8], T_F32, 32)])
    c["empty_tensor_name.gguf"] = one([tinfo("", [8], T_F32, 0)])
    c["tensor_name_nul.gguf"] = one([tinfo("a\0b", [8], T_F32, 0)])
    # Well-formed files that must fail later, in the source / config layer.
    c["arch_llama.gguf"] = gguf([kv_str("general.architecture", "llama")], [tinfo("a.weight", [8, 2], T_F32, 0)],
                                F32_8x2)
    c["arch_gemma3n.gguf"] = gguf([kv_str("general.architecture", "gemma3n")],
                                  [tinfo("a.weight", [8, 2], T_F32, 0)], F32_8x2)
    # Gemma 3n files whose keys cannot be run as llama.cpp computes Gemma 3n (refused before the tensors)
    g3n = [kv_str("general.architecture", "gemma3n")] + [kv_u32("gemma3n." + k, v) for k, v in [
        ("embedding_length", 8), ("feed_forward_length", 16), ("attention.head_count", 2),
        ("attention.sliding_window", 4)]]
    emb = [tinfo("token_embd.weight", [8, 2], T_F32, 0)]
    c["gemma3n_kv_sharing_12_layers.gguf"] = gguf(g3n + [kv_u32("gemma3n.block_count", 12),
                                                         kv_u32("gemma3n.attention.shared_kv_layers", 4)], emb, F32_8x2)
    c["gemma3n_pattern_f32.gguf"] = gguf(g3n + [kv_u32("gemma3n.block_count", 4), kv(
        "gemma3n.attention.sliding_window_pattern", ARRAY, struct.pack("<IQ4f", F32, 4, 1, 1, 1, 0))],
        emb, F32_8x2)
    c["gemma3n_pattern_wrong_length.gguf"] = gguf(g3n + [kv_u32("gemma3n.block_count", 4), kv(
        "gemma3n.attention.sliding_window_pattern", ARRAY, struct.pack("<IQ", BOOL, 3) + bytes([1, 1, 0]))],
        emb, F32_8x2)
    c["gemma3n_altup_8_streams.gguf"] = gguf(g3n + [kv_u32("gemma3n.block_count", 2),
                                                    kv_u32("gemma3n.altup.num_inputs", 8)], emb, F32_8x2)
    c["gemma3n_ple_512.gguf"] = gguf(g3n + [kv_u32("gemma3n.block_count", 2),
                                            kv_u32("gemma3n.embedding_length_per_layer_input", 512)], emb, F32_8x2)
    c["gemma3n_ffn_not_uniform.gguf"] = gguf(g3n[:2] + g3n[3:] + [
        kv_u32("gemma3n.block_count", 2),
        kv("gemma3n.feed_forward_length", ARRAY, struct.pack("<IQ", I32, 2) + struct.pack("<2i", 16, 32))],
        emb, F32_8x2)
    c["gemma3n_layer19_sliding.gguf"] = gguf(g3n + [kv_u32("gemma3n.block_count", 22),
                                                    kv_u32("gemma3n.attention.sliding_window_pattern", 3)], emb,
                                             F32_8x2)
    hp = [kv_str("general.architecture", "gemma3")] + [kv_u32("gemma3." + k, v) for k, v in [
        ("embedding_length", 8), ("block_count", 1), ("feed_forward_length", 16), ("attention.head_count", 2)]]
    c["missing_tensors.gguf"] = gguf(hp, [tinfo("token_embd.weight", [8, 2], T_F32, 0)], F32_8x2)
    c["no_architecture.gguf"] = gguf([kv_u32("gemma3.block_count", 1)], [tinfo("token_embd.weight", [8, 2], T_F32, 0)],
                                     F32_8x2)
    c["heads_zero.gguf"] = gguf(hp[:-1] + [kv_u32("gemma3.attention.head_count", 0)],
                                [tinfo("token_embd.weight", [8, 2], T_F32, 0)], F32_8x2)
    c["empty.gguf"] = b""
    return c


def st_file(header, data=b"", n=None):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if n is None else n) + h + data


def st_cases():
    c = {}
    good = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
    d16 = struct.pack("<4f", 1, 2, 3, 4)
    c["st_header_not_json.safetensors"] = st_file(b"{this is not json}", d16)
    c["st_header_array.safetensors"] = st_file(b"[1, 2, 3]", d16)
    c["st_header_len_gt_file.safetensors"] = st_file(good, d16, n=10000)
    c["st_header_len_2p63.safetensors"] = st_file(good, d16, n=1 << 63)
    c["st_truncated_4.safetensors"] = b"\x10\0\0\0"
    c["st_trailing_garbage.safetensors"] = st_file(json.dumps(good).encode() + b"xyz", d16)
    c["st_offsets_lie.safetensors"] = st_file({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}, d16)
    c["st_dtype_shape_mismatch.safetensors"] = st_file(
        {"a": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 16]}}, d16)
    c["st_offsets_past_eof.safetensors"] = st_file({"a": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}},
                                                   d16)
    c["st_offsets_reversed.safetensors"] = st_file({"a": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}}, d16)
    c["st_overlap.safetensors"] = st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, d16)
    c["st_negative_shape.safetensors"] = st_file({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, d16)
    c["st_shape_overflow.safetensors"] = st_file(
        {"a": {"dtype": "F32", "shape": [1 << 40, 1 << 40, 1 << 40], "data_offsets": [0, 16]}}, d16)
    c["st_unknown_dtype.safetensors"] = st_file({"a": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}}, d16)
    c["st_missing_dtype.safetensors"] = st_file({"a": {"shape": [4], "data_offsets": [0, 16]}}, d16)
    c["st_bad_metadata.safetensors"] = st_file({"__metadata__": [1], **good}, d16)
    dup = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}'
    c["st_duplicate_name.safetensors"] = st_file(dup, d16)
    c["st_empty.safetensors"] = b""
    return c


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def hf_folders():
    cfg = {"model_type": "gemma3_text", "hidden_size": 8, "num_hidden_layers": 1, "intermediate_size": 16,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 2,
           "sliding_window": 4}
    emb = {"model.embed_tokens.weight": {"dtype": "F32", "shape": [2, 8], "data_offsets": [0, 64]}}
    d64 = struct.pack("<16f", *range(16))
    folders = {}
    # index names two shards, only one exists
    folders["hf_missing_shard"] = {
        "config.json": json.dumps(cfg),
        "model.safetensors.index.json": json.dumps({"weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00002-of-00002.safetensors"}}),
        "model-00001-of-00002.safetensors": st_file(emb, d64)}
    # index assigns a tensor to a shard that does not hold it
    folders["hf_index_lies"] = {
        "config.json": json.dumps(cfg),
        "model.safetensors.index.json": json.dumps({"weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00001-of-00002.safetensors"}}),
        "model-00001-of-00002.safetensors": st_file(emb, d64)}
    folders["hf_index_path_escape"] = {
        "config.json": json.dumps(cfg),
        "model.safetensors.index.json": json.dumps({"weight_map": {"model.norm.weight": "../x.safetensors"}})}
    folders["hf_no_config"] = {"model.safetensors": st_file(emb, d64)}
    folders["hf_bad_config"] = {"config.json": "{ not json", "model.safetensors": st_file(emb, d64)}
    folders["hf_unsupported_arch"] = {"config.json": json.dumps(dict(cfg, model_type="llama")),
                                      "model.safetensors": st_file(emb, d64)}
    folders["hf_int8_tensor"] = {"config.json": json.dumps(cfg), "model.safetensors": st_file(
        {"model.embed_tokens.weight": {"dtype": "I8", "shape": [2, 8], "data_offsets": [0, 16]}}, d64[:16])}
    folders["hf_missing_tensors"] = {"config.json": json.dumps(cfg), "model.safetensors": st_file(emb, d64)}
    folders["hf_no_weights"] = {"config.json": json.dumps(cfg)}
    return folders


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    total = 0
    for name, data in {**gguf_cases(), **st_cases()}.items():
        write(os.path.join(OUT, name), data)
        total += len(data)
    for folder, files in hf_folders().items():
        os.makedirs(os.path.join(OUT, folder))
        for name, data in files.items():
            write(os.path.join(OUT, folder, name), data.encode() if isinstance(data, str) else data)
            total += len(data)
    print("wrote %s (%d bytes)" % (os.path.normpath(OUT), total))


if __name__ == "__main__":
    main()
