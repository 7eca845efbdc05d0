/* Lower bounds for bench_attn's prefill call (attn_floor.c): prints the time
 * of the kernels' online-softmax step alone and of the AMX tile products
 * alone for n_tok tokens (token t sees positions [0, hi[t])), group query
 * rows per KV head, n_kv KV heads, head_dim hd; best of reps.  Returns -1
 * (nothing printed) where the build or the CPU has no AVX-512. */
#ifndef TK_BENCH_ATTN_FLOOR_H
#define TK_BENCH_ATTN_FLOOR_H

int tk_bench_attn_floor(int n_tok, int group, int n_kv, int hd, const int *hi, int reps);

#endif
