#include "panels.h"

#include <string.h>

/* A block's units: `lead` 2-byte fields first, `tail` 2-byte fields last,
 * 4-byte units between them. */
typedef struct block_units {
    int bytes, lead, tail;
} block_units;

static bool units_of(tk_dtype t, block_units *u) {
    switch (t) {
    case TK_Q4_0: *u = (block_units){18, 1, 0}; return true;   /* d, qs[16] */
    case TK_Q4_1: *u = (block_units){20, 2, 0}; return true;   /* d, m, qs[16] */
    case TK_Q5_0: *u = (block_units){22, 1, 0}; return true;   /* d, qh[4], qs[16] */
    case TK_Q5_1: *u = (block_units){24, 2, 0}; return true;   /* d, m, qh[4], qs[16] */
    case TK_Q8_0: *u = (block_units){34, 1, 0}; return true;   /* d, qs[32] */
    case TK_IQ4_NL: *u = (block_units){18, 1, 0}; return true; /* d, qs[16] */
    case TK_Q4_K: *u = (block_units){144, 2, 0}; return true;  /* d, dmin, scales[12], qs[128] */
    case TK_Q5_K: *u = (block_units){176, 2, 0}; return true;  /* d, dmin, scales[12], qh[32], qs[128] */
    case TK_Q6_K: *u = (block_units){210, 0, 1}; return true;  /* ql[128], qh[64], scales[16], d */
    default: return false;
    }
}

bool tk_panels_layout(tk_dtype t) {
    block_units u;
    return units_of(t, &u);
}

size_t tk_panels_bytes(int64_t rows, size_t row_bytes) {
    if (rows <= 0) return 0;
    const size_t panels = ((size_t)rows + TK_PANEL_ROWS - 1) / TK_PANEL_ROWS;
    if (row_bytes > SIZE_MAX / TK_PANEL_ROWS / panels) return 0;
    return panels * TK_PANEL_ROWS * row_bytes;
}

void tk_panels_pack(tk_dtype t, const void *w, size_t row_bytes, int64_t rows, void *out) {
    block_units u;
    if (!units_of(t, &u) || rows <= 0) return;
    const unsigned char *src = w;
    unsigned char *d = out; /* written in order: unit by unit, the 8 rows' copies of each */
    const size_t nb = row_bytes / (size_t)u.bytes, lead_end = 2 * (size_t)u.lead,
                 mid_end = (size_t)(u.bytes - 2 * u.tail);
    for (int64_t p = 0; p * TK_PANEL_ROWS < rows; p++) {
        const unsigned char *row[TK_PANEL_ROWS];
        for (int i = 0; i < TK_PANEL_ROWS; i++) {
            const int64_t r = p * TK_PANEL_ROWS + i < rows ? p * TK_PANEL_ROWS + i : rows - 1;
            row[i] = src + (size_t)r * row_bytes;
        }
        for (size_t o = 0; o < nb * (size_t)u.bytes; o += (size_t)u.bytes) {
            size_t x = 0;
            for (; x < lead_end; x += 2)
                for (int i = 0; i < TK_PANEL_ROWS; i++, d += 2) memcpy(d, row[i] + o + x, 2);
            for (; x < mid_end; x += 4)
                for (int i = 0; i < TK_PANEL_ROWS; i++, d += 4) memcpy(d, row[i] + o + x, 4);
            for (; x < (size_t)u.bytes; x += 2)
                for (int i = 0; i < TK_PANEL_ROWS; i++, d += 2) memcpy(d, row[i] + o + x, 2);
        }
    }
}
