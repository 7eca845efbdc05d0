/* Weights in the panel layout: a quantized matrix's rows interleaved eight
 * at a time, made once at load for the kernels that read eight rows
 * together (the AVX2 panel kernels; the AVX-512 16-row ones read two
 * adjacent panels as their 16 rows, and one token one panel at a time).
 * Those kernels otherwise transpose 16 bytes of 8 rows for every block they
 * read, which is most of the shuffle work of a one-token (decode) matmul.
 *
 * A row of a block type is a sequence of units: the block's 2-byte fields
 * (f16 scales and mins) and, for the rest of the block, 4 bytes at a time.
 * Panel p holds rows 8p .. 8p + 7 (the last panel repeats the matrix's
 * last row) in row_bytes * 8 bytes: the unit of f bytes at byte x of a row
 * is stored for the panel's rows i = 0..7 one after the other, at
 *     8 * x + i * f.
 * So 16 bytes at offset x of 8 rows, transposed into dwords, are the 128
 * bytes at 8 * x, and the 8 rows' f16 scale at x the 16 bytes there; rows
 * [r0, r1) with r0 a multiple of 8 start at byte r0 * row_bytes, as in the
 * row layout.  The integers and floats a kernel computes from either
 * layout are the same. */
#ifndef TK_PANELS_H
#define TK_PANELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../formats/dtype.h"

#define TK_PANEL_ROWS 8
/* longest row (elements) the panel kernels take: the legacy types' per-token
 * block data is held for at most 4096 blocks of 32 */
#define TK_PANELS_MAX_N (4096 * 32)

/* Whether type t has a panel layout. */
bool tk_panels_layout(tk_dtype t);

/* Bytes of the panel layout of `rows` rows of row_bytes (whole panels);
 * 0 on overflow. */
size_t tk_panels_bytes(int64_t rows, size_t row_bytes);

/* Writes the panel layout of the `rows` rows at w (row_bytes each, type t,
 * tk_panels_layout(t)) into out (tk_panels_bytes(rows, row_bytes) bytes). */
void tk_panels_pack(tk_dtype t, const void *w, size_t row_bytes, int64_t rows, void *out);

#endif
