#!/usr/bin/env python3
"""Writes a tiny random Gemma 3 mmproj whose projection fits the default model (Gemma 3 270M, width 640), for
the CLI and server tests of images (tests/cli_vision.sh, tests/server/test_vision.py). The weights are noise:
the tests check the plumbing (an image becomes 4 rows between its markers, the cache, the errors), not what a
real encoder would say. llama.cpp's gguf-py:

    PYTHONPATH=<llama.cpp>/gguf-py python3 tests/gen/gen_vision_cli_mmproj.py tests/data/vision/mmproj-640.gguf

Shapes: image 32, patch 8 (4 x 4 patches), width 32, ffn 48, 1 block, 4 heads, pooling 2 (2 x 2 = 4 tokens),
projection 640 (F16), mean / std 0.5.
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

S, P, D, FF, H, SF, PD = 32, 8, 32, 48, 4, 2, 640
G = S // P


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/vision/mmproj-640.gguf"
    rng = np.random.default_rng(640)
    r = lambda *shape, s=0.2: (rng.standard_normal(shape) * s).astype(np.float32)
    w = {"v.patch_embd.weight": r(D, 3, P, P, s=0.1), "v.patch_embd.bias": r(D, s=0.1),
         "v.position_embd.weight": r(G * G, D, s=0.3)}
    b = "v.blk.0."
    for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
        w[b + n + ".weight"] = r(D, D, s=0.25)
        w[b + n + ".bias"] = r(D, s=0.1)
    for n in ("ln1", "ln2"):
        w[b + n + ".weight"] = 1 + r(D, s=0.2)
        w[b + n + ".bias"] = r(D, s=0.1)
    w[b + "ffn_up.weight"], w[b + "ffn_up.bias"] = r(FF, D, s=0.25), r(FF, s=0.1)
    w[b + "ffn_down.weight"], w[b + "ffn_down.bias"] = r(D, FF, s=0.2), r(D, s=0.1)
    w["v.post_ln.weight"], w["v.post_ln.bias"] = 1 + r(D, s=0.2), r(D, s=0.1)
    w["mm.soft_emb_norm.weight"] = 1 + r(D, s=0.2)
    w["mm.input_projection.weight"] = r(D, PD, s=0.05)
    g = gguf.GGUFWriter(out, "clip")
    g.add_clip_has_vision_encoder(True)
    g.add_clip_projector_type("gemma3")
    g.add_vision_image_size(S)
    g.add_vision_patch_size(P)
    g.add_vision_embedding_length(D)
    g.add_vision_feed_forward_length(FF)
    g.add_vision_block_count(1)
    g.add_vision_head_count(H)
    g.add_vision_attention_layernorm_eps(1e-6)
    g.add_vision_projection_dim(PD)
    g.add_vision_image_mean([0.5, 0.5, 0.5])
    g.add_vision_image_std([0.5, 0.5, 0.5])
    g.add_vision_projector_scale_factor(SF)
    g.add_vision_use_gelu(True)
    for name, arr in w.items():
        g.add_tensor(name, arr.astype(np.float16) if name == "mm.input_projection.weight" else arr)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


if __name__ == "__main__":
    main()
