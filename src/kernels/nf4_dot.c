/* NF4 / NF4_DQ x Q8_0: the scalar reference kernels (see nf4_dot.h for the
 * definition every ISA follows). */
#include "nf4_dot.h"

#include <string.h>

#include "../formats/dtype.h"
#include "../formats/quant_blocks.h"

static const int16_t nf4_levels[16] = TK_NF4_LEVELS_I16;

/* Chunk dot: 32 codes (0..15, element order) x 32 int8 activations. */
static int32_t dot32(const uint8_t *code, const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += (int32_t)nf4_levels[code[j]] * a[j];
    return s;
}

/* Absmax and code bytes of block b of a row (nb blocks, ng DQ groups). */
static float block_absmax(int dq, const unsigned char *row, int64_t nb, int64_t ng, int64_t b,
                          const unsigned char **codes) {
    if (!dq) {
        /* blocks are [f32 absmax][32 bytes]; all before b are full */
        const unsigned char *p = row + (size_t)b * 36;
        float a;
        memcpy(&a, p, 4);
        *codes = p + 4;
        return a;
    }
    float gs[2];
    memcpy(gs, row + 8 * (size_t)(b / TK_NF4_DQ_GROUP), 8);
    const unsigned char *qa = row + 8 * (size_t)ng;
    *codes = qa + nb + (size_t)b * 32;
    return (float)qa[b] * gs[0] + gs[1];
}

static void gemm_scalar(int dq, const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    const int64_t nb = (n + TK_NF4_BLOCK - 1) / TK_NF4_BLOCK, ng = (nb + TK_NF4_DQ_GROUP - 1) / TK_NF4_DQ_GROUP;
    uint8_t code[32];
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)w + (size_t)r * w_row_bytes;
        for (int t = 0; t < n_tok; t++) {
            const unsigned char *at = (const unsigned char *)act + (size_t)t * act_row_bytes;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const unsigned char *c;
                const float am = block_absmax(dq, row, nb, ng, b, &c);
                const int full = n - TK_NF4_BLOCK * b >= TK_NF4_BLOCK;
                float f = 0; /* the block's chunks, scaled by their d */
                for (int h = 0; h < 1 + full; h++) {
                    if (full)
                        for (int j = 0; j < 32; j++) code[j] = h ? c[j] >> 4 : c[j] & 0xF;
                    else
                        for (int j = 0; j < 16; j++) {
                            code[j] = c[j] & 0xF;
                            code[j + 16] = c[j] >> 4;
                        }
                    tk_block_q8_0 ab;
                    memcpy(&ab, at + (size_t)(2 * b + h) * sizeof ab, sizeof ab);
                    f += (float)dot32(code, ab.qs) * tk_f16_to_f32(ab.d);
                }
                acc += f * am;
            }
            y[(size_t)t * ldy + r] = acc * 0x1p-14f;
        }
    }
}

void tk_nf4_gemm_scalar(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    gemm_scalar(0, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}

void tk_nf4dq_gemm_scalar(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                          size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    gemm_scalar(1, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
