#include "api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tk_api_error_set(tk_api_error *e, int status, const char *type, const char *code, const char *param,
                      const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

static int bad(tk_api_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(tk_api_error *e, const char *param, const char *fmt, ...) {
    e->status = 400;
    e->type = "invalid_request_error";
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* Appends U+FFFD for each maximal invalid subsequence; valid UTF-8
 * (shortest form, no surrogates, <= U+10FFFF) is copied. */
json_t *tk_json_lossy_string(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *o = malloc(n * 3 + 1);
    if (!o) return NULL;
    size_t k = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        bool ok = len > 0 && i + len <= n && c != 0;
        uint32_t cp = 0;
        if (ok && len > 1) {
            cp = c & (0x7F >> len);
            for (size_t t = 1; t < len && ok; t++) {
                if ((u[i + t] & 0xC0) != 0x80) ok = false;
                cp = (cp << 6) | (u[i + t] & 0x3F);
            }
            static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
            if (ok && (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
        }
        if (ok) {
            memcpy(o + k, u + i, len);
            k += len;
            i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += 1;
        }
    }
    j = json_stringn(o, k);
    free(o);
    return j;
}

char *tk_api_error_json(const tk_api_error *e) {
    json_t *inner = json_object();
    json_t *root = json_object();
    if (!inner || !root) {
        json_decref(inner);
        json_decref(root);
        return NULL;
    }
    json_object_set_new(inner, "message", tk_json_lossy_string(e->message, strlen(e->message)));
    json_object_set_new(inner, "type", json_string(e->type ? e->type : "invalid_request_error"));
    json_object_set_new(inner, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(inner, "code", e->code ? json_string(e->code) : json_null());
    json_object_set_new(root, "error", inner);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

/* ---- typed field access; JSON null counts as absent (clients send it) ---- */

static json_t *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* 1: set, 0: absent, -1: error. */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, tk_api_error *e) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return bad(e, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return bad(e, key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    return 1;
}

static int get_num(json_t *o, const char *key, double lo, double hi, double *out, tk_api_error *e) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(e, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) return bad(e, key, "'%s' must be between %g and %g, got %g", key, lo, hi, x);
    *out = x;
    return 1;
}

static int get_bool(json_t *o, const char *key, bool *out, tk_api_error *e) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(e, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

static int parse_prompt(tk_api_req *r, json_t *root, int n_vocab, tk_api_error *e) {
    json_t *p = field(root, "prompt");
    if (!p) return bad(e, "prompt", "'prompt' is required");
    if (json_is_string(p)) {
        r->prompt_text = json_string_value(p);
        r->prompt_len = json_string_length(p);
        return 0;
    }
    if (!json_is_array(p)) return bad(e, "prompt", "'prompt' must be a string, an array of token ids, or an array of one of those");
    size_t n = json_array_size(p);
    if (n == 0) return bad(e, "prompt", "'prompt' must not be empty");
    json_t *first = json_array_get(p, 0);
    if (json_is_string(first) || json_is_array(first)) {
        if (n != 1) return bad(e, "prompt", "only one prompt per request is supported (use 'n' for several samples)");
        if (json_is_string(first)) {
            r->prompt_text = json_string_value(first);
            r->prompt_len = json_string_length(first);
            return 0;
        }
        p = first;
        n = json_array_size(p);
        if (n == 0) return bad(e, "prompt", "'prompt' must not be empty");
    }
    if (n > TK_API_MAX_BODY / 2) return bad(e, "prompt", "'prompt' is too long");
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) {
        tk_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(p, i);
        if (!json_is_integer(t)) return bad(e, "prompt", "'prompt' token %zu is not an integer", i);
        json_int_t id = json_integer_value(t);
        if (id < 0 || id >= n_vocab)
            return bad(e, "prompt", "'prompt' token %zu (%lld) is outside the vocabulary [0, %d)", i, (long long)id,
                       n_vocab);
        r->prompt_ids[i] = (int32_t)id;
    }
    r->n_prompt_ids = (int)n;
    return 0;
}

/* An assistant message's tool_calls (an array of {"id"?, "type":
 * "function", "function": {"name", "arguments": JSON text or object}}) and
 * a tool message's tool_call_id: checked here, passed to the template as
 * they are (chat.c parses arguments text). */
static int check_tool_fields(tk_api_req *r, json_t *msg, const char *param, tk_api_error *e) {
    json_t *id = field(msg, "tool_call_id");
    if (id) {
        if (!json_is_string(id)) return bad(e, param, "'%s.tool_call_id' must be a string", param);
        r->messages_have_tools = true;
    }
    json_t *calls = field(msg, "tool_calls");
    if (!calls) return 0;
    if (!json_is_array(calls) || json_array_size(calls) > TK_API_MAX_TOOL_CALLS)
        return bad(e, param, "'%s.tool_calls' must be an array of at most %d calls", param, TK_API_MAX_TOOL_CALLS);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *c = json_array_get(calls, k);
        json_t *type = json_is_object(c) ? field(c, "type") : NULL;
        json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
        json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        json_t *args = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
        if ((type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))) || !json_is_string(name) ||
            (args && !json_is_string(args) && !json_is_object(args)))
            return bad(e, param, "'%s.tool_calls[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": "
                       "string, \"arguments\": string}}", param, k);
    }
    r->messages_have_tools = true;
    return 0;
}

/* "tools": function definitions {"type": "function", "function": {"name",
 * "description"?, "parameters"? (a JSON Schema object)}}; "tool_choice":
 * "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
 * naming one of them; "parallel_tool_calls": bool. */
static int parse_tools(tk_api_req *r, json_t *root, tk_api_error *e) {
    json_t *t = field(root, "tools");
    r->parallel_tool_calls = true;
    if (get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e) < 0) return -1;
    if (t && !json_is_array(t)) return bad(e, "tools", "'tools' must be an array");
    if (t && json_array_size(t) > TK_API_MAX_TOOLS) return bad(e, "tools", "at most %d tools", TK_API_MAX_TOOLS);
    for (size_t i = 0; t && i < json_array_size(t); i++) {
        json_t *tool = json_array_get(t, i);
        json_t *type = json_is_object(tool) ? json_object_get(tool, "type") : NULL;
        json_t *fn = json_is_object(tool) ? json_object_get(tool, "function") : NULL;
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_object(fn))
            return bad(e, "tools", "'tools[%zu]' must be {\"type\": \"function\", \"function\": {...}}", i);
        json_t *name = json_object_get(fn, "name");
        size_t nl = json_is_string(name) ? json_string_length(name) : 0;
        if (nl == 0 || nl > TK_API_MAX_TOOL_NAME)
            return bad(e, "tools", "'tools[%zu].function.name' must be a string of 1 to %d characters", i,
                       TK_API_MAX_TOOL_NAME);
        for (const char *c = json_string_value(name); *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
                  *c == '-' || *c == '.'))
                return bad(e, "tools", "'tools[%zu].function.name' may hold only letters, digits, '_', '-' and '.'", i);
        json_t *desc = field(fn, "description"), *params = field(fn, "parameters");
        if (desc && !json_is_string(desc)) return bad(e, "tools", "'tools[%zu].function.description' must be a string", i);
        if (params && !json_is_object(params))
            return bad(e, "tools", "'tools[%zu].function.parameters' must be a JSON Schema object", i);
    }
    bool have = t && json_array_size(t) > 0;
    r->tools = have ? t : NULL;
    r->tool_choice = have ? TK_TOOL_CHOICE_AUTO : TK_TOOL_CHOICE_NONE;
    json_t *c = field(root, "tool_choice");
    if (!c) return 0;
    if (json_is_string(c)) {
        const char *v = json_string_value(c);
        if (!strcmp(v, "none")) r->tool_choice = TK_TOOL_CHOICE_NONE;
        else if (!strcmp(v, "auto")) r->tool_choice = have ? TK_TOOL_CHOICE_AUTO : TK_TOOL_CHOICE_NONE;
        else if (!strcmp(v, "required")) r->tool_choice = TK_TOOL_CHOICE_REQUIRED;
        else return bad(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function");
    } else {
        json_t *type = json_is_object(c) ? json_object_get(c, "type") : NULL;
        json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
        json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_string(name))
            return bad(e, "tool_choice", "'tool_choice' object must be {\"type\": \"function\", \"function\": "
                       "{\"name\": string}}");
        r->tool_choice = TK_TOOL_CHOICE_NAMED;
        r->tool_name = json_string_value(name);
    }
    if (r->tool_choice == TK_TOOL_CHOICE_NONE) return 0;
    if (!have) return bad(e, "tool_choice", "'tool_choice' needs 'tools'");
    if (r->tool_choice != TK_TOOL_CHOICE_NAMED) return 0;
    for (size_t i = 0; i < json_array_size(t); i++)
        if (!strcmp(json_string_value(json_object_get(json_object_get(json_array_get(t, i), "function"), "name")),
                    r->tool_name))
            return 0;
    return bad(e, "tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'", r->tool_name);
}

static int parse_messages(tk_api_req *r, json_t *root, tk_api_error *e) {
    json_t *m = field(root, "messages");
    if (!m) return bad(e, "messages", "'messages' is required");
    if (!json_is_array(m)) return bad(e, "messages", "'messages' must be an array");
    size_t n = json_array_size(m);
    if (n == 0) return bad(e, "messages", "'messages' must not be empty");
    if (n > TK_API_MAX_MESSAGES) return bad(e, "messages", "too many messages (at most %d)", TK_API_MAX_MESSAGES);
    r->messages = m;
    r->msgs = calloc(n, sizeof *r->msgs);
    r->owned = calloc(n, sizeof *r->owned);
    if (!r->msgs || !r->owned) {
        tk_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    static const char *const roles[] = {"system", "user", "assistant", "developer", "tool"};
    for (size_t i = 0; i < n; i++) {
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        json_t *msg = json_array_get(m, i);
        if (!json_is_object(msg)) return bad(e, param, "'%s' must be an object", param);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role)) return bad(e, param, "'%s.role' must be a string", param);
        bool known = false;
        for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++)
            if (!strcmp(json_string_value(role), roles[k])) known = true;
        if (!known) return bad(e, param, "'%s.role' has an unknown role", param);
        r->msgs[i].role = json_string_value(role);
        if (check_tool_fields(r, msg, param, e)) return -1;
        json_t *c = json_object_get(msg, "content");
        if (!c || json_is_null(c)) {
            r->msgs[i].content = "";
        } else if (json_is_string(c)) {
            r->msgs[i].content = json_string_value(c);
        } else if (json_is_array(c)) {
            /* Content parts: only text parts can be honoured; join them. */
            size_t total = 0, np = json_array_size(c);
            for (size_t k = 0; k < np; k++) {
                json_t *part = json_array_get(c, k);
                json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
                json_t *text = json_is_object(part) ? json_object_get(part, "text") : NULL;
                if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text))
                    return bad(e, param, "'%s.content' parts must be {\"type\": \"text\", \"text\": string}", param);
                if (memchr(json_string_value(text), 0, json_string_length(text)))
                    return bad(e, param, "'%s.content' contains a NUL character", param);
                total += json_string_length(text);
            }
            char *s = malloc(total + 1);
            if (!s) {
                tk_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
                return -1;
            }
            size_t off = 0;
            for (size_t k = 0; k < np; k++) {
                json_t *text = json_object_get(json_array_get(c, k), "text");
                memcpy(s + off, json_string_value(text), json_string_length(text));
                off += json_string_length(text);
            }
            s[off] = 0;
            r->owned[r->n_owned++] = s;
            r->msgs[i].content = s;
        } else {
            return bad(e, param, "'%s.content' must be a string or an array of text parts", param);
        }
        r->n_msgs = (int)i + 1;
    }
    return 0;
}

static int parse_stop(tk_api_req *r, json_t *root, tk_api_error *e) {
    json_t *s = field(root, "stop");
    if (!s) return 0;
    json_t *one[1] = {s};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(s)) {
        n = json_array_size(s);
        if (n > TK_API_MAX_STOP) return bad(e, "stop", "'stop' may hold at most %d strings", TK_API_MAX_STOP);
        items = NULL;
    } else if (!json_is_string(s)) {
        return bad(e, "stop", "'stop' must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = items ? items[i] : json_array_get(s, i);
        if (!json_is_string(v)) return bad(e, "stop", "'stop' must be a string or an array of strings");
        size_t len = json_string_length(v);
        if (len == 0) return bad(e, "stop", "'stop' strings must not be empty");
        if (len > TK_API_MAX_STOP_LEN) return bad(e, "stop", "'stop' strings are limited to %d bytes", TK_API_MAX_STOP_LEN);
        if (memchr(json_string_value(v), 0, len)) return bad(e, "stop", "'stop' strings must not contain NUL");
        r->stop[r->n_stop++] = json_string_value(v);
    }
    return 0;
}

/* The extension field "speculative": an object {"mode": "off" | "ngram" |
 * "draft" | "default", "draft_max": 1..32, "draft_min": 0..32} (every
 * member optional; draft_min 0 means the server's), or just the mode as a
 * string.  Unknown members are refused: a misspelt option must not be
 * silently ignored. */
static int parse_speculative(tk_api_req *r, json_t *root, tk_api_error *e) {
    json_t *v = field(root, "speculative");
    if (!v) return 0;
    json_t *mode = v;
    const char *mparam = "speculative";
    if (json_is_object(v)) {
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val) {
            if (strcmp(key, "mode") && strcmp(key, "draft_max") && strcmp(key, "draft_min"))
                return bad(e, "speculative", "'speculative' has an unknown member '%.64s' (known: mode, draft_max, "
                           "draft_min)", key);
        }
        static const char *const names[2] = {"draft_max", "draft_min"};
        long long x[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            json_t *n = field(v, names[i]);
            if (!n) continue;
            char param[32];
            snprintf(param, sizeof param, "speculative.%s", names[i]);
            if (!json_is_integer(n)) return bad(e, param, "'%s' must be an integer", param);
            x[i] = json_integer_value(n);
            long long lo = i == 0 ? 1 : 0;
            if (x[i] < lo || x[i] > TK_SPEC_MAX_DRAFT)
                return bad(e, param, "'%s' must be between %lld and %d, got %lld", param, lo, TK_SPEC_MAX_DRAFT, x[i]);
        }
        if (x[0] > 0 && x[1] > x[0])
            return bad(e, "speculative.draft_min", "'speculative.draft_min' (%lld) is larger than "
                       "'speculative.draft_max' (%lld)", x[1], x[0]);
        r->draft_max = (int)x[0];
        r->draft_min = (int)x[1];
        mode = field(v, "mode");
        mparam = "speculative.mode";
    } else if (!json_is_string(v)) {
        return bad(e, "speculative", "'speculative' must be an object {\"mode\", \"draft_max\", \"draft_min\"} or a "
                   "mode string");
    }
    if (!mode) return 0;
    const char *m = json_is_string(mode) ? json_string_value(mode) : NULL;
    if (m && !strcmp(m, "off")) r->spec_mode = TK_SPEC_OFF;
    else if (m && !strcmp(m, "ngram")) r->spec_mode = TK_SPEC_NGRAM;
    else if (m && !strcmp(m, "draft")) r->spec_mode = TK_SPEC_DRAFT;
    else if (m && !strcmp(m, "default")) r->spec_mode = TK_SPEC_DEFAULT;
    else return bad(e, mparam, "'%s' must be \"off\", \"ngram\", \"draft\" or \"default\"", mparam);
    return 0;
}

/* Fields whose non-default values we cannot honour: refuse them clearly. */
static int reject_unsupported(tk_api_req *r, json_t *root, tk_api_error *e) {
    bool b = false;
    if (get_bool(root, "echo", &b, e) < 0) return -1;
    if (b) return bad(e, "echo", "'echo' is not supported");
    json_t *v;
    if ((v = field(root, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
        return bad(e, "suffix", "'suffix' is not supported");
    long long best_of = 0;
    int rc = get_int(root, "best_of", 1, TK_API_MAX_N, &best_of, e);
    if (rc < 0) return -1;
    if (rc > 0 && best_of != r->n) return bad(e, "best_of", "'best_of' other than 'n' is not supported");
    if ((v = field(root, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        return bad(e, "logit_bias", "'logit_bias' is not supported");
    if (r->kind == TK_API_COMPLETIONS && (v = field(root, "tools")) && !(json_is_array(v) && json_array_size(v) == 0))
        return bad(e, "tools", "'tools' is only supported in /v1/chat/completions");
    if ((v = field(root, "functions")) && !(json_is_array(v) && json_array_size(v) == 0))
        return bad(e, "functions", "'functions' is not supported");
    return 0;
}

/* Sets the request's constraint from one field; a second one is refused. */
static int set_constraint(tk_api_req *r, tk_constraint_kind kind, char *text, const char *param, tk_api_error *e) {
    if (r->constraint != TK_CONSTRAINT_NONE) {
        free(text);
        return bad(e, param, "'%s' cannot be combined with '%s' (one output constraint per request)", param,
                   r->constraint_param);
    }
    if (kind != TK_CONSTRAINT_JSON && !text) {
        tk_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    r->constraint = kind;
    r->constraint_text = text;
    snprintf(r->constraint_param, sizeof r->constraint_param, "%s", param);
    return 0;
}

/* A string field's copy (1), absent (0), or an error (-1). */
static int get_text(json_t *root, const char *key, char **out, tk_api_error *e) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_string(v) || json_string_length(v) == 0) return bad(e, key, "'%s' must be a non-empty string", key);
    if (memchr(json_string_value(v), 0, json_string_length(v)))
        return bad(e, key, "'%s' contains a NUL character", key);
    *out = strdup(json_string_value(v));
    return 1;
}

/* guided_choice ["a", "b"]: a GBNF grammar whose root is one of the
 * strings, each a literal (quote, backslash and control bytes escaped). */
static char *choice_grammar(json_t *a) {
    size_t cap = 16, i;
    json_t *v;
    json_array_foreach(a, i, v) cap += json_string_length(v) * 4 + 6; /* escapes, quotes, " | " */
    char *g = malloc(cap), *w = g;
    if (!g) return NULL;
    w += sprintf(w, "root ::= ");
    json_array_foreach(a, i, v) {
        if (i) w += sprintf(w, " | ");
        *w++ = '"';
        for (const unsigned char *c = (const unsigned char *)json_string_value(v); *c; c++) {
            if (*c == '"' || *c == '\\' || *c < 0x20) w += sprintf(w, "\\x%02X", *c);
            else *w++ = (char)*c;
        }
        *w++ = '"';
    }
    *w = 0;
    return g;
}

/* Output constraints: "response_format" {"type": "text" | "json_object" |
 * "json_schema", "json_schema": {"name", "schema", "strict"?, "description"?}};
 * the extensions "regex" and "grammar" (GBNF) and vLLM's "guided_json",
 * "guided_regex", "guided_grammar", "guided_choice".  Compiled later
 * (tk_engine_constraint_check), which names constraint_param on an error. */
static int parse_constraint(tk_api_req *r, json_t *root, tk_api_error *e) {
    json_t *v;
    if ((v = field(root, "response_format"))) {
        json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
        const char *type = json_is_string(t) ? json_string_value(t) : "";
        if (!strcmp(type, "json_object")) {
            if (set_constraint(r, TK_CONSTRAINT_JSON, NULL, "response_format", e)) return -1;
        } else if (!strcmp(type, "json_schema")) {
            json_t *js = json_object_get(v, "json_schema");
            if (!json_is_object(js))
                return bad(e, "response_format.json_schema", "'response_format.json_schema' must be an object "
                           "{\"name\", \"schema\", \"strict\"}");
            json_t *name = field(js, "name"), *strict = field(js, "strict"), *schema = field(js, "schema");
            if (name && (!json_is_string(name) || json_string_length(name) == 0 || json_string_length(name) > 64))
                return bad(e, "response_format.json_schema.name", "'response_format.json_schema.name' must be a "
                           "string of 1 to 64 characters");
            if (strict && !json_is_boolean(strict))
                return bad(e, "response_format.json_schema.strict", "'response_format.json_schema.strict' must be a "
                           "boolean");
            if (!json_is_object(schema))
                return bad(e, "response_format.json_schema.schema", "'response_format.json_schema.schema' must be a "
                           "JSON Schema object");
            if (set_constraint(r, TK_CONSTRAINT_JSON_SCHEMA, json_dumps(schema, JSON_COMPACT),
                               "response_format.json_schema.schema", e))
                return -1;
        } else if (strcmp(type, "text")) {
            return bad(e, "response_format", "'response_format' must be {\"type\": \"text\"}, {\"type\": "
                       "\"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {...}}");
        }
    }
    if ((v = field(root, "guided_json"))) {
        if (!json_is_string(v) && !json_is_object(v))
            return bad(e, "guided_json", "'guided_json' must be a JSON Schema (an object or its text)");
        char *text = json_is_string(v) ? strdup(json_string_value(v)) : json_dumps(v, JSON_COMPACT);
        if (set_constraint(r, TK_CONSTRAINT_JSON_SCHEMA, text, "guided_json", e)) return -1;
    }
    static const struct { const char *key; tk_constraint_kind kind; } texts[] = {
        {"regex", TK_CONSTRAINT_REGEX}, {"guided_regex", TK_CONSTRAINT_REGEX},
        {"grammar", TK_CONSTRAINT_GRAMMAR}, {"guided_grammar", TK_CONSTRAINT_GRAMMAR}};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char *text = NULL;
        int rc = get_text(root, texts[i].key, &text, e);
        if (rc < 0 || (rc > 0 && set_constraint(r, texts[i].kind, text, texts[i].key, e))) return -1;
    }
    if ((v = field(root, "guided_choice"))) {
        size_t i, n = json_is_array(v) ? json_array_size(v) : 0;
        json_t *c;
        if (n == 0 || n > 1024) return bad(e, "guided_choice", "'guided_choice' must be an array of 1 to 1024 strings");
        json_array_foreach(v, i, c) {
            if (!json_is_string(c) || json_string_length(c) == 0 || json_string_length(c) > 4096 ||
                memchr(json_string_value(c), 0, json_string_length(c)))
                return bad(e, "guided_choice", "'guided_choice[%zu]' must be a non-empty string of at most 4096 bytes "
                           "without NUL", i);
        }
        if (set_constraint(r, TK_CONSTRAINT_GRAMMAR, choice_grammar(v), "guided_choice", e)) return -1;
    }
    if (r->constraint != TK_CONSTRAINT_NONE &&
        (r->tool_choice == TK_TOOL_CHOICE_REQUIRED || r->tool_choice == TK_TOOL_CHOICE_NAMED))
        return bad(e, r->constraint_param, "'%s' cannot be combined with 'tool_choice' \"required\" or a named "
                   "function (the call is constrained already)", r->constraint_param);
    return 0;
}

static int parse_body(tk_api_req *r, json_t *root, const char *model_name, int n_vocab, tk_api_error *e) {
    if (!json_is_object(root)) return bad(e, NULL, "the request body must be a JSON object");

    json_t *model = field(root, "model");
    if (model) {
        if (!json_is_string(model)) return bad(e, "model", "'model' must be a string");
        if (strcmp(json_string_value(model), model_name)) {
            tk_api_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                             "The model '%s' does not exist (this server serves '%s')", json_string_value(model),
                             model_name);
            return -1;
        }
    }

    if (r->kind == TK_API_COMPLETIONS ? parse_prompt(r, root, n_vocab, e) : parse_messages(r, root, e)) return -1;

    long long x;
    int rc;
    r->max_tokens = r->kind == TK_API_COMPLETIONS ? 16 : 0; /* OpenAI's defaults: 16 / until the end */
    if ((rc = get_int(root, "max_tokens", 1, 1 << 24, &x, e)) < 0) return -1;
    if (rc) r->max_tokens = (int)x;
    if ((rc = get_int(root, "max_completion_tokens", 1, 1 << 24, &x, e)) < 0) return -1;
    if (rc) r->max_tokens = (int)x;

    r->n = 1;
    if ((rc = get_int(root, "n", 1, TK_API_MAX_N, &x, e)) < 0) return -1;
    if (rc) r->n = (int)x;

    /* OpenAI defaults, not the CLI's: plain sampling at temperature 1. */
    tk_sampling *s = &r->sampling;
    memset(s, 0, sizeof *s);
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repeat_penalty = 1.0f;
    s->penalty_last_n = -1;
    double d;
    if ((rc = get_num(root, "temperature", 0, 2, &d, e)) < 0) return -1;
    if (rc) s->temperature = (float)d;
    if ((rc = get_num(root, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (rc) {
        if (d <= 0) return bad(e, "top_p", "'top_p' must be greater than 0");
        s->top_p = (float)d;
    }
    if ((rc = get_int(root, "top_k", -1, 1 << 20, &x, e)) < 0) return -1;
    if (rc) s->top_k = x < 0 ? 0 : (int)x; /* -1 and 0: off */
    if ((rc = get_num(root, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (rc) s->min_p = (float)d;
    if ((rc = get_num(root, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (rc) s->presence_penalty = (float)d;
    if ((rc = get_num(root, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (rc) s->frequency_penalty = (float)d;
    if ((rc = get_num(root, "repetition_penalty", 0, 10, &d, e)) < 0) return -1;
    if (rc) {
        if (d <= 0) return bad(e, "repetition_penalty", "'repetition_penalty' must be greater than 0");
        s->repeat_penalty = (float)d;
    }
    json_t *seed = field(root, "seed");
    if (seed) {
        if (!json_is_integer(seed)) return bad(e, "seed", "'seed' must be an integer");
        s->seed = (uint64_t)json_integer_value(seed); /* negative seeds wrap: still reproducible */
        r->seed_given = true;
    }
    if (get_bool(root, "ignore_eos", &r->ignore_eos, e) < 0) return -1;
    if (parse_stop(r, root, e)) return -1;

    if (get_bool(root, "stream", &r->stream, e) < 0) return -1;
    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) return bad(e, "stream_options", "'stream_options' must be an object");
        if (!r->stream) return bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (get_bool(so, "include_usage", &r->include_usage, e) < 0) {
            snprintf(e->param, sizeof e->param, "stream_options.include_usage");
            return -1;
        }
    }

    r->logprobs = -1;
    if (r->kind == TK_API_COMPLETIONS) {
        if ((rc = get_int(root, "logprobs", 0, TK_API_MAX_TOP_LOGPROBS, &x, e)) < 0) return -1;
        if (rc) r->logprobs = (int)x;
    } else {
        bool lp = false;
        if (get_bool(root, "logprobs", &lp, e) < 0) return -1;
        if ((rc = get_int(root, "top_logprobs", 0, TK_API_MAX_TOP_LOGPROBS, &x, e)) < 0) return -1;
        if (rc && !lp) return bad(e, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
        if (lp) r->logprobs = rc ? (int)x : 0;
    }
    if (parse_speculative(r, root, e)) return -1;
    if (r->kind == TK_API_CHAT && parse_tools(r, root, e)) return -1;
    if (parse_constraint(r, root, e)) return -1;
    return reject_unsupported(r, root, e);
}

int tk_api_parse(tk_api_kind kind, const char *body, size_t len, const char *model_name, int n_vocab,
                 tk_api_req *out, tk_api_error *e) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    if (len > TK_API_MAX_BODY) {
        tk_api_error_set(e, 413, "invalid_request_error", "request_too_large", NULL,
                         "request body exceeds %u bytes", TK_API_MAX_BODY);
        return -1;
    }
    json_error_t je;
    /* jansson bounds nesting depth itself and rejects invalid UTF-8 and
     * NUL in strings (no JSON_ALLOW_NUL), so strings are safe C strings. */
    out->root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!out->root) {
        bad(e, NULL, "malformed JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return -1;
    }
    if (parse_body(out, out->root, model_name, n_vocab, e)) {
        tk_api_req_free(out);
        return -1;
    }
    return 0;
}

void tk_api_req_drop_inputs(tk_api_req *r) {
    free(r->prompt_ids);
    free(r->msgs);
    for (int i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    json_decref(r->root);
    r->root = NULL;
    r->prompt_text = NULL;
    r->prompt_len = 0;
    r->prompt_ids = NULL;
    r->n_prompt_ids = 0;
    r->msgs = NULL;
    r->n_msgs = 0;
    r->messages = r->tools = NULL;
    r->tool_name = NULL;
    r->owned = NULL;
    r->n_owned = 0;
    r->n_stop = 0;
    memset(r->stop, 0, sizeof r->stop);
    free(r->constraint_text);
    r->constraint_text = NULL;
}

void tk_api_req_free(tk_api_req *r) {
    tk_api_req_drop_inputs(r);
    memset(r, 0, sizeof *r);
}
