#include "safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h> /* tk_mapfile, tk_read_file */

struct tk_safetensors {
    char *path;
    tk_mapfile map;
    tk_st_tensor *tensors;
    int n_tensors;
    int *sorted;  /* indices into tensors, sorted by name (for find) */
};

typedef struct st_range {
    uint64_t begin, end;
    int idx;
} st_range;

static int dtype_size(const char *s, tk_dtype *type) {
    if (strcmp(s, "F32") == 0) { *type = TK_F32; return 4; }
    if (strcmp(s, "F16") == 0) { *type = TK_F16; return 2; }
    if (strcmp(s, "BF16") == 0) { *type = TK_BF16; return 2; }
    return 0;
}

/* dtypes the safetensors format defines but this reader does not handle. */
static int dtype_known_unsupported(const char *s) {
    static const char *const names[] = {
        "F64", "I64", "U64", "I32", "U32", "I16", "U16", "I8", "U8", "BOOL",
        "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0) return 1;
    return 0;
}

static uint64_t read_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* qsort has no context argument; sort pointers to tensors instead. */
static int cmp_tensor_name(const void *a, const void *b) {
    const tk_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

void tk_safetensors_close(tk_safetensors *st) {
    if (!st) return;
    if (st->tensors)
        for (int i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    free(st->tensors);
    free(st->sorted);
    tk_mapfile_close(&st->map);
    free(st->path);
    free(st);
}

const char *tk_safetensors_path(const tk_safetensors *st) { return st->path; }
int tk_safetensors_count(const tk_safetensors *st) { return st->n_tensors; }

const tk_st_tensor *tk_safetensors_get(const tk_safetensors *st, int i) {
    if (i < 0 || i >= st->n_tensors) return NULL;
    return &st->tensors[i];
}

const tk_st_tensor *tk_safetensors_find(const tk_safetensors *st, const char *name) {
    int lo = 0, hi = st->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const tk_st_tensor *t = &st->tensors[st->sorted[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

/* Parses one tensor entry into *t.  `data`/`data_size` describe the data
 * section.  Errors are set without the file prefix (the caller adds it). */
static int parse_entry(const char *name, json_t *v, const unsigned char *data,
                       uint64_t data_size, tk_st_tensor *t, uint64_t *begin_out,
                       uint64_t *end_out, tk_err *err) {
    if (!json_is_object(v)) return tk_err_set(err, "tensor '%s': entry is not an object", name);

    json_t *jd = json_object_get(v, "dtype");
    if (!jd) return tk_err_set(err, "tensor '%s': missing 'dtype'", name);
    if (!json_is_string(jd)) return tk_err_set(err, "tensor '%s': 'dtype' is not a string", name);
    const char *ds = json_string_value(jd);
    int esize = dtype_size(ds, &t->dtype);
    if (esize == 0) {
        if (dtype_known_unsupported(ds))
            return tk_err_set(err, "tensor '%s': unsupported dtype '%.32s' (supported: F32, F16, BF16)",
                              name, ds);
        return tk_err_set(err, "tensor '%s': unknown dtype '%.32s'", name, ds);
    }

    json_t *js = json_object_get(v, "shape");
    if (!js) return tk_err_set(err, "tensor '%s': missing 'shape'", name);
    if (!json_is_array(js)) return tk_err_set(err, "tensor '%s': 'shape' is not an array", name);
    size_t nd = json_array_size(js);
    if (nd > TK_MAX_DIMS)
        return tk_err_set(err, "tensor '%s': %zu dims (at most %d supported)", name, nd, TK_MAX_DIMS);
    t->ndim = (int)nd;
    for (int i = 0; i < TK_MAX_DIMS; i++) t->shape[i] = 1;
    int has_zero = 0;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d))
            return tk_err_set(err, "tensor '%s': shape[%zu] is not an integer", name, i);
        json_int_t dv = json_integer_value(d);
        if (dv < 0)
            return tk_err_set(err, "tensor '%s': negative dimension shape[%zu] = %lld", name, i,
                              (long long)dv);
        if ((uint64_t)dv > (uint64_t)INT64_MAX)
            return tk_err_set(err, "tensor '%s': dimension too large", name);
        t->shape[i] = (int64_t)dv;
        if (dv == 0) has_zero = 1;
    }
    /* Element count with overflow check; bound so that bytes fit in both
     * int64 and size_t. */
    uint64_t limit = (uint64_t)INT64_MAX;
    if ((uint64_t)SIZE_MAX < limit) limit = (uint64_t)SIZE_MAX;
    limit /= (uint64_t)esize;
    uint64_t n = 1;
    if (has_zero) {
        n = 0;
    } else {
        for (size_t i = 0; i < nd; i++) {
            uint64_t d = (uint64_t)t->shape[i];
            if (n > limit / d)
                return tk_err_set(err, "tensor '%s': element count overflows", name);
            n *= d;
        }
    }
    uint64_t nbytes = n * (uint64_t)esize;

    json_t *jo = json_object_get(v, "data_offsets");
    if (!jo) return tk_err_set(err, "tensor '%s': missing 'data_offsets'", name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return tk_err_set(err, "tensor '%s': 'data_offsets' is not an array of 2 integers", name);
    json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
    if (!json_is_integer(jb) || !json_is_integer(je))
        return tk_err_set(err, "tensor '%s': 'data_offsets' is not an array of 2 integers", name);
    json_int_t b = json_integer_value(jb), e = json_integer_value(je);
    if (b < 0 || e < 0)
        return tk_err_set(err, "tensor '%s': negative data_offsets [%lld, %lld]", name,
                          (long long)b, (long long)e);
    if (b > e)
        return tk_err_set(err, "tensor '%s': data_offsets begin %lld > end %lld", name,
                          (long long)b, (long long)e);
    if ((uint64_t)e > data_size)
        return tk_err_set(err,
                          "tensor '%s': data_offsets [%lld, %lld] out of range (data section is %llu bytes)",
                          name, (long long)b, (long long)e, (unsigned long long)data_size);
    if ((uint64_t)(e - b) != nbytes)
        return tk_err_set(err,
                          "tensor '%s': data_offsets span %lld bytes but dtype %s x shape needs %llu",
                          name, (long long)(e - b), ds, (unsigned long long)nbytes);
    t->data = data + b;
    t->nbytes = (size_t)nbytes;
    if (nbytes > 0 && ((uintptr_t)t->data % (uintptr_t)esize) != 0)
        return tk_err_set(err, "tensor '%s': data is not %d-byte aligned", name, esize);
    *begin_out = (uint64_t)b;
    *end_out = (uint64_t)e;
    return 0;
}

int tk_safetensors_open(const char *path, tk_safetensors **out, tk_err *err) {
    *out = NULL;
    tk_safetensors *st = calloc(1, sizeof *st);
    if (!st) return tk_err_set(err, "%s: out of memory", path);
    st->path = strdup(path);
    if (!st->path) {
        free(st);
        return tk_err_set(err, "%s: out of memory", path);
    }
    json_t *root = NULL;
    st_range *ranges = NULL;
    tk_st_tensor **byname = NULL;

    if (tk_mapfile_open(&st->map, path, err) != 0) goto fail_noprefix;
    const unsigned char *base = st->map.data;
    uint64_t fsize = st->map.size;
    if (fsize < 8) {
        tk_err_set(err, "file too small (%llu bytes) for a safetensors header",
                   (unsigned long long)fsize);
        goto fail;
    }
    uint64_t hlen = read_le64(base);
    if (hlen >= TK_SAFETENSORS_MAX_HEADER) {
        tk_err_set(err, "absurd header length %llu (limit %llu)", (unsigned long long)hlen,
                   (unsigned long long)TK_SAFETENSORS_MAX_HEADER);
        goto fail;
    }
    if (hlen > fsize - 8) {
        tk_err_set(err, "header length %llu runs past end of file (%llu bytes)",
                   (unsigned long long)hlen, (unsigned long long)fsize);
        goto fail;
    }
    if (hlen < 2) {
        tk_err_set(err, "header length %llu is too small for a JSON object",
                   (unsigned long long)hlen);
        goto fail;
    }

    json_error_t jerr;
    root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        tk_err_set(err, "invalid JSON header: %s (line %d, column %d)", jerr.text, jerr.line,
                   jerr.column);
        goto fail;
    }
    if (!json_is_object(root)) {
        tk_err_set(err, "JSON header is not an object");
        goto fail;
    }

    size_t nkeys = json_object_size(root);
    if (nkeys > (size_t)INT32_MAX) {
        tk_err_set(err, "too many tensors");
        goto fail;
    }
    st->tensors = calloc(nkeys ? nkeys : 1, sizeof *st->tensors);
    ranges = calloc(nkeys ? nkeys : 1, sizeof *ranges);
    if (!st->tensors || !ranges) {
        tk_err_set(err, "out of memory");
        goto fail;
    }
    const unsigned char *data = base + 8 + hlen;
    uint64_t data_size = fsize - 8 - hlen;

    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) continue;
        if (key[0] == 0) {
            tk_err_set(err, "tensor with empty name");
            goto fail;
        }
        tk_st_tensor *t = &st->tensors[st->n_tensors];
        uint64_t b = 0, e = 0;
        if (parse_entry(key, val, data, data_size, t, &b, &e, err) != 0) goto fail;
        t->name = strdup(key);
        if (!t->name) {
            tk_err_set(err, "out of memory");
            goto fail;
        }
        ranges[st->n_tensors].begin = b;
        ranges[st->n_tensors].end = e;
        ranges[st->n_tensors].idx = st->n_tensors;
        st->n_tensors++;
    }

    /* No two non-empty byte ranges may overlap. */
    qsort(ranges, (size_t)st->n_tensors, sizeof *ranges, cmp_range);
    int prev = -1;
    for (int i = 0; i < st->n_tensors; i++) {
        if (ranges[i].begin == ranges[i].end) continue;
        if (prev >= 0 && ranges[i].begin < ranges[prev].end) {
            tk_err_set(err, "tensors '%s' and '%s' have overlapping data ranges",
                       st->tensors[ranges[prev].idx].name, st->tensors[ranges[i].idx].name);
            goto fail;
        }
        prev = i;
    }

    /* Name index for find. */
    size_t nidx = st->n_tensors > 0 ? (size_t)st->n_tensors : 1;
    st->sorted = calloc(nidx, sizeof *st->sorted);
    byname = calloc(nidx, sizeof *byname);
    if (!st->sorted || !byname) {
        tk_err_set(err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < st->n_tensors; i++) byname[i] = &st->tensors[i];
    qsort(byname, (size_t)st->n_tensors, sizeof *byname, cmp_tensor_name);
    for (int i = 0; i < st->n_tensors; i++) st->sorted[i] = (int)(byname[i] - st->tensors);

    free(byname);
    free(ranges);
    json_decref(root);
    *out = st;
    return 0;

fail:
    tk_err_wrap(err, "%s", path);
fail_noprefix:
    free(byname);
    free(ranges);
    if (root) json_decref(root);
    tk_safetensors_close(st);
    return -1;
}
