/* tokamak: an LLM inference engine.  The public API.
 *
 * Data flow: request -> engine -> batch of (token, position, sequence,
 * wants-logits) -> batched, paged model forward -> sampler -> tokens back.
 * Single-prompt generation is a batch of one sequence.
 *
 * Sections: the engine (configuration, batches, generation, requests,
 * metrics, speculative decoding); tokenizers; chat templates; files and
 * clocks; limits of request parameters; offline tools (convert, synth,
 * quantize).  Errors: tokamak_err.h. */
#ifndef TOKAMAK_H
#define TOKAMAK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <tokamak_err.h> /* tk_err */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tk_engine tk_engine;

typedef struct tk_tokenizer tk_tokenizer;

/* Speculative decoding (see docs/speculative.md): a cheap source proposes a
 * few draft tokens, the model checks them in one pass, and the accepted ones
 * cost one pass together.  Greedy output is identical to plain decoding and
 * sampled output has the same distribution. */
typedef enum tk_spec_mode {
    TK_SPEC_DEFAULT = 0, /* request: the engine's mode; engine: TK_SPEC_DRAFT with a draft model, else off */
    TK_SPEC_OFF = 1,
    TK_SPEC_NGRAM = 2,   /* prompt lookup: continue an earlier occurrence of the last 4..1 tokens */
    TK_SPEC_DRAFT = 3,   /* the engine's draft model */
} tk_spec_mode;

typedef struct tk_engine_config {
    const char *model_path;     /* .gguf, llama2.c .bin or HF directory */
    const char *tokenizer_path; /* optional override (tokenizer.bin / tokenizer.json) */
    int n_threads;              /* 0: all online cores */
    int ctx_len;                /* max tokens per sequence; 0: the model's, at most 4096 */
    int max_seqs;               /* sequences that can be live at once; 0: 1 */
    int max_batch_tokens;       /* tokens per forward pass; 0: 512 */
    int kv_block_size;          /* tokens per KV block; 0: 64 */
    bool require_tokenizer;     /* fail if no tokenizer can be loaded */
    size_t kv_memory;           /* KV pool bytes; 0: enough for max_seqs full contexts */
    const char *kv_type;        /* "f16" (default), "f32" or "q8_0" */
    bool no_prefix_cache;       /* disable automatic prefix caching */
    bool no_window_release;     /* models whose layers all slide (Mistral-style): keep KV blocks that
                                   left the window instead of returning them to the pool */
    int max_waiting;            /* bound of the waiting queue; 0: 256 */
    const char *fusions;        /* operator fusions: "all" (default), "none", or a list of
                                   norm-quant,glu,rope-kv,rope-q,residual (also env TK_FUSE) */
    bool reference_kernels;     /* float32 dequantize-and-multiply everywhere (also env TK_REFERENCE=1):
                                   the numerical reference, slow */
    /* speculative decoding */
    const char *draft_model_path;     /* a smaller model with the same vocabulary; NULL: none */
    const char *draft_tokenizer_path; /* optional override for the draft model's tokenizer */
    int spec_mode;                    /* tk_spec_mode for requests that leave it to the engine */
    int draft_max, draft_min;         /* bounds of the adaptive draft length; 0: 8 and 0 */
    /* Cost model priors for the draft length (tk_spec_info): c, a draft pass
     * relative to a target pass (0: the ratio of their weight sizes), and
     * v_slope (0: 0.2).  Sampling always chooses draft lengths from these, so
     * that a seed reproduces its output; greedy decoding, whose output does
     * not depend on the draft length, uses the costs measured as it runs. */
    float draft_cost, verify_slope;
    /* Tensor parallelism (a build with -DTK_MPI=ON, run under mpirun -np tp;
     * docs/parallel.md): every rank opens the engine with the same
     * configuration and holds its share of the heads and FFN columns;
     * 0 or 1: none.  tp_timeout: seconds a rank may wait for the others
     * inside a forward pass before the job is ended, naming the rank that
     * did not answer (0: TK_TP_TIMEOUT_DEFAULT); an idle server never
     * times out. */
    int tp;
    float tp_timeout;
} tk_engine_config;

#define TK_TP_MAX 256
#define TK_TP_TIMEOUT_DEFAULT 60

/* Tensor parallelism: this process's rank (0 without it).  Rank 0 uses the
 * engine as usual; every other rank calls tk_engine_tp_follow, which runs
 * its share of rank 0's forward passes and returns when rank 0 closes its
 * engine (0) or the job fails (-1); then it closes its engine. */
int tk_engine_tp_rank(const tk_engine *e);
int tk_engine_tp_follow(tk_engine *e, tk_err *err);

/* One batch: parallel arrays of n_tokens entries. */
typedef struct tk_batch {
    int n_tokens;
    int32_t *token;
    int32_t *pos;
    int32_t *seq;     /* a sequence id from tk_engine_seq_new */
    uint8_t *logits;  /* nonzero: return logits for this token */
} tk_batch;

typedef struct tk_sampling {
    float temperature;       /* 0: greedy */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off (divides positive logits, multiplies negative) */
    float presence_penalty;  /* 0: off (OpenAI style) */
    float frequency_penalty; /* 0: off */
    int penalty_last_n;      /* tokens the penalties look back over; -1: all */
    uint64_t seed;
} tk_sampling;

void tk_sampling_defaults(tk_sampling *s);

typedef struct tk_model_summary {
    char arch[32];
    char name[128];
    const char *format;  /* "gguf", "llama2.c", "hf" */
    int n_vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, ctx_len;
    float norm_eps, rope_theta;
    const char *rope_style;
    const char *rope_scaling;
    bool tied_output;
    int swa_window;          /* sliding-window layers see this many positions; 0: none */
    int n_swa_layers;        /* how many layers slide (the others attend globally) */
    float rope_theta_swa;    /* RoPE base of the sliding layers */
    int kv_window_release;   /* > 0: every layer slides and the scheduler releases KV blocks older than
                                this window; 0: KV grows with the sequence */
    int64_t n_params;
    size_t weight_bytes;
    size_t panel_bytes;     /* copies of matrices in the kernels' panel layout (AVX2), beside weight_bytes */
    const char *kernels;    /* the matrix kernels' level: "scalar", "avx2", "avx2+avx-vnni", "avx512", "amx",
                               "neon", or "reference" (float32 dequantize-and-multiply) */
    char cpu[96];           /* the CPU the engine runs on, for reports: "AMD EPYC (family 26, model 2)" */
    size_t embedding_bytes; /* token_embd */
    size_t routed_expert_bytes; /* mixture of experts: the routed experts' matrices (0 for dense models) */
    int n_expert, n_expert_used; /* routed experts per layer and per token (0 for dense models) */
    size_t kv_bytes;     /* the engine's KV pool */
    struct {
        const char *name; /* "Q4_K" */
        int n_tensors;
        int64_t n_elems;
        size_t bytes;
    } types[16];         /* tensors by storage type */
    int n_types;
    int kv_blocks, kv_block_size;
    int n_threads;       /* the engine's thread pool */
} tk_model_summary;

int tk_engine_open(const tk_engine_config *cfg, tk_engine **out, tk_err *err);
void tk_engine_close(tk_engine *e);
void tk_engine_summary(const tk_engine *e, tk_model_summary *out);

/* What the model file says about chat and generation: the chat template
 * (GGUF tokenizer.chat_template, or tokenizer_config.json's chat_template
 * in a Hugging Face directory; when the file has none, the built-in preset
 * its vocabulary's control tokens call for (tk_chat_preset_detect); NULL if
 * neither; valid until tk_engine_close) and generation_config.json's
 * defaults.  tk_engine_chat_template_origin says where the template comes
 * from: "file", the preset's name ("gemma", "llama3", ...), or "none".  With
 * a preset, the preset's end-of-turn token ends generation too.  The eos ids end generation like
 * the tokenizer's own EOS; the sampling values are for the caller to use or
 * not: requests are never changed by them. */
typedef struct tk_gen_defaults {
    int eos_ids[8];       /* end-of-generation ids */
    int n_eos_ids;
    float temperature;    /* < 0: not given */
    float top_p;          /* < 0: not given */
    int top_k;            /* < 0: not given */
} tk_gen_defaults;
const char *tk_engine_chat_template(const tk_engine *e);
const char *tk_engine_chat_template_origin(const tk_engine *e);
void tk_engine_generation_defaults(const tk_engine *e, tk_gen_defaults *out);

/* Later passes use at most n of the engine's threads (clamped to [1,
 * n_threads]; the thread count it was opened with is the maximum).  Not
 * while a pass runs.  Returns the count in effect.  Results do not depend
 * on it. */
int tk_engine_set_threads(tk_engine *e, int n);
const tk_tokenizer *tk_engine_tokenizer(const tk_engine *e); /* NULL if none */
int tk_engine_n_vocab(const tk_engine *e);
int tk_engine_ctx_len(const tk_engine *e);

/* ---- low level: sequences and batches ---- */
int tk_engine_seq_new(tk_engine *e, tk_err *err);           /* returns an id */
void tk_engine_seq_free(tk_engine *e, int seq);
int tk_engine_seq_len(const tk_engine *e, int seq);
/* Runs one forward pass.  logits receives n_vocab floats for each token
 * with the logits flag, in batch order.  KV blocks are reserved as needed;
 * if the pool is full the call fails and nothing changes. */
int tk_engine_decode(tk_engine *e, const tk_batch *b, float *logits, tk_err *err);

/* ---- high level ---- */
/* Logits of every position of one token sequence (a fresh sequence). */
int tk_engine_logits(tk_engine *e, const int32_t *tokens, int n, float *out, tk_err *err);

/* Embeddings: the final hidden state (after the model's final norm, before
 * the output projection) of each of n_inputs token sequences, pooled over
 * the sequence: mean of all positions, the last position, or the first
 * ("cls"); L2-normalized when normalize.  out receives n_inputs * dim
 * floats.  The inputs go through the batched, paged forward, several
 * sequences per pass (as many as free sequence slots allow), each on a
 * fresh sequence freed afterwards.  Not while another thread steps the
 * engine (the server runs it on its stepping thread). */
typedef enum tk_pooling { TK_POOLING_MEAN = 0, TK_POOLING_LAST = 1, TK_POOLING_CLS = 2 } tk_pooling;
int tk_engine_embed(tk_engine *e, const int32_t *const *tokens, const int *n_tokens, int n_inputs, tk_pooling pooling,
                    bool normalize, float *out, tk_err *err);

/* Constrained decoding (docs/grammar.md): every sample's output matches;
 * it ends ("stop") when the grammar is complete, or with "length" when
 * max_tokens comes first.  Compiled grammars are cached by the engine,
 * keyed by (kind, text, begin, end). */
typedef enum tk_constraint_kind {
    TK_CONSTRAINT_NONE = 0,
    TK_CONSTRAINT_JSON,         /* any JSON value of type object (response_format json_object) */
    TK_CONSTRAINT_JSON_SCHEMA,  /* text: a JSON Schema document */
    TK_CONSTRAINT_REGEX,        /* text: a regular expression the whole output matches */
    TK_CONSTRAINT_GRAMMAR       /* text: a GBNF grammar, rule "root" */
} tk_constraint_kind;

typedef struct tk_constraint {
    tk_constraint_kind kind;
    const char *text;   /* schema / regex / grammar (copied at submit); unused for NONE and JSON */
    const char *begin;  /* literal text the output starts with before the constrained part (e.g. a tool-call tag); NULL: none */
    const char *end;    /* literal text after it; NULL: none */
} tk_constraint;

typedef struct tk_gen_params {
    int max_tokens;     /* < 0: until end of generation or context */
    tk_sampling sampling;
    bool add_bos;       /* prepend BOS if the tokenizer has one */
    bool ignore_eos;
    int speculative;    /* tk_spec_mode; 0: the engine's */
    int draft_max, draft_min; /* 0: the engine's */
    tk_constraint constraint; /* kind NONE: free text */
} tk_gen_params;

typedef struct tk_gen_stats {
    int n_prompt, n_generated;
    double prompt_seconds, gen_seconds;
    const char *stop_reason; /* "eos" (also: the constraint's grammar complete), "length", "context", "error" */
    /* speculative decoding (zero when off) */
    int spec_drafted, spec_accepted; /* draft tokens proposed / accepted */
    int spec_target_passes;          /* decode passes of the model for this sequence */
} tk_gen_stats;

/* Called with each piece of complete UTF-8 text; return nonzero to stop. */
typedef int (*tk_text_cb)(void *user, const char *text, int len);

/* Returns -1 with err set also when the constraint failed while generating
 * (stats then hold what was generated up to it). */
int tk_engine_generate(tk_engine *e, const char *prompt, const tk_gen_params *p, tk_text_cb cb, void *user,
                       tk_gen_stats *stats, tk_err *err);

/* ---- continuous batching: requests ----
 * Any thread may submit or cancel; one thread runs tk_engine_step in a loop.
 * Each step schedules one batch (decode tokens of running sequences plus
 * prefill chunks of new ones), runs it, samples, and reports events through
 * the request's callback (called on the stepping thread). */

typedef struct tk_request_params {
    const int32_t *prompt;     /* prompt token ids (copied at submit) */
    int n_prompt;
    int max_tokens;            /* <= 0: until end of generation or the context is full */
    int n;                     /* parallel samples sharing the prompt's KV blocks; 0 or 1: one */
    tk_sampling sampling;      /* sample i uses seed + i */
    bool ignore_eos;
    const char *const *stop;   /* stop strings (copied); output ends before the first match */
    int n_stop;
    int top_logprobs;          /* < 0: no logprobs; 0..20: chosen token's logprob + that many top alternatives */
    int speculative;           /* tk_spec_mode; 0 (TK_SPEC_DEFAULT): the engine's */
    int draft_max, draft_min;  /* adaptive draft length bounds; 0: the engine's */
    tk_constraint constraint;
} tk_request_params;

typedef struct tk_event {
    uint64_t request;
    int index;                 /* which of the n samples */
    const char *text;          /* text that became final with this event (not NUL-terminated) */
    int text_len;
    int32_t token;             /* the sampled token, -1 if the event carries none */
    float logprob;             /* of `token` (when top_logprobs >= 0) */
    int n_top;
    const int32_t *top_ids;
    const float *top_logprobs;
    bool done;                 /* this sample has finished; no more events for it */
    const char *finish_reason; /* when done: "stop", "length", "cancelled" or "error" */
    const char *error;         /* with "error": why, when the request caused it (its constraint); else NULL */
    int n_prompt_tokens;       /* prompt length */
    int n_cached_tokens;       /* prompt tokens served from the prefix cache */
    int n_generated;           /* tokens generated so far by this sample */
    /* speculative decoding, so far for this sample (zero when off) */
    int spec_drafted, spec_accepted, spec_target_passes;
} tk_event;

typedef void (*tk_event_cb)(void *user, const tk_event *ev);

/* Queues a request.  Fails (nothing queued) if the prompt plus max_tokens
 * exceed the context, if a parameter is invalid, or if the waiting queue is
 * full (message starts with "queue full"). */
int tk_engine_submit(tk_engine *e, const tk_request_params *p, tk_event_cb cb, void *user, uint64_t *id,
                     tk_err *err);
/* Compiles a constraint into the engine's cache without submitting
 * anything: a malformed schema, regex or grammar fails here with the
 * compiler's message (so a server can name the field).  Any thread. */
int tk_engine_constraint_check(tk_engine *e, const tk_constraint *c, tk_err *err);
/* Cancels a request: its blocks are freed at the next step and each of its
 * unfinished samples gets a final event with finish_reason "cancelled". */
void tk_engine_cancel(tk_engine *e, uint64_t id);
/* Runs one scheduler iteration.  Returns the number of live requests
 * (waiting + running) after it, or -1 on an internal error. */
int tk_engine_step(tk_engine *e, tk_err *err);
/* Blocks until there is work (a submitted request) or timeout_ms passes. */
void tk_engine_wait_for_work(tk_engine *e, int timeout_ms);

typedef struct tk_engine_metrics {
    int requests_running, requests_waiting;
    int kv_blocks_total, kv_blocks_used, kv_blocks_cached; /* cached: unused but kept for prefix reuse */
    uint64_t prefix_query_tokens, prefix_hit_tokens;      /* prompt tokens looked up / found in the cache */
    uint64_t preemptions;
    uint64_t prompt_tokens, generation_tokens;             /* processed so far */
    uint64_t requests_finished;
    /* speculative decoding: draft tokens proposed and accepted, decode
     * passes of speculating sequences (one per sequence per step) and the
     * tokens those passes produced */
    uint64_t spec_drafted, spec_accepted, spec_target_passes, spec_tokens;
    /* latency histograms (seconds): counts per bucket, cumulative as Prometheus wants */
    int n_buckets;
    const double *bucket_bounds;                           /* n_buckets upper bounds, last is +Inf */
    uint64_t ttft_buckets[24], itl_buckets[24];
    double ttft_sum, itl_sum;
    uint64_t ttft_count, itl_count;
} tk_engine_metrics;

/* A consistent snapshot; safe from any thread. */
void tk_engine_metrics_get(tk_engine *e, tk_engine_metrics *m);

/* The cost model behind the adaptive draft length: c = a draft pass over
 * one token relative to a target pass over one token, v(k) = 1 + v_slope * k
 * = a target pass over k + 1 tokens relative to one token.  draft_cost and
 * verify_slope are the measured values (the priors until enough passes were
 * timed); the priors are what sampling uses. */
typedef struct tk_spec_info {
    bool has_draft_model;
    int spec_mode;            /* the engine's default (resolved) */
    int draft_max, draft_min;
    double draft_cost;        /* c */
    double verify_slope;      /* v_slope */
    double draft_cost_prior, verify_slope_prior;
    bool draft_cost_measured; /* false: still the prior (weight-size ratio) */
    bool verify_measured;     /* false: still the prior (0.2) */
} tk_spec_info;
void tk_engine_spec_info(tk_engine *e, tk_spec_info *out);
/* The draft model's engine (NULL if none), for measurements with the low
 * level API; never use it while another thread steps the engine. */
tk_engine *tk_engine_draft(tk_engine *e);

/* ==================================================================
 * Tokenizers: SentencePiece-style BPE with byte fallback and byte-level
 * BPE with pre-tokenizer regexes.  An engine's tokenizer comes from
 * tk_engine_tokenizer; tk_tokenizer_open loads one on its own.
 * ================================================================== */

typedef enum tk_tok_kind {
    TK_TOK_SPM = 0,      /* SentencePiece BPE ("llama" in GGUF) */
    TK_TOK_BPE = 1       /* byte-level BPE ("gpt2" in GGUF) */
} tk_tok_kind;

/* Token attribute (GGUF tokenizer.ggml.token_type values). */
enum {
    TK_TOKEN_NORMAL = 1, TK_TOKEN_UNKNOWN = 2, TK_TOKEN_CONTROL = 3,
    TK_TOKEN_USER_DEFINED = 4, TK_TOKEN_UNUSED = 5, TK_TOKEN_BYTE = 6
};

/* Opens the tokenizer of a model: model_path may be a .gguf file (vocab-only
 * GGUFs work), a Hugging Face directory (tokenizer.json +
 * tokenizer_config.json), a tokenizer.json, or a llama2.c checkpoint (its
 * header gives the vocabulary size; tokenizer_path must then name the
 * tokenizer.bin).  A tokenizer_path (tokenizer.json, directory, .gguf or
 * tokenizer.bin) overrides the model's own vocabulary. */
int tk_tokenizer_open(const char *model_path, const char *tokenizer_path, tk_tokenizer **out,
                      tk_err *err);
/* Frees a tokenizer from tk_tokenizer_open (not an engine's). */
void tk_tokenizer_free(tk_tokenizer *t);

/* The algorithm: SentencePiece or byte-level BPE. */
tk_tok_kind tk_tokenizer_kind(const tk_tokenizer *t);
/* Number of tokens in the vocabulary. */
int tk_tokenizer_n_vocab(const tk_tokenizer *t);
/* Beginning-of-sequence token, -1 if none. */
int tk_tokenizer_bos(const tk_tokenizer *t);
/* End-of-sequence token, -1 if none. */
int tk_tokenizer_eos(const tk_tokenizer *t);
/* Whether the model wants BOS prepended by default. */
bool tk_tokenizer_add_bos(const tk_tokenizer *t);
/* Whether token id ends generation (EOS, EOT, ...). */
bool tk_tokenizer_is_eog(const tk_tokenizer *t, int id);
/* Raw vocabulary piece (as stored, e.g. "▁the" or "Ġthe"), NUL-terminated. */
const char *tk_tokenizer_piece(const tk_tokenizer *t, int id);
/* The token's TK_TOKEN_* attribute. */
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

/* Starts decoding after token prev_id (-1: at the start of the text). */
void tk_detok_init(tk_detok *d, const tk_tokenizer *t, int prev_id);
/* Appends the newly complete text to out (<= cap bytes); returns bytes
 * written.  Invalid sequences become U+FFFD.  If cap is too small nothing is
 * consumed and -(needed) is returned. */
int tk_detok_push(tk_detok *d, int id, char *out, int cap);
/* Flushes what is left (invalid leftovers become U+FFFD). */
int tk_detok_flush(tk_detok *d, char *out, int cap);

/* ==================================================================
 * Chat templates: a sandboxed interpreter for the subset of Jinja2 that
 * model chat templates use (Llama-2/3, ChatML, Mistral, Gemma...), with
 * Hugging Face's apply_chat_template semantics.
 * ================================================================== */

typedef struct tk_chat_msg {
    const char *role;     /* "system", "user", "assistant", ... */
    const char *content;
} tk_chat_msg;

typedef struct tk_chat_template tk_chat_template;

/* Parses a template; syntax errors name the line and column. */
int tk_chat_template_parse(const char *source, tk_chat_template **out, tk_err *err);
/* Frees a parsed template (NULL is fine). */
void tk_chat_template_free(tk_chat_template *t);
/* Renders with the variables messages, add_generation_prompt, bos_token and
 * eos_token (NULL: undefined).  raise_exception(msg) in the template becomes
 * an error with that message.  *out is malloc'd, NUL-terminated. */
int tk_chat_template_render(const tk_chat_template *t, const tk_chat_msg *msgs, int n_msgs,
                            bool add_generation_prompt, const char *bos_token, const char *eos_token,
                            char **out, tk_err *err);
/* The same, failing with "chat template rendering cancelled" soon after
 * another thread sets *cancel (checked with the work budget: at every loop
 * iteration, call and charged scan); cancel may be NULL. */
int tk_chat_template_render_cancellable(const tk_chat_template *t, const tk_chat_msg *msgs, int n_msgs,
                                        bool add_generation_prompt, const char *bos_token, const char *eos_token,
                                        const atomic_bool *cancel, char **out, tk_err *err);

/* The same with the conversation as JSON text, for what tk_chat_msg cannot
 * say (tool calls, tool results): messages_json is an array of message
 * objects given to the template as they are, except that a tool call's
 * function.arguments sent as JSON text becomes the object it spells (as
 * vLLM does; templates expect the object); tools_json, an array of tool
 * definitions, becomes the variable "tools" (NULL: undefined), as
 * apply_chat_template(tools=...) does. */
int tk_chat_template_render_json(const tk_chat_template *t, const char *messages_json, const char *tools_json,
                                 bool add_generation_prompt, const char *bos_token, const char *eos_token,
                                 const atomic_bool *cancel, char **out, tk_err *err);

/* A model's chat template without opening an engine (its weights are not
 * read): the template and origin ("file", a preset's name, "none")
 * tk_engine_chat_template / _origin give for an engine on model_path whose
 * tokenizer is tok (it chooses the preset when the file has none; NULL: no
 * preset).  *out is malloc'd, NULL for "none"; *origin is static. */
int tk_model_chat_template(const char *model_path, const tk_tokenizer *tok, char **out, const char **origin,
                           tk_err *err);

/* Chat presets: built-in templates for models whose file has none
 * (src/chat/presets.c).  Names: gemma (<start_of_turn>/<end_of_turn>),
 * llama3 (<|start_header_id|>, <|eot_id|>), chatml (<|im_start|>/<|im_end|>),
 * phi3 (<|user|>, <|assistant|>, <|end|>), mistral ([INST]/[/INST] control
 * tokens, <s>/</s>), llama2 (a SentencePiece <s>/</s> vocabulary spelling
 * "[INST]" as "▁[" "INST" "]"). */
/* The preset a vocabulary calls for, the first of the list above that fits;
 * NULL if none does (a plain vocabulary: no chat format to go by). */
const char *tk_chat_preset_detect(const tk_tokenizer *t);
/* The preset's Jinja source; NULL for an unknown name. */
const char *tk_chat_preset_source(const char *name);
/* The token text closing an assistant turn ("<end_of_turn>"); NULL: the
 * tokenizer's EOS (or an unknown name). */
const char *tk_chat_preset_end_of_turn(const char *name);
/* The i-th preset's name, NULL past the end (for listing them). */
const char *tk_chat_preset_name(int i);

/* Tool calls (src/chat/toolcall.c; docs/serving.md, "Tool calling"): the
 * format a model writes calls in, and the parse of its output.
 *   hermes  (Qwen2.5, Qwen3, Hermes): <tool_call>\n{"name", "arguments"}\n</tool_call>, any number;
 *   llama3  (Llama 3.1-3.3): {"name", "parameters"} objects, maybe after <|python_tag|>, ';'-separated;
 *   mistral: [TOOL_CALLS][{"name", "arguments"}, ...] (the tag may be absent: a control token);
 *   gemma   (Gemma 3's function-calling prompt): a {"name", "parameters"} object, maybe in a ``` fence.
 * Output that does not parse as a whole stays content. */
typedef enum tk_tool_format {
    TK_TOOL_FORMAT_NONE = 0, TK_TOOL_FORMAT_HERMES, TK_TOOL_FORMAT_LLAMA3, TK_TOOL_FORMAT_MISTRAL,
    TK_TOOL_FORMAT_GEMMA
} tk_tool_format;

typedef struct tk_tool_call {
    char *name;
    char *arguments;   /* a JSON object as compact text */
} tk_tool_call;

typedef struct tk_tool_parse {
    size_t content_off, content_len; /* the content: text[content_off..+content_len) (trimmed when calls were found) */
    tk_tool_call *calls;
    int n_calls;
} tk_tool_parse;

/* The format a chat template's source teaches (its call markers); NONE if none. */
tk_tool_format tk_tool_format_detect(const char *template_source);
/* "none", "hermes", "llama3", "mistral", "gemma"; NULL / -1 for others. */
const char *tk_tool_format_name(tk_tool_format f);
int tk_tool_format_from_name(const char *name);
/* Parses a whole output; no calls found: n_calls 0 and all of it content.
 * Fails only when out of memory.  Free with tk_tool_parse_free. */
int tk_tool_calls_parse(tk_tool_format f, const char *text, size_t len, tk_tool_parse *out, tk_err *err);
void tk_tool_parse_free(tk_tool_parse *p);
/* Streaming: how many bytes of the output so far are content whatever
 * follows (the rest may be the start of a call). */
size_t tk_tool_stream_safe(tk_tool_format f, const char *text, size_t len);

/* ==================================================================
 * Files and clocks
 * ================================================================== */

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
int tk_read_file(const char *path, char **out, size_t *len, tk_err *err);

/* A read-only memory mapping of a whole file. */
typedef struct tk_mapfile {
    const unsigned char *data;
    size_t size;
} tk_mapfile;

/* Maps path read-only. */
int tk_mapfile_open(tk_mapfile *m, const char *path, tk_err *err);
/* Unmaps (a zeroed tk_mapfile is fine). */
void tk_mapfile_close(tk_mapfile *m);

/* Seconds since an arbitrary origin, for timing: the monotonic wall clock,
 * the calling thread's CPU time, or the process's CPU time. */
typedef enum tk_clock_kind { TK_CLOCK_WALL = 0, TK_CLOCK_THREAD_CPU = 1, TK_CLOCK_PROCESS_CPU = 2 } tk_clock_kind;
double tk_clock_seconds(tk_clock_kind kind);
/* The CLOCK_MONOTONIC time timeout_ms from now: the deadline for
 * pthread_cond_timedwait on a condition variable set to that clock. */
struct timespec tk_clock_deadline(int timeout_ms);

/* ==================================================================
 * Limits of request parameters (tk_request_params, tk_engine_config)
 * ================================================================== */

/* tk_engine_submit rejects requests beyond these. */
#define TK_REQUEST_MAX_N 64            /* parallel samples (also at most the engine's max_seqs) */
#define TK_REQUEST_MAX_STOP 8          /* stop strings */
#define TK_REQUEST_MAX_STOP_LEN 256    /* bytes of one stop string */
#define TK_REQUEST_MAX_TOP_LOGPROBS 20 /* alternatives per token */
/* The longest draft (draft_max, draft_min) speculative decoding takes. */
#define TK_SPEC_MAX_DRAFT 32

/* ==================================================================
 * Offline tools: conversion to GGUF (tokamak convert)
 * ================================================================== */

typedef struct tk_convert_params {
    const char *type;           /* f32 (also NULL), f16, bf16 or q8_0; norm vectors stay f32 */
    const char *tokenizer_path; /* the tokenizer.bin of a llama2.c checkpoint, or an override */
    /* Called before each tensor is converted (done tensors of total, `what`
     * its name) and once all are (done == total) before the file is
     * written; NULL: none. */
    void (*progress)(void *user, int done, int total, const char *what);
    void *progress_user;
} tk_convert_params;

typedef struct tk_convert_report {
    int n_tensors;              /* tensors written (besides rope_freqs) */
    char warning[512];          /* non-empty: what the output does not keep */
} tk_convert_report;

/* Checks the parameters (the type). */
int tk_convert_check(const tk_convert_params *p, tk_err *err);
/* A llama2.c checkpoint, Hugging Face directory or GGUF (llama
 * architecture) to a GGUF with the standard llama keys. */
int tk_convert(const char *in_path, const char *out_path, const tk_convert_params *p, tk_convert_report *rep,
               tk_err *err);

/* ==================================================================
 * Offline tools: synthetic models (tokamak synth)
 * ================================================================== */

typedef struct tk_synth_params {
    const char *like;          /* the shape of a real model: a tk_synth_shape_name */
    const char *type;          /* q4_0, q8_0, q4_k_m, f16, ...: the weights' type */
    uint64_t seed;             /* the weights are a function of it */
    const char *shared_dir;    /* the shared assets with the shapes' tokenizers; NULL: ../shared */
    void (*progress)(void *user, int done, int total); /* after each tensor */
    void *progress_user;
} tk_synth_params;

/* The i-th known shape ("tinyllama-1.1b", ...), NULL past the last. */
const char *tk_synth_shape_name(int i);
/* Checks the parameters (shape and type). */
int tk_synth_check(const tk_synth_params *p, tk_err *err);
/* A GGUF with the shape's exact tensors, seeded random weights (normal,
 * std 0.02; norms 1) and the shape's real tokenizer. */
int tk_synth_model(const char *out_path, const tk_synth_params *p, tk_err *err);

/* ==================================================================
 * Offline tools: quantization (tokamak quantize)
 * ================================================================== */

typedef enum tk_qmethod { TK_QMETHOD_RTN = 0, TK_QMETHOD_GPTQ = 1, TK_QMETHOD_AWQ = 2 } tk_qmethod;

typedef struct tk_quant_progress {
    const char *stage;   /* "quantize", "calibrate", "gptq", "awq", "write" */
    int done, total;     /* units of this stage (tensors or layers) */
    const char *what;    /* tensor or layer being worked on */
} tk_quant_progress;

typedef struct tk_quant_params {
    const char *type;        /* f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_m nf4
                                (nf4_dq: nf4 with double quantization) */
    tk_qmethod method;
    int group;               /* 0: the container's own (byte-exact reference RTN) */
    bool pure;               /* every matrix in the base type */
    bool allow_requantize;   /* accept already-quantized input tensors */
    const char *tokenizer_path;
    /* calibration (GPTQ, AWQ) */
    const char *calib_path;  /* UTF-8 text */
    int ctx;                 /* tokens per calibration window (BOS first); 0: 256 */
    int max_windows;         /* 0: all the text gives */
    bool act_order;
    double damp;             /* 0: 0.01 */
    int awq_grid;            /* 0: 20 */
    bool awq_no_clip;        /* skip AWQ's weight clipping search */
    int n_threads;           /* 0: online cores */
    void (*progress)(void *user, const tk_quant_progress *p);
    void *progress_user;
} tk_quant_params;

typedef struct tk_quant_report {
    char type[16];           /* the type's canonical name ("q4_k_m") */
    int64_t n_params;
    size_t bytes;            /* tensor data written */
    int n_tensors;
    int n_calib_tokens;
    int n_windows;
    double seconds;
    /* calibration-output error summed over the calibrated matrices, and what
     * round to nearest would give on the same inputs (GPTQ / AWQ only) */
    double method_error, rtn_error;
    struct {
        const char *name;    /* "Q6_K" */
        int n_tensors;
    } types[32];             /* tensors written by storage type, in type order */
    int n_types;
} tk_quant_report;

/* Checks a tk_quant_params type name. */
int tk_quant_type_check(const char *type, tk_err *err);
/* A source model (GGUF F32/F16/BF16, llama2.c, Hugging Face directory) to a
 * quantized GGUF by round to nearest, GPTQ or AWQ (docs/quantization.md). */
int tk_quantize_model(const char *in_path, const char *out_path, const tk_quant_params *p, tk_quant_report *rep,
                      tk_err *err);

#ifdef __cplusplus
}
#endif
#endif
