/* GGUF v2/v3 reader (mmap) and writer.  The reader treats the file as
 * hostile: every count, length, offset and dimension is checked against the
 * file size before use. */
#ifndef TK_GGUF_H
#define TK_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "dtype.h"
#include "tensor.h"

typedef enum tk_gguf_vtype {
    TK_GGUF_U8 = 0, TK_GGUF_I8 = 1, TK_GGUF_U16 = 2, TK_GGUF_I16 = 3,
    TK_GGUF_U32 = 4, TK_GGUF_I32 = 5, TK_GGUF_F32 = 6, TK_GGUF_BOOL = 7,
    TK_GGUF_STRING = 8, TK_GGUF_ARRAY = 9, TK_GGUF_U64 = 10, TK_GGUF_I64 = 11,
    TK_GGUF_F64 = 12
} tk_gguf_vtype;

typedef struct tk_gguf_str {
    const char *ptr; /* points into the mapping; NOT NUL-terminated */
    uint64_t len;
} tk_gguf_str;

typedef struct tk_gguf_kv {
    char *key;            /* NUL-terminated copy */
    tk_gguf_vtype type;
    /* scalars */
    union { uint64_t u; int64_t i; double f; bool b; tk_gguf_str s; } v;
    /* arrays */
    tk_gguf_vtype arr_type;
    uint64_t arr_n;
    const unsigned char *arr_data; /* raw element data for fixed-size types */
    tk_gguf_str *arr_strs;         /* decoded for string arrays (arr_n entries) */
} tk_gguf_kv;

typedef struct tk_gguf tk_gguf;

int tk_gguf_open(const char *path, tk_gguf **out, tk_err *err);
void tk_gguf_close(tk_gguf *g);

uint32_t tk_gguf_version(const tk_gguf *g);
size_t tk_gguf_n_kv(const tk_gguf *g);
const tk_gguf_kv *tk_gguf_kv_at(const tk_gguf *g, size_t i);
const tk_gguf_kv *tk_gguf_find(const tk_gguf *g, const char *key);

/* Typed getters: return 0 and store the value if the key exists with a
 * compatible type (any integer type for int, any numeric for float), -1 if
 * missing or wrongly typed. */
int tk_gguf_get_int(const tk_gguf *g, const char *key, int64_t *out);
int tk_gguf_get_float(const tk_gguf *g, const char *key, double *out);
int tk_gguf_get_bool(const tk_gguf *g, const char *key, bool *out);
/* Returns a malloc'd NUL-terminated copy, or NULL if missing. */
char *tk_gguf_get_str(const tk_gguf *g, const char *key);
/* Reads element i of a numeric array as double / int64 (caller checks range). */
double tk_gguf_arr_f(const tk_gguf_kv *kv, uint64_t i);
int64_t tk_gguf_arr_i(const tk_gguf_kv *kv, uint64_t i);

size_t tk_gguf_n_tensors(const tk_gguf *g);
const tk_tensor *tk_gguf_tensor_at(const tk_gguf *g, size_t i);
const tk_tensor *tk_gguf_find_tensor(const tk_gguf *g, const char *name);
/* general.alignment in effect (32 unless the file says otherwise). */
size_t tk_gguf_alignment(const tk_gguf *g);
/* The read-only file mapping the tensors' data lies in. */
const struct tk_mapfile *tk_gguf_mapping(const tk_gguf *g);
/* Absolute file offset of tensor i's data (for tools and tests). */
size_t tk_gguf_tensor_file_offset(const tk_gguf *g, size_t i);

/* ---- writer ---- */
typedef struct tk_gguf_writer tk_gguf_writer;

tk_gguf_writer *tk_gguf_writer_new(void);
void tk_gguf_writer_free(tk_gguf_writer *w);
/* Keys/strings/arrays are copied; tensor data is referenced until write. */
int tk_gguf_set_u32(tk_gguf_writer *w, const char *key, uint32_t v);
int tk_gguf_set_i32(tk_gguf_writer *w, const char *key, int32_t v);
int tk_gguf_set_f32(tk_gguf_writer *w, const char *key, float v);
int tk_gguf_set_bool(tk_gguf_writer *w, const char *key, bool v);
int tk_gguf_set_str(tk_gguf_writer *w, const char *key, const char *v);
int tk_gguf_set_arr_str(tk_gguf_writer *w, const char *key, const char *const *v, size_t n);
int tk_gguf_set_arr_f32(tk_gguf_writer *w, const char *key, const float *v, size_t n);
int tk_gguf_set_arr_i32(tk_gguf_writer *w, const char *key, const int32_t *v, size_t n);
/* ne[0] is the innermost (row length) dimension, as in GGUF. */
int tk_gguf_add_tensor(tk_gguf_writer *w, const char *name, tk_dtype type, int ndim,
                       const int64_t *ne, const void *data, size_t nbytes);
int tk_gguf_write(tk_gguf_writer *w, const char *path, tk_err *err);

#endif
