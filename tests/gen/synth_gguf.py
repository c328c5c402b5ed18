"""tests/gen/synth_gguf.py — what the drafter fixture generators share (gen_gemma4_mtp_fixtures.py,
gen_eagle3_fixtures.py): seeded weights (splitmix64 of seed ^ fnv1a(name), as the older generators compute them
inline), GGUF fields read back as Python values, a target's tokenizer keys copied with their types."""
import numpy as np
import gguf

M64 = (1 << 64) - 1


def fnv1a(s):
    h = 0xcbf29ce484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001b3) & M64
    return h


def values(seed, name, n, a, mean):
    """n float32 values (2u - 1) * a + mean, u uniform from splitmix64 of seed ^ fnv1a(name)."""
    s = np.uint64((seed ^ fnv1a(name)) & M64)
    with np.errstate(over="ignore"):
        z = s + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9e3779b97f4a7c15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    return ((2.0 * u - 1.0) * a + mean).astype(np.float32)


def field_value(f):
    """A scalar, string or array GGUF field as Python values."""
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return [f.contents(i) for i in range(len(f.data))]
    return f.contents()


def copy_tokenizer(w, r):
    """Every tokenizer.* key of the target reader r into writer w, with its original type."""
    for k, f in r.fields.items():
        if not k.startswith("tokenizer."):
            continue
        v = field_value(f)
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, v, gguf.GGUFValueType.ARRAY, sub_type=f.types[1])
        else:
            w.add_key_value(k, v, f.types[0])
