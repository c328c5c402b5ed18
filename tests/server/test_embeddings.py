"""tests/server/test_embeddings.py — POST /v1/embeddings through the official openai client and raw HTTP.

Run: python test_embeddings.py GEMMA_BINARY SOURCE_DIR   (tests/cli_server_embed.sh does it under CTest)
The server runs the tiny synthetic EmbeddingGemma of tests/data/embedding (whose vectors are checked against
llama.cpp in tests/test_embedding.c); its answers are compared with `gemma embed --normalize` (the CLI: the
same library, another client), strings with their token ids, base64 with floats. A server over a text
generator (tests/data/tiny/gemma3.gguf) must refuse /v1/embeddings, the embedding server chat.
"""
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import openai

from srvtest import Server, run_tests

DIM = 32
TEXTS = ["the cat", "of and the", "a"]


def client(env):
    return openai.OpenAI(base_url=env["srv"].base + "/v1", api_key="none", max_retries=0, timeout=120)


def cli_vec(env, text):
    out = subprocess.run([env["bin"], "embed", "-m", env["model"], "--normalize", "-p", text], capture_output=True,
                         check=True, timeout=120).stdout.decode()
    return [float(x) for x in out.split()]


def cli_ids(env, text):
    out = subprocess.run([env["bin"], "tokenize", "-m", env["model"], text], capture_output=True, check=True,
                         timeout=120).stdout.decode()
    return [int(x) for x in out.split()]


def close(a, b, tol=1e-6):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol


def test_one_string_equals_cli(env):
    r = client(env).embeddings.create(model="m", input=TEXTS[0])
    assert r.object == "list" and len(r.data) == 1 and r.data[0].object == "embedding" and r.data[0].index == 0
    v = r.data[0].embedding
    assert len(v) == DIM
    assert abs(sum(x * x for x in v) - 1) < 1e-5, "vectors are unit length"
    assert close(v, cli_vec(env, TEXTS[0])), (v[:4], cli_vec(env, TEXTS[0])[:4])
    assert r.usage.prompt_tokens == len(cli_ids(env, TEXTS[0])) == r.usage.total_tokens
    assert r.model


def test_array_of_strings(env):
    r = client(env).embeddings.create(model="m", input=TEXTS)
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    for t, d in zip(TEXTS, r.data):
        assert close(d.embedding, cli_vec(env, t)), t
    assert r.usage.prompt_tokens == sum(len(cli_ids(env, t)) for t in TEXTS)


def test_token_ids_equal_text(env):
    c = client(env)
    ids = [cli_ids(env, t) for t in TEXTS]
    one = c.embeddings.create(model="m", input=ids[0])
    many = c.embeddings.create(model="m", input=ids)
    assert close(one.data[0].embedding, cli_vec(env, TEXTS[0]))
    for t, d in zip(TEXTS, many.data):
        assert close(d.embedding, cli_vec(env, t)), t
    assert many.usage.prompt_tokens == sum(map(len, ids))


def test_base64(env):
    s = env["srv"]
    st, f = s.post("/v1/embeddings", {"input": TEXTS[:2], "encoding_format": "float"})
    st2, b = s.post("/v1/embeddings", {"input": TEXTS[:2], "encoding_format": "base64"})
    assert st == 200 and st2 == 200, (st, st2, b)
    for x, y in zip(f["data"], b["data"]):
        raw = base64.b64decode(y["embedding"])
        assert len(raw) == 4 * DIM
        assert close(list(struct.unpack("<%df" % DIM, raw)), x["embedding"])
    # the openai client asks for base64 by default and decodes it itself
    r = client(env).embeddings.create(model="m", input=TEXTS[1])
    assert close(r.data[0].embedding, f["data"][1]["embedding"])


def test_dimensions(env):
    full = cli_vec(env, TEXTS[0])
    r = client(env).embeddings.create(model="m", input=TEXTS[0], dimensions=8)
    v = r.data[0].embedding
    n = sum(x * x for x in full[:8]) ** 0.5
    assert len(v) == 8 and close(v, [x / n for x in full[:8]], 1e-5), (v, full[:8])


def test_errors(env):
    c = client(env)
    for kw in [dict(input=""), dict(input=[]), dict(input=[""]), dict(input=[2, 300]), dict(input=[[2, 7], [-1]]),
               dict(input=[[]]), dict(input=TEXTS[0], dimensions=33), dict(input=TEXTS[0], dimensions=0),
               dict(input=[1.5])]:
        try:
            c.embeddings.create(model="m", **kw)
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.body["type"] == "invalid_request_error", e.body
            continue
        raise AssertionError("accepted: %r" % kw)
    try:
        c.embeddings.create(model="m", input="the cat " * 40)  # the server runs with -c 32
        raise AssertionError("an input past the context was accepted")
    except openai.BadRequestError as e:
        assert e.body["code"] == "context_length_exceeded", e.body
    s = env["srv"]
    for body in ['{"input": 5}', '{"input": "x", "encoding_format": "hex"}', "[1, 2]", "{", '{"inpt": "x"}',
                 '{"input": [["a"]]}', '{"input": {"a": 1}}']:
        st, data = s.post("/v1/embeddings", body)
        assert st == 400 and data["error"]["type"] == "invalid_request_error", (body, st, data)
    # an embedding model does not generate
    st, data = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert st == 400 and data["error"]["code"] == "model_not_supported", (st, data)
    st, data = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert st == 400, (st, data)
    # and it still serves afterwards
    assert close(c.embeddings.create(model="m", input=TEXTS[0]).data[0].embedding, cli_vec(env, TEXTS[0]))


def test_models_and_metrics(env):
    assert client(env).models.list().data[0].id == "plain.gguf"
    m = env["srv"].metrics()
    assert m.get('gemma_requests_total{endpoint="/v1/embeddings",status="200"}', 0) >= 5, m
    assert m.get('gemma_requests_total{endpoint="/v1/embeddings",status="400"}', 0) >= 10, m


def test_generator_refuses_embeddings(env):
    with Server(env["bin"], model=os.path.join(env["src"], "tests/data/tiny/gemma3.gguf"), ctx=128) as g:
        st, data = g.post("/v1/embeddings", {"input": "hi"})
        assert st == 400 and data["error"]["code"] == "model_not_supported", (st, data)


def test_long_request_yields(env):
    # a 2048-input request takes the embedder input by input: a small request sent meanwhile finishes
    # first, and when its client leaves the long one ends (499) instead of running to its end
    s = env["srv"]
    big = {"input": ["alpha bravo charl"] * 2048, "dimensions": 1}  # a small answer: its transfer takes no time
    done = []

    def long_request():
        st, _ = s.post("/v1/embeddings", big)
        done.append(("long", st))

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.3)  # parsed and tokenized: it is computing (~0.7 s in all)
    st, _ = s.post("/v1/embeddings", {"input": "hi"})
    done.append(("small", st))
    t.join(120)
    assert done == [("small", 200), ("long", 200)], done
    before = s.metrics().get('gemma_requests_total{endpoint="/v1/embeddings",status="499"}', 0)
    data = json.dumps(big).encode()
    c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    time.sleep(0.1)
    c.close()
    t0 = time.time()
    while s.metrics().get('gemma_requests_total{endpoint="/v1/embeddings",status="499"}', 0) == before:
        assert time.time() - t0 < 30, "the departed client's request was not ended"
        time.sleep(0.05)


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: test_embeddings.py GEMMA_BINARY SOURCE_DIR")
    binary, src = sys.argv[1], sys.argv[2]
    model = os.path.join(src, "tests/data/embedding/plain.gguf")
    env = {"bin": binary, "model": model, "src": src}
    with Server(binary, model=model, ctx=32) as srv:
        env["srv"] = srv
        rc = run_tests([test_one_string_equals_cli, test_array_of_strings, test_token_ids_equal_text, test_base64,
                        test_dimensions, test_errors, test_models_and_metrics, test_generator_refuses_embeddings,
                        test_long_request_yields], env)
        if rc:
            print("".join(srv.log[-30:]))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
