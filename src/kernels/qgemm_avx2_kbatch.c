/* The AVX2 k-quant panel passes of more than 4 tokens (prefill, several
 * sequences decoding, an expert's tokens) built apart, with GCC's
 * register-pressure-aware scheduling before register allocation
 * (-fschedule-insns -fsched-pressure, CMakeLists.txt): their token loops keep
 * 8-16 code vectors live, and the default order spilled some of them.
 * bench_qgemm, 16 tokens, one thread: Q4_K +7 %, Q5_K +6 %, Q6_K +8 %.  The
 * same flags slowed the one-token passes (Q4_K cache-hot 44 -> 33 GB/s), which
 * stay in qgemm_avx2.c's plain build.  The same source: the same bits. */
#define TK_QGEMM_KBATCH 1
#include "qgemm_avx2.c"
