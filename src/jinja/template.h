/* Chat templates: a small interpreter for the subset of Jinja2 used by
 * model chat templates (Llama-2, Llama-3, ChatML, Mistral, Gemma...). */
#ifndef TK_CHAT_TEMPLATE_H
#define TK_CHAT_TEMPLATE_H

#include <stdbool.h>

#include "../util/err.h"

typedef struct tk_chat_msg {
    const char *role;     /* "system", "user", "assistant", ... */
    const char *content;
} tk_chat_msg;

typedef struct tk_chat_template tk_chat_template;

/* Parses a template; syntax errors name the line and column. */
int tk_chat_template_parse(const char *source, tk_chat_template **out, tk_err *err);
void tk_chat_template_free(tk_chat_template *t);

/* Renders with the variables messages, add_generation_prompt, bos_token and
 * eos_token.  raise_exception(msg) in the template becomes an error with
 * that message.  *out is malloc'd, NUL-terminated. */
int tk_chat_template_render(const tk_chat_template *t, const tk_chat_msg *msgs, int n_msgs,
                            bool add_generation_prompt, const char *bos_token, const char *eos_token,
                            char **out, tk_err *err);

#endif
