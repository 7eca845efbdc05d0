/* Internal representation shared by the tokenizer modules.  Nothing here is
 * part of the public API (see tokenizer.h). */
#ifndef TK_TOK_INTERNAL_H
#define TK_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "../util/utf8.h"
#include "tokenizer.h"

/* Merge algorithm of the model. */
typedef enum tk_algo {
    TK_ALGO_SPM_SCORES = 0, /* llama.cpp / llama2.c: merge any adjacent pair whose
                               concatenation is a piece, highest score first */
    TK_ALGO_BPE_RANKS = 1   /* merge pairs from the merges list, lowest rank first */
} tk_algo;

/* Normalizer operations, applied in order to every text segment between
 * special tokens. */
typedef enum tk_norm_kind {
    TK_NORM_PREPEND = 0, /* prepend a (only to non-empty text) */
    TK_NORM_REPLACE,     /* replace every occurrence of a by b */
    TK_NORM_NFC,
    TK_NORM_NFD,
    TK_NORM_NFKC,
    TK_NORM_NFKD,
    TK_NORM_LOWERCASE
} tk_norm_kind;

typedef struct tk_norm_op {
    tk_norm_kind kind;
    char *a, *b;
    size_t alen, blen;
} tk_norm_op;

/* Pre-tokenizer steps, applied in order to the list of words. */
typedef enum tk_pre_kind {
    TK_PRE_REGEX = 0,     /* split every word by a regex */
    TK_PRE_PREFIX_SPACE,  /* ByteLevel add_prefix_space: prepend ' ' to a word
                             that does not start with one */
    TK_PRE_METASPACE      /* HF Metaspace: ' ' -> replacement, optional prefix,
                             optional split before each replacement */
} tk_pre_kind;

/* What happens to the regex matches (HF SplitDelimiterBehavior). */
typedef enum tk_split_behavior {
    TK_SPLIT_ISOLATED = 0,
    TK_SPLIT_REMOVED,
    TK_SPLIT_MERGED_PREV,
    TK_SPLIT_MERGED_NEXT,
    TK_SPLIT_CONTIGUOUS
} tk_split_behavior;

enum { TK_PREPEND_ALWAYS = 0, TK_PREPEND_FIRST = 1, TK_PREPEND_NEVER = 2 };

typedef struct tk_pre_step {
    tk_pre_kind kind;
    pcre2_code *re;          /* TK_PRE_REGEX */
    tk_split_behavior behavior;
    bool invert;
    char *repl;              /* TK_PRE_METASPACE replacement (UTF-8) */
    size_t repl_len;
    int prepend_scheme;
    bool split;
} tk_pre_step;

/* A token matched verbatim in the input before normal tokenization. */
typedef struct tk_special {
    int32_t id;
    uint32_t len;
    bool special;     /* control-like: matched only with parse_special */
    bool lstrip, rstrip, single_word;
} tk_special;

struct tk_tokenizer {
    tk_tok_kind kind;
    tk_algo algo;
    bool byte_level;     /* GPT-2 byte <-> unicode mapping */
    bool byte_fallback;  /* unknown chars -> <0xNN> pieces */
    bool fuse_unk;
    bool ignore_merges;  /* a word that is a piece is emitted whole */
    bool add_bos;
    bool has_unk_piece;

    int n_vocab;
    char *blob;          /* NUL-terminated pieces */
    size_t blob_len, blob_cap;
    size_t *off;
    uint32_t *len;
    float *score;
    int32_t *type;
    int max_piece_len;

    /* piece -> id (open addressing, -1 = empty) */
    int32_t *map;
    uint32_t map_mask;

    /* merges: (left id, right id) -> rank / result; lists kept by rank */
    int n_merges;
    int32_t *merge_l, *merge_r, *merge_res;
    uint64_t *mkey;      /* UINT64_MAX = empty */
    int32_t *mval;       /* rank */
    uint32_t mmask;

    int32_t byte_id[256]; /* id of the piece for each raw byte, -1 if none */

    int bos, eos, unk, eot, eom, pad;
    int32_t *eog;
    int n_eog;

    tk_norm_op *norm;
    int n_norm;
    tk_pre_step *pre;
    int n_pre;
    char pre_name[48];   /* GGUF tokenizer.ggml.pre */

    tk_special *spec;    /* sorted by length, longest first */
    int n_spec;
    bool spec_first[256]; /* first bytes of the special pieces */
};

/* ---- vocab.c ---- */
tk_tokenizer *tk_tok_alloc(void);
int tk_vocab_init(tk_tokenizer *t, int n, tk_err *err);
/* Sets piece `id` (copied). */
int tk_vocab_set(tk_tokenizer *t, int id, const char *s, size_t len, float score, int type,
                 tk_err *err);
bool tk_vocab_is_set(const tk_tokenizer *t, int id);
/* Fills holes, builds the piece map (duplicate pieces are an error when
 * dup_error, otherwise the first id wins), the byte table and max length. */
int tk_vocab_finish(tk_tokenizer *t, bool dup_error, tk_err *err);
int tk_vocab_find(const tk_tokenizer *t, const char *s, size_t len);
int tk_merges_init(tk_tokenizer *t, int n, tk_err *err);
/* Adds a merge with the next rank.  Returns 1 if added, 0 if it duplicated an
 * earlier pair (ignored when keep_first, replaced otherwise). */
int tk_merges_add(tk_tokenizer *t, int32_t l, int32_t r, int32_t res, bool keep_first);
/* Rank of (l, r) or -1; *res gets the merged id. */
int tk_merges_find(const tk_tokenizer *t, int32_t l, int32_t r, int32_t *res);
/* Auto-detects EOT/EOG ids from piece texts and collects the special-token
 * list from token types (CONTROL, USER_DEFINED, UNKNOWN). */
int tk_finalize_specials(tk_tokenizer *t, bool from_types, tk_err *err);
int tk_special_sort(tk_tokenizer *t);

/* ---- load_hf.c ---- */
struct json_t;
/* tokenizer.json at json_path with its tokenizer_config.json already read:
 * cfg (NULL: none), or cfg_error, the message of a config that could not
 * be read, which fails the load (after tokenizer.json's own errors). */
int tk_tokenizer_from_hf_json(const char *json_path, const struct json_t *cfg, const char *cfg_error,
                              tk_tokenizer **out, tk_err *err);

/* ---- utf8.c ---- */
/* Length of a valid UTF-8 sequence starting at s (1..4), 0 if invalid. */
int tk_utf8_seq_len(const unsigned char *s, size_t avail);
/* Byte offset of the first invalid sequence, or (size_t)-1 if all valid. */
size_t tk_utf8_validate(const char *s, size_t len);
uint32_t tk_utf8_decode(const unsigned char *s, int n);
/* GPT-2 byte-level mapping. */
uint32_t tk_byte_to_cp(unsigned char b);
int tk_cp_to_byte(uint32_t cp); /* -1 if not a mapped code point */

/* ---- growable buffers ---- */
typedef struct tk_ivec {
    int32_t *v;
    size_t n, cap;
} tk_ivec;
int tk_ivec_push(tk_ivec *a, int32_t x);
typedef struct tk_sbuf {
    char *s;
    size_t n, cap;
} tk_sbuf;
int tk_sbuf_put(tk_sbuf *b, const char *s, size_t n);

/* ---- pretok.c ---- */
/* Compiles a regex with PCRE2_UTF|PCRE2_UCP after rewriting \s / \S to the
 * Unicode White_Space set (as Rust/Oniguruma and llama.cpp define it). */
pcre2_code *tk_regex_compile(const char *pattern, size_t len, tk_err *err);
/* Sets the regex steps for a GGUF tokenizer.ggml.pre kind. */
int tk_pretok_set_kind(tk_tokenizer *t, const char *kind, tk_err *err);
int tk_pre_add_regex(tk_tokenizer *t, const char *pattern, size_t len, tk_split_behavior b,
                     bool invert, tk_err *err);
void tk_pretok_free(tk_tokenizer *t);

typedef struct tk_span {
    size_t start, len;
} tk_span;
typedef struct tk_words {
    tk_sbuf text;     /* the words' bytes */
    tk_span *w;
    size_t n, cap;
} tk_words;
/* Splits text (one segment) into words by the tokenizer's pre-tokenizer
 * steps; `first` tells whether this segment starts the input. */
int tk_pretokenize(const tk_tokenizer *t, const char *text, size_t len, bool first,
                   tk_words *out, tk_err *err);
void tk_words_free(tk_words *w);

/* ---- spm.c / bpe.c ---- */
typedef struct tk_scratch {
    void *a;
    size_t a_cap;
    void *b;
    size_t b_cap;
} tk_scratch;
void tk_scratch_free(tk_scratch *s);
/* Score-based SentencePiece merge over already normalized text. */
int tk_spm_encode(const tk_tokenizer *t, const char *text, size_t len, tk_ivec *out,
                  tk_scratch *sc, tk_err *err);
/* Rank-based BPE over one word. */
int tk_bpe_encode_word(const tk_tokenizer *t, const char *word, size_t len, tk_ivec *out,
                       tk_scratch *sc, tk_err *err);

/* ---- normalize.c ---- */
int tk_normalize(const tk_tokenizer *t, const char *text, size_t len, tk_sbuf *out,
                 tk_err *err);
void tk_norm_free(tk_tokenizer *t);
int tk_norm_add(tk_tokenizer *t, tk_norm_kind kind, const char *a, size_t alen, const char *b,
                size_t blen, tk_err *err);

/* ---- encode.c ---- */
/* Unicode White_Space. */
bool tk_is_space_cp(uint32_t cp);

#endif
