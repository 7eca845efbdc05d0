/* Reader for one .safetensors file (Hugging Face).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON mapping
 * tensor names to {dtype, shape, data_offsets}, then the data section.
 * The file is memory-mapped; tensor data points into the mapping and stays
 * valid until tk_safetensors_close.
 *
 * The file is treated as hostile: the header length, every shape (at most
 * TK_MAX_DIMS dims, overflow-checked element count), every byte range
 * (inside the data section, length == elements x dtype size, aligned to the
 * element size) and the ranges against each other (no overlap) are checked
 * before anything is exposed.  Supported dtypes: F32, F16, BF16. */
#ifndef TK_SAFETENSORS_H
#define TK_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "dtype.h"
#include "tensor.h"

/* Largest JSON header accepted (same bound as the reference reader). */
#define TK_SAFETENSORS_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef struct tk_st_tensor {
    const char *name;            /* as in the file, e.g. "model.norm.weight" */
    tk_dtype dtype;              /* TK_F32, TK_F16 or TK_BF16 */
    int ndim;                    /* 0..TK_MAX_DIMS */
    int64_t shape[TK_MAX_DIMS];  /* file order: shape[0] outermost; unused = 1 */
    const void *data;            /* inside the mapping */
    size_t nbytes;
} tk_st_tensor;

typedef struct tk_safetensors tk_safetensors;

/* Maps and validates `path`.  On failure *out is NULL and err names the
 * file and the problem. */
int tk_safetensors_open(const char *path, tk_safetensors **out, tk_err *err);
/* Unmaps and frees; NULL is fine. */
void tk_safetensors_close(tk_safetensors *st);

/* Path the file was opened with. */
const char *tk_safetensors_path(const tk_safetensors *st);
/* Tensors in header order (metadata entry excluded). */
int tk_safetensors_count(const tk_safetensors *st);
const tk_st_tensor *tk_safetensors_get(const tk_safetensors *st, int i);
/* NULL if absent. */
const tk_st_tensor *tk_safetensors_find(const tk_safetensors *st, const char *name);

#endif
