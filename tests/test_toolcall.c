/* The tool-call parser (src/chat/toolcall.c) on fixed outputs of each
 * format: calls become name + compact arguments JSON, the text before a
 * Hermes call stays content, and hostile or malformed calls (cut off, bad
 * JSON, wrong types, junk after the call, deep nesting, NUL bytes, too many
 * calls) stay content without crashing; the format is detected from real
 * template markers; the streaming hold-back keeps a possible tag start. */
#include <tokamak.h>

#include "tk_test.h"

/* Parses and checks: want_calls calls, the first named name0 with arguments
 * args0, and the content (NULL: none). */
static void expect(tk_tool_format f, const char *text, int want_calls, const char *name0, const char *args0,
                   const char *content) {
    tk_tool_parse p;
    tk_err err;
    int rc = tk_tool_calls_parse(f, text, strlen(text), &p, &err);
    CHECK(rc == 0, "parse ok: %s", text);
    CHECK(p.n_calls == want_calls, "%d calls (want %d) in: %s", p.n_calls, want_calls, text);
    if (want_calls && p.n_calls) {
        CHECK(!strcmp(p.calls[0].name, name0), "name %s (want %s)", p.calls[0].name, name0);
        CHECK(!strcmp(p.calls[0].arguments, args0), "arguments %s (want %s)", p.calls[0].arguments, args0);
    }
    size_t want_len = content ? strlen(content) : 0;
    CHECK(p.content_len == want_len && (!content || !memcmp(text + p.content_off, content, want_len)),
          "content '%.*s' (want '%s')", (int)p.content_len, text + p.content_off, content ? content : "");
    tk_tool_parse_free(&p);
}

static void malformed(tk_tool_format f, const char *text, size_t len) {
    tk_tool_parse p;
    tk_err err;
    int rc = tk_tool_calls_parse(f, text, len, &p, &err);
    CHECK(rc == 0 && p.n_calls == 0 && p.content_off == 0 && p.content_len == len,
          "malformed stays content (%s): %.60s", tk_tool_format_name(f), text);
    tk_tool_parse_free(&p);
}

int main(void) {
    const tk_tool_format H = TK_TOOL_FORMAT_HERMES, L = TK_TOOL_FORMAT_LLAMA3, M = TK_TOOL_FORMAT_MISTRAL,
                         G = TK_TOOL_FORMAT_GEMMA;
    /* Hermes / Qwen */
    expect(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 1,
           "get_weather", "{\"city\":\"Paris\"}", NULL);
    expect(H, "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
              "{\"name\": \"b\", \"arguments\": {\"x\": [1, 2.5, null]}}\n</tool_call>",
           2, "a", "{}", "Let me check.");
    expect(H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"z\": 1, \"a\": 2}}\n", 1, "f", "{\"z\":1,\"a\":2}",
           NULL); /* close tag cut off by the end of generation */
    expect(H, "no calls here", 0, NULL, NULL, "no calls here");
    /* Llama 3.x */
    expect(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 1, "get_weather",
           "{\"city\":\"Oslo\"}", NULL);
    expect(L, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": true}}", 2,
           "a", "{}", NULL);
    expect(L, "The answer is {\"name\": \"x\"}", 0, NULL, NULL, "The answer is {\"name\": \"x\"}");
    /* Mistral */
    expect(M, "[TOOL_CALLS][{\"name\": \"m\", \"arguments\": {\"q\": \"\\u00e9\"}}]", 1, "m", "{\"q\":\"\xc3\xa9\"}",
           NULL);
    expect(M, " [{\"name\": \"m\", \"arguments\": {}}, {\"name\": \"n\", \"arguments\": {}}]", 2, "m", "{}", NULL);
    /* Gemma */
    expect(G, "```tool_code\n{\"name\": \"g\", \"parameters\": {\"n\": 3}}\n```", 1, "g", "{\"n\":3}", NULL);
    expect(G, "{\"name\": \"g\", \"parameters\": {\"n\": 3}}", 1, "g", "{\"n\":3}", NULL);

    /* hostile and malformed: all content, no crash */
    static const char *const bad_h[] = {
        "<tool_call>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
        "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
        "<tool_call>[1, 2]</tool_call>", "<tool_call>{\"name\": \"f\"} trailing</tool_call>",
        "<tool_call>{\"name\": \"f\"}</tool_call> junk after",
        "<tool_call>{\"name\": \"f\", \"arguments\": {}, \"name\": \"g\"}</tool_call>x<tool_call>"};
    for (size_t i = 0; i < sizeof bad_h / sizeof bad_h[0]; i++) malformed(H, bad_h[i], strlen(bad_h[i]));
    static const char *const bad_l[] = {"{", "{\"name\": \"f\", \"parameters\": [1]}", "{\"parameters\": {}}",
                                        "{\"name\": \"f\"} and more", "```json\n{\"name\": \"f\"}"};
    for (size_t i = 0; i < sizeof bad_l / sizeof bad_l[0]; i++) {
        malformed(L, bad_l[i], strlen(bad_l[i]));
        malformed(G, bad_l[i], strlen(bad_l[i]));
    }
    static const char *const bad_m[] = {"[TOOL_CALLS]", "[TOOL_CALLS][]", "[TOOL_CALLS]{\"name\": \"f\"}",
                                        "[TOOL_CALLS][{\"name\": \"f\"}] x", "[1]", "[TOOL_CALLS][{\"name\": \"f\"}, 2]"};
    for (size_t i = 0; i < sizeof bad_m / sizeof bad_m[0]; i++) malformed(M, bad_m[i], strlen(bad_m[i]));
    /* a NUL inside, deep nesting, and more calls than the bound */
    const char nul[] = "<tool_call>{\"name\": \"f\\u0000\", \"arguments\": {}}</tool_call>\0<tool_call>";
    malformed(H, nul, sizeof nul - 1);
    size_t depth = 100000;
    char *deep = malloc(depth * 2 + 64);
    size_t k = (size_t)sprintf(deep, "{\"name\": \"f\", \"parameters\": ");
    for (size_t i = 0; i < depth; i++) deep[k++] = '[';
    for (size_t i = 0; i < depth; i++) deep[k++] = ']';
    deep[k++] = '}';
    malformed(L, deep, k);
    free(deep);
    size_t one = strlen("<tool_call>{\"name\": \"f\"}</tool_call>");
    char *many = malloc(one * 100 + 1);
    for (int i = 0; i < 100; i++) memcpy(many + i * one, "<tool_call>{\"name\": \"f\"}</tool_call>", one);
    malformed(H, many, one * 100);
    free(many);
    for (tk_tool_format f = TK_TOOL_FORMAT_NONE; f <= G; f++) malformed(f, "", 0);
    malformed(TK_TOOL_FORMAT_NONE, "<tool_call>{\"name\": \"f\"}</tool_call>", 36);

    /* detection from template markers, and names */
    char *src = NULL;
    size_t len;
    tk_err err;
    static const struct { const char *file; tk_tool_format want; } tmpl[] = {
        {"tests/data/chat_templates/qwen25.jinja", TK_TOOL_FORMAT_HERMES},
        {"tests/data/chat_templates/mistral_nemo.jinja", TK_TOOL_FORMAT_MISTRAL},
        {"tests/data/chat_templates/llama31.jinja", TK_TOOL_FORMAT_LLAMA3},
        {"tests/data/chat_templates/gemma.jinja", TK_TOOL_FORMAT_GEMMA},
        {"tests/data/chat_templates/zephyr.jinja", TK_TOOL_FORMAT_NONE}};
    for (size_t i = 0; i < sizeof tmpl / sizeof tmpl[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", TK_SOURCE_DIR, tmpl[i].file);
        int rc = tk_read_file(path, &src, &len, &err);
        CHECK(rc == 0, "read %s", path);
        if (rc) continue;
        tk_tool_format got = tk_tool_format_detect(src);
        CHECK(got == tmpl[i].want, "%s: detected %s", tmpl[i].file, tk_tool_format_name(got));
        free(src);
    }
    for (int f = 0; f <= (int)G; f++) CHECK(tk_tool_format_from_name(tk_tool_format_name(f)) == f, "name %d", f);
    CHECK(tk_tool_format_from_name("bogus") == -1 && tk_tool_format_name(99) == NULL, "unknown names");

    /* streaming hold-back */
    CHECK(tk_tool_stream_safe(H, "Hello <tool", 11) == 6, "a tag start is held");
    CHECK(tk_tool_stream_safe(H, "Hello <b>", 9) == 9, "other text flows");
    CHECK(tk_tool_stream_safe(H, "Hi<tool_call>{", 14) == 2, "a call is held");
    CHECK(tk_tool_stream_safe(L, "  {\"na", 6) == 0, "a JSON start is held");
    CHECK(tk_tool_stream_safe(L, "Sure", 4) == 4, "prose flows");
    CHECK(tk_tool_stream_safe(M, "[TOOL", 5) == 0, "a Mistral tag start is held");
    TK_TEST_END();
}
