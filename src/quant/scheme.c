/* Quantization schemes: the type each tensor of a model gets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "quantize.h"

static const struct {
    const char *name;
    tk_dtype base;
    bool k_mix;
    int ftype; /* llama_ftype */
} schemes[] = {
    {"f32", TK_F32, false, 0},      {"f16", TK_F16, false, 1},       {"bf16", TK_BF16, false, 32},
    {"q8_0", TK_Q8_0, false, 7},    {"q4_0", TK_Q4_0, false, 2},     {"q4_1", TK_Q4_1, false, 3},
    {"q5_0", TK_Q5_0, false, 8},    {"q5_1", TK_Q5_1, false, 9},     {"q2_k", TK_Q2_K, false, 10},
    {"q3_k", TK_Q3_K, false, 11},   {"q4_k", TK_Q4_K, false, 14},    {"q5_k", TK_Q5_K, false, 16},
    {"q6_k", TK_Q6_K, false, 18},   {"q4_k_m", TK_Q4_K, true, 15},
    /* NF4 has no llama_ftype: 1024 is llama.cpp's "guessed" marker */
    {"nf4", TK_NF4, false, 1024},   {"nf4_dq", TK_NF4_DQ, false, 1024},
};

int tk_qscheme_parse(const char *name, tk_qscheme *s, tk_err *err) {
    for (size_t i = 0; name && i < sizeof schemes / sizeof schemes[0]; i++)
        if (!strcasecmp(name, schemes[i].name)) {
            memset(s, 0, sizeof *s);
            snprintf(s->name, sizeof s->name, "%s", schemes[i].name);
            s->base = schemes[i].base;
            s->k_mix = schemes[i].k_mix;
            s->ftype = schemes[i].ftype;
            return 0;
        }
    return tk_err_set(err,
                      "unknown quantization type '%s' (expected one of f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k "
                      "q3_k q4_k q5_k q6_k q4_k_m nf4)",
                      name ? name : "");
}

int tk_quant_type_check(const char *type, tk_err *err) {
    tk_qscheme s;
    return tk_qscheme_parse(type, &s, err);
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third layer in between. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int layer_of(const char *name) {
    if (strncmp(name, "blk.", 4)) return -1;
    return atoi(name + 4);
}

static tk_dtype fit_row(tk_dtype t, int64_t ne0) {
    const tk_dtype_info *info = tk_dtype_get((int)t);
    if (info && ne0 % info->block_elems == 0) return t;
    switch (t) {
    case TK_Q2_K:
    case TK_Q3_K: t = TK_Q4_0; break;
    case TK_Q4_K: t = TK_Q5_0; break;
    case TK_Q5_K: t = TK_Q5_1; break;
    case TK_Q6_K: t = TK_Q8_0; break;
    default: return ne0 % 32 == 0 ? t : TK_F16;
    }
    return ne0 % 32 == 0 ? t : TK_F16;
}

tk_dtype tk_qscheme_tensor_type(const tk_qscheme *s, const char *name, int64_t ne0, int64_t rows, int n_layers,
                                bool tied_output, bool pure) {
    if (rows <= 1) return TK_F32;
    const tk_dtype base = s->base;
    if (base == TK_F32 || base == TK_F16 || base == TK_BF16) return base;
    tk_dtype t = base;
    const bool is_output = !strcmp(name, "output.weight") || (tied_output && !strcmp(name, "token_embd.weight"));
    if (is_output && !pure && base != TK_Q8_0) {
        t = ne0 % 256 ? TK_Q8_0 : TK_Q6_K;
    } else if (s->k_mix && !pure) {
        const int l = layer_of(name);
        /* phi3's fused attn_qkv counts as attn_v, as in llama.cpp (one per layer) */
        if (l >= 0 &&
            (strstr(name, ".attn_v.weight") || strstr(name, ".attn_qkv.weight") || strstr(name, ".ffn_down.weight")) &&
            use_more_bits(l, n_layers))
            t = TK_Q6_K;
    }
    return fit_row(t, ne0);
}
