/* The attention tile kernel on AVX-512F, 16 floats per vector (compiled
 * with those flags only; reached through tk_attn_tile_range after a CPU
 * check).  The kernel itself is src/kernels/attention_simd.h. */
#include <math.h>
#include <stdbool.h>

#include "attention.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#define FN(name) name##_avx512
#define QK_MR 4
#define QK_NR 4
#define PV_MR 8
#define PV_NV 2
#define QK8_MR 4
#define QK8_NR 2

#include "attention_avx512_ops.h"

#include "attention_simd.h"

#else /* not built with AVX-512 */

int tk_attn_tile_avx512(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                        float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch) {
    (void)kv, (void)s, (void)layer, (void)kv_head, (void)tile, (void)scale, (void)seg_lo, (void)seg_hi;
    (void)acc, (void)mx, (void)sum, (void)scratch;
    return -1;
}

#endif
