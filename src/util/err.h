/* Error reporting: library functions return 0 / -1 and fill a tk_err with a
 * message naming the problem (tk_err and tk_err_set: include/tokamak_err.h).
 * Nothing below the CLI prints. */
#ifndef TK_ERR_H
#define TK_ERR_H

#include <stdarg.h>

#include <tokamak_err.h>

/* Prefixes the existing message with context: "context: old message". */
int tk_err_wrap(tk_err *err, const char *fmt, ...) TK_PRINTF(2, 3);

#endif
