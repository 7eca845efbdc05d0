/* Bump allocator for a parsed template: the token texts and AST nodes live
 * exactly as long as the template, so they are freed in one go. */
#ifndef TK_CHAT_ARENA_H
#define TK_CHAT_ARENA_H

#include <stddef.h>

typedef struct cj_arena_blk cj_arena_blk;

typedef struct cj_arena {
    cj_arena_blk *head;
    size_t total; /* bytes obtained from malloc so far */
    size_t limit; /* allocation fails beyond this (untrusted input) */
} cj_arena;

void cj_arena_init(cj_arena *a, size_t limit);
/* Zeroed, max_align_t-aligned memory; NULL when out of memory or over the limit. */
void *cj_arena_alloc(cj_arena *a, size_t n);
/* Copies n bytes and appends a NUL. */
char *cj_arena_strndup(cj_arena *a, const char *s, size_t n);
void cj_arena_free(cj_arena *a);

#endif
