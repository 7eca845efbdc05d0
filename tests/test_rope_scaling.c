/* Llama 3.1 RoPE frequency scaling (tk_llama3_rope_factors, the per-frequency
 * divisors convert writes as rope_freqs.weight) against values derived by
 * hand.
 *
 * head_dim 16, theta 500: frequency i is 500^(-i/8), its wavelength
 * 2*pi*500^(i/8) = 6.283, 13.663, 29.711, 64.609, ...  With
 * original_max_position_embeddings 32, low_freq_factor 1, high_freq_factor 4
 * the thresholds are 32/1 = 32 and 32/4 = 8: wavelength 6.283 < 8 keeps its
 * frequency (divisor 1), wavelengths above 32 are slowed by factor 8, and the
 * two in between interpolate with smooth = (32/wavelength - 1) / (4 - 1):
 *   i = 1: smooth = (32/13.6632 - 1)/3 = 0.447329, divisor 1/((1-s)/8 + s) = 1.936350
 *   i = 2: smooth = (32/29.7113 - 1)/3 = 0.025677, divisor 6.781181 */
#include <math.h>
#include <stdlib.h>

#include "formats/llama_gguf.h"
#include "tk_test.h"

int main(void) {
    tk_hparams hp = {0};
    hp.head_dim = 16;
    hp.rope_theta = 500.0f;
    hp.rope_scaling = TK_ROPE_SCALING_LLAMA3;
    hp.rope_factor = 8.0f;
    hp.rope_low_freq_factor = 1.0f;
    hp.rope_high_freq_factor = 4.0f;
    hp.rope_orig_ctx = 32;
    float *f = tk_llama3_rope_factors(&hp);
    CHECK(f != NULL, "out of memory");
    if (!f) TK_TEST_END();
    static const double want[8] = {1.0, 1.936350, 6.781181, 8, 8, 8, 8, 8};
    for (int i = 0; i < 8; i++) CHECK(fabs(f[i] - want[i]) < 1e-5, "divisor %d = %.7f, want %.6f", i, f[i], want[i]);
    free(f);
    TK_TEST_END();
}
