#!/usr/bin/env python3
"""Writes tests/data/quant/<TYPE>.bin: known inputs, their quantized bytes and dequantized values from
independent implementations, for tests/test_quant.c.

Sources (named in each file's header field `qsrc`):
  * gguf-py (gguf.quants.quantize / dequantize) for F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: the
    numpy port of ggml's reference quantizers that llama.cpp's converter uses.
  * ggml's own C reference (quantize_row_*_ref / dequantize_row_*, from the libggml-base.so that the
    llama-cpp-python wheel ships) for Q8_1, Q4_K, Q5_K, Q6_K, Q8_K, which gguf-py cannot quantize.
    Dequantization of the K-quants still comes from gguf-py.
For the types both can do, the generator checks that gguf-py's bytes equal ggml's.

File layout (little endian):
  char magic[4] = "GMQF"; u32 version = 1; u32 type; u32 rows_q; u32 rows_r; u32 cols; u32 qsrc
  (1 = gguf-py, 2 = ggml C reference); u32 row_bytes
  f32 input[rows_q][cols]               values that were quantized
  u8  quant[rows_q + rows_r][row_bytes] rows_q quantized rows, then rows_r rows of random bytes
                                        (f16 scale fields forced finite) that only test dequant
  f32 deq[rows_q + rows_r][cols]        dequantized by the reference

Run: python3 tests/gen/gen_quant_fixtures.py   (CI never runs it; the outputs are committed)
"""
import ctypes
import os
import struct
import sys

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant")
COLS = 256
SEED = 20261202

# name, ggml id, bytes per 256 elements, quantizer source, f16 field offsets within a block, block size
TYPES = [
    ("F32", 0, 1024, "gguf", [], 4),
    ("F16", 1, 512, "gguf", [], 2),
    ("BF16", 30, 512, "gguf", [], 2),
    ("Q4_0", 2, 144, "gguf", [0], 18),
    ("Q4_1", 3, 160, "gguf", [0, 2], 20),
    ("Q5_0", 6, 176, "gguf", [0], 22),
    ("Q5_1", 7, 192, "gguf", [0, 2], 24),
    ("Q8_0", 8, 272, "gguf", [0], 34),
    ("Q8_1", 9, 288, "ggml", [0, 2], 36),
    ("Q4_K", 12, 144, "ggml", [0, 2], 144),
    ("Q5_K", 13, 176, "ggml", [0, 2], 176),
    ("Q6_K", 14, 210, "ggml", [208], 210),
    ("Q8_K", 15, 292, "ggml", [], 292),
]


def ggml_lib():
    import llama_cpp  # only to locate the bundled ggml
    path = os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so")
    return ctypes.CDLL(path)


def ggml_quantize(lib, name, x):
    fn = getattr(lib, "quantize_row_%s_ref" % name.lower().replace("_k", "_K"))
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    x = np.ascontiguousarray(x, dtype=np.float32)
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_blck_size.restype = ctypes.c_int64
    tid = dict((t[0], t[1]) for t in TYPES)[name]
    rb = x.shape[1] // lib.ggml_blck_size(tid) * lib.ggml_type_size(tid)
    out = np.zeros((x.shape[0], rb), dtype=np.uint8)
    for r in range(x.shape[0]):
        fn(x[r].ctypes.data, out[r].ctypes.data, x.shape[1])
    return out


def ggml_dequantize(lib, name, q, cols):
    fn = getattr(lib, "dequantize_row_%s" % name.lower().replace("_k", "_K"))
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    q = np.ascontiguousarray(q)
    out = np.zeros((q.shape[0], cols), dtype=np.float32)
    for r in range(q.shape[0]):
        fn(q[r].ctypes.data, out[r].ctypes.data, cols)
    return out


def inputs(rng):
    """Rows of COLS floats covering the cases quantizers get wrong."""
    n = COLS
    rows = [
        rng.standard_normal(n),                       # plain gaussian
        rng.standard_normal(n) * 0.02,                # weight-like scale
        rng.uniform(-1, 1, n),                        # uniform
        np.zeros(n),                                  # all zero (d = 0 paths)
        rng.standard_normal(n) * 1e-6,                # tiny: f16 scales become subnormal
        rng.standard_normal(n) * 1e-9,                # tinier: f16 scales flush to 0
        rng.standard_normal(n) * 3e3,                 # large
        rng.uniform(0.5, 2.0, n),                     # all positive (min > 0 paths)
        -rng.uniform(0.5, 2.0, n),                    # all negative
        np.full(n, 0.75),                             # constant
        rng.standard_normal(n) * 0.1,                 # outliers on a small background
        rng.laplace(size=n),                          # heavy tails
    ]
    rows[10][rng.integers(0, n, 6)] = rng.choice([-40.0, 40.0], 6)
    # per-32 blocks with mixed signs of the extreme and exact ties (x.5 after scaling)
    tie = np.tile(np.array([-8, -7.5, -0.5, 0, 0.5, 1.5, 2.5, 7] * 4, dtype=np.float64), n // 32)
    rows.append(tie)
    zero_blocks = rng.standard_normal(n)
    zero_blocks[32:96] = 0.0                          # zero sub-blocks inside a non-zero block
    rows.append(zero_blocks)
    return np.stack(rows).astype(np.float32)


def random_rows(rng, name, block_bytes, f16_offsets, n_rows):
    """Random block bytes with every f16 field replaced by a finite random value (no inf/nan)."""
    if name == "F32":
        return rng.standard_normal((n_rows, COLS)).astype(np.float32).view(np.uint8).reshape(n_rows, -1)
    nb = COLS // (256 if block_bytes in (144, 176, 210, 292) else (32 if block_bytes in (18, 20, 22, 24, 34, 36) else 1))
    q = rng.integers(0, 256, (n_rows, nb, block_bytes), dtype=np.uint8)
    if name in ("F16", "BF16"):
        vals = rng.standard_normal((n_rows, nb)).astype(np.float32)
        vals[:, :4] = [0.0, -0.0, 6.1e-5, 1e-7]  # zero, negative zero, near-subnormal, subnormal
        h = vals.astype(np.float16) if name == "F16" else (vals.view(np.uint32) >> 16).astype(np.uint16)
        return h.view(np.uint16).view(np.uint8).reshape(n_rows, -1)
    for off in f16_offsets:
        h = (rng.standard_normal((n_rows, nb)) * 0.05).astype(np.float16)
        q[:, :, off:off + 2] = h.view(np.uint8).reshape(n_rows, nb, 2)
    if name == "Q8_K":
        d = (rng.standard_normal((n_rows, nb)) * 0.01).astype(np.float32)
        q[:, :, 0:4] = d.view(np.uint8).reshape(n_rows, nb, 4)
    return q.reshape(n_rows, -1)


def reference(lib, name, qsrc, x):
    if name == "F32":
        return x.view(np.uint8).reshape(x.shape[0], -1).copy()
    if qsrc == "gguf":
        q = quants.quantize(x, getattr(T, name))
        q = np.ascontiguousarray(q).view(np.uint8).reshape(x.shape[0], -1)
        if name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
            g = ggml_quantize(lib, name, x)
            if not np.array_equal(g, q):
                bad = np.argwhere((g != q).any(axis=1)).ravel()
                print("  note: %s gguf-py and ggml ref differ in rows %s" % (name, bad), file=sys.stderr)
        return q
    return ggml_quantize(lib, name, x)


def dequant(lib, name, q):
    if name == "Q8_1":  # gguf-py has no Q8_1; ggml exports no dequantize_row_q8_1: qs * d in f32
        blocks = q.reshape(-1, 36)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        qs = blocks[:, 4:].view(np.int8).astype(np.float32)
        return (qs * d).reshape(q.shape[0], -1)
    if name == "Q8_K":
        return ggml_dequantize(lib, name, q, COLS)
    if name == "F16":
        return q.copy().view(np.float16).astype(np.float32)
    return quants.dequantize(q, getattr(T, name)).reshape(q.shape[0], -1).astype(np.float32)


def main():
    os.makedirs(OUT, exist_ok=True)
    lib = ggml_lib()
    total = 0
    for name, tid, _, qsrc, f16_offsets, block_bytes in TYPES:
        rng = np.random.default_rng(SEED + tid)
        x = inputs(rng)
        q = reference(lib, name, qsrc, x)
        r = random_rows(rng, name, block_bytes, f16_offsets, 4)
        allq = np.concatenate([q, r]).astype(np.uint8)
        deq = dequant(lib, name, allq)
        assert np.all(np.isfinite(deq)), name
        hdr = b"GMQF" + struct.pack("<7I", 1, tid, x.shape[0], r.shape[0], COLS, 1 if qsrc == "gguf" else 2,
                                    allq.shape[1])
        data = hdr + x.astype("<f4").tobytes() + allq.tobytes() + deq.astype("<f4").tobytes()
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(data)
        total += len(data)
        print("%-5s %6d bytes (%s)" % (name, len(data), qsrc))
    print("total %d bytes" % total)


if __name__ == "__main__":
    main()
