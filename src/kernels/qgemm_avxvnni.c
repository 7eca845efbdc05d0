/* The AVX2 kernels once more, built with AVX-VNNI (Intel from Alder Lake
 * and Sapphire Rapids, AMD from Zen 5): the 8-row panel kernels of the
 * 32-element types then take vpdpbusd for their integer dots (qgemm_avx2.c,
 * idotk).  tk_qkernel_get picks them on CPUs with AVX-VNNI unless
 * TK_AVXVNNI=0. */
#define TK_AVXVNNI 1
#include "qgemm_avx2.c"
