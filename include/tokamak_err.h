/* tokamak: the error type every fallible call of the public API fills.
 * Its own header so that library internals can use it without the whole
 * API (tokamak.h includes it). */
#ifndef TOKAMAK_ERR_H
#define TOKAMAK_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TK_PRINTF(a, b)
#endif

/* Every fallible call returns 0 (or a non-negative value) on success and -1
 * on failure, with a message naming the problem in the tk_err. */
typedef struct tk_err {
    char msg[512];
} tk_err;

/* Sets err->msg (err may be NULL) and returns -1, so that callers (clients
 * reporting their own errors too) can write `return tk_err_set(err, ...)`. */
int tk_err_set(tk_err *err, const char *fmt, ...) TK_PRINTF(2, 3);

#ifdef __cplusplus
}
#endif
#endif
