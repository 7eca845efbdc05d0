/* Test helper (not a ctest): renders a chat template for the differential
 * test against Python's jinja2.  Reads one JSON object on stdin:
 *   {"template": str, "messages": [{"role": str, "content": str|null}...],
 *    "add_generation_prompt": bool, "bos_token": str|null, "eos_token": str|null}
 * and prints the rendering on stdout (exit 0), or the error on stderr (exit 1). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include <tokamak.h>

static const char *opt_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int main(void) {
    json_error_t jerr;
    json_t *in = json_loadf(stdin, 0, &jerr);
    if (!json_is_object(in)) {
        fprintf(stderr, "chat_render: bad JSON input: %s\n", jerr.text);
        return 2;
    }
    const char *src = opt_str(in, "template");
    json_t *jm = json_object_get(in, "messages");
    if (!src || (jm && !json_is_array(jm))) {
        fprintf(stderr, "chat_render: need \"template\" and a \"messages\" array\n");
        return 2;
    }
    size_t n = jm ? json_array_size(jm) : 0;
    tk_chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(jm, i);
        msgs[i].role = opt_str(m, "role");
        msgs[i].content = opt_str(m, "content");
    }
    tk_err err = {{0}};
    tk_chat_template *t = NULL;
    char *out = NULL;
    int rc = 0;
    if (tk_chat_template_parse(src, &t, &err) ||
        tk_chat_template_render(t, msgs, (int)n, json_is_true(json_object_get(in, "add_generation_prompt")),
                                opt_str(in, "bos_token"), opt_str(in, "eos_token"), &out, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        rc = 1;
    } else {
        fputs(out, stdout);
    }
    free(out);
    tk_chat_template_free(t);
    free(msgs);
    json_decref(in);
    return rc;
}
