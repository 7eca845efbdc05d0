/* xoshiro256** seeded through splitmix64: small, fast, reproducible random
 * numbers (the sampler and the synthetic-model generator share it). */
#ifndef TK_RNG_H
#define TK_RNG_H

#include <stdint.h>

static inline void tk_rng_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        s[i] = z ^ (z >> 31);
    }
}

static inline uint64_t tk_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t tk_rng_next(uint64_t s[4]) {
    uint64_t result = tk_rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = tk_rng_rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1). */
static inline double tk_rng_uniform(uint64_t s[4]) { return (double)(tk_rng_next(s) >> 11) * 0x1.0p-53; }

#endif
