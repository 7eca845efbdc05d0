/* Token masks over a real vocabulary (the 512 tokens of aidreams260K from
 * the shared assets): the input's first byte picks GBNF or regex, the
 * source runs to the first NUL, and each byte after it (at most 32) picks
 * one of the allowed tokens, which the state then advances by.  At every
 * state the precomputed table's mask must equal the plain trie walk's
 * (when both end without a bound), and every mask ends within the
 * per-mask step bound. */
#include "fuzz.h"

#include "grammar/grammar.h"

static tk_tokenizer *tok;
static tk_gvocab vocab;

static void close_vocab(void) {
    tk_gvocab_free(&vocab);
    tk_tokenizer_free(tok);
}

static void open_vocab(void) {
    tk_err err;
    if (tk_tokenizer_open(TK_SHARED_DIR "/models/aidreams260K.gguf", NULL, &tok, &err) ||
        tk_gvocab_init(&vocab, tok, &err)) {
        fprintf(stderr, "fuzz_grammar_mask: %s\n", err.msg);
        abort();
    }
    atexit(close_vocab);
}

/* The allowed token picked by `choice` (the choice-th set bit, wrapping). */
static int32_t pick(const uint32_t *mask, int allowed, uint8_t choice) {
    int want = choice % allowed;
    for (int32_t id = 0; id < vocab.n_vocab; id++)
        if ((mask[id >> 5] >> (id & 31)) & 1 && want-- == 0) return id;
    return -1;
}

static void walk(const tk_grammar *g, const tk_gtable *table, const uint8_t *choices, size_t n_choices) {
    size_t words = (size_t)(vocab.n_vocab + 31) / 32;
    uint32_t *plain = malloc(words * 4), *fast = malloc(words * 4);
    tk_gmasker mp = {0}, mt = {.table = table};
    tk_gstate st, scratch = {0};
    tk_err err;
    if (plain && fast && tk_gstate_init(&st, g, &err) == 0) {
        for (size_t i = 0; i <= n_choices && i < 32; i++) {
            int a = tk_gmask_compute(&mp, &vocab, &st, plain, &err);
            int b = table ? tk_gmask_compute(&mt, &vocab, &st, fast, &err) : a;
            if (a < 0 || b < 0) break; /* a bound (either path may meet it first) */
            if (table && (a != b || memcmp(plain, fast, words * 4) != 0)) {
                fprintf(stderr, "fuzz_grammar_mask: table and plain masks differ at step %zu (%d vs %d)\n", i, b, a);
                abort();
            }
            if (i == n_choices || a == 0) break;
            int32_t id = pick(plain, a, choices[i]);
            if (id < 0) abort(); /* a set bit was counted */
            if (vocab.len[id] == 0) break; /* end of generation: the grammar is complete */
            if (tk_gstate_advance_bytes(&st, vocab.blob + vocab.off[id], vocab.len[id], &scratch, &err) != 1) {
                if (strncmp(err.msg, "grammar:", 8) == 0) break; /* a matcher bound */
                fprintf(stderr, "fuzz_grammar_mask: allowed token %d refused\n", id);
                abort();
            }
        }
        tk_gstate_free(&st);
    }
    tk_gstate_free(&scratch);
    tk_gmasker_free(&mp);
    tk_gmasker_free(&mt);
    free(plain);
    free(fast);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!tok) open_vocab();
    const uint8_t *nul = memchr(data + 1, 0, size - 1);
    size_t n = nul ? (size_t)(nul - data) - 1 : size - 1;
    char *src = malloc(n + 1);
    if (!src) return 0;
    memcpy(src, data + 1, n);
    src[n] = 0;
    tk_grammar g;
    tk_err err;
    int rc = data[0] & 1 ? tk_grammar_from_regex(&g, src, &err) : tk_grammar_from_gbnf(&g, src, &err);
    free(src);
    if (rc) return 0;
    tk_gtable *table = NULL;
    if (tk_gtable_build(&table, &g, &vocab, &err) >= 0) {
        const uint8_t *choices = nul ? nul + 1 : data + size;
        walk(&g, table, choices, (size_t)(data + size - choices));
        tk_gtable_free(table);
    }
    tk_grammar_free(&g);
    return 0;
}
