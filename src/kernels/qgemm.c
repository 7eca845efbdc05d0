#include "qgemm_impl.h"

const tk_qkernel *tk_qkernel_get(tk_dtype wtype, tk_isa isa) {
    if (!tk_isa_supported(isa)) return NULL;
    const tk_qkernel *k = NULL;
    switch (isa) {
    case TK_ISA_AMX:
        k = tk_qkernel_amx(wtype);
        if (k) return k;
        __attribute__((fallthrough)); /* other types: the AVX-512 kernels */
    case TK_ISA_AVX512:
        k = tk_qkernel_avx512(wtype);
        if (k) return k;
        __attribute__((fallthrough)); /* AVX-512 CPUs run the AVX2 kernels */
    case TK_ISA_AVX2:
        if (tk_cpu_avxvnni()) k = tk_qkernel_avxvnni(wtype);
        if (!k) k = tk_qkernel_avx2(wtype);
        if (k) return k;
        break;
    case TK_ISA_NEON:
        k = tk_qkernel_neon(wtype);
        if (k) return k;
        break;
    default:
        break;
    }
    return tk_qkernel_scalar(wtype);
}
