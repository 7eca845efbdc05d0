/* SentencePiece tokenizer.model (a serialized ModelProto protobuf).
 *
 * Only the fields the encoder needs are read:
 *   ModelProto      1: repeated SentencePiece pieces, 2: TrainerSpec, 3: NormalizerSpec
 *   SentencePiece   1: piece (string), 2: score (float), 3: type (enum = GGUF token types)
 *   TrainerSpec     3: model_type (1 unigram, 2 BPE), 35: byte_fallback,
 *                   40: unk_id, 41: bos_id, 42: eos_id
 *   NormalizerSpec  3: add_dummy_prefix (default true)
 * Everything else is skipped by wire type.  The input is untrusted: every
 * length is checked against the remaining bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h> /* tk_mapfile, tk_read_file */
#include "tok_internal.h"

typedef struct pb {
    const unsigned char *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return -1;
        unsigned char c = *b->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Reads a field key and its value; `sub` gets the bytes of a
 * length-delimited field. */
static int pb_field(pb *b, uint32_t *field, int *wire, uint64_t *value, pb *sub) {
    uint64_t key;
    if (pb_varint(b, &key)) return -1;
    *field = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: return pb_varint(b, value);
    case 1:
        if (b->end - b->p < 8) return -1;
        memcpy(value, b->p, 8);
        b->p += 8;
        return 0;
    case 5: {
        if (b->end - b->p < 4) return -1;
        uint32_t v32;
        memcpy(&v32, b->p, 4);
        *value = v32;
        b->p += 4;
        return 0;
    }
    case 2: {
        uint64_t len;
        if (pb_varint(b, &len) || len > (uint64_t)(b->end - b->p)) return -1;
        sub->p = b->p;
        sub->end = b->p + len;
        b->p += len;
        return 0;
    }
    default: return -1; /* groups (3, 4) are not used by sentencepiece */
    }
}

typedef struct spm_meta {
    int model_type, unk, bos, eos;
    bool byte_fallback, add_dummy_prefix;
} spm_meta;

static int read_trainer(pb b, spm_meta *m) {
    while (b.p < b.end) {
        uint32_t f;
        int w;
        uint64_t v = 0;
        pb sub;
        if (pb_field(&b, &f, &w, &v, &sub)) return -1;
        if (w != 0) continue;
        if (f == 3) m->model_type = (int)v;
        else if (f == 35) m->byte_fallback = v != 0;
        else if (f == 40) m->unk = (int)(int32_t)v;
        else if (f == 41) m->bos = (int)(int32_t)v;
        else if (f == 42) m->eos = (int)(int32_t)v;
    }
    return 0;
}

static int read_normalizer(pb b, spm_meta *m) {
    while (b.p < b.end) {
        uint32_t f;
        int w;
        uint64_t v = 0;
        pb sub;
        if (pb_field(&b, &f, &w, &v, &sub)) return -1;
        if (w == 0 && f == 3) m->add_dummy_prefix = v != 0;
    }
    return 0;
}

static int read_piece(pb b, pb *text, float *score, int *type) {
    text->p = text->end = NULL;
    *score = 0;
    *type = TK_TOKEN_NORMAL;
    while (b.p < b.end) {
        uint32_t f;
        int w;
        uint64_t v = 0;
        pb sub;
        if (pb_field(&b, &f, &w, &v, &sub)) return -1;
        if (f == 1 && w == 2) *text = sub;
        else if (f == 2 && w == 5) {
            uint32_t bits = (uint32_t)v;
            memcpy(score, &bits, 4);
        } else if (f == 3 && w == 0) {
            if (v < 1 || v > 6) return -1;
            *type = (int)v;
        }
    }
    return text->p ? 0 : -1;
}

static int build(tk_tokenizer *t, const unsigned char *data, size_t size, tk_err *err) {
    spm_meta meta = {.model_type = 1, .unk = 0, .bos = 1, .eos = 2, .add_dummy_prefix = true};
    /* First pass: count pieces and read the specs. */
    pb b = {data, data + size};
    int n = 0;
    while (b.p < b.end) {
        uint32_t f;
        int w;
        uint64_t v;
        pb sub;
        if (pb_field(&b, &f, &w, &v, &sub)) return tk_err_set(err, "malformed protobuf at byte %zu", (size_t)(b.p - data));
        if (f == 1 && w == 2) {
            if (n == 1 << 22) return tk_err_set(err, "too many pieces");
            n++;
        } else if (f == 2 && w == 2) {
            if (read_trainer(sub, &meta)) return tk_err_set(err, "malformed trainer_spec");
        } else if (f == 3 && w == 2) {
            if (read_normalizer(sub, &meta)) return tk_err_set(err, "malformed normalizer_spec");
        }
    }
    if (n == 0) return tk_err_set(err, "no pieces: not a SentencePiece model");
    if (meta.model_type != 2)
        return tk_err_set(err, "SentencePiece model type %d is not supported (only BPE, type 2)", meta.model_type);
    if (tk_vocab_init(t, n, err)) return -1;
    b.p = data;
    int id = 0;
    while (b.p < b.end) {
        uint32_t f;
        int w;
        uint64_t v;
        pb sub, text;
        if (pb_field(&b, &f, &w, &v, &sub)) return tk_err_set(err, "malformed protobuf");
        if (f != 1 || w != 2) continue;
        float score;
        int type;
        if (read_piece(sub, &text, &score, &type)) return tk_err_set(err, "piece %d is malformed", id);
        if (tk_vocab_set(t, id, (const char *)text.p, (size_t)(text.end - text.p), score, type, err)) return -1;
        id++;
    }
    t->kind = TK_TOK_SPM;
    t->algo = TK_ALGO_SPM_SCORES;
    t->byte_fallback = meta.byte_fallback;
    t->add_bos = true;
    if (tk_vocab_finish(t, false, err)) return -1;
    t->unk = meta.unk >= 0 && meta.unk < n ? meta.unk : -1;
    t->bos = meta.bos >= 0 && meta.bos < n ? meta.bos : -1;
    t->eos = meta.eos >= 0 && meta.eos < n ? meta.eos : -1;
    if (meta.add_dummy_prefix && tk_norm_add(t, TK_NORM_PREPEND, " ", 1, "", 0, err)) return -1;
    if (tk_norm_add(t, TK_NORM_REPLACE, " ", 1, "\xe2\x96\x81", 3, err)) return -1;
    return tk_finalize_specials(t, true, err);
}

int tk_tokenizer_from_spm_model(const char *path, tk_tokenizer **out, tk_err *err) {
    *out = NULL;
    tk_mapfile m;
    if (tk_mapfile_open(&m, path, err)) return -1;
    tk_tokenizer *t = tk_tok_alloc();
    if (!t) {
        tk_mapfile_close(&m);
        return tk_err_set(err, "out of memory");
    }
    int rc = build(t, m.data, m.size, err);
    tk_mapfile_close(&m);
    if (rc) {
        tk_err_wrap(err, "%s", path);
        tk_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}
