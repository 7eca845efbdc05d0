/* A small blocking HTTP/1.1 client over plain TCP sockets, for the load
 * tester: one request per connection (Connection: close), response body
 * de-chunked and streamed to a callback as it arrives.  The server is
 * untrusted: header size, chunk-size lines and total time are bounded. */
#ifndef TK_HTTP_CLIENT_H
#define TK_HTTP_CLIENT_H

#include <stddef.h>

#include <tokamak.h>

typedef struct tk_url {
    char host[256];
    char port[8];
    char path[1024]; /* without a trailing slash; "" for the root */
} tk_url;

/* http://host[:port][/path]  (IPv6 literals in brackets). */
int tk_url_parse(const char *url, tk_url *u, tk_err *err);

/* Body bytes as they arrive; return nonzero to stop reading. */
typedef int (*tk_http_body_cb)(void *user, const char *data, size_t n);

/* Returns 0 once the response was read (or the callback stopped it) with
 * the HTTP status in *status; -1 on a connection, protocol or time-out
 * error.  timeout_s bounds the whole exchange. */
int tk_http_request(const tk_url *u, const char *method, const char *path, const char *api_key, const char *body,
                    size_t body_len, double timeout_s, int *status, tk_http_body_cb cb, void *user, tk_err *err);

#endif
