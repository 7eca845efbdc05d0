#include "heap.h"

#include <stdlib.h>
#include <string.h>

#define AT(h, i) ((h)->v + (i) * (h)->elem)

int tk_heap_init(tk_heap *h, size_t elem_size, tk_heap_before before) {
    memset(h, 0, sizeof *h);
    if (elem_size == 0 || elem_size > TK_HEAP_MAX_ELEM) return -1;
    h->elem = elem_size;
    h->before = before;
    return 0;
}

int tk_heap_push(tk_heap *h, const void *x) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        unsigned char *nv = realloc(h->v, nc * h->elem);
        if (!nv) return -1;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!h->before(x, AT(h, p))) break;
        memcpy(AT(h, i), AT(h, p), h->elem);
        i = p;
    }
    memcpy(AT(h, i), x, h->elem);
    return 0;
}

void tk_heap_pop(tk_heap *h, void *out) {
    unsigned char last[TK_HEAP_MAX_ELEM];
    memcpy(out, AT(h, 0), h->elem);
    memcpy(last, AT(h, --h->n), h->elem);
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const void *best = last;
        if (l < h->n && h->before(AT(h, l), best)) {
            m = l;
            best = AT(h, l);
        }
        if (r < h->n && h->before(AT(h, r), best)) m = r;
        if (m == i) break;
        memcpy(AT(h, i), AT(h, m), h->elem);
        i = m;
    }
    if (h->n > 0) memcpy(AT(h, i), last, h->elem);
}

void tk_heap_free(tk_heap *h) {
    free(h->v);
    memset(h, 0, sizeof *h);
}
