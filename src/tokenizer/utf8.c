/* UTF-8 helpers, the GPT-2 byte <-> code point mapping and small growable
 * buffers used by the tokenizer. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

int tk_utf8_seq_len(const unsigned char *s, size_t avail) {
    if (avail == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n;
    uint32_t min;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; min = 0x10000; }
    else return 0;
    if (avail < (size_t)n) return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    uint32_t cp = tk_utf8_decode(s, n);
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

size_t tk_utf8_validate(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int n = tk_utf8_seq_len(p + i, len - i);
        if (n == 0) return i;
        i += (size_t)n;
    }
    return (size_t)-1;
}

uint32_t tk_utf8_decode(const unsigned char *s, int n) {
    switch (n) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    case 4:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    default: return 0xFFFD;
    }
}

/* GPT-2 maps the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF to the
 * same code points and the other 68 bytes, in order, to 256, 257, ... */
uint32_t tk_byte_to_cp(unsigned char b) {
    if (b <= 0x20) return 256u + b;                  /* 33 bytes: 256..288 */
    if (b >= 0x7F && b <= 0xA0) return 289u + (b - 0x7F); /* 34 bytes: 289..322 */
    if (b == 0xAD) return 323u;
    return b;
}

int tk_cp_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 256 && cp <= 288) return (int)(cp - 256);
    if (cp >= 289 && cp <= 322) return (int)(0x7F + (cp - 289));
    if (cp == 323) return 0xAD;
    return -1;
}

int tk_ivec_push(tk_ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return -1;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

int tk_sbuf_put(tk_sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) return -1;
        b->s = ns;
        b->cap = nc;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}
