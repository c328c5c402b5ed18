#!/usr/bin/env python3
"""Writes tiny random Hugging Face folders of Gemma3ForConditionalGeneration and Gemma4ForConditionalGeneration
(config.json, preprocessor_config.json, safetensors written by hand) and, for each, the mmproj GGUF llama.cpp's
converter makes of it (conversion/gemma.py Gemma3VisionModel / Gemma4VisionAudioModel, written here with gguf-py
and the converter's transforms applied by this script: torch is not installed here, so the converter itself is
not run), for tests/test_vision_hf.c, which checks both give the same embeddings.

    PYTHONPATH=<llama.cpp>/gguf-py /tmp/genvenv/bin/python tests/gen/gen_vision_hf_fixtures.py tests/data/vision/hf

What the converter does and this script copies:
  - Gemma 3: names (vision_tower.vision_model.* -> v.*, multi_modal_projector.* -> mm.*), mm_soft_emb_norm stored
    as 1 + w (in f32: the converter upcasts BF16 first), patch / position embeddings and 1-D tensors F32,
    mm.input_projection F16, the other matrices in the output type (BF16 here: the folder's type, so no rounding);
    clip.use_gelu; scale_factor = (image_size / patch_size) / sqrt(tokens per image) when it is not 4.
  - Gemma 4: names (model.vision_tower.encoder.layers.N.* -> v.blk.N.*, *.linear.weight -> *.weight, clamp
    scalars -> {1}), patch_embedder.input_proj's columns permuted from (y, x, channel) to (channel, y, x) and
    stored F32, the position table F32 as is ([2, rows, D] = ggml {D, rows, 2}), norms raw, no clip.use_gelu.

Folders (every one also holds a language-model tensor or two, which the vision loader must skip):
    g3/        Gemma 3, current transformers names ("model." prefix); attention / FFN matrices BF16, the
               projection F16 (so the converter's F16 is exact), the rest F32; image_mean / image_std
               [0.25, 0.5, 0.75] / [0.5, 0.25, 1.0] (not the defaults, so their use is tested);
               mm_tokens_per_image 4 (scale 2)
    g3.gguf    its mmproj: bit-identical weights
    g3_old/    Gemma 3, older names (no "model." prefix), all F32, sharded in two files with an index, no
               preprocessor_config.json (defaults 0.5 / 0.5)
    g3_old.gguf its mmproj: the projection rounded to F16 as the converter does, so agreement is to a tolerance
    g4/        Gemma 4 (patch 8, pool 3, 11 position rows, std_bias / std_scale, clamp scalars on layer 0 q_proj
               and layer 1 down_proj); matrices BF16, patch embedding BF16 (permuted into F32 by both), rest F32;
               preprocessor_config.json do_normalize false with image_mean 0.5 (transformers: no normalisation)
    g4.gguf    its mmproj (image_mean 0 / std 1, as transformers normalises): bit-identical weights
    g3_640/    g3's shape with a projection to 640 (the default text model's width, for tests/cli_vision.sh); F32
    bad_missing/  g3 without encoder.layers.1.mlp.fc2.bias
    bad_extra/    g4 with a q_proj bias, which the Gemma 4 encoder does not have
    input_g3.f32  3 x 16 x 16 floats, input_g4.f32 3 x 24 x 48 floats (w 48, h 24): normalised inputs
Deterministic: fixed seeds.
"""
import json
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT


def bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


class T:
    """A tensor as stored: dtype 'F32' | 'F16' | 'BF16', numpy shape (torch order), raw numpy data."""

    def __init__(self, dtype, a):
        self.dtype = dtype
        if dtype == "F32":
            self.raw = np.ascontiguousarray(a, np.float32)
        elif dtype == "F16":
            self.raw = np.ascontiguousarray(a, np.float16)
        else:
            self.raw = bf16_bits(a)
        self.shape = list(np.shape(a))

    def f32(self):
        return bf16_to_f32(self.raw) if self.dtype == "BF16" else self.raw.astype(np.float32)


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = t.raw.tobytes()
        header[name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_folder(d, config, tensors, pre=None, shards=1):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if pre is not None:
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(pre, f, indent=1)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        return
    names = sorted(tensors)
    weight_map = {}
    for k in range(shards):
        part = names[k::shards]
        fn = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(d, fn), {n: tensors[n] for n in part})
        weight_map.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)


def gguf_tensor(g, name, dtype, a):
    """a: float32 numpy in ggml-reversed (torch) order, stored as dtype."""
    if dtype == "F32":
        g.add_tensor(name, np.ascontiguousarray(a, np.float32))
    elif dtype == "F16":
        g.add_tensor(name, np.ascontiguousarray(a, np.float16))
    else:
        g.add_tensor(name, bf16_bits(a).view(np.uint8), raw_dtype=QT.BF16)


# ---------------------------------------------------------------- Gemma 3

G3 = dict(D=16, F=24, L=2, H=2, IMG=16, P=4, PD=20, TOK=4)
G3_MATS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj", "mlp.fc1", "mlp.fc2")
G3_GG = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.out_proj": "attn_out", "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down",
         "layer_norm1": "ln1", "layer_norm2": "ln2"}


def g3_weights(rng, mat_dtype, proj_dtype, PD=G3["PD"]):
    D, F, P = G3["D"], G3["F"], G3["P"]
    NP = (G3["IMG"] // P) ** 2
    r = lambda *s, k=0.2: (rng.standard_normal(s) * k).astype(np.float32)
    w = {"embeddings.patch_embedding.weight": T("F32", r(D, 3, P, P, k=0.1)),
         "embeddings.patch_embedding.bias": T("F32", r(D)),
         "embeddings.position_embedding.weight": T("F32", r(NP, D, k=0.3)),
         "post_layernorm.weight": T("F32", 1 + r(D)), "post_layernorm.bias": T("F32", r(D))}
    for i in range(G3["L"]):
        b = f"encoder.layers.{i}."
        for m in G3_MATS:
            out, inp = (F, D) if m == "mlp.fc1" else (D, F) if m == "mlp.fc2" else (D, D)
            w[b + m + ".weight"] = T(mat_dtype, r(out, inp, k=0.25))
            w[b + m + ".bias"] = T("F32", r(out, k=0.1))
        for n in ("layer_norm1", "layer_norm2"):
            w[b + n + ".weight"] = T("F32", 1 + r(D))
            w[b + n + ".bias"] = T("F32", r(D, k=0.1))
    proj = {"mm_soft_emb_norm.weight": T("F32", r(D, k=0.3)),
            "mm_input_projection_weight": T(proj_dtype, r(D, PD, k=0.3))}
    return w, proj


def g3_config(pd=None):
    pd = pd or G3["PD"]
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
            "mm_tokens_per_image": G3["TOK"], "boi_token_index": 255999, "eoi_token_index": 256000,
            "image_token_index": 262144,
            "text_config": {"model_type": "gemma3_text", "hidden_size": pd, "num_hidden_layers": 1,
                            "vocab_size": 8},
            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": G3["D"], "image_size": G3["IMG"],
                              "intermediate_size": G3["F"], "num_attention_heads": G3["H"],
                              "num_hidden_layers": G3["L"], "patch_size": G3["P"], "layer_norm_eps": 1e-6,
                              "vision_use_head": False, "hidden_act": "gelu_pytorch_tanh"}}


def g3_hf(vis, proj, root):
    t = {f"{root}vision_tower.vision_model.{k}": v for k, v in vis.items()}
    t.update({f"{root}multi_modal_projector.{k}": v for k, v in proj.items()})
    lm = "model.language_model." if root else "language_model.model."
    t[lm + "embed_tokens.weight"] = T("BF16", np.ones((8, G3["PD"]), np.float32))
    t[lm + "norm.weight"] = T("F32", np.zeros(G3["PD"], np.float32))
    return t


def g3_gguf(path, vis, proj, mat_dtype, mean, std):
    g = gguf.GGUFWriter(path, "clip")
    g.add_clip_has_vision_encoder(True)
    g.add_clip_projector_type("gemma3")
    g.add_vision_use_gelu(True)
    g.add_vision_image_size(G3["IMG"])
    g.add_vision_patch_size(G3["P"])
    g.add_vision_embedding_length(G3["D"])
    g.add_vision_feed_forward_length(G3["F"])
    g.add_vision_block_count(G3["L"])
    g.add_vision_head_count(G3["H"])
    g.add_vision_attention_layernorm_eps(1e-6)
    g.add_vision_projection_dim(G3["PD"])
    g.add_vision_image_mean(mean)
    g.add_vision_image_std(std)
    g.add_vision_projector_scale_factor((G3["IMG"] // G3["P"]) // int(G3["TOK"] ** 0.5))
    gguf_tensor(g, "v.patch_embd.weight", "F32", vis["embeddings.patch_embedding.weight"].f32())
    gguf_tensor(g, "v.patch_embd.bias", "F32", vis["embeddings.patch_embedding.bias"].f32())
    gguf_tensor(g, "v.position_embd.weight", "F32", vis["embeddings.position_embedding.weight"].f32())
    for i in range(G3["L"]):
        for hf, gg in G3_GG.items():
            for suf in ("weight", "bias"):
                t = vis[f"encoder.layers.{i}.{hf}.{suf}"]
                dt = mat_dtype if suf == "weight" and hf in G3_MATS else "F32"
                gguf_tensor(g, f"v.blk.{i}.{gg}.{suf}", dt, t.f32())
    gguf_tensor(g, "v.post_ln.weight", "F32", vis["post_layernorm.weight"].f32())
    gguf_tensor(g, "v.post_ln.bias", "F32", vis["post_layernorm.bias"].f32())
    gguf_tensor(g, "mm.soft_emb_norm.weight", "F32", proj["mm_soft_emb_norm.weight"].f32() + np.float32(1))
    gguf_tensor(g, "mm.input_projection.weight", "F16", proj["mm_input_projection_weight"].f32())
    finish(g)


def finish(g):
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


# ---------------------------------------------------------------- Gemma 4

G4 = dict(D=16, F=24, L=2, H=2, P=8, PD=20, POOL=3, ROWS=11)
G4_LIN = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down"}
G4_NORM = {"input_layernorm": "ln1", "pre_feedforward_layernorm": "ln2", "self_attn.q_norm": "attn_q_norm",
           "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "attn_post_norm",
           "post_feedforward_layernorm": "ffn_post_norm"}
G4_CLAMPS = {"0.self_attn.q_proj.input_min": -0.8, "0.self_attn.q_proj.input_max": 0.9,
             "0.self_attn.q_proj.output_min": -float("inf"), "0.self_attn.q_proj.output_max": float("inf"),
             "1.mlp.down_proj.output_max": 0.5}


def g4_weights(rng):
    D, F, P, HD = G4["D"], G4["F"], G4["P"], G4["D"] // G4["H"]
    r = lambda *s, k=0.2: (rng.standard_normal(s) * k).astype(np.float32)
    w = {"vision_tower.patch_embedder.input_proj.weight": T("BF16", r(D, P * P * 3, k=0.08)),
         "vision_tower.patch_embedder.position_embedding_table": T("F32", r(2, G4["ROWS"], D, k=0.3)),
         "vision_tower.std_bias": T("F32", r(D, k=0.3)), "vision_tower.std_scale": T("F32", 1 + r(D)),
         "embed_vision.embedding_projection.weight": T("BF16", r(G4["PD"], D, k=0.3))}
    for i in range(G4["L"]):
        b = f"vision_tower.encoder.layers.{i}."
        for m in G4_LIN:
            out, inp = (F, D) if m in ("mlp.gate_proj", "mlp.up_proj") else (D, F) if m == "mlp.down_proj" else (D, D)
            w[b + m + ".linear.weight"] = T("BF16", r(out, inp, k=0.25))
        for n in G4_NORM:
            w[b + n + ".weight"] = T("F32", 1 + r(HD if "q_norm" in n or "k_norm" in n else D))
    for k, v in G4_CLAMPS.items():
        w["vision_tower.encoder.layers." + k] = T("F32", np.array(v, np.float32))  # scalars, shape []
    return w


def g4_config():
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "text_config": {"model_type": "gemma4_text", "hidden_size": G4["PD"], "num_hidden_layers": 1},
            "vision_config": {"model_type": "gemma4_vision", "hidden_size": G4["D"], "intermediate_size": G4["F"],
                              "num_hidden_layers": G4["L"], "num_attention_heads": G4["H"],
                              "num_key_value_heads": G4["H"], "head_dim": G4["D"] // G4["H"],
                              "patch_size": G4["P"], "pooling_kernel_size": G4["POOL"],
                              "position_embedding_size": G4["ROWS"], "rms_norm_eps": 1e-6,
                              "hidden_activation": "gelu_pytorch_tanh", "use_clipped_linears": True,
                              "standardize": True}}


def g4_hf(w):
    t = {"model." + k: v for k, v in w.items()}
    t["model.language_model.embed_tokens.weight"] = T("BF16", np.ones((8, G4["PD"]), np.float32))
    return t


def g4_gguf(path, w):
    D, P = G4["D"], G4["P"]
    g = gguf.GGUFWriter(path, "clip")
    g.add_clip_has_vision_encoder(True)
    g.add_clip_vision_projector_type("gemma4v")
    g.add_vision_image_size(224)
    g.add_vision_patch_size(P)
    g.add_vision_embedding_length(D)
    g.add_vision_feed_forward_length(G4["F"])
    g.add_vision_block_count(G4["L"])
    g.add_vision_head_count(G4["H"])
    g.add_vision_attention_layernorm_eps(1e-6)
    g.add_vision_projection_dim(G4["PD"])
    g.add_vision_image_mean([0.0, 0.0, 0.0])
    g.add_vision_image_std([1.0, 1.0, 1.0])
    # the converter's permutation: [D, P*P*3] as (y, x, c) -> [D, 3, P, P]
    pe = w["vision_tower.patch_embedder.input_proj.weight"].f32().reshape(D, P, P, 3).transpose(0, 3, 1, 2)
    gguf_tensor(g, "v.patch_embd.weight", "F32", pe)
    gguf_tensor(g, "v.position_embd.weight", "F32", w["vision_tower.patch_embedder.position_embedding_table"].f32())
    for i in range(G4["L"]):
        b = f"vision_tower.encoder.layers.{i}."
        for hf, gg in G4_LIN.items():
            gguf_tensor(g, f"v.blk.{i}.{gg}.weight", "BF16", w[b + hf + ".linear.weight"].f32())
        for hf, gg in G4_NORM.items():
            gguf_tensor(g, f"v.blk.{i}.{gg}.weight", "F32", w[b + hf + ".weight"].f32())
    for k, v in G4_CLAMPS.items():
        i, rest = k.split(".", 1)
        lin, bound = rest.rsplit(".", 1)
        gguf_tensor(g, f"v.blk.{i}.{G4_LIN[lin]}.{bound}", "F32", np.array([v], np.float32))
    gguf_tensor(g, "v.std_bias", "F32", w["vision_tower.std_bias"].f32())
    gguf_tensor(g, "v.std_scale", "F32", w["vision_tower.std_scale"].f32())
    gguf_tensor(g, "mm.input_projection.weight", "BF16", w["embed_vision.embedding_projection.weight"].f32())
    finish(g)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2604)
    mean, std = [0.25, 0.5, 0.75], [0.5, 0.25, 1.0]

    vis, proj = g3_weights(rng, "BF16", "F16")
    pre = {"image_processor_type": "Gemma3ImageProcessor", "do_normalize": True, "image_mean": mean,
           "image_std": std, "image_seq_length": G3["TOK"]}
    write_folder(os.path.join(out, "g3"), g3_config(), g3_hf(vis, proj, "model."), pre)
    g3_gguf(os.path.join(out, "g3.gguf"), vis, proj, "BF16", mean, std)
    hf = g3_hf(vis, proj, "model.")
    del hf["model.vision_tower.vision_model.encoder.layers.1.mlp.fc2.bias"]
    write_folder(os.path.join(out, "bad_missing"), g3_config(), hf, pre)

    vis, proj = g3_weights(rng, "F32", "F32")
    write_folder(os.path.join(out, "g3_old"), g3_config(), g3_hf(vis, proj, ""), None, shards=2)
    g3_gguf(os.path.join(out, "g3_old.gguf"), vis, proj, "F32", [0.5] * 3, [0.5] * 3)

    vis, proj = g3_weights(rng, "F32", "F32", PD=640)
    hf = g3_hf(vis, proj, "model.")
    del hf["model.language_model.embed_tokens.weight"], hf["model.language_model.norm.weight"]
    write_folder(os.path.join(out, "g3_640"), g3_config(640), hf, None)

    w = g4_weights(rng)
    pre = {"image_processor_type": "Gemma4ImageProcessor", "do_normalize": False, "image_mean": [0.5] * 3,
           "image_std": [0.5] * 3}
    write_folder(os.path.join(out, "g4"), g4_config(), g4_hf(w), pre)
    g4_gguf(os.path.join(out, "g4.gguf"), w)
    hf = g4_hf(w)
    hf["model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.bias"] = T("F32", np.zeros(G4["D"], np.float32))
    write_folder(os.path.join(out, "bad_extra"), g4_config(), hf, pre)

    rng.uniform(-1, 1, (3, G3["IMG"], G3["IMG"])).astype(np.float32).tofile(os.path.join(out, "input_g3.f32"))
    rng.uniform(-1, 1, (3, 24, 48)).astype(np.float32).tofile(os.path.join(out, "input_g4.f32"))


if __name__ == "__main__":
    main()
