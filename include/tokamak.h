/* tokamak: an LLM inference engine.  The public API.
 *
 * Data flow: request -> engine -> batch of (token, position, sequence,
 * wants-logits) -> batched, paged model forward -> sampler -> tokens back.
 * Single-prompt generation is a batch of one sequence. */
#ifndef TOKAMAK_H
#define TOKAMAK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible call returns 0 (or a non-negative value) on success and -1
 * on failure, with a message naming the problem in the tk_err. */
typedef struct tk_err {
    char msg[512];
} tk_err;

typedef struct tk_engine tk_engine;

/* Seconds since an arbitrary origin, for timing: the monotonic wall clock,
 * the calling thread's CPU time, or the process's CPU time. */
typedef enum tk_clock_kind { TK_CLOCK_WALL = 0, TK_CLOCK_THREAD_CPU = 1, TK_CLOCK_PROCESS_CPU = 2 } tk_clock_kind;
double tk_clock_seconds(tk_clock_kind kind);
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
} tk_engine_config;

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
    size_t embedding_bytes; /* token_embd */
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
 * in a Hugging Face directory; NULL if none; valid until tk_engine_close)
 * and generation_config.json's defaults.  The eos ids end generation like
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

typedef struct tk_gen_params {
    int max_tokens;     /* < 0: until end of generation or context */
    tk_sampling sampling;
    bool add_bos;       /* prepend BOS if the tokenizer has one */
    bool ignore_eos;
    int speculative;    /* tk_spec_mode; 0: the engine's */
    int draft_max, draft_min; /* 0: the engine's */
} tk_gen_params;

typedef struct tk_gen_stats {
    int n_prompt, n_generated;
    double prompt_seconds, gen_seconds;
    const char *stop_reason; /* "eos", "length", "context" */
    /* speculative decoding (zero when off) */
    int spec_drafted, spec_accepted; /* draft tokens proposed / accepted */
    int spec_target_passes;          /* decode passes of the model for this sequence */
} tk_gen_stats;

/* Called with each piece of complete UTF-8 text; return nonzero to stop. */
typedef int (*tk_text_cb)(void *user, const char *text, int len);

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

#ifdef __cplusplus
}
#endif
#endif
