/* The vectorised exp, written once for any vector width: the attention
 * kernels' softmax (attention_simd_common.h) and the GLU activations
 * (glu_avx2.c).  Included after the file defines VL, the vector type vf and
 * vset1 vmin vmax vround vmul vfma vadd, and
 *   vexp_scale2(p, n)        p * 2^n (n integral, in [-126, 127])
 *   vzero_where_lt(y, x, c)  y with lanes where x < c set to 0 */
#ifndef TK_VEC_EXP_H
#define TK_VEC_EXP_H

/* exp(x) for x <= 88: Cody-Waite reduction to r in [-ln2/2, ln2/2], a
 * degree-7 polynomial (Cephes' expf coefficients), then the 2^n scaling;
 * about 1-2 ulp.  Lanes below -87 (exp < 1.7e-38; -inf from the mask) give
 * exactly 0; lanes above 88 give exp(88). */
static inline __attribute__((always_inline)) vf vexp(vf x) {
    vf xc = vmin(vmax(x, vset1(-87.0f)), vset1(88.0f));
    vf n = vround(vmul(xc, vset1(1.44269504088896341f)));
    vf r = vfma(n, vset1(-0.693359375f), xc);
    r = vfma(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    return vzero_where_lt(vexp_scale2(p, n), x, -87.0f);
}

#endif
