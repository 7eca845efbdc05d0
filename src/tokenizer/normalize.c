/* Normalizers applied to each text segment (HF Prepend / Replace / NFx /
 * Lowercase; the SentencePiece "add space prefix + escape spaces" of GGUF
 * and llama2.c vocabularies is expressed with the same operations). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tok_internal.h"

/* What the normalizers may make of a text of n bytes: real ones add a
 * prefix, swap a space for a 3-byte mark or decompose (at most 18 code
 * points from one); a chain of Replace steps whose replacements contain
 * what they replace would otherwise grow the text exponentially. */
static size_t expansion_cap(size_t n) { return n > (SIZE_MAX - 4096) / 64 ? SIZE_MAX : 64 * n + 4096; }

static int too_long(size_t cap, tk_err *err) {
    return tk_err_set(err, "the normalizers make the text longer than %zu bytes (64 times its length + 4096)", cap);
}

static int apply(const tk_norm_op *op, const char *s, size_t n, size_t cap, tk_sbuf *o, tk_err *err) {
    o->n = 0;
    switch (op->kind) {
    case TK_NORM_PREPEND:
        if (n > 0 && tk_sbuf_put(o, op->a, op->alen)) goto oom;
        if (tk_sbuf_put(o, s, n)) goto oom;
        return 0;
    case TK_NORM_REPLACE: {
        if (op->alen == 0) return tk_sbuf_put(o, s, n) ? tk_err_set(err, "out of memory") : 0;
        size_t i = 0, from = 0;
        while (i + op->alen <= n) {
            if (memcmp(s + i, op->a, op->alen) == 0) {
                if (o->n + (i - from) + op->blen > cap) return too_long(cap, err);
                if (tk_sbuf_put(o, s + from, i - from) || tk_sbuf_put(o, op->b, op->blen)) goto oom;
                i += op->alen;
                from = i;
            } else {
                i++;
            }
        }
        if (tk_sbuf_put(o, s + from, n - from)) goto oom;
        return 0;
    }
    case TK_NORM_LOWERCASE: {
        size_t i = 0;
        while (i < n) {
            int l = tk_utf8_seq_len((const unsigned char *)s + i, n - i);
            if (l <= 0) l = 1;
            uint32_t cp = tk_utf8_decode((const unsigned char *)s + i, l);
            char u[4];
            int k = tk_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u);
            if (tk_sbuf_put(o, u, (size_t)k)) goto oom;
            i += (size_t)l;
        }
        return 0;
    }
    default: {
        utf8proc_option_t opt = UTF8PROC_STABLE;
        switch (op->kind) {
        case TK_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
        case TK_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
        case TK_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opt);
        if (r < 0) {
            free(dst);
            return tk_err_set(err, "unicode normalization failed: %s", utf8proc_errmsg(r));
        }
        int rc = tk_sbuf_put(o, (const char *)dst, (size_t)r);
        free(dst);
        if (rc) goto oom;
        return 0;
    }
    }
oom:
    return tk_err_set(err, "out of memory");
}

int tk_normalize(const tk_tokenizer *t, const char *text, size_t len, tk_sbuf *out, tk_err *err) {
    out->n = 0;
    if (t->n_norm == 0) return tk_sbuf_put(out, text, len) ? tk_err_set(err, "out of memory") : 0;
    tk_sbuf a = {0};
    if (tk_sbuf_put(&a, text, len)) return tk_err_set(err, "out of memory");
    const size_t cap = expansion_cap(len);
    for (int i = 0; i < t->n_norm; i++) {
        if (apply(&t->norm[i], a.s, a.n, cap, out, err) || (out->n > cap && too_long(cap, err))) {
            free(a.s);
            return -1;
        }
        tk_sbuf tmp = a;
        a = *out;
        *out = tmp;
    }
    /* the result is in a: hand it over */
    free(out->s);
    *out = a;
    return 0;
}

void tk_norm_free(tk_tokenizer *t) {
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->norm);
    t->norm = NULL;
    t->n_norm = 0;
}

int tk_norm_add(tk_tokenizer *t, tk_norm_kind kind, const char *a, size_t alen, const char *b,
                size_t blen, tk_err *err) {
    tk_norm_op *n = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *n);
    if (!n) return tk_err_set(err, "out of memory");
    t->norm = n;
    tk_norm_op *op = &t->norm[t->n_norm];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->a = malloc(alen + 1);
    op->b = malloc(blen + 1);
    if (!op->a || !op->b) {
        free(op->a);
        free(op->b);
        return tk_err_set(err, "out of memory");
    }
    if (alen) memcpy(op->a, a, alen);
    if (blen) memcpy(op->b, b, blen);
    op->a[alen] = op->b[blen] = 0;
    op->alen = alen;
    op->blen = blen;
    t->n_norm++;
    return 0;
}
