"""tests/server/test_soak.py — 8 streams for a while (GM_SOAK_SECONDS, default 120): no error, every stream
well formed, and the server's anonymous RSS (heap + KV; the model is a file mapping) flat once warm (the KV budget is small, so the prefix cache fills and
evicts during the run).

Run: python test_soak.py GEMMA_BINARY MODEL
"""
import json
import os
import random
import threading
import time

from srvtest import Server, binary_and_model, run_tests, sse_events

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def test_soak(env):
    s = env["srv"]
    seconds = float(os.environ.get("GM_SOAK_SECONDS", "120"))
    stop_at = time.time() + seconds
    errors, done = [], [0] * 8
    rss = []

    def client(k):
        rng = random.Random(k)
        while time.time() < stop_at:
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 120)))
            chat = rng.random() < 0.5
            body = {"max_tokens": rng.randint(8, 48), "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 1 << 30),
                    "stream": True, "stream_options": {"include_usage": True}}
            if chat:
                body["messages"] = [{"role": "user", "content": words}]
            else:
                body["prompt"] = words
            try:
                st, _, raw = s.request("POST", "/v1/chat/completions" if chat else "/v1/completions", body)
                ev = sse_events(raw)
                if st != 200 or ev[-1] != "[DONE]" or any("error" in json.loads(e) for e in ev[:-1]):
                    errors.append((st, raw[-300:]))
                done[k] += 1
            except Exception as e:  # noqa: BLE001 - collected and reported below
                errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    # warm: the KV budget is full (from then on the prefix cache evicts); RSS is measured from there
    warm_at = None
    while any(t.is_alive() for t in threads):
        m = s.metrics()
        if warm_at is None and 0 < 0.9 * m["gemma_kv_bytes_budget"] <= m["gemma_kv_bytes_used"]:
            warm_at = time.time() - (stop_at - seconds)
        if warm_at is not None and time.time() >= stop_at - seconds / 2:
            # the second half: the allocator's arenas and the glibc mmap threshold have settled
            rss.append(s.rss_kib())
            if len(rss) % 10 == 1:
                print("  t=%3.0fs RSS %.1f MiB, KV %.1f MiB, %d evictions, %d preemptions" % (
                    time.time() - (stop_at - seconds), rss[-1] / 1024, m["gemma_kv_bytes_used"] / 2**20,
                    m["gemma_kv_evictions_total"], m["gemma_preemptions_total"]), flush=True)
        time.sleep(1)
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert sum(done) >= (8 if os.environ.get("GM_SANITIZER_BUILD") else 16), done
    m = s.metrics()
    assert m["gemma_sequences_active"] == 0
    if os.environ.get("GM_SANITIZER_BUILD"):
        print("  sanitizer build: RSS not judged (the sanitizer's quarantine holds freed memory)")
        return
    assert warm_at is not None and warm_at < 0.6 * seconds, "the KV budget did not fill early enough (%s)" % warm_at
    first, last = rss[0], max(rss[-5:])
    print("  %d requests in %.0f s; anonymous RSS %.1f MiB at half time, %.1f MiB at the end; %d evictions" %
          (sum(done), seconds, first / 1024, last / 1024, m["gemma_kv_evictions_total"]))
    assert last <= first * 1.05 + 4 * 1024, "RSS grew from %d to %d KiB" % (first, last)


def main():
    binary, model = binary_and_model()
    with Server(binary, "--kv-mem", "96", "--quiet", model=model, parallel=8, ctx=1024) as srv:
        return run_tests([test_soak], {"bin": binary, "model": model, "srv": srv})


if __name__ == "__main__":
    raise SystemExit(main())
