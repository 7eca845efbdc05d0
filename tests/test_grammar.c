/* Grammar compilers and the byte-level matcher: accept / reject strings,
 * hostile grammars rejected with an error. */
#include <string.h>

#include "grammar/grammar.h"
#include "grammar_feed.h"
#include "tk_test.h"

#include <tokamak.h>

/* 1: s is a prefix of some sentence. */
static int prefix_ok(const tk_grammar *g, const char *s) {
    bool accepting;
    return grammar_feed(g, s, &accepting);
}

typedef struct gcase {
    const char *grammar;
    const char *accept[6];
    const char *reject[6];
} gcase;

static const gcase cases[] = {
    {"root ::= \"yes\" | \"no\"", {"yes", "no"}, {"", "ye", "yesno", "No"}},
    {"root ::= [a-c]+ \"!\"", {"a!", "abcabc!"}, {"!", "ad!", "a"}},
    {"root ::= [^\"\\\\]* # comment\n", {"", "abc", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}, {"\"", "a\\b", "\xc3", "\xed\xa0\x80"}},
    {"root ::= x{2,3}\nx ::= \"ab\"", {"abab", "ababab"}, {"ab", "abababab", "aba"}},
    {"root ::= [0-9]{3}", {"123"}, {"12", "1234", "12a"}},
    {"root ::= [0-9]{2,}", {"12", "12345"}, {"1", ""}},
    {"root ::= (\"a\" | \"b\")? \"c\"", {"c", "ac", "bc"}, {"abc", "a"}},
    {"root ::= \"(\" root \")\" | \"\"", {"", "()", "((()))"}, {"(", "(()", ")("}},
    {"root ::= obj\nobj ::= \"{\" ws ( pair ( \",\" ws pair )* )? \"}\"\npair ::= str ws \":\" ws str ws\n"
     "str ::= \"\\\"\" [a-z]* \"\\\"\"\nws ::= [ \\t\\n]*",
     {"{}", "{\"a\": \"b\"}", "{\"a\":\"b\",  \"c\" : \"\"}"}, {"{", "{\"a\"}", "{\"a\":\"b\",}"}},
    {"root ::= \"\\x41\\u00e9\\n\" .", {"A\xc3\xa9\nz", "A\xc3\xa9\n\xe2\x82\xac"}, {"A\xc3\xa9\n", "A\xc3\xa9\nzz"}},
    {"root ::= [\\u0100-\\U0010FFFF]", {"\xc4\x80", "\xf4\x8f\xbf\xbf", "\xef\xbf\xbf"}, {"\xc3\xbf", "a"}},
};

static const char *const hostile[] = {
    "",                                  /* no root */
    "root ::= foo",                      /* undefined rule */
    "root ::= \"a\"\nroot ::= \"b\"",    /* defined twice */
    "root ::= \"abc",                    /* unterminated literal */
    "root ::= [a-",                      /* unterminated class */
    "root ::= [z-a]",                    /* range out of order */
    "root ::= \"a\"{1001}",              /* repetition over the limit */
    "root ::= \"a\"{3,2}",               /* n < m */
    "root ::= \"\\q\"",                  /* unknown escape */
    "root ::= \"\\uD800\"",              /* surrogate */
    "root ::= (\"a\"",                   /* unclosed group */
    "root \"a\"",                        /* no ::= */
    "root ::= \"\xff\"",                 /* invalid UTF-8 */
};

typedef struct rcase {
    const char *pattern;
    const char *accept[6];
    const char *reject[6];
} rcase;

static const rcase regexes[] = {
    {"^[a-z]+@[a-z]+\\.(com|org)$", {"bob@example.com", "a@b.org"}, {"bob@example.net", "@a.com", "A@b.com"}},
    {"\\d{3}-\\d{4}", {"555-1234"}, {"5555-1234", "555-123", "abc-defg"}},
    {"(ab|cd)*e?", {"", "ab", "abcdab", "cde", "e"}, {"a", "abc", "ee"}},
    {"\\w+\\s\\W", {"a_1 !", "x\t."}, {"a b", "a  !"}},
    {"[^0-9]{2,3}", {"ab", "\xc3\xa9x", "abc"}, {"a1", "a", "abcd"}},
    {".+?", {"x", "\xe2\x82\xac"}, {"", "\n"}},
    {"a\\.b\\[\\]", {"a.b[]"}, {"axb[]"}},
};

static const char *const bad_regexes[] = {"(", "a)", "[a-", "a**", "*a", "a{2,1}", "a{1001}", "(?=x)", "\\1", "a^b", "\\p{L}"};

/* The trie-walk mask equals a token-by-token check at each state along a
 * sentence of the grammar fed byte by byte. */
static void mask_differential(const char *tok_path, const tk_grammar *g, const char *path_text) {
    tk_tokenizer *t;
    tk_err err = {{0}};
    if (tk_tokenizer_open(tok_path, NULL, &t, &err)) {
        printf("skip mask test: %s\n", err.msg);
        return;
    }
    tk_gvocab v;
    CHECK(tk_gvocab_init(&v, t, &err) == 0, "%s", err.msg);
    tk_gstate st, scratch = {0}, probe = {0};
    tk_gmasker m = {0};
    CHECK(tk_gstate_init(&st, g, &err) == 0, "%s", err.msg);
    uint32_t *mask = calloc((size_t)(v.n_vocab + 31) / 32, 4);
    size_t n = strlen(path_text);
    for (size_t pos = 0; pos <= n; pos++) {
        int allowed = tk_gmask_compute(&m, &v, &st, mask, &err);
        CHECK(allowed > 0, "%s at %zu: %s", tok_path, pos, err.msg);
        int mismatches = 0, count = 0;
        for (int id = 0; id < v.n_vocab; id++) {
            bool want;
            if (tk_tokenizer_is_eog(t, id)) {
                want = st.accepting;
            } else {
                int ty = tk_tokenizer_token_type(t, id);
                char buf[TK_GVOCAB_MAX_TOKEN_BYTES];
                int k = ty == TK_TOKEN_CONTROL || ty == TK_TOKEN_UNKNOWN || ty == TK_TOKEN_UNUSED
                            ? 0
                            : tk_token_to_bytes(t, -1, id, false, buf, (int)sizeof buf);
                want = k > 0 && tk_gstate_copy(&probe, &st, &err) == 0 &&
                       tk_gstate_advance_bytes(&probe, (const uint8_t *)buf, k, &scratch, &err) == 1;
            }
            bool got = (mask[id >> 5] >> (id & 31)) & 1;
            count += want;
            if (got != want && mismatches++ < 3) fprintf(stderr, "  token %d: mask %d, direct %d\n", id, got, want);
        }
        CHECK(mismatches == 0 && count == allowed, "%s at byte %zu: %d mismatches", tok_path, pos, mismatches);
        if (pos < n) CHECK(tk_gstate_advance(&st, (uint8_t)path_text[pos], &scratch, &err) == 1, "path byte %zu", pos);
    }
    CHECK(st.accepting, "path is a sentence");
    free(mask);
    tk_gmasker_free(&m);
    tk_gstate_free(&st);
    tk_gstate_free(&scratch);
    tk_gstate_free(&probe);
    tk_gvocab_free(&v);
    tk_tokenizer_free(t);
}

/* Grammars for the table-vs-plain comparison: JSON, regexes, recursive GBNF. */
typedef struct tgrammar {
    const char *kind; /* "json", "regex", "gbnf" */
    const char *src;
} tgrammar;

static const tgrammar table_grammars[] = {
    {"json", NULL},
    {"regex", "[a-z]+@[a-z]+\\.(com|org)"},
    {"regex", "\\d{3}-\\d{4}( ext \\d{1,4})?"},
    {"regex", "(ab|cd)*e?[^x]{0,5}"},
    {"regex", "\\{\"id\": [1-9][0-9]{0,4}, \"ok\": (true|false)\\}"},
    {"gbnf", "root ::= \"(\" root \")\" | \"\""},
    {"gbnf", "root ::= expr\nexpr ::= term ( [ ]? [-+*/] [ ]? term )*\nterm ::= [0-9]+ | \"(\" expr \")\""},
    {"gbnf", "root ::= list\nlist ::= \"[\" ( item ( \", \" item )* )? \"]\"\nitem ::= list | [a-z\\u00e0-\\u00ff]+ | \"\\\"\" [^\"]* \"\\\"\""},
    {"gbnf", "root ::= ( line \"\\n\" )+\nline ::= [A-Z] [a-z ]* ( \":\" ws [0-9]+ )?\nws ::= [ \\t]{0,3}"},
};

static int compile_tgrammar(const tgrammar *tg, tk_grammar *g, tk_err *err) {
    if (strcmp(tg->kind, "json") == 0) return tk_grammar_json_object(g, err);
    if (strcmp(tg->kind, "regex") == 0) return tk_grammar_from_regex(g, tg->src, err);
    return tk_grammar_from_gbnf(g, tg->src, err);
}

/* The table's masks equal the plain trie walk's at every state along random
 * token paths (each step a token drawn from the allowed set).  The plain
 * walk is itself checked token by token above. */
static void table_vs_plain(const char *tok_path, int paths, int steps) {
    tk_tokenizer *t;
    tk_err err = {{0}};
    if (tk_tokenizer_open(tok_path, NULL, &t, &err)) {
        printf("skip table test: %s\n", err.msg);
        return;
    }
    tk_gvocab v;
    CHECK(tk_gvocab_init(&v, t, &err) == 0, "%s", err.msg);
    size_t words = (size_t)(v.n_vocab + 31) / 32;
    uint32_t *plain = calloc(words, 4), *fast = calloc(words, 4);
    int32_t *allowed_ids = malloc(sizeof(int32_t) * (size_t)v.n_vocab);
    uint32_t rng = 12345;
    for (size_t gi = 0; gi < sizeof(table_grammars) / sizeof(table_grammars[0]); gi++) {
        tk_grammar g;
        CHECK(compile_tgrammar(&table_grammars[gi], &g, &err) == 0, "grammar %zu: %s", gi, err.msg);
        tk_gtable *table;
        CHECK(tk_gtable_build(&table, &g, &v, &err) == 0 && table, "grammar %zu: table not built: %s", gi, err.msg);
        tk_gmasker mp = {0}, mt = {.table = table};
        int compared = 0, dependent_tokens = 0;
        for (int p = 0; p < paths; p++) {
            tk_gstate st, scratch = {0};
            CHECK(tk_gstate_init(&st, &g, &err) == 0, "%s", err.msg);
            for (int step = 0; step <= steps; step++) {
                int a = tk_gmask_compute(&mp, &v, &st, plain, &err);
                uint64_t before = mt.steps;
                int b = tk_gmask_compute(&mt, &v, &st, fast, &err);
                dependent_tokens += mt.steps != before;
                CHECK(a >= 0 && a == b && memcmp(plain, fast, words * 4) == 0,
                      "%s grammar %zu path %d step %d: plain %d, table %d allowed", tok_path, gi, p, step, a, b);
                compared++;
                if (gi == 0 && p == 0 && step < 10) { /* each stack alone: a state holding part of a group */
                    tk_gstate one = {0};
                    for (int off = 0; off < st.n_data; off += 1 + st.data[off]) {
                        CHECK(tk_gstate_from_stack(&one, &g, st.data + off + 1, st.data[off], &err) == 0, "%s", err.msg);
                        int c = tk_gmask_compute(&mp, &v, &one, plain, &err), d = tk_gmask_compute(&mt, &v, &one, fast, &err);
                        CHECK(c >= 0 && c == d && memcmp(plain, fast, words * 4) == 0, "%s step %d, one stack: %d vs %d",
                              tok_path, step, c, d);
                    }
                    tk_gstate_free(&one);
                    if (tk_gmask_compute(&mp, &v, &st, plain, &err) < 0) break;
                }
                int n = 0;
                for (int i = 0; i < v.n_order; i++) {
                    int id = v.order[i];
                    if ((plain[id >> 5] >> (id & 31)) & 1) allowed_ids[n++] = id;
                }
                if (n == 0 || step == steps) break;
                rng = rng * 1664525u + 1013904223u;
                int id = allowed_ids[(rng >> 8) % (uint32_t)n];
                CHECK(tk_gstate_advance_bytes(&st, v.blob + v.off[id], v.len[id], &scratch, &err) == 1,
                      "allowed token %d advances", id);
            }
            tk_gstate_free(&st);
            tk_gstate_free(&scratch);
        }
        CHECK(compared > paths, "grammar %zu: %d states compared", gi, compared);
        /* JSON states inside strings have tokens running past the string: the runtime check was used */
        if (gi == 0) CHECK(dependent_tokens > 0, "JSON: the dependent-token path was exercised");
        tk_gmasker_free(&mp);
        tk_gmasker_free(&mt);
        tk_gtable_free(table);
        tk_grammar_free(&g);
    }
    {
        /* past its budgets the build gives up and the plain path is used */
        tk_grammar g;
        CHECK(tk_grammar_json_object(&g, &err) == 0, "%s", err.msg);
        tk_gtable *table = (tk_gtable *)&g; /* must be reset to NULL */
        CHECK(tk_gtable_build_limits(&table, &g, &v, 1000, TK_GTABLE_MAX_BYTES, &err) == 1 && !table, "step budget");
        table = (tk_gtable *)&g;
        CHECK(tk_gtable_build_limits(&table, &g, &v, TK_GTABLE_MAX_STEPS, 4096, &err) == 1 && !table, "memory budget");
        tk_gmasker m = {.table = NULL};
        tk_gstate st;
        CHECK(tk_gstate_init(&st, &g, &err) == 0 && tk_gmask_compute(&m, &v, &st, plain, &err) > 0, "plain path");
        tk_gstate_free(&st);
        tk_gmasker_free(&m);
        tk_grammar_free(&g);
    }
    {
        /* a regex whose every byte takes ~40k expansion steps (a nullable
         * group of 100 empty alternatives repeated 355 times) made one mask
         * of a 32k vocabulary take 114 s; past the mask's step bound it is an
         * error, by the table path as by the plain one */
        char hostile[200];
        int k = snprintf(hostile, sizeof hostile, ".+(");
        for (int i = 0; i < 100; i++) hostile[k++] = i == 50 ? 'T' : '|';
        snprintf(hostile + k, sizeof hostile - (size_t)k, "~||){355}");
        tk_grammar g;
        CHECK(tk_grammar_from_regex(&g, hostile, &err) == 0, "%s", err.msg);
        tk_gtable *table = NULL;
        int built = tk_gtable_build(&table, &g, &v, &err);
        CHECK(built >= 0, "hostile regex's table: %s", err.msg);
        tk_gmasker m = {.table = table};
        tk_gstate st;
        CHECK(tk_gstate_init(&st, &g, &err) == 0, "%s", err.msg);
        err.msg[0] = 0;
        CHECK(tk_gmask_compute(&m, &v, &st, plain, &err) == -1 && strstr(err.msg, "token mask took over"),
              "hostile regex's mask (table %s): %s", table ? "built" : "not built", err.msg);
        tk_gstate_free(&st);
        tk_gmasker_free(&m);
        tk_gtable_free(table);
        tk_grammar_free(&g);
    }
    free(plain);
    free(fast);
    free(allowed_ids);
    tk_gvocab_free(&v);
    tk_tokenizer_free(t);
}

int main(void) {
    {
        tk_grammar json, name;
        tk_err err = {{0}};
        CHECK(tk_grammar_json_object(&json, &err) == 0, "%s", err.msg);
        CHECK(tk_grammar_from_gbnf(&name, "root ::= \"{\\\"name\\\": \\\"\" [a-z\\u00e0-\\u00ff]+ \"\\\"}\"", &err) == 0,
              "%s", err.msg);
        const char *toks[] = {"tokenizer-tests/ggml-vocab-llama-spm.gguf", "tokenizers/llama3/tokenizer.json"};
        for (int i = 0; i < 2; i++) {
            mask_differential(tk_shared(toks[i]), &json, "{\"a\": [1, -2.5e3, {\"b\": \"\xc3\xa9\\n\"}], \"c\":null}");
            mask_differential(tk_shared(toks[i]), &name, "{\"name\": \"\xc3\xa9t\xc3\xa9\"}");
        }
        tk_grammar_free(&json);
        tk_grammar_free(&name);
        table_vs_plain(tk_shared(toks[0]), 4, 30);
        table_vs_plain(tk_shared(toks[1]), 1, 12);
    }

    for (size_t i = 0; i < sizeof(regexes) / sizeof(regexes[0]); i++) {
        tk_grammar g;
        tk_err err = {{0}};
        int rc = tk_grammar_from_regex(&g, regexes[i].pattern, &err);
        CHECK(rc == 0, "regex %zu: %s", i, err.msg);
        if (rc) continue;
        for (int j = 0; j < 6 && regexes[i].accept[j]; j++)
            CHECK(grammar_matches(&g, regexes[i].accept[j]) == 1, "regex %zu should accept \"%s\"", i, regexes[i].accept[j]);
        for (int j = 0; j < 6 && regexes[i].reject[j]; j++)
            CHECK(grammar_matches(&g, regexes[i].reject[j]) == 0, "regex %zu should reject \"%s\"", i, regexes[i].reject[j]);
        tk_grammar_free(&g);
    }
    for (size_t i = 0; i < sizeof(bad_regexes) / sizeof(bad_regexes[0]); i++) {
        tk_grammar g;
        tk_err err = {{0}};
        int rc = tk_grammar_from_regex(&g, bad_regexes[i], &err);
        CHECK(rc == -1 && strncmp(err.msg, "regex:", 6) == 0, "bad regex %s: %s", bad_regexes[i], err.msg);
        if (rc == 0) tk_grammar_free(&g);
    }
    {
        tk_grammar g;
        tk_err err = {{0}};
        CHECK(tk_grammar_json_object(&g, &err) == 0, "%s", err.msg);
        const char *ok[] = {"{}", "{\"a\": [1, -2.5e3, true, null, {\"b\": \"\\u00e9\\n\"}]}", "{ \"x\" : { } }"};
        const char *bad[] = {"[]", "{\"a\"}", "{'a': 1}", "{\"a\": 01}", "{\"a\": \"\x01\"}", "{} x"};
        for (size_t j = 0; j < 3; j++) CHECK(grammar_matches(&g, ok[j]) == 1, "json should accept %s", ok[j]);
        for (size_t j = 0; j < 6; j++) CHECK(grammar_matches(&g, bad[j]) == 0, "json should reject %s", bad[j]);
        tk_grammar_free(&g);
    }

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tk_grammar g;
        tk_err err = {{0}};
        int rc = tk_grammar_from_gbnf(&g, cases[i].grammar, &err);
        CHECK(rc == 0, "case %zu: %s", i, err.msg);
        if (rc) continue;
        for (int j = 0; j < 6 && cases[i].accept[j]; j++)
            CHECK(grammar_matches(&g, cases[i].accept[j]) == 1, "case %zu should accept \"%s\"", i, cases[i].accept[j]);
        for (int j = 0; j < 6 && cases[i].reject[j]; j++)
            CHECK(grammar_matches(&g, cases[i].reject[j]) == 0, "case %zu should reject \"%s\"", i, cases[i].reject[j]);
        tk_grammar_free(&g);
    }

    /* prefixes: a state can be left partial and continue */
    tk_grammar g;
    tk_err err = {{0}};
    CHECK(tk_grammar_from_gbnf(&g, "root ::= \"hello\" [0-9]+", &err) == 0, "%s", err.msg);
    CHECK(prefix_ok(&g, "hel") == 1, "prefix");
    CHECK(prefix_ok(&g, "help") == 0, "non-prefix");
    /* fork: a copied state advances independently */
    tk_gstate a, b = {0}, scratch = {0};
    CHECK(tk_gstate_init(&a, &g, &err) == 0, "%s", err.msg);
    CHECK(tk_gstate_advance_bytes(&a, (const uint8_t *)"hello", 5, &scratch, &err) == 1, "advance");
    CHECK(tk_gstate_copy(&b, &a, &err) == 0, "copy");
    CHECK(tk_gstate_advance(&a, '1', &scratch, &err) == 1 && a.accepting, "a accepts");
    CHECK(!b.accepting, "b unchanged by a's advance");
    CHECK(tk_gstate_advance(&b, 'x', &scratch, &err) == 0 && !b.accepting, "b rejects x, state kept");
    CHECK(tk_gstate_advance(&b, '7', &scratch, &err) == 1 && b.accepting && !tk_gstate_done(&b), "b accepts 7, more possible");
    tk_gstate_free(&a);
    tk_gstate_free(&b);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);

    CHECK(tk_grammar_from_gbnf(&g, "root ::= \"ab\"", &err) == 0, "%s", err.msg);
    CHECK(tk_gstate_init(&a, &g, &err) == 0, "%s", err.msg);
    CHECK(tk_gstate_advance_bytes(&a, (const uint8_t *)"ab", 2, &scratch, &err) == 1 && tk_gstate_done(&a) && a.accepting,
          "complete: only end of generation is left");
    tk_gstate_free(&a);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);

    for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        err.msg[0] = 0;
        int rc = tk_grammar_from_gbnf(&g, hostile[i], &err);
        CHECK(rc == -1 && strncmp(err.msg, "grammar:", 8) == 0, "hostile %zu accepted or unclear error: %s", i, err.msg);
        if (rc == 0) tk_grammar_free(&g);
    }
    /* a cycle that consumes nothing ends where it comes back to a stack
     * already met in the step: A ::= B, B ::= A | "x" is the language {x} */
    CHECK(tk_grammar_from_gbnf(&g, "root ::= a\na ::= root | \"x\"", &err) == 0, "%s", err.msg);
    CHECK(grammar_matches(&g, "x") == 1 && grammar_matches(&g, "xx") == 0, "A ::= B, B ::= A | x");
    tk_grammar_free(&g);
    /* so does a loop over a group that can match nothing: a starred group of
     * 26 empty alternatives took the whole step bound (an error) per byte */
    char empties[400];
    int k = snprintf(empties, sizeof empties, "root ::= (\"=s\"");
    for (int i = 0; i < 26; i++) k += snprintf(empties + k, sizeof empties - (size_t)k, " | \"\"");
    snprintf(empties + k, sizeof empties - (size_t)k, " | \"woot\")* \"1\"");
    CHECK(tk_grammar_from_gbnf(&g, empties, &err) == 0, "%s", err.msg);
    CHECK(grammar_matches(&g, "=swoot=s1") == 1 && grammar_matches(&g, "1") == 1 && grammar_matches(&g, "=s") == 0 &&
              grammar_matches(&g, "wo1") == 0,
          "starred empty alternatives");
    CHECK(tk_gstate_init(&a, &g, &err) == 0 && tk_gstate_advance(&a, '=', &scratch, &err) == 1, "%s", err.msg);
    CHECK(a.expand_steps < 1000, "one byte of the starred empty alternatives: %d expansion steps", a.expand_steps);
    tk_gstate_free(&a);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);
    /* a nullable group of 100 empty alternatives repeated 959 times (from
     * the fuzzer) walked ~96k expansion steps per byte, 1 s of ASan time:
     * past the step bound it is an error at once */
    char repeats[200];
    k = snprintf(repeats, sizeof repeats, ".+(");
    for (int i = 0; i < 100; i++) repeats[k++] = '|';
    snprintf(repeats + k, sizeof repeats - (size_t)k, "~||){959}");
    CHECK(tk_grammar_from_regex(&g, repeats, &err) == 0, "%s", err.msg);
    err.msg[0] = 0;
    int repeat_rc = tk_gstate_init(&a, &g, &err);
    if (repeat_rc == 0) {
        repeat_rc = tk_gstate_advance(&a, 'x', &scratch, &err) == 1 ? 0 : -1;
        tk_gstate_free(&a);
    }
    CHECK(repeat_rc == -1 && strstr(err.msg, "expansion does not terminate"), "nullable group repeated 959 times: %s",
          err.msg);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);
    /* left recursion beside a self-loop: once the repeats are skipped, the
     * expansion goes deep (stacks of ~1000 elements) and the fuzzer's input
     * then asked for 2 GB of pending stacks; the remembered stacks bound it */
    CHECK(tk_grammar_from_gbnf(&g, "root ::= \"\" \"(\" root | root. | root", &err) == 0, "%s", err.msg);
    err.msg[0] = 0;
    CHECK(tk_gstate_init(&a, &g, &err) == -1 && strncmp(err.msg, "grammar:", 8) == 0, "deep left recursion: %s",
          err.msg);
    tk_grammar_free(&g);
    /* non-terminating expansion (each stack new) is an error, not a hang */
    CHECK(tk_grammar_from_gbnf(&g, "root ::= root \"x\" | \"y\"", &err) == 0, "%s", err.msg);
    CHECK(grammar_matches(&g, "yx") == -1, "left recursion is bounded");
    tk_grammar_free(&g);
    /* duplicate stacks are kept once: ("a" | "a")* has as many stacks after
     * 20 a's as after one (each a's two alternatives and the "b"), not 2^n */
    CHECK(tk_grammar_from_gbnf(&g, "root ::= (\"a\" | \"a\")* \"b\"", &err) == 0, "%s", err.msg);
    CHECK(tk_gstate_init(&a, &g, &err) == 0 && tk_gstate_advance(&a, 'a', &scratch, &err) == 1, "%s", err.msg);
    const int after_one = a.n_stacks;
    CHECK(tk_gstate_advance_bytes(&a, (const uint8_t *)"aaaaaaaaaaaaaaaaaaa", 19, &scratch, &err) == 1, "a's");
    CHECK(after_one == 3 && a.n_stacks == after_one, "(a|a)*: %d stacks after one a, %d after 20", after_one,
          a.n_stacks);
    tk_gstate_free(&a);
    tk_grammar_free(&g);
    /* and distinct ones all kept: 1000 alternatives after "a" (the seen
     * index grows from 64 slots to 2048 on the way) */
    char many[16000];
    k = snprintf(many, sizeof many, "root ::= \"a\" (");
    for (int i = 0; i < 1000; i++) k += snprintf(many + k, sizeof many - (size_t)k, "%s\"b%d\"", i ? " | " : "", i);
    snprintf(many + k, sizeof many - (size_t)k, ")");
    CHECK(tk_grammar_from_gbnf(&g, many, &err) == 0, "%s", err.msg);
    CHECK(tk_gstate_init(&a, &g, &err) == 0 && tk_gstate_advance(&a, 'a', &scratch, &err) == 1, "%s", err.msg);
    CHECK(a.n_stacks == 1000, "1000 alternatives: %d stacks", a.n_stacks);
    CHECK(grammar_matches(&g, "ab999") == 1 && grammar_matches(&g, "ab1000") == 0, "the alternatives");
    tk_gstate_free(&a);
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);
    /* deep nesting bounded */
    char deep[600];
    k = snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 200; i++) deep[k++] = '(';
    deep[k] = 0;
    CHECK(tk_grammar_from_gbnf(&g, deep, &err) == -1, "deep nesting refused");
    TK_TEST_END();
}
