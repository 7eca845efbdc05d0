/* Tool calls in a model's own output format (include/tokamak.h, "Tool
 * calls"): the format a chat template teaches, and the parse of generated
 * text into calls.  The text is hostile (sampled from a model): anything
 * that does not parse as a whole stays content. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <tokamak.h>

/* Bounds on what one output may hold. */
#define TC_MAX_CALLS 64
#define TC_MAX_TEXT ((size_t)16 << 20)

static const char HERMES_OPEN[] = "<tool_call>", HERMES_CLOSE[] = "</tool_call>";
static const char PYTHON_TAG[] = "<|python_tag|>", MISTRAL_TAG[] = "[TOOL_CALLS]";

static const char *const format_names[] = {"none", "hermes", "llama3", "mistral", "gemma"};

const char *tk_tool_format_name(tk_tool_format f) {
    return (unsigned)f < sizeof format_names / sizeof format_names[0] ? format_names[f] : NULL;
}

int tk_tool_format_from_name(const char *name) {
    for (int i = 0; name && i < (int)(sizeof format_names / sizeof format_names[0]); i++)
        if (!strcmp(name, format_names[i])) return i;
    return -1;
}

/* The markers each family's template writes when it shows the model a call. */
tk_tool_format tk_tool_format_detect(const char *tmpl) {
    if (!tmpl) return TK_TOOL_FORMAT_NONE;
    if (strstr(tmpl, HERMES_OPEN)) return TK_TOOL_FORMAT_HERMES;
    if (strstr(tmpl, MISTRAL_TAG)) return TK_TOOL_FORMAT_MISTRAL;
    if (strstr(tmpl, PYTHON_TAG) || (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "tools")))
        return TK_TOOL_FORMAT_LLAMA3;
    if (strstr(tmpl, "<start_of_turn>")) return TK_TOOL_FORMAT_GEMMA;
    return TK_TOOL_FORMAT_NONE;
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static void trim(const char **s, size_t *n) {
    while (*n && is_space(**s)) ++*s, --*n;
    while (*n && is_space((*s)[*n - 1])) --*n;
}

static bool starts(const char *s, size_t n, const char *lit) {
    size_t k = strlen(lit);
    return n >= k && !memcmp(s, lit, k);
}

static int add_call(tk_tool_parse *p, json_t *obj) {
    if (!json_is_object(obj) || p->n_calls >= TC_MAX_CALLS) return -1;
    json_t *name = json_object_get(obj, "name");
    json_t *args = json_object_get(obj, "arguments");
    if (!args) args = json_object_get(obj, "parameters");
    if (!json_is_string(name) || json_string_length(name) == 0 || (args && !json_is_object(args))) return -1;
    char *a = args ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) : strdup("{}");
    char *nm = strdup(json_string_value(name));
    if (!a || !nm) {
        free(a);
        free(nm);
        return -1;
    }
    p->calls[p->n_calls].name = nm;
    p->calls[p->n_calls].arguments = a;
    p->n_calls++;
    return 0;
}

/* One JSON value from the start of s[0..n); *used gets its length. */
static json_t *json_prefix(const char *s, size_t n, size_t *used) {
    json_error_t je;
    json_t *v = json_loadb(s, n, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (v) *used = je.position;
    return v;
}

/* <tool_call>{json}</tool_call>, any number; the text around them is content. */
static int parse_hermes(const char *s, size_t n, tk_tool_parse *p, size_t *content_end) {
    const char *at = memmem(s, n, HERMES_OPEN, sizeof HERMES_OPEN - 1);
    if (!at) return -1;
    *content_end = (size_t)(at - s);
    size_t i = *content_end;
    while (i < n) {
        const char *rest = s + i;
        size_t rn = n - i;
        trim(&rest, &rn);
        if (rn == 0) break;
        if (!starts(rest, rn, HERMES_OPEN)) return -1;
        const char *body = rest + sizeof HERMES_OPEN - 1;
        const char *close = memmem(body, (size_t)(rest + rn - body), HERMES_CLOSE, sizeof HERMES_CLOSE - 1);
        /* A last call cut off before its close tag (the model stopped at
         * the tag's token, or the stop string ate it) still counts when
         * its JSON is complete. */
        size_t bn = close ? (size_t)(close - body) : (size_t)(rest + rn - body);
        const char *b = body;
        trim(&b, &bn);
        size_t used = 0;
        json_t *v = json_prefix(b, bn, &used);
        int rc = v && used == bn ? add_call(p, v) : -1;
        json_decref(v);
        if (rc) return -1;
        if (!close) break;
        i = (size_t)(close - s) + sizeof HERMES_CLOSE - 1;
    }
    return p->n_calls ? 0 : -1;
}

/* One or more {"name", "parameters"|"arguments"} objects (separated by ';'
 * or white space) making up the whole text, optionally after
 * <|python_tag|> (Llama 3.x) or in a ```json / ```tool_code fence (Gemma). */
static int parse_json_calls(const char *s, size_t n, tk_tool_parse *p) {
    trim(&s, &n);
    if (starts(s, n, PYTHON_TAG)) s += sizeof PYTHON_TAG - 1, n -= sizeof PYTHON_TAG - 1;
    static const char *const fences[] = {"```json", "```tool_code", "```"};
    for (size_t k = 0; k < sizeof fences / sizeof fences[0]; k++) {
        if (!starts(s, n, fences[k])) continue;
        s += strlen(fences[k]), n -= strlen(fences[k]);
        trim(&s, &n);
        if (n < 3 || memcmp(s + n - 3, "```", 3)) return -1;
        n -= 3;
        break;
    }
    trim(&s, &n);
    if (!n || s[0] != '{') return -1;
    while (n) {
        size_t used = 0;
        json_t *v = json_prefix(s, n, &used);
        int rc = v ? add_call(p, v) : -1;
        json_decref(v);
        if (rc) return -1;
        s += used, n -= used;
        trim(&s, &n);
        if (n && s[0] == ';') s++, n--;
        trim(&s, &n);
    }
    return 0;
}

/* [TOOL_CALLS][{"name", "arguments"}, ...]; the tag is a control token that
 * decoded text usually lacks, so a bare array of call objects counts too. */
static int parse_mistral(const char *s, size_t n, tk_tool_parse *p) {
    trim(&s, &n);
    bool tagged = starts(s, n, MISTRAL_TAG);
    if (tagged) s += sizeof MISTRAL_TAG - 1, n -= sizeof MISTRAL_TAG - 1;
    trim(&s, &n);
    if (!n || s[0] != '[') return -1;
    size_t used = 0;
    json_t *v = json_prefix(s, n, &used);
    const char *rest = s + used;
    size_t rn = n - used;
    trim(&rest, &rn);
    int rc = json_is_array(v) && json_array_size(v) > 0 && rn == 0 ? 0 : -1;
    for (size_t i = 0; !rc && i < json_array_size(v); i++) rc = add_call(p, json_array_get(v, i));
    json_decref(v);
    return rc;
}

void tk_tool_parse_free(tk_tool_parse *p) {
    for (int i = 0; p->calls && i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    memset(p, 0, sizeof *p);
}

int tk_tool_calls_parse(tk_tool_format f, const char *text, size_t len, tk_tool_parse *out, tk_err *err) {
    memset(out, 0, sizeof *out);
    out->content_len = len;
    if (!text || len == 0 || f == TK_TOOL_FORMAT_NONE || len > TC_MAX_TEXT) return 0;
    out->calls = calloc(TC_MAX_CALLS, sizeof *out->calls);
    if (!out->calls) return tk_err_set(err, "out of memory");
    size_t content_end = 0;
    int rc;
    switch (f) {
    case TK_TOOL_FORMAT_HERMES: rc = parse_hermes(text, len, out, &content_end); break;
    case TK_TOOL_FORMAT_MISTRAL: rc = parse_mistral(text, len, out); break;
    case TK_TOOL_FORMAT_LLAMA3:
    case TK_TOOL_FORMAT_GEMMA: rc = parse_json_calls(text, len, out); break;
    default: rc = -1; break;
    }
    if (rc) { /* not calls after all: all of it is content */
        tk_tool_parse_free(out);
        out->content_len = len;
        return 0;
    }
    const char *c = text;
    trim(&c, &content_end);
    out->content_len = content_end;
    out->content_off = content_end ? (size_t)(c - text) : 0;
    return 0;
}

/* How much of the output so far is content for sure: with the Hermes tags,
 * everything before a "<tool_call>" or before a tail that could begin one;
 * with the other formats a call is the whole output, so an output that
 * (after white space) starts like one is held back entirely. */
size_t tk_tool_stream_safe(tk_tool_format f, const char *text, size_t len) {
    if (f == TK_TOOL_FORMAT_NONE) return len;
    if (f == TK_TOOL_FORMAT_HERMES) {
        const char *at = memmem(text, len, HERMES_OPEN, sizeof HERMES_OPEN - 1);
        if (at) return (size_t)(at - text);
        for (size_t k = sizeof HERMES_OPEN - 2; k > 0; k--)
            if (len >= k && !memcmp(text + len - k, HERMES_OPEN, k)) return len - k;
        return len;
    }
    size_t i = 0;
    while (i < len && is_space(text[i])) i++;
    if (i == len) return 0; /* only white space so far: a call may follow */
    static const char *const starts_of[] = {"{", "[", "```", PYTHON_TAG, MISTRAL_TAG};
    for (size_t k = 0; k < sizeof starts_of / sizeof starts_of[0]; k++) {
        size_t m = strlen(starts_of[k]), have = len - i < m ? len - i : m;
        if (!memcmp(text + i, starts_of[k], have)) return 0;
    }
    return len;
}
