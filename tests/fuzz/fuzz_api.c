/* The server's request parser (apps/server/api.c): the first byte chooses
 * the endpoint (completions or chat), the rest is the request body. */
#include "fuzz.h"
#include "server/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const tk_api_kind kind = data[0] & 1 ? TK_API_CHAT : TK_API_COMPLETIONS;
    tk_api_req req;
    tk_api_error e;
    if (tk_api_parse(kind, (const char *)data + 1, size - 1, "fuzz-model", 512, &req, &e) == 0) {
        tk_api_req_free(&req);
    } else {
        free(tk_api_error_json(&e));
    }
    return 0;
}
