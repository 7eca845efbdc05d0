"""tokamak chat: the interactive chat through a pseudo-terminal (pexpect),
the line protocol with piped stdin, and its errors.

Greedy decoding on code-target (a Llama with a chat template in
tokenizer_config.json, context 512) makes the answers deterministic."""
import json
import os
import re
import subprocess

import pytest

pexpect = pytest.importorskip("pexpect", reason="pexpect is not installed (tools/deps.sh installs it)")

PROMPT = ">>> "
TIMEOUT = 300  # the ASan binary is slow


@pytest.fixture(scope="module", params=["release", "asan"])
def bin_path(request, tokamak_bin):
    """The release binary, and the ASan/UBSan one when TOKAMAK_ASAN_BIN names it
    (errors and leaks make it exit non-zero, which every test checks)."""
    if request.param == "release":
        return tokamak_bin
    path = os.environ.get("TOKAMAK_ASAN_BIN")
    if not path or not os.path.exists(path):
        pytest.skip("TOKAMAK_ASAN_BIN not set")
    return path


@pytest.fixture(scope="module")
def target(shared):
    path = os.path.join(shared, "models", "code-target")
    if not os.path.isdir(path):
        pytest.skip("code-target not in the shared assets")
    return path


def spawn(bin_path, *args):
    env = dict(os.environ, NO_COLOR="1")
    child = pexpect.spawn(bin_path, ["chat", *args], env=env, encoding="utf-8", timeout=TIMEOUT,
                          dimensions=(50, 200))
    child.expect_exact(PROMPT)
    return child


def ask(child, line):
    """Sends a line and returns what came back before the next prompt."""
    child.sendline(line)
    child.expect_exact(PROMPT)
    return child.before


def stats(child):
    out = ask(child, "/stats")
    conv = re.search(r"conversation: (\d+) exchange", out)
    ctx = re.search(r"context: (\d+) of (\d+) tokens used", out)
    assert conv and ctx, out
    s = {"exchanges": int(conv[1]), "used": int(ctx[1]), "ctx": int(ctx[2])}
    m = re.search(r"its prompt: (\d+) tokens, (\d+) cached", out)
    if m:
        s.update(prompt=int(m[1]), cached=int(m[2]))
    return s


def answer_of(out, line):
    """The answer in a pty transcript: what follows the echoed line."""
    text = out.replace("\r\n", "\n")
    assert text.startswith(line), text
    return text[len(line):].strip()


def finish(child):
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def run_piped(bin_path, args, text):
    return subprocess.run([bin_path, "chat", *args], input=text, capture_output=True, text=True, timeout=TIMEOUT)


def test_two_turns_reset_and_ctrl_d(bin_path, target):
    child = spawn(bin_path, "-m", target, "--temp", "0", "-n", "24")
    q1, q2 = "Write a Python function that adds two numbers.", "Now make it subtract."
    a1 = answer_of(ask(child, q1), q1)
    assert a1
    s1 = stats(child)
    assert s1["exchanges"] == 1 and s1["ctx"] == 512 and s1["used"] > s1["prompt"]
    ask(child, q2)
    s2 = stats(child)
    # The second prompt holds the first exchange: the context grew by more
    # than the second question.
    assert s2["exchanges"] == 2
    assert s2["prompt"] > s1["used"], (s1, s2)
    assert s2["used"] > s1["used"]
    assert "[conversation cleared]" in ask(child, "/reset")
    assert stats(child)["exchanges"] == 0
    # After /reset the first question is asked afresh: same prompt, same answer.
    assert answer_of(ask(child, q1), q1) == a1
    assert stats(child)["prompt"] == s1["prompt"]
    assert finish(child) == 0


def test_ctrl_c_stops_the_answer_not_the_chat(bin_path, target):
    # -n -1: this greedy answer runs until the context is full (~490 tokens).
    child = spawn(bin_path, "-m", target, "--temp", "0")
    child.sendline("Write a long Python class for a bank account with many methods.")
    child.expect(r"\n.{20}")  # the answer has started streaming
    child.sendintr()
    child.expect_exact("[stopped]")
    child.expect_exact(PROMPT)
    s = stats(child)
    assert s["exchanges"] == 1 and s["used"] < s["ctx"], s  # the partial answer is kept, the context was not filled
    # Ctrl-C at the prompt warns, a second one leaves.
    child.sendintr()
    child.expect_exact("Ctrl-C again")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_commands_help_system_save_load(bin_path, target, tmp_path):
    child = spawn(bin_path, "-m", target, "--temp", "0", "-n", "8", "--system", "You are terse.")
    assert "/save FILE" in ask(child, "/help")
    ask(child, "Hello")
    path = tmp_path / "conv.json"
    assert "saved 3 messages" in ask(child, f"/save {path}")
    msgs = json.loads(path.read_text())["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[0]["content"] == "You are terse." and msgs[1]["content"] == "Hello"
    assert "system prompt removed" in ask(child, "/system")
    ask(child, "/reset")
    assert "loaded 3 messages" in ask(child, f"/load {path}")
    s = stats(child)
    assert s["exchanges"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "assistant", "content": "x"}]))
    assert "expected 'user'" in ask(child, f"/load {bad}")
    assert stats(child)["exchanges"] == 1  # a refused file leaves the conversation alone
    assert "unknown command" in ask(child, "/frobnicate")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_piped_two_lines_two_answers(bin_path, target):
    r = run_piped(bin_path, ["-m", target, "--temp", "0", "-n", "40"],
                  "Write a Python function that adds two numbers.\nNow make it subtract.\n")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert len(lines) == 3 and lines[2] == "", r.stdout  # two answers, each one line
    assert all(lines[:2]) and PROMPT not in r.stdout and "\033" not in r.stdout


def test_piped_trims_the_oldest_exchanges(bin_path, target):
    r = run_piped(bin_path, ["-m", target, "--temp", "0", "-n", "48", "-c", "160"],
                  "".join(f"Question {i}: write a Python function number {i}.\n" for i in range(5)) + "/stats\n")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split("\n")) == 6
    assert "dropped the oldest" in r.stderr
    used = int(re.search(r"context: (\d+) of 160", r.stderr)[1])
    assert used <= 160


def test_piped_message_too_long(bin_path, target):
    r = run_piped(bin_path, ["-m", target, "--temp", "0", "-n", "16", "-c", "128"],
                  "Hello\n" + "word " * 300 + "\nHi again\n/stats\n")
    assert r.returncode == 1  # the line protocol reports the refused message
    assert "does not fit" in r.stderr
    lines = r.stdout.split("\n")
    assert len(lines) == 4 and lines[0] and lines[1] == "" and lines[2], r.stdout  # the chat went on
    assert "conversation: 2 exchanges" in r.stderr  # and the refusal kept the earlier exchange


def test_piped_invalid_utf8(bin_path, target):
    r = subprocess.run([bin_path, "chat", "-m", target, "--temp", "0", "-n", "4"], input=b"a\xffb\nhi\n",
                       capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 1
    assert b"the message: invalid UTF-8 at byte 1" in r.stderr
    lines = r.stdout.split(b"\n")
    assert len(lines) == 3 and lines[0] == b"" and lines[1], r.stdout


def test_no_chat_template(bin_path, shared):
    model = os.path.join(shared, "models", "aidreams260K.gguf")
    r = run_piped(bin_path, ["-m", model], "hi\n")
    assert r.returncode == 1
    assert "no chat template" in r.stderr and "--chat-template FILE" in r.stderr


def test_chat_template_file(bin_path, shared, tmp_path):
    model = os.path.join(shared, "models", "aidreams260K.gguf")
    tmpl = tmp_path / "t.jinja"
    tmpl.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                    "{% if add_generation_prompt %}assistant:{% endif %}")
    r = run_piped(bin_path, ["-m", model, "--chat-template", str(tmpl), "--temp", "0", "-n", "8"], "hi\nhey\n")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split("\n")) == 3
    # A template that fails to render: the message is refused, the chat goes on.
    tmpl.write_text("{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}"
                    "{{ messages[0]['content'] }}")
    r = run_piped(bin_path, ["-m", model, "--chat-template", str(tmpl), "--temp", "0", "-n", "8"],
                  "hi\nhey\n/stats\n")
    assert r.returncode == 1
    assert "one message only" in r.stderr
    assert "conversation: 1 exchange" in r.stderr
    tmpl.write_text("{% for m in messages %}")
    r = run_piped(bin_path, ["-m", model, "--chat-template", str(tmpl)], "hi\n")
    assert r.returncode == 1 and "chat template" in r.stderr


def test_missing_model(bin_path, tmp_path):
    r = run_piped(bin_path, ["-m", str(tmp_path / "nope.gguf")], "hi\n")
    assert r.returncode == 1 and "tokamak chat:" in r.stderr
    r = run_piped(bin_path, [], "")
    assert r.returncode == 2 and "-m MODEL" in r.stderr
