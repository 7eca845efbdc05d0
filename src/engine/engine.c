/* The engine: owns the model, tokenizer, KV pool, thread pool and forward
 * workspace; runs batches and single-prompt generation on top of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tokamak.h>

#include "../formats/dtype.h"
#include "../kernels/cpu.h"
#include "../kernels/qgemm.h"
#include "../model/model.h"
#include "../parallel/slice.h"
#include "../sample/sampler.h"
#include "../tokenizer/tokenizer.h"
#include "engine_internal.h"


/* "all", "none" or a comma-separated list of fusion names. */
static int parse_fusions(const char *spec, unsigned *out, tk_err *err) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"norm-quant", TK_FUSE_NORM_QUANT}, {"glu", TK_FUSE_GLU}, {"rope-kv", TK_FUSE_ROPE_KV},
        {"residual", TK_FUSE_RESIDUAL}, {"rope-q", TK_FUSE_ROPE_Q}, {"all", TK_FUSE_ALL}, {"none", 0}};
    unsigned bits = 0;
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ",");
        size_t k = 0, count = sizeof names / sizeof names[0];
        while (k < count && !(strlen(names[k].name) == n && !strncmp(names[k].name, p, n))) k++;
        if (k == count) return tk_err_set(err, "unknown fusion '%.*s' (norm-quant, glu, rope-kv, rope-q, residual, all, none)",
                                          (int)n, p);
        bits |= names[k].bit;
        p += n;
        if (*p == ',') p++;
    }
    *out = bits;
    return 0;
}

/* Tensor parallelism, the end of opening: every rank has opened its share
 * (agreed), and the shapes the plans rely on are rank 0's on every rank.
 * Returns -1 on all ranks or on none. */
static int tp_start(tk_engine *e, int max_blocks, tk_err *err) {
    int ok = !tk_tp_plan_init(&e->plan, e->tp, &e->kv, e->ws.max_tokens, e->max_seqs, max_blocks, err) &&
             !tk_tp_reserve(e->tp, (size_t)e->ws.max_tokens * e->model.hp.dim, err);
    if (ok && e->model.tp_head && tk_tp_rank(e->tp) > 0) {
        e->ws.tp_logits = malloc(sizeof(float) * (size_t)e->ws.max_tokens * (size_t)e->model.tp_head->ne[1]);
        if (!e->ws.tp_logits) ok = !tk_err_set(err, "out of memory for this rank's logits");
    }
    if (tk_tp_agree(e->tp, ok, err)) return -1;
    const tk_hparams *hp = &e->model.hp;
    int32_t mine[] = {hp->n_vocab, hp->dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->head_dim, hp->ffn_dim,
                      e->ctx_len, e->max_seqs, e->ws.max_tokens, e->kv.block_size, e->kv.n_blocks, (int)e->kv.type,
                      e->kv.prefix_cache, (int)e->ws.fuse, e->kv_window};
    enum { N = sizeof mine / sizeof mine[0] };
    int32_t root[N];
    memcpy(root, mine, sizeof mine);
    if (tk_tp_bcast(e->tp, root, N, false, err)) return -1; /* opening: unbounded, as the agreements */
    ok = !memcmp(root, mine, sizeof mine);
    if (!ok)
        tk_err_set(err, "tensor parallelism: rank %d opened the model with other settings than rank 0 "
                        "(every rank must get the same options)", tk_tp_rank(e->tp));
    if (tk_tp_agree(e->tp, ok, err)) return -1;
    e->tp_started = true;
    return 0;
}

int tk_engine_tp_rank(const tk_engine *e) { return tk_tp_rank(e->tp); }

int tk_engine_tp_follow(tk_engine *e, tk_err *err) {
    if (tk_tp_rank(e->tp) == 0) return tk_err_set(err, "only the ranks other than 0 of a tensor-parallel job follow");
    for (;;) {
        tk_batch b;
        int rc = tk_tp_plan_recv(&e->plan, &e->kv, &b, err);
        if (rc <= 0) return rc;
        e->ws.hidden_out = e->plan.hidden_out;
        /* A bad batch fails the same checks on rank 0, which reports it. */
        tk_err ferr;
        if (tk_forward(&e->model, &e->kv, e->plan.seq_ptrs, e->max_seqs, &b, NULL, &e->ws, e->pool, &ferr) &&
            tk_tp_failed(e->tp))
            return tk_err_set(err, "step %llu: %s", (unsigned long long)e->plan.steps, ferr.msg);
    }
}

/* Opens an engine; a draft engine passes its target's thread pool. */
static int engine_open(const tk_engine_config *cfg, tk_threadpool *shared_pool, tk_engine **out, tk_err *err) {
    *out = NULL;
    tk_engine *e = calloc(1, sizeof *e);
    if (!e) return tk_err_set(err, "out of memory");
    const double tp_timeout = cfg->tp_timeout > 0 ? cfg->tp_timeout : TK_TP_TIMEOUT_DEFAULT;
    if (cfg->tp > 1 && tk_tp_open(cfg->tp, tp_timeout, &e->tp, err)) {
        free(e);
        return -1;
    }
    if (tk_model_load(cfg->model_path, &e->model, err)) {
        if (e->tp) tk_tp_agree(e->tp, 0, err);
        tk_tp_close(e->tp);
        free(e);
        return -1;
    }
    if (e->tp) {
        e->model.tp = e->tp;
        if (tk_tp_slice_model(&e->model, tk_tp_rank(e->tp), cfg->tp, err)) goto fail;
    }
    /* The tokenizer from the metadata of the model's file, opened once. */
    tk_err tok_err;
    if (tk_tokenizer_from_source(&e->model.src, cfg->tokenizer_path, &e->tok, &tok_err)) {
        e->tok = NULL;
        if (cfg->require_tokenizer || cfg->tokenizer_path) {
            tk_err_set(err, "%s", tok_err.msg);
            goto fail;
        }
    }
    if (e->tok && tk_tokenizer_n_vocab(e->tok) > e->model.hp.n_vocab) {
        tk_err_set(err, "tokenizer has %d tokens but the model only %d", tk_tokenizer_n_vocab(e->tok),
                   e->model.hp.n_vocab);
        goto fail;
    }
    /* No chat template in the file: the preset the vocabulary calls for,
     * whose end-of-turn token must then end generation. */
    if (!e->model.src.chat_template && e->tok && (e->chat_preset = tk_chat_preset_detect(e->tok))) {
        const char *eot = tk_chat_preset_end_of_turn(e->chat_preset);
        if (eot && tk_eog_add(e->tok, tk_tokenizer_find(e->tok, eot))) {
            tk_err_set(err, "out of memory");
            goto fail;
        }
    }
    const tk_hparams *hp = &e->model.hp;
    /* Default: the trained context, capped at 4096 like llama.cpp, so a
     * 128K-context model does not reserve gigabytes of KV by default. */
    e->ctx_len = cfg->ctx_len > 0 ? cfg->ctx_len : hp->ctx_len > 0 ? (hp->ctx_len < 4096 ? hp->ctx_len : 4096) : 2048;
    tk_model_set_context(&e->model, e->ctx_len); /* LongRoPE: short or long factors */
    e->max_seqs = cfg->max_seqs > 0 ? cfg->max_seqs : 1;
    e->kv_window = cfg->no_window_release ? 0 : e->model.kv_window;
    /* 64 tokens per block by default: long-context decode reads each (layer,
     * head) run of a block in one go, and runs of 16 rows (~1 KB for Q8_0)
     * left the core waiting on memory at every jump (16K-context decode
     * attention 1.53-1.57 vs 1.76 ms per layer, docs/benchmarks.md); prefix
     * sharing is then in units of 64 tokens. */
    int block = cfg->kv_block_size > 0 ? cfg->kv_block_size : 64;
    if (block > 1024) {
        tk_err_set(err, "KV block size %d is too large (max 1024)", block);
        goto fail;
    }
    int max_batch = cfg->max_batch_tokens > 0 ? cfg->max_batch_tokens : 512;
    int n_threads = cfg->n_threads > 0 ? cfg->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    int blocks_per_seq = (e->ctx_len + block - 1) / block;
    int kv_type = cfg->kv_type ? tk_kv_type_from_name(cfg->kv_type) : TK_KV_F16;
    if (kv_type < 0) {
        tk_err_set(err, "unknown KV cache type '%s' (f32, f16 or q8_0)", cfg->kv_type);
        goto fail;
    }
    size_t block_bytes = tk_kv_block_bytes(hp->n_layers, hp->n_kv_heads, hp->head_dim, block, (tk_kv_type)kv_type);
    if (!block_bytes) {
        if (kv_type == TK_KV_Q8_0 && hp->head_dim % 32)
            tk_err_set(err, "KV type %s needs a head dimension multiple of 32 (the model has %d)", cfg->kv_type,
                       hp->head_dim);
        else
            tk_err_set(err, "a KV block of %d tokens x %d layers x %d KV heads x %d dimensions is too large", block,
                       hp->n_layers, hp->n_kv_heads, hp->head_dim);
        goto fail;
    }
    size_t n_blocks = cfg->kv_memory ? cfg->kv_memory / block_bytes : (size_t)blocks_per_seq * e->max_seqs;
    if (n_blocks < 1 || n_blocks > (1u << 30)) {
        tk_err_set(err, "KV memory of %zu bytes gives %zu blocks of %zu bytes: need at least one", cfg->kv_memory,
                   n_blocks, block_bytes);
        goto fail;
    }
    if (tk_kv_pool_init(&e->kv, hp->n_layers, hp->n_kv_heads, hp->head_dim, block, (int)n_blocks,
                        (tk_kv_type)kv_type, !cfg->no_prefix_cache, err))
        goto fail;
    e->owns_pool = !shared_pool;
    e->pool = shared_pool ? shared_pool : tk_threadpool_new(n_threads);
    e->seqs = calloc((size_t)e->max_seqs, sizeof *e->seqs);
    e->seq_ptrs = calloc((size_t)e->max_seqs, sizeof *e->seq_ptrs);
    e->saved_blocks = calloc((size_t)e->max_seqs, sizeof *e->saved_blocks);
    if (!e->pool || !e->seqs || !e->seq_ptrs || !e->saved_blocks) {
        tk_err_set(err, "out of memory");
        goto fail;
    }
    e->isa = tk_cpu_isa();
    e->exp_row = tk_exp_row_kernel(e->isa);
    const char *ref_env = getenv("TK_REFERENCE");
    bool reference = cfg->reference_kernels || (ref_env && *ref_env && strcmp(ref_env, "0") != 0);
    /* named from the kernels tk_qkernel_get gives, not from the CPU bit:
     * a compiler without -mavxvnni leaves the AVX-VNNI forms out */
    const tk_qkernel *q4_0 = tk_qkernel_get(TK_Q4_0, e->isa);
    e->kernels = reference                                                     ? "reference"
                 : e->isa == TK_ISA_AVX2 && q4_0 && strstr(q4_0->name, "vnni") ? "avx2+avx-vnni"
                                                                               : tk_isa_name(e->isa);
    /* TK_PANELS=0: the kernels read the file's row layout (to measure the panel layout) */
    const char *panels_env = getenv("TK_PANELS");
    if (!reference && !(panels_env && strcmp(panels_env, "0") == 0) &&
        tk_model_make_panels(&e->model, e->isa, e->pool, err))
        goto fail;
    if (tk_forward_ws_init(&e->ws, &e->model, max_batch, e->ctx_len, block, tk_threadpool_size(e->pool), e->isa,
                           reference, err))
        goto fail;
    const char *fuse = cfg->fusions ? cfg->fusions : getenv("TK_FUSE");
    if (fuse && parse_fusions(fuse, &e->ws.fuse, err)) goto fail;
    /* Logits rows for drafts: every sequence drafting the engine's longest
     * draft at once, and at least one request's longest possible draft.  A
     * draft engine (shared_pool) is only fed through tk_engine_decode. */
    int draft_len = cfg->draft_max > 0 ? cfg->draft_max : 8;
    int draft_rows = shared_pool ? 0 : e->max_seqs * draft_len;
    if (!shared_pool && draft_rows < TK_SPEC_MAX_DRAFT) draft_rows = TK_SPEC_MAX_DRAFT;
    if (tk_constraint_cache_init(&e->constraints, hp->n_vocab, err)) goto fail;
    if (tk_batcher_init(e, cfg->max_waiting > 0 ? cfg->max_waiting : 256, draft_rows, err)) goto fail;
    if (e->tp && tp_start(e, blocks_per_seq + 1, err)) goto fail_agreed;
    *out = e;
    return 0;
fail:
    if (e->tp) tk_tp_agree(e->tp, 0, err);
fail_agreed:
    tk_engine_close(e);
    return -1;
}

int tk_engine_open(const tk_engine_config *cfg, tk_engine **out, tk_err *err) {
    if (cfg->spec_mode < TK_SPEC_DEFAULT || cfg->spec_mode > TK_SPEC_DRAFT)
        return tk_err_set(err, "unknown speculative mode %d", cfg->spec_mode);
    if (cfg->spec_mode == TK_SPEC_DRAFT && !cfg->draft_model_path)
        return tk_err_set(err, "speculative decoding with a draft model needs a draft model path");
    if (cfg->tp < 0 || cfg->tp > TK_TP_MAX)
        return tk_err_set(err, "tensor parallelism over %d ranks: 1 to %d", cfg->tp, TK_TP_MAX);
    if (!(cfg->tp_timeout >= 0))
        return tk_err_set(err, "tensor parallelism: the timeout must be positive or 0 (the default, %d s); got %g",
                          TK_TP_TIMEOUT_DEFAULT, cfg->tp_timeout);
    if (!(cfg->draft_cost >= 0 && cfg->draft_cost <= 100) || !(cfg->verify_slope >= 0 && cfg->verify_slope <= 100))
        return tk_err_set(err, "invalid speculative cost priors");
    if (cfg->draft_max < 0 || cfg->draft_max > TK_SPEC_MAX_DRAFT || cfg->draft_min < 0 ||
        (cfg->draft_max > 0 && cfg->draft_min > cfg->draft_max))
        return tk_err_set(err, "draft lengths: need 0 <= draft_min <= draft_max <= %d (got %d, %d)",
                          TK_SPEC_MAX_DRAFT, cfg->draft_min, cfg->draft_max);
    tk_engine *e;
    if (engine_open(cfg, NULL, &e, err)) return -1;
    e->draft_max = cfg->draft_max > 0 ? cfg->draft_max : 8;
    e->draft_min = cfg->draft_min;
    if (e->draft_min > e->draft_max) e->draft_min = e->draft_max;
    e->spec_mode = cfg->spec_mode != TK_SPEC_DEFAULT ? cfg->spec_mode
                   : cfg->draft_model_path       ? TK_SPEC_DRAFT
                                                 : TK_SPEC_OFF;
    /* Priors until passes are timed: a draft pass costs what its weights
     * weigh relative to the target's; each extra verified token 20 % (10 %
     * to 30 % measured, docs/speculative.md). */
    double c_prior = 0;
    /* Tensor parallelism: the draft model runs whole on rank 0, which drafts
     * and samples; the other ranks only follow the target's passes. */
    if (cfg->draft_model_path && tk_tp_rank(e->tp) == 0) {
        tk_engine_config dc = {
            .model_path = cfg->draft_model_path, .tokenizer_path = cfg->draft_tokenizer_path,
            .ctx_len = e->ctx_len, .max_seqs = e->max_seqs, .max_batch_tokens = e->ws.max_tokens,
            .kv_block_size = e->kv.block_size, .no_prefix_cache = true, .max_waiting = 1,
            .no_window_release = cfg->no_window_release,
            .fusions = cfg->fusions, .reference_kernels = cfg->reference_kernels,
        };
        if (engine_open(&dc, e->pool, &e->draft, err)) {
            tk_err_wrap(err, "draft model %s", cfg->draft_model_path);
            tk_engine_close(e);
            return -1;
        }
        if (tk_spec_check_vocab(e->model.hp.n_vocab, e->tok, e->draft->model.hp.n_vocab, e->draft->tok, err)) {
            tk_engine_close(e);
            return -1;
        }
        c_prior = (double)e->draft->model.weight_bytes / (double)e->model.weight_bytes;
    }
    if (cfg->draft_cost > 0) c_prior = cfg->draft_cost;
    tk_spec_cost_init(&e->cost, c_prior, cfg->verify_slope > 0 ? cfg->verify_slope : 0.2);
    e->cost_pub = e->cost;
    *out = e;
    return 0;
}

tk_engine *tk_engine_draft(tk_engine *e) { return e->draft; }

void tk_engine_spec_info(tk_engine *e, tk_spec_info *o) {
    memset(o, 0, sizeof *o);
    o->has_draft_model = e->draft != NULL;
    o->spec_mode = e->spec_mode;
    o->draft_max = e->draft_max;
    o->draft_min = e->draft_min;
    pthread_mutex_lock(&e->batcher.mu);
    int measured = tk_spec_cost_estimate(&e->cost_pub, &o->draft_cost, &o->verify_slope);
    o->draft_cost_measured = measured & 1;
    o->draft_cost_prior = e->cost_pub.c_prior;
    o->verify_slope_prior = e->cost_pub.v_prior;
    o->verify_measured = measured & 2;
    pthread_mutex_unlock(&e->batcher.mu);
}

void tk_engine_close(tk_engine *e) {
    if (!e) return;
    if (e->tp_started && tk_tp_rank(e->tp) == 0) {
        tk_err ignored; /* a failed stop marks the job failed: closing it aborts the others */
        tk_tp_plan_stop(&e->plan, &ignored);
    }
    tk_engine_close(e->draft);
    tk_batcher_free(e);
    tk_constraint_cache_free(&e->constraints); /* after the requests, which hold its grammars */
    if (e->seqs)
        for (int i = 0; i < e->max_seqs; i++) tk_kv_seq_release(&e->kv, &e->seqs[i]);
    free(e->seqs);
    free(e->seq_ptrs);
    free(e->saved_blocks);
    tk_forward_ws_free(&e->ws);
    if (e->owns_pool) tk_threadpool_free(e->pool);
    tk_tp_plan_free(&e->plan, &e->kv);
    tk_kv_pool_free(&e->kv);
    tk_tokenizer_free(e->tok);
    tk_model_free(&e->model);
    tk_tp_close(e->tp);
    free(e);
}

const tk_tokenizer *tk_engine_tokenizer(const tk_engine *e) { return e->tok; }
int tk_engine_n_vocab(const tk_engine *e) { return e->model.hp.n_vocab; }
int tk_engine_ctx_len(const tk_engine *e) { return e->ctx_len; }

int tk_engine_set_threads(tk_engine *e, int n) { return tk_threadpool_set_active(e->pool, n); }

const char *tk_engine_chat_template(const tk_engine *e) {
    return e->model.src.chat_template ? e->model.src.chat_template : tk_chat_preset_source(e->chat_preset);
}
const char *tk_engine_chat_template_origin(const tk_engine *e) {
    return e->model.src.chat_template ? "file" : e->chat_preset ? e->chat_preset : "none";
}
void tk_engine_generation_defaults(const tk_engine *e, tk_gen_defaults *out) { *out = e->model.src.gen; }

void tk_engine_summary(const tk_engine *e, tk_model_summary *o) {
    const tk_model *m = &e->model;
    const tk_hparams *hp = &m->hp;
    memset(o, 0, sizeof *o);
    snprintf(o->arch, sizeof o->arch, "%s", m->src.arch);
    snprintf(o->name, sizeof o->name, "%s", m->src.name);
    static const char *formats[] = {"gguf", "llama2.c", "hf"};
    o->format = formats[m->src.format];
    o->n_vocab = hp->n_vocab;
    o->dim = hp->dim;
    o->n_layers = hp->n_layers;
    const int ranks = tk_tp_size(e->tp); /* hp holds this rank's share */
    o->n_heads = hp->n_heads * ranks;
    o->n_kv_heads = hp->n_kv_heads * ranks / (m->tp_kv_copies > 1 ? m->tp_kv_copies : 1);
    o->head_dim = hp->head_dim;
    o->ffn_dim = hp->ffn_dim * ranks;
    o->ctx_len = hp->ctx_len;
    o->norm_eps = hp->norm_eps;
    o->rope_theta = hp->rope_theta;
    o->rope_style = hp->rope_style == TK_ROPE_ADJACENT ? "adjacent pairs" : "halves (neox)";
    static const char *scalings[] = {"none", "linear", "llama3", "yarn"};
    o->rope_scaling = scalings[hp->rope_scaling];
    o->tied_output = hp->tied_output;
    o->swa_window = m->swa_window;
    o->n_swa_layers = m->n_swa_layers;
    o->rope_theta_swa = m->rope_theta_swa;
    o->kv_window_release = e->kv_window;
    for (int i = 0; i < m->src.n_tensors; i++) {
        const tk_tensor *t = &m->src.tensors[i];
        o->n_params += tk_tensor_nelems(t);
        const tk_dtype_info *info = tk_dtype_get(t->type);
        const char *name = info ? info->name : "?";
        int k = 0;
        while (k < o->n_types && strcmp(o->types[k].name, name)) k++;
        if (k == o->n_types) {
            if (k == (int)(sizeof o->types / sizeof o->types[0])) continue;
            o->types[o->n_types++].name = name;
        }
        o->types[k].n_tensors++;
        o->types[k].n_elems += tk_tensor_nelems(t);
        o->types[k].bytes += t->nbytes;
    }
    o->weight_bytes = m->weight_bytes;
    o->panel_bytes = m->panel_bytes;
    o->kernels = e->kernels;
    tk_cpu_describe(o->cpu, sizeof o->cpu);
    o->embedding_bytes = m->w.tok_embd->nbytes;
    if (m->arch->moe) {
        o->n_expert = m->hp.n_expert;
        o->n_expert_used = m->hp.n_expert_used;
        for (int l = 0; l < m->hp.n_layers; l++)
            o->routed_expert_bytes +=
                m->layers[l].gate_exps->nbytes + m->layers[l].up_exps->nbytes + m->layers[l].down_exps->nbytes;
    }
    o->kv_bytes = tk_kv_pool_bytes(&e->kv);
    o->kv_blocks = e->kv.n_blocks;
    o->kv_block_size = e->kv.block_size;
    o->n_threads = tk_threadpool_size(e->pool);
}

int tk_engine_seq_new(tk_engine *e, tk_err *err) {
    for (int i = 0; i < e->max_seqs; i++)
        if (!e->seq_ptrs[i]) {
            memset(&e->seqs[i], 0, sizeof e->seqs[i]);
            e->seq_ptrs[i] = &e->seqs[i];
            return i;
        }
    return tk_err_set(err, "all %d sequence slots are in use", e->max_seqs);
}

void tk_engine_seq_free(tk_engine *e, int seq) {
    if (seq < 0 || seq >= e->max_seqs || !e->seq_ptrs[seq]) return;
    tk_kv_seq_release(&e->kv, &e->seqs[seq]);
    e->seq_ptrs[seq] = NULL;
}

int tk_engine_seq_len(const tk_engine *e, int seq) {
    if (seq < 0 || seq >= e->max_seqs || !e->seq_ptrs[seq]) return -1;
    return e->seqs[seq].len;
}

int tk_engine_decode(tk_engine *e, const tk_batch *b, float *logits, tk_err *err) {
    for (int i = 0; i < e->max_seqs; i++) e->saved_blocks[i] = e->seqs[i].n_blocks;
    for (int i = 0; i < b->n_tokens; i++) {
        int s = b->seq[i];
        if (s < 0 || s >= e->max_seqs || !e->seq_ptrs[s]) {
            tk_err_set(err, "batch entry %d names unknown sequence %d", i, s);
            goto undo;
        }
        if (b->pos[i] < 0 || b->pos[i] >= e->ctx_len) {
            tk_err_set(err, "position %d is outside the context (%d tokens)", b->pos[i], e->ctx_len);
            goto undo;
        }
        if (tk_kv_seq_reserve(&e->kv, &e->seqs[s], b->pos[i] + 1, err) ||
            tk_kv_seq_prepare_write(&e->kv, &e->seqs[s], b->pos[i], b->pos[i] + 1, err))
            goto undo;
    }
    if (e->tp && tk_tp_plan_send(&e->plan, b, e->seq_ptrs, e->ws.hidden_out, err)) goto undo;
    if (tk_forward(&e->model, &e->kv, e->seq_ptrs, e->max_seqs, b, logits, &e->ws, e->pool, err)) goto undo;
    return 0;
undo:
    /* the transport failed inside a step: another rank is dead or stuck,
     * and the others may be waiting in an exchange with this one */
    if (tk_tp_failed(e->tp)) {
        tk_err_wrap(err, "step %llu", (unsigned long long)e->plan.steps);
        tk_tp_abort(e->tp, err->msg);
    }
    for (int i = 0; i < e->max_seqs; i++)
        if (e->seq_ptrs[i]) tk_kv_seq_shrink(&e->kv, &e->seqs[i], e->saved_blocks[i]);
    return -1;
}

/* Feeds tokens[0..n) of sequence `seq` starting at position start, in
 * chunks that fit the workspace.  If want_all, logits of every token are
 * written to out (n rows); otherwise only the last token's (one row). */
static int feed(tk_engine *e, int seq, const int32_t *tokens, int n, int start, bool want_all, float *out,
                tk_err *err) {
    int cap = e->ws.max_tokens;
    int32_t *pos = malloc((size_t)cap * sizeof(int32_t));
    int32_t *seqs = malloc((size_t)cap * sizeof(int32_t));
    uint8_t *flags = malloc((size_t)cap);
    if (!pos || !seqs || !flags) {
        free(pos);
        free(seqs);
        free(flags);
        return tk_err_set(err, "out of memory");
    }
    int rc = 0;
    size_t nv = (size_t)e->model.hp.n_vocab;
    for (int done = 0; done < n && rc == 0; done += cap) {
        int chunk = n - done < cap ? n - done : cap;
        for (int i = 0; i < chunk; i++) {
            pos[i] = start + done + i;
            seqs[i] = seq;
            flags[i] = want_all || done + i == n - 1;
        }
        tk_batch b = {chunk, (int32_t *)tokens + done, pos, seqs, flags};
        float *dst = want_all ? out + (size_t)done * nv : out;
        rc = tk_engine_decode(e, &b, dst, err);
    }
    free(pos);
    free(seqs);
    free(flags);
    return rc;
}

int tk_engine_logits(tk_engine *e, const int32_t *tokens, int n, float *out, tk_err *err) {
    if (n <= 0) return tk_err_set(err, "no tokens given");
    if (n > e->ctx_len) return tk_err_set(err, "%d tokens exceed the context length %d", n, e->ctx_len);
    int seq = tk_engine_seq_new(e, err);
    if (seq < 0) return -1;
    int rc = feed(e, seq, tokens, n, 0, true, out, err);
    tk_engine_seq_free(e, seq);
    return rc;
}
