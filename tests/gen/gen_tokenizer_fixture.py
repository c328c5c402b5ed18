#!/usr/bin/env python3
"""Builds the tokenizer / chat fixtures under tests/data/tokenizer (committed; CI never runs this).

Needs: llama-cpp-python (the reference tokenizer), gguf, jinja2, and the default model
models/gemma-3-270m-q4_k_m.gguf.

Outputs
  corpus.bin   the corpus with llama.cpp's ids for the default model. Little-endian records:
               magic b"GMTK1\\n", u32 count, then per case: u32 flags (1 add_bos, 2 parse_special),
               u32 text_len, text bytes, u32 n_ids, i32 ids[n_ids].
  chat.json    conversations rendered by jinja2 from the official Gemma 3 chat template, with
               llama.cpp's ids of the rendered text (add_bos=False, special=True); "error": true
               where the template raises.
  tiny/        one small synthetic vocabulary three ways: tiny.gguf (as llama.cpp's converter
               would write it), hf_spm/ (tokenizer.model + tokenizer_config.json) and hf_json/
               (tokenizer.json + tokenizer_config.json); tiny_ids.bin = llama.cpp's ids of the
               tiny corpus with tiny.gguf (same record format as corpus.bin).
Run: python3 tests/gen/gen_tokenizer_fixture.py
"""
import json
import os
import random
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")
MODEL = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")

# The official Gemma 3 chat template (string contents), as shipped in tokenizer_config.json.
GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "The capital of France is Paris.",
    "Machine learning models are trained on large amounts of data.",
    "Please summarize the following article in three sentences.",
    "I can't believe it's already December!",
    "She said, \"Don't worry about it.\"",
    "Tokenizers split text into pieces; models see only the pieces.",
    "In 1969, Apollo 11 landed on the Moon.",
    "Hello, world! How are you today?",
    "What is the square root of 144?",
    "A stitch in time saves nine.",
    "The mitochondria is the powerhouse of the cell.",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=2.",
    "Mr. and Mrs. Smith went to Washington, D.C., on Tuesday.",
    "He scored 98.6% on the exam -- an all-time high.",
    "Supercalifragilisticexpialidocious is a long word.",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "ALL CAPS TEXT IS SHOUTING, isn't it?",
    "camelCaseIdentifier snake_case_identifier kebab-case-identifier",
]
CODE = [
    "def f(x):\n    return x * 2\n",
    "int main(void) {\n\tprintf(\"hi\\n\");\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }",
    "{\"name\": \"gemma\", \"layers\": 18, \"vocab\": 262144, \"tied\": true}",
    "<html><body><div class=\"x\">Hi</div></body></html>",
    "<table><tr><td>1</td><td>2</td></tr></table>",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "fn main() { let v: Vec<u32> = (0..10).collect(); println!(\"{:?}\", v); }",
    "$ ls -la | grep '.c$' | wc -l",
    "    indented line\n        more indented\n\tTabbed\n",
    "// comment\n/* block\n   comment */\n",
    "if (a && b || !c) { return -1; } else { return +1; }",
    "<strong>bold</strong> <em>em</em> <code>code</code> <a href='x'>link</a>",
]
NUMBERS = ["0", "7", "42", "12345", "3.14159", "1,000,000", "2026-12-02", "10:55 UTC", "-273.15",
           "1e-6", "0xDEADBEEF", "123456789012345678901234567890", "+1 (555) 010-0199", "½ ¾ ⅓", "١٢٣ ४५६"]
UNICODE = [
    "café naïve résumé Ångström façade", "e\u0301 (combining acute) vs é", "Zoë Brontë über Straße",
    "日本語のテキストです。", "中文文本测试，你好世界！", "한국어 텍스트 테스트", "こんにちは、世界",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया, यह हिंदी है।", "สวัสดีชาวโลก", "Привет, мир!",
    "Γειά σου Κόσμε", "Xin chào thế giới", "Türkçe öğrenmek güzel", "Ελληνικά και русский",
    "emoji 😀 😃 😄 😁", "family 👨‍👩‍👧‍👦 zwj", "flags 🇫🇷 🇯🇵 🇺🇸", "skin 👍🏽 👋🏿", "math ∑ ∫ √ ∞ ≠ ≤",
    "arrows → ← ↑ ↓ ⇒", "box ┌─┐│└─┘", "music 𝄞 𝄢", "ancient 𐍈 𓀀", "ideographic\u3000space",
    "nbsp\u00a0here", "zero\u200bwidth", "bom\ufeffinside", "rtl \u202eoverride\u202c", "▁ literal U+2581 ▁▁",
]
WHITESPACE = [" " * k for k in (1, 2, 3, 4, 5, 8, 16, 31, 32, 33, 40, 64)] + \
    ["\t" * k for k in (1, 2, 3, 8, 31, 32)] + ["\n" * k for k in (1, 2, 3, 10, 31, 32, 40)] + \
    [" \n", "\n ", " \t ", "\t \t", "a  b   c    d", "trailing   ", "   leading", "\r\n", "a\r\nb\r\n",
     "mixed \n\t \n\n  \t\t  end", "\u00a0\u00a0", "  \n  \n  ", "x\n\n\n\ny"]
SPECIAL = [
    "<start_of_turn>", "<end_of_turn>", "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<unused0>", "<unused99>", "<start_of_image>", "<end_of_image>",
    "[multimodal]", "<bos>Hello", "Hello<eos>", "<<bos>>", "<start_of_turn", "start_of_turn>", "<start_of_turn><start_of_turn>",
    "<b>bold</b> <i>it</i> <u>u</u> <s>s</s>", "<table>", "</table>", "<h1>Title</h1>", "<tr><td>",
    "<0x41>", "<0x41><0x42>", "<0x0A>", "<0xZZ>", "<0x>", "text <0xFF> more", "<end_of_turn>\n<end_of_turn>",
    "user<end_of_turn>model", "  <start_of_turn>  ", "\n<start_of_turn>\n",
]
INVALID = [b"\xff", b"\xfe\xff", b"\x80", b"abc\x80def", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98",
           b"\xf0\x9f", b"\xc0\x80", b"\xed\xa0\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"ok\xffok\xfeok",
           b"caf\xe9", b"\xe2\x96", b"\xe2\x96\x81\xe2\x96", b"a\x00b", b"\x00", b"\x00\x00\x00", b"nul\x00in\x00middle",
           b"\x01\x02\x03\x1f\x7f", b""]


def big_text(n_bytes, seed):
    rng = random.Random(seed)
    parts = PROSE + CODE + NUMBERS + UNICODE + ["\n", "\n\n", "  ", " ", "\t"]
    out = []
    size = 0
    while size < n_bytes:
        p = rng.choice(parts)
        out.append(p)
        out.append(rng.choice([" ", " ", "\n", "  ", ", "]))
        size += len(p.encode()) + 1
    return "".join(out).encode()[:n_bytes].decode("utf-8", "ignore").encode()


def random_texts():
    rng = random.Random(7)
    texts = []
    for i in range(20):  # random bytes, invalid UTF-8 included
        texts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 120))))
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x600, 0x6FF), (0x900, 0x97F),
              (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1F64F), (0x2500, 0x257F)]
    for i in range(25):  # random valid UTF-8 from mixed scripts with spaces
        s = []
        for _ in range(rng.randrange(1, 60)):
            lo, hi = rng.choice(ranges)
            s.append(chr(rng.randrange(lo, hi + 1)) if rng.random() > 0.15 else " ")
        texts.append("".join(s).encode())
    return texts


def corpus():
    texts = []
    for group in (PROSE, CODE, NUMBERS, UNICODE, WHITESPACE, SPECIAL):
        texts += [t.encode() for t in group]
    texts += INVALID
    texts += random_texts()
    # combinations: prose with specials / whitespace inside
    rng = random.Random(11)
    for i in range(30):
        parts = [rng.choice(PROSE + CODE + UNICODE + SPECIAL + WHITESPACE) for _ in range(rng.randrange(2, 6))]
        texts.append("".join(parts).encode())
    texts.append(big_text(100 * 1024, 1234))
    return texts


def rec(out, flags, text, ids):
    out += struct.pack("<II", flags, len(text)) + text + struct.pack("<I", len(ids))
    out += struct.pack("<%di" % len(ids), *ids)


def write_records(path, records):
    out = bytearray(b"GMTK1\n" + struct.pack("<I", len(records)))
    for flags, text, ids in records:
        rec(out, flags, text, ids)
    with open(path, "wb") as f:
        f.write(out)
    return len(out)


def tokenize_all(llm, texts, all_variants_below):
    records = []
    for t in texts:
        variants = [(1, 1)] if len(t) >= all_variants_below else [(1, 1), (1, 0), (0, 1), (0, 0)]
        for bos, sp in variants:
            ids = llm.tokenize(t, add_bos=bool(bos), special=bool(sp))
            records.append((bos | (sp << 1), t, ids))
    return records


def chat_cases():
    import jinja2

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = jinja2.Environment()
    env.globals["raise_exception"] = raise_exception
    tmpl = env.from_string(GEMMA3_TEMPLATE)
    U, A, S = "user", "assistant", "system"
    convs = [
        ([(U, "Hello!")], True),
        ([(U, "Hello!")], False),
        ([(U, "What is 2+2?"), (A, "4."), (U, "And 3+3?")], True),
        ([(U, "Hi"), (A, "Hello! How can I help?")], False),
        ([(S, "You are a helpful assistant."), (U, "Tell me a joke.")], True),
        ([(S, "Answer in French."), (U, "Good morning"), (A, "Bonjour"), (U, "Thanks")], True),
        ([(U, "  padded content \n\n")], True),
        ([(U, "\u3000ideographic space trimmed\u3000")], True),
        ([(U, "")], True),
        ([(U, "literal <start_of_turn> inside")], True),
        ([(U, "unicode: 日本語 😀 café")], True),
        ([(S, "  system keeps its spaces  "), (U, " x ")], True),
        ([(U, "q"), ("model", "a"), (U, "q2")], True),
        ([(S, "only system")], True),
        ([(A, "assistant first")], True),
        ([(U, "a"), (U, "b")], True),
        ([(U, "a"), (A, "b"), (A, "c")], True),
    ]
    cases = []
    for msgs, gen in convs:
        m = [{"role": r, "content": c} for r, c in msgs]
        try:
            text = tmpl.render(messages=m, add_generation_prompt=gen, bos_token="<bos>")
            cases.append({"messages": m, "add_generation_prompt": gen, "rendered": text})
        except jinja2.exceptions.TemplateError:
            cases.append({"messages": m, "add_generation_prompt": gen, "error": True})
    return cases


# ---------------------------------------------------------------- tiny synthetic vocabulary

def tiny_vocab(gemma_tokens, gemma_scores, gemma_types):
    """(pieces, scores, types) as the GGUF converter would write them, plus the HF-side data."""
    specials = [("<pad>", True), ("<eos>", True), ("<bos>", True), ("<unk>", True), ("<start_of_turn>", True),
                ("<end_of_turn>", True), ("\n", False), ("\n\n", False), ("  ", False), ("<b>", False)]
    pieces, scores, types = [], [], []
    for text, special in specials:
        pieces.append(text.encode())
        scores.append(-1000.0)
        types.append(3 if special else 4)
    for b in range(256):
        pieces.append(("<0x%02X>" % b).encode())
        scores.append(0.0)
        types.append(6)
    # normal pieces: Gemma's first 1200 normal pieces (single characters and short merges)
    rank = 0
    for i in range(len(gemma_tokens)):
        if gemma_types[i] != 1:
            continue
        pieces.append(gemma_tokens[i])
        scores.append(-float(rank))
        types.append(1)
        rank += 1
        if rank == 1200:
            break
    return specials, pieces, scores, types


def pb_varint(v):
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_field(num, wire, payload):
    key = pb_varint((num << 3) | wire)
    if wire == 2:
        return key + pb_varint(len(payload)) + payload
    return key + payload


def write_spm_model(path, specials, pieces, scores, types):
    msg = bytearray()
    for i, p in enumerate(pieces):
        ty = types[i]
        sc = scores[i]
        if i < len(specials):  # as SentencePiece stores them before the converter's fix-ups
            text = specials[i][0]
            ty = {"<unk>": 2}.get(text, 3 if specials[i][1] else 4)
            p = text.replace(" ", "\u2581").encode()
            sc = 0.0
        piece = pb_field(1, 2, p) + pb_field(2, 5, struct.pack("<f", sc))
        if ty != 1:
            piece += pb_field(3, 0, pb_varint(ty))
        msg += pb_field(1, 2, piece)
    trainer = pb_field(40, 0, pb_varint(3)) + pb_field(41, 0, pb_varint(2)) + pb_field(42, 0, pb_varint(1)) + \
        pb_field(43, 0, pb_varint(0)) + pb_field(7, 0, pb_varint(2))  # model_type BPE (skipped by readers)
    normalizer = pb_field(1, 2, b"identity") + pb_field(3, 0, pb_varint(0))
    msg += pb_field(2, 2, trainer) + pb_field(3, 2, normalizer)
    with open(path, "wb") as f:
        f.write(msg)


def tokenizer_config(specials):
    dec = {}
    for i, (text, special) in enumerate(specials):
        dec[str(i)] = {"content": text.replace(" ", "\u2581") if not special else text, "special": special,
                       "lstrip": False, "rstrip": False, "normalized": False, "single_word": False}
    return {"added_tokens_decoder": dec, "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
            "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False, "chat_template": GEMMA3_TEMPLATE}


def write_tokenizer_json(path, specials, pieces, types):
    vocab = {}
    for i, p in enumerate(pieces):
        text = p.decode("utf-8")
        if i < len(specials):
            text = specials[i][0].replace(" ", "\u2581")
        vocab[text] = i
    added = [{"id": i, "content": t.replace(" ", "\u2581") if not s else t, "special": s}
             for i, (t, s) in enumerate(specials)]
    doc = {"version": "1.0", "added_tokens": added,
           "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
           "pre_tokenizer": None,
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "byte_fallback": True,
                     "vocab": vocab, "merges": []}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def write_tiny_gguf(path, pieces, scores, types):
    import gguf
    w = gguf.GGUFWriter(path, "gemma3")
    # minimal hyper-parameters so llama.cpp accepts the file in vocab_only mode
    w.add_context_length(512)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_key_length(64)
    w.add_value_length(64)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(512)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(GEMMA3_TEMPLATE)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny_texts():
    return [t.encode() for t in PROSE[:10] + CODE[:5] + UNICODE[:10] + WHITESPACE[:20] + SPECIAL[:20]] + INVALID[:12]


def main():
    from llama_cpp import Llama
    import gguf
    os.makedirs(os.path.join(OUT, "tiny", "hf_spm"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "tiny", "hf_json"), exist_ok=True)
    llm = Llama(model_path=MODEL, vocab_only=True, verbose=False)
    texts = corpus()
    records = tokenize_all(llm, texts, 4096)
    size = write_records(os.path.join(OUT, "corpus.bin"), records)
    print("corpus: %d texts, %d cases, %d bytes" % (len(texts), len(records), size))

    cases = chat_cases()
    for c in cases:
        if "rendered" in c:
            c["ids"] = llm.tokenize(c["rendered"].encode(), add_bos=False, special=True)
    with open(os.path.join(OUT, "chat.json"), "w", encoding="utf-8") as f:
        json.dump({"template": GEMMA3_TEMPLATE, "cases": cases}, f, ensure_ascii=False, indent=1)
    print("chat: %d cases" % len(cases))

    r = gguf.GGUFReader(MODEL)
    fl = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(fl.parts[i]) for i in fl.data]
    fl = r.fields["tokenizer.ggml.scores"]
    sc = [float(fl.parts[i][0]) for i in fl.data]
    fl = r.fields["tokenizer.ggml.token_type"]
    ty = [int(fl.parts[i][0]) for i in fl.data]
    specials, pieces, scores, types = tiny_vocab(toks, sc, ty)
    tdir = os.path.join(OUT, "tiny")
    write_tiny_gguf(os.path.join(tdir, "tiny.gguf"), pieces, scores, types)
    write_spm_model(os.path.join(tdir, "hf_spm", "tokenizer.model"), specials, pieces, scores, types)
    write_tokenizer_json(os.path.join(tdir, "hf_json", "tokenizer.json"), specials, pieces, types)
    for sub in ("hf_spm", "hf_json"):
        with open(os.path.join(tdir, sub, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_config(specials), f, ensure_ascii=False, indent=1)
    tiny = Llama(model_path=os.path.join(tdir, "tiny.gguf"), vocab_only=True, verbose=False)
    trecs = tokenize_all(tiny, tiny_texts(), 1 << 30)
    write_records(os.path.join(tdir, "tiny_ids.bin"), trecs)
    print("tiny: %d pieces, %d cases" % (len(pieces), len(trecs)))


if __name__ == "__main__":
    sys.exit(main())
