#!/usr/bin/env python3
"""How much does llama.cpp disagree with itself? Re-runs the default-model fixture's prompts and greedy paths
(teacher-forced: the same tokens are fed) under a second llama.cpp configuration (F32 KV cache, no flash
attention) and compares its top-10 with the fixture's (F16 KV cache, flash attention auto) at every position.
The result is the noise floor any engine's agreement with llama.cpp should be read against.

    python3 bench/llama-noise-floor.py [tests/data/llama/gemma3-270m-q4km.txt] [models/gemma-3-270m-q4_k_m.gguf]
"""
import sys
import numpy as np
from llama_cpp import Llama


def load(path):
    prompts, greedy, top = {}, {}, {}
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        if f[0] == "prompt":
            prompts[int(f[1])] = [int(x) for x in f[3:]]
        elif f[0] == "greedy":
            greedy[int(f[1])] = [int(x) for x in f[3:]]
        elif f[0] == "top":
            top[(int(f[1]), int(f[2]))] = ([int(x) for x in f[4::2]], [float(x) for x in f[5::2]])
    return prompts, greedy, top


def main():
    fx = sys.argv[1] if len(sys.argv) > 1 else "tests/data/llama/gemma3-270m-q4km.txt"
    model = sys.argv[2] if len(sys.argv) > 2 else "models/gemma-3-270m-q4_k_m.gguf"
    prompts, greedy, top = load(fx)
    m = Llama(model_path=model, n_ctx=4096, n_batch=512, logits_all=True, verbose=False, n_threads=2,
              type_k=0, type_v=0, flash_attn=False)
    n = agree = ov9 = 0
    margins_bad = []
    for i, ids in prompts.items():
        m.reset()
        m.eval(ids + greedy[i])
        for s in range(len(greedy[i]) + 1):
            lg = np.asarray(m.scores[len(ids) - 1 + s])
            mine = list(np.argsort(-lg)[:10])
            ref_ids, ref_lg = top[(i, s)]
            n += 1
            agree += mine[0] == ref_ids[0]
            ov9 += len(set(mine) & set(ref_ids)) >= 9
            if mine[0] != ref_ids[0]:
                margins_bad.append(ref_lg[0] - ref_lg[1])
    print(f"llama.cpp F32-KV vs llama.cpp default, teacher-forced over {n} positions of {len(prompts)} prompts:")
    print(f"  top-1 agreement {agree}/{n} ({100.0 * agree / n:.1f}%), top-10 overlap >= 9 at {ov9}/{n}")
    if margins_bad:
        print(f"  disagreements happen where the reference's top-1 leads its runner-up by at most "
              f"{max(margins_bad):.3f} logits (median {np.median(margins_bad):.3f})")


if __name__ == "__main__":
    main()
