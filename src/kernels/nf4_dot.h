/* NF4 / NF4_DQ matrix kernels: y = W x with W in the project's NormalFloat-4
 * types (row layouts in formats/dtype.h, docs/formats.md) and x packed as
 * Q8_0 blocks (the kernels module's act_type TK_Q8_0, so NF4 layers share the
 * packed activations with every other Q8_0 kernel).
 *
 * Definition (the scalar reference in nf4_dot.c; the AVX2 and AVX-512
 * kernels in qgemm_avx2.c / qgemm_avx512.c compute the same integers):
 *
 *   The 16 NF4 levels are held as int16, L[c] = round(tk_nf4_values[c] *
 *   2^14) (TK_NF4_LEVELS_I16 below).  |L[c] / 2^14 - tk_nf4_values[c]| <=
 *   2^-15 for every code (the test checks the table), i.e. each weight is
 *   represented to within 2^-15 * absmax = 3.05e-5 * absmax.  NF4's own
 *   rounding error is up to half a level gap (0.040 * absmax at the
 *   narrowest gap, 0.15 at the widest) and the Q8_0 activation rounding up
 *   to 0.5/127 = 3.9e-3 of the block's amax, so the codebook error is over
 *   1000x below the former and 100x below the latter: negligible.
 *
 *   A row is walked in absmax blocks b of 64 elements, each two 32-element
 *   chunks k = 2b (the low nibbles of its 32 code bytes) and 2b+1 (the high
 *   nibbles); a 32-element tail block has one chunk (the low nibbles of its
 *   16 bytes, then the high nibbles).  Chunk k meets Q8_0 activation block k:
 *       isum_k = sum_j L[code_j] * q_j                  (exact int32)
 *       f_b    = sum over the block's chunks of (float)isum_k * d_k
 *       acc   += f_b * absmax_b,        y = acc * 2^-14  (exact: a power of 2)
 *   with d_k the activation block's f16 scale and absmax_b the block's f32
 *   absmax (NF4) or u8 * scale + min of its group (NF4_DQ).  The SIMD
 *   kernels compute the same integers and split the float sums over vector
 *   lanes, so they agree with the scalar reference to float rounding (the
 *   bound is in tests/test_qgemm.c).
 *
 * Rows [r0, r1) of w (row r at w + r * w_row_bytes, n elements, n a
 * multiple of 32), tokens [0, n_tok) of act (act_row_bytes apart):
 *     y[t * ldy + r] = sum_c W[r][c] * act_t[c]
 * Stateless and thread-safe; no alignment needed; nothing outside the rows'
 * bytes and the activation rows is read. */
#ifndef TK_NF4_DOT_H
#define TK_NF4_DOT_H

#include <stddef.h>
#include <stdint.h>

/* tk_nf4_values * 2^14, rounded to nearest (codes 0..15). */
#define TK_NF4_LEVELS_I16 \
    {-16384, -11406, -8603, -6470, -4660, -3027, -1492, 0, 1304, 2637, 4032, 5536, 7221, 9218, 11845, 16384}

/* The scalar reference kernels (also the TK_ISA_SCALAR entries of
 * tk_qkernel_get). */
void tk_nf4_gemm_scalar(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy);
void tk_nf4dq_gemm_scalar(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                          size_t act_row_bytes, int n_tok, float *y, int64_t ldy);

#endif
