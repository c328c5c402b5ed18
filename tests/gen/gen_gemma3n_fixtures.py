#!/usr/bin/env python3
"""Writes a tiny synthetic Gemma 3n GGUF with the `gguf` Python package (an independent writer) and records
llama.cpp's logits on it, for tests/test_gemma3n.c.

    python3 tests/gen/gen_gemma3n_fixtures.py tests/data/gemma3n [/tmp/keep-the-gguf-here.gguf]

The GGUF itself is NOT committed (its F32 per-layer embedding table alone is 256 x 25 x 300 floats, ~8 MB):
every weight is a deterministic function of (tensor name, index), so the C test rebuilds the same file with
tests/support/tiny_gemma3n.c and checks each tensor against the sums recorded here before comparing logits.

Weights: value i of tensor `name` is (2u - 1) * a + mean, computed in double and rounded to f32, where
u = (splitmix64 output number i+1 of the state SEED ^ fnv1a(name)) >> 11, times 2^-53. (a, mean) per kind below.

Model: d=64, 25 layers (KV shared from layer 20: layers 20-23 sliding read layer 18, layer 24 full reads 19),
4 heads / 2 KV heads of 16, FFN 128 (uniform: llama.cpp requires it), P=256, LAuReL rank 64, 4 AltUp streams,
vocabulary 300, sliding window 8 (pattern: il % 5 < 4 slides), RoPE bases 1e6 (full) / 1e4 (sliding).

Output (in the folder given):
    gemma3n.logits.txt   `tokens n id...`, `gen n id...` (llama.cpp's greedy continuation of the first
                         PROMPT tokens), `sum <tensor> <sum> <sum of |x|>` per tensor, then
                         `pos <p> <v0> ... <v299>`: llama.cpp's logits for every position of the token
                         sequence (F32 KV cache: only llama.cpp's own rounding — its f16 GELU table, op order —
                         separates it from an exact computation).
"""
import os, sys
import numpy as np
import gguf
from llama_cpp import Llama

D, L, H, HKV, HD, FF, V, W, P, R, N_ALTUP = 64, 25, 4, 2, 16, 128, 300, 8, 256, 64, 4
SEQ, PROMPT, GEN = 40, 12, 16
SEED = 0x3E3E3E
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
    """splitmix64: state_k = s + k * gamma (k = 1..n), output = mix(state_k); all in uint64 with wraparound."""
    s = np.uint64((SEED ^ fnv1a(name)) & M64)
    with np.errstate(over="ignore"):
        z = s + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9e3779b97f4a7c15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    return ((2.0 * u - 1.0) * a + mean).astype(np.float32)


def tensors():
    """(name, numpy shape, a, mean) in file order; the C writer lists the same."""
    fan = lambda k: (3.0 / k) ** 0.5
    out = [("token_embd.weight", (V, D), 0.5, 0.0),
           ("altup_proj.weight", (N_ALTUP - 1, D, D), fan(D), 0.0),
           ("altup_unembd_proj.weight", (N_ALTUP - 1, D, D), fan(D), 0.0),
           ("per_layer_token_embd.weight", (V, P * L), 0.1, 0.0),
           ("per_layer_model_proj.weight", (P * L, D), fan(D), 0.0),
           ("per_layer_proj_norm.weight", (P,), 0.2, 1.0),
           ("output_norm.weight", (D,), 0.2, 1.0)]
    for i in range(L):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (D,), 0.2, 1.0),
                (p + "attn_q.weight", (H * HD, D), fan(D), 0.0),
                (p + "attn_k.weight", (HKV * HD, D), fan(D), 0.0),
                (p + "attn_v.weight", (HKV * HD, D), fan(D), 0.0),
                (p + "attn_output.weight", (D, H * HD), fan(H * HD), 0.0),
                (p + "attn_q_norm.weight", (HD,), 0.1, 0.5),
                (p + "attn_k_norm.weight", (HD,), 0.1, 0.5),
                (p + "post_attention_norm.weight", (D,), 0.1, 0.3),
                (p + "ffn_norm.weight", (D,), 0.2, 1.0),
                (p + "ffn_gate.weight", (FF, D), fan(D), 0.0),
                (p + "ffn_up.weight", (FF, D), fan(D), 0.0),
                (p + "ffn_down.weight", (D, FF), fan(FF), 0.0),
                (p + "post_ffw_norm.weight", (D,), 0.1, 0.3),
                (p + "inp_gate.weight", (P, D), fan(D), 0.0),
                (p + "proj.weight", (D, P), fan(P), 0.0),
                (p + "post_norm.weight", (D,), 0.1, 0.3),
                (p + "altup_correct_coef.weight", (N_ALTUP, N_ALTUP), 0.25, 0.0),
                (p + "altup_correct_scale.weight", (D,), 0.2, 1.0),
                (p + "altup_predict_coef.weight", (N_ALTUP * N_ALTUP, N_ALTUP), 0.25, 0.0),
                (p + "altup_router.weight", (N_ALTUP, D), 6.0, 0.0),
                (p + "altup_router_norm.weight", (D,), 0.2, 1.0),
                (p + "laurel_l.weight", (R, D), fan(D), 0.0),
                (p + "laurel_r.weight", (D, R), fan(R), 0.0),
                (p + "laurel_post_norm.weight", (D,), 0.1, 0.3)]
    return out


def write(path):
    w = gguf.GGUFWriter(path, "gemma3n")
    w.add_context_length(128)
    w.add_embedding_length(D)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(W)
    w.add_sliding_window_pattern([i % 5 < 4 for i in range(L)])
    w.add_rope_freq_base(1000000.0)
    w.add_rope_freq_base_swa(10000.0)
    w.add_final_logit_softcapping(30.0)
    # keys the converter writes and llama.cpp ignores (hard-coded there); ours checks them against the rule
    w.add_altup_num_inputs(N_ALTUP)
    w.add_altup_active_idx(0)
    w.add_embedding_length_per_layer_input(P)
    w.add_shared_kv_layers(L - 20)
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
    sums = []
    for name, shape, a, mean in tensors():
        v = values(name, int(np.prod(shape)), a, mean).reshape(shape)
        w.add_tensor(name, v)
        sums.append((name, float(v.astype(np.float64).sum()), float(np.abs(v.astype(np.float64)).sum())))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sums


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(out, "gemma3n.gguf")
    sums = write(path)
    rng = np.random.default_rng(3)
    ids = [2] + [int(x) for x in rng.integers(6, V, SEQ - 1)]
    m = Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, verbose=False, n_threads=1,
              type_k=0, type_v=0, swa_full=True)
    m.eval(ids)
    scores = np.array(m.scores[:len(ids)])
    # greedy continuation of the first PROMPT tokens, one token per llama.cpp call
    m.reset()
    m.eval(ids[:PROMPT])
    gen = []
    for _ in range(GEN):
        t = int(np.argmax(m.scores[m.n_tokens - 1]))
        gen.append(t)
        m.eval([t])
    lines = ["# llama.cpp logits for the tiny gemma3n GGUF (tests/gen/gen_gemma3n_fixtures.py)",
             "tokens %d %s" % (len(ids), " ".join(map(str, ids))),
             "gen %d %d %s" % (PROMPT, len(gen), " ".join(map(str, gen)))]
    for name, s, sa in sums:
        lines.append(f"sum {name} {s:.9g} {sa:.9g}")
    for p in range(len(ids)):
        lines.append(f"pos {p} " + " ".join(f"{x:.7g}" for x in scores[p]))
    with open(os.path.join(out, "gemma3n.logits.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("max |logit|", float(np.abs(scores).max()), "argmax", [int(np.argmax(r)) for r in scores],
          "gen", gen, file=sys.stderr)


if __name__ == "__main__":
    main()
