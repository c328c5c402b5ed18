#!/usr/bin/env python3
"""llama.cpp's per-position log-probabilities of the long fixture prompt (prompt 20 of
tests/data/llama/gemma3-270m-q4km.txt: the first 8000 characters of the GPL-3, 1737 tokens) under the
default model, for tests/test_real_model.c (perplexity parity).

    python3 tests/gen/gen_llama_logprobs.py models/gemma-3-270m-q4_k_m.gguf \
        tests/data/llama/gemma3-270m-q4km.txt tests/data/llama/gemma3-270m-q4km.logprobs.txt

Output: `ids <n> <id>...` then `logprobs <n-1> <lp>...` with lp[i] = log p(id[i+1] | id[0..i]),
llama-cpp-python defaults (f16 KV cache), n_batch 512.
"""
import sys
import numpy as np
from llama_cpp import Llama

model, fixture, out = sys.argv[1:4]
ids = None
for line in open(fixture):
    f = line.split()
    if f[:2] == ["prompt", "20"]:
        ids = [int(x) for x in f[3:]]
assert ids and len(ids) > 1000
m = Llama(model_path=model, n_ctx=2048, n_batch=512, logits_all=True, verbose=False, n_threads=2, seed=0)
m.reset()
m.eval(ids)
L = np.array(m.scores[:len(ids)], dtype=np.float64)
mx = L.max(axis=1, keepdims=True)
lse = mx[:, 0] + np.log(np.exp(L - mx).sum(axis=1))
lp = L[np.arange(len(ids) - 1), ids[1:]] - lse[:-1]
with open(out, "w") as f:
    f.write("# llama.cpp log p(id[i+1] | id[0..i]) for prompt 20 (tests/gen/gen_llama_logprobs.py)\n")
    f.write("ids %d %s\n" % (len(ids), " ".join(map(str, ids))))
    f.write("logprobs %d %s\n" % (len(lp), " ".join("%.5f" % x for x in lp)))
print(len(ids), "tokens, perplexity %.4f" % np.exp(-lp.mean()))
