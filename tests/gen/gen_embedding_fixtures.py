#!/usr/bin/env python3
"""Writes tiny synthetic EmbeddingGemma GGUFs (arch "gemma-embedding") with the `gguf` Python package and
records llama.cpp's pooled embeddings and per-token hidden states on them, for tests/test_embedding.c.

    python3 tests/gen/gen_embedding_fixtures.py tests/data/embedding

Files (Gemma 3 shapes: d=32, 6 layers, 4 heads / 2 kv heads, head_dim 8, ffn 64, vocab 300, sliding
window 8 -> a symmetric window of |i - j| <= 4 on sliding layers, layer 5 global; norms stored as 1+w):
    plain.gguf         no dense projections
    dense.gguf         dense_2 {32 -> 48} and dense_3 {48 -> 32} with their gemma-embedding.dense_* keys
    <name>.emb.txt     for each of the sequences below: `seq <n> <ids...>`, then `pooled <v0..v31>` (llama.cpp,
                       pooling_type 1 = MEAN, dense layers applied, no L2 norm), then for plain.gguf only
                       `tok <i> <v0..v31>` per token (pooling_type 0: the final-normed hidden states)
    dense_hf/          dense.gguf as a sentence-transformers folder (config.json, model.safetensors, modules.json,
                       1_Pooling, 2_Dense, 3_Dense, tokenizer.json): must give dense.gguf's vectors
    bad_dense_*.gguf   files our loader must refuse with a clear error (d=8, 1 layer)
    tiny_dense.gguf    a valid file of that size (the fuzz seed fuzz/corpus/fuzz_model_config/tiny_gemma_embedding.gguf)
Sequences: 20 tokens (past the window), 70 tokens (past a 64-position KV block of ours), 3 tokens.
llama.cpp runs with F32 K/V (type_k=type_v=0) and n_ubatch >= the length (non-causal attention needs it).
"""
import json
import os
import struct
import sys

import numpy as np
import gguf
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(__file__))
from gen_tiny_llama_fixtures import vocab  # noqa: E402  the same 300-token SPM vocabulary

D, L, H, HKV, HD, FF, V, W = 32, 6, 4, 2, 8, 64, 300, 8
DENSE = 48
LENGTHS = [20, 70, 3]


def write(path, rng, dense, D=D, L=L, bad=None):
    w = gguf.GGUFWriter(path, "gemma-embedding")
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
    w.add_rope_freq_base(1000000.0)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    if dense and bad != "nokeys":
        w.add_dense_features_dims("dense_2", D, DENSE)
        w.add_dense_features_dims("dense_3", DENSE, D + 1 if bad == "chain" else D)
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
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)

    def t(name, shape, std, mean=0.0):
        w.add_tensor(name, (mean + std * rng.standard_normal(shape)).astype(np.float32))

    t("token_embd.weight", (V, D), 1.0)
    t("output_norm.weight", (D,), 0.1, 1.0)
    if dense:
        t("dense_2.weight", (DENSE + (2 if bad == "shape" else 0), D), 0.15)  # numpy (out, in) = ggml {in, out}
        t("dense_3.weight", (D + (1 if bad == "chain" else 0), DENSE), 0.15)
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
        t(p + "post_attention_norm.weight", (D,), 0.1, 1.0)
        t(p + "post_ffw_norm.weight", (D,), 0.1, 1.0)
        t(p + "attn_q_norm.weight", (HD,), 0.1, 1.0)
        t(p + "attn_k_norm.weight", (HD,), 0.1, 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_safetensors(path, tensors):
    """A .safetensors file of F32 tensors (name -> numpy array), written by hand (the format is a JSON header)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_hf(gguf_path, out_dir):
    """The same model as a sentence-transformers folder (EmbeddingGemma's layout): config.json with
    use_bidirectional_attention, model.safetensors (HF names, norms stored as w = gguf - 1), modules.json,
    1_Pooling, 2_Dense and 3_Dense (linear.weight, torch [out, in]), a Unigram tokenizer.json of the vocabulary."""
    r = gguf.GGUFReader(gguf_path)
    t = {x.name: np.array(x.data, dtype=np.float32).reshape([int(d) for d in reversed(x.shape)]) for x in r.tensors}
    os.makedirs(out_dir, exist_ok=True)
    hf = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"] - 1}
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    for i in range(L):
        for g, h in names.items():
            a = t[f"blk.{i}.{g}.weight"]
            hf[f"model.layers.{i}.{h}.weight"] = a - 1 if g.endswith("norm") else a
    write_safetensors(os.path.join(out_dir, "model.safetensors"), hf)
    cfg = {"architectures": ["Gemma3TextModel"], "model_type": "gemma3_text", "hidden_size": D, "num_hidden_layers": L,
           "intermediate_size": FF, "num_attention_heads": H, "num_key_value_heads": HKV, "head_dim": HD,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
           "sliding_window": W, "query_pre_attn_scalar": HD, "use_bidirectional_attention": True, "vocab_size": V,
           "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    os.makedirs(os.path.join(out_dir, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out_dir, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": D, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                   "pooling_mode_max_tokens": False, "include_prompt": True}, f)
    for k in (2, 3):
        name = f"dense_{k}.weight"
        if name not in t:
            continue
        d = os.path.join(out_dir, f"{k}_Dense")
        os.makedirs(d, exist_ok=True)
        a = t[name]
        write_safetensors(os.path.join(d, "model.safetensors"), {"linear.weight": a})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"in_features": a.shape[1], "out_features": a.shape[0], "bias": False,
                       "activation_function": "torch.nn.modules.linear.Identity"}, f)
        mods.append({"idx": len(mods), "name": str(len(mods)), "path": f"{k}_Dense",
                     "type": "sentence_transformers.models.Dense"})
    mods.append({"idx": len(mods), "name": str(len(mods)), "path": "Normalize", "type": "sentence_transformers.models.Normalize"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out_dir, "modules.json"), "w") as f:
        json.dump(mods, f, indent=1)
    toks, scores, types = vocab()
    added = [{"id": i, "content": x, "special": True} for i, x in enumerate(toks) if types[i] in (2, 3)]
    tj = {"version": "1.0", "added_tokens": added, "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
          "pre_tokenizer": None, "model": {"type": "Unigram", "unk_id": 3, "byte_fallback": True,
                                           "vocab": [[x, sc] for x, sc in zip(toks, scores)]}}
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "add_bos_token": True, "add_eos_token": False,
                   "added_tokens_decoder": {str(a["id"]): {"content": a["content"], "special": True} for a in added}}, f)


def run(m, ids, pooled):
    """One sequence, all tokens outputs, in one ubatch; returns the pooled vector or the per-token rows."""
    m._ctx.kv_cache_clear()
    m._batch.reset()
    m._batch.add_sequence(ids, 0, True)
    m._ctx.decode(m._batch)
    if pooled:
        ptr = llama_cpp.llama_get_embeddings_seq(m._ctx.ctx, 0)
        return [float(ptr[j]) for j in range(D)]
    ptr = llama_cpp.llama_get_embeddings(m._ctx.ctx)
    return [[float(ptr[i * D + j]) for j in range(D)] for i in range(len(ids))]


def fmt(v):
    return " ".join(f"{x:.8g}" for x in v)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    # bad files (1 layer, d=8, so they stay small): dense tensors without their keys, a dense_2 tensor whose
    # shape is not what its keys say, a dense_3 that does not map back to the embedding length
    for bad in ["nokeys", "shape", "chain"]:
        write(os.path.join(out, f"bad_dense_{bad}.gguf"), np.random.default_rng(7), True, D=8, L=1, bad=bad)
    # the same size, valid: a seed for fuzz/fuzz_model_config (copied to fuzz/corpus/fuzz_model_config/)
    write(os.path.join(out, "tiny_dense.gguf"), np.random.default_rng(7), True, D=8, L=1)
    for k, name in enumerate(["plain", "dense"]):
        rng = np.random.default_rng(4321 + k)
        path = os.path.join(out, f"{name}.gguf")
        write(path, rng, name == "dense")
        seqs = [[2] + [int(x) for x in rng.integers(6, V, n - 1)] for n in LENGTHS]
        common = dict(model_path=path, embedding=True, n_ctx=128, n_batch=128, n_ubatch=128, verbose=False,
                      n_threads=1, type_k=0, type_v=0)
        mp = Llama(pooling_type=1, **common)
        mt = Llama(pooling_type=0, **common) if name == "plain" else None
        lines = [f"# llama.cpp embeddings for {name}.gguf (tests/gen/gen_embedding_fixtures.py)"]
        for ids in seqs:
            lines.append("seq %d %s" % (len(ids), " ".join(map(str, ids))))
            pooled = run(mp, ids, True)
            lines.append("pooled " + fmt(pooled))
            if mt is not None:
                rows = run(mt, ids, False)
                for i, r in enumerate(rows):
                    lines.append(f"tok {i} " + fmt(r))
                mean = np.mean(np.array(rows), axis=0)
                print(name, len(ids), "max |mean(tok) - pooled|", float(np.abs(mean - pooled).max()), file=sys.stderr)
            print(name, len(ids), "|pooled|", float(np.linalg.norm(pooled)), file=sys.stderr)
        with open(os.path.join(out, f"{name}.emb.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        if name == "dense":
            write_hf(path, os.path.join(out, "dense_hf"))


if __name__ == "__main__":
    main()
