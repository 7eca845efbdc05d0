/* A draft model must share the target's vocabulary: token ids are passed
 * between the two models as they are. */
#include <string.h>

#include "spec.h"

int tk_spec_check_vocab(int nt, const tk_tokenizer *a, int nd, const tk_tokenizer *b, tk_err *err) {
    if (nt != nd)
        return tk_err_set(err, "the draft model's vocabulary has %d tokens, the target's %d: they must be the same",
                          nd, nt);
    if (!a || !b) {
        /* Only sizes can be compared: accept when neither has a tokenizer
         * (token-id use); refuse when one is missing. */
        if (a || b)
            return tk_err_set(err, "the %s model has no tokenizer to compare vocabularies with (give one)",
                              a ? "draft" : "target");
        return 0;
    }
    if (tk_tokenizer_n_vocab(a) != tk_tokenizer_n_vocab(b))
        return tk_err_set(err, "the draft tokenizer has %d tokens, the target's %d", tk_tokenizer_n_vocab(b),
                          tk_tokenizer_n_vocab(a));
    if (tk_tokenizer_bos(a) != tk_tokenizer_bos(b) || tk_tokenizer_eos(a) != tk_tokenizer_eos(b))
        return tk_err_set(err, "special tokens differ: target BOS %d EOS %d, draft BOS %d EOS %d",
                          tk_tokenizer_bos(a), tk_tokenizer_eos(a), tk_tokenizer_bos(b), tk_tokenizer_eos(b));
    int n = tk_tokenizer_n_vocab(a);
    for (int id = 0; id < n; id++) {
        if (tk_tokenizer_is_eog(a, id) != tk_tokenizer_is_eog(b, id))
            return tk_err_set(err, "token %d ends generation for one model only", id);
        if (strcmp(tk_tokenizer_piece(a, id), tk_tokenizer_piece(b, id))) {
            /* Stored forms can differ between formats ("▁x" vs " x"): then
             * the decoded bytes decide. */
            char x[256], y[256];
            int lx = tk_token_to_bytes(a, -1, id, true, x, sizeof x);
            int ly = tk_token_to_bytes(b, -1, id, true, y, sizeof y);
            if (lx != ly || lx < 0 || memcmp(x, y, (size_t)lx))
                return tk_err_set(err, "token %d differs: target '%s', draft '%s' (the models must share one "
                                  "vocabulary)", id, tk_tokenizer_piece(a, id), tk_tokenizer_piece(b, id));
        }
    }
    return 0;
}
