#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cj_buf_init(cj_buf *b, size_t limit) {
    b->p = NULL;
    b->n = b->cap = 0;
    b->limit = limit;
    b->acct = NULL;
    b->acct_limit = 0;
    b->work = NULL;
    b->work_limit = 0;
}

int cj_buf_put(cj_buf *b, const void *s, size_t n) {
    if (n > b->limit || b->n > b->limit - n) return -1;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        if (b->acct && cap - b->cap > b->acct_limit - *b->acct) return -1;
        if (b->work && (*b->work += cap - b->cap) > b->work_limit) return -1; /* charged: the render fails */
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        if (b->acct) *b->acct += cap - b->cap;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0; /* always NUL-terminated for the caller's convenience */
    return 0;
}

int cj_buf_putc(cj_buf *b, char c) { return cj_buf_put(b, &c, 1); }

int cj_buf_fill(cj_buf *b, char c, size_t n) {
    char chunk[256];
    memset(chunk, c, sizeof chunk);
    while (n) {
        size_t k = n < sizeof chunk ? n : sizeof chunk;
        if (cj_buf_put(b, chunk, k)) return -1;
        n -= k;
    }
    return 0;
}

int cj_buf_puts(cj_buf *b, const char *s) { return cj_buf_put(b, s, strlen(s)); }

int cj_buf_printf(cj_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return -1;
    if ((size_t)k < sizeof tmp) return cj_buf_put(b, tmp, (size_t)k);
    char *big = malloc((size_t)k + 1);
    if (!big) return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    int r = cj_buf_put(b, big, (size_t)k);
    free(big);
    return r;
}

void cj_buf_free(cj_buf *b) {
    if (b->acct) *b->acct -= b->cap;
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
