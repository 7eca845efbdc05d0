/* Hugging Face tokenizer.json (+ tokenizer_config.json) loader.
 *
 * Supported: model BPE (byte-level, or SentencePiece-style with byte
 * fallback), normalizers Sequence / Prepend / Replace(String) / NFC / NFD /
 * NFKC / NFKD / Lowercase, pre-tokenizers Sequence / Split / ByteLevel /
 * Metaspace, TemplateProcessing post-processors (for BOS), added tokens with
 * special / lstrip / rstrip / single_word.  Anything else is rejected with an
 * error naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include <tokamak.h> /* tk_mapfile, tk_read_file */
#include "../formats/source.h"
#include "tok_internal.h"

#define RE_BYTELEVEL "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_HF_LLAMA3                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_HF_QWEN2                                                                           \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"      \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct hf_ctx {
    tk_tokenizer *t;
    tk_err *err;
    bool saw_bytelevel;
    bool saw_metaspace;
    bool saw_spm_norm;
    int n_split;
    const char *split_re; /* the last Split regex (for naming the pre kind) */
    bool has_template_bos;
    int template_bos;
} hf_ctx;

static const char *jstr(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(const json_t *o, const char *key, bool def) {
    json_t *v = json_object_get(o, key);
    if (json_is_boolean(v)) return json_is_true(v);
    return def;
}

/* ---- normalizers ---- */

static int parse_normalizer(hf_ctx *c, const json_t *n, int depth) {
    if (!n || json_is_null(n)) return 0;
    if (depth > 8) return tk_err_set(c->err, "normalizer: nested too deeply");
    if (!json_is_object(n)) return tk_err_set(c->err, "normalizer: not an object");
    const char *type = jstr(n, "type");
    if (!type) return tk_err_set(c->err, "normalizer: missing \"type\"");
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(n, "normalizers");
        if (!json_is_array(arr)) return tk_err_set(c->err, "normalizer Sequence: \"normalizers\" is not an array");
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) if (parse_normalizer(c, e, depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(type, "Prepend")) {
        json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p)) return tk_err_set(c->err, "normalizer Prepend: \"prepend\" is not a string");
        if (!strcmp(json_string_value(p), "\xe2\x96\x81")) c->saw_spm_norm = true;
        return tk_norm_add(c->t, TK_NORM_PREPEND, json_string_value(p), json_string_length(p), "", 0, c->err);
    }
    if (!strcmp(type, "Replace")) {
        json_t *pat = json_object_get(n, "pattern");
        json_t *content = json_object_get(n, "content");
        json_t *s = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
        if (!json_is_string(s))
            return tk_err_set(c->err, "normalizer Replace: only String patterns are supported");
        if (!json_is_string(content)) return tk_err_set(c->err, "normalizer Replace: \"content\" is not a string");
        if (!strcmp(json_string_value(content), "\xe2\x96\x81")) c->saw_spm_norm = true;
        return tk_norm_add(c->t, TK_NORM_REPLACE, json_string_value(s), json_string_length(s),
                           json_string_value(content), json_string_length(content), c->err);
    }
    static const struct { const char *name; tk_norm_kind kind; } simple[] = {
        {"NFC", TK_NORM_NFC}, {"NFD", TK_NORM_NFD}, {"NFKC", TK_NORM_NFKC},
        {"NFKD", TK_NORM_NFKD}, {"Lowercase", TK_NORM_LOWERCASE}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(type, simple[i].name)) return tk_norm_add(c->t, simple[i].kind, "", 0, "", 0, c->err);
    return tk_err_set(c->err, "unsupported normalizer '%s'", type);
}

/* ---- pre-tokenizers ---- */

static int add_literal_split(hf_ctx *c, const char *s, size_t n, tk_split_behavior b, bool inv) {
    tk_sbuf re = {0};
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        bool esc = ch < 0x80 && !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'));
        if ((esc && tk_sbuf_put(&re, "\\", 1)) || tk_sbuf_put(&re, s + i, 1)) {
            free(re.s);
            return tk_err_set(c->err, "out of memory");
        }
    }
    int rc = tk_pre_add_regex(c->t, re.s ? re.s : "", re.n, b, inv, c->err);
    free(re.s);
    return rc;
}

static int parse_pretok(hf_ctx *c, const json_t *p, int depth) {
    if (!p || json_is_null(p)) return 0;
    if (depth > 8) return tk_err_set(c->err, "pre_tokenizer: nested too deeply");
    if (!json_is_object(p)) return tk_err_set(c->err, "pre_tokenizer: not an object");
    const char *type = jstr(p, "type");
    if (!type) return tk_err_set(c->err, "pre_tokenizer: missing \"type\"");
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(p, "pretokenizers");
        if (!json_is_array(arr)) return tk_err_set(c->err, "pre_tokenizer Sequence: \"pretokenizers\" is not an array");
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) if (parse_pretok(c, e, depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const char *beh = jstr(p, "behavior");
        tk_split_behavior b;
        if (!beh || !strcmp(beh, "Isolated")) b = TK_SPLIT_ISOLATED;
        else if (!strcmp(beh, "Removed")) b = TK_SPLIT_REMOVED;
        else if (!strcmp(beh, "MergedWithPrevious")) b = TK_SPLIT_MERGED_PREV;
        else if (!strcmp(beh, "MergedWithNext")) b = TK_SPLIT_MERGED_NEXT;
        else if (!strcmp(beh, "Contiguous")) b = TK_SPLIT_CONTIGUOUS;
        else return tk_err_set(c->err, "pre_tokenizer Split: unknown behavior '%s'", beh);
        bool inv = jbool(p, "invert", false);
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
        json_t *str = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
        c->n_split++;
        if (json_is_string(re)) {
            c->split_re = json_string_value(re);
            return tk_pre_add_regex(c->t, json_string_value(re), json_string_length(re), b, inv, c->err);
        }
        if (json_is_string(str)) return add_literal_split(c, json_string_value(str), json_string_length(str), b, inv);
        return tk_err_set(c->err, "pre_tokenizer Split: pattern is neither Regex nor String");
    }
    if (!strcmp(type, "ByteLevel")) {
        c->saw_bytelevel = true;
        if (jbool(p, "add_prefix_space", false)) {
            tk_pre_step s = {0};
            s.kind = TK_PRE_PREFIX_SPACE;
            tk_pre_step *n = realloc(c->t->pre, (size_t)(c->t->n_pre + 1) * sizeof *n);
            if (!n) return tk_err_set(c->err, "out of memory");
            c->t->pre = n;
            c->t->pre[c->t->n_pre++] = s;
        }
        if (jbool(p, "use_regex", true))
            return tk_pre_add_regex(c->t, RE_BYTELEVEL, strlen(RE_BYTELEVEL), TK_SPLIT_ISOLATED, false, c->err);
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        c->saw_metaspace = true;
        const char *repl = jstr(p, "replacement");
        if (!repl) repl = "\xe2\x96\x81";
        tk_pre_step s = {0};
        s.kind = TK_PRE_METASPACE;
        s.repl_len = strlen(repl);
        if (s.repl_len == 0) return tk_err_set(c->err, "pre_tokenizer Metaspace: empty replacement");
        s.repl = malloc(s.repl_len + 1);
        if (!s.repl) return tk_err_set(c->err, "out of memory");
        memcpy(s.repl, repl, s.repl_len + 1);
        const char *scheme = jstr(p, "prepend_scheme");
        if (scheme) {
            if (!strcmp(scheme, "always")) s.prepend_scheme = TK_PREPEND_ALWAYS;
            else if (!strcmp(scheme, "first")) s.prepend_scheme = TK_PREPEND_FIRST;
            else if (!strcmp(scheme, "never")) s.prepend_scheme = TK_PREPEND_NEVER;
            else {
                free(s.repl);
                return tk_err_set(c->err, "pre_tokenizer Metaspace: unknown prepend_scheme '%s'", scheme);
            }
        } else {
            s.prepend_scheme = jbool(p, "add_prefix_space", true) ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
        }
        s.split = jbool(p, "split", true);
        tk_pre_step *n = realloc(c->t->pre, (size_t)(c->t->n_pre + 1) * sizeof *n);
        if (!n) {
            free(s.repl);
            return tk_err_set(c->err, "out of memory");
        }
        c->t->pre = n;
        c->t->pre[c->t->n_pre++] = s;
        return 0;
    }
    return tk_err_set(c->err, "unsupported pre_tokenizer '%s'", type);
}

/* ---- post-processor: does the single-sequence template start with a special token? ---- */

static void parse_post(hf_ctx *c, const json_t *p, int depth) {
    if (!json_is_object(p) || depth > 8) return;
    const char *type = jstr(p, "type");
    if (!type) return;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(p, "processors");
        size_t i;
        json_t *e;
        if (json_is_array(arr)) json_array_foreach(arr, i, e) parse_post(c, e, depth + 1);
        return;
    }
    if (strcmp(type, "TemplateProcessing") != 0) return;
    json_t *single = json_object_get(p, "single");
    json_t *first = json_is_array(single) ? json_array_get(single, 0) : NULL;
    json_t *st = json_is_object(first) ? json_object_get(first, "SpecialToken") : NULL;
    const char *name = json_is_object(st) ? jstr(st, "id") : NULL;
    if (!name) return;
    json_t *sts = json_object_get(p, "special_tokens");
    json_t *ent = json_is_object(sts) ? json_object_get(sts, name) : NULL;
    json_t *ids = json_is_object(ent) ? json_object_get(ent, "ids") : NULL;
    json_t *id0 = json_is_array(ids) ? json_array_get(ids, 0) : NULL;
    int id = -1;
    if (json_is_integer(id0)) {
        json_int_t v = json_integer_value(id0);
        if (v >= 0 && v < c->t->n_vocab) id = (int)v;
    }
    if (id < 0) id = tk_vocab_find(c->t, name, strlen(name));
    if (id >= 0) {
        c->has_template_bos = true;
        c->template_bos = id;
    }
}

/* ---- tokenizer_config.json ---- */

static int config_token(const tk_tokenizer *t, const json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    const char *s = NULL;
    size_t n = 0;
    if (json_is_string(v)) {
        s = json_string_value(v);
        n = json_string_length(v);
    } else if (json_is_object(v)) {
        json_t *cn = json_object_get(v, "content");
        if (json_is_string(cn)) {
            s = json_string_value(cn);
            n = json_string_length(cn);
        }
    }
    if (!s || n == 0) return -1;
    return tk_vocab_find(t, s, n);
}

static int first_found(const tk_tokenizer *t, const char *const *names) {
    for (int i = 0; names[i]; i++) {
        int id = tk_vocab_find(t, names[i], strlen(names[i]));
        if (id >= 0) return id;
    }
    return -1;
}

/* ---- main ---- */

static bool is_byte_piece(const char *p, size_t n) {
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return false;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
}

static int load_json(const char *path, size_t flags, json_t **out, tk_err *err) {
    char *buf;
    size_t len;
    if (tk_read_file(path, &buf, &len, err)) return -1;
    json_error_t je;
    json_t *j = json_loadb(buf, len, JSON_ALLOW_NUL | flags, &je);
    free(buf);
    if (!j) return tk_err_set(err, "%s: invalid JSON at line %d column %d: %s", path, je.line, je.column, je.text);
    *out = j;
    return 0;
}

static int split_merge(const json_t *m, const char **a, size_t *al, const char **b, size_t *bl) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) return -1;
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = n - *al - 1;
        if (memchr(*b, ' ', *bl)) return -1;
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2) {
        json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
        if (!json_is_string(x) || !json_is_string(y)) return -1;
        *a = json_string_value(x);
        *al = json_string_length(x);
        *b = json_string_value(y);
        *bl = json_string_length(y);
        return 0;
    }
    return -1;
}

static int build(tk_tokenizer *t, const json_t *root, const json_t *cfg, tk_err *err) {
    if (!json_is_object(root)) return tk_err_set(err, "top level is not an object");
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return tk_err_set(err, "missing \"model\" object");
    const char *mtype = jstr(model, "type");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    if (mtype && strcmp(mtype, "BPE") != 0) return tk_err_set(err, "unsupported model type '%s' (only BPE)", mtype);
    if (!json_is_object(vocab)) return tk_err_set(err, "model.vocab is not an object");
    if (!json_is_array(merges)) return tk_err_set(err, "model.merges is not an array");
    const char *cs = jstr(model, "continuing_subword_prefix");
    const char *ew = jstr(model, "end_of_word_suffix");
    if ((cs && cs[0]) || (ew && ew[0]))
        return tk_err_set(err, "unsupported BPE option continuing_subword_prefix / end_of_word_suffix");
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return tk_err_set(err, "added_tokens is not an array");

    /* size = largest id + 1 */
    json_int_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val)) return tk_err_set(err, "model.vocab['%.64s'] is not an integer", key);
        json_int_t id = json_integer_value(val);
        if (id < 0 || id >= (1 << 24)) return tk_err_set(err, "model.vocab['%.64s'] = %lld is out of range", key, (long long)id);
        if (id > max_id) max_id = id;
    }
    size_t i;
    json_t *e;
    if (json_is_array(added)) {
        json_array_foreach(added, i, e) {
            json_t *idv = json_is_object(e) ? json_object_get(e, "id") : NULL;
            json_t *cn = json_is_object(e) ? json_object_get(e, "content") : NULL;
            if (!json_is_integer(idv) || !json_is_string(cn))
                return tk_err_set(err, "added_tokens[%zu]: needs integer \"id\" and string \"content\"", i);
            json_int_t id = json_integer_value(idv);
            if (id < 0 || id >= (1 << 24)) return tk_err_set(err, "added_tokens[%zu]: id %lld is out of range", i, (long long)id);
            if (json_string_length(cn) == 0) return tk_err_set(err, "added_tokens[%zu]: empty content", i);
            if (id > max_id) max_id = id;
        }
    }
    if (max_id < 0) return tk_err_set(err, "model.vocab is empty");
    size_t n_entries = json_object_size(vocab) + (json_is_array(added) ? json_array_size(added) : 0);
    if ((size_t)max_id >= n_entries + 65536)
        return tk_err_set(err, "token id %lld leaves too many unused ids (%zu tokens defined)", (long long)max_id, n_entries);
    if (tk_vocab_init(t, (int)max_id + 1, err)) return -1;

    hf_ctx c = {0};
    c.t = t;
    c.err = err;
    c.template_bos = -1;
    if (parse_normalizer(&c, json_object_get(root, "normalizer"), 0)) return -1;
    if (parse_pretok(&c, json_object_get(root, "pre_tokenizer"), 0)) return -1;
    json_t *dec = json_object_get(root, "decoder");
    const char *dtype = json_is_object(dec) ? jstr(dec, "type") : NULL;
    if (dtype && !strcmp(dtype, "ByteLevel")) c.saw_bytelevel = true;

    t->byte_level = c.saw_bytelevel;
    t->kind = t->byte_level ? TK_TOK_BPE : TK_TOK_SPM;
    t->algo = TK_ALGO_BPE_RANKS;
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);

    json_object_foreach(vocab, key, val) {
        int id = (int)json_integer_value(val);
        size_t n = strlen(key); /* keys cannot hold NUL */
        if (tk_vocab_is_set(t, id)) return tk_err_set(err, "model.vocab: id %d is used twice", id);
        int ty = TK_TOKEN_NORMAL;
        if (!t->byte_level && is_byte_piece(key, n)) ty = TK_TOKEN_BYTE;
        if (tk_vocab_set(t, id, key, n, 0.0f, ty, err)) return -1;
    }
    /* added tokens: new pieces, or new attributes for vocab pieces */
    int n_added = json_is_array(added) ? (int)json_array_size(added) : 0;
    if (n_added > 0) {
        t->spec = calloc((size_t)n_added, sizeof *t->spec);
        if (!t->spec) return tk_err_set(err, "out of memory");
        json_array_foreach(added, i, e) {
            json_t *cn = json_object_get(e, "content");
            int id = (int)json_integer_value(json_object_get(e, "id"));
            const char *s = json_string_value(cn);
            size_t n = json_string_length(cn);
            bool special = jbool(e, "special", false);
            int ty = special ? TK_TOKEN_CONTROL : TK_TOKEN_USER_DEFINED;
            if (tk_vocab_is_set(t, id)) {
                if (t->len[id] != n || memcmp(t->blob + t->off[id], s, n) != 0)
                    return tk_err_set(err, "added_tokens[%zu]: id %d is '%.64s' in model.vocab but '%.64s' here",
                                      i, id, t->blob + t->off[id], s);
                t->type[id] = ty;
            } else if (tk_vocab_set(t, id, s, n, 0.0f, ty, err)) {
                return -1;
            }
            tk_special *sp = &t->spec[t->n_spec++];
            sp->id = id;
            sp->len = (uint32_t)n;
            sp->special = special;
            sp->lstrip = jbool(e, "lstrip", false);
            sp->rstrip = jbool(e, "rstrip", false);
            sp->single_word = jbool(e, "single_word", false);
        }
    }
    if (tk_vocab_finish(t, false, err)) return -1;

    const char *unk = jstr(model, "unk_token");
    if (unk) {
        t->unk = tk_vocab_find(t, unk, strlen(unk));
        if (t->unk < 0) return tk_err_set(err, "model.unk_token '%.64s' is not in the vocabulary", unk);
        if (t->type[t->unk] == TK_TOKEN_NORMAL || t->type[t->unk] == TK_TOKEN_CONTROL) t->type[t->unk] = TK_TOKEN_UNKNOWN;
    }

    /* merges */
    size_t nm = json_array_size(merges);
    if (nm > (1u << 26)) return tk_err_set(err, "model.merges: %zu merges is too many", nm);
    if (tk_merges_init(t, (int)nm, err)) return -1;
    tk_sbuf cat = {0};
    json_array_foreach(merges, i, e) {
        const char *a, *b;
        size_t al, bl;
        if (split_merge(e, &a, &al, &b, &bl)) {
            free(cat.s);
            return tk_err_set(err, "model.merges[%zu]: not a pair of pieces", i);
        }
        int ia = tk_vocab_find(t, a, al), ib = tk_vocab_find(t, b, bl);
        if (ia < 0 || ib < 0) {
            free(cat.s);
            return tk_err_set(err, "model.merges[%zu]: '%.*s' is not in the vocabulary", i,
                              (int)((ia < 0 ? al : bl) > 64 ? 64 : (ia < 0 ? al : bl)), ia < 0 ? a : b);
        }
        cat.n = 0;
        if (tk_sbuf_put(&cat, a, al) || tk_sbuf_put(&cat, b, bl)) {
            free(cat.s);
            return tk_err_set(err, "out of memory");
        }
        int ir = tk_vocab_find(t, cat.s, cat.n);
        if (ir < 0) {
            int k = (int)(cat.n > 64 ? 64 : cat.n);
            tk_err_set(err, "model.merges[%zu]: result '%.*s' is not in the vocabulary", i, k, cat.s);
            free(cat.s);
            return -1;
        }
        tk_merges_add(t, ia, ib, ir, false);
    }
    free(cat.s);

    /* SentencePiece-style scores for export: earlier merges score higher */
    if (!t->byte_level) {
        for (int id = 0; id < t->n_vocab; id++)
            if (t->type[id] == TK_TOKEN_NORMAL && tk_utf8_seq_len((const unsigned char *)t->blob + t->off[id], t->len[id]) != (int)t->len[id])
                t->score[id] = -1e9f;
        for (int r = t->n_merges - 1; r >= 0; r--)
            if (t->merge_l[r] >= 0) t->score[t->merge_res[r]] = -(float)r;
    }

    /* special ids and add_bos */
    parse_post(&c, json_object_get(root, "post_processor"), 0);
    if (cfg) {
        t->bos = config_token(t, cfg, "bos_token");
        t->eos = config_token(t, cfg, "eos_token");
        t->pad = config_token(t, cfg, "pad_token");
        int u = config_token(t, cfg, "unk_token");
        if (t->unk < 0) t->unk = u;
    }
    static const char *const bos_names[] = {"<s>", "<|begin_of_text|>", "<bos>", NULL};
    static const char *const eos_names[] = {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>", NULL};
    if (t->bos < 0) t->bos = c.has_template_bos ? c.template_bos : first_found(t, bos_names);
    if (t->eos < 0) t->eos = first_found(t, eos_names);

    /* pre-tokenizer name for GGUF export */
    if (t->byte_level) {
        const char *pre = "default";
        if (c.n_split == 0 && t->n_pre > 0) pre = "gpt-2";
        else if (c.n_split == 1 && c.split_re && !strcmp(c.split_re, RE_HF_LLAMA3)) pre = "llama-bpe";
        else if (c.n_split == 1 && c.split_re && !strcmp(c.split_re, RE_HF_QWEN2)) pre = "qwen2";
        snprintf(t->pre_name, sizeof t->pre_name, "%s", pre);
    }

    json_t *ab = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
    if (json_is_boolean(ab)) t->add_bos = json_is_true(ab);
    else if (c.has_template_bos) t->add_bos = true;
    else t->add_bos = !strcmp(t->pre_name, "llama-bpe"); /* as llama.cpp does for this pre-tokenizer */

    return tk_finalize_specials(t, false, err);
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Builds from a parsed tokenizer.json (root, consumed) and its config. */
static int from_parsed(const char *json_path, json_t *root, const json_t *cfg, tk_tokenizer **out, tk_err *err) {
    tk_tokenizer *t = tk_tok_alloc();
    if (!t) {
        json_decref(root);
        return tk_err_set(err, "out of memory");
    }
    int rc = build(t, root, cfg, err);
    json_decref(root);
    if (rc) {
        tk_err_wrap(err, "%s", json_path);
        tk_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int tk_tokenizer_from_hf_json(const char *json_path, const json_t *cfg, const char *cfg_error, tk_tokenizer **out,
                              tk_err *err) {
    *out = NULL;
    json_t *root;
    if (load_json(json_path, 0, &root, err)) return -1;
    if (cfg_error) {
        json_decref(root);
        return tk_err_set(err, "%s", cfg_error);
    }
    return from_parsed(json_path, root, cfg, out, err);
}

int tk_tokenizer_from_hf(const char *path, tk_tokenizer **out, tk_err *err) {
    *out = NULL;
    char json_path[4096], cfg_path[4096];
    if (is_dir(path)) {
        snprintf(json_path, sizeof json_path, "%s/tokenizer.json", path);
        snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", path);
    } else {
        snprintf(json_path, sizeof json_path, "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash)
            snprintf(cfg_path, sizeof cfg_path, "%.*s/tokenizer_config.json", (int)(slash - path), path);
        else
            snprintf(cfg_path, sizeof cfg_path, "tokenizer_config.json");
    }
    json_t *root, *cfg;
    if (load_json(json_path, 0, &root, err)) return -1;
    if (tk_hf_tokenizer_config_read(cfg_path, &cfg, err)) {
        json_decref(root);
        return -1;
    }
    int rc = from_parsed(json_path, root, cfg, out, err);
    json_decref(cfg);
    return rc;
}
