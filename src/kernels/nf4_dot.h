/* NF4 / NF4_DQ matrix kernels: y = W x with W in the project's NormalFloat-4
 * types (layouts in formats/dtype.h) and x packed as Q8_0 blocks.
 *
 * The signature is the kernels module's tk_qkernel gemm (src/kernels/qgemm.h
 * on the kernels branch), so wiring these in is one table entry per type:
 *     {TK_NF4, TK_Q8_0, isa, "NF4/avx2", tk_nf4_act_row_bytes, tk_nf4_quantize_act, tk_nf4_gemm}
 *     {TK_NF4_DQ, TK_Q8_0, isa, "NF4_DQ/avx2", tk_nf4_act_row_bytes, tk_nf4_quantize_act, tk_nf4dq_gemm}
 *
 * Method (table lookup): the 16 NF4 levels are held as int16 (level *
 * 16384, rounded: |error| <= 2^-15 of the block's absmax); each 4-bit code
 * is looked up (AVX2: two pshufb on the low/high bytes of the table), the
 * products with the int8 activations are summed exactly in int32
 * (pmaddwd), and each 32-element sum is scaled by absmax * d_act / 16384
 * and accumulated in float32.
 *
 * Rows [r0, r1) of w (row r at w + r * w_row_bytes, n elements, n a
 * multiple of 32), tokens [0, n_tok) of act (act_row_bytes apart):
 *     y[t * ldy + r] = sum_c W[r][c] * act_t[c]
 * Stateless and thread-safe; no alignment needed. */
#ifndef TK_NF4_DOT_H
#define TK_NF4_DOT_H

#include <stddef.h>
#include <stdint.h>

/* Q8_0 activation packing: blocks of 32 int8 with an f16 scale amax/127,
 * rounded to nearest even (34 bytes per block). */
size_t tk_nf4_act_row_bytes(int64_t n);
void tk_nf4_quantize_act(const float *x, void *out, int64_t n);

/* Best kernel for this CPU (AVX2 when available, else scalar). */
void tk_nf4_gemm(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                 size_t act_row_bytes, int n_tok, float *y, int64_t ldy);
void tk_nf4dq_gemm(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                   size_t act_row_bytes, int n_tok, float *y, int64_t ldy);

/* The individual implementations (tests compare them).  avx2 variants fall
 * back to scalar on CPUs without AVX2. */
void tk_nf4_gemm_scalar(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy);
void tk_nf4dq_gemm_scalar(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                          size_t act_row_bytes, int n_tok, float *y, int64_t ldy);
void tk_nf4_gemm_avx2(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                      size_t act_row_bytes, int n_tok, float *y, int64_t ldy);
void tk_nf4dq_gemm_avx2(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy);
/* Whether the AVX2 variants run AVX2 code on this CPU. */
int tk_nf4_have_avx2(void);

#endif
