"""The built-in web pages of `tokamak serve` (the chat at /, the dashboard at
/dashboard) and the /stats endpoint they read: headers over plain HTTP, then
the pages in headless Chromium driven by selenium (Debian's chromium and
chromium-driver; `tools/deps.sh --browser` installs them).  The browser tests
skip, saying why, where Chromium or its driver is missing or cannot start.

Every request goes to 127.0.0.1.  Screenshots and the measured first-token
latency are written to $TK_WEB_ARTIFACTS (default build/web-test-artifacts);
their paths are printed (pytest -s shows them)."""
import concurrent.futures as cf
import json
import os
import shutil
import tempfile
import threading
import time

import pytest

from conftest import REPO
from test_server import API_KEY, Server, requests

ARTIFACTS = os.environ.get("TK_WEB_ARTIFACTS") or os.path.join(REPO, "build", "web-test-artifacts")
PAGES = {"/": "text/html; charset=utf-8", "/dashboard": "text/html; charset=utf-8",
         "/web/style.css": "text/css; charset=utf-8", "/web/chat.js": "text/javascript; charset=utf-8",
         "/web/markdown.js": "text/javascript; charset=utf-8",
         "/web/dashboard.js": "text/javascript; charset=utf-8", "/web/icon.svg": "image/svg+xml"}


@pytest.fixture(scope="module")
def server(tokamak_bin, model_dir):
    s = Server(tokamak_bin, model_dir, "--max-seqs", "8", api_key=API_KEY)
    yield s
    s.stop()


def artifact(name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    return os.path.join(ARTIFACTS, name)


# ---------------------------------------------------------------- plain HTTP

def test_pages_and_headers(server):
    for path, ctype in PAGES.items():
        r = requests.get(server.url + path, timeout=10)  # no API key: the pages are public
        assert r.status_code == 200, (path, r.text)
        assert r.headers["Content-Type"] == ctype
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
        assert "unsafe-inline" not in csp and "http" not in csp
        assert r.headers["Cache-Control"] == "no-cache"
        etag = r.headers["ETag"]
        assert etag.startswith('"') and etag.endswith('"')
        again = requests.get(server.url + path, headers={"If-None-Match": etag}, timeout=10)
        assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == etag
        head = requests.head(server.url + path, timeout=10)
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["Content-Length"]) == len(r.content)
    page = requests.get(server.url + "/", timeout=10).text
    assert "<script>" not in page and 'src="/web/chat.js"' in page  # no inline script
    assert "http" not in page  # nothing from another origin
    r = requests.post(server.url + "/", data="x", timeout=10)
    assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD"
    assert requests.get(server.url + "/web/nope.js", timeout=10).status_code == 404
    assert requests.get(server.url + "/dashboard/", timeout=10).status_code == 404


def test_stats_json(server):
    client = server.client()
    client.completions.create(model="code-target", prompt="def f():", max_tokens=5, temperature=0)
    m = server.wait_idle()  # the histograms take the last token after the answer went out
    r = requests.get(server.url + "/stats", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    s = r.json()
    assert s["model"] == "code-target" and s["clock_s"] > 0
    assert s["tokens"]["generation"] == m["tokamak_generation_tokens_total"] >= 5
    assert s["kv_blocks"]["total"] == m["tokamak_kv_blocks_total"] > 0
    kv = s["kv_blocks"]
    assert kv["used"] + kv["cached"] + kv["free"] == kv["total"]
    assert set(s["requests"]) == {"running", "waiting", "finished"}
    assert set(s["prefix_cache"]) == {"query_tokens", "hit_tokens"}
    assert set(s["speculative"]) == {"draft_tokens", "accepted_tokens", "target_passes", "tokens"}
    h = s["histograms"]
    assert h["bounds_s"][-1] is None and all(isinstance(b, float) for b in h["bounds_s"][:-1])
    for name, prom in (("ttft", "tokamak_time_to_first_token_seconds"), ("itl", "tokamak_inter_token_latency_seconds")):
        assert len(h[name]["buckets"]) == len(h["bounds_s"])
        assert h[name]["buckets"][-1] == h[name]["count"] == m[prom + "_count"] > 0
        assert h[name]["buckets"] == sorted(h[name]["buckets"])  # cumulative


# ---------------------------------------------------------------- the browser

def find_browser():
    chrome = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = shutil.which("chromedriver")
    if not chrome or not driver:
        pytest.skip("Chromium or chromedriver not found (Debian: apt-get install chromium chromium-driver, "
                    "or tools/deps.sh --browser)")
    return chrome, driver


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (tools/deps.sh)")
    from selenium.webdriver.chrome.service import Service
    chrome, driver_path = find_browser()
    profile = tempfile.mkdtemp(prefix="tk-web-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for a in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
              "--no-first-run", "--disable-extensions", "--disable-background-networking",
              f"--user-data-dir={profile}"):
        opts.add_argument(a)
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")  # Chromium's sandbox refuses to run as root
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        d = webdriver.Chrome(options=opts, service=Service(driver_path))
    except Exception as e:  # noqa: BLE001 - any start failure means: no browser here
        shutil.rmtree(profile, ignore_errors=True)
        pytest.skip(f"Chromium cannot be started: {str(e).splitlines()[0]}")
    d.set_page_load_timeout(30)
    d.set_script_timeout(30)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def wait(d, cond, timeout=60, what="condition"):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(d, timeout, poll_frequency=0.05).until(lambda _: cond(), message=f"timed out waiting for {what}")


def js(d, script, *args):
    return d.execute_script(script, *args)


def csp_violations(d):
    return [e["message"] for e in d.get_log("browser") if "Content Security Policy" in e["message"]]


def open_chat(d, server, key=API_KEY):
    """A fresh chat page: empty storage, the API key and temperature 0 set."""
    d.get(server.url + "/")
    js(d, "localStorage.clear()")
    d.get(server.url + "/")
    set_field(d, "api-key", key)
    set_field(d, "temperature", "0")
    wait(d, lambda: "model: code-target" in d.find_element("id", "model-status").text, 30, "the model name")


def set_field(d, id_, value):
    js(d, "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
          "e.dispatchEvent(new Event('change'))", id_, value)


def type_and_send(d, text):
    from selenium.webdriver.common.keys import Keys
    box = d.find_element("id", "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def idle_page(d):
    return js(d, "return document.getElementById('stop').hidden && !document.getElementById('send').disabled")


def stored(d):
    return json.loads(js(d, "return localStorage.getItem('tokamak.chat.v1')"))


def current_messages(d):
    s = stored(d)
    return next(c for c in s["conversations"] if c["id"] == s["current"])["messages"]


# Records when each chunk of a response body reaches the page (before the
# page's own code sees it) and when the first answer text shows in the DOM.
INSTRUMENT = """
window.tkTimes = {reads: [], dom: null, frame: null};
const read = ReadableStreamDefaultReader.prototype.read;
const dec = new TextDecoder();
ReadableStreamDefaultReader.prototype.read = function () {
  return read.call(this).then((r) => {
    if (r.value) window.tkTimes.reads.push([performance.now(), dec.decode(r.value, {stream: true})]);
    return r;
  });
};
new MutationObserver(() => {
  if (window.tkTimes.dom !== null) return;
  const last = document.querySelector('#messages .msg.assistant:last-child .body');
  if (last && last.textContent.trim()) {
    window.tkTimes.dom = performance.now();
    requestAnimationFrame(() => { window.tkTimes.frame = performance.now(); });
  }
}).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
"""


def first_token_latency(d):
    """(ms from the first chunk with answer text reaching the page to that text
    in the DOM, ms to the next animation frame after it)."""
    t = js(d, "return window.tkTimes")
    text = ""
    for at, chunk in t["reads"]:
        for line in chunk.split("\n"):
            if line.startswith("data: {"):
                ch = json.loads(line[6:]).get("choices") or [{}]
                text += (ch[0].get("delta") or {}).get("content") or ""
        if text.strip():
            return t["dom"] - at, t["frame"] - at
    raise AssertionError(f"no answer text in the stream: {t['reads']}")


def test_chat_streams_answer_and_keeps_conversations(browser, server):
    d = browser
    open_chat(d, server)
    set_field(d, "max-tokens", "40")
    js(d, INSTRUMENT)
    type_and_send(d, "write a python function that adds two numbers")
    wait(d, lambda: idle_page(d), 120, "the answer to end")
    msgs = current_messages(d)
    assert [m["role"] for m in msgs] == ["user", "assistant"], msgs
    answer = msgs[1]["content"]
    # The same request without streaming gives the same text (temperature 0, max tokens 40).
    ref = server.client().chat.completions.create(
        model="code-target", max_tokens=40, temperature=0,
        messages=[{"role": "user", "content": "write a python function that adds two numbers"}])
    assert answer == ref.choices[0].message.content and answer.strip()
    assert msgs[1].get("note") == "cut at the token limit" and "40 tokens" in msgs[1]["meta"]
    dom_ms, frame_ms = first_token_latency(d)
    with open(artifact("first_token_latency.json"), "w") as f:
        json.dump({"sse_to_dom_ms": dom_ms, "sse_to_next_frame_ms": frame_ms}, f)
    print(f"\nfirst token: SSE chunk in the page -> text in the DOM {dom_ms:.2f} ms, "
          f"-> next animation frame {frame_ms:.2f} ms")
    assert dom_ms < 100, dom_ms
    shot = artifact("chat.png")
    d.save_screenshot(shot)
    print(f"screenshot: {shot}")
    body = d.find_element("css selector", "#messages .msg.assistant .body").text
    assert body.split()[0] in answer

    # reload: the conversation, its title, the key and the settings stay
    d.refresh()
    wait(d, lambda: len(d.find_elements("css selector", "#messages .msg")) == 2, 30, "the restored messages")
    assert d.find_element("css selector", "#messages .msg.user .body").text == \
        "write a python function that adds two numbers"
    assert d.find_element("css selector", "#conversations li.current .open").text.startswith("write a python")
    assert d.find_element("id", "api-key").get_attribute("value") == API_KEY
    assert d.find_element("id", "max-tokens").get_attribute("value") == "40"

    # a second conversation, then delete the first
    d.find_element("id", "new-chat").click()
    assert d.find_elements("css selector", "#messages .msg") == []
    type_and_send(d, "hello")
    wait(d, lambda: idle_page(d), 120, "the second answer")
    s = stored(d)
    assert len(s["conversations"]) == 2 and s["conversations"][0]["title"] == "hello"
    d.find_elements("css selector", "#conversations .delete")[1].click()
    s = stored(d)
    assert [c["title"] for c in s["conversations"]] == ["hello"]
    assert csp_violations(d) == []


def test_chat_stop(browser, server):
    d = browser
    open_chat(d, server)
    set_field(d, "max-tokens", "450")
    type_and_send(d, "write a long python program")
    wait(d, lambda: len(js(d, "const b = document.querySelector('#messages .msg.assistant .body');"
                              "return b ? b.textContent : ''")) > 20, 60, "the answer to start")
    d.find_element("id", "stop").click()
    wait(d, lambda: idle_page(d), 30, "the page to stop")
    msgs = current_messages(d)
    assert msgs[-1]["role"] == "assistant" and msgs[-1]["note"] == "stopped", msgs
    text = msgs[-1]["content"]
    time.sleep(0.5)
    assert current_messages(d)[-1]["content"] == text  # nothing more arrives
    assert "stopped" in d.find_element("css selector", "#messages .msg.assistant .foot").text
    server.wait_idle(30)  # the server cancelled the request: no sequence left running


HOSTILE = ("Here is <script>window.tkOwned = 1</script> and <img src=x onerror=\"window.tkOwned = 2\">.\n\n"
           "**bold <b>x</b>** and *it* and `<i>code</i>`\n\n"
           "- item <a href=\"javascript:window.tkOwned=3\">link</a>\n- two\n\n"
           "```html\n<img src=y onerror=\"window.tkOwned = 4\">\n</pre><script>window.tkOwned = 5</script>\n```\n")


def test_chat_renders_markup_as_text(browser, server):
    """Assistant text that looks like HTML (injected into localStorage as an
    earlier answer) is shown as text: no element comes from it."""
    d = browser
    open_chat(d, server)
    conv = {"id": "x1", "title": "hostile", "messages": [
        {"role": "user", "content": "<img src=z onerror=\"window.tkOwned = 6\">"},
        {"role": "assistant", "content": HOSTILE}]}
    js(d, "localStorage.setItem('tokamak.chat.v1', JSON.stringify({conversations: [arguments[0]], current: 'x1'}))",
       conv)
    d.refresh()
    wait(d, lambda: len(d.find_elements("css selector", "#messages .msg")) == 2, 30, "the injected messages")
    time.sleep(0.3)  # an image's onerror would have run by now
    assert js(d, "return window.tkOwned") is None
    msgs = d.find_element("id", "messages")
    for tag in ("script", "img", "b", "i", "a"):
        assert msgs.find_elements("tag name", tag) == [], tag
    a = d.find_element("css selector", "#messages .msg.assistant .body")
    assert "<script>window.tkOwned = 1</script>" in a.text and "<img src=x onerror" in a.text
    assert a.find_element("tag name", "strong").text == "bold <b>x</b>"
    assert a.find_element("tag name", "em").text == "it"
    assert a.find_element("css selector", "p code").text == "<i>code</i>"
    assert [li.text for li in a.find_elements("tag name", "li")] == [
        'item <a href="javascript:window.tkOwned=3">link</a>', "two"]
    assert a.find_element("tag name", "pre").text == \
        '<img src=y onerror="window.tkOwned = 4">\n</pre><script>window.tkOwned = 5</script>'
    assert a.find_element("css selector", ".code .lang").text == "html"
    u = d.find_element("css selector", "#messages .msg.user .body")
    assert u.text == "<img src=z onerror=\"window.tkOwned = 6\">"
    shot = artifact("chat_markup.png")
    d.save_screenshot(shot)
    print(f"\nscreenshot: {shot}")
    assert csp_violations(d) == []


def error_text(d):
    wait(d, lambda: idle_page(d), 60, "the request to end")
    errs = d.find_elements("css selector", "#messages .msg.error .body")
    assert errs, "no error shown"
    return errs[-1].text


def test_chat_error_messages(browser, server):
    d = browser
    # a wrong key: the 401 says what to do
    open_chat(d, server)
    set_field(d, "api-key", "wrong")
    type_and_send(d, "hi")
    assert "API key" in error_text(d) and "Settings" in error_text(d)
    # the Llama-2 template refuses two user turns in a row (the failed turn stays in the conversation)
    set_field(d, "api-key", API_KEY)
    type_and_send(d, "hi again")
    msg = error_text(d)
    assert "chat template" in msg and "alternate" in msg, msg
    # the errors stay after a reload and are never sent to the model
    d.refresh()
    wait(d, lambda: len(d.find_elements("css selector", "#messages .msg.error")) == 2, 30, "the stored errors")


def test_chat_server_gone(browser, tokamak_bin, model_dir):
    """The server dies in the middle of an answer, then is not there at all."""
    d = browser
    s = Server(tokamak_bin, model_dir)
    try:
        d.get(s.url + "/")
        js(d, "localStorage.clear()")
        d.get(s.url + "/")
        set_field(d, "max-tokens", "450")
        type_and_send(d, "write a long python program")
        wait(d, lambda: len(js(d, "const b = document.querySelector('#messages .msg.assistant .body');"
                                  "return b ? b.textContent : ''")) > 10, 60, "the answer to start")
        s.kill()
        s.proc.wait(10)
        msg = error_text(d)
        assert "broke off" in msg, msg
        kept = current_messages(d)
        assert kept[-2]["role"] == "assistant" and kept[-2]["content"]  # the partial answer stays
        type_and_send(d, "are you there?")
        msg = error_text(d)
        assert "cannot be reached" in msg, msg
        shot = artifact("chat_errors.png")
        d.save_screenshot(shot)
        print(f"\nscreenshot: {shot}")
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        for f in (s.out.name, s.err.name):
            os.unlink(f)


def test_dashboard_updates_under_load(browser, server):
    d = browser
    d.get(server.url + "/dashboard")
    wait(d, lambda: d.find_element("id", "conn").text == "live", 30, "the first /stats poll")
    tile = lambda name: d.find_element("id", "v-" + name).text  # noqa: E731
    gen0 = int(tile("gen-total"))
    client = server.client()
    stop = threading.Event()
    done = []

    def worker(i):  # completions back to back until the page has shown the load
        while not stop.is_set():
            r = client.completions.create(model="code-target", prompt=f"def f{i}():", max_tokens=200,
                                          temperature=0, extra_body={"ignore_eos": True})
            done.append(r.usage.completion_tokens)

    seen = {"running": 0, "tps": 0.0, "ttft": False, "itl": False}
    deadline = time.time() + 60
    with cf.ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(worker, i) for i in range(4)]
        try:
            while not (seen["running"] and seen["tps"] and seen["ttft"] and seen["itl"]) and time.time() < deadline:
                running = tile("running")
                tps = tile("gen-tps")
                seen["running"] = max(seen["running"], int(running) if running.isdigit() else 0)
                seen["tps"] = max(seen["tps"], float(tps) if tps != "–" else 0.0)
                seen["ttft"] |= tile("ttft-p50").endswith(" ms")
                seen["itl"] |= tile("itl-p50").endswith(" ms")
                time.sleep(0.2)
        finally:
            stop.set()
        for f in futs:
            f.result()
    assert done and all(n == 200 for n in done), done
    assert seen["tps"] > 0 and seen["running"] > 0 and seen["ttft"] and seen["itl"], seen
    # one more poll after the load
    wait(d, lambda: int(tile("gen-total")) >= gen0 + 200 * len(done), 30, "the final counters")
    assert int(tile("finished")) >= len(done)
    assert int(tile("kv").split(" / ")[1]) > 0
    # the charts drew something: some pixels of the throughput canvas are not blank
    painted = js(d, "const c = document.getElementById('c-tps');"
                    "const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                    "let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) n++; return n")
    assert painted > 1000
    shot = artifact("dashboard.png")
    d.save_screenshot(shot)
    print(f"\nscreenshot: {shot}  (max running seen {seen['running']}, max tok/s {seen['tps']})")
    assert csp_violations(d) == []
