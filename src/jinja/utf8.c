#include "utf8.h"

#include "../util/utf8.h"

uint32_t cj_u8_next(const char *str, size_t n, size_t *i) {
    const unsigned char *s = (const unsigned char *)str;
    size_t p = *i;
    unsigned c = s[p];
    if (c < 0x80) {
        *i = p + 1;
        return c;
    }
    int len;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        goto invalid;
    }
    if (p + (size_t)len > n) goto invalid;
    for (int k = 1; k < len; k++) {
        unsigned cc = s[p + (size_t)k];
        if ((cc & 0xC0) != 0x80) goto invalid;
        cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto invalid;
    *i = p + (size_t)len;
    return cp;
invalid:
    *i = p + 1;
    return 0xDC00 + c;
}

int cj_u8_put(uint32_t cp, char out[4]) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) {
        out[0] = (char)(cp - 0xDC00);
        return 1;
    }
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = 0xFFFD;
    return tk_utf8_encode(cp, out);
}

size_t cj_u8_count(const char *s, size_t n) {
    size_t i = 0, k = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) i++; /* ASCII fast path */
        else cj_u8_next(s, n, &i);
        k++;
    }
    return k;
}

bool cj_isspace(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t cj_space_len(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return cj_isspace(c) ? 1 : 0;
    size_t j = i;
    uint32_t cp = cj_u8_next(s, n, &j);
    return cj_isspace(cp) ? j - i : 0;
}
