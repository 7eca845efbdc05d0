/* Test hook (not a ctest, not in the hot path): prints the allowed-token
 * mask at each step of a token path, for differential tests against other
 * grammar engines (tests/python/test_grammar_mask.py).
 *   grammar_mask TOKENIZER regex|gbnf|json SOURCE [TOKEN_ID ...]
 * The first line is "eog" and the end-of-generation ids; then line i lists
 * the allowed ids (ascending) after the first i path tokens;
 * a path token the grammar rejects ends the output with "rejected ID". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "grammar/grammar.h"

static int compile(tk_grammar *g, const char *kind, const char *src, tk_err *err) {
    if (strcmp(kind, "regex") == 0) return tk_grammar_from_regex(g, src, err);
    if (strcmp(kind, "gbnf") == 0) return tk_grammar_from_gbnf(g, src, err);
    if (strcmp(kind, "json") == 0) return tk_grammar_json_object(g, err);
    return tk_err_set(err, "unknown grammar kind '%s' (regex, gbnf, json)", kind);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENIZER regex|gbnf|json SOURCE [TOKEN_ID ...]\n", argv[0]);
        return 2;
    }
    tk_err err = {{0}};
    tk_tokenizer *t;
    tk_gvocab v;
    tk_grammar g;
    tk_gstate st, scratch = {0};
    tk_gmasker m = {0};
    if (tk_tokenizer_open(argv[1], NULL, &t, &err) || tk_gvocab_init(&v, t, &err) || compile(&g, argv[2], argv[3], &err) ||
        tk_gstate_init(&st, &g, &err)) {
        fprintf(stderr, "grammar_mask: %s\n", err.msg);
        return 1;
    }
    uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)((v.n_vocab + 31) / 32));
    if (!mask) return 1;
    printf("eog");
    for (int i = 0; i < v.n_eog; i++) printf(" %d", v.eog[i]);
    printf("\n");
    for (int i = 4;; i++) {
        if (tk_gmask_compute(&m, &v, &st, mask, &err) < 0) {
            fprintf(stderr, "grammar_mask: %s\n", err.msg);
            return 1;
        }
        for (int id = 0; id < v.n_vocab; id++)
            if ((mask[id >> 5] >> (id & 31)) & 1) printf("%d ", id);
        printf("\n");
        if (i >= argc) break;
        int id = atoi(argv[i]);
        char buf[TK_GVOCAB_MAX_TOKEN_BYTES];
        int k = id >= 0 && id < v.n_vocab ? tk_token_to_bytes(t, -1, id, false, buf, (int)sizeof buf) : 0;
        if (k <= 0 || tk_gstate_advance_bytes(&st, (const uint8_t *)buf, k, &scratch, &err) != 1) {
            printf("rejected %d\n", id);
            break;
        }
    }
    free(mask);
    tk_gmasker_free(&m);
    tk_gstate_free(&st);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);
    tk_gvocab_free(&v);
    tk_tokenizer_free(t);
    return 0;
}
