/* Weight matmuls of the forward pass: Y = X Wᵀ for one or several weight
 * matrices sharing one input, split over the thread pool.  Activations are
 * packed once per distinct kernel input format (int8 blocks for quantized
 * weights) and every matrix's rows are dealt out as tasks of one pool
 * dispatch.  Weights without a SIMD/integer kernel are dequantized row by
 * row (the portable path). */
#ifndef TK_MATMUL_H
#define TK_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../formats/tensor.h"
#include "../util/err.h"
#include "cpu.h"
#include "glu.h"
#include "threadpool.h"

#define TK_MATMUL_MAX_W 4

struct tk_qkernel;

typedef struct tk_matmul_ws {
    tk_isa isa;
    /* kernel per weight type, resolved once: looking it up checks CPU
     * features (cpuid), which is a costly VM exit under virtualization */
    const struct tk_qkernel *kernel[TK_DTYPE_LIMIT];
    bool reference;        /* no integer kernels: dequantize and multiply in float32 */
    tk_glu_fn glu;         /* the GLU step of every path (fused or not), so their bits agree */
    int max_tokens;
    int64_t max_in;
    unsigned char *act[2]; /* packed activations, one buffer per input format */
    size_t act_cap;
    /* Activations already packed by tk_rmsnorm_pack for input `prepacked_x`
     * (n_tok rows) in the formats listed; the next matmul on that input
     * skips packing.  Cleared by tk_matmul_ws_forget. */
    const float *prepacked_x;
    int prepacked_n_tok;
    tk_dtype prepacked_as[2];
    int n_prepacked;
    float *scratch;        /* per-thread dequantized rows (portable path) */
    size_t scratch_stride;
    int n_threads;
} tk_matmul_ws;

/* reference: use the float32 dequantize path everywhere (the numerical
 * reference the golden tests compare at 1e-4). */
int tk_matmul_ws_init(tk_matmul_ws *mw, tk_isa isa, bool reference, int max_tokens, int64_t max_in, int n_threads,
                      tk_err *err);
void tk_matmul_ws_free(tk_matmul_ws *mw);

/* Y_i[t * ldy_i + r] = sum_c W_i[r][c] * X[t * ldx + c] for each of the
 * n_w matrices (all with ne[0] = in), t < n_tok, r < W_i->ne[1]. */
void tk_matmul_n(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *X, int64_t ldx,
                 int n_tok, float *const *Y, const int64_t *ldy);

/* What happens to each output row range right after a task computes it,
 * while it is still in cache (operator fusion). */
typedef enum tk_mm_epilogue {
    TK_MM_STORE = 0,  /* plain store */
    TK_MM_RESIDUAL,   /* also residual[t * ld + r] += Y[t * ld + r] (1 matrix) */
    TK_MM_GLU_SILU,   /* 2 matrices, gate and up: Y0 = silu(Y0) * Y1 */
    TK_MM_GLU_GELU,   /* 2 matrices, gate and up: Y0 = gelu_tanh(Y0) * Y1 */
    TK_MM_ROPE,       /* matrix 0 is a query projection: each head of its output
                         gets an optional RMSNorm, then RoPE (tk_mm_rope) */
    TK_MM_SCATTER     /* grouped matmuls only: weighted add into other rows (tk_mm_grouped) */
} tk_mm_epilogue;

/* TK_MM_ROPE: matrix 0's rows are heads of head_dim; token t rotates pair
 * i by cos[t * head_dim/2 + i], sin[...].  Pairs are (2i, 2i+1) when
 * adjacent, else (i, i + head_dim/2).  norm_w (head_dim weights), if set,
 * is applied first (QK-norm).  Tasks of matrix 0 then cover whole heads. */
typedef struct tk_mm_rope {
    int head_dim;
    bool adjacent;
    const float *cos, *sin;
    const float *norm_w;
    float eps;
} tk_mm_rope;

/* y = x with the pairs of one head vector rotated (the RoPE the forward
 * pass and the TK_MM_ROPE epilogue share); y may be x. */
void tk_rope_head(const float *x, float *y, int head_dim, bool adjacent, const float *cos_t, const float *sin_t);

/* tk_matmul_n with an epilogue.  For the GLU forms, both matrices' rows
 * [r0, r1) are computed by the same task, so the activation is applied to
 * rows still in cache. */
void tk_matmul_fused(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *X,
                     int64_t ldx, int n_tok, float *const *Y, const int64_t *ldy, tk_mm_epilogue epi,
                     float *residual);
/* tk_matmul_n with the TK_MM_ROPE epilogue on matrix 0. */
void tk_matmul_rope(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *X,
                    int64_t ldx, int n_tok, float *const *Y, const int64_t *ldy, const tk_mm_rope *rope);

/* Grouped matmuls: the experts of a mixture-of-experts layer in one pool
 * dispatch.  Rows [off[g], off[g + 1]) of X form group g (the tokens routed
 * to one expert, gathered); they go through the group's n_w matrices
 * W[g * n_w + i] (all with ne[0] = in) into the same rows of Y[i].  Tasks
 * are output row ranges, each covering every group in ascending order, so
 * the work splits evenly whatever the group sizes, and each element is the
 * kernel's (row, token) result as in tk_matmul_n.  Epilogues:
 *   TK_MM_STORE     1 or 2 matrices per group, plain store;
 *   TK_MM_GLU_*     2 matrices (gate, up): Y0 = act(Y0) * Y1;
 *   TK_MM_SCATTER   1 matrix: out[dst[s] * ldo + r] += weight[s] * Y0[s * ldy + r]
 *                   for every row s, in ascending s (groups in order), so
 *                   each out row's sum is built in the same order whatever
 *                   the split.
 * The rows off[0] .. off[n_groups] - 1 are used (off[0] need not be 0);
 * at most the row capacity the workspace was made for.
 * With src, row s is X row src[s] (X holds n_src rows; a token routed to
 * several experts is one X row read by several groups): each X row is
 * packed once and the packed copy placed in each of its rows, and `gather`
 * (room for every row at stride in) receives the float rows only if some
 * matrix's path reads floats. */
typedef struct tk_mm_grouped {
    int n_groups, n_w;
    const tk_tensor *const *W; /* [n_groups * n_w]; a group with no rows may have NULL matrices */
    const int *off;            /* [n_groups + 1] */
    const float *X;
    int64_t ldx;
    const int *src;            /* optional, [off[n_groups]]: X row of each row */
    int n_src;
    float *gather;             /* with src */
    float *Y[2];
    int64_t ldy;
    tk_mm_epilogue epi;
    const int *dst;            /* TK_MM_SCATTER */
    const float *weight;
    float *out;
    int64_t ldo;
} tk_mm_grouped;
void tk_matmul_grouped(tk_threadpool *pool, tk_matmul_ws *mw, const tk_mm_grouped *g);

static inline void tk_matmul(tk_threadpool *pool, tk_matmul_ws *mw, const tk_tensor *W, const float *X, int64_t ldx,
                             int n_tok, float *Y, int64_t ldy) {
    tk_matmul_n(pool, mw, 1, &W, X, ldx, n_tok, &Y, &ldy);
}

/* Fused RMSNorm + activation packing: for each token row,
 * xn = x / rms(x) * w is written (float, for paths that need it) and packed
 * block by block into the activation formats the given matrices' kernels
 * take, in one pass over the normalized row. */
void tk_rmsnorm_pack(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *x,
                     const float *norm_w, float eps, int n_tok, int64_t dim, float *xn);
static inline void tk_matmul_ws_forget(tk_matmul_ws *mw) { mw->prepacked_x = NULL; }

#endif
