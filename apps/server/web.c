/* Serving the embedded web pages (web.h). */
#include <stdbool.h>
#include <string.h>

#include "web.h"

/* Scripts and styles come from this origin's own files only (no inline
 * code, no other origin); fetches go to this origin (the API). */
static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const tk_web_asset *tk_web_find(const char *url) {
    for (int i = 0; i < tk_web_n_assets; i++)
        if (!strcmp(tk_web_assets[i].url, url)) return &tk_web_assets[i];
    return NULL;
}

static const char *content_type(const char *file) {
    static const struct {
        const char *ext, *type;
    } types[] = {{".html", "text/html; charset=utf-8"},
                 {".js", "text/javascript; charset=utf-8"},
                 {".css", "text/css; charset=utf-8"},
                 {".svg", "image/svg+xml"}};
    const char *dot = strrchr(file, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(dot, types[i].ext)) return types[i].type;
    return "application/octet-stream";
}

enum MHD_Result tk_web_send(struct MHD_Connection *c, const tk_web_asset *a) {
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    bool fresh = inm && strstr(inm, a->etag);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(fresh ? 0 : a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type(a->file));
    MHD_add_response_header(resp, "Content-Security-Policy", CSP);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    /* Cached, but revalidated on each use: a rebuilt server's pages show at once. */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, a->etag);
    enum MHD_Result rc = MHD_queue_response(c, fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return rc;
}
