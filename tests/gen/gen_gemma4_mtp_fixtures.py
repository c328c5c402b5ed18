#!/usr/bin/env python3
"""Writes a tiny synthetic Gemma 4 MTP drafter ("gemma4-assistant") for the tiny target
tests/data/gemma4/gemma4-dense.gguf, with the `gguf` Python package (llama.cpp's gguf-py), for test_mtp.

    PYTHONPATH=<llama.cpp>/gguf-py python3 tests/gen/gen_gemma4_mtp_fixtures.py tests/data/gemma4

Writes <out>/gemma4-mtp.gguf (F32, ~0.1 MB). llama.cpp's drafts on it are recorded by
tests/gen/mtp_llama_harness.cpp into <out>/gemma4-mtp.draft.txt (see the comment at its top).

Drafter: n_embd = 16, embedding_length_out = 32 (the target's d), 4 layers (block_count =
nextn_predict_layers = 4), 4 query heads, pattern sliding, sliding, sliding, full. Each drafter layer
has no K/V of its own: it reads the target's cache (llama.cpp: sliding layers the cache of target layer
n_layer-2 = 5, full layers that of layer 6; the target's shared_kv_layers = 2 resolves those to layers 3
and 4). So its head_dim and KV heads per layer kind equal the target's: sliding head_dim 8 with 2 KV
heads, full head_dim 16 with 1 KV head (head_count_kv = [2, 2, 2, 1]). RoPE as the target: sliding base
1e4 over 8 dims, full base 1e6 over 16 dims with rope_freqs = [1, 1, 1e30 x 6] (read from the target).
attention.sliding_window = 6, NOT the target's 8: llama.cpp masks the drafter's sliding layers with the
drafter's own window, and a different value makes the fixture check that. FFN width 24.
layer_output_scale = [0.9, 1.1, 0.8, 1.2]. final_logit_softcapping = 30 is written (the converter
copies it when the HF config has it) but llama.cpp's gemma4-assistant does not read it: drafter logits
are NOT softcapped. Tensors: token_embd {16, 300} (the drafter's own, used only as the tied LM head; the
input embedding is the TARGET's token_embd scaled by sqrt(32)), output_norm, nextn.pre_projection
{64, 16}, nextn.post_projection {16, 32}, rope_freqs, and per layer attn_norm, attn_q, attn_q_norm,
attn_output, post_attention_norm, layer_output_scale {1}, ffn_norm, ffn_gate, ffn_up, ffn_down,
post_ffw_norm (ggml shapes {in, out}; numpy shapes below are [out, in]). The tokenizer keys are copied
from the target file (same 300-token vocab).

Weights: value i of tensor `name` is (2u - 1) * a + mean (splitmix64 of SEED ^ fnv1a(name), as in
gen_gemma4_fixtures.py, with a different SEED).
"""
import os, sys
import numpy as np
import gguf
from synth_gguf import copy_tokenizer, field_value, values as seeded_values

TARGET = "gemma4-dense.gguf"
D, D_BB, L, H, V, W = 16, 32, 4, 4, 300, 6
HD_SWA, HD_FULL = 8, 16
SWA = [True, True, True, False]
HKV = [2 if s else 1 for s in SWA]
FF = 24
OUT_SCALE = [0.9, 1.1, 0.8, 1.2]
SOFTCAP = 30.0
SEED = 0x4D5450


def seeded(name, n, a, mean):
    return seeded_values(SEED, name, n, a, mean)


def tensors():
    """(name, numpy shape [out, in], a, mean): uniform fan-in scale for matrices, norms around 1 (or 0.5
    for q_norm and 0.3 for the post norms, as in the target generator) so activations stay O(1)."""
    fan = lambda k: (3.0 / k) ** 0.5
    out = [("token_embd.weight", (V, D), 0.5, 0.0), ("output_norm.weight", (D,), 0.2, 1.0),
           ("nextn.pre_projection.weight", (D, 2 * D_BB), fan(2 * D_BB), 0.0),
           ("nextn.post_projection.weight", (D_BB, D), fan(D), 0.0)]
    for i in range(L):
        p = f"blk.{i}."
        hd = HD_SWA if SWA[i] else HD_FULL
        out += [(p + "attn_norm.weight", (D,), 0.2, 1.0),
                (p + "attn_q.weight", (H * hd, D), fan(D), 0.0),
                (p + "attn_q_norm.weight", (hd,), 0.1, 0.5),
                (p + "attn_output.weight", (D, H * hd), fan(H * hd), 0.0),
                (p + "post_attention_norm.weight", (D,), 0.1, 0.3),
                (p + "ffn_norm.weight", (D,), 0.2, 1.0),
                (p + "ffn_gate.weight", (FF, D), fan(D), 0.0),
                (p + "ffn_up.weight", (FF, D), fan(D), 0.0),
                (p + "ffn_down.weight", (D, FF), fan(FF), 0.0),
                (p + "post_ffw_norm.weight", (D,), 0.1, 0.3)]
    return out


def target_info(path):
    r = gguf.GGUFReader(path)
    kv = {k: field_value(f) for k, f in r.fields.items()}
    freqs = next(np.array(t.data, dtype=np.float32) for t in r.tensors if t.name == "rope_freqs.weight")
    # the drafter's per-kind shapes must be the target's (it reads the target's KV cache)
    assert kv["gemma4.embedding_length"] == D_BB
    assert kv["gemma4.attention.key_length"] == HD_FULL and kv["gemma4.attention.key_length_swa"] == HD_SWA
    swa_t, hkv_t = kv["gemma4.attention.sliding_window_pattern"], kv["gemma4.attention.head_count_kv"]
    for s in (True, False):
        assert {h for h, t in zip(hkv_t, swa_t) if t == s} == {h for h, d in zip(HKV, SWA) if d == s}
    n_t = kv["gemma4.block_count"]
    assert swa_t[n_t - 2] and not swa_t[n_t - 1]  # llama.cpp's sliding -> n-2, full -> n-1 mapping
    assert len(kv["tokenizer.ggml.tokens"]) == V
    return r, kv, freqs


def write(path, target):
    r, kv, freqs = target_info(target)
    w = gguf.GGUFWriter(path, "gemma4-assistant")
    w.add_context_length(kv["gemma4.context_length"])
    w.add_embedding_length(D)
    w.add_embedding_length_out(D_BB)
    w.add_block_count(L)
    w.add_nextn_predict_layers(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_key_length(HD_FULL)
    w.add_value_length(HD_FULL)
    w.add_key_length_swa(HD_SWA)
    w.add_value_length_swa(HD_SWA)
    w.add_rope_dimension_count(HD_FULL)
    w.add_rope_dimension_count_swa(HD_SWA)
    w.add_layer_norm_rms_eps(kv["gemma4.attention.layer_norm_rms_epsilon"])
    w.add_sliding_window(W)
    w.add_sliding_window_pattern(SWA)
    w.add_rope_freq_base(kv["gemma4.rope.freq_base"])
    w.add_rope_freq_base_swa(kv["gemma4.rope.freq_base_swa"])
    w.add_final_logit_softcapping(SOFTCAP)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    copy_tokenizer(w, r)
    w.add_tensor("rope_freqs.weight", freqs)
    for name, shape, a, mean in tensors():
        w.add_tensor(name, seeded(name, int(np.prod(shape)), a, mean).reshape(shape))
    for i, s in enumerate(OUT_SCALE):
        w.add_tensor(f"blk.{i}.layer_output_scale.weight", np.array([s], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "gemma4-mtp.gguf")
    write(path, os.path.join(out, TARGET))
    print(path, os.path.getsize(path), "bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
