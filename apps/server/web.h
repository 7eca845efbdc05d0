/* The built-in web pages: the chat at / and the dashboard at /dashboard,
 * with their scripts and style sheet.  The sources are apps/server/web/;
 * tools/cmake/embed_web.cmake turns them into tk_web_assets at build time,
 * so the binary serves them without files, network or CDN. */
#ifndef TK_WEB_H
#define TK_WEB_H

#include <stddef.h>

#include <microhttpd.h>

typedef struct tk_web_asset {
    const char *url;           /* e.g. "/", "/web/chat.js" */
    const char *file;          /* the source's name in apps/server/web/; its extension gives the type */
    const unsigned char *data;
    size_t len;
    const char *etag;          /* quoted, from the content's SHA-256 */
} tk_web_asset;

extern const tk_web_asset tk_web_assets[];
extern const int tk_web_n_assets;

/* The asset served at url, or NULL. */
const tk_web_asset *tk_web_find(const char *url);
/* Queues the asset (or a 304 when the request's If-None-Match has its
 * ETag) with its Content-Type and the pages' security and caching headers. */
enum MHD_Result tk_web_send(struct MHD_Connection *c, const tk_web_asset *a);

#endif
