/* tokamak synth: a GGUF with the exact shapes of a real model, seeded
 * random weights and a real tokenizer (tk_synth_model), so that benchmarks
 * run at 1B scale without downloads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "common/args.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak synth --like SHAPE --type q4_0|q8_0|q4_k_m|f16|... -o FILE [--seed S] [--shared DIR]\n"
               "shapes:");
    for (int i = 0; tk_synth_shape_name(i); i++) fprintf(f, " %s", tk_synth_shape_name(i));
    fprintf(f, "\n");
}

static void on_progress(void *user, int done, int total) {
    *(bool *)user = true;
    fprintf(stderr, "\rsynth: %d/%d tensors", done, total);
}

int tk_cmd_synth(int argc, char **argv) {
    const char *out = NULL;
    bool progressed = false;
    tk_synth_params p = {.seed = 1234, .shared_dir = getenv("TK_SHARED_DIR"), .progress = on_progress,
                         .progress_user = &progressed};
    if (!p.shared_dir) p.shared_dir = "../shared";
    const tk_opt opts[] = {
        TK_OPT_S("--like", &p.like),
        TK_OPT_S("--type", &p.type),
        TK_OPT_S("-o", &out),
        TK_OPT_U("--seed", &p.seed),
        TK_OPT_S("--shared", &p.shared_dir),
    };
    const tk_cli cli = {.cmd = "synth", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts)};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, p.like, "--like SHAPE") || tk_args_missing(&cli, p.type, "--type TYPE") ||
        tk_args_missing(&cli, out, "-o OUT"))
        return 2;
    bool known = false;
    for (int i = 0; tk_synth_shape_name(i); i++) known |= !strcmp(tk_synth_shape_name(i), p.like);
    if (!known) {
        fprintf(stderr, "tokamak synth: unknown shape '%s'\n", p.like);
        usage(stderr);
        return 2;
    }
    tk_err err;
    if (tk_synth_check(&p, &err)) {
        fprintf(stderr, "tokamak synth: %s\n", err.msg);
        return 2;
    }
    const int rc = tk_synth_model(out, &p, &err);
    if (progressed) fprintf(stderr, "\n");
    if (rc) {
        fprintf(stderr, "tokamak synth: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s (%s, %s)\n", out, p.like, p.type);
    return 0;
}
