"""Differential test of tokamak's chat-template interpreter against Python's
jinja2, configured the way Hugging Face transformers' apply_chat_template
configures it (transformers.utils.chat_template_utils._compile_jinja_template):

    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                  extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=False)
    env.globals["raise_exception"], env.globals["strftime_now"]

Note trim_blocks/lstrip_blocks are ON there (jinja2's own defaults are off).
Two deliberate differences are mirrored here rather than tested: strftime_now
returns a fixed date (26 Jul 2024) in tokamak, and {% generation %} just
renders its body.

The C side is the `chat_render` helper (built with the project), found in
$TOKAMAK_BUILD (default <repo>/build).
"""
import datetime
import json
import os
import random
import subprocess

import pytest

jinja2 = pytest.importorskip(
    "jinja2", reason="jinja2 is not installed (pip install jinja2); it is the oracle for this test")
from jinja2 import nodes  # noqa: E402
from jinja2.ext import Extension, loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TOKAMAK_BUILD", os.path.join(REPO, "build"))
RENDER = os.path.join(BUILD, "chat_render")
SHARED = os.environ.get("TK_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
TEMPLATE_DIR = os.path.join(REPO, "tests", "data", "chat_templates")
REAL_TEMPLATES = {
    "llama3": "tokenizers/llama3/tokenizer_config.json",
    "code-target (llama2)": "models/code-target/tokenizer_config.json",
}
FIXED_DATE = datetime.datetime(2024, 7, 26)


class _Generation(Extension):
    """HF's {% generation %} tag (AssistantTracker), minus the index tracking."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _hf_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: FIXED_DATE.strftime(fmt)
    return env


ENV = _hf_env()


def render_py(template, messages, agp, bos="<s>", eos="</s>"):
    """('ok', text) or ('err', message)."""
    kw = {"messages": messages, "add_generation_prompt": agp}
    if bos is not None:
        kw["bos_token"] = bos
    if eos is not None:
        kw["eos_token"] = eos
    try:
        return "ok", ENV.from_string(template).render(**kw)
    except Exception as e:  # template errors, and TypeError etc. from Python operations
        if type(e) is jinja2.exceptions.TemplateError:
            return "raise", str(e)  # raise_exception(msg)
        return "err", f"{type(e).__name__}: {e}"


def render_c(template, messages, agp, bos="<s>", eos="</s>"):
    req = {"template": template, "messages": messages, "add_generation_prompt": agp,
           "bos_token": bos, "eos_token": eos}
    p = subprocess.run([RENDER], input=json.dumps(req).encode(), capture_output=True, timeout=60)
    if p.returncode == 0:
        return "ok", p.stdout.decode()
    assert p.returncode == 1, f"chat_render crashed or misbehaved (rc {p.returncode}): {p.stderr.decode()}"
    return "err", p.stderr.decode().strip()


@pytest.fixture(scope="module", autouse=True)
def _need_renderer():
    if not os.path.exists(RENDER):
        pytest.skip(f"chat_render not found at {RENDER} (build the chat_render target; set TOKAMAK_BUILD)")


def U(text):
    return {"role": "user", "content": text}


def A(text):
    return {"role": "assistant", "content": text}


def S(text):
    return {"role": "system", "content": text}


CONVERSATIONS = {
    "user": [U("Hello!")],
    "system_user": [S("You are terse."), U("What is 2+2?")],
    "multi_turn": [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")],
    "system_multi": [S("Be kind.\nAlways."), U("Hi"), A("Hey."), U("Bye")],
    "ends_with_assistant": [U("Ping"), A("Pong")],
    "whitespace_unicode": [
        U("  Ünïcödé — “quotes” 'single' \"double\"\n\tindented\n  "),
        A("\n<think>hmm, 2+2</think>\nSure: 日本語 🎉  "),
        U("{{ not a template }} {% raw %} \\n"),
    ],
    "two_systems": [S("First."), S("Second."), U("Go")],
    "non_alternating": [U("one"), U("two")],
    "system_only": [S("Only a system prompt.")],
    "empty": [],
}


def _templates():
    out = {}
    for name in sorted(os.listdir(TEMPLATE_DIR)):
        if name.endswith(".jinja"):
            with open(os.path.join(TEMPLATE_DIR, name), encoding="utf-8") as f:
                out[name] = f.read()
    for name, rel in REAL_TEMPLATES.items():
        path = os.path.join(SHARED, rel)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                out[name] = json.load(f)["chat_template"]
    return out


TEMPLATES = _templates()


def assert_same(template, messages, agp, **tokens):
    want = render_py(template, messages, agp, **tokens)
    got = render_c(template, messages, agp, **tokens)
    if want[0] == "raise":
        # raise_exception(msg): tokamak fails with exactly the template's message
        assert got == ("err", want[1]), f"jinja2 raised {want[1]!r}\ntokamak gave {got!r}"
        return
    assert got[0] == want[0], f"jinja2 gave {want!r}\ntokamak gave {got!r}"
    if want[0] == "ok":
        assert got[1] == want[1]


def test_real_templates_present():
    missing = [n for n in REAL_TEMPLATES if n not in TEMPLATES]
    if missing:
        pytest.skip(f"shared assets missing ({SHARED}): {missing}")


@pytest.mark.parametrize("conv", sorted(CONVERSATIONS))
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_matches_jinja2(name, conv):
    for agp in (False, True):
        assert_same(TEMPLATES[name], CONVERSATIONS[conv], agp)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_missing_special_tokens(name):
    # bos/eos undefined render as empty, as with Jinja's default Undefined
    assert_same(TEMPLATES[name], CONVERSATIONS["system_multi"], True, bos=None, eos=None)


# Short templates covering the expression language and statements.
SNIPPETS = [
    "hello", "a\n", "{{ 1 + 2 }}", "{{ 'a' ~ 1 ~ none }}", "{{ [1, 'a', none, true, 1.5] }}",
    "{{ {'a': 1, 'b': [1,2]} }}",
    "{% for m in messages %}{{ loop.index }}:{{ m.role }}|{{ m['content'] | trim }}|{% if loop.last %}L{% endif %}\n{% endfor %}",
    "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(x=0) %}{% for i in range(4) %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}",
    "  {% if true %}\n  yes\n  {% endif %}\nend",
    "{{ messages[1:] | length }} {{ messages[::-1][0].role }} {{ 'hello'[1:3] }} {{ 'héllo'[::-1] }}",
    "{{ 10 / 4 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
    "{{ 'a,b,,c'.split(',') }} {{ '  a b  '.split() }} {{ 'a b c'.rsplit(None, 1) }} {{ 'Hello World'.upper() }} {{ 'x' in 'xyz' }}",
    "{{ foo }}|{{ foo is defined }}|{{ messages[0].nope is defined }}",
    "{{ foo.bar }}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }} {% endfor %}",
    "{{ messages | tojson }}", "{{ messages[0] | tojson(indent=2) }}", "{{ {'a': 'é\"\\n\\u0001'} | tojson }}",
    "{{ {'b': 1, 'a': [1.5, none, true]} | tojson(sort_keys=true, separators=(',', ':')) }}",
    "{{ 'é' | tojson(ensure_ascii=true) }}",
    "{{ raise_exception('boom') }}",
    "{%- for m in messages -%}\n  {{- m.role -}}\n{%- endfor -%}",
    "{# comment #}\nx{#- c -#}  y",
    "{{ strftime_now('%d %b %Y') }}",
    "{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}",
    "{{ 'abc' if false }}|{{ 1 if true else 2 }}",
    "{% for a, b in {'x': 1, 'y': 2}.items() %}{{ a }}={{ b }};{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{{ messages | map(attribute='role') | join(', ') }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
    "{{ ['b', 'A', 'c'] | sort }} {{ [3,1,2] | sort(reverse=true) }} {{ ['a','A','b'] | unique | list }}",
    "{{ 'hello world' | title }} {{ 'hELLO' | capitalize }} {{ \"they're bill's\".title() }}",
    "{{ 3 | string }} {{ '42.5' | int }} {{ 'x' | int(7) }} {{ '3.5' | float }} {{ ' 12 ' | int }}",
    "{{ [1,2,3] | first }} {{ [1,2,3] | last }} {{ [] | first }}",
    "{{ 'a' * 3 }} {{ [1] * 3 }} {{ (1,) }} {{ (1, 2) }} {{ () }}",
    "{{ none }} {{ true }} {{ 1.0 }} {{ 100000000000000000000.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }}",
    "{{ \"it's\" }} {{ ['it\\'s', 'a\"b', 'x\\ny'] }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ 2 not in [1] }}",
    "{{ messages[0].get('role') }} {{ messages[0].get('x', 'd') }} {{ messages[0].keys() | list }}",
    "{{ 'a' + 1 }}", "{{ x.y.z }}", "{% for x in none %}{% endfor %}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
    "{% set s %}inner {{ 1 }}{% endset %}[{{ s }}]",
    "{{ 'abc' | reverse }} {{ [1,2] | reverse | list }} {{ 'a\nb' | indent(2) }} {{ 'a\n\nb\n' | indent(2, true) }}",
    "{{ messages[0].role | upper }}{{ messages|length is divisibleby 2 }}{{ 3 is odd }}",
    "{% raw %}{{ not rendered }}{% endraw %}",
    "{{- ' x ' -}}  \n  {{ 'y' }}",
    "{% for m in messages %}\n    {% if m.role == 'user' %}\n        U: {{ m.content }}\n    {% endif %}\n{% endfor %}\n",
    "{% generation %}gen {{ 1 }}{% endgeneration %}",
    "{% for x in [] %}a{% else %}empty{% endfor %}",
    "{{ loop }}{% for x in [1] %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}{% endfor %}",
    "{{ messages[0]['content'][0] }} {{ 'abc'.find('c') }} {{ 'a-b'.replace('-', '') }} {{ ', '.join(['a', 'b']) }}",
    "{{ 'x'.startswith(('a', 'x')) }} {{ 'abc'.endswith('bc') }} {{ 'abc' is lower }} {{ 'ABC' is upper }}",
    "{% if messages %}{{ messages | length }}{% elif x %}x{% else %}none{% endif %}",
    "{{ dict(a=1) }} {{ namespace(a=1).a }} {{ range(2, 10, 3) | list }} {{ range(5)[-1] }}",
    "{{ [1, 2, 3] | sum }} {{ [1, 5, 3] | max }} {{ ['b', 'a'] | min }} {{ 2.567 | round(2) }} {{ -3 | abs }}",
    "{{ 'abc' is string }} {{ {} is mapping }} {{ none is none }} {{ 1 is number }} {{ 1.5 is float }} {{ x is undefined }}",
]


@pytest.mark.parametrize("i", range(len(SNIPPETS)))
def test_snippet_matches_jinja2(i):
    assert_same(SNIPPETS[i], CONVERSATIONS["system_multi"], True)


# Random templates: whitespace control (-, +, trim_blocks, lstrip_blocks) and
# random expressions.  Fixed seeds keep the test deterministic.
_WS_TEXT = ["", " ", "  ", "\n", " \n ", "\t", "a", "x\n", "\n\n", "  \n", " b ", "\u00a0", "\r\n"]


def _ws_template(rng, depth=3):
    def tag(d):
        k = rng.choice(["var", "if", "for", "set", "comment", "raw"])
        lm, rm = rng.choice(["", "-", "+"]), rng.choice(["", "-", "+"])
        if k == "var":
            return "{{%s 'v' %s}}" % (lm, rm if rm != "+" else "")
        if k == "comment":
            return "{#%s c %s#}" % (lm, rm)
        if k == "set":
            return "{%%%s set q = 1 %s%%}" % (lm, rm)
        if k == "raw":
            return "{%%%s raw %s%%}%s{{x}}%s{%% endraw %%}" % (lm, "-" if rm == "-" else "", rng.choice(_WS_TEXT), rng.choice(_WS_TEXT))
        inner = body(d - 1)
        e1, e2 = rng.choice(["", "-", "+"]), rng.choice(["", "-", "+"])
        if k == "if":
            return "{%%%s if true %s%%}%s{%%%s endif %s%%}" % (lm, rm, inner, e1, e2)
        return "{%%%s for i in [1,2] %s%%}%s{%%%s endfor %s%%}" % (lm, rm, inner, e1, e2)

    def body(d):
        parts = []
        for _ in range(rng.randint(1, 4)):
            parts.append(rng.choice(_WS_TEXT))
            if d > 0 and rng.random() < 0.7:
                parts.append(tag(d))
        return "".join(parts)

    return body(depth)


def test_random_whitespace_control():
    rng = random.Random(20240726)
    for _ in range(250):
        assert_same(_ws_template(rng), [], False)


_ATOMS = ["1", "0", "-3", "2.5", "0.1", "'ab'", "'A b'", "''", "none", "true", "false", "[1, 2, 3]", "['x', 'y']",
          "[]", "{'a': 1, 'b': 'c'}", "{}", "(1, 'q')", "u", "messages", "messages[0]", "messages[-1].content",
          "'  pad  '", "'héllo wörld'", "'a,b,,c'", "7", "-7", "3.0", "1e3"]
_BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">=", "and", "or", "in", "not in", "**"]
_FILTERS = ["trim", "length", "lower", "upper", "string", "first", "last", "list", "tojson", "int", "float",
            "capitalize", "title", "reverse|list", "join(',')", "default('D')", "abs", "sort|list", "unique|list",
            "items|list", "replace('a','Z')", "select|list", "map('string')|list", "min", "max", "sum", "round"]
_TESTS = ["defined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence", "odd",
          "even", "divisibleby(3)", "boolean", "true", "false", "lower", "upper", "in([1, 'ab'])", "eq(1)"]
_METHODS = [".strip()", ".upper()", ".lower()", ".split()", ".split(',')", ".title()", ".startswith('a')",
            ".endswith('b')", ".replace('a', 'b')", ".items()|list", ".keys()|list", ".values()|list", ".get('a')",
            ".get('zz', 5)", ".count('a')", ".find('b')", ".rstrip('c')", ".lstrip()"]


def _expr(rng, d):
    r = rng.random()
    if d <= 0 or r < 0.25:
        return rng.choice(_ATOMS)
    if r < 0.45:
        return "(%s %s %s)" % (_expr(rng, d - 1), rng.choice(_BINOPS), _expr(rng, d - 1))
    if r < 0.6:
        return "%s | %s" % (_expr(rng, d - 1), rng.choice(_FILTERS))
    if r < 0.7:
        return "(%s is %s%s)" % (_expr(rng, d - 1), rng.choice(["", "not "]), rng.choice(_TESTS))
    if r < 0.8:
        return "(%s)%s" % (_expr(rng, d - 1), rng.choice(_METHODS))
    if r < 0.87:
        return "(%s)[%s]" % (_expr(rng, d - 1), rng.choice(["0", "-1", "1:", ":2", "::-1", "'a'", "1:3:2", "5"]))
    if r < 0.94:
        return "(%s if %s else %s)" % (_expr(rng, d - 1), _expr(rng, d - 1), _expr(rng, d - 1))
    return "not %s" % _expr(rng, d - 1)


# Known, documented deviations: printf-style '%' formatting is unsupported;
# Jinja constant-folds slices of non-sequences to Undefined at compile time
# but raises for the same slice at run time (tokamak always raises).
_KNOWN = ("not subscriptable", "unhashable type: 'slice'", "printf-style")


def test_random_expressions():
    rng = random.Random(7)
    msgs = [U("Hi "), A("Yo")]
    for _ in range(400):
        t = "{{ %s }}" % _expr(rng, 3)
        got = render_c(t, msgs, False)
        if got[0] == "err" and any(k in got[1] for k in _KNOWN):
            continue
        want = render_py(t, msgs, False)
        want = ("err", want[1]) if want[0] == "raise" else want
        assert got[0] == want[0] and (want[0] == "err" or got[1] == want[1]), f"{t}\njinja2: {want!r}\ntokamak: {got!r}"
