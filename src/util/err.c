#include "err.h"

#include <stdio.h>
#include <string.h>

int tk_err_set(tk_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int tk_err_wrap(tk_err *err, const char *fmt, ...) {
    if (err) {
        char prefix[256], old[sizeof err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, err->msg, sizeof old);
        /* Truncation of an over-long message is fine (checked return
         * keeps -Wformat-truncation quiet). */
        if (snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old) < 0) err->msg[0] = 0;
    }
    return -1;
}
