#!/usr/bin/env python3
"""Writes tiny synthetic EAGLE-3 drafter heads (llama.cpp arch "eagle3") for the tiny target
tests/data/gemma4/gemma4-dense.gguf, with the `gguf` Python package (llama.cpp's gguf-py), for the
EAGLE-3 parity test.

    PYTHONPATH=<llama.cpp>/gguf-py python3 tests/gen/gen_eagle3_fixtures.py tests/data/eagle3

Writes <out>/eagle3-gemma4.gguf and <out>/eagle3-gemma4-d2t.gguf (F32, ~0.05 MB each). llama.cpp's
encoder outputs and drafts on them are recorded by tests/gen/eagle3_llama_harness.cpp into
<out>/<stem>.draft.txt (see the comment at its top).

Only Gemma 4 targets: llama.cpp 0.3.36's gemma3 graph (src/models/gemma3.cpp) sets neither
t_layer_inp (a layer-input tap aborts: "layer input tensor is null", llama-graph.cpp:1384) nor t_h_nextn
(the final-hidden tap is never written), so an EAGLE-3 head cannot run over tests/data/tiny/gemma3.gguf.
The variants the brief split between a gemma3 head and a gemma4 head are both over gemma4-dense here.

The target: d = 32, 7 layers, vocab 300 (tests/gen/gen_gemma4_fixtures.py). An EAGLE-3 head has one
decoder layer (block_count 1). Its encoder is g = fc . f (f = the 3 target taps of a position, each
d = 32 wide, concatenated in target_layers order; RMS-normed with enc.output_norm first when
norm_before_fc). Tap id i < 7 is the input of target layer i (the residual stream after layer i-1; id 0
is the scaled token embedding), id 7 is the target's final-normed hidden state (t_h_nextn).

    eagle3-gemma4      n_embd 32 (= the target's d: it has no token_embd and reads the TARGET's table,
                       unscaled, so its width must be the target's), 4 heads, 2 KV heads, head_dim 8, FFN 40,
                       rms eps 1e-6, rope base 1e4; target_layers [1, 3, 7] (7 = n_layer: the final hidden);
                       norm_before_residual = false written, norm_before_fc absent (default false, no
                       enc.output_norm); full vocab (no d2t): output.weight {32, 300}.
    eagle3-gemma4-d2t  n_embd 24 (not the target's 32), 4 heads, 1 KV head, head_dim 8 (so the query
                       width 32 is not n_embd), FFN 36, rms eps 1e-5, rope base 5e5; target_layers [2, 3, 4]
                       (the converter's default [2, L/2, L-3]); norm_before_residual = true, norm_before_fc =
                       true with enc.output_norm {96}; its own token_embd {24, 300}; a 64-token draft vocab:
                       d2t (I64, ABSOLUTE target ids, ascending: the distinct tokens of the target fixture's
                       token list plus seeded others) and output.weight {24, 64}.

Tensors (ggml shapes {in, out}; numpy shapes below are [out, in]): fc {96, n_embd}, output_norm,
output, [token_embd], [enc.output_norm], [d2t], blk.0.{attn_norm (token embedding), attn_norm_2 (g),
attn_q {2 n_embd, 32}, attn_k / attn_v {2 n_embd, 8 n_kv}, attn_output {32, n_embd}, ffn_norm, ffn_gate,
ffn_up, ffn_down}. RoPE is llama.cpp's NORM type (adjacent pairs) over head_dim 8; no rope_freqs. The
tokenizer keys are copied from the target (llama.cpp needs a vocab to load the head).

Weights: value i of tensor `name` is (2u - 1) * a + mean (splitmix64 of SEED ^ fnv1a(name), as in
gen_gemma4_mtp_fixtures.py, with a different SEED per variant).
"""
import os, sys
import numpy as np
import gguf
from synth_gguf import copy_tokenizer, field_value, values

TARGET = "gemma4-dense.gguf"
TARGET_LOGITS = "gemma4-dense.logits.txt"
D_TGT, L_TGT, V = 32, 7, 300
HD = 8
N_DRAFT = 64

VARIANTS = {
    "eagle3-gemma4": dict(seed=0x453347, d=32, h=4, hkv=2, ff=40, eps=1e-6, base=1e4, layers=[1, 3, 7],
                          nbr=False, nbfc=None, own_embd=False, d2t=False),
    "eagle3-gemma4-d2t": dict(seed=0x453348, d=24, h=4, hkv=1, ff=36, eps=1e-5, base=5e5, layers=[2, 3, 4],
                              nbr=True, nbfc=True, own_embd=True, d2t=True),
}


def tensors(v):
    """(name, numpy shape [out, in], a, mean): uniform fan-in scale for matrices, norms around 1."""
    fan = lambda k: (3.0 / k) ** 0.5
    d, n_out = v["d"], N_DRAFT if v["d2t"] else V
    out = [("fc.weight", (d, 3 * D_TGT), fan(3 * D_TGT), 0.0), ("output_norm.weight", (d,), 0.2, 1.0),
           ("output.weight", (n_out, d), fan(d), 0.0)]
    if v["own_embd"]:
        out.append(("token_embd.weight", (V, d), 0.5, 0.0))
    if v["nbfc"]:
        out.append(("enc.output_norm.weight", (3 * D_TGT,), 0.2, 1.0))
    p = "blk.0."
    out += [(p + "attn_norm.weight", (d,), 0.2, 1.0), (p + "attn_norm_2.weight", (d,), 0.2, 1.0),
            (p + "attn_q.weight", (v["h"] * HD, 2 * d), fan(2 * d), 0.0),
            (p + "attn_k.weight", (v["hkv"] * HD, 2 * d), fan(2 * d), 0.0),
            (p + "attn_v.weight", (v["hkv"] * HD, 2 * d), fan(2 * d), 0.0),
            (p + "attn_output.weight", (d, v["h"] * HD), fan(v["h"] * HD), 0.0),
            (p + "ffn_norm.weight", (d,), 0.2, 1.0),
            (p + "ffn_gate.weight", (v["ff"], d), fan(d), 0.0),
            (p + "ffn_up.weight", (v["ff"], d), fan(d), 0.0),
            (p + "ffn_down.weight", (d, v["ff"]), fan(v["ff"]), 0.0)]
    return out


def target_info(path):
    r = gguf.GGUFReader(path)
    kv = {k: field_value(f) for k, f in r.fields.items()}
    assert kv["gemma4.embedding_length"] == D_TGT and kv["gemma4.block_count"] == L_TGT
    assert len(kv["tokenizer.ggml.tokens"]) == V
    return r, kv


def fixture_tokens(path):
    with open(path) as f:
        for line in f:
            if line.startswith("tokens "):
                t = [int(x) for x in line.split()[1:]]
                return t[1:1 + t[0]]
    raise SystemExit(f"no tokens line in {path}")


def d2t_ids(seed, toks):
    """64 distinct absolute target ids, ascending: the fixture's tokens (so the chain can hit them) and
    seeded others."""
    ids = sorted(set(toks))
    rng = np.random.default_rng(seed)
    rest = [int(i) for i in rng.permutation(V) if int(i) not in ids]
    ids = sorted(ids + rest[:N_DRAFT - len(ids)])
    assert len(ids) == N_DRAFT
    return np.array(ids, dtype=np.int64)


def write(path, v, r, kv, toks):
    w = gguf.GGUFWriter(path, "eagle3")
    w.add_context_length(kv["gemma4.context_length"])
    w.add_embedding_length(v["d"])
    w.add_block_count(1)
    w.add_feed_forward_length(v["ff"])
    w.add_head_count(v["h"])
    w.add_head_count_kv(v["hkv"])
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(HD)
    w.add_layer_norm_rms_eps(v["eps"])
    w.add_rope_freq_base(v["base"])
    w.add_array("eagle3.target_layers", v["layers"])
    w.add_uint32("eagle3.target_hidden_size", D_TGT)
    w.add_bool("eagle3.norm_before_residual", v["nbr"])
    if v["nbfc"] is not None:
        w.add_bool("eagle3.norm_before_fc", v["nbfc"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    copy_tokenizer(w, r)
    for name, shape, a, mean in tensors(v):
        w.add_tensor(name, values(v["seed"], name, int(np.prod(shape)), a, mean).reshape(shape))
    if v["d2t"]:
        w.add_tensor("d2t", d2t_ids(v["seed"], toks))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tgt_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gemma4")
    r, kv = target_info(os.path.join(tgt_dir, TARGET))
    toks = fixture_tokens(os.path.join(tgt_dir, TARGET_LOGITS))
    for stem, v in VARIANTS.items():
        path = os.path.join(out, stem + ".gguf")
        write(path, v, r, kv, toks)
        print(path, os.path.getsize(path), "bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
