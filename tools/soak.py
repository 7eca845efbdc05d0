#!/usr/bin/env python3
"""Soak client for `tokamak serve` (started by tools/soak.sh, which owns the
server process): N client threads loop over a random mix of well-formed,
disruptive and malformed requests against 127.0.0.1 until the time is up,
then the server's /metrics, its memory and every answer are checked.

Only the standard library: a small raw-socket HTTP/1.1 client (one request
per connection, `Connection: close`) gives exact control over what is sent
(byte trickles, half-closes, resets, bodies over the limit) and a hard
deadline on every request.  Exit status 0 when every check passed, 1 when one
failed (each failed check is named), 2 on a usage error."""
import argparse
import collections
import json
import random
import socket
import struct
import sys
import threading
import time

HOST = "127.0.0.1"
MiB = 1 << 20
REQ_TIMEOUT = 120.0   # a request not answered within this is counted as hung
IDLE_TIMEOUT = 60.0   # after the load: time for the server to become idle

WORDS = ("def class return import from self value list dict item range len print if else for while in "
         "not and or None True False yield lambda try except raise with open file path data result "
         "index count name key args kwargs init main test assert sum max min sorted append").split()
# Shared prompt starts (> one 64-token KV block) so the prefix cache is hit and evicted.
PREFIXES = [" ".join(random.Random(k).choice(WORDS) for _ in range(90)) for k in range(4)]

SLOW_BODY_S = 20.0  # longest trickle of a slow body
WELL_FORMED = ("cmpl", "cmpl_stream", "chat", "chat_stream", "half_close", "slow_headers", "slow_body", "get")
DISRUPTIVE = ("disconnect", "abort", "slow_abandon")
MALFORMED = ("malformed", "oversized", "unknown_path")
KIND_WEIGHTS = {"cmpl": 12, "cmpl_stream": 12, "chat": 10, "chat_stream": 10, "half_close": 4, "slow_headers": 3,
                "slow_body": 3, "get": 4, "disconnect": 8, "abort": 6, "slow_abandon": 2, "malformed": 10,
                "oversized": 3, "unknown_path": 4}
GEN_KINDS = ("cmpl", "cmpl_stream", "chat", "chat_stream", "half_close", "slow_headers", "slow_body")


class Hung(Exception):
    pass


class BadResponse(Exception):
    pass


# ---------------------------------------------------------------- raw HTTP

def request_bytes(method, path, body=None, headers=(), chunked=False):
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", "Connection: close"]
    if body is not None:
        lines.append("Content-Type: application/json")
        lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}")
    lines += list(headers)
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    if body is None:
        return head, b""
    if chunked:
        parts = [body[i:i + 65536] for i in range(0, len(body), 65536)]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    return head, body


class Conn:
    """One connection with a deadline over everything done on it."""

    def __init__(self, port, deadline, on_answer, source):
        self.deadline = deadline
        self.on_answer = on_answer  # called with each final status and its headers
        self.sock = socket.create_connection((HOST, port), timeout=self._left(), source_address=(source, 0))
        self.buf = b""

    def _left(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Hung()
        return left

    def send(self, data):
        self.sock.settimeout(self._left())
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise Hung()

    def trickle(self, data, step, pause):
        for i in range(0, len(data), step):
            self.send(data[i:i + step])
            time.sleep(pause)

    def _fill(self):
        self.sock.settimeout(self._left())
        try:
            got = self.sock.recv(65536)
        except socket.timeout:
            raise Hung()
        if not got:
            raise BadResponse("connection closed early")
        self.buf += got

    def read_until(self, sep, limit=1 << 16):
        while sep not in self.buf:
            if len(self.buf) > limit:
                raise BadResponse("header too long")
            self._fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self):
        """Status and headers; interim 1xx answers (the half-close probe) are skipped."""
        while True:
            head = self.read_until(b"\r\n\r\n").decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise BadResponse(f"bad status line {lines[0]!r}")
            status = int(parts[1])
            if 100 <= status < 200:
                continue
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            self.on_answer(status, headers)
            return status, headers

    def body_chunks(self, headers):
        """Yields the body as it arrives (chunked, sized or until close)."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self.read_until(b"\r\n").split(b";")[0].strip(), 16)
                if size == 0:
                    self.read_until(b"\r\n")
                    return
                data = self.read_exact(size)
                self.read_exact(2)
                yield data
        elif "content-length" in headers:
            yield self.read_exact(int(headers["content-length"]))
        else:
            while True:
                try:
                    self._fill()
                except BadResponse:
                    break
            data, self.buf = self.buf, b""
            yield data

    def read_body(self, headers):
        return b"".join(self.body_chunks(headers))

    def sse_events(self, headers):
        """Yields each SSE event's data (comments such as ': ping' skipped)."""
        pending = b""
        for chunk in self.body_chunks(headers):
            pending += chunk
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        yield line[6:].decode()
        if pending.strip():
            raise BadResponse(f"stream ends inside an event: {pending[:80]!r}")

    def reset(self):
        """Close with a reset (SO_LINGER 0) instead of an orderly FIN."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------- request bodies

def prompt_text(rng):
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
    return rng.choice(PREFIXES) + " " + words if rng.random() < 0.3 else words


def gen_body(rng, chat, stream, model):
    """A well-formed request: (body dict, number of choices expected)."""
    n = rng.choice((1, 1, 1, 2, 3, 4))
    b = {"max_tokens": rng.randint(1, 24), "n": n, "stream": stream}
    if rng.random() < 0.5:
        b["model"] = model
    if chat:
        msgs = [{"role": "user", "content": prompt_text(rng)}]
        if rng.random() < 0.3:
            msgs = [{"role": "system", "content": "You write Python."}] + msgs + \
                   [{"role": "assistant", "content": "def f():"}, {"role": "user", "content": prompt_text(rng)}]
        b["messages"] = msgs
        if rng.random() < 0.3:
            b["logprobs"] = True
            b["top_logprobs"] = rng.randint(0, 5)
    else:
        r = rng.random()
        if r < 0.15:
            b["prompt"] = [rng.randint(3, 31999) for _ in range(rng.randint(1, 50))]
        elif r < 0.25:
            b["prompt"] = [prompt_text(rng)]
        else:
            b["prompt"] = prompt_text(rng)
        if rng.random() < 0.3:
            b["logprobs"] = rng.randint(0, 5)
    if rng.random() < 0.3:
        b["stop"] = rng.sample(["\n", "):", " the", "return", "=="], rng.randint(1, 4))
    b["temperature"] = rng.choice((0, 0, 0.7, 1.0, 1.5))
    if rng.random() < 0.3:
        b["top_p"] = rng.choice((0.5, 0.9))
    if rng.random() < 0.2:
        b["top_k"] = rng.choice((1, 10, 40))
    if rng.random() < 0.5:
        b["seed"] = rng.randint(0, 1 << 30)
    if stream and rng.random() < 0.3:
        b["stream_options"] = {"include_usage": True}
    if rng.random() < 0.1:
        b["ignore_eos"] = True
    return b, n


def malformed_body(rng, model):
    """A body the server must refuse with a 4xx: (path, bytes)."""
    ok = {"prompt": "def f", "max_tokens": 4}
    cases = [
        b"{", b"not json", b"", b"[1, 2, 3]", b'"just a string"', b'{"prompt": "x", "max_tokens": 4,}',
        b'{"prompt": "\xff\xfe bad utf-8"}', b'{"prompt": "a\x00b"}',
        json.dumps({"prompt": 5}).encode(),
        json.dumps({**ok, "max_tokens": "ten"}).encode(),
        json.dumps({**ok, "max_tokens": 10 ** 7}).encode(),
        json.dumps({**ok, "max_tokens": 10 ** 30}).encode(),
        json.dumps({**ok, "max_tokens": -3}).encode(),
        json.dumps({**ok, "n": rng.choice((0, -1, 17, 1000))}).encode(),
        json.dumps({**ok, "n": "2"}).encode(),
        json.dumps({**ok, "n": 2.5}).encode(),
        json.dumps({**ok, "temperature": "hot"}).encode(),
        json.dumps({**ok, "temperature": -1}).encode(),
        json.dumps({**ok, "logprobs": 50}).encode(),
        json.dumps({**ok, "stop": ["a", "b", "c", "d", "e"]}).encode(),
        json.dumps({**ok, "stop": 123}).encode(),
        json.dumps({**ok, "stream": "yes"}).encode(),
        json.dumps({**ok, "model": model + "-nope"}).encode(),
        json.dumps({**ok, "echo": True}).encode(),
        json.dumps({**ok, "speculative": {"mode": "draft"}}).encode(),
        json.dumps({**ok, "speculative": {"draft_max": 99}}).encode(),
        json.dumps({"prompt": [], "max_tokens": 4}).encode(),
        json.dumps({"prompt": [999999], "max_tokens": 4}).encode(),
        json.dumps({"prompt": ["a", "b"], "max_tokens": 4}).encode(),
        json.dumps({"max_tokens": 4}).encode(),
        b'{"prompt": ' + b"[" * 50000 + b"]" * 50000 + b"}",
    ]
    chat_cases = [
        json.dumps({"messages": []}).encode(), json.dumps({"messages": "hi"}).encode(),
        json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(),
        json.dumps({"messages": [{"content": "x"}]}).encode(),
        json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(),
        json.dumps({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 99}).encode(),
        json.dumps({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}).encode(),
        json.dumps({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}).encode(),
    ]
    if rng.random() < 0.25:
        return "/v1/chat/completions", rng.choice(chat_cases)
    return "/v1/completions", rng.choice(cases)


# ---------------------------------------------------------------- checks of answers

def check_error_body(status, body):
    try:
        err = json.loads(body)["error"]
        if not isinstance(err, dict) or "message" not in err:
            raise BadResponse(f"{status}: error object without a message")
    except (ValueError, KeyError, TypeError):
        raise BadResponse(f"{status}: not a JSON error: {body[:120]!r}")


def check_final(body, req, n, chat):
    try:
        o = json.loads(body)
    except ValueError:
        raise BadResponse(f"200 with a body that is not JSON: {body[:120]!r}")
    ch = o.get("choices")
    if not isinstance(ch, list) or sorted(c.get("index") for c in ch) != list(range(n)):
        raise BadResponse(f"choices do not match n={n}: {body[:200]!r}")
    for c in ch:
        if c.get("finish_reason") not in ("stop", "length"):
            raise BadResponse(f"finish_reason {c.get('finish_reason')!r}")
        if chat and not isinstance(c.get("message", {}).get("content"), str):
            raise BadResponse("chat choice without message.content")
        if not chat and not isinstance(c.get("text"), str):
            raise BadResponse("completion choice without text")
        if ("logprobs" in req) != (c.get("logprobs") is not None):
            raise BadResponse("logprobs asked for and missing, or the reverse")
    if not isinstance(o.get("usage"), dict) or o["usage"].get("completion_tokens", 0) > n * req["max_tokens"]:
        raise BadResponse(f"bad usage {o.get('usage')!r}")


def check_stream(events, req, n):
    if not events or events[-1] != "[DONE]":
        raise BadResponse("stream does not end with [DONE]")
    finished = set()
    for e in events[:-1]:
        try:
            o = json.loads(e)
        except ValueError:
            raise BadResponse(f"stream chunk is not JSON: {e[:120]!r}")
        if "error" in o:
            raise BadResponse(f"error inside the stream: {e[:200]}")
        for c in o.get("choices", []):
            if not 0 <= c.get("index", -1) < n:
                raise BadResponse(f"stream choice index {c.get('index')} with n={n}")
            if c.get("finish_reason"):
                finished.add(c["index"])
    if finished != set(range(n)):
        raise BadResponse(f"stream finished choices {sorted(finished)} of n={n}")


# ---------------------------------------------------------------- the client

class Soak:
    def __init__(self, args):
        self.a = args
        self.lock = threading.Lock()
        self.tls = threading.local()               # per client thread: its source address
        self.outcomes = collections.Counter()      # (kind, outcome) -> count
        self.latency = collections.defaultdict(list)  # kind -> seconds, well-formed answered 200
        self.failures = collections.Counter()      # kind: what went wrong -> count
        self.examples = {}                         # one message per failure class
        self.connections = 0                       # connections opened (upper bound of requests seen)
        self.answered = 0                          # final status lines read (lower bound)
        self.mhd_refusals = 0                      # errors libmicrohttpd answered itself (not JSON, not counted)
        self.gen_sent = 0                          # generation bodies sent whole (upper bound of engine requests)
        self.gen_ok = 0                            # generation requests answered 200 (each one engine request)
        self.errors_seen = 0                       # the server's own answers (JSON) with status >= 400
        self.rejected_seen = 0                     # 429 answers
        self.rss = []                              # (t, VmRSS kB)
        self.hwm = 0
        self.dead = None                           # why the server is considered gone
        self.stop = threading.Event()

    # -- bookkeeping
    def record(self, kind, outcome, lat=None, fail=None):
        with self.lock:
            self.outcomes[(kind, outcome)] += 1
            if lat is not None and outcome == "200":
                self.latency[kind].append(lat)
            if fail:
                key = f"{kind}: {outcome}"
                self.failures[key] += 1
                self.examples.setdefault(key, fail)

    def count(self, field, k=1):
        with self.lock:
            setattr(self, field, getattr(self, field) + k)

    def conn(self, deadline):
        self.count("connections")
        return Conn(self.a.port, deadline, self.on_answer, getattr(self.tls, "source", HOST))

    def on_answer(self, status, headers):
        with self.lock:
            self.answered += 1
            if status >= 400 and headers.get("content-type", "").startswith("application/json"):
                self.errors_seen += 1
                self.rejected_seen += status == 429
            elif status >= 400:
                self.mhd_refusals += 1

    # -- server process
    def proc_status(self):
        try:
            with open(f"/proc/{self.a.pid}/status") as f:
                st = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            return None
        if st.get("State", "").strip().startswith(("Z", "X")):
            return None
        return st

    def monitor(self):
        t0 = time.monotonic()
        while not self.stop.is_set():
            st = self.proc_status()
            if st is None:
                self.dead = f"server process {self.a.pid} gone after {time.monotonic() - t0:.1f} s"
                self.stop.set()
                return
            rss = int(st["VmRSS"].split()[0])
            with self.lock:
                self.rss.append((time.monotonic() - t0, rss))
                self.hwm = max(self.hwm, int(st["VmHWM"].split()[0]))
            self.stop.wait(0.5)

    def metrics(self):
        c = self.conn(time.monotonic() + 30)
        try:
            c.send(request_bytes("GET", "/metrics")[0])
            status, h = c.read_head()
            text = c.read_body(h).decode()
        finally:
            c.close()
        if status != 200:
            raise BadResponse(f"/metrics answered {status}")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    # -- one operation of each kind; each returns (outcome, failure message or None)
    def answer(self, c, req, n, chat, stream):
        """Reads the answer to a well-formed generation request."""
        status, h = c.read_head()
        if status == 200:
            if stream:
                check_stream(list(c.sse_events(h)), req, n)
            else:
                check_final(c.read_body(h), req, n, chat)
            self.count("gen_ok")
            return "200", None
        body = c.read_body(h)
        if status in (429, 503):
            check_error_body(status, body)
            return str(status), None
        return str(status), f"well-formed request answered {status}: {body[:200]!r}"

    def op_generate(self, rng, kind):
        chat = kind.startswith("chat") or (kind not in ("cmpl", "cmpl_stream") and rng.random() < 0.5)
        stream = kind.endswith("_stream") or (kind not in ("cmpl", "chat") and rng.random() < 0.5)
        req, n = gen_body(rng, chat, stream, self.a.model_name)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        head, body = request_bytes("POST", path, json.dumps(req).encode())
        t0 = time.monotonic()
        c = self.conn(t0 + REQ_TIMEOUT)
        try:
            if kind == "slow_headers":      # the request byte by byte, with pauses
                c.trickle(head, 1, rng.uniform(0.002, 0.02))
                c.send(body)
            elif kind == "slow_body":       # headers at once, the body in small pieces
                c.send(head)
                # slow, but within the server's body deadline (--body-timeout,
                # 30 s): a body that misses it is cut off, which
                # test_server_hostile.py checks on its own
                step = rng.randint(1, 16)
                pause = min(rng.uniform(0.005, 0.05), SLOW_BODY_S * step / max(len(body), 1))
                c.trickle(body, step, pause)
            else:
                c.send(head + body)
            self.count("gen_sent")
            if kind == "half_close":
                c.sock.shutdown(socket.SHUT_WR)
            out, fail = self.answer(c, req, n, chat, stream)
            return out, fail, time.monotonic() - t0
        finally:
            c.close()

    def op_get(self, rng):
        path = rng.choice(("/health", "/v1/models", "/v1/models/" + self.a.model_name, "/metrics"))
        c = self.conn(time.monotonic() + REQ_TIMEOUT)
        t0 = time.monotonic()
        try:
            c.send(request_bytes(rng.choice(("GET", "HEAD")) if path == "/health" else "GET", path)[0])
            status, h = c.read_head()
            if status != 200:
                return str(status), f"GET {path} answered {status}", None
            return "200", None, time.monotonic() - t0
        finally:
            c.close()

    def generation_to_abandon(self, rng, stream, max_tokens):
        """A random completion or chat request (max_tokens drawn from the range)
        and a fresh connection for it: (connection, request bytes)."""
        chat = rng.random() < 0.5
        req, _ = gen_body(rng, chat, stream, self.a.model_name)
        req["max_tokens"] = rng.randint(*max_tokens)
        head, body = request_bytes("POST", "/v1/chat/completions" if chat else "/v1/completions",
                                   json.dumps(req).encode())
        return self.conn(time.monotonic() + REQ_TIMEOUT), head + body

    def op_disconnect(self, rng):
        """A stream abandoned after k events (k = 0: before the answer), by FIN or reset."""
        c, data = self.generation_to_abandon(rng, True, (16, 64))
        try:
            c.send(data)
            self.count("gen_sent")
            k = rng.randint(0, 8)
            if k:
                status, h = c.read_head()
                if status != 200:
                    return str(status), None if status in (429, 503) else f"stream answered {status}"
                for i, _ in enumerate(c.sse_events(h)):
                    if i + 1 >= k:
                        break
        except BadResponse:
            pass  # the stream may end before k events
        finally:
            c.reset() if rng.random() < 0.5 else c.close()
        return "closed", None

    def op_abort(self, rng):
        """A non-streaming request abandoned after a random wait (a client-side cancel)."""
        c, data = self.generation_to_abandon(rng, False, (8, 64))
        try:
            c.send(data)
            self.count("gen_sent")
            time.sleep(rng.uniform(0, 3))
        finally:
            c.reset() if rng.random() < 0.5 else c.close()
        return "closed", None

    def op_slow_abandon(self, rng):
        """Part of a request trickled in, then the connection dropped."""
        head, body = request_bytes("POST", "/v1/completions", json.dumps({"prompt": "x" * 200}).encode())
        data = head + body
        c = self.conn(time.monotonic() + REQ_TIMEOUT)
        try:
            c.trickle(data[:rng.randint(1, len(data) - 1)], 1, rng.uniform(0.005, 0.05))
        finally:
            c.close()
        return "closed", None

    def expect_4xx(self, c, what):
        status, h = c.read_head()
        body = c.read_body(h)
        if 400 <= status < 500 and status != 429:
            if h.get("content-type", "").startswith("application/json"):  # not for MHD's own refusals
                check_error_body(status, body)
            return str(status), None
        return str(status), f"{what} answered {status}: {body[:200]!r}"

    def op_malformed(self, rng):
        path, body = malformed_body(rng, self.a.model_name)
        head, body = request_bytes("POST", path, body)
        c = self.conn(time.monotonic() + REQ_TIMEOUT)
        try:
            c.send(head + body)
            return self.expect_4xx(c, f"malformed body {body[:60]!r}")
        finally:
            c.close()

    def op_oversized(self, rng):
        variant = rng.randint(0, 3)
        big = b'{"prompt": "' + b"a" * int(rng.uniform(1.01, 1.6) * MiB) + b'"}'
        c = self.conn(time.monotonic() + REQ_TIMEOUT)
        try:
            if variant == 0:     # announced and sent: read and dropped, then 413
                head, body = request_bytes("POST", "/v1/completions", big)
                c.send(head + body)
            elif variant == 1:   # chunked
                head, body = request_bytes("POST", "/v1/completions", big, chunked=True)
                c.send(head + body)
            elif variant == 2:   # announced as 64 MiB: answered at once, the rest drained
                head = request_bytes("POST", "/v1/completions", b"")[0].replace(
                    b"Content-Length: 0", b"Content-Length: %d" % (64 * MiB))
                c.send(head)
                try:
                    c.send(big)
                except OSError:
                    pass  # the server may stop reading; the 413 is still to be read
            else:                # a Content-Length that is no number
                head = request_bytes("POST", "/v1/completions", b"")[0].replace(
                    b"Content-Length: 0", b"Content-Length: lots")
                c.send(head)
            return self.expect_4xx(c, f"oversized body (variant {variant})")
        finally:
            c.close()

    def op_unknown_path(self, rng):
        method, path = rng.choice((("GET", "/v1/foo"), ("POST", "/v1/embeddings"), ("GET", "/v1/completions"),
                                   ("DELETE", "/metrics"), ("POST", "/health"), ("GET", "/v1/models/nope"),
                                   ("PUT", "/v1/chat/completions"), ("GET", "/" + "x" * 3000)))
        body = b'{"prompt": "x"}' if method in ("POST", "PUT") else None
        head, body = request_bytes(method, path, body)
        c = self.conn(time.monotonic() + REQ_TIMEOUT)
        try:
            c.send(head + body)
            return self.expect_4xx(c, f"{method} {path[:40]}")
        finally:
            c.close()

    def one(self, rng, kind):
        t0 = time.monotonic()
        try:
            if kind in GEN_KINDS:
                out, fail, lat = self.op_generate(rng, kind)
            elif kind == "get":
                out, fail, lat = self.op_get(rng)
            else:
                out, fail = getattr(self, "op_" + kind)(rng)
                lat = None
        except Hung:
            out, fail, lat = "timeout", f"no answer within {REQ_TIMEOUT:.0f} s", None
        except BadResponse as e:
            out, fail, lat = "bad_response", str(e), None
        except OSError as e:
            out, fail, lat = "conn_error", f"{type(e).__name__}: {e}", None
        if lat is None and out == "200":
            lat = time.monotonic() - t0
        self.record(kind, out, lat, fail)
        if out == "429":
            time.sleep(rng.uniform(0.1, 0.5))  # back off, as a client should

    def worker(self, i, end):
        # Each client from an address of its own in 127/8, as separate
        # clients would be: the server caps connections per address
        # (--max-connections-per-ip), and 64 clients behind one address
        # would be one client over that cap.
        self.tls.source = "127.0.%d.%d" % (1 + i // 250, 2 + i % 250)
        rng = random.Random(self.a.seed * 1000003 + i)
        kinds, weights = zip(*KIND_WEIGHTS.items())
        while not self.stop.is_set() and time.monotonic() < end:
            self.one(rng, rng.choices(kinds, weights)[0])

    # -- the run
    def run(self):
        mon = threading.Thread(target=self.monitor, daemon=True)
        mon.start()
        # Warm-up: one request, then the baseline memory for the bound.
        rng = random.Random(self.a.seed)
        self.one(rng, "cmpl")
        time.sleep(1.0)
        st = self.proc_status()
        if st is None:
            self.dead = self.dead or "server gone during the warm-up"
            return
        self.base_rss = int(st["VmRSS"].split()[0])
        t0 = time.monotonic()
        end = t0 + self.a.minutes * 60
        threads = [threading.Thread(target=self.worker, args=(i, end), daemon=True) for i in range(self.a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, end + REQ_TIMEOUT + 30 - time.monotonic()))
        self.stuck_workers = sum(t.is_alive() for t in threads)
        self.load_s = time.monotonic() - t0

    def checks(self):
        """[(name, ok, detail)]"""
        res = []
        res.append(("server alive throughout", self.dead is None, self.dead or f"pid {self.a.pid}"))
        if self.dead:
            return res
        res.append(("client threads finished", self.stuck_workers == 0, f"{self.stuck_workers} still running"))
        bad_wf = sum(k for key, k in self.failures.items() if key.split(":")[0] in WELL_FORMED)
        bad_mf = sum(k for key, k in self.failures.items() if key.split(":")[0] in MALFORMED)
        hung = sum(k for (kind, out), k in self.outcomes.items() if out == "timeout")
        other = sum(k for key, k in self.failures.items() if key.split(":")[0] in DISRUPTIVE)
        n_wf = sum(k for (kind, out), k in self.outcomes.items() if kind in WELL_FORMED)
        n_mf = sum(k for (kind, out), k in self.outcomes.items() if kind in MALFORMED)
        res.append(("well-formed answered 200/429/503 and valid", bad_wf == 0, f"{bad_wf} of {n_wf} not"))
        res.append(("malformed answered 4xx", bad_mf == 0, f"{bad_mf} of {n_mf} not"))
        res.append(("disconnects/aborts without client errors", other == 0, f"{other} errors"))
        res.append(("no hung request", hung == 0, f"{hung} timed out after {REQ_TIMEOUT:.0f} s"))

        # Idle: every request gone, every KV block back (cached ones allowed).
        deadline = time.monotonic() + IDLE_TIMEOUT
        while True:
            m = self.metrics()
            idle = m["tokamak_kv_blocks_used"] == 0 and m["tokamak_requests_running"] == 0 \
                and m["tokamak_requests_waiting"] == 0
            if idle or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.final_metrics = m
        res.append(("idle: 0 running, 0 waiting, 0 KV blocks used", idle,
                    "running %d, waiting %d, KV used %d (cached %d of %d)" % (
                        m["tokamak_requests_running"], m["tokamak_requests_waiting"], m["tokamak_kv_blocks_used"],
                        m["tokamak_kv_blocks_cached"], m["tokamak_kv_blocks_total"])))

        # Counters.  The engine's finished count covers every submitted request
        # (done, cancelled or failed); the server does not export submissions,
        # so it is bounded by what the client knows: each 200 is one, and at
        # most every generation body sent whole (+ the warm-up) is one.
        fin = m["tokamak_requests_finished_total"]
        lo, hi = self.gen_ok, self.gen_sent
        res.append(("engine requests finished within [answered 200, sent]", lo <= fin <= hi,
                    f"{lo} <= {fin:.0f} <= {hi}"))
        httpn = m["tokamak_http_requests_total"]
        res.append(("HTTP requests counted within [answered, connections]",
                    self.answered <= httpn <= self.connections, f"{self.answered} <= {httpn:.0f} <= {self.connections}"))
        res.append(("HTTP errors counted >= error answers seen", m["tokamak_http_errors_total"] >= self.errors_seen,
                    f"{m['tokamak_http_errors_total']:.0f} >= {self.errors_seen} (+ {self.mhd_refusals} refused by "
                    "libmicrohttpd itself, which the server never sees)"))
        res.append(("queue-full refusals counted >= 429s seen",
                    m["tokamak_requests_rejected_queue_full_total"] >= self.rejected_seen,
                    f"{m['tokamak_requests_rejected_queue_full_total']:.0f} >= {self.rejected_seen}"))

        # Still serving: one more request is answered and finishes exactly one engine request.
        try:
            out, fail, _ = self.op_generate(random.Random(0), "cmpl")
        except (Hung, BadResponse, OSError) as e:
            out, fail = "error", repr(e)
        deadline = time.monotonic() + 10  # the engine counts it just after the answer's last event
        while (fin_delta := self.metrics()["tokamak_requests_finished_total"] - fin) < 1 \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        res.append(("a request after the soak is answered (finished +1)", out == "200" and fin_delta == 1,
                    f"{out} {fail or ''}, finished +{fin_delta:.0f}"))

        # Memory.  Bound: the idle RSS after the warm-up plus, per connection
        # that can be open at once (clients + this monitor), 2 MiB (a request
        # body up to 1 MiB, its parse and the thread's stack/arena pages),
        # plus 128 MiB for allocator fragmentation.  With ASan: its 256 MiB
        # quarantine on top, and the per-connection and slack terms doubled
        # (redzones, shadow memory).
        per_conn, slack = 2 * 1024, 128 * 1024
        conns = self.a.clients + 1
        bound = self.base_rss + conns * per_conn + slack
        if self.a.asan:
            bound = self.base_rss + 256 * 1024 + 2 * (conns * per_conn + slack)
        self.rss_bound = bound
        res.append(("peak RSS (VmHWM) within bound", self.hwm <= bound,
                    f"{self.hwm / 1024:.0f} MiB <= {bound / 1024:.0f} MiB (base {self.base_rss / 1024:.0f} MiB)"))
        return res

    def report(self, res):
        print(f"soak: {self.a.clients} clients, {self.a.minutes:g} min "
              f"(load ran {getattr(self, 'load_s', 0):.0f} s), seed {self.a.seed}")
        kinds = sorted({k for k, _ in self.outcomes}, key=lambda k: list(KIND_WEIGHTS).index(k)
                       if k in KIND_WEIGHTS else 99)
        outs = sorted({o for _, o in self.outcomes})
        w = max(7, *(len(o) for o in outs))
        print(f"{'kind':<14}" + "".join(f"{o:>{w + 1}}" for o in outs) + f"{'total':>8}   p50 / p90 / p99 / max s (200s)")
        for k in kinds:
            row = [self.outcomes[(k, o)] for o in outs]
            lat = sorted(self.latency.get(k, []))
            pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
            lats = f"{pct(.5):6.2f} /{pct(.9):6.2f} /{pct(.99):6.2f} /{lat[-1]:6.2f}" if lat else ""
            print(f"{k:<14}" + "".join(f"{v:>{w + 1}}" for v in row) + f"{sum(row):>8}   {lats}")
        tot = [sum(self.outcomes[(k, o)] for k in kinds) for o in outs]
        print(f"{'total':<14}" + "".join(f"{v:>{w + 1}}" for v in tot) + f"{sum(tot):>8}")
        if self.rss:
            qs = [self.rss[min(len(self.rss) - 1, int(f * len(self.rss)))][1] for f in (0.25, 0.5, 0.75)]
            print(f"server RSS: base {self.base_rss / 1024:.0f} MiB, at 25/50/75 % of the run "
                  + " / ".join(f"{q / 1024:.0f}" for q in qs) + f" MiB, end {self.rss[-1][1] / 1024:.0f} MiB, "
                  f"peak (VmHWM) {self.hwm / 1024:.0f} MiB")
        m = getattr(self, "final_metrics", None)
        if m:
            keys = ("requests_finished_total", "http_requests_total", "http_errors_total",
                    "requests_rejected_queue_full_total", "requests_cancelled_disconnect_total", "preemptions_total",
                    "generation_tokens_total", "prompt_tokens_total", "prefix_cache_hit_rate")
            print("metrics: " + ", ".join(f"{k} {m['tokamak_' + k]:g}" for k in keys))
        for key, k in sorted(self.failures.items()):
            print(f"  failure {key} x{k}: e.g. {self.examples[key]}")
        for name, ok, detail in res:
            print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id (for /proc and liveness)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--model-name", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--asan", action="store_true", help="the server is the ASan build (memory bound)")
    a = ap.parse_args()
    if a.clients < 1 or not 0 < a.minutes <= 24 * 60:
        ap.error("--clients >= 1 and 0 < --minutes <= 1440")
    s = Soak(a)
    s.run()
    s.stop.set()
    res = s.checks()
    s.report(res)
    failed = [name for name, ok, _ in res if not ok]
    if failed:
        print("soak FAILED: " + "; ".join(failed))
        return 1
    print("soak passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
