/* Helpers shared between the quant module's files (not a public API). */
#ifndef TK_QUANT_INTERNAL_H
#define TK_QUANT_INTERNAL_H

#include <stdint.h>

#include "../formats/dtype.h"

/* NF4 / NF4_DQ rows (nf4.c). */
int tk_nf4_quantize_row(tk_dtype type, const float *src, void *dst, int64_t n, const float *importance);

#endif
