/* GGUF v3 writer: collects metadata and tensors, then writes header, KVs,
 * tensor infos, zero padding to 32 bytes, and the tensor data, each tensor
 * padded to 32 bytes (as llama.cpp and the Python gguf package do, so that
 * readers that sum padded sizes find every byte they expect).
 *
 * The setters have no error argument; the first failure (invalid argument,
 * out of memory) is remembered and reported by tk_gguf_write. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"

#define WRITE_ALIGNMENT 32

typedef struct wkv {
    char *key;
    tk_gguf_vtype type;
    union { uint32_t u32; int32_t i32; float f32; bool b; } v;
    char *str;            /* TK_GGUF_STRING */
    tk_gguf_vtype arr_type;
    size_t arr_n;
    void *arr;            /* 4-byte elements, or char *[arr_n] for strings */
} wkv;

typedef struct wtensor {
    char *name;
    tk_dtype type;
    int ndim;
    int64_t ne[TK_MAX_DIMS];
    const void *data;
    size_t nbytes;
} wtensor;

struct tk_gguf_writer {
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *ts;
    size_t n_t, cap_t;
    char err[256]; /* first deferred error, empty if none */
};

tk_gguf_writer *tk_gguf_writer_new(void) {
    return calloc(1, sizeof(tk_gguf_writer));
}

static void free_kv_value(wkv *kv) {
    free(kv->str);
    if (kv->type == TK_GGUF_ARRAY && kv->arr_type == TK_GGUF_STRING) {
        char **s = kv->arr;
        for (size_t i = 0; i < kv->arr_n; i++) free(s[i]);
    }
    free(kv->arr);
    kv->str = NULL;
    kv->arr = NULL;
}

void tk_gguf_writer_free(tk_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free_kv_value(&w->kvs[i]);
        free(w->kvs[i].key);
    }
    free(w->kvs);
    for (size_t i = 0; i < w->n_t; i++) free(w->ts[i].name);
    free(w->ts);
    free(w);
}

static int fail(tk_gguf_writer *w, const char *fmt, ...) TK_PRINTF(2, 3);
static int fail(tk_gguf_writer *w, const char *fmt, ...) {
    if (!w->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err, sizeof w->err, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Returns the entry for key, creating it (or clearing the old value, so a
 * key set twice keeps only the last value). */
static wkv *kv_slot(tk_gguf_writer *w, const char *key) {
    if (!key || !key[0]) {
        fail(w, "metadata key is empty");
        return NULL;
    }
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kvs[i].key, key)) {
            free_kv_value(&w->kvs[i]);
            return &w->kvs[i];
        }
    if (w->n_kv == w->cap_kv) {
        size_t nc = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *p = realloc(w->kvs, nc * sizeof *p);
        if (!p) {
            fail(w, "out of memory adding key '%.200s'", key);
            return NULL;
        }
        w->kvs = p;
        w->cap_kv = nc;
    }
    wkv *kv = &w->kvs[w->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = strdup(key);
    if (!kv->key) {
        fail(w, "out of memory adding key '%.200s'", key);
        return NULL;
    }
    w->n_kv++;
    return kv;
}

int tk_gguf_set_u32(tk_gguf_writer *w, const char *key, uint32_t v) {
    wkv *kv = kv_slot(w, key);
    if (!kv) return -1;
    kv->type = TK_GGUF_U32;
    kv->v.u32 = v;
    return 0;
}

int tk_gguf_set_i32(tk_gguf_writer *w, const char *key, int32_t v) {
    wkv *kv = kv_slot(w, key);
    if (!kv) return -1;
    kv->type = TK_GGUF_I32;
    kv->v.i32 = v;
    return 0;
}

int tk_gguf_set_f32(tk_gguf_writer *w, const char *key, float v) {
    wkv *kv = kv_slot(w, key);
    if (!kv) return -1;
    kv->type = TK_GGUF_F32;
    kv->v.f32 = v;
    return 0;
}

int tk_gguf_set_bool(tk_gguf_writer *w, const char *key, bool v) {
    wkv *kv = kv_slot(w, key);
    if (!kv) return -1;
    kv->type = TK_GGUF_BOOL;
    kv->v.b = v;
    return 0;
}

int tk_gguf_set_str(tk_gguf_writer *w, const char *key, const char *v) {
    if (!v) return fail(w, "NULL string value for key '%.200s'", key ? key : "");
    wkv *kv = kv_slot(w, key);
    if (!kv) return -1;
    kv->type = TK_GGUF_STRING;
    kv->str = strdup(v);
    if (!kv->str) {
        kv->type = TK_GGUF_U8; /* keep the entry consistent */
        return fail(w, "out of memory setting '%.200s'", key);
    }
    return 0;
}

static int set_arr_fixed(tk_gguf_writer *w, const char *key, tk_gguf_vtype et, const void *v,
                         size_t n) {
    if (n && !v) return fail(w, "NULL array for key '%.200s'", key ? key : "");
    wkv *kv = kv_slot(w, key);
    if (!kv) return -1;
    kv->type = TK_GGUF_ARRAY;
    kv->arr_type = et;
    kv->arr_n = 0;
    if (n) {
        if (n > SIZE_MAX / 4 || !(kv->arr = malloc(n * 4)))
            return fail(w, "out of memory setting '%.200s'", key);
        memcpy(kv->arr, v, n * 4);
    }
    kv->arr_n = n;
    return 0;
}

int tk_gguf_set_arr_f32(tk_gguf_writer *w, const char *key, const float *v, size_t n) {
    return set_arr_fixed(w, key, TK_GGUF_F32, v, n);
}

int tk_gguf_set_arr_i32(tk_gguf_writer *w, const char *key, const int32_t *v, size_t n) {
    return set_arr_fixed(w, key, TK_GGUF_I32, v, n);
}

int tk_gguf_set_arr_str(tk_gguf_writer *w, const char *key, const char *const *v, size_t n) {
    if (n && !v) return fail(w, "NULL array for key '%.200s'", key ? key : "");
    for (size_t i = 0; i < n; i++)
        if (!v[i]) return fail(w, "NULL string in array '%.200s'", key ? key : "");
    wkv *kv = kv_slot(w, key);
    if (!kv) return -1;
    kv->type = TK_GGUF_ARRAY;
    kv->arr_type = TK_GGUF_STRING;
    kv->arr_n = 0;
    if (!n) return 0;
    char **s = calloc(n, sizeof *s);
    if (!s) return fail(w, "out of memory setting '%.200s'", key);
    kv->arr = s;
    for (size_t i = 0; i < n; i++) {
        if (!(s[i] = strdup(v[i]))) {
            kv->arr_n = i; /* free what was copied */
            return fail(w, "out of memory setting '%.200s'", key);
        }
    }
    kv->arr_n = n;
    return 0;
}

int tk_gguf_add_tensor(tk_gguf_writer *w, const char *name, tk_dtype type, int ndim,
                       const int64_t *ne, const void *data, size_t nbytes) {
    if (!name || !name[0]) return fail(w, "tensor name is empty");
    const tk_dtype_info *info = tk_dtype_get((int)type);
    if (!info) {
        return fail(w, "tensor '%.100s': unknown type %d", name, (int)type);
    }
    if (ndim < 1 || ndim > TK_MAX_DIMS || !ne) {
        return fail(w, "tensor '%.100s': n_dims %d out of range 1..%d", name, ndim,
                 TK_MAX_DIMS);
    }
    int64_t nel = 1;
    for (int d = 0; d < ndim; d++) {
        if (ne[d] < 1 || __builtin_mul_overflow(nel, ne[d], &nel)) {
            return fail(w, "tensor '%.100s': invalid dimension %d (%lld)", name, d,
                     (long long)ne[d]);
        }
    }
    size_t row = tk_dtype_row_bytes(type, ne[0]), want;
    if (!row || __builtin_mul_overflow(row, (uint64_t)(nel / ne[0]), &want)) {
        return fail(w, "tensor '%.100s': ne[0]=%lld is not a multiple of the %s block size %d",
                 name, (long long)ne[0], info->name, info->block_elems);
    }
    if (nbytes != want || (nbytes && !data)) {
        return fail(w, "tensor '%.100s': %zu data bytes given, its shape and type need %zu",
                 name, nbytes, want);
    }
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->ts[i].name, name)) return fail(w, "duplicate tensor name '%.200s'", name);
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *p = realloc(w->ts, nc * sizeof *p);
        if (!p) return fail(w, "out of memory adding tensor '%.200s'", name);
        w->ts = p;
        w->cap_t = nc;
    }
    wtensor *t = &w->ts[w->n_t];
    t->name = strdup(name);
    if (!t->name) return fail(w, "out of memory adding tensor '%.200s'", name);
    t->type = type;
    t->ndim = ndim;
    for (int d = 0; d < TK_MAX_DIMS; d++) t->ne[d] = d < ndim ? ne[d] : 1;
    t->data = data;
    t->nbytes = nbytes;
    w->n_t++;
    return 0;
}

/* ---- serialization ---- */

typedef struct out {
    FILE *f;
    uint64_t pos;
    int bad;
} out;

static void put(out *o, const void *p, size_t n) {
    if (o->bad || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->bad = errno ? errno : EIO;
    o->pos += n;
}

static void put_le(out *o, uint64_t v, int n) {
    unsigned char b[8];
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(o, b, (size_t)n);
}

static void put_str(out *o, const char *s) {
    size_t n = strlen(s);
    put_le(o, n, 8);
    put(o, s, n);
}

static void put_pad(out *o) {
    static const unsigned char zeros[WRITE_ALIGNMENT];
    size_t r = (size_t)(o->pos % WRITE_ALIGNMENT);
    if (r) put(o, zeros, WRITE_ALIGNMENT - r);
}

static uint64_t padded(uint64_t n) {
    return (n + WRITE_ALIGNMENT - 1) / WRITE_ALIGNMENT * WRITE_ALIGNMENT;
}

static void put_kv(out *o, const wkv *kv) {
    put_str(o, kv->key);
    put_le(o, kv->type, 4);
    uint32_t bits;
    switch (kv->type) {
    case TK_GGUF_U32: put_le(o, kv->v.u32, 4); break;
    case TK_GGUF_I32: put_le(o, (uint32_t)kv->v.i32, 4); break;
    case TK_GGUF_F32:
        memcpy(&bits, &kv->v.f32, 4);
        put_le(o, bits, 4);
        break;
    case TK_GGUF_BOOL: put_le(o, kv->v.b ? 1 : 0, 1); break;
    case TK_GGUF_STRING: put_str(o, kv->str); break;
    case TK_GGUF_ARRAY:
        put_le(o, kv->arr_type, 4);
        put_le(o, kv->arr_n, 8);
        if (kv->arr_type == TK_GGUF_STRING) {
            char *const *s = kv->arr;
            for (size_t i = 0; i < kv->arr_n; i++) put_str(o, s[i]);
        } else {
            const unsigned char *p = kv->arr;
            for (size_t i = 0; i < kv->arr_n; i++) { /* 4-byte elements, little-endian */
                uint32_t u;
                memcpy(&u, p + 4 * i, 4);
                put_le(o, u, 4);
            }
        }
        break;
    default: break;
    }
}

/* Writes to a temporary file beside the target and renames it into place,
 * so an existing file is never left half-written. */
int tk_gguf_write(tk_gguf_writer *w, const char *path, tk_err *err) {
    if (w->err[0]) return tk_err_set(err, "%s: cannot write GGUF: %s", path, w->err);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof tmp)
        return tk_err_set(err, "%s: path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return tk_err_set(err, "%s: cannot create: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        remove(tmp);
        return tk_err_set(err, "%s: cannot create: %s", path, strerror(errno));
    }
    out o = {f, 0, 0};
    errno = 0;

    put(&o, "GGUF", 4);
    put_le(&o, 3, 4);
    put_le(&o, w->n_t, 8);
    put_le(&o, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) put_kv(&o, &w->kvs[i]);

    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        put_str(&o, t->name);
        put_le(&o, (uint64_t)t->ndim, 4);
        for (int d = 0; d < t->ndim; d++) put_le(&o, (uint64_t)t->ne[d], 8);
        put_le(&o, (uint64_t)t->type, 4);
        put_le(&o, offset, 8);
        offset += padded(t->nbytes);
    }
    if (w->n_t) put_pad(&o);
    for (size_t i = 0; i < w->n_t; i++) {
        put(&o, w->ts[i].data, w->ts[i].nbytes);
        put_pad(&o);
    }

    int bad = o.bad;
    if (fclose(f) != 0 && !bad) bad = errno ? errno : EIO;
    if (bad) {
        remove(tmp);
        return tk_err_set(err, "%s: write failed: %s", path, strerror(bad));
    }
    /* mkstemp creates 0600; give the file the usual permissions */
    mode_t mask = umask(0);
    umask(mask);
    chmod(tmp, 0666 & ~mask);
    if (rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return tk_err_set(err, "%s: cannot rename the finished file into place: %s", path, strerror(e));
    }
    return 0;
}
