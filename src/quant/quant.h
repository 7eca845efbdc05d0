/* Quantization toolkit: reference round-to-nearest quantizers for the GGML
 * block types, NormalFloat-4, and the building blocks that let an
 * algorithm (GPTQ, AWQ) choose the integer codes itself while the output
 * stays a standard container any GGUF reader loads.
 *
 * Nothing here prints or keeps global state; every function is reentrant. */
#ifndef TK_QUANT_H
#define TK_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../formats/dtype.h"
#include "../util/err.h"

/* ---- round to nearest ------------------------------------------------- */

/* Whether tk_quantize_row can produce `type`: F32, F16, BF16, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, NF4, NF4_DQ. */
bool tk_quant_can_quantize(tk_dtype type);

/* Quantizes one row of n floats into dst (tk_dtype_row_bytes(type, n)
 * bytes).  n must be a whole number of the type's blocks.
 *
 * importance == NULL: the reference algorithm of llama.cpp
 * (quantize_row_<type>_ref), byte for byte: this is what llama-quantize
 * writes when it is given no importance matrix.
 * importance != NULL: n non-negative weights; every scale search minimises
 * the importance-weighted squared error instead.  Same container, not
 * byte-compatible with llama.cpp's imatrix path.
 *
 * Returns 0, or -1 if the type has no quantizer or n does not fit. */
int tk_quantize_row(tk_dtype type, const float *src, void *dst, int64_t n, const float *importance);

/* Quantizes then dequantizes (the values a reader will see). */
int tk_quantize_roundtrip(tk_dtype type, const float *src, float *dst, int64_t n, const float *importance);

/* ---- externally chosen codes (GPTQ) ----------------------------------
 *
 * A grid is one quantization group's set of representable values, held as
 * the container stores it (half-precision bits, 6-bit sub-block scales), so
 * tk_qgrid_value returns exactly what tk_dequant_row will produce.  Codes
 * run 0..qmax:
 *   Q4_0  value = (q - 8) * d          Q5_0  value = (q - 16) * d
 *   Q8_0  value = (q - 128) * d (q in 1..255: int8 -127..127)
 *   Q4_1, Q5_1  value = q * d + m
 *   Q4_K, Q5_K  value = (D * sc) * q - (Dmin * mn)   (sub-blocks of 32)
 * A container block (32 elements) holds one grid; a larger group is stored
 * by repeating its grid in each of its blocks. */
typedef struct tk_qgrid {
    tk_dtype type;
    uint16_t d, m;   /* half bits: scale, and min (Q4_1/Q5_1) or Dmin (K types) */
    uint8_t sc, mn;  /* K types: 6-bit sub-block scale and min */
    int qmax;
} tk_qgrid;

/* Container types tk_qgrid supports. */
bool tk_qgrid_supported(tk_dtype type);
float tk_qgrid_value(const tk_qgrid *g, int q);
/* Code whose value is nearest to x (clamped to the grid's range). */
int tk_qgrid_code(const tk_qgrid *g, float x);
/* Round-to-nearest choice of a grid for one group of n values (any n >= 1;
 * Q4_0 takes d = max / -8 as the reference does, Q4_1 min/max, ...).
 * For K types this fits the super-block scale to this group alone; use
 * tk_qgrid_fit_k + tk_qgrid_refit_k to share it across a super-block. */
void tk_qgrid_fit(tk_dtype type, const float *x, int n, tk_qgrid *g);
/* The same with the range clipped to ratio (0 < ratio <= 1) of the
 * group's extremes (max for symmetric grids, min and max for affine ones);
 * values outside saturate.  K types ignore the ratio. */
void tk_qgrid_fit_clip(tk_dtype type, const float *x, int n, float ratio, tk_qgrid *g);
/* K types: fits the super-block (256 values) as the reference quantizer
 * does and returns the eight sub-block grids. */
void tk_qgrid_fit_k(tk_dtype type, const float *x, tk_qgrid sub[8]);
/* K types: keeps g's super-block D/Dmin and re-chooses its 6-bit sub-block
 * scale and min for n values (n = 32, or a multiple for larger groups). */
void tk_qgrid_refit_k(tk_qgrid *g, const float *x, int n);
/* Packs n codes (0..qmax each) with one grid per 32 elements into a row of
 * the container (n a whole number of its blocks).  K types: the eight grids
 * of each super-block must share D and Dmin. */
int tk_qpack_row(tk_dtype type, const uint8_t *codes, const tk_qgrid *grids, int64_t n, void *dst, tk_err *err);

/* ---- NormalFloat-4 --------------------------------------------------- */

/* The code book is tk_nf4_values in formats/quant_blocks.h (it is needed
 * by the dequantizer too).  Index of the NF4 value nearest to x (ties go
 * to the smaller index). */
int tk_nf4_code(float x);

#endif
