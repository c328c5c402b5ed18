#!/usr/bin/env python3
"""Writes tiny synthetic Gemma 1/2/3 GGUFs with the `gguf` Python package (an independent writer) and
records llama.cpp's logits on them, for tests/test_llama_tiny.c.

    python3 tests/gen/gen_tiny_llama_fixtures.py tests/data/tiny

For each arch A in gemma, gemma2, gemma3 it writes:
    A.gguf           F32 weights (d=64, 6 layers, 4 heads / 2 kv heads, head_dim 16, ffn 128, vocab 300,
                     sliding window 8 where the arch has one), norm weights stored as (1+w) as llama.cpp's
                     converter does
    A.logits.txt     `tokens n id...` then one line per position: `pos <p> <v0> <v1> ... <v299>` — llama.cpp's
                     logits for every position of the token sequence (F32 KV cache, so only llama.cpp's own
                     rounding — its f16 GELU table, op order — separates it from an exact computation)
"""
import os, sys
import numpy as np
import gguf
from llama_cpp import Llama

D, L, H, HKV, HD, FF, V, W = 64, 6, 4, 2, 16, 128, 300, 8
SEQ = 24


def vocab():
    toks, scores, types = [], [], []
    def add(t, s, ty):
        toks.append(t); scores.append(s); types.append(ty)
    for t in ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]:
        add(t, 0.0, 2 if t == "<unk>" else 3)
    for b in range(256):
        add(f"<0x{b:02X}>", 0.0, 6)
    words = ["\u2581", "\u2581the", "\u2581a", "e", "t", "a", "o", "n", "\u2581of", "\u2581and", "th", "he",
             "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te", "of", "ed", "is", "it",
             "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as", "ou"]
    for i, w in enumerate(words):
        add(w, -float(i + 1), 1)
    assert len(toks) == V, len(toks)
    return toks, scores, types


def write(arch, path, rng):
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(128)
    w.add_embedding_length(D)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-6)
    if arch in ("gemma2", "gemma3"):
        w.add_sliding_window(W)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
    if arch == "gemma3":
        w.add_rope_freq_base(1000000.0)
    toks, scores, types = vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)

    def t(name, shape, std, mean=0.0):
        w.add_tensor(name, (mean + std * rng.standard_normal(shape)).astype(np.float32))

    t("token_embd.weight", (V, D), 1.0)
    t("output_norm.weight", (D,), 0.1, 1.0)
    for i in range(L):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", (D,), 0.1, 1.0)
        t(p + "attn_q.weight", (H * HD, D), 0.35)
        t(p + "attn_k.weight", (HKV * HD, D), 0.35)
        t(p + "attn_v.weight", (HKV * HD, D), 0.2)
        t(p + "attn_output.weight", (D, H * HD), 0.15)
        t(p + "ffn_norm.weight", (D,), 0.1, 1.0)
        t(p + "ffn_gate.weight", (FF, D), 0.2)
        t(p + "ffn_up.weight", (FF, D), 0.2)
        t(p + "ffn_down.weight", (D, FF), 0.1)
        if arch in ("gemma2", "gemma3"):
            t(p + "post_attention_norm.weight", (D,), 0.1, 1.0)
            t(p + "post_ffw_norm.weight", (D,), 0.1, 1.0)
        if arch == "gemma3":
            t(p + "attn_q_norm.weight", (HD,), 0.1, 1.0)
            t(p + "attn_k_norm.weight", (HD,), 0.1, 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for k, arch in enumerate(["gemma", "gemma2", "gemma3"]):
        rng = np.random.default_rng(1234 + k)
        path = os.path.join(out, f"{arch}.gguf")
        write(arch, path, rng)
        ids = [2] + [int(x) for x in rng.integers(6, V, SEQ - 1)]
        m = Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, verbose=False, n_threads=1,
                  type_k=0, type_v=0, swa_full=True)
        m.eval(ids)
        lines = [f"# llama.cpp logits for {arch}.gguf (tests/gen/gen_tiny_llama_fixtures.py)",
                 "tokens %d %s" % (len(ids), " ".join(map(str, ids)))]
        for p in range(len(ids)):
            lines.append(f"pos {p} " + " ".join(f"{x:.6g}" for x in m.scores[p]))
        with open(os.path.join(out, f"{arch}.logits.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(arch, "max |logit|", float(np.abs(np.array(m.scores[:len(ids)])).max()), file=sys.stderr)


if __name__ == "__main__":
    main()
