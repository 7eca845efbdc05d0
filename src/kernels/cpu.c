#include "cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TK_X86 1
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__)
#define TK_ARM64 1
#if defined(__linux__)
#include <sys/auxv.h>
#endif
#endif

#ifdef TK_X86
static unsigned long long read_xcr0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

/* Linux keeps AMX tile data off until a process asks for it; asking again
 * once granted is a cheap no-op.  Other systems: assume XCR0 is the word. */
static bool amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return true;
#endif
}
#endif

tk_cpu_features tk_cpu_features_get(void) {
    tk_cpu_features f = {0};
#ifdef TK_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
    const unsigned max_leaf = a;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = c & (1u << 27);
    const bool cpu_avx = c & (1u << 28);
    const bool cpu_fma = c & (1u << 12);
    const bool cpu_f16c = c & (1u << 29);
    if (!osxsave || !cpu_avx) return f;
    const unsigned long long xcr0 = read_xcr0();
    const bool os_ymm = (xcr0 & 0x6) == 0x6;          /* SSE + AVX state */
    const bool os_zmm = os_ymm && (xcr0 & 0xE0) == 0xE0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (!os_ymm) return f;
    f.avx = true;
    f.fma = cpu_fma;
    f.f16c = cpu_f16c;
    if (max_leaf < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned l7b = b, l7c = c, l7d = d;
    __cpuid_count(7, 1, a, b, c, d);
    const unsigned l71a = a;
    f.avx2 = l7b & (1u << 5);
    f.avxvnni = l71a & (1u << 4);
    if (os_zmm) {
        f.avx512f = l7b & (1u << 16);
        f.avx512dq = l7b & (1u << 17);
        f.avx512bw = l7b & (1u << 30);
        f.avx512vl = l7b & (1u << 31);
        f.avx512vnni = l7c & (1u << 11);
        f.avx512bf16 = l71a & (1u << 5);
    }
    const bool os_tiles = (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
    if (os_zmm && os_tiles && (l7d & (1u << 24)) && amx_permitted()) {
        f.amx_tile = true;
        f.amx_int8 = l7d & (1u << 25);
        f.amx_bf16 = l7d & (1u << 22);
    }
#elif defined(TK_ARM64)
    f.neon = true; /* Advanced SIMD is mandatory on AArch64 */
#if defined(__linux__)
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
    f.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    f.dotprod = true; /* every Apple arm64 core has it */
#endif
#endif
    return f;
}

static bool supported(const tk_cpu_features *f, tk_isa isa) {
    switch (isa) {
    case TK_ISA_SCALAR: return true;
    case TK_ISA_AVX2: return f->avx2 && f->fma && f->f16c;
    case TK_ISA_AVX512:
        return supported(f, TK_ISA_AVX2) && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq &&
               f->avx512vnni;
    case TK_ISA_AMX:
        return supported(f, TK_ISA_AVX512) && f->avx512bf16 && f->amx_tile && f->amx_int8 && f->amx_bf16;
    case TK_ISA_NEON: return f->neon;
    default: return false;
    }
}

bool tk_isa_supported(tk_isa isa) {
    const tk_cpu_features f = tk_cpu_features_get();
    return supported(&f, isa);
}

bool tk_isa_uses_avx2(tk_isa isa) {
    return (isa == TK_ISA_AVX2 || isa == TK_ISA_AVX512 || isa == TK_ISA_AMX) && tk_isa_supported(TK_ISA_AVX2);
}

static tk_isa best_of(const tk_cpu_features *f) {
    if (supported(f, TK_ISA_AMX)) return TK_ISA_AMX;
    if (supported(f, TK_ISA_AVX512)) return TK_ISA_AVX512;
    if (supported(f, TK_ISA_AVX2)) return TK_ISA_AVX2;
    if (supported(f, TK_ISA_NEON)) return TK_ISA_NEON;
    return TK_ISA_SCALAR;
}

tk_isa tk_cpu_best_isa(void) {
    const tk_cpu_features f = tk_cpu_features_get();
    return best_of(&f);
}

tk_isa tk_cpu_isa_env(const char *var, tk_isa best) {
    const tk_cpu_features f = tk_cpu_features_get();
    const char *env = getenv(var);
    if (!env || !*env) return best;
    const int want = tk_isa_from_name(env);
    /* Only lower: on x86 the supported levels nest, so a supported request
     * at or below best is honoured; NEON and the x86 levels never coexist. */
    if (want < 0 || !supported(&f, (tk_isa)want) || want > (int)best) return best;
    return (tk_isa)want;
}

tk_isa tk_cpu_isa(void) { return tk_cpu_isa_env("TK_ISA", tk_cpu_best_isa()); }

bool tk_cpu_avxvnni(void) {
    const char *env = getenv("TK_AVXVNNI");
    return tk_cpu_features_get().avxvnni && !(env && !strcmp(env, "0"));
}

static const char *const isa_names[TK_ISA_COUNT] = {"scalar", "avx2", "avx512", "neon", "amx"};

#ifdef TK_X86
/* The 48-byte brand string of cpuid leaves 0x80000002-4, spaces trimmed and
 * runs of them collapsed (Intel pads it), anything but printable ASCII or
 * a quote or backslash (it goes into JSON reports) as '?'; empty if the CPU
 * has none. */
static void brand_string(char out[49]) {
    unsigned r[12] = {0}, a, b, c, d;
    out[0] = 0;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000004u) return;
    for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char raw[49];
    memcpy(raw, r, 48);
    raw[48] = 0;
    size_t k = 0;
    for (const char *p = raw; *p; p++) {
        const char ch = *p < ' ' || *p > '~' || *p == '"' || *p == '\\' ? '?' : *p;
        if (ch != ' ' || (k > 0 && out[k - 1] != ' ')) out[k++] = ch;
    }
    while (k > 0 && out[k - 1] == ' ') k--;
    out[k] = 0;
}
#endif

void tk_cpu_describe(char *out, size_t n) {
    if (n == 0) return;
#ifdef TK_X86
    char brand[49];
    brand_string(brand);
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) {
        snprintf(out, n, "%s", brand[0] ? brand : "x86-64");
        return;
    }
    /* the displayed family and model: extended fields added as the vendors define */
    const unsigned family = (a >> 8) & 0xF, model = (a >> 4) & 0xF;
    const unsigned shown_family = family == 0xF ? family + ((a >> 20) & 0xFF) : family;
    const unsigned shown_model = family == 0x6 || family == 0xF ? model | ((a >> 16) & 0xF) << 4 : model;
    snprintf(out, n, "%s (family %u, model %u)", brand[0] ? brand : "x86-64", shown_family, shown_model);
#elif defined(TK_ARM64)
    unsigned long long midr = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1", "r");
    const bool have = f && fscanf(f, "%llx", &midr) == 1;
    if (f) fclose(f);
    if (have)
        snprintf(out, n, "arm64 (implementer 0x%02llx, part 0x%03llx)", (midr >> 24) & 0xFF, (midr >> 4) & 0xFFF);
    else
        snprintf(out, n, "arm64");
#else
    snprintf(out, n, "unknown CPU");
#endif
}

const char *tk_isa_name(tk_isa isa) {
    return (unsigned)isa < TK_ISA_COUNT ? isa_names[isa] : "?";
}

int tk_isa_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TK_ISA_COUNT; i++)
        if (!strcasecmp(name, isa_names[i])) return i;
    return -1;
}
