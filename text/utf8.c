/* text/utf8.c — the few UTF-8 facts the tokenizer and the streaming decoder need. */
#include "text/tokenizer.h"
#include "gemma_chat.h"

size_t gm_utf8_lead_len(uint8_t b) {
    /* llama.cpp splits text by the lead byte's high nibble alone, without checking the
     * continuation bytes; matching its ids means matching this rule exactly. */
    static const uint8_t by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_nibble[b >> 4];
}

size_t gm_utf8_decode(const uint8_t *s, size_t n, int32_t *cp) {
    uint8_t b = s[0];
    size_t need;
    int32_t c, min;
    if (b < 0x80) { *cp = b; return 1; }
    if (b >= 0xC2 && b <= 0xDF) { need = 2; c = b & 0x1F; min = 0x80; }
    else if (b >= 0xE0 && b <= 0xEF) { need = 3; c = b & 0x0F; min = 0x800; }
    else if (b >= 0xF0 && b <= 0xF4) { need = 4; c = b & 0x07; min = 0x10000; }
    else { *cp = -1; return 1; }
    if (n < need) { *cp = -1; return 1; }
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = -1; return 1; }
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) { *cp = -1; return 1; }
    *cp = c;
    return need;
}

bool gm_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        i += gm_utf8_decode(s + i, n - i, &cp);
        if (cp < 0) return false;
    }
    return true;
}

/* Could s[0..k) (k < the sequence's length) still grow into a valid character? */
static bool utf8_viable_prefix(const uint8_t *s, size_t k, size_t need) {
    uint8_t b = s[0];
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return false;
    if (k >= 2) {
        /* second-byte ranges that exclude overlongs, surrogates and > U+10FFFF */
        uint8_t c = s[1];
        if (b == 0xE0 && c < 0xA0) return false;
        if (b == 0xED && c > 0x9F) return false;
        if (b == 0xF0 && c < 0x90) return false;
        if (b == 0xF4 && c > 0x8F) return false;
    }
    return k < need;
}

size_t gm_utf8_complete_prefix(const uint8_t *s, size_t n) {
    /* Only the last (at most 3) bytes can be an unfinished sequence: find the last lead byte. */
    size_t back = n < 3 ? n : 3;
    for (size_t k = 1; k <= back; k++) {
        size_t at = n - k;
        uint8_t b = s[at];
        if ((b & 0xC0) == 0x80) continue; /* continuation: keep looking for its lead */
        size_t need = 0;
        if (b >= 0xC2 && b <= 0xDF) need = 2;
        else if (b >= 0xE0 && b <= 0xEF) need = 3;
        else if (b >= 0xF0 && b <= 0xF4) need = 4;
        if (need && utf8_viable_prefix(s + at, k, need)) return at;
        return n;
    }
    return n;
}

bool gm_text_is_utf8(const char *s, size_t n) { return s ? gm_utf8_valid((const uint8_t *)s, n) : n == 0; }

/* cp (at most U+10FFFF) as UTF-8 into out; returns its length. */
size_t gm_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
