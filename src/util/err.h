/* Error reporting: library functions return 0 / -1 and fill a tk_err with a
 * message naming the problem.  Nothing below the CLI prints. */
#ifndef TK_ERR_H
#define TK_ERR_H

#include <stdarg.h>

#include <tokamak.h> /* struct tk_err */

#if defined(__GNUC__)
#define TK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TK_PRINTF(a, b)
#endif

/* Sets err->msg (err may be NULL) and returns -1 so callers can write
 * `return tk_err_set(err, "...")`. */
int tk_err_set(tk_err *err, const char *fmt, ...) TK_PRINTF(2, 3);

/* Prefixes the existing message with context: "context: old message". */
int tk_err_wrap(tk_err *err, const char *fmt, ...) TK_PRINTF(2, 3);

#endif
