/* tokamak convert: llama2.c checkpoints and Hugging Face directories (or a
 * GGUF) to GGUF with the standard llama metadata keys (tk_convert). */
#include <stdio.h>

#include <tokamak.h>

#include "common/args.h"
#include "common/progress.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak convert SRC OUT.gguf [--type f32|f16|bf16|q8_0] [--tokenizer PATH]\n"
               "  SRC: llama2.c .bin (give --tokenizer tokenizer.bin), Hugging Face directory, or .gguf\n");
}

static void on_progress(void *user, int done, int total, const char *what) {
    tk_progress_update(user, done, total, done < total ? what : NULL);
}

int tk_cmd_convert(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL};
    tk_convert_params p = {.type = "f32"};
    const tk_opt opts[] = {
        TK_OPT_S("--type", &p.type),
        TK_OPT_S("--tokenizer", &p.tokenizer_path),
    };
    const tk_cli cli = {.cmd = "convert", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts), .pos = pos,
                        .max_pos = 2};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    const char *in = pos[0], *out = pos[1];
    if (tk_args_missing(&cli, out, "SRC and OUT")) return 2;
    tk_err err;
    if (tk_convert_check(&p, &err)) {
        fprintf(stderr, "tokamak convert: %s\n", err.msg);
        return 2;
    }
    tk_progress bar;
    tk_progress_begin(&bar, "convert", "tensors", 0, false);
    p.progress = on_progress;
    p.progress_user = &bar;
    tk_convert_report rep;
    const int rc = tk_convert(in, out, &p, &rep, &err);
    if (rc)
        tk_progress_abandon(&bar);
    else
        tk_progress_end(&bar, rep.n_tensors);
    if (rep.warning[0]) fprintf(stderr, "tokamak convert: warning: %s\n", rep.warning);
    if (rc) {
        fprintf(stderr, "tokamak convert: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s: %d tensors, %s\n", out, rep.n_tensors, p.type);
    return 0;
}
