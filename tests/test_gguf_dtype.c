/* dtype table, half/bfloat16 conversions and the Q8_0 reference quantizer. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/dtype.h"
#include "formats/quant_blocks.h"
#include "tk_test.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main(void) {
    /* table and names */
    CHECK(tk_dtype_from_name("q4_k") == TK_Q4_K && tk_dtype_from_name("BF16") == TK_BF16 &&
              tk_dtype_from_name("iq4_xs") == TK_IQ4_XS && tk_dtype_from_name("F32") == TK_F32,
          "from_name");
    CHECK(tk_dtype_from_name("q4_k_m") == -1 && tk_dtype_from_name("") == -1 &&
              tk_dtype_from_name(NULL) == -1,
          "from_name rejects");
    CHECK(tk_dtype_get(16) == NULL && tk_dtype_get(-1) == NULL && tk_dtype_get(TK_DTYPE_LIMIT) == NULL,
          "get unknown");
    CHECK(!strcmp(tk_dtype_ggml_name(16), "IQ2_XXS") && tk_dtype_ggml_name(1000) == NULL, "ggml names");
    CHECK(tk_dtype_row_bytes(TK_Q4_K, 512) == 288 && tk_dtype_row_bytes(TK_Q8_0, 64) == 68 &&
              tk_dtype_row_bytes(TK_F16, 3) == 6 && tk_dtype_row_bytes(TK_IQ4_XS, 256) == 136,
          "row_bytes");
    CHECK(tk_dtype_row_bytes(TK_Q4_0, 33) == 0 && tk_dtype_row_bytes(TK_F32, INT64_MAX) == 0 &&
              tk_dtype_row_bytes((tk_dtype)16, 256) == 0 && tk_dtype_row_bytes(TK_F32, -4) == 0,
          "row_bytes rejects");
    for (int t = 0; t < TK_DTYPE_LIMIT; t++) {
        const tk_dtype_info *i = tk_dtype_get(t);
        if (i) CHECK(tk_dtype_from_name(i->name) == t && i->can_dequant, "type %d", t);
    }

    /* f16: every non-NaN half survives f16 -> f32 -> f16 exactly */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = tk_f16_to_f32((uint16_t)h);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) {
            bad += !isnan(f);
            continue;
        }
        bad += tk_f32_to_f16(f) != h;
    }
    CHECK(bad == 0, "f16 round trip: %d bad", bad);
    CHECK(tk_f16_to_f32(0x3C00) == 1.0f && tk_f16_to_f32(0x0001) == 0x1p-24f &&
              tk_f16_to_f32(0x7BFF) == 65504.0f && tk_f16_to_f32(0xFC00) == -INFINITY,
          "f16 values");
    /* rounding: ties to even, overflow, underflow */
    CHECK(tk_f32_to_f16(1.0f + 0x1p-11f) == 0x3C00, "tie to even (down)");
    CHECK(tk_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3C02, "tie to even (up)");
    CHECK(tk_f32_to_f16(65519.0f) == 0x7BFF && tk_f32_to_f16(65520.0f) == 0x7C00, "overflow edge");
    CHECK(tk_f32_to_f16(0x1p-25f) == 0 && tk_f32_to_f16(0x1.000002p-25f) == 1 &&
              tk_f32_to_f16(3 * 0x1p-25f) == 2,
          "subnormal rounding");
    CHECK(tk_f32_to_f16(-0.0f) == 0x8000 && (tk_f32_to_f16(NAN) & 0x7E00) == 0x7E00, "signed zero, NaN");

    /* bf16: round to nearest even, NaN stays NaN (quiet) */
    CHECK(tk_f32_to_bf16(1.0f) == 0x3F80 && tk_bf16_to_f32(0x3F80) == 1.0f, "bf16 one");
    CHECK(tk_f32_to_bf16(from_bits(0x3F808000)) == 0x3F80, "bf16 tie to even (down)");
    CHECK(tk_f32_to_bf16(from_bits(0x3F818000)) == 0x3F82, "bf16 tie to even (up)");
    CHECK(tk_f32_to_bf16(from_bits(0x3F808001)) == 0x3F81, "bf16 above tie");
    CHECK(tk_f32_to_bf16(from_bits(0x7F800001)) == 0x7FC0, "signalling NaN becomes quiet NaN");
    CHECK(tk_f32_to_bf16(from_bits(0xFFC12345)) == 0xFFC1, "NaN payload/sign kept");
    CHECK(tk_f32_to_bf16(from_bits(0x7F7FFFFF)) == 0x7F80, "max float rounds to inf");
    CHECK(bits(tk_bf16_to_f32(0x8001)) == 0x80010000, "bf16 subnormal exact");

    /* q8_0: scale = amax/127 stored as f16, q = round(x/scale) */
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(i - 20) * 0.03f;
    x[5] = -1.27f; /* block 0 amax */
    tk_block_q8_0 q[2];
    tk_quantize_row_q8_0(x, q, 64);
    CHECK(q[0].d == tk_f32_to_f16(1.27f / 127.0f) && q[0].qs[5] == -127, "q8_0 block 0");
    tk_dequant_row(TK_Q8_0, q, y, 64);
    float maxerr = 0;
    for (int i = 0; i < 64; i++) maxerr = fmaxf(maxerr, fabsf(y[i] - x[i]));
    CHECK(maxerr < 0.0065f, "q8_0 error %g", maxerr);
    float zeros[32] = {0};
    tk_quantize_row_q8_0(zeros, q, 32);
    CHECK(q[0].d == 0 && q[0].qs[0] == 0, "q8_0 zero block");

    /* unaligned source pointers are fine (blocks are copied, not cast) */
    unsigned char raw[1 + sizeof(tk_block_q4_K)];
    for (size_t i = 0; i < sizeof raw; i++) raw[i] = (unsigned char)(i * 37);
    float a[256], b[256];
    tk_block_q4_K blk;
    memcpy(&blk, raw + 1, sizeof blk);
    tk_dequant_row(TK_Q4_K, raw + 1, a, 256);
    tk_dequant_row(TK_Q4_K, &blk, b, 256);
    CHECK(!memcmp(a, b, sizeof a), "unaligned dequant");
    /* precondition violation: NaN, not garbage */
    tk_dequant_row(TK_Q4_0, raw, a, 31);
    CHECK(isnan(a[0]) && isnan(a[30]), "bad n -> NaN");
    TK_TEST_END();
}
