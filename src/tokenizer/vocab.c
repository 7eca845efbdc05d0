/* Vocabulary storage: pieces in one blob, a hash map piece -> id, the merge
 * table, and the accessors of the public API. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define TK_MAX_VOCAB (1 << 24)

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

tk_tokenizer *tk_tok_alloc(void) {
    tk_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->bos = t->eos = t->unk = t->eot = t->eom = t->pad = -1;
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    return t;
}

int tk_vocab_init(tk_tokenizer *t, int n, tk_err *err) {
    if (n <= 0) return tk_err_set(err, "vocabulary is empty");
    if (n > TK_MAX_VOCAB) return tk_err_set(err, "vocabulary size %d is too large (max %d)", n, TK_MAX_VOCAB);
    t->n_vocab = n;
    t->off = malloc((size_t)n * sizeof *t->off);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->score = calloc((size_t)n, sizeof *t->score);
    t->type = calloc((size_t)n, sizeof *t->type);
    t->blob_cap = (size_t)n * 8 + 64;
    t->blob = malloc(t->blob_cap);
    if (!t->off || !t->len || !t->score || !t->type || !t->blob)
        return tk_err_set(err, "out of memory for a vocabulary of %d pieces", n);
    for (int i = 0; i < n; i++) t->off[i] = SIZE_MAX;
    t->blob_len = 0;
    return 0;
}

bool tk_vocab_is_set(const tk_tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab && t->off[id] != SIZE_MAX;
}

int tk_vocab_set(tk_tokenizer *t, int id, const char *s, size_t len, float score, int type,
                 tk_err *err) {
    if (id < 0 || id >= t->n_vocab)
        return tk_err_set(err, "token id %d out of range (vocabulary size %d)", id, t->n_vocab);
    if (len > (1u << 20)) return tk_err_set(err, "token %d: piece is %zu bytes long", id, len);
    if (t->blob_len + len + 1 > t->blob_cap) {
        size_t nc = t->blob_cap * 2;
        while (nc < t->blob_len + len + 1) nc *= 2;
        char *nb = realloc(t->blob, nc);
        if (!nb) return tk_err_set(err, "out of memory storing the vocabulary");
        t->blob = nb;
        t->blob_cap = nc;
    }
    memcpy(t->blob + t->blob_len, s, len);
    t->blob[t->blob_len + len] = 0;
    t->off[id] = t->blob_len;
    t->len[id] = (uint32_t)len;
    t->score[id] = score;
    t->type[id] = type;
    t->blob_len += len + 1;
    return 0;
}

int tk_vocab_find(const tk_tokenizer *t, const char *s, size_t len) {
    if (!t->map) return -1;
    uint32_t i = (uint32_t)hash_bytes(s, len) & t->map_mask;
    for (;;) {
        int32_t id = t->map[i];
        if (id < 0) return -1;
        if (t->len[id] == len && memcmp(t->blob + t->off[id], s, len) == 0) return id;
        i = (i + 1) & t->map_mask;
    }
}

int tk_vocab_finish(tk_tokenizer *t, bool dup_error, tk_err *err) {
    /* holes (ids nobody defined) become empty, unused pieces */
    for (int i = 0; i < t->n_vocab; i++) {
        if (t->off[i] == SIZE_MAX) {
            if (tk_vocab_set(t, i, "", 0, 0.0f, TK_TOKEN_UNUSED, err)) return -1;
        }
    }
    uint32_t cap = 16;
    while (cap < (uint32_t)t->n_vocab * 2u) cap <<= 1;
    free(t->map);
    t->map = malloc((size_t)cap * sizeof *t->map);
    if (!t->map) return tk_err_set(err, "out of memory for the piece map");
    memset(t->map, 0xff, (size_t)cap * sizeof *t->map);
    t->map_mask = cap - 1;
    t->max_piece_len = 0;
    for (int id = 0; id < t->n_vocab; id++) {
        const char *s = t->blob + t->off[id];
        size_t n = t->len[id];
        if ((int)n > t->max_piece_len) t->max_piece_len = (int)n;
        if (n == 0) continue; /* empty pieces never match */
        uint32_t i = (uint32_t)hash_bytes(s, n) & t->map_mask;
        bool dup = false;
        for (;;) {
            int32_t o = t->map[i];
            if (o < 0) break;
            if (t->len[o] == n && memcmp(t->blob + t->off[o], s, n) == 0) {
                if (dup_error)
                    return tk_err_set(err, "duplicate token in vocabulary: '%.*s' has ids %d and %d",
                                      (int)(n > 64 ? 64 : n), s, o, id);
                dup = true;
                break;
            }
            i = (i + 1) & t->map_mask;
        }
        if (!dup) t->map[i] = id;
    }
    /* byte table */
    for (int b = 0; b < 256; b++) {
        int id = -1;
        if (t->byte_level) {
            char u[4];
            int n = tk_utf8_encode(tk_byte_to_cp((unsigned char)b), u);
            id = tk_vocab_find(t, u, (size_t)n);
        } else {
            char hex[8];
            static const char digits[] = "0123456789ABCDEF";
            hex[0] = '<'; hex[1] = '0'; hex[2] = 'x';
            hex[3] = digits[b >> 4]; hex[4] = digits[b & 15]; hex[5] = '>';
            id = tk_vocab_find(t, hex, 6);
            if (id < 0) {
                char c = (char)b;
                id = tk_vocab_find(t, &c, 1);
            }
        }
        t->byte_id[b] = id;
    }
    return 0;
}

/* ---- merges ---- */

int tk_merges_init(tk_tokenizer *t, int n, tk_err *err) {
    if (n < 0 || n > (1 << 26)) return tk_err_set(err, "bad merge count %d", n);
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2u + 2u) cap <<= 1;
    t->mkey = malloc((size_t)cap * sizeof *t->mkey);
    t->mval = malloc((size_t)cap * sizeof *t->mval);
    size_t ln = n > 0 ? (size_t)n : 1;
    t->merge_l = malloc(ln * sizeof *t->merge_l);
    t->merge_r = malloc(ln * sizeof *t->merge_r);
    t->merge_res = malloc(ln * sizeof *t->merge_res);
    if (!t->mkey || !t->mval || !t->merge_l || !t->merge_r || !t->merge_res)
        return tk_err_set(err, "out of memory for %d merges", n);
    memset(t->mkey, 0xff, (size_t)cap * sizeof *t->mkey);
    t->mmask = cap - 1;
    t->n_merges = 0;
    return 0;
}

int tk_merges_add(tk_tokenizer *t, int32_t l, int32_t r, int32_t res, bool keep_first) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    uint32_t i = (uint32_t)hash_u64(key) & t->mmask;
    while (t->mkey[i] != UINT64_MAX) {
        if (t->mkey[i] == key) {
            if (keep_first) return 0;
            /* later duplicate wins: move the pair to the new rank */
            int rank = t->n_merges;
            t->merge_l[rank] = l;
            t->merge_r[rank] = r;
            t->merge_res[rank] = res;
            t->merge_l[t->mval[i]] = -1; /* the old rank is dead */
            t->mval[i] = rank;
            t->n_merges++;
            return 0;
        }
        i = (i + 1) & t->mmask;
    }
    int rank = t->n_merges++;
    t->mkey[i] = key;
    t->mval[i] = rank;
    t->merge_l[rank] = l;
    t->merge_r[rank] = r;
    t->merge_res[rank] = res;
    return 1;
}

int tk_merges_find(const tk_tokenizer *t, int32_t l, int32_t r, int32_t *res) {
    if (!t->mkey) return -1;
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    uint32_t i = (uint32_t)hash_u64(key) & t->mmask;
    while (t->mkey[i] != UINT64_MAX) {
        if (t->mkey[i] == key) {
            int rank = t->mval[i];
            *res = t->merge_res[rank];
            return rank;
        }
        i = (i + 1) & t->mmask;
    }
    return -1;
}

/* ---- special tokens / EOG ---- */

int tk_eog_add(tk_tokenizer *t, int id) {
    if (id < 0 || id >= t->n_vocab) return 0;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 0;
    int32_t *n = realloc(t->eog, (size_t)(t->n_eog + 1) * sizeof *n);
    if (!n) return -1;
    t->eog = n;
    t->eog[t->n_eog++] = id;
    return 0;
}

static int cmp_special(const void *a, const void *b) {
    const tk_special *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int tk_special_sort(tk_tokenizer *t) {
    if (t->n_spec > 1) qsort(t->spec, (size_t)t->n_spec, sizeof *t->spec, cmp_special);
    memset(t->spec_first, 0, sizeof t->spec_first);
    for (int i = 0; i < t->n_spec; i++)
        if (t->spec[i].len > 0) t->spec_first[(unsigned char)t->blob[t->off[t->spec[i].id]]] = true;
    return 0;
}

static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "<|end_of_text|>", "<end_of_utterance>", NULL};
static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", NULL};

int tk_finalize_specials(tk_tokenizer *t, bool from_types, tk_err *err) {
    if (t->eot < 0) {
        for (int k = 0; eot_texts[k] && t->eot < 0; k++) {
            int id = tk_vocab_find(t, eot_texts[k], strlen(eot_texts[k]));
            if (id >= 0) t->eot = id;
        }
    }
    if (t->eom < 0) t->eom = tk_vocab_find(t, "<|eom_id|>", 10);
    for (int k = 0; eog_texts[k]; k++) {
        int id = tk_vocab_find(t, eog_texts[k], strlen(eog_texts[k]));
        if (id >= 0 && tk_eog_add(t, id)) return tk_err_set(err, "out of memory");
    }
    if (tk_eog_add(t, t->eos) || tk_eog_add(t, t->eot) || tk_eog_add(t, t->eom))
        return tk_err_set(err, "out of memory");

    if (from_types) {
        int n = 0;
        for (int i = 0; i < t->n_vocab; i++) {
            int ty = t->type[i];
            if ((ty == TK_TOKEN_CONTROL || ty == TK_TOKEN_USER_DEFINED || ty == TK_TOKEN_UNKNOWN) &&
                t->len[i] > 0)
                n++;
        }
        free(t->spec);
        t->spec = NULL;
        t->n_spec = 0;
        if (n > 0) {
            t->spec = calloc((size_t)n, sizeof *t->spec);
            if (!t->spec) return tk_err_set(err, "out of memory for special tokens");
            for (int i = 0; i < t->n_vocab; i++) {
                int ty = t->type[i];
                if ((ty == TK_TOKEN_CONTROL || ty == TK_TOKEN_USER_DEFINED ||
                     ty == TK_TOKEN_UNKNOWN) &&
                    t->len[i] > 0) {
                    tk_special *s = &t->spec[t->n_spec++];
                    s->id = i;
                    s->len = t->len[i];
                    s->special = ty != TK_TOKEN_USER_DEFINED;
                }
            }
        }
    }
    return tk_special_sort(t);
}

/* ---- public accessors ---- */

void tk_tokenizer_free(tk_tokenizer *t) {
    if (!t) return;
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t->map);
    free(t->mkey);
    free(t->mval);
    free(t->merge_l);
    free(t->merge_r);
    free(t->merge_res);
    free(t->eog);
    free(t->spec);
    tk_norm_free(t);
    tk_pretok_free(t);
    free(t);
}

tk_tok_kind tk_tokenizer_kind(const tk_tokenizer *t) { return t->kind; }
int tk_tokenizer_n_vocab(const tk_tokenizer *t) { return t->n_vocab; }
int tk_tokenizer_bos(const tk_tokenizer *t) { return t->bos; }
int tk_tokenizer_eos(const tk_tokenizer *t) { return t->eos; }
bool tk_tokenizer_add_bos(const tk_tokenizer *t) { return t->add_bos && t->bos >= 0; }

bool tk_tokenizer_is_eog(const tk_tokenizer *t, int id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

const char *tk_tokenizer_piece(const tk_tokenizer *t, int id) {
    if (id < 0 || id >= t->n_vocab) return "";
    return t->blob + t->off[id];
}

int tk_tokenizer_token_type(const tk_tokenizer *t, int id) {
    if (id < 0 || id >= t->n_vocab) return 0;
    return t->type[id];
}

int tk_tokenizer_find(const tk_tokenizer *t, const char *piece) {
    return tk_vocab_find(t, piece, strlen(piece));
}
