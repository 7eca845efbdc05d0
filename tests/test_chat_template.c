/* Chat templates: the real templates shipped with the shared models and
 * the format templates in tests/data/chat_templates/, rendered for several
 * conversations and compared with expected text (produced by Python's jinja2
 * configured as Hugging Face's apply_chat_template, and checked by eye
 * against each published format); syntax and runtime errors; limits on
 * hostile templates; a mutation fuzz for crashes (run under ASan). */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>
#include "tk_test.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* tests/data/chat_templates/<name>, located from this source file's path */
static char *load_data_template(const char *name) {
    char path[1024];
    const char *slash = strrchr(__FILE__, '/');
    int dir = slash ? (int)(slash - __FILE__) : 1;
    snprintf(path, sizeof path, "%.*s/data/chat_templates/%s", dir, slash ? __FILE__ : ".", name);
    return read_file(path);
}

static char *load_config_template(const char *rel) {
    json_error_t jerr;
    json_t *cfg = json_load_file(tk_shared(rel), JSON_DECODE_INT_AS_REAL, &jerr); /* model_max_length overflows int64 */
    if (!cfg) return NULL;
    const char *t = json_string_value(json_object_get(cfg, "chat_template"));
    char *s = t ? strdup(t) : NULL;
    json_decref(cfg);
    return s;
}

static char *load_template(const char *name) {
    if (!strcmp(name, "llama3")) return load_config_template("tokenizers/llama3/tokenizer_config.json");
    if (!strcmp(name, "code-target (llama2)")) return load_config_template("models/code-target/tokenizer_config.json");
    return load_data_template(name);
}

typedef struct conv {
    const char *name;
    tk_chat_msg m[4];
    int n;
} conv;

static const conv CONVS[] = {
    {"user", {{"user", "Hello!"}}, 1},
    {"system_user", {{"system", "You are terse."}, {"user", "What is 2+2?"}}, 2},
    {"multi_turn", {{"user", "Hi"}, {"assistant", "Hello! How can I help?"}, {"user", "Tell me a joke."}}, 3},
    {"system_multi", {{"system", "Be kind.\nAlways."}, {"user", "Hi"}, {"assistant", "Hey."}, {"user", "Bye"}}, 4},
    {"ends_with_assistant", {{"user", "Ping"}, {"assistant", "Pong"}}, 2},
    {"whitespace_unicode",
     {{"user", "  Ünïcödé — “quotes” 'single' \"double\"\n\tindented\n  "},
      {"assistant", "\n<think>hmm, 2+2</think>\nSure: 日本語 🎉  "},
      {"user", "{{ not a template }} {% raw %} \\n"}},
     3},
    {"two_systems", {{"system", "First."}, {"system", "Second."}, {"user", "Go"}}, 3},
    {"non_alternating", {{"user", "one"}, {"user", "two"}}, 2},
};

static const conv *find_conv(const char *name) {
    for (int i = 0; i < N(CONVS); i++)
        if (!strcmp(CONVS[i].name, name)) return &CONVS[i];
    return NULL;
}

/* parse + render; NULL on error (message in err) */
static char *render(const char *src, const tk_chat_msg *m, int n, bool agp, tk_err *err) {
    tk_chat_template *t = NULL;
    char *out = NULL;
    err->msg[0] = 0;
    if (tk_chat_template_parse(src, &t, err) == 0) {
        if (tk_chat_template_render(t, m, n, agp, "<s>", "</s>", &out, err) != 0) out = NULL;
        tk_chat_template_free(t);
    }
    return out;
}

static char *render_simple(const char *src, tk_err *err) {
    return render(src, CONVS[3].m, CONVS[3].n, true, err);
}

/* with a conversation of 1 MB, so the step limit is at its cap (it grows with the input) */
static char *render_big_input(const char *src, tk_err *err) {
    size_t len = 1000000;
    char *content = malloc(len + 1);
    memset(content, 'a', len);
    content[len] = 0;
    tk_chat_msg m = {"user", content};
    char *out = render(src, &m, 1, true, err);
    free(content);
    return out;
}

static const struct {
    const char *tmpl, *conv;
    bool agp;
    const char *want;
} EXPECT[] = {
    {"llama3", "user", true,
     "<s><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"},
    {"llama3", "system_multi", false,
     "<s><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "Be kind.\n"
        "Always.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "Hey.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"},
    {"code-target (llama2)", "system_multi", true,
     "<s>[INST] <<SYS>>\n"
        "Be kind.\n"
        "Always.\n"
        "<</SYS>>\n"
        "\n"
        "Hi [/INST] Hey. </s><s>[INST] Bye [/INST]"},
    {"code-target (llama2)", "multi_turn", false,
     "<s>[INST] Hi [/INST] Hello! How can I help? </s><s>[INST] Tell me a joke. [/INST]"},
    {"code-target (llama2)", "whitespace_unicode", false,
     "<s>[INST] Ünïcödé — “quotes” 'single' \"double\"\n"
        "\tindented [/INST] <think>hmm, 2+2</think>\n"
        "Sure: 日本語 🎉 </s><s>[INST] {{ not a template }} {% raw %} \\n [/INST]"},
    {"chatml.jinja", "user", true,
     "<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>assistant\n"},
    {"chatml.jinja", "system_multi", false,
     "<|im_start|>system\n"
        "Be kind.\n"
        "Always.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Hey.<|im_end|>\n"
        "<|im_start|>user\n"
        "Bye<|im_end|>\n"},
    {"mistral_v1.jinja", "multi_turn", false,
     "<s>[INST] Hi [/INST]Hello! How can I help?</s>[INST] Tell me a joke. [/INST]"},
    {"mistral_v3.jinja", "system_multi", false,
     "<s>[INST] Hi[/INST] Hey.</s>[INST] Be kind.\n"
        "Always.\n"
        "\n"
        "Bye[/INST]"},
    {"mistral_v3.jinja", "multi_turn", true,
     "<s>[INST] Hi[/INST] Hello! How can I help?</s>[INST] Tell me a joke.[/INST]"},
    {"mistral_v7.jinja", "user", true,
     "<s>[SYSTEM_PROMPT]You are a helpful assistant created by Mistral AI.\n"
        "The current date is 2024-07-26.\n"
        "\n"
        "When you're not sure about some information, you say so.[/SYSTEM_PROMPT][INST]Hello![/INST]"},
    {"mistral_v7.jinja", "system_multi", false,
     "<s>[SYSTEM_PROMPT]Be kind.\n"
        "Always.[/SYSTEM_PROMPT][INST]Hi[/INST]Hey.</s>[INST]Bye[/INST]"},
    {"gemma.jinja", "system_multi", true,
     "<s><start_of_turn>user\n"
        "Be kind.\n"
        "Always.\n"
        "\n"
        "Hi<end_of_turn>\n"
        "<start_of_turn>model\n"
        "Hey.<end_of_turn>\n"
        "<start_of_turn>user\n"
        "Bye<end_of_turn>\n"
        "<start_of_turn>model\n"},
    {"gemma.jinja", "ends_with_assistant", false,
     "<s><start_of_turn>user\n"
        "Ping<end_of_turn>\n"
        "<start_of_turn>model\n"
        "Pong<end_of_turn>\n"},
    {"zephyr.jinja", "system_user", true,
     "<|system|>\n"
        "You are terse.</s>\n"
        "<|user|>\n"
        "What is 2+2?</s>\n"
        "<|assistant|>\n"},
    {"zephyr.jinja", "multi_turn", false,
     "<|user|>\n"
        "Hi</s>\n"
        "<|assistant|>\n"
        "Hello! How can I help?</s>\n"
        "<|user|>\n"
        "Tell me a joke.</s>\n"},
    {"phi3.jinja", "system_multi", true,
     "<|system|>\n"
        "Be kind.\n"
        "Always.<|end|>\n"
        "<|user|>\n"
        "Hi<|end|>\n"
        "<|assistant|>\n"
        "Hey.<|end|>\n"
        "<|user|>\n"
        "Bye<|end|>\n"
        "<|assistant|>\n"},
    {"phi3.jinja", "user", false,
     "<|user|>\n"
        "Hello!<|end|>\n"
        "</s>"},
    {"deepseek.jinja", "two_systems", true,
     "<s>First.\n"
        "\n"
        "Second.<｜User｜>Go<｜Assistant｜><think>\n"},
    {"deepseek.jinja", "whitespace_unicode", false,
     "<s><｜User｜>  Ünïcödé — “quotes” 'single' \"double\"\n"
        "\tindented\n"
        "  <｜Assistant｜>\n"
        "Sure: 日本語 🎉  <｜end▁of▁sentence｜><｜User｜>{{ not a template }} {% raw %} \\n"},
};

static void test_expected(void) {
    for (int i = 0; i < N(EXPECT); i++) {
        char *src = load_template(EXPECT[i].tmpl);
        if (!src) {
            printf("skip %s: template not found\n", EXPECT[i].tmpl);
            continue;
        }
        const conv *cv = find_conv(EXPECT[i].conv);
        tk_err err;
        char *out = render(src, cv->m, cv->n, EXPECT[i].agp, &err);
        CHECK(out != NULL, "%s / %s: %s", EXPECT[i].tmpl, EXPECT[i].conv, err.msg);
        if (out) CHECK(!strcmp(out, EXPECT[i].want), "%s / %s:\n got: [%s]\nwant: [%s]", EXPECT[i].tmpl, EXPECT[i].conv, out, EXPECT[i].want);
        free(out);
        free(src);
    }
}

/* Templates that enforce alternating roles fail with their own message. */
static void test_raise_exception(void) {
    static const struct {
        const char *tmpl, *msg;
    } cases[] = {
        {"code-target (llama2)", "Conversation roles must alternate user/assistant/user/assistant/..."},
        {"mistral_v1.jinja", "Conversation roles must alternate user/assistant/user/assistant/..."},
        {"gemma.jinja", "Conversation roles must alternate user/assistant/user/assistant/..."},
        {"mistral_v3.jinja", "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."},
    };
    const conv *bad = find_conv("non_alternating");
    for (int i = 0; i < N(cases); i++) {
        char *src = load_template(cases[i].tmpl);
        if (!src) continue;
        tk_err err;
        char *out = render(src, bad->m, bad->n, false, &err);
        CHECK(out == NULL, "%s accepted non-alternating roles", cases[i].tmpl);
        CHECK(!strcmp(err.msg, cases[i].msg), "%s: got '%s'", cases[i].tmpl, err.msg);
        free(out);
        free(src);
    }
    tk_err err;
    char *out = render_simple("a{% if true %}{{ raise_exception('custom: ' ~ messages|length) }}{% endif %}", &err);
    CHECK(out == NULL && !strcmp(err.msg, "custom: 4"), "raise_exception: %s", err.msg);
    free(out);
}

/* Syntax errors name the line and column where they were found. */
static void test_syntax_errors(void) {
    static const struct {
        const char *src, *where, *what;
    } cases[] = {
        {"{{ 1 + }}", "line 1, column 8", "unexpected '}}'"},
        {"ok\n  {% if x %}\nbody", "line 3, column 5", "expected 'elif' or 'else' or 'endif' to close 'if' from line 2"},
        {"{% for m in messages %}\n{{ m }}\n", "line 2, column 8", "'endfor'"}, /* the trailing newline is dropped */
        {"a\nb {{ x", "line 2, column 3", "unclosed '{{'"},
        {"{% if x %}\n{% endfor %}{% endif %}", "line 2, column 4", "unexpected tag 'endfor' inside 'if'"},
        {"{% endif %}", "line 1, column 4", "unknown tag 'endif'"},
        {"{{ 'abc }}", "line 1, column 4", "unterminated string"},
        {"{{ f(1, 2 }}", "line 1, column 11", "unexpected '}', expected ')'"},
        {"\n\n   {{ x | nosuchfilter }}", "line 3, column 11", "no filter named 'nosuchfilter'"},
        {"{{ x is nosuchtest }}", "line 1, column 9", "no test named 'nosuchtest'"},
        {"{% set %}", "line 1, column 8", "expected an expression"},
        {"{% break %}", "line 1, column 4", "'break' outside of a loop"},
        {"{# never closed", "line 1, column 1", "missing end of comment"},
        {"{% raw %}never closed", "line 1, column 1", "missing end of raw"},
        {"{% include 'x' %}", "line 1, column 4", "'include' tag is not supported"},
        {"{{ f(a=1, 2) }}", "line 1, column 11", "positional argument follows keyword argument"},
        {"{{ 'caf\xc3\xa9' ~ }}", "line 1, column 13", "unexpected '}}'"}, /* columns count characters */
    };
    for (int i = 0; i < N(cases); i++) {
        tk_chat_template *t = NULL;
        tk_err err = {{0}};
        int r = tk_chat_template_parse(cases[i].src, &t, &err);
        CHECK(r == -1 && t == NULL, "parsed: %s", cases[i].src);
        CHECK(strstr(err.msg, cases[i].where) != NULL, "'%s': want %s in: %s", cases[i].src, cases[i].where, err.msg);
        CHECK(strstr(err.msg, cases[i].what) != NULL, "'%s': want '%s' in: %s", cases[i].src, cases[i].what, err.msg);
        tk_chat_template_free(t);
    }
}

static void test_runtime_errors(void) {
    static const struct {
        const char *src, *what;
    } cases[] = {
        {"{{ foo.bar }}", "line 1: 'foo' is undefined"},
        {"x\n{{ messages[9].role }}", "line 2: list object has no element 9"},
        {"{{ 1 / 0 }}", "division by zero"},
        {"{{ 'a' + 1 }}", "can only concatenate str"},
        {"{% for x in none %}{% endfor %}", "'NoneType' object is not iterable"},
        {"{% set x = 1 %}{% set x.y = 2 %}", "cannot assign attribute on non-namespace object"},
        {"{{ messages.append(1) }}", "unsafe"},
        {"{{ undefined_fn() }}", "'undefined_fn' is undefined"},
        {"{{ 'x' | tojson(indent=[]) }}", "indent"},
    };
    for (int i = 0; i < N(cases); i++) {
        tk_err err;
        char *out = render_simple(cases[i].src, &err);
        CHECK(out == NULL, "rendered: %s", cases[i].src);
        CHECK(strstr(err.msg, cases[i].what) != NULL, "'%s': want '%s' in: %s", cases[i].src, cases[i].what, err.msg);
        free(out);
    }
}

/* Hostile templates stop with an error, in bounded time and memory. */
static void test_limits(void) {
    tk_err err;
    char *out;
    /* deep expression nesting: parse depth limit (no stack overflow) */
    size_t depth = 20000;
    char *deep = malloc(depth * 2 + 16);
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', depth);
    strcpy(deep + 3 + depth, "1");
    memset(deep + 4 + depth, ')', depth);
    strcpy(deep + 4 + 2 * depth, " }}");
    out = render_simple(deep, &err);
    CHECK(out == NULL && strstr(err.msg, "nested too deeply"), "deep parens: %s", err.msg);
    free(out);
    /* deep unary chains and block nesting */
    memset(deep + 3, '-', depth);
    strcpy(deep + 3 + depth, "1 }}");
    out = render_simple(deep, &err);
    CHECK(out == NULL && strstr(err.msg, "nested too deeply"), "deep unary: %s", err.msg);
    free(out);
    free(deep);
    char *blocks = malloc(5000 * 13 + 1), *bp = blocks;
    for (int i = 0; i < 5000; i++, bp += 13) memcpy(bp, "{% if true %}", 13);
    *bp = 0;
    out = render_simple(blocks, &err);
    CHECK(out == NULL && strstr(err.msg, "nested too deeply"), "deep blocks: %s", err.msg);
    free(out);
    free(blocks);

    static const struct {
        const char *src, *what;
    } cases[] = {
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loop iterations"},
        {"{% for i in range(1000000000) %}{% endfor %}", "range too big"},
        {"{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "size limit"},
        {"{{ 'x' * 10000000000 }}", "limit"},
        {"{% set ns = namespace(s='xy') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "limit"},
        {"{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "limit"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion too deep"},
        {"{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested too deeply"},
        {"{{ 2 ** 64 }}", "integer overflow"},
        /* output buffers of nested macro calls count toward the memory limit */
        {"{% macro f(n) %}{{ 'x' * 20000000 }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "memory limit"},
        /* repeated scans of a big string count toward the work limit */
        {"{% set s = 'x' * 20000000 %}{% for i in range(1000) %}{% for j in range(1000) %}{% if 'y' in s %}{% endif %}"
         "{% endfor %}{% endfor %}", "work limit"},
        {"{% set s = 'x' * 20000000 %}{% for i in range(1000) %}{% for j in range(1000) %}{{ s | length }}"
         "{% endfor %}{% endfor %}", "work limit"},
    };
    for (int i = 0; i < N(cases); i++) {
        out = render_simple(cases[i].src, &err);
        CHECK(out == NULL, "no error: %s", cases[i].src);
        CHECK(strstr(err.msg, cases[i].what) != NULL, "'%s': want '%s' in: %s", cases[i].src, cases[i].what, err.msg);
        free(out);
    }
    /* the step limit: 100000 plus the conversation's size, capped at 10^6 (a hostile template
     * with a short conversation stops after 10^5 iterations, a long conversation may be looped over) */
    const char *loops = "{% for i in range(400) %}{% for j in range(1000) %}{% endfor %}{% endfor %}done";
    out = render_simple(loops, &err);
    CHECK(out == NULL && strstr(err.msg, "limit of 1000"), "short input, 400000 iterations: %s", out ? out : err.msg);
    free(out);
    out = render_big_input(loops, &err);
    CHECK(out && !strcmp(out, "done"), "1 MB input, 400000 iterations: %s", out ? out : err.msg);
    free(out);
    out = render_big_input("{% for c in messages[0].content %}{% endfor %}done", &err);
    CHECK(out && !strcmp(out, "done"), "a loop over every character of 1 MB: %s", out ? out : err.msg);
    free(out);
    out = render_big_input("{% for i in range(1000) %}{% for j in range(1001) %}{% endfor %}{% endfor %}", &err);
    CHECK(out == NULL && strstr(err.msg, "limit of 1000000 loop"), "cap: %s", out ? out : err.msg);
    free(out);
    /* a namespace cycle and a 100000-deep list are fine, and freed
     * (LeakSanitizer checks that in the sanitizer build) */
    out = render_simple("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me.me is defined }}", &err);
    CHECK(out && !strcmp(out, "True"), "cycle: %s", out ? out : err.msg);
    free(out);
    out = render_simple("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                        "{{ ns.x | length }}{{ ns.x == ns.x }}", &err);
    CHECK(out && !strcmp(out, "1True"), "deep list: %s", out ? out : err.msg);
    free(out);
}

/* Every walk over values is capped in depth, and every operation that loops
 * or allocates is charged to the work budget, so these end quickly: with the
 * right (Python) result where one exists, else with a clear error. */
static void test_work_budget(void) {
    tk_err err;
    char *out;
    static const struct {
        const char *src, *what;
    } errs[] = {
        /* hashing a 900000-deep tuple used to recurse off the stack */
        {"{% set ns = namespace(t=()) %}{% for j in range(9) %}{% for i in range(100000) %}{% set ns.t = (ns.t,) %}"
         "{% endfor %}{% endfor %}{{ ns.t in {} }}", "nested too deeply to hash"},
        {"{% set ns = namespace(t=()) %}{% for i in range(100000) %}{% set ns.t = (ns.t,) %}{% endfor %}"
         "{{ {ns.t: 1} }}", "nested too deeply to hash"},
        {"{% set ns = namespace(a=[], b=[]) %}{% for i in range(100000) %}{% set ns.a = [ns.a] %}{% set ns.b = [ns.b] %}"
         "{% endfor %}{{ ns.a == ns.b }}", "nested too deeply to compare"},
        {"{% set ns = namespace(a=[], b=[]) %}{% for i in range(100000) %}{% set ns.a = [ns.a] %}{% set ns.b = [ns.b] %}"
         "{% endfor %}{{ [ns.a] < [ns.b] }}", "nested too deeply to compare"},
        /* shared structure: 2^60 element visits for ==, <, hashing and list.count */
        {"{% set ns = namespace(a=[], b=[]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
         "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}", "work limit"},
        {"{% set ns = namespace(a=[], b=[]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
         "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ [ns.a, 1] < [ns.b, 0] }}", "work limit"},
        {"{% set ns = namespace(t=()) %}{% for i in range(60) %}{% set ns.t = (ns.t, ns.t) %}{% endfor %}"
         "{{ ns.t in {} }}", "work limit"},
        {"{% set ns = namespace(a=[], b=[]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
         "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ [ns.a].count(ns.b) }}", "work limit"},
        /* quadratic or repeated scans of a big list */
        {"{% set l = range(100000) | list %}{% for i in range(10000) %}{{ l.count(-1) }}{% endfor %}", "work limit"},
        {"{% set l = range(100000) | list %}{% for i in range(10000) %}{{ l.index(99999) }}{% endfor %}", "work limit"},
        {"{% set l = range(100000) | list %}{% for i in range(10000) %}{{ -1 in l }}{% endfor %}", "work limit"},
        {"{{ range(100000) | unique | length }}", "work limit"},
        {"{% set l = range(100000) | list %}{% for i in range(100000) %}{{ l | sum }}{% endfor %}", "work limit"},
        {"{% set l = range(100000) | list %}{% for i in range(100000) %}{{ l | select('none') | list }}{% endfor %}", "work limit"},
        {"{% set l = range(100000) | list %}{% for i in range(100000) %}{{ l | max }}{% endfor %}", "work limit"},
        /* repeated scans of a big string, and temporary buffers */
        {"{% set s = 'ab' * 1000000 %}{% for i in range(10000) %}{{ s.strip(s) }}{% endfor %}", "work limit"},
        {"{% set s = ' ' * 10000000 %}{% for i in range(10000) %}{{ s | trim }}{% endfor %}", "work limit"},
        {"{% for i in range(100000) %}{{ '' | indent(10000000) }}{% endfor %}", "work limit"},
        /* backward searches compare up to len(sub) bytes per position */
        {"{% set s = 'a' * 1000000 %}{% set t = 'a' * 500000 ~ 'b' %}{{ s.rfind(t) }}", "work limit"},
        {"{% set s = 'a' * 1000000 %}{% set t = 'a' * 500000 ~ 'b' %}{{ s.rsplit(t) }}", "work limit"},
        {"{% set p = ('x',) * 1000000 %}{% for i in range(1000) %}{{ 'y'.startswith(p) }}{% endfor %}", "work limit"},
    };
    for (int i = 0; i < N(errs); i++) {
        out = render_big_input(errs[i].src, &err);
        CHECK(out == NULL, "no error: %s", errs[i].src);
        CHECK(strstr(err.msg, errs[i].what) != NULL, "'%s': want '%s' in: %s", errs[i].src, errs[i].what, err.msg);
        free(out);
    }
    /* dict lookups scan the keys: charged (a 2000-key literal, looked up 10^5 times) */
    size_t cap = 64 * 1024, n = 0;
    char *src = malloc(cap);
    n += (size_t)snprintf(src + n, cap - n, "{%% set d = {");
    for (int i = 0; i < 2000; i++) n += (size_t)snprintf(src + n, cap - n, "%s%d: %d", i ? ", " : "", i, i);
    snprintf(src + n, cap - n, "} %%}{%% for i in range(100000) %%}{{ d.get(-1) }}{%% endfor %%}");
    out = render_simple(src, &err);
    CHECK(out == NULL && strstr(err.msg, "work limit"), "dict lookups: %s", out ? "no error" : err.msg);
    free(out);
    free(src);
    /* repeating nothing a huge number of times is instant, as in Python */
    out = render_simple("{{ '' * 9000000000000000000 }}|{{ 9000000000000000000 * '' }}|{{ 'ab' * 0 }}|"
                        "{{ [] * 9000000000000000000 }}{{ () * 9000000000000000000 }}{{ [1, 2] * 0 }}", &err);
    CHECK(out && !strcmp(out, "|||[]()[]"), "empty repeat: %s", out ? out : err.msg);
    free(out);
}

static void test_variables(void) {
    tk_err err;
    tk_chat_template *t;
    char *out = NULL;
    tk_chat_msg m[] = {{"user", NULL}, {NULL, "x"}};
    CHECK(tk_chat_template_parse("{{ bos_token is defined }}|{{ eos_token }}|{{ messages[0].content is none }}"
                                 "|{{ messages[1].role }}|{{ add_generation_prompt }}|{{ tools is defined }}|{{ messages | length }}",
                                 &t, &err) == 0, "%s", err.msg);
    CHECK(tk_chat_template_render(t, m, 2, false, NULL, "</s>", &out, &err) == 0, "%s", err.msg);
    CHECK(out && !strcmp(out, "False|</s>|True|None|False|False|2"), "got %s", out);
    free(out);
    /* a parsed template renders many times, also after a failed render */
    for (int i = 0; i < 3; i++) {
        out = NULL;
        CHECK(tk_chat_template_render(t, NULL, 0, true, "<s>", "</s>", &out, &err) == -1 && out == NULL, "no messages");
        CHECK(strstr(err.msg, "list object has no element 0") != NULL, "got %s", err.msg);
        CHECK(tk_chat_template_render(t, m, 2, true, "<s>", "</s>", &out, &err) == 0, "%s", err.msg);
        CHECK(out && !strcmp(out, "True|</s>|True|None|True|False|2"), "got %s", out);
        free(out);
    }
    tk_chat_template_free(t);
    out = render_simple("", &err);
    CHECK(out && !strcmp(out, ""), "empty template");
    free(out);
}

/* Random mutations of real templates must parse or fail cleanly, and render
 * or fail cleanly: never crash (ASan build) or hang. */
static void test_fuzz(void) {
    static const char *const names[] = {"chatml.jinja", "mistral_v3.jinja", "gemma.jinja", "llama31.jinja",
                                        "deepseek.jinja", "synthetic_features.jinja", "zephyr.jinja"};
    static const char *const pieces[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[", "]", "'", "\"",
                                         "|", ".", "~", " if ", " for ", " endfor ", " endif ", " in ", "loop",
                                         "ns.", "\n", "\\", "*", "**", "[::-1]", "namespace(", "range(99)", "\xff"};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int parsed = 0, rendered = 0, total = 0;
    for (int f = 0; f < N(names); f++) {
        char *src = load_template(names[f]);
        if (!src) continue;
        size_t len = strlen(src);
        for (int it = 0; it < 300; it++) {
            char *mut = malloc(len + 64 * 16 + 1);
            memcpy(mut, src, len + 1);
            size_t n = len;
            int edits = 1 + (int)((rng >> 60) & 7);
            for (int e = 0; e < edits; e++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                size_t pos = n ? (size_t)(rng >> 33) % n : 0;
                const char *p = pieces[(rng >> 20) % N(pieces)];
                if ((rng >> 10) & 1) { /* delete a span */
                    size_t k = (rng >> 40) % 8;
                    if (pos + k > n) k = n - pos;
                    memmove(mut + pos, mut + pos + k, n - pos - k + 1);
                    n -= k;
                } else { /* insert a piece */
                    size_t k = strlen(p);
                    memmove(mut + pos + k, mut + pos, n - pos + 1);
                    memcpy(mut + pos, p, k);
                    n += k;
                }
            }
            tk_chat_template *t = NULL;
            tk_err err;
            total++;
            if (tk_chat_template_parse(mut, &t, &err) == 0) {
                parsed++;
                char *out = NULL;
                const conv *cv = &CONVS[it % N(CONVS)];
                if (tk_chat_template_render(t, cv->m, cv->n, it & 1, "<s>", "</s>", &out, &err) == 0) rendered++;
                free(out);
                tk_chat_template_free(t);
            } else {
                CHECK(strstr(err.msg, "line ") != NULL, "syntax error without position: %s", err.msg);
            }
            free(mut);
        }
        free(src);
    }
    printf("fuzz: %d mutants, %d parsed, %d rendered\n", total, parsed, rendered);
    CHECK(total == 0 || parsed > 0, "no mutant parsed");
}

/* A set cancel flag stops the render at its next step or charged scan;
 * an unset one changes nothing. */
static void test_cancel(void) {
    static const char *const srcs[] = {
        "{% for i in range(1000) %}{{ i }}{% endfor %}",
        "{% set s = 'x' * 1000 %}{{ 'y' in s }}",
        "{% macro f() %}a{% endmacro %}{{ f() }}",
    };
    for (int i = 0; i < N(srcs); i++) {
        tk_chat_template *t = NULL;
        tk_err err;
        CHECK(tk_chat_template_parse(srcs[i], &t, &err) == 0, "%s: %s", srcs[i], err.msg);
        atomic_bool cancel = false;
        char *out = NULL;
        CHECK(tk_chat_template_render_cancellable(t, NULL, 0, true, "<s>", "</s>", &cancel, &out, &err) == 0,
              "%s: %s", srcs[i], err.msg);
        free(out);
        atomic_store(&cancel, true);
        out = NULL;
        CHECK(tk_chat_template_render_cancellable(t, NULL, 0, true, "<s>", "</s>", &cancel, &out, &err) != 0 &&
                  out == NULL && strstr(err.msg, "cancelled"),
              "%s: not cancelled (%s)", srcs[i], err.msg);
        tk_chat_template_free(t);
    }
}

int main(void) {
    test_expected();
    test_cancel();
    test_raise_exception();
    test_syntax_errors();
    test_runtime_errors();
    test_limits();
    test_work_budget();
    test_variables();
    test_fuzz();
    TK_TEST_END();
}
