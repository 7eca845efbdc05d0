/* Each CLI subcommand is a thin client of the engine API. */
#ifndef TK_COMMANDS_H
#define TK_COMMANDS_H

int tk_cmd_run(int argc, char **argv);
int tk_cmd_chat(int argc, char **argv);
int tk_cmd_info(int argc, char **argv);
int tk_cmd_tokenize(int argc, char **argv);
int tk_cmd_logits(int argc, char **argv);
int tk_cmd_convert(int argc, char **argv);
int tk_cmd_bench(int argc, char **argv);
int tk_cmd_synth(int argc, char **argv);
int tk_cmd_serve(int argc, char **argv);
int tk_cmd_loadtest(int argc, char **argv);
int tk_cmd_router(int argc, char **argv);
int tk_cmd_quantize(int argc, char **argv);
int tk_cmd_perplexity(int argc, char **argv);

#endif
