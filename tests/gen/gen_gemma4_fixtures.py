#!/usr/bin/env python3
"""Writes tiny synthetic Gemma 4 GGUFs with the `gguf` Python package (an independent writer) and records
llama.cpp's logits on them, for tests/test_gemma4.c.

    python3 tests/gen/gen_gemma4_fixtures.py tests/data/gemma4 [stem...]

The GGUFs are small (F32, d=32, 7 layers, ~0.2 MB) and are committed beside the logits.

Variants (file stems):
    gemma4-dense  no per-layer embeddings; final_logit_softcapping = 30 written
    gemma4-ple    per-layer embeddings with P = 8; final_logit_softcapping absent (llama.cpp's default 30)
    gemma4-moe    mixture-of-experts layers 2 and 5 (4 experts of width 16, top 2): layer 2 with the fused
                  ffn_gate_up_exps and ffn_down_exps.scale, layer 5 with ffn_gate_exps / ffn_up_exps and no
                  scale; final_logit_softcapping = 0 (no cap)

Model: d=32, 7 layers, 4 query heads; sliding layers (0, 2, 3, 5) have head_dim 8 and 2 KV heads, full
layers (1, 4, 6) head_dim 16 and 1 KV head. Layer 1 (full) has no attn_v (V = the raw K projection).
attention.shared_kv_layers = 2: layer 5 (sliding) reads layer 3's cache, layer 6 (full) layer 4's; both
omit attn_k / attn_v / attn_k_norm. Per-layer FFN widths [48, 48, 64, 48, 48, 96, 96]. layer_output_scale
on layers 1 and 5. RoPE: sliding base 1e4 over all 8 dims; full base 1e6 over 16 dims with rope_freqs =
[1, 1, 1e30 x 6] (proportional partial RoPE: 2 of 8 pairs rotate). Sliding window 8; 40-token sequence.

Weights: value i of tensor `name` is (2u - 1) * a + mean (splitmix64 of SEED ^ fnv1a(name), as in
gen_gemma3n_fixtures.py).

Output per variant: <stem>.gguf and <stem>.logits.txt with `tokens n id...`, `gen p n id...` (llama.cpp's
greedy continuation of the first p tokens, one token per call) and `pos <p> <v0> ... <v299>`: llama.cpp's
logits for every position (F32 KV cache).
"""
import os, sys
import numpy as np
import gguf
from llama_cpp import Llama

D, L, H, V, W = 32, 7, 4, 300, 8
HD_SWA, HD_FULL = 8, 16
SWA = [True, False, True, True, False, True, False]
HKV = [2 if s else 1 for s in SWA]
FF = [48, 48, 64, 48, 48, 96, 96]
SHARED = 2
NO_V = {1}
OUT_SCALE = {1: 0.75, 5: 1.25}
ROT_PAIRS_FULL = 2
MOE_LAYERS, E, K, FE = (2, 5), 4, 2, 16
SEQ, PROMPT, GEN = 40, 12, 16
SEED = 0x4E4E4E
M64 = (1 << 64) - 1


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


def fnv1a(s):
    h = 0xcbf29ce484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001b3) & M64
    return h


def values(name, n, a, mean):
    s = np.uint64((SEED ^ fnv1a(name)) & M64)
    with np.errstate(over="ignore"):
        z = s + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9e3779b97f4a7c15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    return ((2.0 * u - 1.0) * a + mean).astype(np.float32)


def tensors(P, moe=False):
    fan = lambda k: (3.0 / k) ** 0.5
    out = [("token_embd.weight", (V, D), 0.5, 0.0), ("output_norm.weight", (D,), 0.2, 1.0)]
    if P:
        out += [("per_layer_token_embd.weight", (V, P * L), 0.1, 0.0),
                ("per_layer_model_proj.weight", (P * L, D), fan(D), 0.0),
                ("per_layer_proj_norm.weight", (P,), 0.2, 1.0)]
    kv_start = L - SHARED
    for i in range(L):
        p = f"blk.{i}."
        hd = HD_SWA if SWA[i] else HD_FULL
        out += [(p + "attn_norm.weight", (D,), 0.2, 1.0),
                (p + "attn_q.weight", (H * hd, D), fan(D), 0.0)]
        if i < kv_start:
            out.append((p + "attn_k.weight", (HKV[i] * hd, D), fan(D), 0.0))
            if i not in NO_V:
                out.append((p + "attn_v.weight", (HKV[i] * hd, D), fan(D), 0.0))
            out.append((p + "attn_k_norm.weight", (hd,), 0.1, 0.5))
        out += [(p + "attn_output.weight", (D, H * hd), fan(H * hd), 0.0),
                (p + "attn_q_norm.weight", (hd,), 0.1, 0.5),
                (p + "post_attention_norm.weight", (D,), 0.1, 0.3),
                (p + "ffn_norm.weight", (D,), 0.2, 1.0),
                (p + "ffn_gate.weight", (FF[i], D), fan(D), 0.0),
                (p + "ffn_up.weight", (FF[i], D), fan(D), 0.0),
                (p + "ffn_down.weight", (D, FF[i]), fan(FF[i]), 0.0),
                (p + "post_ffw_norm.weight", (D,), 0.1, 0.3)]
        if moe and i in MOE_LAYERS:
            out += [(p + "ffn_gate_inp.weight", (E, D), 2.0, 0.0),
                    (p + "ffn_gate_inp.scale", (D,), 0.5, 1.0),
                    (p + "pre_ffw_norm_2.weight", (D,), 0.2, 1.0),
                    (p + "post_ffw_norm_1.weight", (D,), 0.1, 0.3),
                    (p + "post_ffw_norm_2.weight", (D,), 0.1, 0.3),
                    (p + "ffn_down_exps.weight", (E, D, FE), fan(FE), 0.0)]
            if i == MOE_LAYERS[0]:
                out += [(p + "ffn_gate_up_exps.weight", (E, 2 * FE, D), fan(D), 0.0),
                        (p + "ffn_down_exps.scale", (E,), 0.5, 1.0)]
            else:
                out += [(p + "ffn_gate_exps.weight", (E, FE, D), fan(D), 0.0),
                        (p + "ffn_up_exps.weight", (E, FE, D), fan(D), 0.0)]
        if P:
            out += [(p + "inp_gate.weight", (P, D), fan(D), 0.0),
                    (p + "proj.weight", (D, P), fan(P), 0.0),
                    (p + "post_norm.weight", (D,), 0.1, 0.3)]
    return out


def write(path, P, softcap, moe=False):
    w = gguf.GGUFWriter(path, "gemma4")
    w.add_context_length(128)
    w.add_embedding_length(D)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_key_length(HD_FULL)
    w.add_value_length(HD_FULL)
    w.add_key_length_swa(HD_SWA)
    w.add_value_length_swa(HD_SWA)
    w.add_rope_dimension_count(HD_FULL)
    w.add_rope_dimension_count_swa(HD_SWA)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(W)
    w.add_sliding_window_pattern(SWA)
    w.add_rope_freq_base(1000000.0)
    w.add_rope_freq_base_swa(10000.0)
    w.add_shared_kv_layers(SHARED)
    w.add_embedding_length_per_layer_input(P)
    if softcap is not None:
        w.add_final_logit_softcapping(softcap)
    if moe:
        w.add_expert_count(E)
        w.add_expert_used_count(K)
        w.add_expert_feed_forward_length(FE)
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
    freqs = np.array([1.0] * ROT_PAIRS_FULL + [1e30] * (HD_FULL // 2 - ROT_PAIRS_FULL), dtype=np.float32)
    w.add_tensor("rope_freqs.weight", freqs)
    for name, shape, a, mean in tensors(P, moe):
        w.add_tensor(name, values(name, int(np.prod(shape)), a, mean).reshape(shape))
    for i, s in OUT_SCALE.items():
        w.add_tensor(f"blk.{i}.layer_output_scale.weight", np.array([s], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def record(path, txt, stem):
    rng = np.random.default_rng(4)
    ids = [2] + [int(x) for x in rng.integers(6, V, SEQ - 1)]
    m = Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, verbose=False, n_threads=1,
              type_k=0, type_v=0, swa_full=True)
    m.eval(ids)
    scores = np.array(m.scores[:len(ids)])
    m.reset()
    m.eval(ids[:PROMPT])
    gen = []
    for _ in range(GEN):
        t = int(np.argmax(m.scores[m.n_tokens - 1]))
        gen.append(t)
        m.eval([t])
    lines = [f"# llama.cpp logits for {stem}.gguf (tests/gen/gen_gemma4_fixtures.py)",
             "tokens %d %s" % (len(ids), " ".join(map(str, ids))),
             "gen %d %d %s" % (PROMPT, len(gen), " ".join(map(str, gen)))]
    for p in range(len(ids)):
        lines.append(f"pos {p} " + " ".join(f"{x:.7g}" for x in scores[p]))
    with open(txt, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(stem, "max |logit|", float(np.abs(scores).max()), "gen", gen, file=sys.stderr)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    only = sys.argv[2:]  # optional: the stems to (re)write
    for stem, P, softcap, moe in [("gemma4-dense", 0, 30.0, False), ("gemma4-ple", 8, None, False),
                                  ("gemma4-moe", 0, 0.0, True)]:
        if only and stem not in only:
            continue
        path = os.path.join(out, stem + ".gguf")
        write(path, P, softcap, moe)
        record(path, os.path.join(out, stem + ".logits.txt"), stem)


if __name__ == "__main__":
    main()
