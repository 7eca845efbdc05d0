/* Rank-based BPE over one pre-tokenized word (GPT-2 / HF tokenizers /
 * llama.cpp llm_tokenizer_bpe): initial symbols are the word's byte-level
 * characters (or UTF-8 characters with byte fallback for SentencePiece-style
 * vocabularies), then the adjacent pair with the lowest merge rank is merged
 * (leftmost on ties) until no listed pair remains. */
#include <stdlib.h>
#include <string.h>

#include "../util/heap.h"
#include "tok_internal.h"

typedef struct bsym {
    int32_t id;
    int prev, next;
} bsym;

typedef struct bmerge {
    int32_t rank;
    int left, right;
    int32_t lid, rid, res;
} bmerge;

static bool m_before(const void *pa, const void *pb) {
    const bmerge *a = pa, *b = pb;
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->left < b->left;
}

static int add_pair(const tk_tokenizer *t, bsym *s, int left, int right, tk_heap *h) {
    if (left < 0 || right < 0) return 0;
    int32_t res;
    int rank = tk_merges_find(t, s[left].id, s[right].id, &res);
    if (rank < 0) return 0;
    bmerge m = {rank, left, right, s[left].id, s[right].id, res};
    return tk_heap_push(h, &m);
}

static int grow(void **p, size_t *cap, size_t need) {
    if (*cap >= need) return 0;
    void *n = realloc(*p, need);
    if (!n) return -1;
    *p = n;
    *cap = need;
    return 0;
}

int tk_bpe_encode_word(const tk_tokenizer *t, const char *word, size_t len, tk_ivec *out,
                       tk_scratch *sc, tk_err *err) {
    if (len == 0) return 0;
    if (len > 0x3fffffff) return tk_err_set(err, "word too long (%zu bytes)", len);

    if (t->ignore_merges) {
        int id = -1;
        if (t->byte_level) {
            if (grow(&sc->b, &sc->b_cap, len * 2 + 1)) return tk_err_set(err, "out of memory");
            char *u = sc->b;
            size_t n = 0;
            for (size_t i = 0; i < len; i++)
                n += (size_t)tk_utf8_encode(tk_byte_to_cp((unsigned char)word[i]), u + n);
            id = tk_vocab_find(t, u, n);
        } else {
            id = tk_vocab_find(t, word, len);
        }
        if (id >= 0) return tk_ivec_push(out, id) ? tk_err_set(err, "out of memory") : 0;
    }

    /* initial symbols: at most 4 per byte (byte fallback) */
    if (grow(&sc->a, &sc->a_cap, len * 4 * sizeof(bsym))) return tk_err_set(err, "out of memory");
    bsym *s = sc->a;
    int ns = 0;
    if (t->byte_level) {
        for (size_t i = 0; i < len; i++) {
            int32_t id = t->byte_id[(unsigned char)word[i]];
            if (id < 0) continue; /* llama.cpp drops bytes without a piece */
            s[ns++].id = id;
        }
    } else {
        bool prev_unk = false;
        size_t off = 0;
        while (off < len) {
            int n = tk_utf8_seq_len((const unsigned char *)word + off, len - off);
            if (n <= 0) n = 1;
            int id = tk_vocab_find(t, word + off, (size_t)n);
            if (id >= 0) {
                s[ns++].id = id;
                prev_unk = false;
            } else {
                bool ok = t->byte_fallback;
                for (int j = 0; ok && j < n; j++)
                    if (t->byte_id[(unsigned char)word[off + j]] < 0) ok = false;
                if (ok) {
                    for (int j = 0; j < n; j++) s[ns++].id = t->byte_id[(unsigned char)word[off + j]];
                    prev_unk = false;
                } else if (t->unk >= 0) {
                    if (!(t->fuse_unk && prev_unk)) s[ns++].id = t->unk;
                    prev_unk = true;
                }
            }
            off += (size_t)n;
        }
    }
    for (int i = 0; i < ns; i++) {
        s[i].prev = i - 1;
        s[i].next = i + 1 < ns ? i + 1 : -1;
    }
    tk_heap h;
    tk_heap_init(&h, sizeof(bmerge), m_before);
    for (int i = 1; i < ns; i++)
        if (add_pair(t, s, i - 1, i, &h)) goto oom;
    while (h.n > 0) {
        bmerge m;
        tk_heap_pop(&h, &m);
        bsym *l = &s[m.left], *r = &s[m.right];
        if (l->id != m.lid || l->next != m.right || r->id != m.rid) continue;
        l->id = m.res;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = m.left;
        r->id = -1;
        r->prev = r->next = -2;
        if (add_pair(t, s, l->prev, m.left, &h)) goto oom;
        if (add_pair(t, s, m.left, l->next, &h)) goto oom;
    }
    tk_heap_free(&h);
    for (int i = ns > 0 ? 0 : -1; i >= 0; i = s[i].next)
        if (tk_ivec_push(out, s[i].id)) return tk_err_set(err, "out of memory");
    return 0;
oom:
    tk_heap_free(&h);
    return tk_err_set(err, "out of memory");
}
