/* Pre-tokenizers: regex splitting (PCRE2, UTF + UCP), the GGUF
 * tokenizer.ggml.pre kinds (the regex sets llama.cpp uses), ByteLevel's
 * prefix space and HF Metaspace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- the regex sets of llama.cpp's llm_tokenizer_bpe ---- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                   \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                    \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_DEEPSEEK_LETTERS                                                                      \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"          \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"       \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}" \
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}" \
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"               \
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"               \
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"       \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"      \
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"               \
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}"       \
    "\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"                  \
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}"       \
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"                \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"               \
    "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"               \
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"         \
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"
#define RE_DEEPSEEK_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"
#define RE_DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

typedef struct pre_kind {
    const char *names;     /* '|'-separated aliases */
    const char *re[6];
    bool ignore_merges;
    bool add_bos;
} pre_kind;

static const pre_kind pre_kinds[] = {
    {"default|", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"llama-bpe|llama3|llama-v3|dbrx|smaug-bpe|", {RE_LLAMA3}, true, true},
    {"gpt-2|mpt|phi-2|olmo|jais|", {RE_GPT2}, false, false},
    {"qwen2|stablelm2|deepseek-r1-qwen|megrez|", {RE_QWEN2}, false, false},
    {"deepseek-llm|",
     {"[\r\n]", RE_DEEPSEEK_LETTERS, RE_DEEPSEEK_PUNCT, "\\s+$", RE_DEEPSEEK_CJK, "\\p{N}+"},
     false, false},
    {"deepseek-coder|", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DEEPSEEK_CJK, "\\p{N}"}, false, false},
    {"falcon|", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false},
    {"starcoder|refact|command-r|smollm|codeshell|", {"\\p{N}", RE_GPT2}, false, false},
};

static bool name_in(const char *names, const char *name) {
    size_t n = strlen(name);
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, '|');
        if (!e) e = p + strlen(p);
        if ((size_t)(e - p) == n && memcmp(p, name, n) == 0) return true;
        p = *e ? e + 1 : e;
    }
    return false;
}

/* ---- regex compilation ---- */

#define WS_ITEMS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static int rewrite_ws(const char *p, size_t n, tk_sbuf *o) {
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            int r = 0;
            if (d == 's') r = in_class ? tk_sbuf_put(o, WS_ITEMS, strlen(WS_ITEMS))
                                       : tk_sbuf_put(o, "[" WS_ITEMS "]", strlen(WS_ITEMS) + 2);
            else if (d == 'S' && !in_class) r = tk_sbuf_put(o, "[^" WS_ITEMS "]", strlen(WS_ITEMS) + 3);
            else r = tk_sbuf_put(o, p + i, 2);
            if (r) return -1;
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            if (tk_sbuf_put(o, "[", 1)) return -1;
            /* a ']' right after '[' or '[^' is literal */
            if (i + 1 < n && p[i + 1] == '^') {
                if (tk_sbuf_put(o, "^", 1)) return -1;
                i++;
            }
            if (i + 1 < n && p[i + 1] == ']') {
                if (tk_sbuf_put(o, "]", 1)) return -1;
                i++;
            }
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:name:] */
            const char *e = NULL;
            for (size_t j = i + 2; j + 1 < n; j++)
                if (p[j] == ':' && p[j + 1] == ']') { e = p + j + 2; break; }
            if (e) {
                if (tk_sbuf_put(o, p + i, (size_t)(e - (p + i)))) return -1;
                i = (size_t)(e - p) - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = false;
        if (tk_sbuf_put(o, &c, 1)) return -1;
    }
    return 0;
}

static pcre2_code *compile_opts(const char *pattern, size_t len, uint32_t extra, tk_err *err) {
    tk_sbuf b = {0};
    if (rewrite_ws(pattern, len, &b) || tk_sbuf_put(&b, "", 0)) {
        free(b.s);
        tk_err_set(err, "out of memory compiling a regex");
        return NULL;
    }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)b.s, b.n, PCRE2_UTF | PCRE2_UCP | extra, &ec, &eo, NULL);
    free(b.s);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        tk_err_set(err, "bad pre-tokenizer regex '%.*s': %s", (int)(len > 120 ? 120 : len), pattern,
                   (const char *)msg);
        return NULL;
    }
#ifndef TK_NO_JIT
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
#endif
    return re;
}

pcre2_code *tk_regex_compile(const char *pattern, size_t len, tk_err *err) {
    return compile_opts(pattern, len, 0, err);
}

static int add_step(tk_tokenizer *t, tk_pre_step *s, tk_err *err) {
    tk_pre_step *n = realloc(t->pre, (size_t)(t->n_pre + 1) * sizeof *n);
    if (!n) return tk_err_set(err, "out of memory");
    t->pre = n;
    t->pre[t->n_pre++] = *s;
    return 0;
}

static int add_regex_opts(tk_tokenizer *t, const char *pattern, size_t len, tk_split_behavior b,
                          bool invert, uint32_t extra, tk_err *err) {
    pcre2_code *re = compile_opts(pattern, len, extra, err);
    if (!re) return -1;
    tk_pre_step s = {0};
    s.kind = TK_PRE_REGEX;
    s.re = re;
    s.behavior = b;
    s.invert = invert;
    if (add_step(t, &s, err)) {
        pcre2_code_free(re);
        return -1;
    }
    return 0;
}

int tk_pre_add_regex(tk_tokenizer *t, const char *pattern, size_t len, tk_split_behavior b,
                     bool invert, tk_err *err) {
    return add_regex_opts(t, pattern, len, b, invert, 0, err);
}

int tk_pretok_set_kind(tk_tokenizer *t, const char *kind, tk_err *err) {
    for (size_t k = 0; k < sizeof pre_kinds / sizeof pre_kinds[0]; k++) {
        const pre_kind *pk = &pre_kinds[k];
        if (!name_in(pk->names, kind)) continue;
        for (int i = 0; i < 6 && pk->re[i]; i++) {
            /* llama.cpp matches with std::regex (ECMAScript): '$' only at the end */
            if (add_regex_opts(t, pk->re[i], strlen(pk->re[i]), TK_SPLIT_ISOLATED, false,
                               PCRE2_DOLLAR_ENDONLY, err))
                return -1;
        }
        t->ignore_merges = pk->ignore_merges;
        t->add_bos = pk->add_bos;
        snprintf(t->pre_name, sizeof t->pre_name, "%s", kind[0] ? kind : "default");
        return 0;
    }
    return tk_err_set(err, "unknown pre-tokenizer type '%s'", kind);
}

void tk_pretok_free(tk_tokenizer *t) {
    for (int i = 0; i < t->n_pre; i++) {
        if (t->pre[i].re) pcre2_code_free(t->pre[i].re);
        free(t->pre[i].repl);
    }
    free(t->pre);
    t->pre = NULL;
    t->n_pre = 0;
}

/* ---- splitting ---- */

void tk_words_free(tk_words *w) {
    free(w->text.s);
    free(w->w);
    memset(w, 0, sizeof *w);
}

typedef struct spanvec {
    tk_span *v;
    size_t n, cap;
} spanvec;

static int sv_push(spanvec *a, size_t start, size_t len) {
    if (len == 0) return 0;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 32;
        tk_span *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return -1;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n].start = start;
    a->v[a->n].len = len;
    a->n++;
    return 0;
}

typedef struct item {
    size_t start, len;
    bool match;
} item;

typedef struct itemvec {
    item *v;
    size_t n, cap;
} itemvec;

static int iv_push(itemvec *a, size_t start, size_t len, bool match) {
    if (len == 0) return 0;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 32;
        item *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return -1;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n].start = start;
    a->v[a->n].len = len;
    a->v[a->n].match = match;
    a->n++;
    return 0;
}

/* Splits text[ws, ws+wl) by the step's regex into items, then combines the
 * items into words according to the split behavior. */
static int regex_split(const tk_pre_step *st, const char *text, size_t ws, size_t wl,
                       pcre2_match_data *md, itemvec *items, spanvec *out, tk_err *err) {
    items->n = 0;
    const unsigned char *subj = (const unsigned char *)text + ws;
    size_t pos = 0, prev_end = 0;
    while (pos < wl) {
        int rc = pcre2_match(st->re, subj, wl, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(st->re, subj, wl, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return tk_err_set(err, "pre-tokenizer regex failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e <= s) { /* empty match: step over one character */
            int n = tk_utf8_seq_len(subj + pos, wl - pos);
            pos += n > 0 ? (size_t)n : 1;
            continue;
        }
        bool m = !st->invert;
        if (iv_push(items, ws + prev_end, s - prev_end, !m) || iv_push(items, ws + s, e - s, m))
            return tk_err_set(err, "out of memory");
        prev_end = pos = e;
    }
    if (iv_push(items, ws + prev_end, wl - prev_end, st->invert)) return tk_err_set(err, "out of memory");

    size_t cs = 0, cl = 0; /* current open word */
    bool open = false;
    for (size_t i = 0; i < items->n; i++) {
        const item *it = &items->v[i];
        int r = 0;
        switch (st->behavior) {
        case TK_SPLIT_ISOLATED: r = sv_push(out, it->start, it->len); break;
        case TK_SPLIT_REMOVED:
            if (!it->match) r = sv_push(out, it->start, it->len);
            break;
        case TK_SPLIT_MERGED_PREV:
            if (!open) { cs = it->start; cl = 0; open = true; }
            cl += it->len;
            if (it->match) { r = sv_push(out, cs, cl); open = false; }
            break;
        case TK_SPLIT_MERGED_NEXT:
            if (it->match && open) { r = sv_push(out, cs, cl); open = false; }
            if (!open) { cs = it->start; cl = 0; open = true; }
            cl += it->len;
            break;
        case TK_SPLIT_CONTIGUOUS:
            if (it->match) {
                if (open) cl += it->len;
                else { cs = it->start; cl = it->len; open = true; }
            } else {
                if (open) { r = sv_push(out, cs, cl); open = false; }
                r = r ? r : sv_push(out, it->start, it->len);
            }
            break;
        }
        if (r) return tk_err_set(err, "out of memory");
    }
    if (open && sv_push(out, cs, cl)) return tk_err_set(err, "out of memory");
    return 0;
}

int tk_pretokenize(const tk_tokenizer *t, const char *text, size_t len, bool first,
                   tk_words *out, tk_err *err) {
    out->text.n = 0;
    out->n = 0;
    if (tk_sbuf_put(&out->text, text, len)) return tk_err_set(err, "out of memory");
    spanvec cur = {0}, nxt = {0};
    itemvec items = {0};
    int rc = 0;
    if (sv_push(&cur, 0, len)) { rc = tk_err_set(err, "out of memory"); goto done; }

    for (int si = 0; si < t->n_pre && rc == 0; si++) {
        const tk_pre_step *st = &t->pre[si];
        nxt.n = 0;
        if (st->kind == TK_PRE_REGEX) {
            pcre2_match_data *md = pcre2_match_data_create_from_pattern(st->re, NULL);
            if (!md) { rc = tk_err_set(err, "out of memory"); break; }
            for (size_t w = 0; w < cur.n && rc == 0; w++)
                rc = regex_split(st, out->text.s, cur.v[w].start, cur.v[w].len, md, &items, &nxt, err);
            pcre2_match_data_free(md);
        } else {
            /* steps that rewrite the text: build a new buffer */
            tk_sbuf nb = {0};
            for (size_t w = 0; w < cur.n && rc == 0; w++) {
                const char *ws = out->text.s + cur.v[w].start;
                size_t wl = cur.v[w].len;
                size_t start = nb.n;
                int r = 0;
                if (st->kind == TK_PRE_PREFIX_SPACE) {
                    if (wl == 0 || ws[0] != ' ') r = tk_sbuf_put(&nb, " ", 1);
                    r = r ? r : tk_sbuf_put(&nb, ws, wl);
                    r = r ? r : sv_push(&nxt, start, nb.n - start);
                } else { /* METASPACE */
                    bool prepend = st->prepend_scheme == TK_PREPEND_ALWAYS ||
                                   (st->prepend_scheme == TK_PREPEND_FIRST && first && w == 0);
                    if (prepend && !(wl >= 1 && ws[0] == ' ') &&
                        !(wl >= st->repl_len && memcmp(ws, st->repl, st->repl_len) == 0))
                        r = tk_sbuf_put(&nb, st->repl, st->repl_len);
                    for (size_t i = 0; i < wl && !r; i++)
                        r = ws[i] == ' ' ? tk_sbuf_put(&nb, st->repl, st->repl_len) : tk_sbuf_put(&nb, ws + i, 1);
                    if (!r) {
                        if (st->split) { /* split before each replacement (MergedWithNext) */
                            size_t ps = start;
                            for (size_t i = start + 1; i + st->repl_len <= nb.n && !r; i++) {
                                if (memcmp(nb.s + i, st->repl, st->repl_len) == 0) {
                                    r = sv_push(&nxt, ps, i - ps);
                                    ps = i;
                                }
                            }
                            r = r ? r : sv_push(&nxt, ps, nb.n - ps);
                        } else {
                            r = sv_push(&nxt, start, nb.n - start);
                        }
                    }
                }
                if (r) rc = tk_err_set(err, "out of memory");
            }
            if (rc == 0) {
                free(out->text.s);
                out->text = nb;
                if (!out->text.s && tk_sbuf_put(&out->text, "", 0)) rc = tk_err_set(err, "out of memory");
            } else {
                free(nb.s);
            }
        }
        spanvec tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    if (rc == 0) {
        free(out->w);
        out->w = cur.v;
        out->n = cur.n;
        out->cap = cur.cap;
        cur.v = NULL;
    }
done:
    free(cur.v);
    free(nxt.v);
    free(items.v);
    return rc;
}
