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
    TK_DTYPE_LIMIT = 64
} tk_dtype;

typedef struct tk_dtype_info {
    const char *name;   /* "Q4_K" */
    int block_elems;    /* elements per block (1 for F32/F16/BF16) */
    int block_bytes;    /* bytes per block */
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
 * or the type is unknown. */
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
