/* tk_chat_template_render_json: a conversation given as JSON reaches the
 * template as apply_chat_template passes it (tools as `tools`, undefined
 * without them; a tool call's arguments text parsed into the object; key
 * order kept; numbers, booleans and null typed), and hostile JSON (not an
 * array, malformed, nested past the bound) is an error, not a crash. */
#include <tokamak.h>

#include "tk_test.h"

static char *render(const char *src, const char *msgs, const char *tools, tk_err *err) {
    tk_chat_template *t;
    if (tk_chat_template_parse(src, &t, err)) return NULL;
    char *out = NULL;
    int rc = tk_chat_template_render_json(t, msgs, tools, false, "<s>", "</s>", NULL, &out, err);
    tk_chat_template_free(t);
    return rc ? NULL : out;
}

int main(void) {
    tk_err err;
    const char *src = "{% if tools is defined %}T:{{ tools | tojson }}|{% endif %}"
                      "{% for m in messages %}{{ m.role }}={{ m.content }}"
                      "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments | tojson }} "
                      "{{ c.function.arguments.n + 1 }}]{% endfor %}"
                      "{% if m.tool_call_id is defined %}({{ m.tool_call_id }}){% endif %};{% endfor %}";
    const char *msgs = "[{\"role\": \"user\", \"content\": \"hi\"},"
                       "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": "
                       "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"z\\\": true, \\\"n\\\": 41, "
                       "\\\"x\\\": null}\"}}]},"
                       "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"ok\"}]";
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"b\": 1.5, "
                        "\"a\": [1, \"x\"]}}}]";
    char *out = render(src, msgs, tools, &err);
    CHECK(out != NULL, "renders: %s", err.msg);
    const char *want = "T:[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"b\": 1.5, "
                       "\"a\": [1, \"x\"]}}}]|user=hi;assistant=None[f {\"z\": true, \"n\": 41, \"x\": null} 42];"
                       "tool=ok(c1);";
    CHECK(out && !strcmp(out, want), "got  %s\nwant %s", out ? out : "(null)", want);
    free(out);

    out = render(src, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, &err);
    CHECK(out && !strcmp(out, "user=hi;"), "no tools: undefined (%s)", out ? out : err.msg);
    free(out);
    /* arguments text that is not an object stays text */
    out = render("{{ messages[0].tool_calls[0].function.arguments }}",
                 "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": \"[1\"}}]}]",
                 NULL, &err);
    CHECK(out && !strcmp(out, "[1"), "bad arguments text kept (%s)", out ? out : err.msg);
    free(out);

    static const char *const bad[][2] = {{"{\"role\": \"user\"}", NULL}, {"[", NULL}, {NULL, NULL},
                                         {"[]", "{\"a\": 1}"}, {"[]", "[1,"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = render(src, bad[i][0], bad[i][1], &err);
        CHECK(out == NULL && err.msg[0], "bad JSON %zu refused", i);
        free(out);
    }
    /* nesting past the bound (jansson itself takes up to 2048 levels) */
    char deep[4096];
    size_t k = 0;
    deep[k++] = '[';
    for (int i = 0; i < 200; i++) deep[k++] = '[';
    for (int i = 0; i < 200; i++) deep[k++] = ']';
    deep[k++] = ']';
    deep[k] = 0;
    out = render(src, deep, NULL, &err);
    CHECK(out == NULL && strstr(err.msg, "nested"), "deep JSON refused: %s", err.msg);
    free(out);
    TK_TEST_END();
}
