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

#include <tokamak.h>

#include "../jinja/arena.h"
#include "../jinja/lexer.h"
#include "../jinja/parser.h"
#include "../jinja/runtime.h"

/* Limits for untrusted templates. */
#define CJ_MAX_SOURCE (4u << 20)          /* template text */
#define CJ_MAX_ARENA (64u << 20)          /* tokens + syntax tree */
#define CJ_MAX_OUTPUT ((size_t)64 << 20)  /* rendered text, and any one string */
#define CJ_MAX_MEMORY ((size_t)256 << 20) /* live values */
#define CJ_MAX_WORK ((uint64_t)1 << 30)   /* bytes allocated or scanned over a render */
#define CJ_MAX_STEPS 1000000              /* loop iterations + macro calls */
#define CJ_MAX_EVAL_DEPTH 1000            /* evaluator recursion (incl. macro calls) */

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
    if (!t) return tk_err_set(err, "chat template: not parsed");
    if (n_msgs < 0 || (n_msgs > 0 && !msgs)) return tk_err_set(err, "chat template: bad message list");
    cj_ctx c;
    cj_ctx_init(&c, err);
    c.mem_limit = CJ_MAX_MEMORY;
    c.work_limit = CJ_MAX_WORK;
    c.step_limit = CJ_MAX_STEPS;
    c.depth_limit = CJ_MAX_EVAL_DEPTH;
    c.cancel = cancel;
    c.out_limit = CJ_MAX_OUTPUT;
    cj_buf buf;
    cj_tmpbuf(&c, &buf);
    c.out = &buf;
    cj_scope root = {0};
    c.root = c.scope = &root;

    cj_val messages;
    int r = build_messages(&c, msgs, n_msgs, &messages);
    if (!r) r = cj_scope_set(&c, &root, "messages", messages);
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
