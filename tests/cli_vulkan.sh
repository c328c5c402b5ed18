#!/usr/bin/env bash
# tests/cli_vulkan.sh — the Vulkan backend from the command line, on whatever device is present (lavapipe in CI,
# with the validation layer: --gpu-validate): `inspect --devices`, `run` against the reference backend (the tiny
# F32 model: greedy tokens equal), `--backend auto` saying what it chose, errors, `perplexity` of the default model
# against the CPU backend's (KL, top-1, the perplexity ratio: --kl-divergence-base), `embed`, and `serve`.
# Skipped (77) without a Vulkan build or device unless GM_REQUIRE_VULKAN is set (CI sets it).
# usage: cli_vulkan.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"

# Under ASan+UBSan the backend's host code is exercised by test_vulkan (every op, the stream, the KV slabs); these
# runs would add minutes of lavapipe under the sanitizer to CI and no code of ours that test leaves out.
if [ -n "${GM_SANITIZER_BUILD:-}" ]; then echo "skipped in the sanitizer build (test_vulkan covers the code)"; exit 77; fi

if ! "$GEMMA" inspect --devices >"$TMP/devices" 2>"$TMP/err" || ! grep -q "usable *yes" "$TMP/devices"; then
  echo "no usable Vulkan device: $(cat "$TMP/err" "$TMP/devices" | head -c 300)"
  [ -n "${GM_REQUIRE_VULKAN:-}" ] && exit 1
  exit 77
fi
ok "inspect --devices: $(head -1 "$TMP/devices")"
"$GEMMA" inspect --devices --json | python3 -c 'import json,sys; d=json.load(sys.stdin)["devices"]; assert d and "name" in d[0]' \
  && ok "inspect --devices --json" || bad "inspect --devices --json"

# run: the tiny F32 model's greedy continuation equals the reference backend's
"$GEMMA" run -m "$TINY" -p "the cat" -n 12 --ignore-eos --backend reference >"$TMP/ref" 2>/dev/null
if "$GEMMA" run -m "$TINY" -p "the cat" -n 12 --ignore-eos --backend vulkan --gpu-validate >"$TMP/vk" 2>"$TMP/err"; then
  cmp -s "$TMP/ref" "$TMP/vk" && ok "run --backend vulkan == reference" || bad "run: vulkan '$(cat "$TMP/vk")' vs reference '$(cat "$TMP/ref")'"
  grep -q "backend vulkan: " "$TMP/err" && ok "run names the device" || bad "run does not name the device: $(cat "$TMP/err")"
  grep -q "vulkan validation" "$TMP/err" && bad "validation errors: $(grep -m3 'vulkan validation' "$TMP/err")"
else
  bad "run --backend vulkan: $(head -c 400 "$TMP/err")"
fi
# auto: a GPU when one can run the model, else the CPU; either way it says which
"$GEMMA" run -m "$TINY" -p "the" -n 2 --backend auto >/dev/null 2>"$TMP/err" && grep -q "backend " "$TMP/err" \
  && ok "auto chose: $(grep -m1 'backend ' "$TMP/err")" || bad "run --backend auto: $(head -c 300 "$TMP/err")"
if grep -q "type *cpu" "$TMP/devices" && ! grep -q "type *\(discrete\|integrated\|virtual\)" "$TMP/devices"; then
  grep -q "backend cpu" "$TMP/err" && ok "auto skips a CPU device" || bad "auto on a CPU device: $(cat "$TMP/err")"
fi
"$GEMMA" run -m "$TINY" -p "the" -n 2 --backend vulkan --device 40 >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "no device 40" "$TMP/err" && ok "--device 40: a clear error" || bad "--device 40: $(cat "$TMP/err")"
"$GEMMA" run -m "$TINY" -p "the" -n 2 --backend metal >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && ok "--backend metal refused" || bad "--backend metal: $(cat "$TMP/err")"

# perplexity of the default model: Vulkan against the reference backend (float64 sums: the independent check; 0.3%),
# and against the CPU backend, whose 8-bit activations put it ~0.005 nats of KL from both (docs/perplexity.md)
ppl_of() { grep -o "PPL = [0-9.]*" "$1" | tail -1 | cut -d' ' -f3; }
if [ -f "$SRC/models/gemma-3-270m-q4_k_m.gguf" ]; then
  M=$SRC/models/gemma-3-270m-q4_k_m.gguf
  head -c 2000 /usr/share/common-licenses/GPL-3 >"$TMP/text"
  "$GEMMA" perplexity -m "$M" -f "$TMP/text" -c 48 --chunks 1 --backend reference >"$TMP/ref" 2>&1 || bad "perplexity reference"
  "$GEMMA" perplexity -m "$M" -f "$TMP/text" -c 48 --chunks 1 --save-logits "$TMP/base" >"$TMP/cpu" 2>&1 || bad "perplexity cpu"
  if "$GEMMA" perplexity -m "$M" -f "$TMP/text" -c 48 --chunks 1 --backend vulkan --kl-divergence-base "$TMP/base" \
      >"$TMP/vkp" 2>&1; then
    r=$(ppl_of "$TMP/ref") c=$(ppl_of "$TMP/cpu") v=$(ppl_of "$TMP/vkp")
    kl=$(grep -o "KL divergence vs base: mean [0-9.]*" "$TMP/vkp" | awk '{print $NF}')
    top=$(grep -o "top token agreement: [0-9.]*" "$TMP/vkp" | awk '{print $NF}')
    echo "  default model, 24 scored positions: PPL reference $r, vulkan $v, cpu $c; vulkan vs cpu KL $kl, top-1 $top%"
    python3 -c "import sys; r,v=float('$r'),float('$v'); sys.exit(0 if abs(v/r-1) <= 0.003 else 1)" \
      && ok "perplexity: vulkan within 0.3% of the reference" || bad "perplexity: vulkan $v vs reference $r"
    python3 -c "import sys; sys.exit(0 if float('$kl') <= 0.02 and float('$top') >= 85 else 1)" \
      && ok "vulkan vs cpu: KL $kl <= 0.02, top-1 $top% >= 85%" || bad "vulkan vs cpu: KL $kl, top-1 $top%"
  else
    bad "perplexity --backend vulkan: $(tail -3 "$TMP/vkp")"
  fi
fi

# embed: EmbeddingGemma's bidirectional path, against the CPU's vector
E=$SRC/tests/data/embedding/dense.gguf
"$GEMMA" embed -m "$E" -p "the cat sat" --json >"$TMP/ecpu" 2>/dev/null
if "$GEMMA" embed -m "$E" -p "the cat sat" --json --backend vulkan >"$TMP/evk" 2>"$TMP/err"; then
  python3 - "$TMP/ecpu" "$TMP/evk" <<'PY' && ok "embed --backend vulkan: cosine to the cpu vector > 1 - 1e-6" || bad "embed: vectors differ"
import json, math, sys
def vec(p):
    d = json.load(open(p))
    d = d.get("data", d.get("embeddings", d)) if isinstance(d, dict) else d
    while isinstance(d, list) and d and not isinstance(d[0], (int, float)):
        d = d[0]["embedding"] if isinstance(d[0], dict) else d[0]
    return d
a, b = vec(sys.argv[1]), vec(sys.argv[2])
dot = sum(x * y for x, y in zip(a, b)); na = math.sqrt(sum(x * x for x in a)); nb = math.sqrt(sum(y * y for y in b))
print("  cosine %.9f over %d dims" % (dot / (na * nb), len(a)))
sys.exit(0 if len(a) == len(b) and dot / (na * nb) > 1 - 1e-6 else 1)
PY
else
  bad "embed --backend vulkan: $(head -c 300 "$TMP/err")"
fi

# serve: a chat completion and a stream through the Vulkan backend
"$GEMMA" serve -m "$TINY" -c 128 --port 0 --backend vulkan --gpu-validate >"$TMP/srv.out" 2>"$TMP/srv.err" &
pid=$!
port=""
for _ in $(seq 1 120); do
  port=$(grep -o "port [0-9]* answers" "$TMP/srv.err" | head -1 | cut -d' ' -f2)
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.5
done
if [ -n "$port" ]; then
  body='{"messages":[{"role":"user","content":"the cat"}],"max_tokens":6,"temperature":0}'
  r=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
  echo "$r" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["choices"][0]["message"]["content"] is not None and d["usage"]["completion_tokens"] > 0' \
    && ok "serve --backend vulkan: chat completion" || bad "serve: $r"
  s=$(curl -sN "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
      -d '{"messages":[{"role":"user","content":"the cat"}],"max_tokens":6,"temperature":0,"stream":true}')
  echo "$s" | grep -q "data: \[DONE\]" && ok "serve --backend vulkan: stream" || bad "serve stream: $(echo "$s" | head -c 300)"
  grep -q "backend vulkan: " "$TMP/srv.err" && ok "serve names the device" || bad "serve does not name the device"
else
  bad "serve --backend vulkan did not start: $(head -c 400 "$TMP/srv.err")"
fi
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
grep -q "vulkan validation" "$TMP/srv.err" && bad "serve: validation errors: $(grep -m3 'vulkan validation' "$TMP/srv.err")"
exit $fail
