#include "nf4_dot.h"
#include "qgemm_impl.h"

/* The project's NormalFloat-4 types (src/kernels/nf4_dot.c): table-lookup
 * kernels against Q8_0-packed activations, scalar or AVX2. */
static const tk_qkernel nf4_kernels[2][2] = {
    {{TK_NF4, TK_Q8_0, TK_ISA_SCALAR, "NF4/scalar", tk_nf4_act_row_bytes, tk_nf4_quantize_act, tk_nf4_gemm_scalar},
     {TK_NF4_DQ, TK_Q8_0, TK_ISA_SCALAR, "NF4_DQ/scalar", tk_nf4_act_row_bytes, tk_nf4_quantize_act,
      tk_nf4dq_gemm_scalar}},
    {{TK_NF4, TK_Q8_0, TK_ISA_AVX2, "NF4/avx2", tk_nf4_act_row_bytes, tk_nf4_quantize_act, tk_nf4_gemm_avx2},
     {TK_NF4_DQ, TK_Q8_0, TK_ISA_AVX2, "NF4_DQ/avx2", tk_nf4_act_row_bytes, tk_nf4_quantize_act,
      tk_nf4dq_gemm_avx2}},
};

const tk_qkernel *tk_qkernel_get(tk_dtype wtype, tk_isa isa) {
    if (!tk_isa_supported(isa)) return NULL;
    if (wtype == TK_NF4 || wtype == TK_NF4_DQ) {
        int simd = (isa == TK_ISA_AVX2 || isa == TK_ISA_AVX512) && tk_nf4_have_avx2();
        return &nf4_kernels[simd][wtype == TK_NF4_DQ];
    }
    const tk_qkernel *k = NULL;
    switch (isa) {
    case TK_ISA_AVX512:
        k = tk_qk_avx512(wtype);
        if (k) return k;
        __attribute__((fallthrough)); /* AVX-512 CPUs run the AVX2 kernels */
    case TK_ISA_AVX2:
        k = tk_qk_avx2(wtype);
        if (k) return k;
        break;
    default:
        break;
    }
    return tk_qk_scalar(wtype);
}
