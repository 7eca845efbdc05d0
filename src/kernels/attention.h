/* Paged attention with online softmax (FlashAttention-style).  Scores are
 * computed one KV block at a time; a running max, a running sum and a
 * rescaled accumulator per query head replace the score matrix, so memory
 * is O(block) whatever the context.  The query heads that share one KV head
 * (GQA/MQA) are processed together, so each K/V block is read once per
 * group.  A position range can be processed in pieces (by different threads)
 * and the partial states merged: flash-decoding for long contexts. */
#ifndef TK_ATTENTION_H
#define TK_ATTENTION_H

#include <stddef.h>

#include "../kv/kv.h"

/* Starts an empty state for `group` heads of head_dim hd. */
void tk_attn_init(int group, int hd, float *acc, float *mx, float *sum);

/* Folds positions [lo, hi) of the sequence (layer, kv_head) into the state.
 * q holds the group's query vectors, one after the other.  scratch must hold
 * tk_attn_scratch_floats(kv, group) floats. */
void tk_attn_range(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const float *q, int group,
                   float scale, int lo, int hi, float *acc, float *mx, float *sum, float *scratch);
size_t tk_attn_scratch_floats(const tk_kv_pool *kv, int group);

/* state a = merge(a, b): the softmax over the union of both ranges. */
void tk_attn_merge(int group, int hd, float *acc, float *mx, float *sum, const float *acc_b, const float *mx_b,
                   const float *sum_b);

/* out (group x hd) = acc / sum. */
void tk_attn_output(int group, int hd, const float *acc, const float *sum, float *out);

#endif
