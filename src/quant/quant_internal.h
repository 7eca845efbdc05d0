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

#endif
