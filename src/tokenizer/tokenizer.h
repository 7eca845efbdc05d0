/* Tokenizers: SentencePiece-style BPE with byte fallback and byte-level BPE
 * with pre-tokenizer regexes, loaded from GGUF metadata, a llama2.c
 * tokenizer.bin, or a Hugging Face tokenizer.json. */
#ifndef TK_TOKENIZER_H
#define TK_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

struct tk_gguf;
struct tk_gguf_writer;
struct tk_source;

typedef struct tk_tokenizer tk_tokenizer;

typedef enum tk_tok_kind {
    TK_TOK_SPM = 0,      /* SentencePiece BPE ("llama" in GGUF) */
    TK_TOK_BPE = 1       /* byte-level BPE ("gpt2" in GGUF) */
} tk_tok_kind;

/* Token attribute (GGUF tokenizer.ggml.token_type values). */
enum {
    TK_TOKEN_NORMAL = 1, TK_TOKEN_UNKNOWN = 2, TK_TOKEN_CONTROL = 3,
    TK_TOKEN_USER_DEFINED = 4, TK_TOKEN_UNUSED = 5, TK_TOKEN_BYTE = 6
};

int tk_tokenizer_from_gguf(const struct tk_gguf *g, tk_tokenizer **out, tk_err *err);
/* llama2.c tokenizer.bin; vocab_size comes from the checkpoint header
 * (0: every token record in the file). */
int tk_tokenizer_from_llama2c(const char *path, int vocab_size, tk_tokenizer **out, tk_err *err);
/* SentencePiece tokenizer.model (protobuf ModelProto, BPE models). */
int tk_tokenizer_from_spm_model(const char *path, tk_tokenizer **out, tk_err *err);
/* path: a tokenizer.json file or a directory holding tokenizer.json (and
 * optionally tokenizer_config.json for add_bos / special tokens). */
int tk_tokenizer_from_hf(const char *path, tk_tokenizer **out, tk_err *err);
void tk_tokenizer_free(tk_tokenizer *t);
/* Opens the tokenizer of a model: model_path may be a .gguf file (vocab-only
 * GGUFs work), a Hugging Face directory (tokenizer.json +
 * tokenizer_config.json), a tokenizer.json, or a llama2.c checkpoint (its
 * header gives the vocabulary size; tokenizer_path must then name the
 * tokenizer.bin).  A tokenizer_path (tokenizer.json, directory, .gguf or
 * tokenizer.bin) overrides the model's own vocabulary. */
int tk_tokenizer_open(const char *model_path, const char *tokenizer_path, tk_tokenizer **out,
                      tk_err *err);
/* The tokenizer of an open model source, from the metadata it already
 * holds (the GGUF file's keys, the HF directory's tokenizer.model or
 * tokenizer.json with its tokenizer_config.json, a llama2.c checkpoint's
 * vocabulary size); tokenizer_path overrides the vocabulary as in
 * tk_tokenizer_open.  The model's generation_config.json eos ids join the
 * end-of-generation set either way. */
int tk_tokenizer_from_source(const struct tk_source *src, const char *tokenizer_path, tk_tokenizer **out,
                             tk_err *err);

tk_tok_kind tk_tokenizer_kind(const tk_tokenizer *t);
int tk_tokenizer_n_vocab(const tk_tokenizer *t);
int tk_tokenizer_bos(const tk_tokenizer *t);   /* -1 if none */
int tk_tokenizer_eos(const tk_tokenizer *t);   /* -1 if none */
bool tk_tokenizer_add_bos(const tk_tokenizer *t); /* model's default */
/* Whether token id ends generation (EOS, EOT, ...). */
bool tk_tokenizer_is_eog(const tk_tokenizer *t, int id);
/* Raw vocabulary piece (as stored, e.g. "▁the" or "Ġthe"), NUL-terminated. */
const char *tk_tokenizer_piece(const tk_tokenizer *t, int id);
int tk_tokenizer_token_type(const tk_tokenizer *t, int id);
/* Id of a piece given as stored (e.g. "<|eot_id|>"), -1 if absent. */
int tk_tokenizer_find(const tk_tokenizer *t, const char *piece);

/* Encodes UTF-8 text.  Invalid UTF-8 is an error ("invalid UTF-8 at byte N").
 * With parse_special, special/control token texts in the input map to their
 * ids (leftmost, longest first, as HF tokenizers does for added tokens);
 * user-defined (non-special) added tokens are always matched.  Writes up to
 * cap ids; *n_out gets the total count (may exceed cap: call again bigger). */
int tk_tokenize(const tk_tokenizer *t, const char *text, size_t len, bool add_bos,
                bool parse_special, int32_t *ids, int cap, int *n_out, tk_err *err);

/* Bytes that token `id` contributes to the decoded text, given the previous
 * token (SPM strips the leading space after BOS).  Control tokens decode to
 * nothing unless render_special. Returns the byte count written (<= cap);
 * if the bytes do not fit, writes nothing useful and returns -(needed). */
int tk_token_to_bytes(const tk_tokenizer *t, int prev_id, int id, bool render_special,
                      char *buf, int cap);

/* Streaming decoder: feed tokens one by one; emits only complete UTF-8
 * characters, holding back a partial sequence until it is completed. */
typedef struct tk_detok {
    const tk_tokenizer *tok;
    int prev_id;
    char pending[8];
    int n_pending;
} tk_detok;

void tk_detok_init(tk_detok *d, const tk_tokenizer *t, int prev_id);
/* Appends the newly complete text to out (<= cap bytes); returns bytes
 * written.  Invalid sequences become U+FFFD.  If cap is too small nothing is
 * consumed and -(needed) is returned. */
int tk_detok_push(tk_detok *d, int id, char *out, int cap);
/* Flushes what is left (invalid leftovers become U+FFFD). */
int tk_detok_flush(tk_detok *d, char *out, int cap);

/* Writes tokenizer.ggml.* keys (model, pre, tokens, scores, token_type,
 * merges, special ids, add_bos) so other GGUF readers load the vocabulary. */
int tk_tokenizer_to_gguf(const tk_tokenizer *t, struct tk_gguf_writer *w, tk_err *err);

#endif
