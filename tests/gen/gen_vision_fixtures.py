#!/usr/bin/env python3
"""Writes tiny synthetic Gemma 3 vision encoders (GGUF mmproj, arch "clip", projector "gemma3") with llama.cpp's
gguf-py and computes their image embeddings with a float64 numpy reference of the forward pass, for
tests/test_vision.c.

    PYTHONPATH=<llama.cpp>/gguf-py python3 tests/gen/gen_vision_fixtures.py tests/data/vision

Shapes: image 16, patch 4 (4x4 = 16 patches), width 32, ffn 48 (not the width: llama.cpp swaps up/down when
ffn_down.ne[0] == width), 2 blocks, 4 heads (head dim 8), pooling scale_factor 2 (2x2 = 4 tokens),
projection_dim 64, LayerNorm eps 1e-6, image_mean/std 0.5.

Files:
    f32.gguf         every tensor F32 (clip.use_gelu = true: GELU-tanh)
    f16.gguf         as llama.cpp's converter with ftype F16: attention / FFN matrices and mm.input_projection F16,
                     the rest F32 (same random values before rounding)
    quick.gguf       F32, clip.use_gelu absent: llama.cpp then runs gelu_quick (x * sigmoid(1.702 x))
    q8.gguf          attention matrices Q8_0 (their 32 columns are one block), FFN F16, rest F32
    input.f32        the input image: 3 x 16 x 16 float32, planar CHW, already normalised to [-1, 1]
    <name>.out.f64   the expected embeddings: 4 x 64 float64, token-major (the reference on the file's own
                     weights, i.e. after F16 / Q8_0 rounding)
    bad_*.gguf       F32 files the loader must refuse: a missing tensor, a wrong shape, another projector type,
                     no vision encoder, ffn_down with width columns (the swap trap), a bad pooling scale factor
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize, dequantize

S, P, D, FF, L, H, SF, PD = 16, 4, 32, 48, 2, 4, 2, 64
EPS = 1e-6
G = S // P


def make_weights(rng):
    """HF-layout arrays (numpy shape = reversed ggml ne)."""
    w = {}
    r = lambda *shape, s=0.2: (rng.standard_normal(shape) * s).astype(np.float32)
    w["v.patch_embd.weight"] = r(D, 3, P, P, s=0.15)
    w["v.patch_embd.bias"] = r(D, s=0.1)
    w["v.position_embd.weight"] = r(G * G, D, s=0.3)
    for i in range(L):
        b = f"v.blk.{i}."
        for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w[b + n + ".weight"] = r(D, D, s=0.25)
            w[b + n + ".bias"] = r(D, s=0.1)
        for n in ("ln1", "ln2"):
            w[b + n + ".weight"] = (1 + r(D, s=0.2)).astype(np.float32)
            w[b + n + ".bias"] = r(D, s=0.1)
        w[b + "ffn_up.weight"] = r(FF, D, s=0.25)
        w[b + "ffn_up.bias"] = r(FF, s=0.1)
        w[b + "ffn_down.weight"] = r(D, FF, s=0.2)
        w[b + "ffn_down.bias"] = r(D, s=0.1)
    w["v.post_ln.weight"] = (1 + r(D, s=0.2)).astype(np.float32)
    w["v.post_ln.bias"] = r(D, s=0.1)
    # stored as 1 + w, as the converter writes it (llama.cpp multiplies by the stored value)
    w["mm.soft_emb_norm.weight"] = (1 + r(D, s=0.2)).astype(np.float32)
    # HF mm_input_projection_weight [width, projection_dim]: ggml ne {PD, D}; applied as x . W
    w["mm.input_projection.weight"] = r(D, PD, s=0.2)
    return w


def tensor_type(name, variant):
    matrix = name.endswith(".weight") and any(k in name for k in ("attn_", "ffn_"))
    if variant == "f16" and (matrix or name == "mm.input_projection.weight"):
        return QT.F16
    if variant == "q8":
        if matrix and "attn_" in name:
            return QT.Q8_0
        if matrix or name == "mm.input_projection.weight":
            return QT.F16
    return QT.F32


def stored(arr, qt):
    """(bytes to write, the values as the file holds them in float64)."""
    if qt == QT.F32:
        return arr, arr.astype(np.float64)
    if qt == QT.F16:
        h = arr.astype(np.float16)
        return h, h.astype(np.float64)
    q = quantize(arr, qt)
    return q, dequantize(q, qt).reshape(arr.shape).astype(np.float64)


def write(path, w, variant, gelu=True, proj="gemma3", vision=True, scale=SF, skip=(), override=None):
    g = gguf.GGUFWriter(path, "clip")
    g.add_clip_has_vision_encoder(vision)
    g.add_clip_projector_type(proj)
    g.add_vision_image_size(S)
    g.add_vision_patch_size(P)
    g.add_vision_embedding_length(D)
    g.add_vision_feed_forward_length(FF)
    g.add_vision_block_count(L)
    g.add_vision_head_count(H)
    g.add_vision_attention_layernorm_eps(EPS)
    g.add_vision_projection_dim(PD)
    g.add_vision_image_mean([0.5, 0.5, 0.5])
    g.add_vision_image_std([0.5, 0.5, 0.5])
    g.add_vision_projector_scale_factor(scale)
    if gelu:
        g.add_vision_use_gelu(True)
    held = {}
    for name, arr in w.items():
        if name in skip:
            continue
        if override and name in override:
            arr = override[name]
        qt = tensor_type(name, variant)
        data, held[name] = stored(arr, qt)
        g.add_tensor(name, data, raw_dtype=qt if qt not in (QT.F32, QT.F16) else None)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    return held


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_quick(x):
    return x / (1 + np.exp(-1.702 * x))


def forward(w, img, act):
    """The Gemma 3 encoder (llama.cpp clip_graph_siglip / HF SiglipVisionModel + Gemma3MultiModalProjector)."""
    patches = img.reshape(3, G, P, G, P).transpose(1, 3, 0, 2, 4).reshape(G * G, 3 * P * P)  # p = py*G + px
    h = patches @ w["v.patch_embd.weight"].reshape(D, -1).T + w["v.patch_embd.bias"]
    h = h + w["v.position_embd.weight"]
    hd = D // H
    for i in range(L):
        b = lambda n: w[f"v.blk.{i}.{n}"]
        a = layer_norm(h, b("ln1.weight"), b("ln1.bias"))
        q, k, v = (a @ b(f"attn_{n}.weight").T + b(f"attn_{n}.bias") for n in "qkv")
        q, k, v = (t.reshape(-1, H, hd).transpose(1, 0, 2) for t in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(-1, D)
        h = h + o @ b("attn_out.weight").T + b("attn_out.bias")
        m = layer_norm(h, b("ln2.weight"), b("ln2.bias"))
        u = act(m @ b("ffn_up.weight").T + b("ffn_up.bias"))
        h = h + u @ b("ffn_down.weight").T + b("ffn_down.bias")
    h = layer_norm(h, w["v.post_ln.weight"], w["v.post_ln.bias"])
    O = G // SF
    h = h.reshape(O, SF, O, SF, D).mean(axis=(1, 3)).reshape(O * O, D)  # token = oy*O + ox
    h = h / np.sqrt((h ** 2).mean(-1, keepdims=True) + EPS) * w["mm.soft_emb_norm.weight"]
    return h @ w["mm.input_projection.weight"]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/vision"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2026)
    w = make_weights(rng)
    img = rng.uniform(-1, 1, (3, S, S)).astype(np.float32)
    img.tofile(os.path.join(out, "input.f32"))
    x = img.astype(np.float64)
    for name, variant, gelu in (("f32", "f32", True), ("f16", "f16", True), ("quick", "f32", False),
                                ("q8", "q8", True)):
        held = write(os.path.join(out, name + ".gguf"), w, variant, gelu=gelu)
        y = forward(held, x, gelu_tanh if gelu else gelu_quick)
        y.astype("<f8").tofile(os.path.join(out, name + ".out.f64"))
        print(name, y.shape, float(np.abs(y).max()))
    bad = os.path.join(out, "bad_{}.gguf").format
    write(bad("missing"), w, "f32", skip=("v.blk.1.ffn_down.bias",))
    write(bad("shape"), w, "f32", override={"v.blk.0.attn_k.weight": w["v.blk.0.attn_k.weight"][:16].copy()})
    write(bad("projector"), w, "f32", proj="idefics3")
    write(bad("novision"), w, "f32", vision=False)
    write(bad("scale"), w, "f32", scale=3)
    # ffn_down {D, D}: llama.cpp would take it for a swapped up/down pair
    write(bad("swap"), w, "f32", override={"v.blk.0.ffn_down.weight": w["v.blk.0.ffn_down.weight"][:, :D].copy()})


if __name__ == "__main__":
    main()
