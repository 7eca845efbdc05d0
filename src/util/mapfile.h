/* Read-only memory mapping of a whole file. */
#ifndef TK_MAPFILE_H
#define TK_MAPFILE_H

#include <stddef.h>
#include "err.h"

typedef struct tk_mapfile {
    const unsigned char *data;
    size_t size;
} tk_mapfile;

int tk_mapfile_open(tk_mapfile *m, const char *path, tk_err *err);
void tk_mapfile_close(tk_mapfile *m);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
int tk_read_file(const char *path, char **out, size_t *len, tk_err *err);

#endif
