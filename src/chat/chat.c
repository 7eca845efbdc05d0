/* The chat facade over the Jinja interpreter (src/jinja/): parse a chat
 * template once, render it per request (include/tokamak.h, "Chat templates").
 *
 * Semantics follow Hugging Face's apply_chat_template: Jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks on, the
 * loop-controls extension (break/continue), {% generation %}, and the
 * globals raise_exception() and strftime_now() (fixed date here; see
 * builtins.c) plus HF's tojson. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <tokamak.h>

#include "../jinja/arena.h"
#include "../jinja/lexer.h"
#include "../jinja/parser.h"
#include "../jinja/runtime.h"

/* Limits for untrusted templates.  The fuzz build divides the render's size and
 * time limits by CJ_LIMIT_SCALE: an input that reaches one then costs milliseconds
 * instead of a second under the sanitizers, and the fuzzer spends its executions on
 * new paths rather than on filling a budget.  The code that enforces them is the same;
 * tests/test_chat_template.c checks the production values. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define CJ_LIMIT_SCALE 1024
#else
#define CJ_LIMIT_SCALE 1
#endif
#define CJ_MAX_SOURCE (4u << 20)                           /* template text */
#define CJ_MAX_ARENA (64u << 20)                           /* tokens + syntax tree */
#define CJ_MAX_OUTPUT (((size_t)64 << 20) / CJ_LIMIT_SCALE)  /* rendered text, and any one string */
#define CJ_MAX_MEMORY (((size_t)256 << 20) / CJ_LIMIT_SCALE) /* live values */
#define CJ_MAX_WORK (((uint64_t)1 << 29) / CJ_LIMIT_SCALE)   /* bytes allocated or scanned over a render */
/* Loop iterations + macro calls: a base for the template's own loops plus one per byte of
 * messages and tools (loops over the conversation), capped. A hostile template with a small
 * request then costs tens of milliseconds, not the cap's half a second. */
#define CJ_BASE_STEPS (100000 / CJ_LIMIT_SCALE)
#define CJ_MAX_STEPS (1000000 / CJ_LIMIT_SCALE)
#define CJ_MAX_EVAL_DEPTH 1000            /* evaluator recursion (incl. macro calls) */
#define CJ_MAX_JSON_DEPTH 64              /* nesting of messages / tools given as JSON */

struct tk_chat_template {
    cj_arena arena;
    cj_node *root;
};

int tk_chat_template_parse(const char *source, tk_chat_template **out, tk_err *err) {
    *out = NULL;
    if (!source) return tk_err_set(err, "chat template: no source");
    size_t len = strlen(source);
    if (len > CJ_MAX_SOURCE) return tk_err_set(err, "chat template too large (%zu bytes, limit %u)", len, CJ_MAX_SOURCE);
    tk_chat_template *t = calloc(1, sizeof *t);
    if (!t) return tk_err_set(err, "out of memory");
    cj_arena_init(&t->arena, CJ_MAX_ARENA);
    cj_toks toks;
    int r = cj_lex(source, len, &t->arena, &toks, err);
    if (!r) {
        r = cj_parse(&toks, &t->arena, &t->root, err);
        cj_toks_free(&toks);
    }
    if (r) {
        tk_chat_template_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tk_chat_template_free(tk_chat_template *t) {
    if (!t) return;
    cj_arena_free(&t->arena);
    free(t);
}

static int set_str(cj_ctx *c, cj_scope *s, const char *name, const char *value) {
    if (!value) return 0; /* left undefined */
    cj_val v;
    if (cj_new_strz(c, value, &v)) return -1;
    return cj_scope_set(c, s, name, v);
}

static int build_messages(cj_ctx *c, const tk_chat_msg *msgs, int n, cj_val *out) {
    if (cj_new_list(c, (size_t)n, false, out)) return -1;
    for (int i = 0; i < n; i++) {
        cj_val m, k, v;
        if (cj_new_dict(c, CJ_DICT, &m)) return -1;
        if (cj_list_push(c, *out, m)) return -1;
        const char *fields[2][2] = {{"role", msgs[i].role}, {"content", msgs[i].content}};
        for (int f = 0; f < 2; f++) {
            if (cj_new_strz(c, fields[f][0], &k)) return -1;
            if (!fields[f][1]) {
                v = cj_none();
            } else if (cj_new_strz(c, fields[f][1], &v)) {
                cj_unref(c, k);
                return -1;
            }
            if (cj_dict_set(c, m, k, v)) return -1;
        }
    }
    return 0;
}

/* A JSON value as a template value (objects keep their key order). */
static int from_json(cj_ctx *c, json_t *j, int depth, cj_val *out) {
    if (depth > CJ_MAX_JSON_DEPTH) return tk_err_set(c->err, "chat template: JSON nested deeper than %d", CJ_MAX_JSON_DEPTH);
    switch (json_typeof(j)) {
    case JSON_NULL: *out = cj_none(); return 0;
    case JSON_TRUE: *out = cj_bool(true); return 0;
    case JSON_FALSE: *out = cj_bool(false); return 0;
    case JSON_INTEGER: *out = cj_int(json_integer_value(j)); return 0;
    case JSON_REAL: *out = cj_float(json_real_value(j)); return 0;
    case JSON_STRING: return cj_new_str(c, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        if (cj_new_list(c, json_array_size(j), false, out)) return -1;
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) {
            cj_val x;
            if (from_json(c, v, depth + 1, &x) || cj_list_push(c, *out, x)) return -1;
        }
        return 0;
    }
    case JSON_OBJECT: {
        if (cj_new_dict(c, CJ_DICT, out)) return -1;
        const char *key;
        json_t *v;
        json_object_foreach(j, key, v) {
            cj_val k, x;
            if (cj_new_strz(c, key, &k)) return -1;
            if (from_json(c, v, depth + 1, &x)) {
                cj_unref(c, k);
                return -1;
            }
            if (cj_dict_set(c, *out, k, x)) return -1;
        }
        return 0;
    }
    }
    return tk_err_set(c->err, "chat template: unknown JSON value");
}

/* OpenAI clients send a tool call's function.arguments as JSON text;
 * templates (Qwen2.5's "arguments | tojson", Llama 3.1's "arguments |
 * tojson") expect the object, so text that parses as an object is replaced
 * by it, as vLLM does before rendering. */
static void parse_call_arguments(json_t *messages) {
    size_t i, k;
    json_t *m, *call;
    json_array_foreach(messages, i, m) {
        json_array_foreach(json_object_get(m, "tool_calls"), k, call) {
            json_t *fn = json_object_get(call, "function");
            json_t *args = json_object_get(fn, "arguments");
            if (!json_is_string(args)) continue;
            json_t *obj = json_loadb(json_string_value(args), json_string_length(args), JSON_REJECT_DUPLICATES, NULL);
            if (json_is_object(obj)) json_object_set(fn, "arguments", obj);
            json_decref(obj);
        }
    }
}

static int render_vars(const tk_chat_template *t, json_t *messages_json, json_t *tools_json, const tk_chat_msg *msgs,
                       int n_msgs, size_t input_bytes, bool add_generation_prompt, const char *bos_token, const char *eos_token,
                       const atomic_bool *cancel, char **out, tk_err *err);

int tk_chat_template_render_json(const tk_chat_template *t, const char *messages_json, const char *tools_json,
                                 bool add_generation_prompt, const char *bos_token, const char *eos_token,
                                 const atomic_bool *cancel, char **out, tk_err *err) {
    *out = NULL;
    json_error_t je;
    json_t *m = messages_json ? json_loads(messages_json, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!json_is_array(m)) {
        json_decref(m);
        return tk_err_set(err, "chat template: messages must be a JSON array");
    }
    json_t *tools = tools_json ? json_loads(tools_json, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (tools_json && !json_is_array(tools)) {
        json_decref(m);
        json_decref(tools);
        return tk_err_set(err, "chat template: tools must be a JSON array");
    }
    parse_call_arguments(m);
    size_t input_bytes = strlen(messages_json) + (tools_json ? strlen(tools_json) : 0);
    int rc = render_vars(t, m, tools, NULL, 0, input_bytes, add_generation_prompt, bos_token, eos_token, cancel, out, err);
    json_decref(m);
    json_decref(tools);
    return rc;
}

int tk_chat_template_render(const tk_chat_template *t, const tk_chat_msg *msgs, int n_msgs,
                            bool add_generation_prompt, const char *bos_token, const char *eos_token,
                            char **out, tk_err *err) {
    return tk_chat_template_render_cancellable(t, msgs, n_msgs, add_generation_prompt, bos_token, eos_token, NULL,
                                               out, err);
}

int tk_chat_template_render_cancellable(const tk_chat_template *t, const tk_chat_msg *msgs, int n_msgs,
                                        bool add_generation_prompt, const char *bos_token, const char *eos_token,
                                        const atomic_bool *cancel, char **out, tk_err *err) {
    *out = NULL;
    if (n_msgs < 0 || (n_msgs > 0 && !msgs)) return tk_err_set(err, "chat template: bad message list");
    size_t input_bytes = 0;
    for (int i = 0; i < n_msgs; i++)
        input_bytes += (msgs[i].role ? strlen(msgs[i].role) : 0) + (msgs[i].content ? strlen(msgs[i].content) : 0);
    return render_vars(t, NULL, NULL, msgs, n_msgs, input_bytes, add_generation_prompt, bos_token, eos_token, cancel, out, err);
}

/* The render, with the messages as a list (msgs) or as JSON; tools, when
 * given, become the variable "tools" (else it stays undefined). input_bytes
 * (the messages' and tools' size) sets the step limit. */
static int render_vars(const tk_chat_template *t, json_t *messages_json, json_t *tools_json, const tk_chat_msg *msgs,
                       int n_msgs, size_t input_bytes, bool add_generation_prompt, const char *bos_token, const char *eos_token,
                       const atomic_bool *cancel, char **out, tk_err *err) {
    *out = NULL;
    if (!t) return tk_err_set(err, "chat template: not parsed");
    cj_ctx c;
    cj_ctx_init(&c, err);
    c.mem_limit = CJ_MAX_MEMORY;
    c.work_limit = CJ_MAX_WORK;
    c.step_limit = input_bytes < CJ_MAX_STEPS - CJ_BASE_STEPS ? CJ_BASE_STEPS + input_bytes : CJ_MAX_STEPS;
    c.depth_limit = CJ_MAX_EVAL_DEPTH;
    c.cancel = cancel;
    c.out_limit = CJ_MAX_OUTPUT;
    cj_buf buf;
    cj_tmpbuf(&c, &buf);
    c.out = &buf;
    cj_scope root = {0};
    c.root = c.scope = &root;

    cj_val messages;
    int r = messages_json ? from_json(&c, messages_json, 0, &messages) : build_messages(&c, msgs, n_msgs, &messages);
    if (!r) r = cj_scope_set(&c, &root, "messages", messages);
    if (!r && tools_json) {
        cj_val tools;
        r = from_json(&c, tools_json, 0, &tools);
        if (!r) r = cj_scope_set(&c, &root, "tools", tools);
    }
    if (!r) r = cj_scope_set(&c, &root, "add_generation_prompt", cj_bool(add_generation_prompt));
    if (!r) r = set_str(&c, &root, "bos_token", bos_token);
    if (!r) r = set_str(&c, &root, "eos_token", eos_token);
    if (!r) r = cj_render_root(&c, t->root);
    cj_scope_release(&c, &root);
    cj_ctx_sweep(&c);
    if (r) {
        cj_buf_free(&buf);
        return -1;
    }
    if (!buf.p && cj_buf_put(&buf, "", 0)) return tk_err_set(err, "out of memory");
    *out = buf.p; /* the context (and its memory account) is gone: hand over the raw buffer */
    return 0;
}
