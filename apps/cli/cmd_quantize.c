/* tokamak quantize: a model (GGUF F32/F16/BF16, llama2.c, HF directory) to
 * a quantized GGUF by round to nearest, GPTQ or AWQ. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <tokamak.h>

#include "common/args.h"
#include "common/progress.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tokamak quantize IN OUT.gguf --type TYPE [options]\n"
            "  IN: GGUF (F32/F16/BF16), llama2.c .bin (with --tokenizer) or Hugging Face directory\n"
            "  --type TYPE          q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_m nf4 (or f32 f16 bf16)\n"
            "  --method M           rtn (default), gptq or awq\n"
            "  --calib FILE         calibration text (gptq, awq)\n"
            "  --ctx N              tokens per calibration window (default 256)\n"
            "  --calib-windows N    use at most N windows of the calibration text (default: all)\n"
            "  --group G            32, 64 or 128 columns per scale (gptq/awq default 32; with rtn, layer\n"
            "                       matrices on G-column grids instead of llama.cpp's reference quantizer)\n"
            "  --act-order          gptq: columns by decreasing Hessian diagonal (static groups)\n"
            "  --damp F             gptq: damping as a fraction of mean(diag H) (default 0.01)\n"
            "  --awq-grid N         awq: alpha grid points in [0, 1] (default 20)\n"
            "  --awq-no-clip        awq: no weight clipping search\n"
            "  --nf4-double-quant   nf4: 8-bit absmax scales (NF4_DQ)\n"
            "  --pure               every matrix in TYPE (no Q6_K/Q8_0 output, no q4_k_m mix)\n"
            "  --allow-requantize   accept an already quantized input\n"
            "  --tokenizer PATH     tokenizer for llama2.c inputs (tokenizer.bin) or to override\n"
            "  -t, --threads N      worker threads (default: all cores)\n"
            "  -q, --quiet          no progress output\n");
}

/* One progress line per stage: calibration by layer, quantization by tensor. */
typedef struct prog_state {
    tk_progress bar;
    char stage[16];
    bool quiet;
} prog_state;

static void on_progress(void *user, const tk_quant_progress *p) {
    prog_state *s = user;
    if (s->quiet) return;
    if (!strcmp(p->stage, "write")) {
        if (p->done == 0) fprintf(stderr, "writing %s\n", p->what);
        return;
    }
    if (strcmp(s->stage, p->stage)) {
        snprintf(s->stage, sizeof s->stage, "%s", p->stage);
        tk_progress_begin(&s->bar, p->stage, !strcmp(p->stage, "quantize") ? "tensors" : "layers", 0, false);
    }
    tk_progress_update(&s->bar, p->done, p->total, p->what);
    if (p->done >= p->total) {
        tk_progress_end(&s->bar, p->done);
        s->stage[0] = 0;
    }
}

int tk_cmd_quantize(int argc, char **argv) {
    const char *type_name = NULL, *method = "rtn";
    tk_quant_params p;
    memset(&p, 0, sizeof p);
    bool dq = false, quiet = false;
    float damp = 0;
    const char *pos[2] = {NULL, NULL};
    const tk_opt opts[] = {
        TK_OPT_S("--type", &type_name),
        TK_OPT_S("--method", &method),
        TK_OPT_S("--calib", &p.calib_path),
        TK_OPT_I("--ctx", &p.ctx, 2, 1 << 20),
        TK_OPT_I("--calib-windows", &p.max_windows, 1, 1 << 24),
        TK_OPT_I("--group", &p.group, 1, 1 << 20),
        TK_OPT_ON("--act-order", &p.act_order),
        TK_OPT_F("--damp", &damp, 1e-6, 10),
        TK_OPT_I("--awq-grid", &p.awq_grid, 2, 1000),
        TK_OPT_ON("--awq-no-clip", &p.awq_no_clip),
        TK_OPT_ON("--nf4-double-quant", &dq),
        TK_OPT_ON("--pure", &p.pure),
        TK_OPT_ON("--allow-requantize", &p.allow_requantize),
        TK_OPT_S("--tokenizer", &p.tokenizer_path),
        TK_OPT_I("-t|--threads", &p.n_threads, 1, 1024),
        TK_OPT_ON("-q|--quiet", &quiet),
    };
    const tk_cli cli = {.cmd = "quantize", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts), .pos = pos,
                        .max_pos = 2};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    const char *in = pos[0], *out = pos[1];
    if (tk_args_missing(&cli, out, "IN and OUT") || tk_args_missing(&cli, type_name, "--type")) return 2;
    if (p.group && p.group != 32 && p.group != 64 && p.group != 128) {
        fprintf(stderr, "tokamak quantize: --group must be 32, 64 or 128 (got %d)\n", p.group);
        return 2;
    }
    p.damp = damp;
    p.type = type_name;
    tk_err err;
    if (tk_quant_type_check(type_name, &err)) {
        fprintf(stderr, "tokamak quantize: %s\n", err.msg);
        return 2;
    }
    if (dq) {
        if (strcasecmp(type_name, "nf4")) {
            fprintf(stderr, "tokamak quantize: --nf4-double-quant needs --type nf4\n");
            return 2;
        }
        p.type = "nf4_dq";
    }
    if (!strcmp(method, "rtn")) {
        p.method = TK_QMETHOD_RTN;
    } else if (!strcmp(method, "gptq")) {
        p.method = TK_QMETHOD_GPTQ;
    } else if (!strcmp(method, "awq")) {
        p.method = TK_QMETHOD_AWQ;
    } else {
        fprintf(stderr, "tokamak quantize: --method must be rtn, gptq or awq (got '%s')\n", method);
        return 2;
    }
    if (p.method == TK_QMETHOD_RTN && (p.calib_path || p.act_order)) {
        fprintf(stderr, "tokamak quantize: --calib/--act-order need --method gptq or awq\n");
        return 2;
    }
    prog_state ps = {.quiet = quiet};
    p.progress = on_progress;
    p.progress_user = &ps;
    tk_quant_report rep;
    if (tk_quantize_model(in, out, &p, &rep, &err)) {
        tk_progress_abandon(&ps.bar);
        fprintf(stderr, "tokamak quantize: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s: %s/%s, %d tensors, %zu bytes (%.2f MiB), %.3f bits per weight, %.1f s\n", out,
            rep.type, method, rep.n_tensors, rep.bytes, rep.bytes / 1048576.0,
            rep.n_params ? 8.0 * (double)rep.bytes / (double)rep.n_params : 0, rep.seconds);
    fprintf(stderr, "types:");
    for (int t = 0; t < rep.n_types; t++) fprintf(stderr, " %s x%d", rep.types[t].name, rep.types[t].n_tensors);
    fputc('\n', stderr);
    if (p.method != TK_QMETHOD_RTN)
        fprintf(stderr,
                "calibration: %d tokens in %d windows; layer output error (sum over matrices of "
                "||WX - QX||^2 per token): %s %.6g, round to nearest %.6g (%.1f%% less)\n",
                rep.n_calib_tokens, rep.n_windows, method, rep.method_error, rep.rtn_error,
                rep.rtn_error > 0 ? 100.0 * (1 - rep.method_error / rep.rtn_error) : 0);
    return 0;
}
