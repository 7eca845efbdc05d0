#include "strops.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "utf8.h"

static bool escaped_byte(uint32_t cp) { return cp >= 0xDC80 && cp <= 0xDCFF; }

static uint32_t map_upper(uint32_t cp) { return escaped_byte(cp) ? cp : (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); }
static uint32_t map_lower(uint32_t cp) { return escaped_byte(cp) ? cp : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); }
static uint32_t map_title(uint32_t cp) { return escaped_byte(cp) ? cp : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp); }

static utf8proc_category_t cat(uint32_t cp) {
    return escaped_byte(cp) ? UTF8PROC_CATEGORY_CN : utf8proc_category((utf8proc_int32_t)cp);
}

static bool is_cased(uint32_t cp) {
    utf8proc_category_t k = cat(cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static int put_cp(cj_buf *b, uint32_t cp) {
    char e[4];
    int n = cj_u8_put(cp, e);
    return cj_buf_put(b, e, (size_t)n);
}

/* Jinja's |title splits words at whitespace and any of -({[< */
static bool title_sep(uint32_t cp) {
    return cj_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

int cj_str_case(cj_ctx *c, const cj_str *s, cj_case mode, cj_val *out) {
    cj_buf b;
    cj_tmpbuf(c, &b);
    size_t i = 0;
    bool first = true, prev_cased = false, prev_sep = true;
    while (i < s->len) {
        uint32_t cp = cj_u8_next(s->s, s->len, &i), m = cp;
        switch (mode) {
        case CJ_CASE_UPPER: m = map_upper(cp); break;
        case CJ_CASE_LOWER: m = map_lower(cp); break;
        case CJ_CASE_CAPITALIZE: m = first ? map_title(cp) : map_lower(cp); break;
        case CJ_CASE_TITLE:
            m = prev_cased ? map_lower(cp) : map_title(cp);
            prev_cased = is_cased(cp);
            break;
        case CJ_CASE_TITLE_FILTER:
            if (title_sep(cp)) {
                prev_sep = true;
            } else {
                m = prev_sep ? map_upper(cp) : map_lower(cp);
                prev_sep = false;
            }
            break;
        }
        first = false;
        if (put_cp(&b, m)) {
            cj_buf_free(&b);
            return cj_fail_buf(c);
        }
    }
    return cj_buf_to_str(c, &b, out);
}

static bool in_set(uint32_t cp, const uint32_t *set, size_t n) {
    if (!set) return cj_isspace(cp);
    for (size_t k = 0; k < n; k++)
        if (set[k] == cp) return true;
    return false;
}

int cj_str_strip(cj_ctx *c, const cj_str *s, const cj_str *chars, bool left, bool right, cj_val *out) {
    uint32_t *set = NULL;
    size_t nset = 0;
    if (chars) {
        set = malloc((chars->len + 1) * sizeof *set);
        if (!set) return cj_fail(c, "out of memory");
        size_t i = 0;
        while (i < chars->len) set[nset++] = cj_u8_next(chars->s, chars->len, &i);
        if (cj_charge_work(c, s->len * nset)) { /* each character of s may be tested against the whole set */
            free(set);
            return -1;
        }
    }
    size_t start = 0, end = s->len, i = 0;
    if (left) {
        while (i < s->len) {
            size_t at = i;
            uint32_t cp = cj_u8_next(s->s, s->len, &i);
            if (!in_set(cp, set, nset)) {
                i = at;
                break;
            }
        }
        start = i;
    }
    if (right) {
        end = start;
        i = start;
        while (i < s->len) {
            uint32_t cp = cj_u8_next(s->s, s->len, &i);
            if (!in_set(cp, set, nset)) end = i;
        }
    }
    free(set);
    return cj_new_str(c, s->s + start, end - start, out);
}

int cj_str_replace(cj_ctx *c, const cj_str *s, const cj_str *old, const cj_str *rep, int64_t count, cj_val *out) {
    cj_buf b;
    cj_tmpbuf(c, &b);
    int64_t done = 0;
    int r = 0;
    if (old->len == 0) {
        /* Python inserts the replacement before every character and at the end */
        size_t i = 0;
        while (!r) {
            if (count < 0 || done < count) {
                r = cj_buf_put(&b, rep->s, rep->len);
                done++;
            }
            if (r || i >= s->len) break;
            size_t at = i;
            cj_u8_next(s->s, s->len, &i);
            r = cj_buf_put(&b, s->s + at, i - at);
        }
    } else {
        size_t i = 0;
        while (!r && i < s->len) {
            const char *hit = (count < 0 || done < count) ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
            if (!hit) {
                r = cj_buf_put(&b, s->s + i, s->len - i);
                break;
            }
            size_t at = (size_t)(hit - s->s);
            r = cj_buf_put(&b, s->s + i, at - i) || cj_buf_put(&b, rep->s, rep->len);
            i = at + old->len;
            done++;
        }
    }
    if (r) {
        cj_buf_free(&b);
        return cj_fail_buf(c);
    }
    return cj_buf_to_str(c, &b, out);
}

static int push_piece(cj_ctx *c, cj_val list, const char *s, size_t n) {
    cj_val v;
    if (cj_new_str(c, s, n, &v)) return -1;
    return cj_list_push(c, list, v);
}

/* Reverses the first n items of a list in place (rsplit collects backwards). */
static void reverse_items(cj_val list) {
    cj_list *l = cj_L(list);
    for (size_t i = 0, j = l->n; i + 1 < j; i++, j--) {
        cj_val t = l->v[i];
        l->v[i] = l->v[j - 1];
        l->v[j - 1] = t;
    }
}

/* *at = the start of the last occurrence of sub (m bytes) in s[0..end), or
 * (size_t)-1.  A backward scan can compare up to m bytes at each position,
 * so the bytes compared are charged to the work budget as it goes. */
static int rfind_bytes(cj_ctx *c, const char *s, size_t end, const char *sub, size_t m, size_t *at) {
    *at = (size_t)-1;
    if (m > end) return 0;
    size_t compared = 0;
    for (size_t p = end - m + 1; p-- > 0;) {
        size_t k = 0;
        while (k < m && s[p + k] == sub[k]) k++;
        compared += k + 1;
        if (k == m) {
            *at = p;
            break;
        }
        if (compared >= (1u << 20)) {
            if (cj_charge_work(c, compared)) return -1;
            compared = 0;
        }
    }
    return cj_charge_work(c, compared);
}

int cj_str_split(cj_ctx *c, const cj_str *s, const cj_str *sep, int64_t maxsplit, bool from_right, cj_val *out) {
    if (sep && sep->len == 0) return cj_fail(c, "empty separator");
    if (cj_new_list(c, 0, false, out)) return -1;
    int64_t splits = 0;
    int r = 0;
    if (sep && !from_right) {
        size_t i = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
            if (!hit) {
                r = push_piece(c, *out, s->s + i, s->len - i);
                break;
            }
            size_t at = (size_t)(hit - s->s);
            if ((r = push_piece(c, *out, s->s + i, at - i))) break;
            i = at + sep->len;
            splits++;
        }
    } else if (sep) {
        size_t end = s->len;
        for (;;) {
            size_t at = (size_t)-1;
            if ((maxsplit < 0 || splits < maxsplit) && (r = rfind_bytes(c, s->s, end, sep->s, sep->len, &at))) break;
            if (at == (size_t)-1) {
                r = push_piece(c, *out, s->s, end);
                break;
            }
            if ((r = push_piece(c, *out, s->s + at + sep->len, end - at - sep->len))) break;
            end = at;
            splits++;
        }
        reverse_items(*out);
    } else if (!from_right) {
        size_t i = 0;
        for (;;) {
            size_t w;
            while ((w = cj_space_len(s->s, s->len, i)) > 0) i += w;
            if (i >= s->len) break;
            if (maxsplit >= 0 && splits >= maxsplit) {
                r = push_piece(c, *out, s->s + i, s->len - i);
                break;
            }
            size_t j = i;
            while (j < s->len && cj_space_len(s->s, s->len, j) == 0) cj_u8_next(s->s, s->len, &j);
            if ((r = push_piece(c, *out, s->s + i, j - i))) break;
            splits++;
            i = j;
        }
    } else {
        /* whitespace rsplit: work on code point offsets to walk backwards */
        size_t ncp = cj_u8_count(s->s, s->len);
        size_t *off = malloc((ncp + 1) * sizeof *off);
        bool *sp = malloc((ncp + 1) * sizeof *sp);
        if (!off || !sp) {
            free(off);
            free(sp);
            cj_unref(c, *out);
            return cj_fail(c, "out of memory");
        }
        size_t i = 0;
        for (size_t k = 0; k < ncp; k++) {
            off[k] = i;
            sp[k] = cj_space_len(s->s, s->len, i) > 0;
            cj_u8_next(s->s, s->len, &i);
        }
        off[ncp] = s->len;
        size_t e = ncp; /* exclusive end, in code points */
        for (;;) {
            while (e > 0 && sp[e - 1]) e--;
            if (e == 0) break;
            if (maxsplit >= 0 && splits >= maxsplit) {
                r = push_piece(c, *out, s->s, off[e]);
                break;
            }
            size_t b = e;
            while (b > 0 && !sp[b - 1]) b--;
            if ((r = push_piece(c, *out, s->s + off[b], off[e] - off[b]))) break;
            splits++;
            e = b;
        }
        free(off);
        free(sp);
        reverse_items(*out);
    }
    if (r) {
        cj_unref(c, *out);
        return -1;
    }
    return 0;
}

static bool line_break(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

int cj_str_splitlines(cj_ctx *c, const cj_str *s, cj_val *out) {
    if (cj_new_list(c, 0, false, out)) return -1;
    size_t start = 0, i = 0;
    while (i < s->len) {
        size_t at = i;
        uint32_t cp = cj_u8_next(s->s, s->len, &i);
        if (!line_break(cp)) continue;
        if (cp == '\r' && i < s->len && s->s[i] == '\n') i++;
        if (push_piece(c, *out, s->s + start, at - start)) {
            cj_unref(c, *out);
            return -1;
        }
        start = i;
    }
    if (start < s->len && push_piece(c, *out, s->s + start, s->len - start)) {
        cj_unref(c, *out);
        return -1;
    }
    return 0;
}

int cj_str_find(cj_ctx *c, const cj_str *s, const cj_str *sub, bool from_right, int64_t *out) {
    size_t at = (size_t)-1;
    if (!from_right) {
        const char *hit = memmem(s->s, s->len, sub->s, sub->len);
        if (hit) at = (size_t)(hit - s->s);
    } else if (rfind_bytes(c, s->s, s->len, sub->s, sub->len, &at)) {
        return -1;
    }
    *out = at == (size_t)-1 ? -1 : (int64_t)cj_u8_count(s->s, at);
    return 0;
}

bool cj_str_is(const cj_str *s, cj_is what) {
    if (s->len == 0) return false;
    size_t i = 0;
    bool any_cased = false;
    while (i < s->len) {
        uint32_t cp = cj_u8_next(s->s, s->len, &i);
        utf8proc_category_t k = cat(cp);
        bool alpha = k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
                     k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
        bool num = k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
        switch (what) {
        case CJ_IS_DIGIT:
            if (k != UTF8PROC_CATEGORY_ND) return false;
            break;
        case CJ_IS_ALPHA:
            if (!alpha) return false;
            break;
        case CJ_IS_ALNUM:
            if (!alpha && !num) return false;
            break;
        case CJ_IS_SPACE:
            if (!cj_isspace(cp)) return false;
            break;
        case CJ_IS_UPPER:
            if (k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT) return false;
            any_cased = any_cased || k == UTF8PROC_CATEGORY_LU;
            break;
        case CJ_IS_LOWER:
            if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) return false;
            any_cased = any_cased || k == UTF8PROC_CATEGORY_LL;
            break;
        }
    }
    return (what == CJ_IS_UPPER || what == CJ_IS_LOWER) ? any_cased : true;
}
