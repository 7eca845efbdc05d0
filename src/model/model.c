/* Binding a source's tensors to a model through the architecture table,
 * with every shape checked against the hyper-parameters. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/dtype.h"
#include "moe.h"

static int rope_dim_of(const tk_hparams *hp) { return hp->rope_dim > 0 ? hp->rope_dim : hp->head_dim; }

static int64_t resolve_dim(const tk_hparams *hp, tk_dim_sym d) {
    switch (d) {
    case TK_DIM_NONE: return 1;
    case TK_DIM_EMBD: return hp->dim;
    case TK_DIM_Q: return (int64_t)hp->n_heads * hp->head_dim;
    case TK_DIM_KV: return (int64_t)hp->n_kv_heads * hp->head_dim;
    case TK_DIM_FFN: return hp->ffn_dim;
    case TK_DIM_VOCAB: return hp->n_vocab;
    case TK_DIM_HEAD: return hp->head_dim;
    case TK_DIM_EXPERTS: return hp->n_expert;
    case TK_DIM_EXP_FFN: return hp->expert_ffn_dim;
    case TK_DIM_SHEXP_FFN: return hp->shexp_ffn_dim;
    case TK_DIM_QKV: return (int64_t)(hp->n_heads + 2 * hp->n_kv_heads) * hp->head_dim;
    case TK_DIM_FFN2: return 2 * (int64_t)hp->ffn_dim;
    case TK_DIM_ROPE_HALF: return rope_dim_of(hp) / 2;
    }
    return -1;
}

static int check_hparams(const tk_hparams *hp, tk_err *err) {
    if (hp->n_vocab <= 0 || hp->dim <= 0 || hp->n_layers <= 0 || hp->n_heads <= 0 || hp->n_kv_heads <= 0 ||
        hp->head_dim <= 0 || hp->ffn_dim <= 0)
        return tk_err_set(err,
                          "invalid hyper-parameters (vocab=%d dim=%d layers=%d heads=%d kv_heads=%d head_dim=%d "
                          "ffn=%d)",
                          hp->n_vocab, hp->dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->head_dim,
                          hp->ffn_dim);
    if (hp->n_heads % hp->n_kv_heads != 0)
        return tk_err_set(err, "head count %d is not a multiple of the KV head count %d", hp->n_heads,
                          hp->n_kv_heads);
    if (hp->head_dim % 2 != 0) return tk_err_set(err, "head_dim %d must be even for RoPE", hp->head_dim);
    if (hp->head_dim > TK_MAX_HEAD_DIM)
        return tk_err_set(err, "head_dim %d is above the supported maximum %d", hp->head_dim, TK_MAX_HEAD_DIM);
    if (!(hp->norm_eps > 0) || !(hp->rope_theta > 0))
        return tk_err_set(err, "invalid norm epsilon %g or RoPE base %g", hp->norm_eps, hp->rope_theta);
    if (hp->rope_dim < 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
        return tk_err_set(err, "rotary dimension %d must be even and at most head_dim %d", hp->rope_dim,
                          hp->head_dim);
    return 0;
}

/* The tensor of a role (of layer `layer`; -1: a global role), NULL if the
 * source has none; its name goes to name[128]. */
static const tk_tensor *role_tensor(const tk_model *m, const tk_tensor_role *role, int layer, char *name) {
    if (layer >= 0)
        snprintf(name, 128, role->name, layer);
    else
        snprintf(name, 128, "%s", role->name);
    return tk_source_find(&m->src, name);
}

/* Experts are stacked along ne[2]. */
static int64_t role_ne2(const tk_model *m, const tk_tensor_role *role) {
    return role->ne0 == TK_DIM_EXP_FFN || role->ne1 == TK_DIM_EXP_FFN ? m->hp.n_expert : 1;
}

static bool has_role_shape(const tk_model *m, const tk_tensor_role *role, const tk_tensor *t) {
    return t->ne[0] == resolve_dim(&m->hp, role->ne0) && t->ne[1] == resolve_dim(&m->hp, role->ne1) &&
           t->ne[2] == role_ne2(m, role) && t->ne[3] == 1;
}

/* Floats of the float32 copy of a vector role's tensor: its length when the
 * source has the tensor in the role's shape (bind_role copies no other), so
 * the sum over a model is bounded by the file's contents, not by what its
 * header claims. */
static size_t vector_floats(const tk_model *m, const tk_tensor_role *role, int layer) {
    char name[128];
    const tk_tensor *t = role->is_vector ? role_tensor(m, role, layer, name) : NULL;
    return t && has_role_shape(m, role, t) ? (size_t)t->ne[0] : 0;
}

/* Binds one role; vectors are converted to float32 into *vec_cursor. */
static int bind_role(tk_model *m, const tk_tensor_role *role, int layer, void *base, float **vec_cursor,
                     tk_err *err) {
    char name[128];
    const tk_tensor *t = role_tensor(m, role, layer, name);
    if (!t) {
        if (role->required) return tk_err_set(err, "missing tensor '%s'", name);
        return 0;
    }
    int64_t ne0 = resolve_dim(&m->hp, role->ne0), ne1 = resolve_dim(&m->hp, role->ne1);
    int64_t ne2 = role_ne2(m, role);
    if (!has_role_shape(m, role, t))
        return tk_err_set(err, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
                          (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                          (long long)ne0, (long long)ne1, (long long)ne2);
    const tk_dtype_info *info = tk_dtype_get(t->type);
    if (!info || !info->can_dequant)
        return tk_err_set(err, "tensor '%s' has unsupported type %d", name, (int)t->type);
    if (tk_dtype_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1] * (size_t)t->ne[2] > t->nbytes)
        return tk_err_set(err, "tensor '%s' data is shorter than its shape", name);
    m->weight_bytes += t->nbytes;
    char *slot = (char *)base + role->offset;
    if (role->is_vector) {
        float *v = *vec_cursor;
        tk_dequant_row(t->type, t->data, v, ne0);
        *vec_cursor += ne0;
        memcpy(slot, &v, sizeof v);
    } else {
        memcpy(slot, &t, sizeof t);
    }
    return 0;
}

/* Binds a fused matrix of layer `layer` as views of its row blocks, taken
 * from *views. */
static int bind_fused(tk_model *m, const tk_fused_role *fr, int layer, tk_layer *L, tk_tensor **views,
                      tk_err *err) {
    char name[128];
    snprintf(name, sizeof name, fr->name, layer);
    const tk_tensor *t = tk_source_find(&m->src, name);
    if (!t) return tk_err_set(err, "missing tensor '%s'", name);
    const int64_t ne0 = resolve_dim(&m->hp, fr->ne0), ne1 = resolve_dim(&m->hp, fr->ne1);
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return tk_err_set(err, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                          (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                          (long long)ne0, (long long)ne1);
    const tk_dtype_info *info = tk_dtype_get(t->type);
    if (!info || !info->can_dequant) return tk_err_set(err, "tensor '%s' has unsupported type %d", name, (int)t->type);
    const size_t row_bytes = tk_dtype_row_bytes(t->type, t->ne[0]);
    if (row_bytes * (size_t)ne1 > t->nbytes) return tk_err_set(err, "tensor '%s' data is shorter than its shape", name);
    m->weight_bytes += t->nbytes;
    int64_t row = 0;
    for (int i = 0; i < fr->n_parts; i++) {
        const int64_t rows = resolve_dim(&m->hp, fr->parts[i].rows);
        tk_tensor *v = (*views)++;
        *v = *t;
        v->ne[1] = rows;
        v->data = (const unsigned char *)t->data + (size_t)row * row_bytes;
        v->nbytes = (size_t)rows * row_bytes;
        row += rows;
        const tk_tensor *cv = v;
        memcpy((char *)L + fr->parts[i].offset, &cv, sizeof cv);
    }
    return 0;
}

/* Inverse frequencies for base theta; `scaled` applies the model's RoPE
 * scaling (global layers only: sliding layers of Gemma 3 are unscaled). */
/* YaRN's correction dimension for `rot` rotations over the original context. */
static double yarn_corr_dim(const tk_hparams *hp, double theta, double rot) {
    return rope_dim_of(hp) * log(hp->rope_orig_ctx / (rot * 2 * M_PI)) / (2 * log(theta));
}

/* Over the rotated dimensions only (partial rotary: as HF, the exponent's
 * denominator is the rotary dimension, not head_dim).  LongRoPE's factors
 * are applied afterwards (apply_rope_factors). */
static void init_rope(const tk_hparams *hp, double theta, bool scaled, float *out) {
    const int rot = rope_dim_of(hp), half = rot / 2;
    /* YaRN: frequencies below dimension `lo` kept, above `hi` divided by
     * factor, a linear ramp between (bounds floored / ceiled, as HF's
     * default truncate and llama.cpp do) */
    double lo = fmax(floor(yarn_corr_dim(hp, theta, hp->rope_yarn_beta_fast)), 0);
    double hi = fmin(ceil(yarn_corr_dim(hp, theta, hp->rope_yarn_beta_slow)), rot - 1);
    if (hi == lo) hi += 0.001;
    for (int i = 0; i < half; i++) {
        double f = pow(theta, -2.0 * i / rot);
        if (!scaled) {
            /* as is */
        } else if (hp->rope_scaling == TK_ROPE_SCALING_LINEAR && hp->rope_factor > 0) {
            f /= hp->rope_factor;
        } else if (hp->rope_scaling == TK_ROPE_SCALING_LLAMA3 && hp->rope_factor > 0) {
            /* Llama 3.1: long wavelengths are slowed by `factor`, short ones
             * kept, and the band between is interpolated. */
            double wavelen = 2 * M_PI / f;
            double low_wl = hp->rope_orig_ctx / hp->rope_low_freq_factor;
            double high_wl = hp->rope_orig_ctx / hp->rope_high_freq_factor;
            if (wavelen > low_wl) {
                f /= hp->rope_factor;
            } else if (wavelen >= high_wl) {
                double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                                (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
                f = (1 - smooth) * f / hp->rope_factor + smooth * f;
            }
        } else if (hp->rope_scaling == TK_ROPE_SCALING_YARN && hp->rope_factor > 0) {
            double keep = 1 - fmin(fmax((i - lo) / (hi - lo), 0), 1);
            f = f / hp->rope_factor * (1 - keep) + f * keep;
        }
        out[i] = (float)f;
    }
}

/* Sliding window, its layer pattern, the attention and embedding scales:
 * file values first, then the architecture's defaults. */
static int init_layer_options(tk_model *m, tk_err *err) {
    const tk_arch *a = m->arch;
    const tk_hparams *hp = &m->hp;
    m->embd_scale = a->embd_scale ? sqrtf((float)hp->dim) : 1.0f;
    if (hp->attn_scale > 0) {
        m->attn_scale = hp->attn_scale;
    } else {
        float qpas = (float)hp->head_dim;
        if (a->attn_scale == TK_ATTN_SCALE_GEMMA3 && hp->n_layers == 62) qpas = (float)hp->dim / hp->n_heads;
        m->attn_scale = 1.0f / sqrtf(qpas);
    }
    /* YaRN and LongRoPE multiply cos and sin by an attention factor (in the
     * tables, not folded into the score scale: with partial rotary the
     * dimensions that do not rotate are not scaled) */
    m->rope_mscale = 1.0f;
    if (hp->rope_scaling == TK_ROPE_SCALING_YARN)
        m->rope_mscale = hp->rope_attn_factor > 0 ? hp->rope_attn_factor
                         : hp->rope_factor > 1    ? (float)(0.1 * log(hp->rope_factor) + 1.0)
                                                  : 1.0f;
    else if (hp->rope_scaling == TK_ROPE_SCALING_LONGROPE && hp->rope_attn_factor > 0)
        m->rope_mscale = hp->rope_attn_factor;
    m->swa_window = a->uses_swa ? hp->swa_window : 0;
    m->n_swa_layers = 0;
    if (m->swa_window > 0) {
        int pattern = hp->has_swa_pattern ? hp->swa_pattern : a->swa_pattern;
        for (int l = 0; l < hp->n_layers; l++) {
            m->layers[l].swa = pattern == 0 || l % pattern < pattern - 1;
            m->n_swa_layers += m->layers[l].swa;
        }
    }
    if (m->n_swa_layers == 0) m->swa_window = 0;
    m->kv_window = m->swa_window > 0 && m->n_swa_layers == hp->n_layers ? m->swa_window : 0;
    if (m->swa_window > 0 && !(hp->rope_theta_swa > 0) && !(a->rope_theta_swa > 0)) {
        /* sliding layers share the global RoPE table (Mistral) */
        m->rope_theta_swa = hp->rope_theta;
    } else if (m->swa_window > 0) {
        double theta = hp->rope_theta_swa > 0 ? hp->rope_theta_swa : a->rope_theta_swa;
        m->rope_theta_swa = (float)theta;
        m->rope_inv_freq_swa = malloc((size_t)hp->head_dim / 2 * sizeof(float));
        if (!m->rope_inv_freq_swa) return tk_err_set(err, "out of memory");
        init_rope(hp, theta, false, m->rope_inv_freq_swa);
        if (hp->rope_scaling == TK_ROPE_SCALING_YARN || hp->rope_scaling == TK_ROPE_SCALING_LONGROPE)
            return tk_err_set(err, "%s RoPE scaling with separately rotated sliding layers is not supported",
                              hp->rope_scaling == TK_ROPE_SCALING_YARN ? "yarn" : "longrope");
    }
    return 0;
}

/* LongRoPE needs both factor sets; factors without LongRoPE are refused
 * rather than ignored. */
static int bind_longrope(const tk_model *m, tk_err *err) {
    const bool longrope = m->hp.rope_scaling == TK_ROPE_SCALING_LONGROPE;
    const float *sets[2] = {m->w.rope_factors_long, m->w.rope_factors_short};
    const char *names[2] = {"rope_factors_long.weight", "rope_factors_short.weight"};
    for (int s = 0; s < 2; s++) {
        if (!sets[s] != !longrope)
            return tk_err_set(err, longrope ? "longrope RoPE scaling needs tensor '%s'"
                                            : "tensor '%s' is only used with longrope RoPE scaling",
                              names[s]);
        for (int i = 0; sets[s] && i < m->rope_dim / 2; i++)
            if (!(sets[s][i] > 0) || !isfinite(sets[s][i]))
                return tk_err_set(err, "tensor '%s' has a non-positive factor at %d", names[s], i);
    }
    return 0;
}

void tk_model_set_context(tk_model *m, int ctx_len) {
    if (m->hp.rope_scaling != TK_ROPE_SCALING_LONGROPE) return;
    const float *factor = ctx_len > m->hp.rope_orig_ctx ? m->w.rope_factors_long : m->w.rope_factors_short;
    init_rope(&m->hp, m->hp.rope_theta, true, m->rope_inv_freq);
    for (int i = 0; i < m->rope_dim / 2; i++) m->rope_inv_freq[i] /= factor[i];
}

int tk_model_from_source(tk_source *src, tk_model *m, tk_err *err) {
    memset(m, 0, sizeof *m);
    m->arch = tk_arch_for(src->arch, src->hp.n_expert > 0);
    if (!m->arch) {
        char names[256];
        tk_arch_names(names, sizeof names);
        return tk_err_set(err, "unsupported architecture '%s' (supported: %s)", src->arch, names);
    }
    m->hp = src->hp;
    if (check_hparams(&m->hp, err) || tk_moe_check_hparams(m, err)) return -1;
    if (m->hp.rope_scaling == TK_ROPE_SCALING_LLAMA3 &&
        (m->hp.rope_orig_ctx <= 0 || m->hp.rope_low_freq_factor <= 0 ||
         m->hp.rope_high_freq_factor <= m->hp.rope_low_freq_factor))
        return tk_err_set(err, "invalid llama3 RoPE scaling parameters");
    if (m->hp.rope_scaling == TK_ROPE_SCALING_YARN &&
        (m->hp.rope_orig_ctx <= 0 || !(m->hp.rope_factor > 0) || !(m->hp.rope_yarn_beta_fast > 0) ||
         !(m->hp.rope_yarn_beta_slow > 0) || !(m->hp.rope_attn_factor >= 0)))
        return tk_err_set(err, "invalid yarn RoPE scaling parameters (factor, original context, beta_fast, "
                               "beta_slow and attention factor must be positive)");
    if (m->hp.rope_scaling == TK_ROPE_SCALING_LONGROPE && (m->hp.rope_orig_ctx <= 0 || !(m->hp.rope_attn_factor >= 0)))
        return tk_err_set(err, "invalid longrope RoPE scaling parameters (original context and attention factor "
                               "must be positive)");
    const tk_arch *a = m->arch;
    /* Each layer has a tensor of its own for every required role, so a
     * header claiming more layers than the file has tensors for is refused
     * here: the lookups below (every role of every layer) would otherwise
     * cost a 2^16-layer claim in a small file a million name searches. */
    int64_t per_layer = a->n_fused_roles;
    for (int i = 0; i < a->n_layer_roles; i++) per_layer += a->layer_roles[i].required;
    if (per_layer * m->hp.n_layers > src->n_tensors)
        return tk_err_set(err, "the header claims %d layers, which need at least %lld tensors (%lld per layer); "
                               "the file has %d", m->hp.n_layers, (long long)(per_layer * m->hp.n_layers),
                          (long long)per_layer, src->n_tensors);
    m->src = *src; /* take ownership */

    /* Count vector floats to allocate them in one block: those of the
     * vector tensors present (a header may claim far larger dimensions
     * than the file holds; binding fails at the first one missing). */
    size_t n_vec = 0;
    for (int i = 0; i < a->n_global_roles; i++) n_vec += vector_floats(m, &a->global_roles[i], -1);
    for (int l = 0; l < m->hp.n_layers; l++)
        for (int i = 0; i < a->n_layer_roles; i++) n_vec += vector_floats(m, &a->layer_roles[i], l);
    m->vectors = malloc((n_vec ? n_vec : 1) * sizeof(float));
    m->layers = calloc((size_t)m->hp.n_layers, sizeof(tk_layer));
    m->rope_inv_freq = malloc((size_t)m->hp.head_dim / 2 * sizeof(float));
    size_t n_views = 0;
    for (int i = 0; i < a->n_fused_roles; i++) n_views += (size_t)a->fused_roles[i].n_parts;
    m->fused_views = calloc(n_views * (size_t)m->hp.n_layers + 1, sizeof(tk_tensor));
    if (!m->vectors || !m->layers || !m->rope_inv_freq || !m->fused_views) {
        tk_err_set(err, "out of memory");
        goto fail;
    }
    float *cursor = m->vectors;
    for (int i = 0; i < a->n_global_roles; i++)
        if (bind_role(m, &a->global_roles[i], -1, &m->w, &cursor, err)) goto fail;
    tk_tensor *views = m->fused_views;
    for (int l = 0; l < m->hp.n_layers; l++) {
        for (int i = 0; i < a->n_layer_roles; i++)
            if (bind_role(m, &a->layer_roles[i], l, &m->layers[l], &cursor, err)) goto fail;
        for (int i = 0; i < a->n_fused_roles; i++)
            if (bind_fused(m, &a->fused_roles[i], l, &m->layers[l], &views, err)) goto fail;
    }
    if (m->arch->moe && tk_moe_bind(m, err)) goto fail;
    if (!m->w.output) {
        m->w.output = m->w.tok_embd;
        m->hp.tied_output = true;
    }
    m->rope_dim = rope_dim_of(&m->hp);
    if (bind_longrope(m, err)) goto fail;
    init_rope(&m->hp, m->hp.rope_theta, true, m->rope_inv_freq);
    tk_model_set_context(m, 0);
    if (init_layer_options(m, err)) goto fail;
    /* GGUF files carry Llama-3.1 style scaling as per-frequency divisors. */
    const tk_tensor *rf = tk_source_find(&m->src, "rope_freqs.weight");
    if (rf && m->hp.rope_scaling == TK_ROPE_SCALING_LONGROPE) {
        tk_err_set(err, "tensor 'rope_freqs.weight' cannot be combined with longrope RoPE scaling");
        goto fail;
    }
    if (rf && m->hp.rope_scaling != TK_ROPE_SCALING_LLAMA3) {
        int half = m->rope_dim / 2;
        if (rf->type != TK_F32 || rf->ne[0] != half || rf->nbytes < sizeof(float) * (size_t)half) {
            tk_err_set(err, "tensor 'rope_freqs.weight' must be %d float32 values", half);
            goto fail;
        }
        const float *factor = rf->data;
        for (int i = 0; i < half; i++) {
            if (!(factor[i] > 0)) {
                tk_err_set(err, "tensor 'rope_freqs.weight' has a non-positive factor");
                goto fail;
            }
            m->rope_inv_freq[i] /= factor[i];
        }
    }
    return 0;
fail:
    /* The caller keeps ownership of the source on failure. */
    *src = m->src;
    memset(&m->src, 0, sizeof m->src);
    tk_model_free(m);
    return -1;
}

int tk_model_load(const char *path, tk_model *m, tk_err *err) {
    tk_source src;
    if (tk_source_open(path, &src, err)) return -1;
    if (tk_model_from_source(&src, m, err)) {
        tk_source_close(&src);
        return tk_err_wrap(err, "%s", path);
    }
    return 0;
}

void tk_model_free(tk_model *m) {
    free(m->vectors);
    free(m->moe_router_f32);
    free(m->moe_views);
    free(m->fused_views);
    free(m->tp_views);
    free(m->tp_data);
    free(m->panel_data);
    free(m->layers);
    free(m->rope_inv_freq);
    free(m->rope_inv_freq_swa);
    tk_source_close(&m->src);
    memset(m, 0, sizeof *m);
}
