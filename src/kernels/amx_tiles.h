/* AMX tile instructions for the kernels compiled with -mamx-tile (qgemm_amx.c,
 * attention_amx.c).  GCC 12's _tile_loadd does not tell the compiler that it
 * reads memory and _tile_loadconfig claims to read only 8 bytes of the
 * configuration, so stores to a B tile buffer or to the configuration could
 * be moved past them (or dropped); these wrappers say "memory".  Tile
 * numbers are literals. */
#ifndef TK_AMX_TILES_H
#define TK_AMX_TILES_H

#include <stdint.h>

/* The LDTILECFG operand (palette 1): bytes per row and rows of each tile. */
typedef struct tk_amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tk_amx_config;

static inline void tk_amx_load_config(const tk_amx_config *c) {
    __asm__ volatile("ldtilecfg\t%0" ::"m"(*c) : "memory");
}
static inline void tk_amx_release(void) { __asm__ volatile("tilerelease" ::: "memory"); }

#define TK_TILE_LOAD(t, base, stride)                                                                        \
    __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #t "|tileloadd\t%%tmm" #t ", [%0+%1*1]}" ::"r"(         \
                         (const void *)(base)),                                                              \
                     "r"((long)(stride))                                                                     \
                     : "memory")
#define TK_TILE_STORE(t, base, stride)                                                                       \
    __asm__ volatile("{tilestored\t%%tmm" #t ", (%0,%1,1)|tilestored\t[%0+%1*1], %%tmm" #t "}" ::"r"(        \
                         (void *)(base)),                                                                    \
                     "r"((long)(stride))                                                                     \
                     : "memory")
#define TK_TILE_ZERO(t) __asm__ volatile("tilezero\t%%tmm" #t ::)
/* c += a . b: bf16 pairs to fp32, and signed int8 quads to int32 */
#define TK_TILE_DPBF16PS(c, a, b)                                                                            \
    __asm__ volatile("{tdpbf16ps\t%%tmm" #b ", %%tmm" #a ", %%tmm" #c "|tdpbf16ps\t%%tmm" #c ", %%tmm" #a    \
                     ", %%tmm" #b "}" ::)
#define TK_TILE_DPBSSD(c, a, b)                                                                              \
    __asm__ volatile("{tdpbssd\t%%tmm" #b ", %%tmm" #a ", %%tmm" #c "|tdpbssd\t%%tmm" #c ", %%tmm" #a        \
                     ", %%tmm" #b "}" ::)

#endif
