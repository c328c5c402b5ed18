#!/usr/bin/env python3
"""Records llama.cpp's results on the default model as a committed fixture for tests/test_real_model.c.

Reference: llama-cpp-python (llama.cpp CPU backend), same GGUF. Run once per model/llama.cpp change:
    python3 tests/gen/gen_llama_logits.py models/gemma-3-270m-q4_k_m.gguf tests/data/llama/gemma3-270m-q4km.txt

Output format (plain text, one record per line, easy to parse in C):
    # comments
    model <file name>
    prompt <index> <n_ids> <id> <id> ...            the prompt's token ids (BOS included)
    top <index> <step> <k> <id> <logit> ...          top-k (k=10) of the logits at the position
                                                     step 0 = after the prompt, step s = after s generated tokens
    greedy <index> <n> <id> ...                      the 32-token greedy (argmax) continuation, EOS not special
"""
import sys, os
import numpy as np
from llama_cpp import Llama
import llama_cpp

TOPK = 10
NGEN = 32

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Water boils at a temperature of",
    "The three primary colors are",
    "Translate to French: 'Good morning, how are you?'\nFrench:",
    "1, 2, 3, 4, 5, 6,",
    "The quick brown fox",
    "In mathematics, a prime number is",
    "<start_of_turn>user\nWhat is the largest planet in our solar system?<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nWrite a haiku about autumn leaves.<end_of_turn>\n<start_of_turn>model\n",
    "The recipe calls for two cups of flour, one egg, and",
    "SELECT name, age FROM users WHERE",
    "東京は日本の首都であり、",
    "La tour Eiffel se trouve à",
    "Photosynthesis is the process by which plants",
    "   Leading spaces and\ttabs\n\nand blank lines:",
    "My favourite emoji are 😀🎉 and",
    "The year 1969 is remembered because",
    "Q: What is 12 times 12?\nA:",
]


def long_prompt():
    text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
    return text[:8000]


def main():
    model_path, out_path = sys.argv[1], sys.argv[2]
    # --f32-kv: F32 KV cache and no flash attention (llama.cpp's most precise CPU configuration);
    # default: llama.cpp's defaults (F16 KV cache, flash attention "auto").
    extra = dict(type_k=0, type_v=0, flash_attn=False) if "--f32-kv" in sys.argv[3:] else {}
    prompts = PROMPTS + [long_prompt()]
    m = Llama(model_path=model_path, n_ctx=4096, n_batch=512, logits_all=True, verbose=False,
              n_threads=2, seed=0, **extra)
    lines = [
        "# llama.cpp reference results, written by tests/gen/gen_llama_logits.py",
        f"# llama-cpp-python {llama_cpp.__version__}; system: {llama_cpp.llama_cpp.llama_print_system_info().decode().strip()}",
        f"# llama.cpp settings: {extra or 'defaults (F16 KV cache, flash attention auto)'}",
        f"model {os.path.basename(model_path)}",
    ]
    for pi, p in enumerate(prompts):
        ids = m.tokenize(p.encode("utf-8"), add_bos=True, special=True)
        m.reset()
        m.eval(ids)
        lines.append(f"prompt {pi} {len(ids)} " + " ".join(map(str, ids)))
        gen = []
        for step in range(NGEN + 1):
            logits = np.array(m.scores[m.n_tokens - 1], dtype=np.float32)
            top = np.argsort(-logits, kind="stable")[:TOPK]
            lines.append(f"top {pi} {step} {TOPK} " + " ".join(f"{int(t)} {logits[t]:.6f}" for t in top))
            if step == NGEN:
                break
            nxt = int(top[0])
            gen.append(nxt)
            m.eval([nxt])
        lines.append(f"greedy {pi} {len(gen)} " + " ".join(map(str, gen)))
        print(f"prompt {pi}: {len(ids)} tokens -> {m.detokenize(gen)[:60]!r}", file=sys.stderr)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
