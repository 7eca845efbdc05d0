/* Helpers shared between the quant module's files (not a public API). */
#ifndef TK_QUANT_INTERNAL_H
#define TK_QUANT_INTERNAL_H

#include <stdint.h>

#include "../formats/dtype.h"

/* NF4 / NF4_DQ rows (nf4.c). */
int tk_nf4_quantize_row(tk_dtype type, const float *src, void *dst, int64_t n, const float *importance);

/* llama.cpp's make_qkx2_quants (n <= 256): affine codes in [0, nmax],
 * value = scale * l - *min_out.  Returns the scale (rtn.c). */
float tk_affine_search(int n, int nmax, const float *x, const float *w, uint8_t *L, float *min_out, float rmin,
                       float rdelta, int nstep, int use_mad);

/* The Q4_K (nmax 15) / Q5_K (nmax 31) super-block fit of the reference
 * quantizer: packed 6-bit scales/mins, half-precision d/dmin, and the
 * codes L of the 256 values. */
void tk_k45_fit(const float *x, int nmax, uint8_t *L, uint8_t packed[12], uint16_t *d_out, uint16_t *dmin_out,
                const float *imp);

/* Round to nearest of one row on groups of `group` columns (matrix.c). */
struct tk_qgrid;
void tk_rtn_row(tk_dtype type, const float *x, int64_t cols, int group, struct tk_qgrid *grids, uint8_t *codes,
                float *deq);
/* ... with a clipping ratio per group (clip[c / group]; NULL: none). */
void tk_rtn_row_clip(tk_dtype type, const float *x, int64_t cols, int group, const float *clip, struct tk_qgrid *grids,
                     uint8_t *codes, float *deq);

/* Quantize-dequantize one row: grids of `group` columns when group > 0 and
 * the type holds grids, else the type's reference quantizer (awq.c). */
int tk_quant_row_values(tk_dtype type, int group, const float *x, int64_t cols, float *out);

/* sum a[i] * b[i] in double with four partial sums (vectorizes). */
static inline double tk_dotd(const double *a, const double *b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

#endif
