#!/usr/bin/env python3
"""Writes tiny synthetic Gemma 4 vision encoders (GGUF mmproj, arch "clip", clip.vision.projector_type "gemma4v",
keys and tensors as llama.cpp's conversion/gemma.py writes them) with llama.cpp's gguf-py, computes their image
embeddings with a float64 numpy reference of the forward pass, and records Pillow's BICUBIC resizes and
llama.cpp's size rule, for tests/test_vision_gemma4.c.

    python3 -m venv /tmp/g4venv && /tmp/g4venv/bin/pip install numpy pillow pyyaml
    PYTHONPATH=<llama.cpp>/gguf-py /tmp/g4venv/bin/python tests/gen/gen_vision_gemma4_fixtures.py tests/data/vision/g4

Model: patch 16, width 32, ffn 48, 2 blocks, 2 heads (head dim 16: 2D RoPE over two halves of 8), pooling 3
(so image sides are multiples of 48), projection_dim 40, RMSNorm eps 1e-6, position tables of 11 rows (x and y),
image_mean [0.25, 0.5, 0.75] / image_std [0.5, 0.25, 1.0] (not HF's 0 / 1, so their use is tested), no
clip.use_gelu (what the converter writes). Layer 1 has a scalar out_scale {1}; v.std_bias / v.std_scale exist.

Files:
    f32.gguf          every tensor F32
    f16.gguf          the matrices (patch embedding, attention, FFN, projection) F16, the rest F32
    clamp.gguf        F32 plus Gemma4ClippableLinear bounds that bite (layer 0 attn_q input, layer 1 ffn_down
                      output, the projection's input and output) and layer 0 out_scale as a full row {32}
    a.rgb, b.rgb      input images, raw RGB8: a 96 x 48 (6 x 3 patches -> 2 x 1 tokens), b 48 x 144 (3 x 9 -> 1 x 3)
    <model>_<img>.f64 expected embeddings (tokens x 40 float64, token-major), input normalised in float32 as
                      llama.cpp does ((u8 / 255 - mean) / std); activation GELU-tanh (transformers'); for f32 also
                      quick_<img>.f64 with gelu_quick (llama.cpp's choice for these files)
    sizes.txt         "w h min max -> W H": llama.cpp's calc_size_preserved_ratio (align 48) in float32
    resize_src.rgb (23 x 13), resize_tall.rgb (7 x 23) and Pillow's BICUBIC resizes bicubic_WxH.rgb (of src)
                      and tall_4x10.rgb (of tall: Pillow >= 13 runs its vertical pass first)
    letterbox.rgb     resize_src letterboxed into 48 x 48 as llama.cpp does (bicubic to 48 x 28, Pillow's
                      bytes since both run the horizontal pass first when upscaling, at y = 10 on black)
    bad_*.gguf        files the loader must refuse
Deterministic: fixed seeds.
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from PIL import Image

P, D, FF, L, H, PD, POOL, ROWS = 16, 32, 48, 2, 2, 40, 3, 11
HD = D // H
EPS = 1e-6
MEAN = [0.25, 0.5, 0.75]
STD = [0.5, 0.25, 1.0]
IMAGES = {"a": (96, 48), "b": (48, 144)}


def make_weights(rng):
    """numpy arrays in HF-like layout (numpy shape = reversed ggml ne)."""
    w = {}
    r = lambda *shape, s=0.2: (rng.standard_normal(shape) * s).astype(np.float32)
    w["v.patch_embd.weight"] = r(D, 3, P, P, s=0.05)
    w["v.position_embd.weight"] = r(2, ROWS, D, s=0.3)
    for i in range(L):
        b = f"v.blk.{i}."
        for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w[b + n + ".weight"] = r(D, D, s=0.25)
        for n in ("ln1", "ln2", "attn_post_norm", "ffn_post_norm"):
            w[b + n + ".weight"] = (1 + r(D, s=0.2)).astype(np.float32)
        for n in ("attn_q_norm", "attn_k_norm"):
            w[b + n + ".weight"] = (1 + r(HD, s=0.2)).astype(np.float32)
        w[b + "ffn_gate.weight"] = r(FF, D, s=0.25)
        w[b + "ffn_up.weight"] = r(FF, D, s=0.25)
        w[b + "ffn_down.weight"] = r(D, FF, s=0.2)
    w["v.blk.1.out_scale.weight"] = np.array([0.75], np.float32)
    w["v.std_bias"] = r(D, s=0.3)
    w["v.std_scale"] = (1 + r(D, s=0.2)).astype(np.float32)
    w["mm.input_projection.weight"] = r(PD, D, s=0.2)
    return w


CLAMPS = {
    "v.blk.0.attn_q.input_min": -0.8, "v.blk.0.attn_q.input_max": 0.9,
    "v.blk.1.ffn_down.output_max": 0.5,
    "mm.input_projection.input_min": -1.2, "mm.input_projection.input_max": 1.1,
    "mm.input_projection.output_min": -0.7,
}


def is_matrix(name):
    return name.endswith(".weight") and any(k in name for k in ("attn_q.", "attn_k.", "attn_v.", "attn_out.", "ffn_",
                                                                "patch_embd", "input_projection"))


def write(path, w, variant, skip=(), extra=None, heads=H):
    g = gguf.GGUFWriter(path, "clip")
    g.add_clip_has_vision_encoder(True)
    g.add_clip_vision_projector_type("gemma4v")
    g.add_vision_image_size(224)  # a dummy, as the converter writes it
    g.add_vision_patch_size(P)
    g.add_vision_embedding_length(D)
    g.add_vision_feed_forward_length(FF)
    g.add_vision_block_count(L)
    g.add_vision_head_count(heads)
    g.add_vision_attention_layernorm_eps(EPS)
    g.add_vision_projection_dim(PD)
    g.add_vision_image_mean(MEAN)
    g.add_vision_image_std(STD)
    held = {}
    items = dict(w)
    if extra:
        items.update(extra)
    for name, arr in items.items():
        if name in skip:
            continue
        if variant == "f16" and is_matrix(name):
            h = arr.astype(np.float16)
            g.add_tensor(name, h)
            held[name] = h.astype(np.float64)
        else:
            g.add_tensor(name, arr)
            held[name] = arr.astype(np.float64)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    return held


def rms(x, w=None):
    y = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + EPS)
    return y if w is None else y * w


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_quick(x):
    return x / (1 + np.exp(-1.702 * x))


def linear(w, name, x):
    """Gemma4ClippableLinear: clamp the input, x W^T, clamp the output (bounds only where the file has them)."""
    get = lambda s, d: float(w[name + "." + s][0]) if name + "." + s in w else d
    x = np.clip(x, get("input_min", -np.inf), get("input_max", np.inf))
    y = x @ w[name + ".weight"].T
    return np.clip(y, get("output_min", -np.inf), get("output_max", np.inf))


def rope_half(x, pos):
    """NEOX rotation of x (..., n) by positions pos (one per row of x's first axis), theta 100 over n dims."""
    n = x.shape[-1]
    inv = 100.0 ** (-2.0 * np.arange(n // 2) / n)
    th = pos[:, None, None] * inv[None, None, :]
    c, s = np.cos(th), np.sin(th)
    x1, x2 = x[..., : n // 2], x[..., n // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def forward(w, img, act):
    """img: (3, Hpx, Wpx) float64, normalised. The Gemma 4 encoder (llama.cpp clip_graph_gemma4v / HF
    Gemma4VisionModel + Gemma4MultimodalEmbedder)."""
    _, Hp, Wp = img.shape
    gh, gw = Hp // P, Wp // P
    x = 2 * img - 1
    patches = x.reshape(3, gh, P, gw, P).transpose(1, 3, 0, 2, 4).reshape(gh * gw, 3 * P * P)  # p = py*gw + px
    h = patches @ w["v.patch_embd.weight"].reshape(D, -1).T
    px = np.arange(gh * gw) % gw
    py = np.arange(gh * gw) // gw
    h = h + w["v.position_embd.weight"][0][px] + w["v.position_embd.weight"][1][py]
    for i in range(L):
        b = f"v.blk.{i}."
        a = rms(h, w[b + "ln1.weight"])
        q, k, v = (linear(w, b + f"attn_{n}", a).reshape(-1, H, HD) for n in "qkv")
        q = rms(q, w[b + "attn_q_norm.weight"])
        k = rms(k, w[b + "attn_k_norm.weight"])
        v = rms(v)
        q = np.concatenate([rope_half(q[..., : HD // 2], px), rope_half(q[..., HD // 2:], py)], -1)
        k = np.concatenate([rope_half(k[..., : HD // 2], px), rope_half(k[..., HD // 2:], py)], -1)
        q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))
        s = q @ k.transpose(0, 2, 1)  # scale 1
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(-1, D)
        h = h + rms(linear(w, b + "attn_out", o), w[b + "attn_post_norm.weight"])
        m = rms(h, w[b + "ln2.weight"])
        f = act(linear(w, b + "ffn_gate", m)) * linear(w, b + "ffn_up", m)
        h = h + rms(linear(w, b + "ffn_down", f), w[b + "ffn_post_norm.weight"])
        if b + "out_scale.weight" in w:
            h = h * w[b + "out_scale.weight"]
    oh, ow = gh // POOL, gw // POOL
    t = h.reshape(oh, POOL, ow, POOL, D).mean(axis=(1, 3)).reshape(oh * ow, D) * np.sqrt(D)  # t = oy*ow + ox
    t = (t - w["v.std_bias"]) * w["v.std_scale"]
    return linear(w, "mm.input_projection", rms(t))


def normalise(u8, wd, ht):
    """llama.cpp: u8 / 255 then (x - mean) / std, in float32; planar CHW."""
    x = u8.reshape(ht, wd, 3).transpose(2, 0, 1).astype(np.float32) / np.float32(255)
    m = np.array(MEAN, np.float32)[:, None, None]
    s = np.array(STD, np.float32)[:, None, None]
    return ((x - m) / s).astype(np.float64)


# ---- llama.cpp's calc_size_preserved_ratio in float32

def round_half_away(x):
    r = np.float32(np.trunc(x))
    if abs(np.float32(x - r)) >= np.float32(0.5):
        r = np.float32(r + np.sign(x))
    return int(r)


def calc_size(w, h, mn, mx, a=48):
    f32 = np.float32
    fa = f32(a)
    wb = max(a, round_half_away(f32(f32(w) / fa)) * a)
    hb = max(a, round_half_away(f32(f32(h) / fa)) * a)
    min_px, max_px = mn * a * a, mx * a * a
    if wb * hb > max_px:
        beta = np.sqrt(f32(f32(f32(h) * f32(w)) / f32(max_px)))
        hb = max(a, int(np.floor(f32(f32(f32(h) / beta) / fa))) * a)
        wb = max(a, int(np.floor(f32(f32(f32(w) / beta) / fa))) * a)
    elif wb * hb < min_px:
        beta = np.sqrt(f32(f32(min_px) / f32(f32(h) * f32(w))))
        hb = int(np.ceil(f32(f32(f32(h) * beta) / fa))) * a
        wb = int(np.ceil(f32(f32(f32(w) * beta) / fa))) * a
    return wb, hb


SIZES = [  # (w, h, min, max); 0 = llama.cpp's 70 / 1120
    (896, 896, 0, 0), (1, 1, 0, 0), (10, 300, 0, 0), (1920, 1080, 0, 0), (4000, 3000, 0, 0), (8192, 1, 0, 0),
    (100, 100, 0, 0), (640, 480, 0, 0), (1024, 768, 0, 0), (300, 2000, 0, 0), (49, 7000, 0, 0), (3000, 3001, 0, 0),
    (96, 48, 1, 8), (48, 144, 1, 8), (500, 20, 1, 8), (1000, 1000, 1, 8), (23, 13, 1, 8),
    (640, 480, 200, 300), (1600, 900, 200, 300), (33, 77, 200, 300), (2048, 2048, 256, 256),
]
BICUBIC = [(9, 5), (31, 19), (47, 6), (5, 29), (1, 1), (23, 4), (11, 13), (50, 40), (46, 26)]


def write_resizes(out, rng):
    src = rng.integers(0, 256, (13, 23, 3), dtype=np.uint8)
    tall = rng.integers(0, 256, (23, 7, 3), dtype=np.uint8)
    src.tofile(os.path.join(out, "resize_src.rgb"))
    tall.tofile(os.path.join(out, "resize_tall.rgb"))
    im = Image.fromarray(src, "RGB")
    for wd, ht in BICUBIC:
        np.asarray(im.resize((wd, ht), Image.BICUBIC)).tofile(os.path.join(out, f"bicubic_{wd}x{ht}.rgb"))
    np.asarray(Image.fromarray(tall, "RGB").resize((4, 10), Image.BICUBIC)).tofile(os.path.join(out, "tall_4x10.rgb"))
    # llama.cpp's letterbox of 23 x 13 into 48 x 48: scale min(48/23, 48/13) -> 48 x ceil(27.13) = 28, y0 = 10
    box = np.zeros((48, 48, 3), np.uint8)
    box[10:38] = np.asarray(im.resize((48, 28), Image.BICUBIC))
    box.tofile(os.path.join(out, "letterbox.rgb"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/vision/g4"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(4004)
    w = make_weights(rng)
    imgs = {}
    for name, (wd, ht) in IMAGES.items():
        u8 = rng.integers(0, 256, (ht, wd, 3), dtype=np.uint8)
        u8.tofile(os.path.join(out, name + ".rgb"))
        imgs[name] = normalise(u8, wd, ht)
    clamp = {k: np.array([v], np.float32) for k, v in CLAMPS.items()}
    clamp["v.blk.0.out_scale.weight"] = (1 + rng.standard_normal(D) * 0.2).astype(np.float32)
    for model, variant, extra in (("f32", "f32", None), ("f16", "f16", None), ("clamp", "f32", clamp)):
        held = write(os.path.join(out, model + ".gguf"), w, variant, extra=extra)
        runs = [(model, gelu_tanh)] + ([("quick", gelu_quick)] if model == "f32" else [])
        for tag, act in runs:
            for name, x in imgs.items():
                y = forward(held, x, act)
                y.astype("<f8").tofile(os.path.join(out, f"{tag}_{name}.f64"))
                print(tag, name, y.shape, float(np.abs(y).max()))
    with open(os.path.join(out, "sizes.txt"), "w") as f:
        for wd, ht, mn, mx in SIZES:
            W, Hh = calc_size(wd, ht, mn or 70, mx or 1120)
            f.write(f"{wd} {ht} {mn} {mx} -> {W} {Hh}\n")
    write_resizes(out, rng)
    bad = os.path.join(out, "bad_{}.gguf").format
    write(bad("qnorm"), w, "f32", skip=("v.blk.1.attn_k_norm.weight",))
    write(bad("bias"), w, "f32", extra={"v.blk.0.attn_v.bias": np.zeros(D, np.float32)})
    write(bad("std"), w, "f32", skip=("v.std_scale",))
    write(bad("heads"), w, "f32", heads=16)  # head dim 2: not a multiple of 4


if __name__ == "__main__":
    main()
