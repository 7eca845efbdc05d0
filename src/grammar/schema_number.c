/* JSON Schema integers and numbers with minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum, as exact digit grammars.  A number
 * is i or i.F (no exponent when bounded): its value is exactly ±i when F is
 * all zeros, else strictly between two integers, which is what the integer
 * bounds decide; non-integer bounds are rounded inward to integers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schema_internal.h"

#define BOUND_LIMIT 1e18 /* |bounds| supported: int64 arithmetic stays exact */

/* One side of a range: v_exact bounds the exact integer values, v_open the
 * integer ends of the open unit intervals (i, i+1) that may be used. */
typedef struct bound {
    bool set;
    int64_t exact, open;
} bound;

/* Same-length numerals a..z (a <= z, n digits) as alternatives of rule. */
static int same_length(tk_schema_c *c, int rule, const char *a, const char *z, int n) {
    int i = 0;
    while (i < n && a[i] == z[i]) i++;
    if (i == n) return tk_schema_lit(c, rule, a, (size_t)n) || tk_schema_alt(c, rule);
    int rest = n - i - 1;
    bool a_zeros = true, z_nines = true;
    for (int j = i + 1; j < n; j++) {
        a_zeros &= a[j] == '0';
        z_nines &= z[j] == '9';
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    if (!a_zeros) { /* a's first differing digit, then a's rest .. 99..9 */
        int sub = tk_schema_rule(c);
        if (sub < 0 || same_length(c, sub, a + i + 1, nines, rest) || tk_schema_lit(c, rule, a, (size_t)i + 1) ||
            tk_schema_ref_el(c, rule, sub) || tk_schema_alt(c, rule))
            return -1;
    }
    char lo = (char)(a[i] + !a_zeros), hi = (char)(z[i] - !z_nines);
    if (lo <= hi) { /* the digits in between, then any rest */
        if (tk_schema_lit(c, rule, a, (size_t)i) || tk_schema_byte(c, rule, (uint8_t)lo, (uint8_t)hi)) return -1;
        for (int j = 0; j < rest; j++)
            if (tk_schema_byte(c, rule, '0', '9')) return -1;
        if (tk_schema_alt(c, rule)) return -1;
    }
    if (!z_nines) { /* z's first differing digit, then 00..0 .. z's rest */
        int sub = tk_schema_rule(c);
        if (sub < 0 || same_length(c, sub, zeros, z + i + 1, rest) || tk_schema_lit(c, rule, z, (size_t)i + 1) ||
            tk_schema_ref_el(c, rule, sub) || tk_schema_alt(c, rule))
            return -1;
    }
    return 0;
}

/* The numerals (no leading zeros) of lo..hi; has_hi false: lo.. unbounded. */
static int naturals(tk_schema_c *c, uint64_t lo, bool has_hi, uint64_t hi) {
    int r = tk_schema_rule(c);
    if (r < 0) return -1;
    char a[24], z[24];
    int la = snprintf(a, sizeof a, "%llu", (unsigned long long)lo);
    int lb = has_hi ? snprintf(z, sizeof z, "%llu", (unsigned long long)hi) : la;
    for (int len = la; len <= lb; len++) {
        char from[24], to[24];
        if (len == la) memcpy(from, a, (size_t)la + 1);
        else snprintf(from, sizeof from, "1%0*d", len - 1, 0);
        if (has_hi && len == lb) memcpy(to, z, (size_t)lb + 1);
        else memset(to, '9', (size_t)len), to[len] = 0;
        if (same_length(c, r, from, to, len)) return -1;
    }
    if (!has_hi) { /* every numeral longer than lo's */
        int digits = tk_schema_digits(c);
        if (digits < 0 || tk_schema_byte(c, r, '1', '9')) return -1;
        for (int j = 0; j < la; j++)
            if (tk_schema_byte(c, r, '0', '9')) return -1;
        if (tk_schema_ref_el(c, r, digits) || tk_schema_alt(c, r)) return -1;
    }
    return r;
}

/* Appends an alternative [sign] N suffix for the magnitudes lo..hi (hi < 0:
 * unbounded); nothing when the range is empty. */
static int push_part(tk_schema_c *c, int rule, bool neg, int64_t lo, int64_t hi, bool has_hi, int suffix, int *n_alts) {
    if (lo < 0) lo = 0;
    if (has_hi && hi < lo) return 0;
    int nat = naturals(c, (uint64_t)lo, has_hi, (uint64_t)(has_hi ? hi : 0));
    if (nat < 0 || (neg && tk_schema_lit(c, rule, "-", 1)) || tk_schema_ref_el(c, rule, nat)) return -1;
    if (suffix >= 0 && tk_schema_ref_el(c, rule, suffix)) return -1;
    (*n_alts)++;
    return tk_schema_alt(c, rule);
}

/* Reads minimum / exclusiveMinimum (lower) or maximum / exclusiveMaximum:
 * the tighter of the two; exclusive as a boolean (draft 4, OpenAPI 3.0)
 * qualifies the plain keyword. */
static int read_bound(tk_schema_c *c, const json_t *s, bool lower, bound *b, double *raw) {
    const char *plain = lower ? "minimum" : "maximum", *excl = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_t *p = s ? json_object_get(s, plain) : NULL, *e = s ? json_object_get(s, excl) : NULL;
    *b = (bound){0};
    if (p && !json_is_number(p)) return tk_schema_fail(c, "'%s' must be a number", plain);
    if (e && !json_is_number(e) && !json_is_boolean(e)) return tk_schema_fail(c, "'%s' must be a number", excl);
    const json_t *vals[2] = {p, json_is_number(e) ? e : NULL};
    bool exclusive[2] = {json_is_true(e), true};
    for (int i = 0; i < 2; i++) {
        if (!vals[i]) continue;
        double v = json_number_value(vals[i]);
        if (!(fabs(v) <= BOUND_LIMIT)) return tk_schema_fail(c, "'%s' beyond +-1e18 is not supported", i ? excl : plain);
        double whole = lower ? ceil(v) : floor(v);
        int64_t w = json_is_integer(vals[i]) ? (int64_t)json_integer_value(vals[i]) : (int64_t)whole;
        bool integral = json_is_integer(vals[i]) || whole == v;
        int step = lower ? 1 : -1;
        bound nb = {true, integral && exclusive[i] ? w + step : w, w};
        if (!b->set || (lower ? nb.exact > b->exact : nb.exact < b->exact)) b->exact = nb.exact;
        if (!b->set || (lower ? nb.open > b->open : nb.open < b->open)) b->open = nb.open;
        if (!b->set || (lower ? v > *raw : v < *raw)) *raw = v;
        b->set = true;
    }
    return 0;
}

static int read_range(tk_schema_c *c, const json_t *s, bound *lo, bound *hi) {
    double rlo = 0, rhi = 0;
    if (read_bound(c, s, true, lo, &rlo) || read_bound(c, s, false, hi, &rhi)) return -1;
    if (lo->set && hi->set && rlo > rhi) return tk_schema_fail(c, "the minimum is greater than the maximum");
    return 0;
}

/* The exact integer values lo..hi: [0, ..] and "-" [1, ..]. */
static int push_integers(tk_schema_c *c, int rule, bound lo, bound hi, int suffix, int *n) {
    if (!hi.set || hi.exact >= 0)
        if (push_part(c, rule, false, lo.set ? lo.exact : 0, hi.exact, hi.set, suffix, n)) return -1;
    if (!lo.set || lo.exact < 0)
        if (push_part(c, rule, true, hi.set && hi.exact < 0 ? -hi.exact : 1, lo.set ? -lo.exact : 0, lo.set, suffix, n))
            return -1;
    return 0;
}

int tk_schema_integer(tk_schema_c *c, const json_t *s) {
    bound lo, hi;
    if (read_range(c, s, &lo, &hi)) return -1;
    int r = tk_schema_rule(c), n = 0;
    if (r < 0 || push_integers(c, r, lo, hi, -1, &n)) return -1;
    if (n == 0) return tk_schema_fail(c, "no integer lies between the minimum and the maximum");
    return r;
}

/* "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? */
static int any_number(tk_schema_c *c) {
    if (c->r_number >= 0) return c->r_number;
    int nat = naturals(c, 0, false, 0), digits = tk_schema_digits(c), r = tk_schema_rule(c);
    int frac = tk_schema_rule(c), exp = tk_schema_rule(c);
    if (nat < 0 || digits < 0 || r < 0 || frac < 0 || exp < 0) return -1;
    if (tk_schema_alt(c, frac) || tk_schema_lit(c, frac, ".", 1) || tk_schema_byte(c, frac, '0', '9') ||
        tk_schema_ref_el(c, frac, digits) || tk_schema_alt(c, frac))
        return -1;
    if (tk_schema_alt(c, exp) || tk_schema_class(c, exp, "eeEE", false) || tk_schema_class(c, exp, "++--", false) ||
        tk_schema_repeat_last(c, exp, 0, 1) || tk_schema_byte(c, exp, '0', '9') || tk_schema_ref_el(c, exp, digits) ||
        tk_schema_alt(c, exp))
        return -1;
    if (tk_schema_lit(c, r, "-", 1) || tk_schema_repeat_last(c, r, 0, 1) || tk_schema_ref_el(c, r, nat) ||
        tk_schema_ref_el(c, r, frac) || tk_schema_ref_el(c, r, exp) || tk_schema_alt(c, r))
        return -1;
    return c->r_number = r;
}

int tk_schema_number(tk_schema_c *c, const json_t *s) {
    bound lo, hi;
    if (read_range(c, s, &lo, &hi)) return -1;
    if (!lo.set && !hi.set) return any_number(c);
    /* zero ::= ( "." "0"+ )?   fraction ::= "." "0"* [1-9] [0-9]* */
    int digits = tk_schema_digits(c), zero = tk_schema_rule(c), frac = tk_schema_rule(c), r = tk_schema_rule(c), n = 0;
    if (digits < 0 || zero < 0 || frac < 0 || r < 0) return -1;
    if (tk_schema_alt(c, zero) || tk_schema_lit(c, zero, ".", 1) || tk_schema_lit(c, zero, "0", 1) ||
        tk_schema_repeat_last(c, zero, 1, -1) || tk_schema_alt(c, zero))
        return -1;
    if (tk_schema_lit(c, frac, ".", 1) || tk_schema_lit(c, frac, "0", 1) || tk_schema_repeat_last(c, frac, 0, -1) ||
        tk_schema_byte(c, frac, '1', '9') || tk_schema_ref_el(c, frac, digits) || tk_schema_alt(c, frac))
        return -1;
    if (push_integers(c, r, lo, hi, zero, &n)) return -1;
    /* i.F in (i, i+1): lo.open <= i, i + 1 <= hi.open */
    if (!hi.set || hi.open >= 1)
        if (push_part(c, r, false, lo.set ? lo.open : 0, hi.open - 1, hi.set, frac, &n)) return -1;
    /* -i.F in (-(i+1), -i): -(i+1) >= lo.open, -i <= hi.open */
    if (!lo.set || lo.open <= -1)
        if (push_part(c, r, true, hi.set ? -hi.open : 0, -lo.open - 1, lo.set, frac, &n)) return -1;
    if (n == 0)
        return tk_schema_fail(c, "no number lies between the minimum and the maximum once rounded to integers");
    return r;
}
