#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct cj_arena_blk {
    cj_arena_blk *next;
    size_t used, cap;
    max_align_t data[];
};

#define CJ_ARENA_BLOCK 16384

void cj_arena_init(cj_arena *a, size_t limit) {
    a->head = NULL;
    a->total = 0;
    a->limit = limit;
}

void *cj_arena_alloc(cj_arena *a, size_t n) {
    const size_t align = sizeof(max_align_t);
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + align - 1) / align * align;
    if (n == 0) n = align;
    cj_arena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > CJ_ARENA_BLOCK ? n : CJ_ARENA_BLOCK;
        if (cap > a->limit || a->total > a->limit - cap) return NULL;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
        a->total += cap;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *cj_arena_strndup(cj_arena *a, const char *s, size_t n) {
    char *p = cj_arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void cj_arena_free(cj_arena *a) {
    cj_arena_blk *b = a->head;
    while (b) {
        cj_arena_blk *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->total = 0;
}
