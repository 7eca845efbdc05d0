/* A binary min-heap of fixed-size elements ordered by a caller's "before"
 * predicate.  The tokenizers use it as the priority queue of candidate
 * merges (BPE by rank, SentencePiece by score). */
#ifndef TK_HEAP_H
#define TK_HEAP_H

#include <stdbool.h>
#include <stddef.h>

/* Elements are small structs; larger ones are refused by tk_heap_init. */
#define TK_HEAP_MAX_ELEM 64

typedef bool (*tk_heap_before)(const void *a, const void *b);

typedef struct tk_heap {
    unsigned char *v;
    size_t n, cap, elem;
    tk_heap_before before;
} tk_heap;

/* Returns -1 if elem_size is 0 or above TK_HEAP_MAX_ELEM. */
int tk_heap_init(tk_heap *h, size_t elem_size, tk_heap_before before);
/* Returns -1 when out of memory (the heap is unchanged). */
int tk_heap_push(tk_heap *h, const void *x);
/* Removes the first element into out; the heap must not be empty. */
void tk_heap_pop(tk_heap *h, void *out);
void tk_heap_free(tk_heap *h);

#endif
