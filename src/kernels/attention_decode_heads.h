/* The one-token (decode) attention kernel with the query heads of a GQA
 * group in the vector lanes: included by attention_avx2.c after
 * attention_simd.h, whose tile kernel it replaces for tiles of one token
 * (F32 and F16 KV, 5 <= group <= VL).  It gives the tile kernel's bits, so a
 * token decodes to the same output it gets in a prefill tile (test_attention:
 * "a token alone", test_batch).  Needs, besides attention_simd.h's interface:
 *
 *   vhsum_lanes(part)   lane-wise, the sums vhsum forms: lane l of the
 *                       result is vhsum of the vector (part[0][l], ...,
 *                       part[VL-1][l]), in vhsum's order
 *
 * Why: in the tile kernel a decode tile's K chunk is converted and transposed
 * (kt[d][pos], ~24 shuffles per position) and each of the 8 rows gets its own
 * masked max / exp / sum passes over the chunk.  Here a score vector holds
 * the group's heads for one position:
 *
 *   S[i] = scale * fma chain over d of qt[d] * k_i[d]    (qt[d]: the heads'
 *                                                         query element d)
 *
 * which is, lane by lane, the tile kernel's chain fma(q_g[d], k_i[d], acc)
 * in the same order: K rows are only converted (F16) into float rows and
 * their elements broadcast, no transpose.  The softmax runs down the chunk
 * on whole vectors (a lane is a head): the max is exact, the exps are the
 * same vexp per lane, and the sums are kept in VL partial vectors by
 * position lane (i % VL), the tile kernel's vector accumulator, reduced with
 * vhsum's tree.  P·V is the tile kernel's pv_block reading P with stride VL. */

/* The scores of NP consecutive positions (rows kr[0..NP)) as heads vectors
 * S[0..NP), folded into the running max *vmx.  F16 rows are converted into
 * kconv first (NP rows of hd floats), so each element is broadcast from a
 * float. */
AI void dh_scores(const int NP, tk_kv_type type, rowp const *kr, float *kconv, const float *qt, int hd, float scale,
                  float *S, vf *vmx) {
    const float *kf[VL];
    _Pragma("GCC unroll 8") for (int n = 0; n < NP; n++) {
        if (type == TK_KV_F32) {
            kf[n] = (const float *)(const void *)kr[n];
            continue;
        }
        float *dst = kconv + (size_t)n * hd;
        for (int d0 = 0; d0 < hd; d0 += VL) vstore(dst + d0, load_row(kr[n], TK_KV_F16, d0));
        kf[n] = dst;
    }
    vf acc[VL];
    _Pragma("GCC unroll 8") for (int n = 0; n < NP; n++) acc[n] = vzero();
    for (int d = 0; d < hd; d++) {
        const vf q = vkeep(vload(qt + (size_t)d * VL));
        _Pragma("GCC unroll 8") for (int n = 0; n < NP; n++) acc[n] = vfma(q, vset1(kf[n][d]), acc[n]);
    }
    const vf sc = vset1(scale);
    _Pragma("GCC unroll 8") for (int n = 0; n < NP; n++) {
        const vf x = vmul(acc[n], sc);
        vstore(S + (size_t)n * VL, x);
        *vmx = vmax(*vmx, x);
    }
}

/* dh_scores of VL positions, out of line: its FMA loop keeps its VL row
 * pointers in registers only when the rest of the kernel (the softmax, the
 * P·V passes) is not around it; inlined it spilled some of them, GQA 8
 * 3-9 % slower (bench_attn). */
static __attribute__((noinline)) vf dh_scores_vl(tk_kv_type type, rowp const *kr, float *kconv, const float *qt,
                                                 int hd, float scale, float *S, vf vmx) {
    if (type == TK_KV_F32) dh_scores(VL, TK_KV_F32, kr, kconv, qt, hd, scale, S, &vmx);
    else dh_scores(VL, TK_KV_F16, kr, kconv, qt, hd, scale, S, &vmx);
    return vmx;
}

/* Position i's exps (in place) added to its lane's partial sum part. */
AI void dh_exp(float *S, int i, vf vm, vf *part) {
    const vf p = vexp(vsub(vload(S + (size_t)i * VL), vm));
    vstore(S + (size_t)i * VL, p);
    *part = vadd(*part, p);
}

/* The online-softmax step of the chunk's positions [ra, rb) (S[i] at
 * S + i * VL, already scaled, their max vmx; exps written in place) for the
 * group's `group` heads: softmax_row's arithmetic, lane by lane. */
AI void dh_softmax(float *S, int ra, int rb, vf vmx, int group, float *mx, float *sum, float *alpha) {
    float mc[VL], mn[VL] = {0};
    vstore(mc, vmx);
    for (int g = 0; g < group; g++) {
        float mold = mx[g], mnew = mc[g] > mold ? mc[g] : mold;
        alpha[g] = mnew > mold ? expf(mold - mnew) : 1.0f;
        mn[g] = mnew;
    }
    const vf vm = vload(mn);
    vf part[VL];
    _Pragma("GCC unroll 16") for (int l = 0; l < VL; l++) part[l] = vzero();
    /* positions lane by lane, in the tile kernel's vector order */
    int i = ra;
    for (; i < rb && i % VL; i++) dh_exp(S, i, vm, &part[i % VL]);
    for (; i + VL <= rb; i += VL) _Pragma("GCC unroll 16") for (int l = 0; l < VL; l++) dh_exp(S, i + l, vm, &part[l]);
    for (; i < rb; i++) dh_exp(S, i, vm, &part[i % VL]);
    float h[VL];
    vstore(h, vhsum_lanes(part));
    for (int g = 0; g < group; g++) {
        sum[g] = sum[g] * alpha[g] + h[g];
        mx[g] = mn[g];
    }
}

/* One chunk's positions [ra, rb) (rows krow, vrow; lanes of the chunk):
 * scores, the online-softmax step, P·V. */
AI void dh_chunk(tk_kv_type type, rowp const *krow, rowp const *vrow, int ra, int rb, float *kconv, const float *qt,
                 int hd, int group, float scale, float *S, const float *const *prow, float *const *arow, float *mx,
                 float *sum, pf_cursor *pf) {
    vf vmx = vset1(-INFINITY);
    int i = ra;
    for (; i + VL <= rb; i += VL) vmx = dh_scores_vl(type, krow + i, kconv, qt, hd, scale, S + (size_t)i * VL, vmx);
    for (; i < rb; i++) dh_scores(1, type, krow + i, kconv, qt, hd, scale, S + (size_t)i * VL, &vmx);
    pf_step(pf, 8);
    float alpha[VL];
    dh_softmax(S, ra, rb, vmx, group, mx, sum, alpha);
    pf_step(pf, 8);
    pv_rows_t(type, group, vrow, NULL, prow, VL, ra, rb, hd, arow, alpha, pf);
}

static int FN(tk_attn_decode)(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head,
                              const tk_attn_tile *tile, float scale, int seg_lo, int seg_hi, float *acc, float *mx,
                              float *sum, float *scratch) {
    const int hd = kv->head_dim, group = tile->group;
    /* groups below 5 would leave half the lanes or more empty (not measured;
     * they keep the tile kernel) */
    if (tile->n_tok != 1 || group < 5 || group > VL || kv->type == TK_KV_Q8_0 || hd % VL || hd > 1024) return -1;
    const int lo = tile->lo[0] > seg_lo ? tile->lo[0] : seg_lo, hi = tile->hi[0] < seg_hi ? tile->hi[0] : seg_hi;
    if (lo >= hi) return 0;
    /* scratch (see tk_attn_tile_scratch_floats): VL converted K rows in
     * kt's place, then the transposed query, then the chunk's score vectors
     * (CH x VL floats; they fit in the tile kernel's space for `group` rows) */
    float *kconv = align16f(scratch), *qt = align16f(kconv + (size_t)hd * CH), *S = align16f(qt + (size_t)hd * VL);
    for (int d = 0; d < hd; d++)
        for (int g = 0; g < VL; g++) qt[(size_t)d * VL + g] = g < group ? tile->q[(size_t)g * hd + d] : 0.0f;
    const int next_hi = tile_reach(tile, hi);
    rowp krow[CH], vrow[CH];
    const float *prow[VL];
    float *arow[VL];
    for (int g = 0; g < group; g++) {
        prow[g] = S + g;
        arow[g] = acc + (size_t)g * hd;
    }
    pf_cursor pf;
    for (int c0 = lo / CH * CH; c0 < hi; c0 += CH) {
        const int da = c0 > lo ? c0 : lo, db = c0 + CH < hi ? c0 + CH : hi, ra = da - c0, rb = db - c0;
        chunk_rows(kv, s, layer, kv_head, c0, da, db, krow, vrow);
        pf_init(&pf, kv, s, layer, kv_head, db, db + CH < next_hi ? db + CH : next_hi);
        pf_step(&pf, 8);
        if (kv->type == TK_KV_F32)
            dh_chunk(TK_KV_F32, krow, vrow, ra, rb, kconv, qt, hd, group, scale, S, prow, arow, mx, sum, &pf);
        else
            dh_chunk(TK_KV_F16, krow, vrow, ra, rb, kconv, qt, hd, group, scale, S, prow, arow, mx, sum, &pf);
        pf_step(&pf, INT_MAX);
    }
    return 0;
}
