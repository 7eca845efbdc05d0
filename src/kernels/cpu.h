/* CPU feature detection and the instruction-set level the kernels may use.
 *
 * Nothing here keeps global state: tk_cpu_features() reads cpuid/xgetbv (or
 * the auxiliary vector on arm64) on every call, which costs well under a
 * microsecond; callers that need the answer often store it themselves. */
#ifndef TK_CPU_H
#define TK_CPU_H

#include <stdbool.h>
#include <stddef.h>

/* Kernel levels.  On x86-64 they are ordered: SCALAR < AVX2 < AVX512 < AMX,
 * and a level implies every lower one.  NEON is the arm64 level (above
 * SCALAR); it never coexists with the x86 levels. */
typedef enum tk_isa {
    TK_ISA_SCALAR = 0,
    TK_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    TK_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/DQ + AVX512-VNNI (Ice Lake, Zen 4 and later) */
    TK_ISA_NEON = 3,   /* arm64 Advanced SIMD (+ dotprod when present) */
    TK_ISA_AMX = 4,    /* AVX512 + AMX-TILE/INT8/BF16 + AVX512-BF16 (Sapphire Rapids and later),
                          with the kernel's permission to use tile data (Linux arch_prctl) */
    TK_ISA_COUNT
} tk_isa;

typedef struct tk_cpu_features {
    /* x86-64: each flag is set only when the OS also saves the register
     * state (xgetbv), i.e. when the instructions may actually be used. */
    bool avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq;
    bool avx512vnni, avx512bf16, avxvnni;
    /* AMX: tile registers usable (CPU bits, XCR0 tile state and, on Linux,
     * the process's permission, which tk_cpu_features_get requests) */
    bool amx_tile, amx_int8, amx_bf16;
    /* arm64 */
    bool neon, dotprod;
} tk_cpu_features;

tk_cpu_features tk_cpu_features_get(void);

/* True if this CPU can run kernels of the given level. */
bool tk_isa_supported(tk_isa isa);

/* True if `isa` is one of the x86 levels (each includes AVX2) and this CPU
 * runs AVX2: the test for kernels that have an AVX2 version only. */
bool tk_isa_uses_avx2(tk_isa isa);

/* The best level this CPU supports, lowered by the environment variable
 * TK_ISA=scalar|avx2|avx512|amx|neon if set.  A request above what the CPU has
 * (or for another architecture) is ignored in favour of the best available;
 * an unknown value is ignored. */
tk_isa tk_cpu_isa(void);

/* `best` lowered by the level named in the environment variable `var` if it
 * is set, supported and not above best (TK_ATTN_ISA lowers the attention
 * kernels alone, for measurements). */
tk_isa tk_cpu_isa_env(const char *var, tk_isa best);

/* The best level the CPU supports, ignoring TK_ISA. */
tk_isa tk_cpu_best_isa(void);

/* True if the AVX2 kernels may take their AVX-VNNI forms (the same bits,
 * kernels/qgemm_avxvnni.c): the CPU and OS have AVX-VNNI and the environment
 * does not say TK_AVXVNNI=0 (for side-by-side runs with builds that leave it
 * out, as llama.cpp's AVX2 builds do unless asked). */
bool tk_cpu_avxvnni(void);

/* This CPU in words for benchmark reports, at most n - 1 characters and a
 * NUL in out (nothing when n is 0): on x86 the brand string with the
 * family and model numbers ("AMD EPYC (family 26, model 2)"); on arm64 the
 * implementer and part from MIDR_EL1 where Linux shows it; else the
 * architecture alone. */
void tk_cpu_describe(char *out, size_t n);

/* "scalar", "avx2", "avx512", "neon", "amx". */
const char *tk_isa_name(tk_isa isa);
/* Inverse of tk_isa_name (case-insensitive); -1 if unknown. */
int tk_isa_from_name(const char *name);

#endif
