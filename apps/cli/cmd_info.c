/* tokamak info: what a model file holds. */
#include <stdio.h>
#include <string.h>

#include <tokamak.h>

#include "common/args.h"
#include "commands.h"

static void usage(FILE *f) { fprintf(f, "usage: tokamak info MODEL [--tokenizer PATH]\n"); }

int tk_cmd_info(int argc, char **argv) {
    const char *path = NULL, *tok_path = NULL;
    const tk_opt opts[] = {
        TK_OPT_S("--tokenizer", &tok_path),
        TK_OPT_S("-m|--model", &path),
    };
    const tk_cli cli = {.cmd = "info", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts), .pos = &path,
                        .max_pos = 1};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, path, "MODEL")) return 2;
    tk_engine_config cfg = {.model_path = path, .tokenizer_path = tok_path, .ctx_len = 1, .n_threads = 1,
                            .max_batch_tokens = 1};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "tokamak info: %s\n", err.msg);
        return 1;
    }
    tk_model_summary s;
    tk_engine_summary(e, &s);
    printf("file:          %s (%s)\n", path, s.format);
    if (s.name[0]) printf("name:          %s\n", s.name);
    printf("architecture:  %s\n", s.arch);
    printf("vocab:         %d\n", s.n_vocab);
    printf("dim:           %d\n", s.dim);
    printf("layers:        %d\n", s.n_layers);
    printf("heads:         %d (KV heads %d, head dim %d)\n", s.n_heads, s.n_kv_heads, s.head_dim);
    printf("ffn dim:       %d\n", s.ffn_dim);
    printf("context:       %d\n", s.ctx_len);
    printf("norm eps:      %g\n", s.norm_eps);
    printf("rope:          theta %g, %s, scaling %s\n", s.rope_theta, s.rope_style, s.rope_scaling);
    if (s.swa_window > 0 && s.n_swa_layers == s.n_layers)
        printf("attention:     all %d layers slide over %d positions (RoPE theta %g)\n", s.n_layers,
               s.swa_window, s.rope_theta_swa);
    else if (s.swa_window > 0)
        printf("attention:     %d of %d layers slide over %d positions (RoPE theta %g), the rest global\n",
               s.n_swa_layers, s.n_layers, s.swa_window, s.rope_theta_swa);
    if (s.kv_window_release > 0)
        printf("KV release:    blocks older than the %d-position window go back to the pool\n",
               s.kv_window_release);
    printf("output head:   %s\n", s.tied_output ? "tied to the embedding" : "separate");
    printf("parameters:    %lld (%.2f M)\n", (long long)s.n_params, s.n_params / 1e6);
    printf("weight bytes:  %zu (%.2f MiB), %.3f bits per weight\n", s.weight_bytes, s.weight_bytes / 1048576.0,
           s.n_params ? 8.0 * s.weight_bytes / s.n_params : 0);
    printf("tensor types:\n");
    for (int i = 0; i < s.n_types; i++)
        printf("  %-8s %4d tensors %12lld weights %12zu bytes  %6.3f bits/weight\n", s.types[i].name,
               s.types[i].n_tensors, (long long)s.types[i].n_elems, s.types[i].bytes,
               s.types[i].n_elems ? 8.0 * s.types[i].bytes / s.types[i].n_elems : 0);
    const tk_tokenizer *t = tk_engine_tokenizer(e);
    if (t)
        printf("tokenizer:     %s, %d tokens, BOS %d, EOS %d, add BOS %s\n",
               tk_tokenizer_kind(t) == TK_TOK_SPM ? "SentencePiece BPE" : "byte-level BPE", tk_tokenizer_n_vocab(t),
               tk_tokenizer_bos(t), tk_tokenizer_eos(t), tk_tokenizer_add_bos(t) ? "yes" : "no");
    else
        printf("tokenizer:     none (llama2.c models take --tokenizer tokenizer.bin)\n");
    const char *tmpl = tk_engine_chat_template(e), *origin = tk_engine_chat_template_origin(e);
    if (!tmpl)
        printf("chat template: none\n");
    else if (!strcmp(origin, "file"))
        printf("chat template: %zu bytes\n", strlen(tmpl));
    else
        printf("chat template: preset %s (the file has none; chosen from the vocabulary)\n", origin);
    tk_gen_defaults g;
    tk_engine_generation_defaults(e, &g);
    if (g.n_eos_ids > 0 || g.temperature >= 0 || g.top_p >= 0 || g.top_k >= 0) {
        /* generation_config.json: shown, not applied (the eos ids do stop generation) */
        printf("generation:   ");
        if (g.n_eos_ids > 0) {
            printf(" EOS");
            for (int i = 0; i < g.n_eos_ids; i++) printf("%s%d", i ? "," : " ", g.eos_ids[i]);
        }
        if (g.temperature >= 0) printf(" temperature %g", g.temperature);
        if (g.top_p >= 0) printf(" top-p %g", g.top_p);
        if (g.top_k >= 0) printf(" top-k %d", g.top_k);
        printf(" (generation_config.json defaults)\n");
    }
    tk_engine_close(e);
    return 0;
}
