/* On-disk block layouts of GGML's quantized types, as stored in GGUF files.
 *
 * Every field is a byte array or a 16-bit value placed at an even offset, so
 * the natural C layout has no padding and matches the file byte for byte; the
 * static asserts below pin that down.  Half-precision scales are kept as raw
 * uint16_t bits (convert with tk_f16_to_f32).  Multi-byte fields are
 * little-endian, like the host this engine targets.
 *
 * Data coming from a file may be arbitrarily aligned, so readers copy a block
 * into a local variable (memcpy) instead of casting the source pointer. */
#ifndef TK_QUANT_BLOCKS_H
#define TK_QUANT_BLOCKS_H

#include <stdint.h>

#define TK_QK4_0 32
#define TK_QK4_1 32
#define TK_QK5_0 32
#define TK_QK5_1 32
#define TK_QK8_0 32
#define TK_QK8_1 32
#define TK_QK4_NL 32
#define TK_QK_K 256 /* super-block size of the k-quants and IQ4_XS */
#define TK_K_SCALE_SIZE 12

/* y = d * (q - 8) */
typedef struct tk_block_q4_0 {
    uint16_t d;
    uint8_t qs[TK_QK4_0 / 2]; /* low nibbles: elements 0..15, high: 16..31 */
} tk_block_q4_0;

/* y = d * q + m */
typedef struct tk_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[TK_QK4_1 / 2];
} tk_block_q4_1;

/* y = d * (q - 16), q has a fifth bit stored in qh */
typedef struct tk_block_q5_0 {
    uint16_t d;
    uint8_t qh[4]; /* bit j: high bit of element j (32 bits, little-endian) */
    uint8_t qs[TK_QK5_0 / 2];
} tk_block_q5_0;

/* y = d * q + m */
typedef struct tk_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[TK_QK5_1 / 2];
} tk_block_q5_1;

/* y = d * q */
typedef struct tk_block_q8_0 {
    uint16_t d;
    int8_t qs[TK_QK8_0];
} tk_block_q8_0;

/* Q8_0 plus s = d * sum(qs), used for dot products against Q4_1/Q5_1. */
typedef struct tk_block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[TK_QK8_1];
} tk_block_q8_1;

/* 16 sub-blocks of 16; 4-bit scale and 4-bit min per sub-block. */
typedef struct tk_block_q2_K {
    uint8_t scales[TK_QK_K / 16]; /* low nibble: scale, high nibble: min */
    uint8_t qs[TK_QK_K / 4];      /* 2-bit quants */
    uint16_t d;                   /* super-block scale of the scales */
    uint16_t dmin;                /* super-block scale of the mins */
} tk_block_q2_K;

/* 16 sub-blocks of 16; signed 6-bit scales packed into 12 bytes. */
typedef struct tk_block_q3_K {
    uint8_t hmask[TK_QK_K / 8]; /* high (third) bit of each quant */
    uint8_t qs[TK_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];
    uint16_t d;
} tk_block_q3_K;

/* 8 sub-blocks of 32; 6-bit scale and min per sub-block, packed in 12 bytes. */
typedef struct tk_block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[TK_K_SCALE_SIZE];
    uint8_t qs[TK_QK_K / 2];
} tk_block_q4_K;

typedef struct tk_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[TK_K_SCALE_SIZE];
    uint8_t qh[TK_QK_K / 8]; /* fifth bit */
    uint8_t qs[TK_QK_K / 2]; /* low 4 bits */
} tk_block_q5_K;

/* 16 sub-blocks of 16; signed 8-bit scales. */
typedef struct tk_block_q6_K {
    uint8_t ql[TK_QK_K / 2]; /* low 4 bits */
    uint8_t qh[TK_QK_K / 4]; /* high 2 bits */
    int8_t scales[TK_QK_K / 16];
    uint16_t d;
} tk_block_q6_K;

/* Activation format of the k-quant dot products: float scale, int8 quants
 * and per-16 sums. */
typedef struct tk_block_q8_K {
    float d;
    int8_t qs[TK_QK_K];
    int16_t bsums[TK_QK_K / 16];
} tk_block_q8_K;

/* y = d * kvalues[q]: 4-bit indices into a non-linear table. */
typedef struct tk_block_iq4_nl {
    uint16_t d;
    uint8_t qs[TK_QK4_NL / 2];
} tk_block_iq4_nl;

/* IQ4_NL over 8 sub-blocks of 32 with 6-bit sub-block scales. */
typedef struct tk_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;            /* 2 high bits per sub-block scale */
    uint8_t scales_l[TK_QK_K / 64]; /* 4 low bits per sub-block scale */
    uint8_t qs[TK_QK_K / 2];
} tk_block_iq4_xs;

/* The non-linear IQ4 code book. */
static const int8_t tk_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* NormalFloat-4 (QLoRA, Dettmers et al. 2023, appendix E): quantiles of
 * N(0, 1) normalised to [-1, 1] with an exact zero; 7 negative and 8
 * positive levels.  The project-specific types TK_NF4 / TK_NF4_DQ store
 * 4-bit indices into this table (layout in dtype.h and docs/formats.md). */
static const float tk_nf4_values[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};
#define TK_NF4_BLOCK 64      /* elements per absmax block */
#define TK_NF4_DQ_GROUP 256  /* absmax values per second-level (scale, min) pair */

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed
 * bytes.  Sub-blocks 0..3 keep theirs in the low 6 bits of bytes j and j+4;
 * sub-blocks 4..7 put the low 4 bits in byte j+4 and borrow the top 2 bits of
 * bytes j-4 (scale) and j (min). */
static inline void tk_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

_Static_assert(sizeof(tk_block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(tk_block_q4_1) == 20, "block_q4_1 layout");
_Static_assert(sizeof(tk_block_q5_0) == 22, "block_q5_0 layout");
_Static_assert(sizeof(tk_block_q5_1) == 24, "block_q5_1 layout");
_Static_assert(sizeof(tk_block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(tk_block_q8_1) == 36, "block_q8_1 layout");
_Static_assert(sizeof(tk_block_q2_K) == 84, "block_q2_K layout");
_Static_assert(sizeof(tk_block_q3_K) == 110, "block_q3_K layout");
_Static_assert(sizeof(tk_block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(tk_block_q5_K) == 176, "block_q5_K layout");
_Static_assert(sizeof(tk_block_q6_K) == 210, "block_q6_K layout");
_Static_assert(sizeof(tk_block_q8_K) == 292, "block_q8_K layout");
_Static_assert(sizeof(tk_block_iq4_nl) == 18, "block_iq4_nl layout");
_Static_assert(sizeof(tk_block_iq4_xs) == 136, "block_iq4_xs layout");

#endif
