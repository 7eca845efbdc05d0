/* Test hook (not a ctest, not in the hot path): prints the allowed-token
 * mask at each step of a token path, for differential tests against other
 * grammar engines (tests/python/test_grammar_mask.py).
 *   grammar_mask TOKENIZER regex|gbnf|json|json_schema SOURCE [TOKEN_ID ... | -]
 * (json ignores SOURCE: any object; json_schema's SOURCE is the schema text)
 * The first line is "eog" and the end-of-generation ids; then line i lists
 * the allowed ids (ascending) after the first i path tokens;
 * a path token the grammar rejects ends the output with "rejected ID".
 * With the single path argument "-" the ids come from stdin, one a line, each
 * mask flushed before the next id is read (a caller can choose the path from
 * the masks as it goes).
 * The masks come from the grammar's table (tk_gtable); each is checked equal
 * to the plain trie walk's (exit 1 if not). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "grammar/grammar.h"

/* The next path token from argv (from index *next) or, for "-", from stdin;
 * false at the end of the path. */
static bool next_token(int argc, char **argv, int *next, int *id) {
    if (*next >= argc) return false;
    if (strcmp(argv[*next], "-") == 0) {
        char line[32];
        if (!fgets(line, sizeof line, stdin)) return false;
        *id = atoi(line);
        return true;
    }
    *id = atoi(argv[(*next)++]);
    return true;
}

static int compile(tk_grammar *g, const char *kind, const char *src, tk_err *err) {
    if (strcmp(kind, "regex") == 0) return tk_grammar_from_regex(g, src, err);
    if (strcmp(kind, "gbnf") == 0) return tk_grammar_from_gbnf(g, src, err);
    if (strcmp(kind, "json") == 0) return tk_grammar_json_object(g, err);
    if (strcmp(kind, "json_schema") == 0) return tk_grammar_from_json_schema(g, src, strlen(src), err);
    return tk_err_set(err, "unknown grammar kind '%s' (regex, gbnf, json, json_schema)", kind);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENIZER regex|gbnf|json|json_schema SOURCE [TOKEN_ID ... | -]\n", argv[0]);
        return 2;
    }
    tk_err err = {{0}};
    tk_tokenizer *t;
    tk_gvocab v;
    tk_grammar g;
    tk_gstate st, scratch = {0};
    tk_gmasker m = {0}, plain = {0};
    tk_gtable *table = NULL;
    if (tk_tokenizer_open(argv[1], NULL, &t, &err) || tk_gvocab_init(&v, t, &err) || compile(&g, argv[2], argv[3], &err) ||
        tk_gstate_init(&st, &g, &err) || tk_gtable_build(&table, &g, &v, &err) < 0) {
        fprintf(stderr, "grammar_mask: %s\n", err.msg);
        return 1;
    }
    if (!table) fprintf(stderr, "grammar_mask: table over budget, plain path only\n");
    m.table = table;
    size_t words = (size_t)((v.n_vocab + 31) / 32);
    uint32_t *mask = malloc(sizeof(uint32_t) * words), *check = malloc(sizeof(uint32_t) * words);
    if (!mask || !check) return 1;
    printf("eog");
    for (int i = 0; i < v.n_eog; i++) printf(" %d", v.eog[i]);
    printf("\n");
    for (int next = 4;;) {
        int n = tk_gmask_compute(&m, &v, &st, mask, &err);
        if (n < 0 || tk_gmask_compute_plain(&plain, &v, &st, check, &err) != n) {
            fprintf(stderr, "grammar_mask: %s\n", n < 0 ? err.msg : "table and plain masks differ");
            return 1;
        }
        if (memcmp(mask, check, sizeof(uint32_t) * words) != 0) {
            fprintf(stderr, "grammar_mask: table and plain masks differ\n");
            return 1;
        }
        for (int id = 0; id < v.n_vocab; id++)
            if ((mask[id >> 5] >> (id & 31)) & 1) printf("%d ", id);
        printf("\n");
        fflush(stdout);
        int id;
        if (!next_token(argc, argv, &next, &id)) break;
        char buf[TK_GVOCAB_MAX_TOKEN_BYTES];
        int k = id >= 0 && id < v.n_vocab ? tk_token_to_bytes(t, -1, id, false, buf, (int)sizeof buf) : 0;
        if (k <= 0 || tk_gstate_advance_bytes(&st, (const uint8_t *)buf, k, &scratch, &err) != 1) {
            printf("rejected %d\n", id);
            break;
        }
    }
    free(mask);
    free(check);
    tk_gmasker_free(&m);
    tk_gmasker_free(&plain);
    tk_gtable_free(table);
    tk_gstate_free(&st);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);
    tk_gvocab_free(&v);
    tk_tokenizer_free(t);
    return 0;
}
