#!/usr/bin/env python3
"""An exact reference for the default model: the forward pass in float64 numpy on the weights as the `gguf`
package dequantizes them (no activation quantization, exact GELU, exact softmax) — what Hugging Face
transformers computes in float64 on the dequantized model. Written from gemma-facts section A for Gemma 3.

    python3 tests/gen/gen_exact_ref.py models/gemma-3-270m-q4_k_m.gguf tests/data/llama/gemma3-270m-q4km.txt \
        tests/data/exact/gemma3-270m-q4km.txt

For the first 10 prompts of the llama.cpp fixture (their token ids): `exact <i> <lse> 64 (<id> <logit>)x64`,
the 64 largest logits at the last prompt position and the log-sum-exp of all logits (log p = logit - lse).
"""
import sys, os
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def load_reference(model):
    """Returns forward(ids, all_positions=False) -> logits (float64) of the last (or every) position."""
    r = GGUFReader(model)
    T = {t.name: t for t in r.tensors}
    meta = {k: f.contents() for k, f in r.fields.items() if k.startswith("gemma3.")}
    d, L = meta["gemma3.embedding_length"], meta["gemma3.block_count"]
    H, HKV, HD = meta["gemma3.attention.head_count"], meta["gemma3.attention.head_count_kv"], meta["gemma3.attention.key_length"]
    eps, win, gbase = meta["gemma3.attention.layer_norm_rms_epsilon"], meta["gemma3.attention.sliding_window"], meta["gemma3.rope.freq_base"]
    cache = {}

    def W(name):
        if name not in cache:
            t = T[name]
            a = dequantize(t.data, t.tensor_type)
            shape = [int(x) for x in reversed(t.shape)]
            cache[name] = a.reshape(shape).astype(np.float32 if name == "token_embd.weight" else np.float64)
        return cache[name]

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    def rope(v, base, n):
        half = HD // 2
        inv = base ** (-np.arange(half) * 2.0 / HD)
        ang = np.arange(n)[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = v[..., :half], v[..., half:]
        return np.concatenate([a * c - b * s, a * s + b * c], -1)

    def gelu(v):
        return 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))

    def forward(ids, all_positions=False):
        n = len(ids)
        E = W("token_embd.weight")
        x = E[ids].astype(np.float64) * np.sqrt(d)
        for l in range(L):
            p = f"blk.{l}."
            glob = (l + 1) % 6 == 0
            h = rms(x, W(p + "attn_norm.weight"))
            q = (h @ W(p + "attn_q.weight").T).reshape(n, H, HD)
            k = (h @ W(p + "attn_k.weight").T).reshape(n, HKV, HD)
            v = (h @ W(p + "attn_v.weight").T).reshape(n, HKV, HD)
            q = rope(rms(q, W(p + "attn_q_norm.weight")), gbase if glob else 10000.0, n)
            k = rope(rms(k, W(p + "attn_k_norm.weight")), gbase if glob else 10000.0, n)
            o = np.zeros((n, H, HD))
            dist = np.arange(n)[:, None] - np.arange(n)[None, :]
            mask = (dist >= 0) & (glob | (dist < win))
            for hh in range(H):
                kv = hh // (H // HKV)
                s = q[:, hh] @ k[:, kv].T / np.sqrt(HD)
                s = np.where(mask, s, -np.inf)
                s = np.exp(s - s.max(-1, keepdims=True))
                o[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
            x = x + rms(o.reshape(n, H * HD) @ W(p + "attn_output.weight").T, W(p + "post_attention_norm.weight"))
            h = rms(x, W(p + "ffn_norm.weight"))
            f = gelu(h @ W(p + "ffn_gate.weight").T) * (h @ W(p + "ffn_up.weight").T)
            x = x + rms(f @ W(p + "ffn_down.weight").T, W(p + "post_ffw_norm.weight"))
        if all_positions:
            return rms(x, W("output_norm.weight")) @ W("token_embd.weight").T.astype(np.float64)
        h = rms(x[-1], W("output_norm.weight"))
        return W("token_embd.weight").astype(np.float64) @ h

    return forward


def main():
    model, fixture, out = sys.argv[1:4]
    forward = load_reference(model)
    prompts = {}
    for line in open(fixture):
        f = line.split()
        if f and f[0] == "prompt":
            prompts[int(f[1])] = [int(x) for x in f[3:]]
    lines = ["# exact float64 reference (tests/gen/gen_exact_ref.py): exact <prompt> <logsumexp> 64 (<id> <logit>)x64"]
    for i in range(10):
        lg = forward(prompts[i])
        mx = lg.max()
        lse = mx + np.log(np.exp(lg - mx).sum())
        top = np.argsort(-lg, kind="stable")[:64]
        lines.append(f"exact {i} {lse:.6f} 64 " + " ".join(f"{t} {lg[t]:.6f}" for t in top))
        print(i, top[:3], lg[top[:3]], file=sys.stderr)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    open(out, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
