/* Decoding: token -> bytes, and a streaming decoder that only emits complete
 * UTF-8 characters. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* <0xNN> -> NN, -1 if the piece is not a byte piece */
static int byte_piece(const char *p, uint32_t n) {
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
    int h = hexval(p[3]), l = hexval(p[4]);
    if (h < 0 || l < 0) return -1;
    return h * 16 + l;
}

static int put(char *buf, int cap, int *n, const char *s, size_t k) {
    if (*n + (long)k <= cap) memcpy(buf + *n, s, k);
    *n += (int)k;
    return 0;
}

int tk_token_to_bytes(const tk_tokenizer *t, int prev_id, int id, bool render_special, char *buf,
                      int cap) {
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    if (cap < 0) cap = 0;
    const char *p = t->blob + t->off[id];
    uint32_t plen = t->len[id];
    int ty = t->type[id];
    int n = 0;
    if (ty == TK_TOKEN_CONTROL || ty == TK_TOKEN_UNKNOWN) {
        if (!render_special) return 0;
        put(buf, cap, &n, p, plen);
    } else if (ty == TK_TOKEN_USER_DEFINED) {
        put(buf, cap, &n, p, plen);
    } else if (ty == TK_TOKEN_BYTE) {
        int b = byte_piece(p, plen);
        if (b >= 0) {
            char c = (char)b;
            put(buf, cap, &n, &c, 1);
        } else {
            put(buf, cap, &n, p, plen);
        }
    } else if (ty == TK_TOKEN_UNUSED) {
        return 0;
    } else if (t->byte_level) {
        size_t i = 0;
        while (i < plen) {
            int l = tk_utf8_seq_len((const unsigned char *)p + i, plen - i);
            if (l <= 0) l = 1;
            int b = tk_cp_to_byte(tk_utf8_decode((const unsigned char *)p + i, l));
            if (b >= 0) {
                char c = (char)b;
                put(buf, cap, &n, &c, 1);
            } else {
                put(buf, cap, &n, p + i, (size_t)l);
            }
            i += (size_t)l;
        }
    } else {
        /* SentencePiece: U+2581 -> ' ', one leading space dropped after BOS */
        bool strip = t->kind == TK_TOK_SPM && prev_id >= 0 && prev_id == t->bos;
        size_t i = 0;
        while (i < plen) {
            if (i + 3 <= plen && (unsigned char)p[i] == 0xE2 && (unsigned char)p[i + 1] == 0x96 &&
                (unsigned char)p[i + 2] == 0x81) {
                if (!(strip && n == 0 && i == 0)) put(buf, cap, &n, " ", 1);
                i += 3;
            } else {
                if (strip && i == 0 && p[0] == ' ') {
                    i++;
                    continue;
                }
                put(buf, cap, &n, p + i, 1);
                i++;
            }
        }
    }
    return n <= cap ? n : -n;
}

/* ---- streaming ---- */

void tk_detok_init(tk_detok *d, const tk_tokenizer *t, int prev_id) {
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->prev_id = prev_id;
}

/* Can s[0..k) still grow into a valid UTF-8 sequence? (k >= 1, s[0] >= 0x80) */
static bool valid_prefix(const unsigned char *s, size_t k, int *need) {
    unsigned c = s[0];
    int n;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3;
    else if (c >= 0xF0 && c <= 0xF4) n = 4;
    else return false;
    *need = n;
    for (size_t i = 1; i < k && i < (size_t)n; i++) {
        unsigned b = s[i];
        unsigned lo = 0x80, hi = 0xBF;
        if (i == 1) {
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
            else if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
        }
        if (b < lo || b > hi) return false;
    }
    return true;
}

/* Decodes src into out: complete characters are copied, invalid sequences
 * become U+FFFD, a trailing incomplete sequence is left (its length is
 * returned in *rest) unless final. Returns the output length (out may be
 * NULL to measure). */
static size_t sanitize(const unsigned char *src, size_t n, bool final, char *out, size_t *rest) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t i = 0, o = 0;
    *rest = 0;
    while (i < n) {
        if (src[i] < 0x80) {
            if (out) out[o] = (char)src[i];
            o++;
            i++;
            continue;
        }
        int need = 0;
        size_t avail = n - i;
        if (valid_prefix(src + i, avail, &need)) {
            if (avail >= (size_t)need) {
                if (out) memcpy(out + o, src + i, (size_t)need);
                o += (size_t)need;
                i += (size_t)need;
                continue;
            }
            if (!final) {
                *rest = avail;
                return o;
            }
            /* incomplete at the end: one replacement for the whole prefix */
            if (out) memcpy(out + o, fffd, 3);
            o += 3;
            i = n;
            continue;
        }
        /* invalid: replace the maximal valid prefix (at least one byte) */
        size_t k = 1;
        if (need > 0) {
            while (k < avail && k < (size_t)need && valid_prefix(src + i, k + 1, &need)) k++;
        }
        if (out) memcpy(out + o, fffd, 3);
        o += 3;
        i += k;
    }
    return o;
}

static int detok_emit(tk_detok *d, const char *bytes, int nb, bool final, char *out, int cap) {
    size_t total = (size_t)d->n_pending + (size_t)(nb > 0 ? nb : 0);
    unsigned char local[256];
    unsigned char *tmp = total <= sizeof local ? local : malloc(total);
    if (!tmp) return -1;
    memcpy(tmp, d->pending, (size_t)d->n_pending);
    if (nb > 0) memcpy(tmp + d->n_pending, bytes, (size_t)nb);
    size_t rest;
    size_t need = sanitize(tmp, total, final, NULL, &rest);
    if (need > (size_t)(cap > 0 ? cap : 0)) {
        if (tmp != local) free(tmp);
        return need > 0x7fffffff ? -0x7fffffff : -(int)need;
    }
    sanitize(tmp, total, final, out, &rest);
    memcpy(d->pending, tmp + total - rest, rest);
    d->n_pending = (int)rest;
    if (tmp != local) free(tmp);
    return (int)need;
}

int tk_detok_push(tk_detok *d, int id, char *out, int cap) {
    char local[256];
    char *bytes = local;
    int nb = tk_token_to_bytes(d->tok, d->prev_id, id, false, local, sizeof local);
    if (nb < 0) {
        bytes = malloc((size_t)-nb);
        if (!bytes) return -1;
        nb = tk_token_to_bytes(d->tok, d->prev_id, id, false, bytes, -nb);
    }
    int r = detok_emit(d, bytes, nb, false, out, cap);
    if (bytes != local) free(bytes);
    if (r >= 0) d->prev_id = id;
    return r;
}

int tk_detok_flush(tk_detok *d, char *out, int cap) {
    return detok_emit(d, NULL, 0, true, out, cap);
}
