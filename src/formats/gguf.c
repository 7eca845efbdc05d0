/* GGUF reader.
 *
 * Layout (all little-endian):
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv x      { string key, u32 value_type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset }
 *   padding to `general.alignment` (default 32), then the data section;
 *   tensor offsets are relative to its start.
 * A string is u64 length + bytes (no NUL); an array is u32 element type +
 * u64 count + elements.
 *
 * The file is memory-mapped and treated as hostile: every read goes through a
 * bounds-checked cursor, every count is checked against the bytes left before
 * anything is allocated for it, and all size arithmetic is overflow-checked.
 * Tables grow as entries are actually parsed, so a lying header cannot make
 * us allocate more than a small multiple of the file size. */
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h> /* tk_mapfile, tk_read_file */

#define GGUF_DEFAULT_ALIGNMENT 32
/* Nested arrays are legal but unused in practice; cap the recursion so a
 * crafted file cannot exhaust the stack. */
#define GGUF_MAX_ARRAY_DEPTH 8
/* Smallest possible encodings, used to reject implausible counts early:
 * a KV is at least key length (8) + 1 key byte + type (4) + 1 value byte,
 * a tensor info at least name length (8) + 1 byte + n_dims (4) + one dim (8)
 * + type (4) + offset (8). */
#define GGUF_MIN_KV_BYTES 14
#define GGUF_MIN_TENSOR_INFO_BYTES 33

struct tk_gguf {
    tk_mapfile map;
    uint32_t version;
    size_t alignment;
    size_t data_off; /* file offset of the data section */
    tk_gguf_kv *kvs;
    size_t n_kv;
    tk_tensor *tensors;
    uint64_t *tensor_offsets; /* as stored: relative to data_off */
    size_t n_tensors;
    /* Pointers sorted by key / name, for duplicate detection and lookup. */
    const tk_gguf_kv **kv_sorted;
    const tk_tensor **tensor_sorted;
};

/* ---- bounds-checked cursor ---- */

typedef struct cursor {
    const unsigned char *base;
    size_t size;
    size_t pos;
    const char *path;
    tk_err *err;
} cursor;

static size_t remaining(const cursor *c) {
    return c->size - c->pos;
}

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > remaining(c))
        return tk_err_set(c->err,
                          "%s: truncated: %s needs %llu bytes at offset %zu but only %zu remain "
                          "(file is %zu bytes)",
                          c->path, what, (unsigned long long)n, c->pos, remaining(c), c->size);
    return 0;
}

static uint64_t load_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int rd_uint(cursor *c, int nbytes, uint64_t *out, const char *what) {
    if (need(c, (uint64_t)nbytes, what)) return -1;
    *out = load_le(c->base + c->pos, nbytes);
    c->pos += (size_t)nbytes;
    return 0;
}

static int rd_u32(cursor *c, uint32_t *out, const char *what) {
    uint64_t v;
    if (rd_uint(c, 4, &v, what)) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *out, const char *what) {
    return rd_uint(c, 8, out, what);
}

static int rd_str(cursor *c, tk_gguf_str *s, const char *what) {
    uint64_t len;
    size_t at = c->pos;
    if (rd_u64(c, &len, what)) return -1;
    if (len > remaining(c))
        return tk_err_set(c->err,
                          "%s: %s: string length %llu at offset %zu exceeds the %zu bytes left in "
                          "the file",
                          c->path, what, (unsigned long long)len, at, remaining(c));
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += (size_t)len;
    return 0;
}

/* ---- value types ---- */

static const char *vtype_name(uint32_t t) {
    static const char *const names[] = {"uint8", "int8",   "uint16", "int16", "uint32",
                                        "int32", "float32", "bool",  "string", "array",
                                        "uint64", "int64", "float64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "invalid";
}

static bool vtype_valid(uint32_t t) {
    return t <= TK_GGUF_F64;
}

/* Encoded size of a fixed-size type; 0 for string and array. */
static size_t vtype_size(tk_gguf_vtype t) {
    switch (t) {
    case TK_GGUF_U8: case TK_GGUF_I8: case TK_GGUF_BOOL: return 1;
    case TK_GGUF_U16: case TK_GGUF_I16: return 2;
    case TK_GGUF_U32: case TK_GGUF_I32: case TK_GGUF_F32: return 4;
    case TK_GGUF_U64: case TK_GGUF_I64: case TK_GGUF_F64: return 8;
    default: return 0;
    }
}

static bool vtype_is_int(tk_gguf_vtype t) {
    return t == TK_GGUF_U8 || t == TK_GGUF_I8 || t == TK_GGUF_U16 || t == TK_GGUF_I16 ||
           t == TK_GGUF_U32 || t == TK_GGUF_I32 || t == TK_GGUF_U64 || t == TK_GGUF_I64;
}

static bool vtype_is_signed(tk_gguf_vtype t) {
    return t == TK_GGUF_I8 || t == TK_GGUF_I16 || t == TK_GGUF_I32 || t == TK_GGUF_I64;
}

static int64_t sign_extend(uint64_t v, size_t bytes) {
    if (bytes == 8) return (int64_t)v;
    const uint64_t sign = (uint64_t)1 << (8 * bytes - 1);
    return (int64_t)((v ^ sign) - sign);
}

static double decode_float(const unsigned char *p, tk_gguf_vtype t) {
    if (t == TK_GGUF_F32) {
        uint32_t u = (uint32_t)load_le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    uint64_t u = load_le(p, 8);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static int check_array_type(cursor *c, uint32_t t, const char *what) {
    if (!vtype_valid(t))
        return tk_err_set(c->err, "%s: %s: unknown array element type %u", c->path, what, t);
    return 0;
}

/* Skips an array body (element type and count already read).  Only used for
 * arrays nested inside arrays, which we keep undecoded. */
static int skip_array(cursor *c, tk_gguf_vtype et, uint64_t n, int depth, const char *what) {
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return tk_err_set(c->err, "%s: %s: arrays nested deeper than %d levels", c->path, what,
                          GGUF_MAX_ARRAY_DEPTH);
    size_t es = vtype_size(et);
    if (es) {
        if (n > remaining(c) / es)
            return tk_err_set(c->err,
                              "%s: %s: array of %llu %s elements at offset %zu extends past end of "
                              "file (%zu bytes)",
                              c->path, what, (unsigned long long)n, vtype_name(et), c->pos, c->size);
        c->pos += (size_t)(n * es);
        return 0;
    }
    if (et == TK_GGUF_STRING) {
        if (n > remaining(c) / 8)
            return tk_err_set(c->err, "%s: %s: array of %llu strings cannot fit in the %zu bytes left",
                              c->path, what, (unsigned long long)n, remaining(c));
        for (uint64_t i = 0; i < n; i++) {
            tk_gguf_str s;
            if (rd_str(c, &s, what)) return -1;
        }
        return 0;
    }
    /* array of arrays: each element is at least a type and a count */
    if (n > remaining(c) / 12)
        return tk_err_set(c->err, "%s: %s: array of %llu arrays cannot fit in the %zu bytes left",
                          c->path, what, (unsigned long long)n, remaining(c));
    for (uint64_t i = 0; i < n; i++) {
        uint32_t sub;
        uint64_t sn;
        if (rd_u32(c, &sub, what) || check_array_type(c, sub, what) || rd_u64(c, &sn, what))
            return -1;
        if (skip_array(c, (tk_gguf_vtype)sub, sn, depth + 1, what)) return -1;
    }
    return 0;
}

static int read_array(cursor *c, tk_gguf_kv *kv, const char *what) {
    uint32_t et;
    uint64_t n;
    if (rd_u32(c, &et, what) || check_array_type(c, et, what)) return -1;
    if (rd_u64(c, &n, what)) return -1;
    kv->arr_type = (tk_gguf_vtype)et;
    kv->arr_n = n;
    kv->arr_data = c->base + c->pos;
    if (et != TK_GGUF_STRING) return skip_array(c, kv->arr_type, n, 1, what);

    /* String arrays are decoded so users get direct (ptr, len) access.  Each
     * string takes at least 8 bytes, which bounds the allocation by 2x the
     * bytes left in the file. */
    if (n > remaining(c) / 8)
        return tk_err_set(c->err,
                          "%s: %s: array of %llu strings at offset %zu cannot fit in the %zu bytes "
                          "left",
                          c->path, what, (unsigned long long)n, c->pos, remaining(c));
    if (n == 0) return 0;
    kv->arr_strs = malloc((size_t)n * sizeof *kv->arr_strs);
    if (!kv->arr_strs) return tk_err_set(c->err, "%s: out of memory", c->path);
    for (uint64_t i = 0; i < n; i++)
        if (rd_str(c, &kv->arr_strs[i], what)) return -1;
    return 0;
}

static int read_value(cursor *c, tk_gguf_kv *kv, const char *what) {
    const tk_gguf_vtype t = kv->type;
    const size_t es = vtype_size(t);
    if (es) {
        if (need(c, es, what)) return -1;
        const unsigned char *p = c->base + c->pos;
        if (t == TK_GGUF_F32 || t == TK_GGUF_F64) {
            kv->v.f = decode_float(p, t);
        } else if (t == TK_GGUF_BOOL) {
            if (p[0] > 1)
                return tk_err_set(c->err, "%s: %s: invalid bool value %u at offset %zu", c->path,
                                  what, p[0], c->pos);
            kv->v.b = p[0] != 0;
        } else if (vtype_is_signed(t)) {
            kv->v.i = sign_extend(load_le(p, (int)es), es);
        } else {
            kv->v.u = load_le(p, (int)es);
        }
        c->pos += es;
        return 0;
    }
    if (t == TK_GGUF_STRING) return rd_str(c, &kv->v.s, what);
    return read_array(c, kv, what);
}

/* ---- helpers ---- */

/* NUL-terminated copy of a (ptr, len) string; rejects embedded NULs, which
 * would make the key or name ambiguous. */
static char *dup_name(cursor *c, tk_gguf_str s, const char *what) {
    if (s.len == 0) {
        tk_err_set(c->err, "%s: %s is empty", c->path, what);
        return NULL;
    }
    if (memchr(s.ptr, 0, (size_t)s.len)) {
        tk_err_set(c->err, "%s: %s '%.*s' contains a NUL byte", c->path, what, (int)strnlen(s.ptr, 64),
                   s.ptr);
        return NULL;
    }
    char *p = malloc((size_t)s.len + 1);
    if (!p) {
        tk_err_set(c->err, "%s: out of memory", c->path);
        return NULL;
    }
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = 0;
    return p;
}

/* Grows *arr (of *cap elements of size es) so that index n is valid. */
static int grow(void **arr, size_t *cap, size_t n, size_t es) {
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    if (nc <= n) nc = n + 1;
    void *p = realloc(*arr, nc * es);
    if (!p) return -1;
    memset((char *)p + *cap * es, 0, (nc - *cap) * es);
    *arr = p;
    *cap = nc;
    return 0;
}

static int cmp_kv_ptr(const void *a, const void *b) {
    return strcmp((*(const tk_gguf_kv *const *)a)->key, (*(const tk_gguf_kv *const *)b)->key);
}

static int cmp_tensor_ptr(const void *a, const void *b) {
    return strcmp((*(const tk_tensor *const *)a)->name, (*(const tk_tensor *const *)b)->name);
}

static bool is_pow2(uint64_t v) {
    return v && !(v & (v - 1));
}

/* ---- parsing ---- */

static int parse_header(tk_gguf *g, cursor *c, uint64_t *n_tensors, uint64_t *n_kv) {
    if (c->size < 4 || memcmp(c->base, "GGUF", 4) != 0) {
        char shown[17] = {0};
        size_t n = c->size < 4 ? c->size : 4;
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = c->base[i];
            snprintf(shown + strlen(shown), sizeof shown - strlen(shown),
                     (ch >= 0x20 && ch < 0x7f) ? "%c" : "\\x%02x", ch);
        }
        return tk_err_set(c->err, "%s: not a GGUF file (magic '%s', expected 'GGUF')", c->path, shown);
    }
    c->pos = 4;
    if (rd_u32(c, &g->version, "version")) return -1;
    if (g->version == 1)
        return tk_err_set(c->err, "%s: GGUF version 1 is not supported (only versions 2 and 3)",
                          c->path);
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return tk_err_set(c->err, "%s: big-endian GGUF files are not supported", c->path);
    if (g->version != 2 && g->version != 3)
        return tk_err_set(c->err, "%s: unsupported GGUF version %u (only versions 2 and 3)", c->path,
                          g->version);
    if (rd_u64(c, n_tensors, "tensor count") || rd_u64(c, n_kv, "metadata count")) return -1;

    /* Plausibility before any allocation: the counts must fit in the bytes
     * that are left, at the smallest possible encoding per entry. */
    const size_t left = remaining(c);
    if (*n_kv > left / GGUF_MIN_KV_BYTES)
        return tk_err_set(c->err,
                          "%s: implausible n_kv %llu: %zu bytes left after the header cannot hold "
                          "that many metadata entries",
                          c->path, (unsigned long long)*n_kv, left);
    if (*n_tensors > left / GGUF_MIN_TENSOR_INFO_BYTES)
        return tk_err_set(c->err,
                          "%s: implausible n_tensors %llu: %zu bytes left after the header cannot "
                          "hold that many tensor infos",
                          c->path, (unsigned long long)*n_tensors, left);
    if (*n_kv * GGUF_MIN_KV_BYTES + *n_tensors * GGUF_MIN_TENSOR_INFO_BYTES > left)
        return tk_err_set(c->err,
                          "%s: implausible counts: %llu metadata entries and %llu tensor infos "
                          "cannot fit in %zu bytes",
                          c->path, (unsigned long long)*n_kv, (unsigned long long)*n_tensors, left);
    return 0;
}

static int parse_kvs(tk_gguf *g, cursor *c, uint64_t n_kv) {
    size_t cap = 0;
    char what[160];
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow((void **)&g->kvs, &cap, g->n_kv, sizeof *g->kvs))
            return tk_err_set(c->err, "%s: out of memory", c->path);
        tk_gguf_kv *kv = &g->kvs[g->n_kv];
        tk_gguf_str key;
        snprintf(what, sizeof what, "key of metadata entry %llu", (unsigned long long)i);
        if (rd_str(c, &key, what)) return -1;
        kv->key = dup_name(c, key, what);
        if (!kv->key) return -1;
        g->n_kv++; /* owned from here on, freed by tk_gguf_close */

        uint32_t type;
        snprintf(what, sizeof what, "metadata '%.100s'", kv->key);
        if (rd_u32(c, &type, what)) return -1;
        if (!vtype_valid(type))
            return tk_err_set(c->err, "%s: %s: unknown value type %u", c->path, what, type);
        kv->type = (tk_gguf_vtype)type;
        if (read_value(c, kv, what)) return -1;
    }

    g->kv_sorted = malloc((g->n_kv ? g->n_kv : 1) * sizeof *g->kv_sorted);
    if (!g->kv_sorted) return tk_err_set(c->err, "%s: out of memory", c->path);
    for (size_t i = 0; i < g->n_kv; i++) g->kv_sorted[i] = &g->kvs[i];
    qsort(g->kv_sorted, g->n_kv, sizeof *g->kv_sorted, cmp_kv_ptr);
    for (size_t i = 1; i < g->n_kv; i++)
        if (!strcmp(g->kv_sorted[i - 1]->key, g->kv_sorted[i]->key))
            return tk_err_set(c->err, "%s: duplicate metadata key '%.200s'", c->path,
                              g->kv_sorted[i]->key);
    return 0;
}

static int parse_alignment(tk_gguf *g, cursor *c) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const tk_gguf_kv *kv = tk_gguf_find(g, "general.alignment");
    if (!kv) return 0;
    if (!vtype_is_int(kv->type))
        return tk_err_set(c->err, "%s: general.alignment has type %s, expected an unsigned integer",
                          c->path, vtype_name(kv->type));
    if (vtype_is_signed(kv->type) ? kv->v.i <= 0 : kv->v.u == 0)
        return tk_err_set(c->err, "%s: general.alignment must be non-zero", c->path);
    uint64_t a = vtype_is_signed(kv->type) ? (uint64_t)kv->v.i : kv->v.u;
    /* Alignments beyond 1 GiB are nonsense and would only feed overflow. */
    if (!is_pow2(a) || a > ((uint64_t)1 << 30))
        return tk_err_set(c->err,
                          "%s: general.alignment %llu is invalid (must be a power of two, at most "
                          "2^30)",
                          c->path, (unsigned long long)a);
    g->alignment = (size_t)a;
    return 0;
}

static int parse_tensor_infos(tk_gguf *g, cursor *c, uint64_t n_tensors) {
    size_t cap = 0, cap_off = 0;
    char what[160];
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (grow((void **)&g->tensors, &cap, g->n_tensors, sizeof *g->tensors) ||
            grow((void **)&g->tensor_offsets, &cap_off, g->n_tensors, sizeof *g->tensor_offsets))
            return tk_err_set(c->err, "%s: out of memory", c->path);
        tk_tensor *t = &g->tensors[g->n_tensors];
        tk_gguf_str name;
        snprintf(what, sizeof what, "name of tensor %llu", (unsigned long long)i);
        if (rd_str(c, &name, what)) return -1;
        t->name = dup_name(c, name, what);
        if (!t->name) return -1;
        g->n_tensors++;

        snprintf(what, sizeof what, "tensor '%.100s'", t->name);
        uint32_t ndim;
        if (rd_u32(c, &ndim, what)) return -1;
        if (ndim < 1 || ndim > TK_MAX_DIMS)
            return tk_err_set(c->err, "%s: %s: n_dims %u out of range 1..%d", c->path, what, ndim,
                              TK_MAX_DIMS);
        t->ndim = (int)ndim;
        int64_t nel = 1;
        for (int d = 0; d < TK_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            uint64_t ne;
            if (rd_u64(c, &ne, what)) return -1;
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return tk_err_set(c->err, "%s: %s: dimension %u is %llu (must be >= 1 and < 2^63)",
                                  c->path, what, d, (unsigned long long)ne);
            t->ne[d] = (int64_t)ne;
            if (__builtin_mul_overflow(nel, t->ne[d], &nel))
                return tk_err_set(c->err, "%s: %s: element count overflows (dims %lld x ... x %lld)",
                                  c->path, what, (long long)t->ne[0], (long long)t->ne[d]);
        }
        uint32_t type;
        if (rd_u32(c, &type, what)) return -1;
        const tk_dtype_info *info = tk_dtype_get((int)type);
        if (!info || !info->can_dequant) {
            const char *gname = tk_dtype_ggml_name((int)type);
            if (gname)
                return tk_err_set(c->err, "%s: %s: tensor type %s (%u) is not supported", c->path,
                                  what, gname, type);
            return tk_err_set(c->err, "%s: %s: unknown tensor type %u", c->path, what, type);
        }
        t->type = (tk_dtype)type;
        if (t->ne[0] % info->block_elems)
            return tk_err_set(c->err,
                              "%s: %s: row length ne[0]=%lld is not a multiple of the %s block size "
                              "%d",
                              c->path, what, (long long)t->ne[0], info->name, info->block_elems);
        size_t row = tk_dtype_row_bytes(t->type, t->ne[0]);
        if (row == 0 || __builtin_mul_overflow(row, (uint64_t)(nel / t->ne[0]), &t->nbytes))
            return tk_err_set(c->err, "%s: %s: data size overflows", c->path, what);
        if (rd_u64(c, &g->tensor_offsets[g->n_tensors - 1], what)) return -1;
    }
    return 0;
}

static int place_tensors(tk_gguf *g, cursor *c) {
    /* Data starts at the next multiple of the alignment after the infos.
     * pos < 2^63 and alignment <= 2^30, so this cannot overflow. */
    g->data_off = (c->pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors == 0) return 0; /* vocab-only files may end right here */
    if (g->data_off > c->size)
        return tk_err_set(c->err, "%s: data section would start at offset %zu, past end of file (%zu bytes)",
                          c->path, g->data_off, c->size);
    const size_t data_size = c->size - g->data_off;
    for (size_t i = 0; i < g->n_tensors; i++) {
        tk_tensor *t = &g->tensors[i];
        const uint64_t off = g->tensor_offsets[i];
        if (off % g->alignment)
            return tk_err_set(c->err, "%s: tensor '%.100s': data offset %llu is not aligned to %zu",
                              c->path, t->name, (unsigned long long)off, g->alignment);
        if (off > data_size)
            return tk_err_set(c->err,
                              "%s: tensor '%.100s' data offset %llu (relative to the data section at "
                              "%zu) is past end of file (%zu bytes)",
                              c->path, t->name, (unsigned long long)off, g->data_off, c->size);
        if (t->nbytes > data_size - off)
            return tk_err_set(c->err,
                              "%s: tensor '%.100s' data [offset %zu, %zu bytes] extends past end of "
                              "file (%zu bytes)",
                              c->path, t->name, g->data_off + (size_t)off, t->nbytes, c->size);
        t->data = c->base + g->data_off + off;
    }

    g->tensor_sorted = malloc(g->n_tensors * sizeof *g->tensor_sorted);
    if (!g->tensor_sorted) return tk_err_set(c->err, "%s: out of memory", c->path);
    for (size_t i = 0; i < g->n_tensors; i++) g->tensor_sorted[i] = &g->tensors[i];
    qsort(g->tensor_sorted, g->n_tensors, sizeof *g->tensor_sorted, cmp_tensor_ptr);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->tensor_sorted[i - 1]->name, g->tensor_sorted[i]->name))
            return tk_err_set(c->err, "%s: duplicate tensor name '%.200s'", c->path,
                              g->tensor_sorted[i]->name);
    return 0;
}

int tk_gguf_open(const char *path, tk_gguf **out, tk_err *err) {
    *out = NULL;
    tk_gguf *g = calloc(1, sizeof *g);
    if (!g) return tk_err_set(err, "%s: out of memory", path);
    if (tk_mapfile_open(&g->map, path, err)) {
        free(g);
        return -1;
    }
    cursor c = {g->map.data, g->map.size, 0, path, err};
    uint64_t n_tensors = 0, n_kv = 0;
    if (parse_header(g, &c, &n_tensors, &n_kv) || parse_kvs(g, &c, n_kv) ||
        parse_alignment(g, &c) || parse_tensor_infos(g, &c, n_tensors) || place_tensors(g, &c)) {
        tk_gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

void tk_gguf_close(tk_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kvs[i].key);
        free(g->kvs[i].arr_strs);
    }
    free(g->kvs);
    for (size_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->tensors);
    free(g->tensor_offsets);
    free(g->kv_sorted);
    free(g->tensor_sorted);
    tk_mapfile_close(&g->map);
    free(g);
}

/* ---- accessors ---- */

uint32_t tk_gguf_version(const tk_gguf *g) {
    return g->version;
}

size_t tk_gguf_n_kv(const tk_gguf *g) {
    return g->n_kv;
}

const tk_gguf_kv *tk_gguf_kv_at(const tk_gguf *g, size_t i) {
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

static int cmp_key_kv(const void *key, const void *elem) {
    return strcmp(key, (*(const tk_gguf_kv *const *)elem)->key);
}

const tk_gguf_kv *tk_gguf_find(const tk_gguf *g, const char *key) {
    if (!g->kv_sorted || !key) return NULL;
    const tk_gguf_kv *const *p = bsearch(key, g->kv_sorted, g->n_kv, sizeof *g->kv_sorted, cmp_key_kv);
    return p ? *p : NULL;
}

int tk_gguf_get_int(const tk_gguf *g, const char *key, int64_t *out) {
    const tk_gguf_kv *kv = tk_gguf_find(g, key);
    if (!kv || !vtype_is_int(kv->type)) return -1;
    if (vtype_is_signed(kv->type)) {
        *out = kv->v.i;
    } else {
        if (kv->v.u > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)kv->v.u;
    }
    return 0;
}

int tk_gguf_get_float(const tk_gguf *g, const char *key, double *out) {
    const tk_gguf_kv *kv = tk_gguf_find(g, key);
    if (!kv) return -1;
    if (kv->type == TK_GGUF_F32 || kv->type == TK_GGUF_F64) {
        *out = kv->v.f;
    } else if (vtype_is_int(kv->type)) {
        *out = vtype_is_signed(kv->type) ? (double)kv->v.i : (double)kv->v.u;
    } else {
        return -1;
    }
    return 0;
}

int tk_gguf_get_bool(const tk_gguf *g, const char *key, bool *out) {
    const tk_gguf_kv *kv = tk_gguf_find(g, key);
    if (!kv || kv->type != TK_GGUF_BOOL) return -1;
    *out = kv->v.b;
    return 0;
}

char *tk_gguf_get_str(const tk_gguf *g, const char *key) {
    const tk_gguf_kv *kv = tk_gguf_find(g, key);
    if (!kv || kv->type != TK_GGUF_STRING) return NULL;
    char *s = malloc((size_t)kv->v.s.len + 1);
    if (!s) return NULL;
    memcpy(s, kv->v.s.ptr, (size_t)kv->v.s.len);
    s[kv->v.s.len] = 0;
    return s;
}

double tk_gguf_arr_f(const tk_gguf_kv *kv, uint64_t i) {
    if (kv->type != TK_GGUF_ARRAY || i >= kv->arr_n) return 0.0;
    const size_t es = vtype_size(kv->arr_type);
    if (!es) return 0.0;
    const unsigned char *p = kv->arr_data + i * es;
    if (kv->arr_type == TK_GGUF_F32 || kv->arr_type == TK_GGUF_F64) return decode_float(p, kv->arr_type);
    if (kv->arr_type == TK_GGUF_BOOL) return p[0] != 0;
    uint64_t u = load_le(p, (int)es);
    return vtype_is_signed(kv->arr_type) ? (double)sign_extend(u, es) : (double)u;
}

int64_t tk_gguf_arr_i(const tk_gguf_kv *kv, uint64_t i) {
    if (kv->type != TK_GGUF_ARRAY || i >= kv->arr_n) return 0;
    const size_t es = vtype_size(kv->arr_type);
    if (!es) return 0;
    const unsigned char *p = kv->arr_data + i * es;
    if (kv->arr_type == TK_GGUF_F32 || kv->arr_type == TK_GGUF_F64) {
        double d = decode_float(p, kv->arr_type);
        /* saturate: a float element is not an integer, but don't invoke UB */
        if (!(d >= -9.2e18 && d <= 9.2e18)) return d > 0 ? INT64_MAX : INT64_MIN;
        return (int64_t)d;
    }
    if (kv->arr_type == TK_GGUF_BOOL) return p[0] != 0;
    uint64_t u = load_le(p, (int)es);
    return vtype_is_signed(kv->arr_type) ? sign_extend(u, es) : (int64_t)u;
}

size_t tk_gguf_n_tensors(const tk_gguf *g) {
    return g->n_tensors;
}

const tk_tensor *tk_gguf_tensor_at(const tk_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

static int cmp_name_tensor(const void *key, const void *elem) {
    return strcmp(key, (*(const tk_tensor *const *)elem)->name);
}

const tk_tensor *tk_gguf_find_tensor(const tk_gguf *g, const char *name) {
    if (!g->tensor_sorted || !name) return NULL;
    const tk_tensor *const *p =
        bsearch(name, g->tensor_sorted, g->n_tensors, sizeof *g->tensor_sorted, cmp_name_tensor);
    return p ? *p : NULL;
}

size_t tk_gguf_alignment(const tk_gguf *g) {
    return g->alignment;
}

const tk_mapfile *tk_gguf_mapping(const tk_gguf *g) {
    return &g->map;
}

size_t tk_gguf_tensor_file_offset(const tk_gguf *g, size_t i) {
    return i < g->n_tensors ? g->data_off + (size_t)g->tensor_offsets[i] : 0;
}
