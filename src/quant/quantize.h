/* Whole-model quantization: a source model (GGUF F32/F16/BF16, llama2.c,
 * Hugging Face directory) in, a GGUF out, by round-to-nearest, GPTQ or AWQ
 * (tk_quantize_model, public).
 *
 * The building blocks (usable on their own, e.g. by tests):
 *   tk_qscheme_*          the output type of each tensor (llama.cpp's rules)
 *   tk_gram_accumulate    H += X^T X for calibration
 *   tk_gptq_matrix        GPTQ on one weight matrix given H
 *   tk_awq_search         AWQ's per-channel scale search for matrices sharing an input
 *   tk_rtn_matrix         round to nearest with a chosen group size */
#ifndef TK_QUANTIZE_H
#define TK_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tokamak.h>

#include "../formats/source.h"
#include "../kernels/threadpool.h"
#include "../util/err.h"
#include "quant.h"

/* ---- schemes: which type each tensor gets ---- */

typedef struct tk_qscheme {
    char name[16];      /* "q4_k_m" */
    tk_dtype base;      /* the type most weights get */
    bool k_mix;         /* q4_k_m: more bits for attn_v / ffn_down of some layers */
    int ftype;          /* llama_ftype for general.file_type (project value for NF4) */
} tk_qscheme;

/* Parses a --type name: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k
 * q5_k q6_k q4_k_m nf4 (nf4_dq: nf4 with double quantization). */
int tk_qscheme_parse(const char *name, tk_qscheme *s, tk_err *err);

/* The type of one tensor (GGUF name, shape ne[0] x rows):
 *  - vectors (norms) stay F32;
 *  - the output matrix (output.weight, or token_embd.weight when the
 *    embedding is tied) gets Q6_K, or Q8_0 when its rows are not a multiple
 *    of 256, unless the base type is Q8_0 / F16 / BF16 / F32 or `pure`
 *    (llama.cpp's rule);
 *  - q4_k_m: attn_v and ffn_down of layer i get Q6_K when
 *    use_more_bits(i, n_layers) (i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2),
 *    every other matrix Q4_K;
 *  - a k-quant that does not fit the row (ne[0] % 256) falls back like
 *    llama.cpp: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K ->
 *    Q4_0 (llama.cpp now uses IQ4_NL there, which we cannot produce); a
 *    32-block type that does not fit falls back to F16. */
tk_dtype tk_qscheme_tensor_type(const tk_qscheme *s, const char *name, int64_t ne0, int64_t rows, int n_layers,
                                bool tied_output, bool pure);

/* ---- calibration statistics ---- */

/* H[i][j] += sum_t X[t][i] * X[t][j] over n_tok rows of dim floats (both
 * triangles are kept up to date).  Runs on the pool. */
void tk_gram_accumulate(double *H, const float *X, int n_tok, int dim, tk_threadpool *pool);

/* ---- per-matrix algorithms ----
 * A weight matrix is rows x cols floats, row-major (GGUF: cols = ne[0] is
 * the input dimension).  Outputs: codes (rows x cols, 0..qmax), one grid
 * per 32 columns of each row (rows x cols/32), and the dequantized values. */

typedef struct tk_qmatrix {
    tk_dtype type;
    int64_t rows, cols;
    uint8_t *codes;
    tk_qgrid *grids;
    float *deq;
} tk_qmatrix;

int tk_qmatrix_alloc(tk_qmatrix *q, tk_dtype type, int64_t rows, int64_t cols, tk_err *err);
void tk_qmatrix_free(tk_qmatrix *q);
/* Packs into the container: rows * tk_dtype_row_bytes(type, cols) bytes. */
int tk_qmatrix_pack(const tk_qmatrix *q, void *dst, tk_err *err);

/* Round to nearest on grids of `group` columns (a multiple of 32; the last
 * group of a row may be shorter).  K types: super-block scales fitted per
 * 256 as the reference does, sub-block scales shared across the group. */
int tk_rtn_matrix(const float *W, int group, tk_qmatrix *q, tk_threadpool *pool, tk_err *err);
/* ... with one clipping ratio per group (rows x ceil(cols / group), from
 * tk_awq_clip; NULL: none). */
int tk_rtn_matrix_clip(const float *W, int group, const float *clip, tk_qmatrix *q, tk_threadpool *pool, tk_err *err);

typedef struct tk_gptq_opts {
    int group;          /* columns per grid: 32, 64 or 128 */
    bool act_order;     /* process columns by decreasing diag(H); grids are then
                           fitted up front on the original weights ("static groups") */
    double damp;        /* lambda = damp * mean(diag(H)); 0.01 */
    int block;          /* lazy-batch width; 128 (256 for K types so a super-block fits) */
} tk_gptq_opts;

/* GPTQ (Frantar et al. 2022) on one matrix.  H (cols x cols, symmetric) is
 * sum x x^T of the calibration inputs; it is not modified. */
int tk_gptq_matrix(const float *W, const double *H, const tk_gptq_opts *o, tk_qmatrix *q, tk_threadpool *pool,
                   tk_err *err);

/* sum_r (W_r - Q_r) H (W_r - Q_r)^T: the calibration output error
 * ||W X - Q X||^2 of a quantized matrix. */
double tk_output_error(const float *W, const float *Q, int64_t rows, int64_t cols, const double *H,
                       tk_threadpool *pool);

/* AWQ (Lin et al. 2023) scale search for n_mats matrices sharing one input
 * of `cols` channels.  For alpha in {0, 1/(n_grid-1), ..., 1}:
 * s = mean|x|^alpha (normalised so max*min = 1), loss(alpha) =
 * sum ||W X - Q(W diag(s)) diag(s)^-1 X||^2 computed through H = X X^T.
 * tie (may be NULL) maps channel c to a class; channels of a class share
 * one scale (their mean|x| is averaged): GQA's v -> o folding.  Writes the
 * best s (cols floats), its alpha and every loss (n_grid values). */
typedef struct tk_awq_result {
    float alpha;
    double loss;
    double loss_alpha0;
} tk_awq_result;

int tk_awq_search(float *const *W, const int64_t *rows, const tk_dtype *types, int n_mats, int64_t cols,
                  const double *H, const double *mean_abs, const int *tie, int group, int n_grid, float *s,
                  double *losses, tk_awq_result *res, tk_threadpool *pool, tk_err *err);

/* AWQ's weight clipping search (auto_clip of the reference
 * implementation): for each row and group of `group` columns, the ratio r
 * in {1, 0.95, ..., 0.55} of the group's range that minimises the group's
 * own output error d_g H_gg d_g^T (d = W - Q_r(W), H the Gram matrix of the
 * matrix's input).  ratios: rows x ceil(cols / group).  Grid types only. */
int tk_awq_clip(const float *W, int64_t rows, int64_t cols, tk_dtype type, int group, const double *H, float *ratios,
                tk_threadpool *pool, tk_err *err);

/* The whole model: tk_quantize_model (include/tokamak.h, "Offline tools"). */

#endif
