/* Quantized matrix kernels: y = W x for GGML block-format weights.
 *
 * A weight matrix has `out` rows of n = ne[0] elements; row r starts at
 * w + r * w_row_bytes (w_row_bytes = tk_dtype_row_bytes(wtype, n)).  The
 * activations (n_tok rows of n floats) are first packed with quantize_act,
 * one row per token, into rows of act_row_bytes(n) bytes:
 *
 *   act_type TK_Q8_0  blocks of 32 int8 + f16 scale          (Q4_0 Q5_0 Q8_0 IQ4_NL)
 *   act_type TK_Q8_1  Q8_0 plus s = d * sum(q) as f16        (Q4_1 Q5_1)
 *   act_type TK_Q8_K  blocks of 256 int8, f32 scale, int16 sums of 16
 *                                                            (Q2_K..Q6_K IQ4_XS)
 *   act_type TK_F32   the floats themselves                  (F32 F16 BF16)
 *
 * The activation quantizers compute q = round(x * (127/amax)) (nearest,
 * ties to even) per block, so every quant lies in [-127, 127], with scale
 * d = amax/127 (Q8_0, Q8_1) or d = 1/(127/amax) (Q8_K).  That is how
 * llama.cpp's x86 quantizers compute them: tokamak's Q8_0/Q8_1 bytes are
 * identical to llama.cpp's, and its Q8_K blocks differ only in sign
 * convention (llama.cpp negates d and the quants when the largest-magnitude
 * element is positive), with d * q identical.  Each ISA's quantizer produces
 * the same bytes as the scalar one.
 *
 * gemm then computes, for r in [r0, r1) and t in [0, n_tok):
 *
 *   y[t * ldy + r] = sum_c W[r][c] * act_t[c]
 *
 * as integer dot products of the weight quants with the int8 activations
 * (exact), scaled by the block scales and accumulated in float32.  The
 * result for an element depends only on its row, its token and the kernel
 * (ISA): never on r0/r1, on n_tok or on the token's position in the batch,
 * so threads may split rows any way they like.  Kernels never read outside
 * rows [r0, r1) and tokens [0, n_tok); w and act need no alignment.
 *
 * Kernels are stateless and thread-safe.  n must be a multiple of the
 * weight type's block size (32 or 256). */
#ifndef TK_QGEMM_H
#define TK_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "../formats/dtype.h"
#include "cpu.h"

typedef struct tk_qkernel {
    tk_dtype wtype;    /* weight type */
    tk_dtype act_type; /* packed activation format (see above) */
    tk_isa isa;        /* instruction set the kernel uses (<= the one asked for) */
    const char *name;  /* "Q4_K/avx2" */
    /* bytes of one packed activation row of n elements */
    size_t (*act_row_bytes)(int64_t n);
    /* packs one activation row of n floats into act_row_bytes(n) bytes */
    void (*quantize_act)(const float *x, void *out, int64_t n);
    /* y[t * ldy + r] = sum_c W[r][c] * act_t[c] for r in [r0, r1), t in [0, n_tok);
     * act_t = (const char *)act + t * act_row_bytes */
    void (*gemm)(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                 size_t act_row_bytes, int n_tok, float *y, int64_t ldy);
    /* gemm with w in the panel layout of kernels/panels.h (r0 a multiple of
     * 8, n at most TK_PANELS_MAX_N), the same results bit for bit; NULL if
     * the kernel reads only the row layout */
    void (*gemm_panels)(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy);
} tk_qkernel;

/* The kernel for weights of type wtype using at most the given ISA (pass
 * tk_cpu_isa()).  If that ISA has no specialised kernel for the type, the
 * best lower one is returned (its isa field says which).  NULL if the type
 * has no kernel at all (the caller dequantizes), or if isa is not supported
 * by this CPU. */
const tk_qkernel *tk_qkernel_get(tk_dtype wtype, tk_isa isa);

/* A line of weights a kernel reads soon, fetched into L2 (locality 2:
 * prefetcht1 on x86), not L1: the L1 prefetcher pulls it on from there.
 * Decode streams the weights from DRAM once, 8-16 rows at a time; fetched
 * into L1 instead, those lines took the L1 from the rows being read (Zen 4,
 * one thread, bench_qgemm decode from DRAM: Q4_K 6.4 -> 12-13 GB/s, Q6_K 6.3
 * -> 11, Q8_0 12 -> 16-17; docs/kernels.md). */
static inline void tk_prefetch_weights(const void *p) { __builtin_prefetch(p, 0, 2); }

/* Lines [*l0, *l1) of the lines of `bytes`: part `part` of `parts`.  A
 * kernel spreads the prefetch of a large block over the block's work in
 * such parts, as a burst of more lines than the core has fill buffers for
 * stalls it (the k-quant panels: docs/kernels.md, "Session 33"). */
static inline void tk_prefetch_part_lines(size_t bytes, int part, int parts, size_t *l0, size_t *l1) {
    const size_t lines = (bytes + 63) / 64;
    *l0 = lines * (size_t)part / (size_t)parts;
    *l1 = lines * (size_t)(part + 1) / (size_t)parts;
}

#endif
