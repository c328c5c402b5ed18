#!/usr/bin/env python3
"""Writes a logits base file from llama.cpp (llama-cpp-python, logits_all) for `gemma perplexity
--kl-divergence-base FILE`, so gemma.c is compared with llama.cpp position by position.

    python3 bench/llama-kl-base.py -m models/gemma-3-270m-q4_k_m.gguf -f /usr/share/common-licenses/GPL-3 \
        -c 512 -o /tmp/llama-gpl3.gmlg [--chunks N] [-k 64] [-t 2]

Chunking is llama-perplexity's: the text is tokenized once (BOS first), cut into chunks of c tokens, each
chunk's first token replaced by BOS, and the positions c/2 .. c-2 of each chunk are scored (the logits at
position j predict token j+1). The file format (little-endian) is described in docs/perplexity.md.
"""
import argparse, struct, sys, math, time
import numpy as np
from llama_cpp import Llama


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", required=True)
    ap.add_argument("-f", required=True)
    ap.add_argument("-c", type=int, default=512)
    ap.add_argument("-k", type=int, default=64)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=0)
    ap.add_argument("-o", help="write a base file")
    ap.add_argument("--kl-against", help="instead: compare llama.cpp with this base file, as gemma perplexity does")
    ap.add_argument("--f32-kv", action="store_true", help="F32 KV cache, no flash attention")
    a = ap.parse_args()
    if not a.o and not a.kl_against:
        sys.exit("give -o FILE or --kl-against FILE")
    text = open(a.f, "rb").read()
    extra = dict(type_k=0, type_v=0, flash_attn=False) if a.f32_kv else {}
    m = Llama(model_path=a.m, n_ctx=a.c, n_batch=a.c, logits_all=True, verbose=False, n_threads=a.t, **extra)
    toks = m.tokenize(text, add_bos=True, special=False)
    n_chunks = len(toks) // a.c
    if a.chunks > 0:
        n_chunks = min(n_chunks, a.chunks)
    if n_chunks == 0:
        sys.exit(f"text has {len(toks)} tokens, fewer than one chunk of {a.c}")
    first = a.c // 2
    n_pos = n_chunks * (a.c - 1 - first)
    n_vocab = m.n_vocab()
    out = base = None
    if a.o:
        out = open(a.o, "wb")
        out.write(b"GMLG" + struct.pack("<IIIIIII", 1, n_vocab, a.k, a.c, n_chunks, n_pos, len(toks)))
        out.write(np.asarray(toks, dtype=np.int32).tobytes())
    else:
        base = open(a.kl_against, "rb")
        assert base.read(4) == b"GMLG"
        _v, bv, bk, bc, _bn, _bp, bt = struct.unpack("<IIIIIII", base.read(28))
        btoks = np.frombuffer(base.read(4 * bt), np.int32)
        if bv != n_vocab or bc != a.c or list(btoks) != list(toks):
            sys.exit("the base file's vocabulary, context or tokenization differs")
        kls, agree, base_nll = [], 0, 0.0
    nll, nll2, t0 = 0.0, 0.0, time.time()
    for ci in range(n_chunks):
        chunk = list(toks[ci * a.c:(ci + 1) * a.c])
        chunk[0] = m.token_bos()
        m.reset()
        m.eval(chunk)
        for j in range(first, a.c - 1):
            logits = np.asarray(m.scores[j], dtype=np.float64)
            mx = logits.max()
            lse = mx + math.log(np.exp(logits - mx).sum())
            logp = logits - lse
            target = chunk[j + 1]
            top = np.argpartition(-logp, a.k)[:a.k]
            top = top[np.argsort(-logp[top], kind="stable")]
            if out:
                out.write(struct.pack("<if", target, logp[target]))
                out.write(top.astype(np.int32).tobytes())
                out.write(logp[top].astype(np.float32).tobytes())
            else:
                bt_, blt = struct.unpack("<if", base.read(8))
                bids = np.frombuffer(base.read(4 * bk), np.int32)
                blp = np.frombuffer(base.read(4 * bk), np.float32).astype(np.float64)
                pb = np.exp(blp)
                kl = float((pb * (blp - logp[bids])).sum())
                rb, rq = max(1 - pb.sum(), 0.0), max(1 - np.exp(logp[bids]).sum(), 1e-30)
                if rb > 0:
                    kl += rb * (math.log(rb) - math.log(rq))
                kls.append(kl)
                agree += int(np.argmax(logp)) == int(bids[0])
                base_nll -= blt
            nll -= logp[target]
            nll2 += logp[target] ** 2
        n = (ci + 1) * (a.c - 1 - first)
        print(f"[{ci + 1}/{n_chunks}] ppl {math.exp(nll / n):.4f}", file=sys.stderr)
    if out:
        out.close()
    else:
        kls = np.array(kls)
        ours = math.exp(nll / len(kls)); bp = math.exp(base_nll / len(kls))
        print(f"llama.cpp vs {a.kl_against}: KL mean {kls.mean():.6f} p99 {np.percentile(kls, 99):.6f}, "
              f"top-1 agreement {100.0 * agree / len(kls):.2f}%, ppl {ours:.4f} vs {bp:.4f} (ratio {ours / bp:.5f})")
    n = n_pos
    mean = nll / n
    var = nll2 / n - mean * mean
    ppl = math.exp(mean)
    err = ppl * math.sqrt(max(var, 0) / max(n - 1, 1))
    print(f"llama.cpp: {n_chunks} chunks of {a.c}, {n} positions, ppl {ppl:.4f} +/- {err:.4f}, "
          f"{n_chunks * a.c / (time.time() - t0):.1f} tok/s -> {a.o}")


if __name__ == "__main__":
    main()
