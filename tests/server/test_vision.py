"""Images through `gemma serve --mmproj` (OpenAI image_url parts): the official openai client sends a PNG as a
data URI and gets a reply whose usage counts the image's rows; the same pixels sent again (or as another
format) come from the prefix cache and the encoder cache; a conversation resending its image reuses it;
streaming works; file:// reads only under --media-path; every kind of bad image or misuse is a 400 that says
why; --mmproj adds no thread pool (the encoder shares the engine's). The encoder is a tiny random one for the
default model (tests/data/vision/mmproj-640.gguf): plumbing, not quality.

usage: test_vision.py GEMMA MODEL MMPROJ IMAGES_DIR"""
import base64
import os
import struct
import sys
import tempfile
import zlib

import openai

from srvtest import Server, run_tests, sse_events

ROWS = 4  # the tiny encoder's rows per image


def png(w, h, rgb):
    """A PNG of raw RGB bytes (zlib from the standard library: no imaging package needed)."""
    raw = b"".join(b"\0" + rgb[y * w * 3:(y + 1) * w * 3] for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def data_uri(data, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def gradient(w=24, h=16, k=1):
    return png(w, h, bytes(((x * 10 * k + y * 3) % 256) for y in range(h) for x in range(w) for _ in range(3)))


def ask(url, text="What is in this image?"):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


def chat(srv, messages, **kw):
    body = {"messages": messages, "temperature": 0, "max_tokens": 8}
    body.update(kw)
    return srv.post("/v1/chat/completions", body)


def test_openai_client(env):
    srv = env["srv"]
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="none")
    uri = data_uri(gradient())
    r = client.chat.completions.create(model="gemma", messages=ask(uri), temperature=0, max_tokens=8)
    assert r.choices[0].message.content is not None
    text_only = client.chat.completions.create(model="gemma", messages=[{"role": "user", "content": "What is in this image?"}],
                                               temperature=0, max_tokens=8)
    # the image adds its rows and the markers around them (Gemma 3: "\n\n<start_of_image>" ... "<end_of_image>\n\n")
    assert r.usage.prompt_tokens >= text_only.usage.prompt_tokens + ROWS + 2, (r.usage, text_only.usage)
    again = client.chat.completions.create(model="gemma", messages=ask(uri), temperature=0, max_tokens=8)
    assert again.choices[0].message.content == r.choices[0].message.content
    other = client.chat.completions.create(model="gemma", messages=ask(data_uri(gradient(k=7))), temperature=0,
                                           max_tokens=8)
    assert other.usage.prompt_tokens == r.usage.prompt_tokens
    # streamed: the same text
    parts = client.chat.completions.create(model="gemma", messages=ask(uri), temperature=0, max_tokens=8, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in parts if c.choices) == r.choices[0].message.content


def test_cache(env):
    srv = env["srv"]
    img = gradient(w=40, h=30, k=3)
    long_text = "Please look at the picture carefully and describe every detail you can see. " * 12
    st, a = chat(srv, ask(data_uri(img), long_text))
    assert st == 200, a
    m0 = srv.metrics()
    st, b = chat(srv, ask(data_uri(img), long_text))
    assert st == 200, b
    m1 = srv.metrics()
    # the whole prompt but its last partial block is adopted, image included
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] >= b["usage"]["prompt_tokens"] - 64, b["usage"]
    assert b["choices"][0]["message"]["content"] == a["choices"][0]["message"]["content"]
    assert m1["gemma_image_cache_hits_total"] == m0["gemma_image_cache_hits_total"] + 1
    assert m1["gemma_images_encoded_total"] == m0["gemma_images_encoded_total"]
    # another image behind the same text: not served from the image's blocks
    st, c = chat(srv, ask(data_uri(gradient(w=40, h=30, k=5)), long_text))
    assert st == 200 and c["usage"]["prompt_tokens_details"]["cached_tokens"] < 64, c["usage"]
    # a second turn resends the image: the first turn's positions are reused
    turn2 = ask(data_uri(img), long_text) + [{"role": "assistant", "content": a["choices"][0]["message"]["content"]},
                                             {"role": "user", "content": "And the colours?"}]
    st, d = chat(srv, turn2)
    assert st == 200 and d["usage"]["prompt_tokens_details"]["cached_tokens"] >= a["usage"]["prompt_tokens"] - 64, d["usage"]


def test_lossless_formats_same_image(env):
    """The image is named by its pixels: the same pixels as WebP (lossless) and as PNG share the cache."""
    srv, d = env["srv"], env["images"]
    with open(os.path.join(d, "lossless.webp"), "rb") as f:
        webp = f.read()
    with open(os.path.join(d, "lossless.rgb"), "rb") as f:
        raw = f.read()
    st, a = chat(srv, ask(data_uri(webp, "image/webp")))
    assert st == 200, a
    m0 = srv.metrics()
    # the size from the WebP header (VP8L: 14-bit sizes)
    i = webp.find(b"VP8L")
    b0, b1, b2, b3 = webp[i + 9:i + 13]
    w = 1 + (b0 | (b1 & 0x3F) << 8)
    h = 1 + ((b1 >> 6) | b2 << 2 | (b3 & 0x0F) << 10)
    assert len(raw) == w * h * 3, (w, h, len(raw))
    st, b = chat(srv, ask(data_uri(png(w, h, raw))))
    assert st == 200, b
    assert srv.metrics()["gemma_image_cache_hits_total"] == m0["gemma_image_cache_hits_total"] + 1
    assert b["choices"][0]["message"]["content"] == a["choices"][0]["message"]["content"]


def test_errors(env):
    srv = env["srv"]
    uri = data_uri(gradient())

    def bad(messages, want, **kw):
        st, r = chat(srv, messages, **kw)
        assert st == 400, (st, r)
        assert want in r["error"]["message"], (want, r)

    bad(ask("https://example.com/cat.png"), "does not fetch remote images")
    bad(ask("http://127.0.0.1/cat.png"), "does not fetch remote images")
    bad(ask("file:///etc/passwd"), "without --media-path")
    bad(ask("ftp://x/y.png"), "must be a data:image")
    bad(ask("data:text/plain;base64,aGVsbG8="), "data:image/<type>;base64")
    bad(ask("data:image/png,rawbytes"), "data:image/<type>;base64")
    bad(ask("data:image/png;base64,@@@@"), "not valid base64")
    bad(ask(data_uri(b"GIF89a\x01\x00\x01\x00\x00\x00\x00")), "GIF")
    bad(ask(data_uri(gradient()[:60])), "image:")
    huge = png(1, 1, b"\0\0\0").replace(struct.pack(">II", 1, 1), struct.pack(">II", 100000, 100000), 1)
    bad(ask(data_uri(huge)), "over the limit")
    bad([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}}] * 9}], "more than 8 images")
    bad([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri, "zoom": 2}}]}], "zoom")
    bad([{"role": "user", "content": [{"type": "image_url"}]}], "image_url.url")
    bad([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}],
        "only parts of type")
    bad([{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": uri}}]}],
        "only user messages")
    # the detail field is accepted (and ignored, as llama-server does); a bare string image_url too
    st, r = chat(srv, [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri, "detail": "low"}}]}])
    assert st == 200, r
    st, r = chat(srv, [{"role": "user", "content": [{"type": "image_url", "image_url": uri}]}])
    assert st == 200, r
    # the server still answers
    st, r = chat(srv, [{"role": "user", "content": "hello"}])
    assert st == 200, r


def test_media_path(env):
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as outside:
        inside = os.path.join(root, "cat.png")
        with open(inside, "wb") as f:
            f.write(gradient())
        with open(os.path.join(outside, "secret.png"), "wb") as f:
            f.write(gradient(k=9))
        os.symlink(os.path.join(outside, "secret.png"), os.path.join(root, "link.png"))
        with Server(env["bin"], "--mmproj", env["mmproj"], "--media-path", root, model=env["model"], parallel=2) as srv:
            st, r = chat(srv, ask("file://cat.png"))
            assert st == 200, r
            st, r = chat(srv, ask("file://" + inside))
            assert st == 200, r
            for url in ("file://../" + os.path.basename(outside) + "/secret.png", "file://link.png",
                        "file://" + os.path.join(outside, "secret.png"), "file://missing.png", "file://"):
                st, r = chat(srv, ask(url))
                assert st == 400 and "--media-path" in r["error"]["message"], (url, st, r)


def test_text_only_server(env):
    with Server(env["bin"], model=env["model"], parallel=2) as srv:
        st, r = chat(srv, ask(data_uri(gradient())))
        assert st == 400 and "--mmproj" in r["error"]["message"], r


def test_one_pool(env):
    """--mmproj adds no compute threads: the encoder runs on the engine's pool (one thread per core, not two),
    also after it encoded an image."""
    with Server(env["bin"], model=env["model"], threads=4, parallel=2) as text, \
            Server(env["bin"], "--mmproj", env["mmproj"], model=env["model"], threads=4, parallel=2) as both:
        st, r = chat(both, ask(data_uri(gradient())))
        assert st == 200, r
        assert both.threads() == text.threads(), (both.threads(), text.threads())


def main():
    binary, model, mmproj, images = sys.argv[1:5]
    env = {"bin": binary, "model": model, "mmproj": mmproj, "images": images}
    with Server(binary, "--mmproj", mmproj, model=model) as srv:
        env["srv"] = srv
        rc = run_tests([test_openai_client, test_cache, test_lossless_formats_same_image, test_errors, test_media_path,
                        test_text_only_server, test_one_pool], env)
        if rc:
            print("".join(srv.log[-30:]))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
