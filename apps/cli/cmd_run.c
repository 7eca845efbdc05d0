/* tokamak run: generate text from a prompt, streaming it to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "common/args.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tokamak run -m MODEL [-p PROMPT | -f FILE] [options]\n"
            "  -m, --model PATH      .gguf, llama2.c .bin, or Hugging Face directory\n"
            "  --tokenizer PATH      tokenizer.bin / tokenizer.json (needed for llama2.c models)\n"
            "  -p, --prompt TEXT     prompt text\n"
            "  -f, --file PATH       read the prompt from a file\n"
            "  -n, --n-predict N     tokens to generate (default 128; -1: until EOS/context)\n"
            "  --temp T              temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K             (default 40; 0 = off)\n"
            "  --top-p P             (default 0.95; 1 = off)\n"
            "  --min-p P             (default 0.05; 0 = off)\n"
            "  --repeat-penalty R    (default 1 = off)   --repeat-last-n N (default 64)\n"
            "  --presence-penalty X  --frequency-penalty X   (default 0)\n"
            "  --seed S              RNG seed (same seed, same output)\n"
            "  -c, --ctx-size N      context length (default: the model's)\n"
            "  -t, --threads N       threads (default: all cores)\n"
            "  --kv-type T           KV cache storage: f16 (default), f32, q8_0\n"
            "%s"
            "  --no-bos              do not prepend BOS\n"
            "  --ignore-eos          keep generating past end-of-generation tokens\n"
            "  --chat                the prompt is one user message: render it through the model's chat\n"
            "                        template (its file's, else the preset its vocabulary calls for) and\n"
            "                        print the answer\n"
            "  --system TEXT         with --chat: a system message before it\n"
            "constrained output (docs/grammar.md; at most one):\n"
            "  --json                any JSON object\n"
            "  --json-schema FILE    JSON text valid against the JSON Schema in FILE\n"
            "  --regex R             text the regular expression R matches whole\n"
            "  --grammar FILE        text of the GBNF grammar in FILE (rule root)\n"
            "speculative decoding:\n"
            "%s",
            tk_tp_usage, tk_spec_usage);
}

/* --chat: the prompt as one user turn (after an optional system message),
 * rendered by the model's chat template with the generation prompt.  BOS is
 * not prepended again when the template writes it. */
static int chat_prompt(const tk_engine *e, const char *system, const char *user, tk_gen_params *gp, char **out) {
    const char *src = tk_engine_chat_template(e);
    if (!src) {
        fprintf(stderr, "tokamak run: --chat: the model has no chat template (none in its file, and its vocabulary "
                        "fits none of the built-in presets); run without --chat\n");
        return -1;
    }
    const tk_tokenizer *t = tk_engine_tokenizer(e);
    int bos = tk_tokenizer_bos(t), eos = tk_tokenizer_eos(t);
    const char *bos_text = bos >= 0 ? tk_tokenizer_piece(t, bos) : NULL;
    tk_chat_msg msgs[2] = {{"system", system}, {"user", user}};
    tk_chat_template *tmpl;
    tk_err err;
    int rc = tk_chat_template_parse(src, &tmpl, &err);
    if (!rc)
        rc = tk_chat_template_render(tmpl, system ? msgs : msgs + 1, system ? 2 : 1, true, bos_text,
                                     eos >= 0 ? tk_tokenizer_piece(t, eos) : NULL, out, &err);
    tk_chat_template_free(tmpl);
    if (rc) {
        fprintf(stderr, "tokamak run: --chat: chat template (%s): %s\n", tk_engine_chat_template_origin(e), err.msg);
        return -1;
    }
    if (bos_text && *bos_text && !strncmp(*out, bos_text, strlen(bos_text))) gp->add_bos = false;
    return 0;
}

static int write_text(void *user, const char *text, int len) {
    (void)user;
    fwrite(text, 1, (size_t)len, stdout);
    fflush(stdout);
    return 0;
}

int tk_cmd_run(int argc, char **argv) {
    tk_engine_config cfg = {0};
    tk_gen_params gp = {.max_tokens = 128, .add_bos = true};
    tk_sampling_defaults(&gp.sampling);
    const char *prompt = NULL, *prompt_file = NULL, *system = NULL;
    bool chat = false, json = false;
    const char *schema_file = NULL, *regex = NULL, *grammar_file = NULL;
    tk_spec_args spec = {0};
    const tk_opt opts[] = {
        TK_OPT_S("-m|--model", &cfg.model_path),
        TK_OPT_S("--tokenizer", &cfg.tokenizer_path),
        TK_OPT_S("-p|--prompt", &prompt),
        TK_OPT_S("-f|--file", &prompt_file),
        TK_OPT_I("-n|--n-predict", &gp.max_tokens, -1, 1 << 30),
        TK_OPTS_SAMPLING(&gp.sampling),
        TK_OPT_F("--presence-penalty", &gp.sampling.presence_penalty, -2, 2),
        TK_OPT_F("--frequency-penalty", &gp.sampling.frequency_penalty, -2, 2),
        TK_OPT_U("--seed", &gp.sampling.seed),
        TK_OPT_I("-c|--ctx-size", &cfg.ctx_len, 1, 1 << 24),
        TK_OPT_I("-t|--threads", &cfg.n_threads, 1, 1024),
        TK_OPT_S("--kv-type", &cfg.kv_type),
        TK_OPT_I("--tp", &cfg.tp, 1, TK_TP_MAX),
        TK_OPT_F("--tp-timeout", &cfg.tp_timeout, 0.001, 1e6),
        TK_OPT_OFF("--no-bos", &gp.add_bos),
        TK_OPT_ON("--ignore-eos", &gp.ignore_eos),
        TK_OPT_ON("--chat", &chat),
        TK_OPT_S("--system", &system),
        TK_OPT_ON("--json", &json),
        TK_OPT_S("--json-schema", &schema_file),
        TK_OPT_S("--regex", &regex),
        TK_OPT_S("--grammar", &grammar_file),
    };
    const tk_cli cli = {.cmd = "run", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts), .spec = &spec};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, cfg.model_path, "-m MODEL")) return 2;
    if (!!prompt == !!prompt_file) {
        fprintf(stderr, "tokamak run: give exactly one of -p PROMPT or -f FILE\n");
        return 2;
    }
    if (system && !chat) {
        fprintf(stderr, "tokamak run: --system needs --chat\n");
        return 2;
    }
    if (json + !!schema_file + !!regex + !!grammar_file > 1) {
        fprintf(stderr, "tokamak run: give at most one of --json, --json-schema, --regex, --grammar\n");
        return 2;
    }
    tk_err err;
    char *file_text = NULL, *chat_text = NULL, *constraint_text = NULL;
    if (prompt_file) {
        if (tk_read_file(prompt_file, &file_text, NULL, &err)) {
            fprintf(stderr, "tokamak run: %s\n", err.msg);
            return 1;
        }
        prompt = file_text;
    }
    const char *cfile = schema_file ? schema_file : grammar_file;
    if (cfile && tk_read_file(cfile, &constraint_text, NULL, &err)) {
        fprintf(stderr, "tokamak run: %s\n", err.msg);
        free(file_text);
        return 1;
    }
    gp.constraint.kind = json ? TK_CONSTRAINT_JSON : schema_file ? TK_CONSTRAINT_JSON_SCHEMA
                         : regex ? TK_CONSTRAINT_REGEX : grammar_file ? TK_CONSTRAINT_GRAMMAR : TK_CONSTRAINT_NONE;
    gp.constraint.text = regex ? regex : constraint_text;
    tk_spec_args_apply(&spec, &cfg);
    cfg.require_tokenizer = true;
    tk_engine *e;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "tokamak run: %s\n", err.msg);
        free(file_text);
        free(constraint_text);
        return 1;
    }
    if (tk_engine_tp_rank(e) > 0) {
        free(file_text);
        return tk_tp_follow_cmd("run", e);
    }
    if (chat && chat_prompt(e, system, prompt, &gp, &chat_text)) {
        tk_engine_close(e);
        free(file_text);
        free(constraint_text);
        return 1;
    }
    tk_gen_stats st;
    int rc = tk_engine_generate(e, chat ? chat_text : prompt, &gp, write_text, NULL, &st, &err);
    printf("\n");
    fflush(stdout);
    if (rc) {
        fprintf(stderr, "tokamak run: %s\n", err.msg);
    } else {
        tk_model_summary ms;
        tk_engine_summary(e, &ms);
        fprintf(stderr, "\nprompt: %d tokens in %.3f s (%.1f tokens/s)\n", st.n_prompt, st.prompt_seconds,
                st.prompt_seconds > 0 ? st.n_prompt / st.prompt_seconds : 0);
        fprintf(stderr, "generation: %d tokens in %.3f s (%.1f tokens/s), stopped by %s\n", st.n_generated,
                st.gen_seconds, st.gen_seconds > 0 ? st.n_generated / st.gen_seconds : 0, st.stop_reason);
        if (st.spec_target_passes > 0) tk_print_spec_stats(stderr, e, st.spec_drafted, st.spec_accepted,
                                                           st.spec_target_passes, st.n_generated);
        fprintf(stderr, "memory: weights %.1f MiB (panel layout %.1f MiB), KV cache %.1f MiB, peak RSS %.1f MiB\n",
                ms.weight_bytes / 1048576.0, ms.panel_bytes / 1048576.0, ms.kv_bytes / 1048576.0,
                tk_peak_rss() / 1048576.0);
    }
    tk_engine_close(e);
    free(file_text);
    free(chat_text);
    free(constraint_text);
    return rc ? 1 : 0;
}
