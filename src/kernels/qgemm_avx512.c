#include "qgemm_impl.h"

const tk_qkernel *tk_qk_avx512(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}
