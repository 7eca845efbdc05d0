/* Test hook (not a ctest): compiles a JSON Schema and says, for each line of
 * stdin, whether the grammar accepts that line as a whole document
 * (tests/python/test_json_schema_grammar.py).
 *   grammar_accept SCHEMA_JSON < documents
 * Prints "1" or "0" per line; a schema the compiler refuses prints
 * "error: MESSAGE" and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCHEMA_JSON < documents\n", argv[0]);
        return 2;
    }
    tk_err err = {{0}};
    tk_grammar g;
    if (tk_grammar_from_json_schema(&g, argv[1], strlen(argv[1]), &err)) {
        printf("error: %s\n", err.msg);
        return 1;
    }
    tk_gstate st, scratch = {0};
    size_t cap = 0;
    char *line = NULL;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        if (n > 0 && line[n - 1] == '\n') n--;
        if (tk_gstate_init(&st, &g, &err)) {
            printf("error: %s\n", err.msg);
            return 1;
        }
        int rc = tk_gstate_advance_bytes(&st, (const uint8_t *)line, (int)n, &scratch, &err);
        if (rc < 0) {
            printf("error: %s\n", err.msg);
            return 1;
        }
        printf("%d\n", rc == 1 && st.accepting);
        tk_gstate_free(&st);
    }
    free(line);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);
    return 0;
}
