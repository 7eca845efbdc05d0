/* What the SIMD attention kernels share (attention_simd.h, the FP32 tile
 * kernel for any vector width, and attention_amx.c): row loads, the
 * vectorised exp (vec_exp.h), the online-softmax step of one row over a chunk, chunk
 * row pointers and prefetches.  Included after the file defines:
 *
 *   VL                      floats per vector; vf the vector type
 *   vzero vset1 vload vstore vfma vmul vadd vsub vmax vmin vround
 *   vload_f16(const uint16_t *)  VL halves -> floats
 *   vload_i8(const int8_t *)     VL int8 -> floats (Q8_0 rows, load_q8)
 *   h2f(uint16_t)                one half -> float
 *   vhmax vhsum                  horizontal max / sum (a fixed order)
 *   vmask(s, la, lb)             lanes outside [la, lb) -> -inf
 *   vexp_scale2(p, n)            p * 2^n (n integral, in [-126, 127])
 *   vzero_where_lt(y, x, c)      y with lanes where x < c set to 0
 *   transpose(vf r[VL])          in place (used by the FP32 kernel)
 *   ATTN_QUANT_Q8_0               optional: the Q8_0 activation quantizer the
 *                                 kernel uses for Q8_0 KV (default AVX2's)
 */
#ifndef TK_ATTENTION_SIMD_COMMON_H
#define TK_ATTENTION_SIMD_COMMON_H

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../formats/quant_blocks.h"
#include "attention.h"
#include "qgemm_impl.h"
#include "vec_exp.h"

#define CH TK_ATTN_CHUNK
#define RB 8 /* rows per row block (one GQA group of 8, or 8 tokens of MHA) */
#define AI static inline __attribute__((always_inline))

typedef const unsigned char *rowp;

/* Dims [d0, d0 + VL) of an F32 or F16 row as floats (Q8_0 rows: load_q8,
 * with the scale the kernel gathered for the chunk). */
AI vf load_row(rowp row, tk_kv_type type, int d0) {
    if (type == TK_KV_F32) return vload((const float *)(const void *)row + d0);
    return vload_f16((const uint16_t *)(const void *)row + d0);
}

/* Dims [d0, d0 + VL) of a Q8_0 row (inside one block) as int8 * sc, sc the
 * block's scale as a float. */
AI vf load_q8(rowp row, int d0, vf sc) {
    return vmul(vload_i8(((const tk_block_q8_0 *)(const void *)row)[d0 / 32].qs + d0 % 32), sc);
}

/* Starts loading the cache line at p (prefetcht0 on x86, prfm pldl1keep on arm64). */
AI void pf_line(const char *p) { __builtin_prefetch(p, 0, 3); }

static inline float *align16f(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* Starts loading the K and V rows of positions [a, b) into the cache. */
static inline void prefetch_rows(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, int a, int b) {
    for (int p = a; p < b;) {
        int end = (p / kv->block_size + 1) * kv->block_size;
        if (end > b) end = b;
        const char *k = (const char *)tk_kv_k(kv, s, layer, kv_head, p), *v = (const char *)tk_kv_v(kv, s, layer, kv_head, p);
        size_t bytes = (size_t)(end - p) * kv->row_bytes;
        for (size_t o = 0; o < bytes; o += 64) {
            pf_line(k + o);
            pf_line(v + o);
        }
        p = end;
    }
}

/* The lines of the K and V rows of positions [a, b), to be prefetched a
 * few at a time (pf_step) while the current chunk is computed: a burst of
 * more prefetches than the core has line-fill buffers stalls it. */
typedef struct pf_cursor {
    const char *k[CH + 1], *v[CH + 1];
    size_t bytes[CH + 1];
    int n, i;   /* runs; the current one */
    size_t off; /* bytes of run i already issued */
} pf_cursor;

static inline void pf_init(pf_cursor *pf, const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, int a, int b) {
    pf->n = pf->i = 0;
    pf->off = 0;
    for (int p = a; p < b;) {
        int end = (p / kv->block_size + 1) * kv->block_size;
        if (end > b) end = b;
        pf->k[pf->n] = (const char *)tk_kv_k(kv, s, layer, kv_head, p);
        pf->v[pf->n] = (const char *)tk_kv_v(kv, s, layer, kv_head, p);
        pf->bytes[pf->n++] = (size_t)(end - p) * kv->row_bytes;
        p = end;
    }
}

/* Issues the next n K lines and n V lines. */
AI void pf_step(pf_cursor *pf, int n) {
    while (n > 0 && pf->i < pf->n) {
        pf_line(pf->k[pf->i] + pf->off);
        pf_line(pf->v[pf->i] + pf->off);
        n--;
        pf->off += 64;
        if (pf->off >= pf->bytes[pf->i]) {
            /* the run's last line (a run need not start on a line) */
            pf_line(pf->k[pf->i] + pf->bytes[pf->i] - 1);
            pf_line(pf->v[pf->i] + pf->bytes[pf->i] - 1);
            pf->i++;
            pf->off = 0;
        }
    }
}

/* Row pointers of positions [a, b) (chunk lanes a - c0 ...), block by block. */
static inline void chunk_rows(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, int c0, int a, int b,
                       rowp *krow, rowp *vrow) {
    for (int p = a; p < b;) {
        int end = (p / kv->block_size + 1) * kv->block_size;
        if (end > b) end = b;
        rowp k = tk_kv_k(kv, s, layer, kv_head, p), v = tk_kv_v(kv, s, layer, kv_head, p);
        for (int i = p; i < end; i++, k += kv->row_bytes, v += kv->row_bytes) {
            krow[i - c0] = k;
            vrow[i - c0] = v;
        }
        p = end;
    }
}


/* The part of the tile's ranges inside [seg_lo, seg_hi): [*tlo, *thi), empty
 * (tlo >= thi) when no token sees anything there. */
static inline void tile_bounds(const tk_attn_tile *tile, int seg_lo, int seg_hi, int *tlo, int *thi) {
    int a0 = INT_MAX, b0 = INT_MIN;
    for (int t = 0; t < tile->n_tok; t++) {
        int a = tile->lo[t] > seg_lo ? tile->lo[t] : seg_lo, b = tile->hi[t] < seg_hi ? tile->hi[t] : seg_hi;
        if (a >= b) continue;
        if (a < a0) a0 = a;
        if (b > b0) b0 = b;
    }
    *tlo = a0;
    *thi = b0;
}

/* How far the chunk prefetches may reach for a call whose part of the tile
 * ends at thi: the tile's largest hi (positions below it hold K/V). */
static inline int tile_reach(const tk_attn_tile *tile, int thi) {
    int reach = thi;
    for (int t = 0; t < tile->n_tok; t++)
        if (tile->hi[t] > reach) reach = tile->hi[t];
    return reach;
}

/* Row `row` (token row / group) of the tile in the chunk at c0: the lanes
 * [*ra, *rb) it sees (empty when *ra >= *rb). */
AI void row_lanes(const tk_attn_tile *tile, int row, int seg_lo, int seg_hi, int c0, int *ra, int *rb) {
    int t = row / tile->group;
    int a = tile->lo[t], b = tile->hi[t];
    if (a < seg_lo) a = seg_lo;
    if (a < c0) a = c0;
    if (b > seg_hi) b = seg_hi;
    if (b > c0 + CH) b = c0 + CH;
    *ra = a - c0;
    *rb = b - c0;
}

/* The online-softmax step of one row over the chunk's vectors [va, vb):
 * scores sr (already scaled) outside the row's lanes [ra, rb) become -inf,
 * the running max and sum are updated and sr gets exp(s - max) (exactly 0
 * outside [ra, rb)); *alpha is the factor for the row's old accumulator.  A
 * row that sees nothing here gets P = 0 and alpha = 1.  Everything depends
 * on the row and the absolute chunk only. */
AI void softmax_row(float *sr, int va, int vb, int ra, int rb, float *mx, float *sum, float *alpha) {
    if (ra >= rb) {
        for (int j = va; j < vb; j++) vstore(sr + j * VL, vzero());
        *alpha = 1.0f;
        return;
    }
    vf vmx = vset1(-INFINITY);
    for (int j = va; j < vb; j++) {
        vf x = vmask(vload(sr + j * VL), ra - j * VL, rb - j * VL);
        vstore(sr + j * VL, x);
        vmx = vmax(vmx, x);
    }
    float mc = vhmax(vmx), mold = *mx, mnew = mc > mold ? mc : mold;
    *alpha = mnew > mold ? expf(mold - mnew) : 1.0f;
    vf vm = vset1(mnew), ps = vzero();
    for (int j = va; j < vb; j++) {
        vf p = vexp(vsub(vload(sr + j * VL), vm));
        vstore(sr + j * VL, p);
        ps = vadd(ps, p);
    }
    *sum = *sum * *alpha + vhsum(ps);
    *mx = mnew;
}

#endif
