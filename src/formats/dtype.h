/* Tensor element types.  Numbering follows GGML's type ids so GGUF files map
 * directly.  Each type has a block size (elements per block) and a block
 * byte size; rows are whole blocks. */
#ifndef TK_DTYPE_H
#define TK_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tk_dtype {
    TK_F32 = 0,
    TK_F16 = 1,
    TK_Q4_0 = 2,
    TK_Q4_1 = 3,
    TK_Q5_0 = 6,
    TK_Q5_1 = 7,
    TK_Q8_0 = 8,
    TK_Q8_1 = 9,
    TK_Q2_K = 10,
    TK_Q3_K = 11,
    TK_Q4_K = 12,
    TK_Q5_K = 13,
    TK_Q6_K = 14,
    TK_Q8_K = 15,
    TK_IQ4_NL = 20,
    TK_IQ4_XS = 23,
    TK_BF16 = 30,
    /* Project-specific types (not GGML's; GGML's ids end at 39): */
    TK_NF4 = 200,     /* NormalFloat-4, blocks of 64, fp32 absmax */
    TK_NF4_DQ = 201,  /* NF4 with double-quantized (8-bit) absmax */
    TK_DTYPE_LIMIT = 256
} tk_dtype;

typedef struct tk_dtype_info {
    const char *name;   /* "Q4_K" */
    int block_elems;    /* elements per block (1 for F32/F16/BF16); for NF4 types the
                           granularity of a row length (32) */
    int block_bytes;    /* bytes per block; 0 for the NF4 types, whose row size is not
                           linear in its length: use tk_dtype_row_bytes */
    bool can_dequant;   /* tk_dequant_row supports it */
} tk_dtype_info;

/* NULL for unknown / unsupported type ids. */
const tk_dtype_info *tk_dtype_get(int type);
/* Name of any GGML type id, including types this engine does not support
 * ("IQ2_XXS"); NULL if the id is not a GGML type.  For error messages. */
const char *tk_dtype_ggml_name(int type);
/* Parses "q8_0", "Q4_K", "f16"... ; returns -1 if unknown. */
int tk_dtype_from_name(const char *name);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown.
 *
 * NF4 rows (n a multiple of 32) are cut into nb = ceil(n / 64) absmax blocks,
 * the last one 32 long when n % 64 == 32:
 *   TK_NF4     nb x [f32 absmax, codes of the block (32 or 16 bytes)]
 *   TK_NF4_DQ  ng = ceil(nb / 256) x [f32 scale, f32 min], then nb x u8
 *              absmax codes, then n / 2 bytes of codes
 * Codes: byte j of a block of L elements holds element j in its low nibble
 * and element j + L/2 in its high nibble; value = tk_nf4_values[code] *
 * absmax, absmax (DQ) = u8 * scale + min of its group. */
size_t tk_dtype_row_bytes(tk_dtype t, int64_t n);

/* Scalar reference dequantization of n elements (n multiple of block size).
 * Bit-exact with ggml's reference dequantizers in float32. */
void tk_dequant_row(tk_dtype t, const void *src, float *dst, int64_t n);

/* Reference quantizers used by `convert` (n multiple of block size). */
void tk_quantize_row_q8_0(const float *src, void *dst, int64_t n);
void tk_quantize_row_f16(const float *src, void *dst, int64_t n);
void tk_quantize_row_bf16(const float *src, void *dst, int64_t n);

/* Scalar half / bfloat16 conversion (IEEE round-to-nearest-even). */
float tk_f16_to_f32(uint16_t h);
uint16_t tk_f32_to_f16(float f);
float tk_bf16_to_f32(uint16_t h);
uint16_t tk_f32_to_bf16(float f);

#endif
