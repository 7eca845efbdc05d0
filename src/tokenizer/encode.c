/* tk_tokenize: validate UTF-8, split out special tokens (leftmost, longest
 * first), then normalize, pre-tokenize and merge each text segment. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

bool tk_is_space_cp(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* Length of the whitespace character ending at text[end) or starting at
 * text[start], 0 if none. */
static size_t space_before(const char *s, size_t end) {
    if (end == 0) return 0;
    size_t b = end - 1;
    while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80 && end - b < 4) b--;
    int n = tk_utf8_seq_len((const unsigned char *)s + b, end - b);
    if (n <= 0 || (size_t)n != end - b) return 0;
    return tk_is_space_cp(tk_utf8_decode((const unsigned char *)s + b, n)) ? (size_t)n : 0;
}

static size_t space_at(const char *s, size_t pos, size_t len) {
    if (pos >= len) return 0;
    int n = tk_utf8_seq_len((const unsigned char *)s + pos, len - pos);
    if (n <= 0) return 0;
    return tk_is_space_cp(tk_utf8_decode((const unsigned char *)s + pos, n)) ? (size_t)n : 0;
}

static bool is_word_byte(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c >= 0x80;
}

/* Finds the special token starting at text[i] (longest first); 0 if none. */
static const tk_special *match_special(const tk_tokenizer *t, const char *text, size_t len, size_t i,
                                       bool parse_special) {
    for (int k = 0; k < t->n_spec; k++) {
        const tk_special *sp = &t->spec[k];
        if (sp->special && !parse_special) continue;
        if (sp->len > len - i) continue;
        const char *p = t->blob + t->off[sp->id];
        if (p[0] != text[i] || memcmp(p, text + i, sp->len) != 0) continue;
        if (sp->single_word) {
            if (i > 0 && is_word_byte((unsigned char)text[i - 1])) continue;
            if (i + sp->len < len && is_word_byte((unsigned char)text[i + sp->len])) continue;
        }
        return sp;
    }
    return NULL;
}

typedef struct enc_state {
    tk_ivec out;
    tk_sbuf norm;
    tk_words words;
    tk_scratch sc;
} enc_state;

static int encode_segment(const tk_tokenizer *t, enc_state *st, const char *s, size_t n, bool first,
                          tk_err *err) {
    if (n == 0) return 0;
    if (tk_normalize(t, s, n, &st->norm, err)) return -1;
    if (st->norm.n == 0) return 0;
    if (t->algo == TK_ALGO_SPM_SCORES && t->n_pre == 0)
        return tk_spm_encode(t, st->norm.s, st->norm.n, &st->out, &st->sc, err);
    if (tk_pretokenize(t, st->norm.s, st->norm.n, first, &st->words, err)) return -1;
    for (size_t w = 0; w < st->words.n; w++) {
        const char *ws = st->words.text.s + st->words.w[w].start;
        size_t wl = st->words.w[w].len;
        int rc = t->algo == TK_ALGO_SPM_SCORES ? tk_spm_encode(t, ws, wl, &st->out, &st->sc, err)
                                               : tk_bpe_encode_word(t, ws, wl, &st->out, &st->sc, err);
        if (rc) return -1;
    }
    return 0;
}

int tk_tokenize(const tk_tokenizer *t, const char *text, size_t len, bool add_bos,
                bool parse_special, int32_t *ids, int cap, int *n_out, tk_err *err) {
    if (n_out) *n_out = 0;
    if (!text && len > 0) return tk_err_set(err, "tokenize: text is NULL");
    size_t bad = tk_utf8_validate(text, len);
    if (bad != (size_t)-1) return tk_err_set(err, "invalid UTF-8 at byte %zu", bad);

    enc_state st = {0};
    int rc = 0;
    if (add_bos && t->bos >= 0 && tk_ivec_push(&st.out, t->bos)) {
        rc = tk_err_set(err, "out of memory");
        goto done;
    }
    size_t seg = 0; /* start of the current raw segment */
    size_t i = 0;
    while (i < len && rc == 0) {
        const tk_special *sp = NULL;
        if (t->spec_first[(unsigned char)text[i]]) sp = match_special(t, text, len, i, parse_special);
        if (!sp) {
            i++;
            continue;
        }
        size_t seg_end = i;
        if (sp->lstrip) {
            size_t k;
            while (seg_end > seg && (k = space_before(text, seg_end)) > 0) seg_end -= k;
        }
        rc = encode_segment(t, &st, text + seg, seg_end - seg, seg == 0, err);
        if (rc) break;
        if (tk_ivec_push(&st.out, sp->id)) {
            rc = tk_err_set(err, "out of memory");
            break;
        }
        i += sp->len;
        if (sp->rstrip) {
            size_t k;
            while ((k = space_at(text, i, len)) > 0) i += k;
        }
        seg = i;
    }
    if (rc == 0) rc = encode_segment(t, &st, text + seg, len - seg, seg == 0, err);
    if (rc == 0) {
        if (st.out.n > 0x7fffffff) {
            rc = tk_err_set(err, "too many tokens");
        } else {
            int n = (int)st.out.n;
            if (ids && cap > 0 && n > 0) memcpy(ids, st.out.v, (size_t)(n < cap ? n : cap) * sizeof *ids);
            if (n_out) *n_out = n;
        }
    }
done:
    free(st.out.v);
    free(st.norm.s);
    tk_words_free(&st.words);
    tk_scratch_free(&st.sc);
    return rc;
}
