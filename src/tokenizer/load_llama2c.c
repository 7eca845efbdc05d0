/* llama2.c tokenizer.bin: int32 max_token_length, then for every token a
 * float32 score, an int32 byte length and the bytes.  llama2.c's exporter
 * wrote SentencePiece's U+2581 as ' ' and BOS/EOS as "\n<s>\n" / "\n</s>\n";
 * both are mapped back so the vocabulary looks like every other SPM one. */
#include <stdlib.h>
#include <string.h>

#include <tokamak.h> /* tk_mapfile, tk_read_file */
#include "tok_internal.h"

static int32_t rd_i32(const unsigned char *p) {
    uint32_t v = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    int32_t r;
    memcpy(&r, &v, 4);
    return r;
}

static float rd_f32(const unsigned char *p) {
    uint32_t v = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static bool is_byte_piece(const char *p, size_t n) {
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return false;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'))) return false;
    }
    return true;
}

/* Number of complete token records (when no checkpoint tells the size). */
static int count_tokens(const unsigned char *d, size_t size) {
    if (size < 4) return 0;
    size_t off = 4;
    int n = 0;
    while (size - off >= 8 && n < (1 << 24)) {
        int32_t len = rd_i32(d + off + 4);
        if (len < 0 || (size_t)len > size - off - 8) return -1;
        off += 8 + (size_t)len;
        n++;
    }
    return off == size ? n : -1;
}

static int build(tk_tokenizer *t, const unsigned char *d, size_t size, int vocab_size, tk_err *err) {
    if (size < 4) return tk_err_set(err, "file too short for the header (%zu bytes)", size);
    int32_t max_len = rd_i32(d);
    if (max_len < 0 || max_len > (1 << 20)) return tk_err_set(err, "bad max_token_length %d", max_len);
    if ((size_t)vocab_size > (size - 4) / 8) /* every record takes at least 8 bytes */
        return tk_err_set(err, "truncated: %zu bytes cannot hold %d tokens", size, vocab_size);
    if (tk_vocab_init(t, vocab_size, err)) return -1;
    size_t off = 4;
    tk_sbuf piece = {0};
    for (int i = 0; i < vocab_size; i++) {
        if (size - off < 8) {
            free(piece.s);
            return tk_err_set(err, "truncated at token %d of %d (offset %zu)", i, vocab_size, off);
        }
        float score = rd_f32(d + off);
        int32_t len = rd_i32(d + off + 4);
        off += 8;
        if (len < 0 || (size_t)len > size - off) {
            free(piece.s);
            return tk_err_set(err, "token %d: length %d exceeds the file (offset %zu)", i, len, off - 4);
        }
        if (len > max_len && max_len > 0) {
            free(piece.s);
            return tk_err_set(err, "token %d: length %d exceeds max_token_length %d", i, len, max_len);
        }
        const char *s = (const char *)d + off;
        off += (size_t)len;
        int ty = TK_TOKEN_NORMAL;
        piece.n = 0;
        int rc = 0;
        if (i == 0 && len == 5 && !memcmp(s, "<unk>", 5)) {
            ty = TK_TOKEN_UNKNOWN;
            rc = tk_sbuf_put(&piece, s, (size_t)len);
        } else if ((i == 1 || i == 2) && len >= 2 && s[0] == '\n' && s[len - 1] == '\n') {
            ty = TK_TOKEN_CONTROL;
            rc = tk_sbuf_put(&piece, s + 1, (size_t)len - 2);
        } else if (is_byte_piece(s, (size_t)len)) {
            ty = TK_TOKEN_BYTE;
            rc = tk_sbuf_put(&piece, s, (size_t)len);
        } else {
            for (int k = 0; k < len && rc == 0; k++)
                rc = s[k] == ' ' ? tk_sbuf_put(&piece, "\xe2\x96\x81", 3) : tk_sbuf_put(&piece, s + k, 1);
        }
        if (rc) {
            free(piece.s);
            return tk_err_set(err, "out of memory");
        }
        if (tk_vocab_set(t, i, piece.s ? piece.s : "", piece.n, score, ty, err)) {
            free(piece.s);
            return -1;
        }
    }
    free(piece.s);
    t->kind = TK_TOK_SPM;
    t->algo = TK_ALGO_SPM_SCORES;
    t->add_bos = true;
    if (tk_vocab_finish(t, false, err)) return -1;
    if (vocab_size > 0 && t->type[0] == TK_TOKEN_UNKNOWN) t->unk = 0;
    if (vocab_size > 1 && t->type[1] == TK_TOKEN_CONTROL) t->bos = 1;
    if (vocab_size > 2 && t->type[2] == TK_TOKEN_CONTROL) t->eos = 2;
    if (tk_norm_add(t, TK_NORM_PREPEND, " ", 1, "", 0, err) ||
        tk_norm_add(t, TK_NORM_REPLACE, " ", 1, "\xe2\x96\x81", 3, err))
        return -1;
    return tk_finalize_specials(t, true, err);
}

int tk_tokenizer_from_llama2c(const char *path, int vocab_size, tk_tokenizer **out, tk_err *err) {
    *out = NULL;
    if (vocab_size < 0 || vocab_size > (1 << 24))
        return tk_err_set(err, "%s: bad vocabulary size %d", path, vocab_size);
    tk_mapfile m;
    if (tk_mapfile_open(&m, path, err)) return -1;
    if (vocab_size == 0) vocab_size = count_tokens(m.data, m.size);
    if (vocab_size <= 0) {
        tk_mapfile_close(&m);
        return tk_err_set(err, "%s: not a llama2.c tokenizer.bin (no complete token records)", path);
    }
    tk_tokenizer *t = tk_tok_alloc();
    if (!t) {
        tk_mapfile_close(&m);
        return tk_err_set(err, "out of memory");
    }
    int rc = build(t, m.data, m.size, vocab_size, err);
    tk_mapfile_close(&m);
    if (rc) {
        tk_err_wrap(err, "%s", path);
        tk_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}
