/* Score-based SentencePiece BPE, as llama.cpp (llm_tokenizer_spm) and
 * llama2.c do it: start from UTF-8 characters, repeatedly merge the adjacent
 * pair whose concatenation is a vocabulary piece with the highest score
 * (leftmost on ties); characters that end up without a piece fall back to
 * <0xNN> byte pieces, then to unk. */
#include <stdlib.h>
#include <string.h>

#include "../util/heap.h"
#include "tok_internal.h"

typedef struct sym {
    int prev, next;
    uint32_t start, n;
} sym;

typedef struct bigram {
    float score;
    int left, right;
    uint32_t size;
} bigram;

/* a before b in the queue: higher score, then smaller left index */
static bool bg_before(const void *pa, const void *pb) {
    const bigram *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}

static int try_add(const tk_tokenizer *t, const char *text, sym *s, int left, int right, tk_heap *h) {
    if (left < 0 || right < 0) return 0;
    uint32_t size = s[left].n + s[right].n;
    int id = tk_vocab_find(t, text + s[left].start, size);
    if (id < 0) return 0;
    bigram b = {t->score[id], left, right, size};
    return tk_heap_push(h, &b);
}

int tk_spm_encode(const tk_tokenizer *t, const char *text, size_t len, tk_ivec *out,
                  tk_scratch *sc, tk_err *err) {
    if (len == 0) return 0;
    if (len > 0x7fffffff) return tk_err_set(err, "text segment too long (%zu bytes)", len);
    /* symbols: one per UTF-8 character (input is valid UTF-8) */
    size_t need = len * sizeof(sym);
    if (sc->a_cap < need) {
        void *p = realloc(sc->a, need);
        if (!p) return tk_err_set(err, "out of memory");
        sc->a = p;
        sc->a_cap = need;
    }
    sym *s = sc->a;
    int ns = 0;
    size_t off = 0;
    while (off < len) {
        int n = tk_utf8_seq_len((const unsigned char *)text + off, len - off);
        if (n <= 0) n = 1;
        s[ns].start = (uint32_t)off;
        s[ns].n = (uint32_t)n;
        s[ns].prev = ns - 1;
        off += (size_t)n;
        s[ns].next = off == len ? -1 : ns + 1;
        ns++;
    }
    tk_heap h;
    tk_heap_init(&h, sizeof(bigram), bg_before);
    for (int i = 1; i < ns; i++)
        if (try_add(t, text, s, i - 1, i, &h)) goto oom;
    while (h.n > 0) {
        bigram b;
        tk_heap_pop(&h, &b);
        sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = b.left;
        if (try_add(t, text, s, l->prev, b.left, &h)) goto oom;
        if (try_add(t, text, s, b.left, l->next, &h)) goto oom;
    }
    tk_heap_free(&h);
    for (int i = 0; i != -1; i = s[i].next) {
        int id = tk_vocab_find(t, text + s[i].start, s[i].n);
        if (id >= 0) {
            if (tk_ivec_push(out, id)) return tk_err_set(err, "out of memory");
            continue;
        }
        /* a character without a piece: its bytes as <0xNN> pieces, or one unk */
        bool bytes_ok = true;
        for (uint32_t j = 0; j < s[i].n; j++)
            if (t->byte_id[(unsigned char)text[s[i].start + j]] < 0) bytes_ok = false;
        if (!bytes_ok) {
            if (t->unk >= 0 && tk_ivec_push(out, t->unk)) return tk_err_set(err, "out of memory");
            continue;
        }
        for (uint32_t j = 0; j < s[i].n; j++)
            if (tk_ivec_push(out, t->byte_id[(unsigned char)text[s[i].start + j]]))
                return tk_err_set(err, "out of memory");
    }
    return 0;
oom:
    tk_heap_free(&h);
    return tk_err_set(err, "out of memory");
}

void tk_scratch_free(tk_scratch *s) {
    free(s->a);
    free(s->b);
    s->a = s->b = NULL;
    s->a_cap = s->b_cap = 0;
}
