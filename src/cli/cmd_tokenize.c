#include <stdio.h>

#include "commands.h"

int tk_cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tokamak tokenize: not built yet\n");
    return 1;
}
