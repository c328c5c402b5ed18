#!/usr/bin/env python3
"""A logits base file (docs/perplexity.md) from the exact float64 reference forward pass
(tests/gen/gen_exact_ref.py: weights dequantized by the `gguf` package, no activation quantization), so
`gemma perplexity --kl-divergence-base` measures how far an engine is from the exact math of the model file.
Tokenization is taken from a llama.cpp base file of the same text and chunking (bench/llama-kl-base.py).

    python3 bench/exact-kl-base.py -m models/gemma-3-270m-q4_k_m.gguf --tokens-from /tmp/llama-gpl3.gmlg \
        -o /tmp/exact-gpl3.gmlg [-k 64]
"""
import argparse, math, os, struct, sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gen"))
from gen_exact_ref import load_reference  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", required=True)
    ap.add_argument("--tokens-from", required=True)
    ap.add_argument("-o", required=True)
    ap.add_argument("-k", type=int, default=64)
    a = ap.parse_args()
    with open(a.tokens_from, "rb") as f:
        assert f.read(4) == b"GMLG"
        ver, n_vocab, _k, ctx, n_chunks, n_pos, n_tok = struct.unpack("<IIIIIII", f.read(28))
        toks = np.frombuffer(f.read(4 * n_tok), np.int32)
    forward = load_reference(a.m)
    first = ctx // 2
    out = open(a.o, "wb")
    out.write(b"GMLG" + struct.pack("<IIIIIII", 1, n_vocab, a.k, ctx, n_chunks, n_pos, n_tok))
    out.write(toks.astype(np.int32).tobytes())
    nll = 0.0
    for ci in range(n_chunks):
        chunk = [int(t) for t in toks[ci * ctx:(ci + 1) * ctx]]
        chunk[0] = 2
        lg = forward(chunk, all_positions=True)
        for j in range(first, ctx - 1):
            l = lg[j]
            mx = l.max()
            logp = l - (mx + math.log(np.exp(l - mx).sum()))
            t = chunk[j + 1]
            top = np.argpartition(-logp, a.k)[:a.k]
            top = top[np.argsort(-logp[top], kind="stable")]
            out.write(struct.pack("<if", t, logp[t]))
            out.write(top.astype(np.int32).tobytes())
            out.write(logp[top].astype(np.float32).tobytes())
            nll -= logp[t]
        n = (ci + 1) * (ctx - 1 - first)
        print(f"[{ci + 1}/{n_chunks}] exact ppl {math.exp(nll / n):.4f}", file=sys.stderr)
    out.close()


if __name__ == "__main__":
    main()
