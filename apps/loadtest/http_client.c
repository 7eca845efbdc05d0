#include "http_client.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/strbuf.h"

#define MAX_HEADER_BYTES (64 * 1024)

int tk_url_parse(const char *url, tk_url *u, tk_err *err) {
    memset(u, 0, sizeof *u);
    if (strncmp(url, "http://", 7)) return tk_err_set(err, "URL must start with http:// (got '%s')", url);
    const char *p = url + 7, *host_end, *rest;
    if (*p == '[') {
        host_end = strchr(p, ']');
        if (!host_end) return tk_err_set(err, "bad IPv6 literal in '%s'", url);
        p++;
        rest = host_end + 1;
    } else {
        host_end = p + strcspn(p, ":/");
        rest = host_end;
    }
    size_t hl = (size_t)(host_end - p);
    if (hl == 0 || hl >= sizeof u->host) return tk_err_set(err, "bad host in '%s'", url);
    memcpy(u->host, p, hl);
    snprintf(u->port, sizeof u->port, "80");
    if (*rest == ':') {
        rest++;
        size_t pl = strspn(rest, "0123456789");
        if (pl == 0 || pl > 5 || atoi(rest) > 65535) return tk_err_set(err, "bad port in '%s'", url);
        memcpy(u->port, rest, pl);
        u->port[pl] = 0;
        rest += pl;
    }
    if (*rest && *rest != '/') return tk_err_set(err, "bad URL '%s'", url);
    size_t len = strlen(rest);
    while (len > 0 && rest[len - 1] == '/') len--;
    if (len >= sizeof u->path) return tk_err_set(err, "URL path too long");
    memcpy(u->path, rest, len);
    u->path[len] = 0;
    return 0;
}

static int wait_fd(int fd, short ev, double deadline, tk_err *err) {
    for (;;) {
        double left = deadline - tk_clock_seconds(TK_CLOCK_WALL);
        if (left <= 0) return tk_err_set(err, "timed out");
        struct pollfd pf = {.fd = fd, .events = ev};
        int rc = poll(&pf, 1, (int)(left * 1000) + 1);
        if (rc > 0) return 0;
        if (rc < 0 && errno != EINTR) return tk_err_set(err, "poll: %s", strerror(errno));
    }
}

static int connect_to(const tk_url *u, double deadline, tk_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc) return tk_err_set(err, "cannot resolve %s: %s", u->host, gai_strerror(rc));
    int fd = -1;
    tk_err_set(err, "cannot connect to %s:%s", u->host, u->port);
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline, err) == 0) {
            int e = 0;
            socklen_t el = sizeof e;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0) break;
            tk_err_set(err, "cannot connect to %s:%s: %s", u->host, u->port, strerror(e));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static int send_all(int fd, const char *p, size_t n, double deadline, tk_err *err) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT, deadline, err)) return -1;
        } else {
            return tk_err_set(err, "send: %s", strerror(errno));
        }
    }
    return 0;
}

/* Response body decoding: identity (length or until close) or chunked. */
typedef struct body_dec {
    bool chunked;
    long long remaining;   /* identity with a length: bytes left; -1: until close */
    int state;             /* chunked: 0 size line, 1 data, 2 CRLF after data, 3 trailers, 4 done */
    char line[80];
    size_t line_len;
    unsigned long long chunk_left;
    bool done, stopped;
    tk_http_body_cb cb;
    void *user;
} body_dec;

static int deliver(body_dec *d, const char *p, size_t n) {
    if (n && !d->stopped && d->cb && d->cb(d->user, p, n)) d->stopped = true;
    return 0;
}

static int feed_body(body_dec *d, const char *p, size_t n, tk_err *err) {
    if (!d->chunked) {
        if (d->remaining >= 0 && (long long)n > d->remaining) n = (size_t)d->remaining;
        deliver(d, p, n);
        if (d->remaining >= 0) {
            d->remaining -= (long long)n;
            if (d->remaining == 0) d->done = true;
        }
        return 0;
    }
    size_t i = 0;
    while (i < n && !d->done) {
        if (d->state == 0 || d->state == 2 || d->state == 3) {
            char c = p[i++];
            if (c != '\n') {
                if (d->line_len + 1 >= sizeof d->line) return tk_err_set(err, "chunk line too long");
                d->line[d->line_len++] = c;
                continue;
            }
            if (d->line_len && d->line[d->line_len - 1] == '\r') d->line_len--;
            d->line[d->line_len] = 0;
            size_t len = d->line_len;
            d->line_len = 0;
            if (d->state == 2) {
                if (len) return tk_err_set(err, "bad chunk terminator");
                d->state = 0;
            } else if (d->state == 3) {
                if (len == 0) d->done = true;
            } else {
                char *end;
                errno = 0;
                unsigned long long sz = strtoull(d->line, &end, 16);
                if (end == d->line || errno || (*end && *end != ';' && *end != ' '))
                    return tk_err_set(err, "bad chunk size line");
                if (sz == 0) {
                    d->state = 3;
                } else {
                    d->chunk_left = sz;
                    d->state = 1;
                }
            }
        } else {
            size_t take = n - i;
            if (take > d->chunk_left) take = (size_t)d->chunk_left;
            deliver(d, p + i, take);
            i += take;
            d->chunk_left -= take;
            if (d->chunk_left == 0) d->state = 2;
        }
    }
    return 0;
}

int tk_http_request(const tk_url *u, const char *method, const char *path, const char *api_key, const char *body,
                    size_t body_len, double timeout_s, int *status, tk_http_body_cb cb, void *user, tk_err *err) {
    double deadline = tk_clock_seconds(TK_CLOCK_WALL) + timeout_s;
    *status = 0;
    int fd = connect_to(u, deadline, err);
    if (fd < 0) return -1;
    tk_strbuf req = {0};
    tk_strbuf_printf(&req, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: tokamak-loadtest\r\nAccept: */*\r\n"
                         "Connection: close\r\n",
                   method, path, u->host, u->port);
    if (api_key) tk_strbuf_printf(&req, "Authorization: Bearer %s\r\n", api_key);
    if (body) tk_strbuf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n", body_len);
    tk_strbuf_adds(&req, "\r\n");
    if (body) tk_strbuf_add(&req, body, body_len);
    int rc = -1;
    tk_strbuf head = {0};
    if (req.failed) {
        tk_err_set(err, "out of memory");
        goto out;
    }
    if (send_all(fd, req.data, req.len, deadline, err)) goto out;

    body_dec d = {.remaining = -1, .cb = cb, .user = user};
    bool in_body = false;
    char buf[16384];
    for (;;) {
        if (d.done || d.stopped) break;
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                if (wait_fd(fd, POLLIN, deadline, err)) goto out;
                continue;
            }
            tk_err_set(err, "recv: %s", strerror(errno));
            goto out;
        }
        if (r == 0) {
            if (!in_body) {
                tk_err_set(err, "connection closed before the response headers");
                goto out;
            }
            if (d.chunked || d.remaining > 0) {
                tk_err_set(err, "connection closed in the middle of the body");
                goto out;
            }
            break;
        }
        if (in_body) {
            if (feed_body(&d, buf, (size_t)r, err)) goto out;
            continue;
        }
        tk_strbuf_add(&head, buf, (size_t)r);
        if (head.failed) {
            tk_err_set(err, "out of memory");
            goto out;
        }
        char *end = head.len ? strstr(head.data, "\r\n\r\n") : NULL;
        if (!end) {
            if (head.len > MAX_HEADER_BYTES) {
                tk_err_set(err, "response headers too large");
                goto out;
            }
            continue;
        }
        /* Status line and the two headers that frame the body. */
        *end = 0;
        int major, minor, code;
        if (sscanf(head.data, "HTTP/%d.%d %d", &major, &minor, &code) != 3 || code < 100 || code > 999) {
            tk_err_set(err, "malformed status line");
            goto out;
        }
        *status = code;
        for (char *line = strstr(head.data, "\r\n"); line; line = strstr(line, "\r\n")) {
            line += 2;
            if (!strncasecmp(line, "Transfer-Encoding:", 18)) {
                const char *v = line + 18;
                while (*v == ' ' || *v == '\t') v++;
                if (!strncasecmp(v, "chunked", 7)) d.chunked = true;
            } else if (!strncasecmp(line, "Content-Length:", 15)) {
                d.remaining = strtoll(line + 15, NULL, 10);
                if (d.remaining < 0) d.remaining = -1;
            }
        }
        if (!d.chunked && d.remaining == 0) d.done = true;
        in_body = true;
        size_t off = (size_t)(end + 4 - head.data);
        if (off < head.len && feed_body(&d, head.data + off, head.len - off, err)) goto out;
    }
    rc = 0;
out:
    tk_strbuf_free(&req);
    tk_strbuf_free(&head);
    close(fd);
    return rc;
}
