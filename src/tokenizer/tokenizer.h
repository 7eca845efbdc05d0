/* Tokenizers: SentencePiece-style BPE with byte fallback and byte-level BPE
 * with pre-tokenizer regexes, loaded from GGUF metadata, a llama2.c
 * tokenizer.bin, or a Hugging Face tokenizer.json.  The loaders and the GGUF
 * writer are internal; opening, encoding and decoding are public
 * (include/tokamak.h, "Tokenizers"). */
#ifndef TK_TOKENIZER_H
#define TK_TOKENIZER_H

#include <tokamak.h>

#include "../util/err.h"

struct tk_gguf;
struct tk_gguf_writer;
struct tk_source;

int tk_tokenizer_from_gguf(const struct tk_gguf *g, tk_tokenizer **out, tk_err *err);
/* llama2.c tokenizer.bin; vocab_size comes from the checkpoint header
 * (0: every token record in the file). */
int tk_tokenizer_from_llama2c(const char *path, int vocab_size, tk_tokenizer **out, tk_err *err);
/* SentencePiece tokenizer.model (protobuf ModelProto, BPE models). */
int tk_tokenizer_from_spm_model(const char *path, tk_tokenizer **out, tk_err *err);
/* path: a tokenizer.json file or a directory holding tokenizer.json (and
 * optionally tokenizer_config.json for add_bos / special tokens). */
int tk_tokenizer_from_hf(const char *path, tk_tokenizer **out, tk_err *err);
/* The tokenizer of an open model source, from the metadata it already
 * holds (the GGUF file's keys, the HF directory's tokenizer.model or
 * tokenizer.json with its tokenizer_config.json, a llama2.c checkpoint's
 * vocabulary size); tokenizer_path overrides the vocabulary as in
 * tk_tokenizer_open.  The model's generation_config.json eos ids join the
 * end-of-generation set either way. */
int tk_tokenizer_from_source(const struct tk_source *src, const char *tokenizer_path, tk_tokenizer **out,
                             tk_err *err);

/* Adds id to the end-of-generation set (ids outside the vocabulary are
 * ignored); -1 when out of memory.  The engine adds a chat preset's
 * end-of-turn token with it. */
int tk_eog_add(tk_tokenizer *t, int id);

/* Writes tokenizer.ggml.* keys (model, pre, tokens, scores, token_type,
 * merges, special ids, add_bos) so other GGUF readers load the vocabulary. */
int tk_tokenizer_to_gguf(const tk_tokenizer *t, struct tk_gguf_writer *w, tk_err *err);

#endif
