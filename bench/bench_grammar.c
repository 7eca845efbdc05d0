/* Grammar micro-benchmark (not a test): build/bench_grammar TOKENIZER
 * Prints the JSON-object grammar's compile time, the JSON Schema compile
 * time of a few realistic schemas, the JSON-object mask table's build time
 * and size, then the token-mask time (median, p99) at every state along a
 * fixed JSON document, plain trie walk and table interleaved (and checked
 * equal), and the table's best of 5 per state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "grammar/grammar.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Realistic schemas: OpenAI-style function parameters, nested objects with
 * arrays and enums, a recursive $ref tree with formats and patterns. */
static const char *const schemas[][2] = {
    {"function parameters",
     "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\",\"description\":\"City and country\"},"
     "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":14},\"hourly\":{\"type\":\"boolean\"}},\"required\":[\"location\",\"unit\"],\"additionalProperties\":false}"},
    {"nested order",
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"customer\":{\"type\":\"object\","
     "\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":100},\"email\":{\"type\":\"string\",\"format\":\"email\"},"
     "\"tier\":{\"enum\":[\"free\",\"pro\",\"enterprise\"]}},\"required\":[\"name\",\"email\"]},\"items\":{\"type\":\"array\","
     "\"minItems\":1,\"maxItems\":50,\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\",\"pattern\":"
     "\"^[A-Z]{3}-[0-9]{4}$\"},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":999},\"price\":{\"type\":\"number\","
     "\"minimum\":0}},\"required\":[\"sku\",\"qty\",\"price\"]}},\"placed\":{\"type\":\"string\",\"format\":\"date-time\"},"
     "\"notes\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"id\",\"customer\",\"items\"]}"},
    {"recursive tree",
     "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"kind\":{\"enum\":[\"file\","
     "\"dir\",\"link\"]},\"size\":{\"type\":\"integer\",\"minimum\":0},\"modified\":{\"type\":\"string\",\"format\":\"date\"},"
     "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}},\"meta\":{\"type\":\"object\","
     "\"additionalProperties\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"number\"}]}}},\"required\":[\"name\",\"kind\"]}},"
     "\"$ref\":\"#/$defs/node\"}"},
};

static int bench_schemas(tk_err *err) {
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        int reps = 100;
        tk_grammar g;
        double t0 = tk_clock_seconds(TK_CLOCK_WALL);
        for (int r = 0; r < reps; r++) {
            if (tk_grammar_from_json_schema(&g, schemas[i][1], strlen(schemas[i][1]), err)) return -1;
            if (r + 1 < reps) tk_grammar_free(&g);
        }
        double t = (tk_clock_seconds(TK_CLOCK_WALL) - t0) / reps;
        printf("json schema '%s' (%zu bytes): %d rules, %d elements, compile %.1f us\n", schemas[i][0], strlen(schemas[i][1]),
               g.n_rules, g.n_el, t * 1e6);
        tk_grammar_free(&g);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER (a .gguf, tokenizer.json or directory)\n", argv[0]);
        return 2;
    }
    static const char doc[] = "{\"name\": \"Ada Lovelace\", \"born\": 1815, \"tags\": [\"math\", \"engines\"], "
                              "\"notes\": {\"first\": true, \"ratio\": -0.25e2}}";
    tk_err err = {{0}};
    tk_tokenizer *t;
    if (tk_tokenizer_open(argv[1], NULL, &t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double t0 = tk_clock_seconds(TK_CLOCK_WALL);
    tk_gvocab v;
    if (tk_gvocab_init(&v, t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double t1 = tk_clock_seconds(TK_CLOCK_WALL);
    tk_grammar g;
    int reps = 100;
    for (int i = 0; i < reps; i++) {
        if (tk_grammar_json_object(&g, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        if (i + 1 < reps) tk_grammar_free(&g);
    }
    double t2 = tk_clock_seconds(TK_CLOCK_WALL);
    printf("vocabulary: %d tokens (%d with bytes), index built in %.1f ms\n", v.n_vocab, v.n_order, (t1 - t0) * 1e3);
    printf("json_object grammar: %d rules, %d elements, compile %.1f us\n", g.n_rules, g.n_el, (t2 - t1) / reps * 1e6);
    if (bench_schemas(&err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    tk_gtable *table = NULL;
    double t3 = tk_clock_seconds(TK_CLOCK_WALL);
    int brc = tk_gtable_build(&table, &g, &v, &err);
    double t4 = tk_clock_seconds(TK_CLOCK_WALL);
    if (brc < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (brc == 1) printf("table: over budget, plain path only\n");
    else printf("table: built in %.1f ms, %.1f MiB\n", (t4 - t3) * 1e3, tk_gtable_bytes(table) / 1048576.0);
    tk_gstate st, scratch = {0};
    tk_gmasker plain = {0}, fast = {.table = table};
    size_t words = (size_t)(v.n_vocab + 31) / 32;
    uint32_t *mask = malloc(sizeof(uint32_t) * words), *mask2 = malloc(sizeof(uint32_t) * words);
    int n = (int)strlen(doc);
    double *ms = malloc(sizeof(double) * (size_t)(n + 1)), *ms2 = malloc(sizeof(double) * (size_t)(n + 1));
    double *best = calloc((size_t)(n + 1), sizeof(double));
    if (!mask || !mask2 || !ms || !ms2 || !best || tk_gstate_init(&st, &g, &err)) return 1;
    long total_allowed = 0;
    /* plain and table interleaved at each state, so both see the same machine load */
    for (int i = 0; i <= n; i++) {
        double a = tk_clock_seconds(TK_CLOCK_WALL);
        int allowed = tk_gmask_compute(&plain, &v, &st, mask, &err);
        double b = tk_clock_seconds(TK_CLOCK_WALL);
        int allowed2 = table ? tk_gmask_compute(&fast, &v, &st, mask2, &err) : allowed;
        double c = tk_clock_seconds(TK_CLOCK_WALL);
        ms[i] = (b - a) * 1e3;
        ms2[i] = (c - b) * 1e3;
        if (allowed < 0 || allowed2 < 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        if (table && (allowed != allowed2 || memcmp(mask, mask2, sizeof(uint32_t) * words) != 0)) {
            fprintf(stderr, "table and plain masks differ at byte %d\n", i);
            return 1;
        }
        total_allowed += allowed;
        /* the table again, best of 5: its cost without the shared machine's preemptions */
        for (int r = 0; table && r < 5; r++) {
            double d = tk_clock_seconds(TK_CLOCK_WALL);
            if (tk_gmask_compute(&fast, &v, &st, mask2, &err) < 0) return 1;
            d = (tk_clock_seconds(TK_CLOCK_WALL) - d) * 1e3;
            if (r == 0 || d < best[i]) best[i] = d;
        }
        if (i < n && tk_gstate_advance(&st, (uint8_t)doc[i], &scratch, &err) != 1) return 1;
    }
    qsort(ms, (size_t)(n + 1), sizeof(double), cmp_double);
    qsort(ms2, (size_t)(n + 1), sizeof(double), cmp_double);
    qsort(best, (size_t)(n + 1), sizeof(double), cmp_double);
    printf("plain mask over %d states: median %.3f ms, p99 %.3f ms, max %.3f ms (mean %ld tokens allowed)\n", n + 1,
           ms[n / 2], ms[(int)(n * 0.99)], ms[n], total_allowed / (n + 1));
    if (table) {
        printf("table mask over %d states: median %.3f ms, p99 %.3f ms, max %.3f ms (same masks)\n", n + 1, ms2[n / 2],
               ms2[(int)(n * 0.99)], ms2[n]);
        printf("table mask, best of 5 per state: median %.3f ms, p99 %.3f ms, max %.3f ms\n", best[n / 2],
               best[(int)(n * 0.99)], best[n]);
    }
    free(ms2);
    free(best);
    free(mask2);
    tk_gmasker_free(&fast);
    tk_gtable_free(table);
    free(ms);
    free(mask);
    tk_gmasker_free(&plain);
    tk_gstate_free(&st);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);
    tk_gvocab_free(&v);
    tk_tokenizer_free(t);
    return 0;
}
