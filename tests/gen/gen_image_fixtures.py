#!/usr/bin/env python3
"""tests/gen/gen_image_fixtures.py — the image fixtures of tests/test_image.c, made and decoded by
Pillow (the reference transformers uses), so the decoders and the resize are checked against an
independent implementation:

    python3 -m venv /tmp/pilvenv && /tmp/pilvenv/bin/pip install pillow
    /tmp/pilvenv/bin/python tests/gen/gen_image_fixtures.py tests/data/images

Inputs (*.png, *.jpg, *.webp) and what Pillow makes of them (*.rgb: raw RGB8, row-major) after
ImageOps.exif_transpose and convert("RGB"). Resize: resize_src.rgb (23 x 13) and Pillow's
BILINEAR resize of it to each size in RESIZES (resize_WxH.rgb), and resize_tall.rgb (7 x 23), whose
4 x 10 resize runs Pillow >= 13's vertical pass first; letterbox_*.rgb follow llama.cpp's PAD_CEIL
rule (float32 scale, ceil, centred on black) and its resize_pillow (Pillow's filter, horizontal
pass always first), transcribed below and checked against Pillow where the pass orders agree.
Deterministic: a fixed seed, so a rerun rewrites the same files (given the same Pillow).
"""
import io
import math
import random
import struct
import sys

from PIL import Image, ImageOps

RESIZES = [(9, 5), (31, 19), (47, 6), (5, 29), (1, 1), (23, 4), (11, 13)]
LETTERBOXES = [(16, 16), (32, 32)]
SRC_W, SRC_H = 23, 13


def rgb_bytes(im):
    return ImageOps.exif_transpose(im).convert("RGB").tobytes()


def write(out, name, data):
    with open(f"{out}/{name}", "wb") as f:
        f.write(data)


def pattern(rng, w, h, mode="RGB"):
    """Blocks of flat colour (JPEG keeps them nearly exact) with random values elsewhere."""
    im = Image.new(mode, (w, h))
    bands = len(mode)
    for y in range(h):
        for x in range(w):
            if (x // 4 + y // 4) % 2:
                v = tuple(rng.randrange(256) for _ in range(bands))
            else:
                v = tuple((x * 37 + y * 11 + 60 * b) % 256 for b in range(bands))
            im.putpixel((x, y), v if bands > 1 else v[0])
    return im


def encoded(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def decoders(out, rng):
    rgba = pattern(rng, 7, 5, "RGBA")
    rgba.putpixel((0, 0), (200, 100, 50, 0))  # transparent: its colour must survive
    write(out, "rgba.png", encoded(rgba, "PNG"))
    write(out, "rgba.rgb", rgb_bytes(rgba))
    pal = pattern(rng, 7, 5).quantize(colors=16)
    pal.info["transparency"] = 3
    data = encoded(pal, "PNG", transparency=3)
    write(out, "palette.png", data)
    write(out, "palette.rgb", rgb_bytes(Image.open(io.BytesIO(data))))
    for name, im, kw in [("gray.jpg", pattern(rng, 16, 12, "L"), {"quality": 90}),
                         ("cmyk.jpg", pattern(rng, 8, 8, "CMYK"), {"quality": 95}),
                         ("lossy.webp", pattern(rng, 16, 12), {"quality": 80}),
                         ("lossless.webp", rgba, {"lossless": True, "exact": True})]:
        data = encoded(im, name.split(".")[1].replace("jpg", "JPEG"), **kw)
        write(out, name, data)
        write(out, name.rsplit(".", 1)[0] + ".rgb", rgb_bytes(Image.open(io.BytesIO(data))))


def exif_jpeg(out, rng):
    """One JPEG with an EXIF orientation tag; the test rewrites the tag to 1..8, so the expected
    pixels of every orientation (Pillow's exif_transpose) are concatenated in exif.rgb."""
    im = pattern(rng, 16, 8)
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encoded(im, "JPEG", quality=95, exif=exif.tobytes())
    write(out, "exif6.jpg", data)
    tag = b"\x12\x01\x03\x00\x01\x00\x00\x00\x06\x00" if b"II*\x00" in data else b"\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06"
    at = data.index(tag) + (8 if tag[0] == 0x12 else 9)
    expect = b""
    for o in range(1, 9):
        patched = bytearray(data)
        patched[at] = o
        expect += rgb_bytes(Image.open(io.BytesIO(bytes(patched))))
    write(out, "exif.rgb", expect)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def coeffs(n_in, n_out):
    """Pillow's precompute_coeffs + normalize_coeffs_8bpc for BILINEAR, transcribed."""
    scale = n_in / n_out
    fscale = max(scale, 1.0)
    out = []
    for i in range(n_out):
        center = (i + 0.5) * scale
        lo, hi = max(int(center - fscale + 0.5), 0), min(int(center + fscale + 0.5), n_in)
        ws = [max(0.0, 1.0 - abs((k + lo - center + 0.5) * (1.0 / fscale))) for k in range(hi - lo)]
        total = 0.0
        for w in ws:
            total += w
        out.append((lo, [int(0.5 + (w / total if total else 0.0) * (1 << 22)) for w in ws]))
    return out


def clip8(s):
    return max(0, min(255, s >> 22))


def resize_horizontal_first(src, w, h):
    """llama.cpp's resize_pillow (and Pillow before 13): the horizontal pass always first."""
    sw, sh = src.size
    px = src.tobytes()
    if (w, h) == (sw, sh):
        return src.copy()
    if w != sw:
        cx = coeffs(sw, w)
        px = bytes(clip8((1 << 21) + sum(px[(y * sw + lo + k) * 3 + c] * wt for k, wt in enumerate(ws)))
                   for y in range(sh) for lo, ws in cx for c in range(3))
    if h != sh:
        cy = coeffs(sh, h)
        px = bytes(clip8((1 << 21) + sum(px[((lo + k) * w + x) * 3 + c] * wt for k, wt in enumerate(ws)))
                   for lo, ws in cy for x in range(w) for c in range(3))
    return Image.frombytes("RGB", (w, h), px)


def pillow_horizontal_first(sw, sh, w, h):
    """Pillow >= 13 runs the vertical pass first when the height shrinks by more than twice the width."""
    return not (sh - h > 0 and sh - h > (sw - w) * 2)


def letterbox(src, W, H):
    """llama.cpp img_tool::resize with PAD_CEIL, its float32 arithmetic spelt out."""
    w, h = src.size
    scale = min(f32(f32(W) / f32(w)), f32(f32(H) / f32(h)))
    nw, nh = min(math.ceil(f32(w * scale)), W), min(math.ceil(f32(h * scale)), H)
    canvas = Image.new("RGB", (W, H), (0, 0, 0))
    canvas.paste(resize_horizontal_first(src, nw, nh), ((W - nw) // 2, (H - nh) // 2))
    return canvas


def random_image(rng, w, h):
    return Image.frombytes("RGB", (w, h), bytes(rng.randrange(256) for _ in range(w * h * 3)))


def resizes(out, rng):
    for name, (sw, sh), sizes, boxes in [("src", (SRC_W, SRC_H), RESIZES, LETTERBOXES),
                                         ("tall", (7, 23), [(4, 10)], [(10, 10)])]:
        src = random_image(rng, sw, sh)
        write(out, f"resize_{name}.rgb", src.tobytes())
        for w, h in sizes:
            want = src.resize((w, h), Image.BILINEAR)
            mine = resize_horizontal_first(src, w, h)
            # the transcription must be Pillow wherever the two agree on the pass order
            assert (mine.tobytes() == want.tobytes()) or not pillow_horizontal_first(sw, sh, w, h), (name, w, h)
            write(out, f"resize_{name}_{w}x{h}.rgb" if name != "src" else f"resize_{w}x{h}.rgb", want.tobytes())
        for w, h in boxes:
            write(out, f"letterbox_{name}_{w}x{h}.rgb" if name != "src" else f"letterbox_{w}x{h}.rgb",
                  letterbox(src, w, h).tobytes())


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/images"
    rng = random.Random(26)
    decoders(out, rng)
    exif_jpeg(out, rng)
    resizes(out, rng)


if __name__ == "__main__":
    main()
