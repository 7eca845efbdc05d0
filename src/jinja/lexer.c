#include "lexer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* Hugging Face's apply_chat_template compiles with trim_blocks=True and
 * lstrip_blocks=True; templates are written against that, so it is fixed. */
#define CJ_TRIM_BLOCKS 1
#define CJ_LSTRIP_BLOCKS 1

/* Bracket nesting inside one tag; deeper input is rejected (the parser's
 * own depth limit is lower anyway). */
#define CJ_MAX_BRACKETS 256

typedef struct lx {
    const char *s;
    size_t n;
    cj_arena *a;
    tk_err *err;
    cj_toks *out;
    /* incremental position -> line/column cursor */
    size_t lc_pos;
    int lc_line, lc_col;
} lx;

static const char *const op_strs[] = {
    "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}", "==", "!=",
    ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";", "in", "not in",
};

const char *cj_op_str(int op) {
    if (op < 0 || op >= (int)(sizeof op_strs / sizeof op_strs[0])) return "?";
    return op_strs[op];
}

void cj_toks_free(cj_toks *t) {
    free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
}

static void linecol(lx *L, size_t pos, int *line, int *col) {
    if (pos < L->lc_pos) {
        L->lc_pos = 0;
        L->lc_line = 1;
        L->lc_col = 1;
    }
    while (L->lc_pos < pos && L->lc_pos < L->n) {
        unsigned char c = (unsigned char)L->s[L->lc_pos++];
        if (c == '\n') {
            L->lc_line++;
            L->lc_col = 1;
        } else if ((c & 0xC0) != 0x80) {
            L->lc_col++;
        }
    }
    *line = L->lc_line;
    *col = L->lc_col;
}

static int lx_fail(lx *L, size_t pos, const char *fmt, ...) TK_PRINTF(3, 4);
static int lx_fail(lx *L, size_t pos, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    linecol(L, pos, &line, &col);
    return tk_err_set(L->err, "template syntax error: line %d, column %d: %s", line, col, msg);
}

static cj_tok *emit(lx *L, cj_tt type, size_t pos) {
    cj_toks *t = L->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        cj_tok *v = realloc(t->v, cap * sizeof *v);
        if (!v) {
            tk_err_set(L->err, "out of memory while lexing template");
            return NULL;
        }
        t->v = v;
        t->cap = cap;
    }
    cj_tok *k = &t->v[t->n++];
    memset(k, 0, sizeof *k);
    k->type = type;
    linecol(L, pos, &k->line, &k->col);
    return k;
}

static int emit_data(lx *L, size_t from, size_t to) {
    if (to <= from) return 0; /* Jinja drops empty data tokens */
    cj_tok *k = emit(L, CJ_T_DATA, from);
    if (!k) return -1;
    k->s = L->s + from;
    k->n = to - from;
    return 0;
}

static bool starts(const lx *L, size_t pos, const char *lit) {
    size_t k = strlen(lit);
    return pos <= L->n && L->n - pos >= k && memcmp(L->s + pos, lit, k) == 0;
}

static size_t skip_ws(const lx *L, size_t pos) {
    size_t w;
    while ((w = cj_space_len(L->s, L->n, pos)) > 0) pos += w;
    return pos;
}

/* End of text[from, to) after Python's rstrip(). */
static size_t rstrip_end(const lx *L, size_t from, size_t to) {
    size_t end = from, i = from;
    while (i < to) {
        size_t w = cj_space_len(L->s, to, i);
        if (w) {
            i += w;
        } else {
            cj_u8_next(L->s, to, &i);
            end = i;
        }
    }
    return end;
}

/* lstrip_blocks: if only spaces/tabs (any whitespace) separate the tag from
 * the start of its line, they are dropped.  "At line start" is either a
 * newline inside this text or the previous token having ended one. */
static size_t lstrip_end(const lx *L, size_t from, size_t to, bool line_starting) {
    size_t l_pos = from;
    bool has_nl = false;
    for (size_t i = to; i > from; i--) {
        if (L->s[i - 1] == '\n') {
            l_pos = i;
            has_nl = true;
            break;
        }
    }
    if (!has_nl && !line_starting) return to;
    if (l_pos == to) return to; /* nothing to strip (whitespace_re needs one char) */
    if (skip_ws(L, l_pos) < to) return to;
    return l_pos;
}

/* Applies the whitespace control a tag's opening sign asks for to the text
 * before it.  kind is '{', '%' or '#'. */
static size_t text_end_for(const lx *L, size_t from, size_t to, char sign, char kind, bool line_starting) {
    if (sign == '-') return rstrip_end(L, from, to);
    if (sign != '+' && CJ_LSTRIP_BLOCKS && kind != '{') return lstrip_end(L, from, to, line_starting);
    return to;
}

/* {%[-+]? raw %} at tag (pos = after "{%" and sign); *end gets the end. */
static bool match_raw_begin(const lx *L, size_t pos, size_t *end) {
    pos = skip_ws(L, pos);
    if (!starts(L, pos, "raw")) return false;
    pos = skip_ws(L, pos + 3);
    if (starts(L, pos, "-%}")) {
        *end = skip_ws(L, pos + 3);
        return true;
    }
    if (starts(L, pos, "%}")) {
        *end = pos + 2; /* Jinja applies no trim_blocks after raw's opening tag */
        return true;
    }
    return false;
}

/* {%[-+]? endraw (+%}|-%}\s*|%}\n?) at pos; sets the sign and the end. */
static bool match_raw_end(const lx *L, size_t pos, char *sign, size_t *end) {
    if (!starts(L, pos, "{%")) return false;
    pos += 2;
    *sign = 0;
    if (pos < L->n && (L->s[pos] == '-' || L->s[pos] == '+')) *sign = L->s[pos++];
    pos = skip_ws(L, pos);
    if (!starts(L, pos, "endraw")) return false;
    pos = skip_ws(L, pos + 6);
    if (starts(L, pos, "+%}")) {
        *end = pos + 3;
    } else if (starts(L, pos, "-%}")) {
        *end = skip_ws(L, pos + 3);
    } else if (starts(L, pos, "%}")) {
        pos += 2;
        if (CJ_TRIM_BLOCKS && pos < L->n && L->s[pos] == '\n') pos++;
        *end = pos;
    } else {
        return false;
    }
    return true;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (unsigned char)c >= 0x80;
}
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

/* (\d+_)*\d+ at *p; false if no digit there. */
static bool digits_us(const lx *L, size_t *p) {
    size_t i = *p;
    if (i >= L->n || !is_digit(L->s[i])) return false;
    while (i < L->n && is_digit(L->s[i])) {
        i++;
        if (i + 1 < L->n && L->s[i] == '_' && is_digit(L->s[i + 1])) i++;
    }
    *p = i;
    return true;
}

/* Exponent part e[+-]?digits at *p. */
static bool exponent(const lx *L, size_t *p) {
    size_t i = *p;
    if (i >= L->n || (L->s[i] != 'e' && L->s[i] != 'E')) return false;
    i++;
    if (i < L->n && (L->s[i] == '+' || L->s[i] == '-')) i++;
    if (!digits_us(L, &i)) return false;
    *p = i;
    return true;
}

static int lex_number(lx *L, size_t *ppos) {
    size_t pos = *ppos, p = pos;
    bool is_float = false;
    /* float: Jinja's rule refuses to start right after a '.' (x.0.1 is items) */
    if (pos == 0 || L->s[pos - 1] != '.') {
        digits_us(L, &p);
        size_t q = p;
        if (q + 1 < L->n && L->s[q] == '.' && is_digit(L->s[q + 1])) {
            q++;
            digits_us(L, &q);
            exponent(L, &q);
            is_float = true;
            p = q;
        } else if (exponent(L, &q)) {
            is_float = true;
            p = q;
        }
    }
    char tmp[128];
    if (is_float) {
        size_t k = 0;
        for (size_t i = pos; i < p; i++) {
            if (L->s[i] == '_') continue;
            if (k + 1 >= sizeof tmp) return lx_fail(L, pos, "number literal too long");
            tmp[k++] = L->s[i];
        }
        tmp[k] = 0;
        cj_tok *t = emit(L, CJ_T_FLOAT, pos);
        if (!t) return -1;
        t->fval = strtod(tmp, NULL);
        *ppos = p;
        return 0;
    }
    /* integer: 0b/0o/0x prefixes, [1-9](_?\d)*, or 0(_?0)* */
    int base = 10;
    p = pos;
    if (L->s[p] == '0' && p + 1 < L->n) {
        char c = L->s[p + 1];
        if (c == 'b' || c == 'B') base = 2;
        else if (c == 'o' || c == 'O') base = 8;
        else if (c == 'x' || c == 'X') base = 16;
    }
    size_t k = 0;
    if (base != 10) {
        size_t q = p + 2;
        for (;;) {
            size_t r = q;
            if (r < L->n && L->s[r] == '_') r++;
            if (r >= L->n) break;
            char c = L->s[r];
            bool ok = base == 2 ? (c == '0' || c == '1')
                    : base == 8 ? (c >= '0' && c <= '7')
                                : (is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'));
            if (!ok) break;
            if (k + 1 >= sizeof tmp) return lx_fail(L, pos, "integer literal too large");
            tmp[k++] = c;
            q = r + 1;
        }
        if (k == 0) base = 10; /* "0x" without digits: just the integer 0 */
        else p = q;
    }
    if (base == 10) {
        k = 0;
        if (L->s[p] == '0') {
            tmp[k++] = '0';
            p++;
            while (p < L->n) {
                size_t r = p;
                if (L->s[r] == '_') r++;
                if (r < L->n && L->s[r] == '0') p = r + 1;
                else break;
            }
        } else {
            while (p < L->n) {
                size_t r = p;
                if (k > 0 && L->s[r] == '_') r++;
                if (r < L->n && is_digit(L->s[r])) {
                    if (k + 1 >= sizeof tmp) return lx_fail(L, pos, "integer literal too large");
                    tmp[k++] = L->s[r];
                    p = r + 1;
                } else {
                    break;
                }
            }
        }
    }
    tmp[k] = 0;
    errno = 0;
    char *end;
    long long v = strtoll(tmp, &end, base);
    if (errno == ERANGE) return lx_fail(L, pos, "integer literal too large");
    cj_tok *t = emit(L, CJ_T_INT, pos);
    if (!t) return -1;
    t->ival = v;
    *ppos = p;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* String literal with Python's unicode-escape rules (what Jinja applies). */
static int lex_string(lx *L, size_t *ppos) {
    size_t pos = *ppos, p = pos + 1;
    char q = L->s[pos];
    while (p < L->n && L->s[p] != q) {
        if (L->s[p] == '\\') p++;
        p++;
    }
    if (p >= L->n) return lx_fail(L, pos, "unterminated string literal");
    const char *s = L->s + pos + 1;
    size_t n = p - pos - 1;
    char *o = cj_arena_alloc(L->a, n + 1); /* escapes never grow the text */
    if (!o) return tk_err_set(L->err, "out of memory while lexing template");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        size_t esc_at = pos + 1 + i;
        i += 2;
        uint32_t cp;
        switch (e) {
        case '\n': continue; /* line continuation */
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = '\v'; continue;
        case 'x':
        case 'u':
        case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            cp = 0;
            for (int d = 0; d < nd; d++) {
                int h = i < n ? hexval(s[i]) : -1;
                if (h < 0) return lx_fail(L, esc_at, "truncated \\%c escape in string", e);
                cp = cp * 16 + (uint32_t)h;
                i++;
            }
            if (cp > 0x10FFFF) return lx_fail(L, esc_at, "illegal Unicode character in string");
            break;
        }
        case 'N':
            return lx_fail(L, esc_at, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && i < n && s[i] >= '0' && s[i] <= '7'; d++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
                break;
            }
            o[k++] = '\\'; /* unknown escapes keep their backslash, as in Python */
            i--;
            continue;
        }
        /* \x, \u, \U and octal escapes: encode the code point.  A lone
         * surrogate becomes U+FFFD.  Each escape is at least as long as its
         * UTF-8 encoding except \xNN/\NNN >= 0x80 (2 bytes from 4 chars). */
        char enc[4];
        int m = (cp >= 0xD800 && cp <= 0xDFFF) ? cj_u8_put(0xFFFD, enc) : cj_u8_put(cp, enc);
        memcpy(o + k, enc, (size_t)m);
        k += (size_t)m;
    }
    o[k] = 0;
    cj_tok *t = emit(L, CJ_T_STRING, pos);
    if (!t) return -1;
    t->s = o;
    t->n = k;
    *ppos = p + 1;
    return 0;
}

static int lex_operator(lx *L, size_t *ppos, char *stack, int *depth) {
    static const struct {
        const char *s;
        int op;
    } two[] = {{"//", CJ_OP_FLOORDIV}, {"**", CJ_OP_POW}, {"==", CJ_OP_EQ},
               {"!=", CJ_OP_NE},       {">=", CJ_OP_GTEQ}, {"<=", CJ_OP_LTEQ}};
    size_t pos = *ppos;
    int op = -1;
    size_t len = 1;
    for (size_t i = 0; i < sizeof two / sizeof two[0]; i++) {
        if (starts(L, pos, two[i].s)) {
            op = two[i].op;
            len = 2;
            break;
        }
    }
    if (op < 0) {
        switch (L->s[pos]) {
        case '+': op = CJ_OP_ADD; break;
        case '-': op = CJ_OP_SUB; break;
        case '/': op = CJ_OP_DIV; break;
        case '*': op = CJ_OP_MUL; break;
        case '%': op = CJ_OP_MOD; break;
        case '~': op = CJ_OP_TILDE; break;
        case '[': op = CJ_OP_LBRACKET; break;
        case ']': op = CJ_OP_RBRACKET; break;
        case '(': op = CJ_OP_LPAREN; break;
        case ')': op = CJ_OP_RPAREN; break;
        case '{': op = CJ_OP_LBRACE; break;
        case '}': op = CJ_OP_RBRACE; break;
        case '>': op = CJ_OP_GT; break;
        case '<': op = CJ_OP_LT; break;
        case '=': op = CJ_OP_ASSIGN; break;
        case '.': op = CJ_OP_DOT; break;
        case ':': op = CJ_OP_COLON; break;
        case '|': op = CJ_OP_PIPE; break;
        case ',': op = CJ_OP_COMMA; break;
        case ';': op = CJ_OP_SEMICOLON; break;
        default: {
            unsigned char c = (unsigned char)L->s[pos];
            if (c >= 0x20 && c < 0x7f) return lx_fail(L, pos, "unexpected character '%c'", c);
            return lx_fail(L, pos, "unexpected character (byte 0x%02x)", c);
        }
        }
    }
    /* bracket balance, as Jinja's lexer tracks it: tag ends only count
     * outside brackets, and mismatches are errors here */
    char ch = L->s[pos];
    if (len == 1 && (ch == '(' || ch == '[' || ch == '{')) {
        if (*depth >= CJ_MAX_BRACKETS) return lx_fail(L, pos, "brackets nested too deeply");
        stack[(*depth)++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
    } else if (len == 1 && (ch == ')' || ch == ']' || ch == '}')) {
        if (*depth == 0) return lx_fail(L, pos, "unexpected '%c'", ch);
        char want = stack[--(*depth)];
        if (want != ch) return lx_fail(L, pos, "unexpected '%c', expected '%c'", ch, want);
    }
    cj_tok *t = emit(L, CJ_T_OP, pos);
    if (!t) return -1;
    t->op = op;
    *ppos = pos + len;
    return 0;
}

/* Lexes the inside of {{ ... }} (kind '{') or {% ... %} (kind '%'), from
 * pos (after the opening and its sign) through the closing delimiter. */
static int lex_tag(lx *L, size_t *ppos, char kind, size_t tag_start, bool *line_starting) {
    char stack[CJ_MAX_BRACKETS];
    int depth = 0;
    size_t pos = *ppos;
    for (;;) {
        if (pos >= L->n) {
            if (depth > 0) return lx_fail(L, tag_start, "unclosed '%c' in tag", stack[depth - 1] == ')' ? '(' : stack[depth - 1] == ']' ? '[' : '{');
            return lx_fail(L, tag_start, kind == '{' ? "unclosed '{{': missing '}}'" : "unclosed '{%%': missing '%%}'");
        }
        if (depth == 0) {
            size_t end = 0;
            if (kind == '{') {
                if (starts(L, pos, "-}}")) end = skip_ws(L, pos + 3);
                else if (starts(L, pos, "}}")) end = pos + 2;
            } else {
                if (starts(L, pos, "+%}")) {
                    end = pos + 3;
                } else if (starts(L, pos, "-%}")) {
                    end = skip_ws(L, pos + 3);
                } else if (starts(L, pos, "%}")) {
                    end = pos + 2;
                    if (CJ_TRIM_BLOCKS && end < L->n && L->s[end] == '\n') end++;
                }
            }
            if (end) {
                if (!emit(L, kind == '{' ? CJ_T_VAR_END : CJ_T_BLOCK_END, pos)) return -1;
                *line_starting = L->s[end - 1] == '\n';
                *ppos = end;
                return 0;
            }
        }
        size_t w = cj_space_len(L->s, L->n, pos);
        if (w) {
            pos += w;
            continue;
        }
        char c = L->s[pos];
        int r;
        if (is_digit(c)) {
            r = lex_number(L, &pos);
        } else if (is_name_start(c)) {
            size_t p = pos;
            while (p < L->n && is_name_char(L->s[p])) p++;
            cj_tok *t = emit(L, CJ_T_NAME, pos);
            if (!t) return -1;
            t->s = L->s + pos;
            t->n = p - pos;
            pos = p;
            r = 0;
        } else if (c == '\'' || c == '"') {
            r = lex_string(L, &pos);
        } else {
            r = lex_operator(L, &pos, stack, &depth);
        }
        if (r) return r;
    }
}

int cj_lex(const char *src, size_t len, cj_arena *a, cj_toks *out, tk_err *err) {
    memset(out, 0, sizeof *out);
    /* Jinja reads \r\n and \r as \n and drops one trailing newline
     * (keep_trailing_newline=False). */
    char *s = cj_arena_alloc(a, len + 1);
    if (!s) return tk_err_set(err, "template too large");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;

    lx L = {.s = s, .n = n, .a = a, .err = err, .out = out, .lc_pos = 0, .lc_line = 1, .lc_col = 1};
    size_t pos = 0;
    bool line_starting = true;
    while (pos < n) {
        /* next tag opening */
        size_t t = pos;
        char kind = 0;
        while (t + 1 < n) {
            const char *q = memchr(s + t, '{', n - t - 1);
            if (!q) {
                t = n;
                break;
            }
            t = (size_t)(q - s);
            char c = s[t + 1];
            if (c == '{' || c == '%' || c == '#') {
                kind = c;
                break;
            }
            t++;
        }
        if (!kind) {
            if (emit_data(&L, pos, n)) goto fail;
            break;
        }
        size_t after = t + 2;
        char sign = 0;
        if (after < n && (s[after] == '-' || s[after] == '+')) sign = s[after++];
        size_t raw_body = 0;
        bool raw = kind == '%' && match_raw_begin(&L, after, &raw_body);
        if (emit_data(&L, pos, text_end_for(&L, pos, t, sign, kind, line_starting))) goto fail;

        if (kind == '#') {
            size_t j = after, end = 0;
            for (; j + 1 < n; j++) {
                if (s[j] == '+' && starts(&L, j + 1, "#}")) {
                    end = j + 3;
                } else if (s[j] == '-' && starts(&L, j + 1, "#}")) {
                    end = skip_ws(&L, j + 3);
                } else if (s[j] == '#' && s[j + 1] == '}') {
                    end = j + 2;
                    if (CJ_TRIM_BLOCKS && end < n && s[end] == '\n') end++;
                }
                if (end) break;
            }
            if (!end) {
                lx_fail(&L, t, "missing end of comment tag '#}'");
                goto fail;
            }
            line_starting = s[end - 1] == '\n';
            pos = end;
            continue;
        }
        if (raw) {
            size_t j = raw_body, end = 0;
            char esign = 0;
            for (; j + 1 < n; j++) {
                if (s[j] == '{' && match_raw_end(&L, j, &esign, &end)) break;
            }
            if (!end) {
                lx_fail(&L, t, "missing end of raw directive '{%% endraw %%}'");
                goto fail;
            }
            bool ls = s[raw_body - 1] == '\n';
            if (emit_data(&L, raw_body, text_end_for(&L, raw_body, j, esign, '%', ls))) goto fail;
            line_starting = s[end - 1] == '\n';
            pos = end;
            continue;
        }
        if (!emit(&L, kind == '{' ? CJ_T_VAR_BEGIN : CJ_T_BLOCK_BEGIN, t)) goto fail;
        pos = after;
        if (lex_tag(&L, &pos, kind, t, &line_starting)) goto fail;
    }
    if (!emit(&L, CJ_T_EOF, n)) goto fail;
    return 0;
fail:
    cj_toks_free(out);
    return -1;
}
