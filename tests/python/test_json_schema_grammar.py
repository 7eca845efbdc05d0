"""JSON Schema grammar differential: for each schema, random documents valid by
construction and mutated ones go through the compiled grammar
(build/grammar_accept, the test hook over src/grammar/schema.c) and through
the `jsonschema` package; the grammar must accept exactly the documents
jsonschema validates (a pattern's final $ read as ECMA-262's end of string).

Within what docs/grammar.md says the grammar enforces: documents are written
by json.dumps (compact or with its default spaces, ensure_ascii=False),
properties in schema order and extra keys after them; an absent
additionalProperties beside properties/required means false here (the
compiler's strict default, given to jsonschema explicitly); oneOf schemas
have disjoint branches; allOf is read as its branches merged.  For the formats jsonschema does not check without
optional packages (time, date-time), and for patterns (Python's re is the
reference), the check is one-way where the grammar is documented to accept a
subset: every accepted document must validate."""
import copy
import datetime
import json
import os
import random
import re
import subprocess

import pytest

from conftest import REPO

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (the reference validator) is not installed")

TOOL = os.environ.get("TK_GRAMMAR_ACCEPT_BIN") or os.path.join(REPO, "build", "grammar_accept")

DEFS_TREE = {
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                 "maxItems": 3}},
                       "required": ["v"], "additionalProperties": False}},
    "$ref": "#/$defs/node",
}

# (name, schema, exact): exact False = one-way (accepted => valid)
SCHEMAS = [
    ("function_params", {
        "type": "object",
        "properties": {"location": {"type": "string", "description": "City"},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["location", "unit"], "additionalProperties": False}, True),
    ("optional_only", {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"},
                                                        "c": {"type": "string", "maxLength": 2}}}, True),
    ("nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1},
                                                  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
                 "required": ["name"]},
        "scores": {"type": "array", "items": {"type": "number"}, "minItems": 1}},
        "required": ["user", "scores"]}, True),
    ("int_range_neg", {"type": "integer", "minimum": -120, "maximum": 35}, True),
    ("int_exclusive", {"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 1000}, True),
    ("int_lower_only", {"type": "integer", "minimum": 250}, True),
    ("number_range", {"type": "number", "minimum": -2, "exclusiveMaximum": 3}, True),
    ("number_upper", {"type": "number", "maximum": -1}, True),
    ("type_list", {"type": ["string", "null", "integer"]}, True),
    ("enum_mixed", {"enum": ["a", "b\"c", 3, None, True, [1, 2], {"k": "v"}]}, True),
    ("const", {"const": {"x": [1, "y"]}}, True),
    ("tuple", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
               "items": {"type": "boolean"}, "maxItems": 4}, True),
    ("tuple_closed", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "null"}], "items": False}, True),
    ("array_bounds", {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "maxItems": 5}, True),
    ("any_of", {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 0},
                          {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"],
                           "additionalProperties": False}]}, True),
    ("one_of_disjoint", {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "null"}}]}, True),
    ("all_of", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                          {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}, True),
    ("recursive_ref", DEFS_TREE, True),
    ("map", {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}, True),
    ("props_and_extra", {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
                         "required": ["id"], "additionalProperties": {"type": "boolean"}}, True),
    ("format_date", {"type": "string", "format": "date"}, True),
    ("format_uuid", {"type": "string", "format": "uuid"}, False),
    ("format_email", {"type": "string", "format": "email"}, False),
    ("format_date_time", {"type": "string", "format": "date-time"}, False),
    ("format_time", {"type": "string", "format": "time"}, False),
    ("pattern_anchored", {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"}, True),
    ("pattern_search", {"type": "string", "pattern": "ab+c"}, True),
    ("pattern_quote", {"type": "string", "pattern": '^["\\\\a-c]*$'}, True),
    ("boolean_true", True, True),
    ("nullable_ref", {"$defs": {"s": {"type": "string", "minLength": 2}},
                      "anyOf": [{"$ref": "#/$defs/s"}, {"type": "null"}]}, True),
]

CHARS = ["a", "b", "c", "z", "0", "7", "-", " ", '"', "\\", "\n", "\t", "\x01", "é", "€", "😀", "@", ".", ":", "T", "Z"]
SAMPLES = {  # valid strings for formats / patterns, mixed with random ones
    "date": ["2024-02-29", "1999-12-31", "2023-02-29", "2023-04-31", "0000-01-01", "2023-1-01", "2023-13-01"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-42661417400G", "123e4567e89b12d3"],
    "email": ["a.b+c@example.com", "x@y.io", "no-at-sign", "@x.com"],
    "date-time": ["2024-02-29T23:59:59Z", "1999-12-31T00:00:00.123+05:30", "2024-02-29 23:59:59Z",
                  "2024-02-29T24:00:00Z"],
    "time": ["23:59:59Z", "00:00:00.5-08:00", "12:30", "25:00:00Z"],
    "^[a-z]{2,4}-[0-9]+$": ["ab-1", "abcd-0123", "a-1", "abcde-1", "ab-", "ab-1\n"],
    "ab+c": ["abc", "xxabbbcyy", "ac", "abbb"],
    '^["\\\\a-c]*$': ['a"b\\c', "", "abd", '""'],
}


def resolve(root, ref):
    node = root
    for part in ref[2:].split("/") if ref != "#" else []:
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def rand_string(rng, lo=0, hi=8):
    return "".join(rng.choice(CHARS) for _ in range(rng.randint(lo, hi)))


def rand_value(rng, depth=0):
    kind = rng.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.randint(-2000, 2000)
    if kind == 3:
        return rng.randint(-100, 100) + rng.choice([0.5, 0.25, 0.125])
    if kind == 4:
        return rand_string(rng)
    if kind == 5:
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rand_string(rng, 1, 3): rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def merged(schema):
    """allOf branches united (the test's allOf schemas merge trivially)"""
    if not isinstance(schema, dict) or "allOf" not in schema:
        return schema
    out = {k: v for k, v in schema.items() if k != "allOf"}
    for b in schema["allOf"]:
        for k, v in b.items():
            if k == "properties":
                out.setdefault("properties", {}).update(v)
            elif k == "required":
                out["required"] = out.get("required", []) + v
            else:
                out[k] = v
    return out


def gen(rng, root, s, depth=0):
    """a value valid for s (by construction)"""
    s = merged(s)
    if s is True or s == {}:
        return rand_value(rng)
    if "$ref" in s:
        return gen(rng, root, resolve(root, s["$ref"]), depth + 1)
    if "enum" in s:
        return copy.deepcopy(rng.choice(s["enum"]))
    if "const" in s:
        return copy.deepcopy(s["const"])
    for key in ("anyOf", "oneOf"):
        if key in s:
            return gen(rng, root, rng.choice(s[key]), depth + 1)
    t = s.get("type")
    if isinstance(t, list):
        t = rng.choice(t)
    if t is None:
        t = "object" if "properties" in s or "additionalProperties" in s else rng.choice(["string", "integer"])
    if t == "null":
        return None
    if t == "boolean":
        return rng.choice([True, False])
    if t == "integer":
        lo = s.get("minimum", s.get("exclusiveMinimum", -10**6 - 1) + 1)
        hi = s.get("maximum", s.get("exclusiveMaximum", 10**6 + 1) - 1)
        return rng.randint(lo, hi) if rng.random() < 0.7 else rng.choice([lo, hi])
    if t == "number":
        lo = s.get("minimum", s.get("exclusiveMinimum", -1000))
        hi = s.get("maximum", s.get("exclusiveMaximum", 1000))
        v = round(rng.uniform(lo, hi), rng.randint(0, 3)) + 0.0  # no -0.0: the grammar writes 0 unsigned
        return v if (v > lo or "minimum" in s) and (v < hi or "maximum" in s) else lo + (hi - lo) / 2
    if t == "string":
        key = s.get("format", s.get("pattern"))
        if key is not None and rng.random() < 0.7:
            return rng.choice(SAMPLES[key])
        return rand_string(rng, s.get("minLength", 0), min(s.get("maxLength", 8), 8))
    if t == "array":
        prefix = s.get("prefixItems", [])
        lo = s.get("minItems", 0)
        hi = s.get("maxItems", lo + 3 if depth < 4 else lo)
        if s.get("items") is False:
            hi = min(hi, len(prefix))
        n = rng.randint(lo, max(lo, hi))
        return [gen(rng, root, prefix[i] if i < len(prefix) else s.get("items", True), depth + 1) for i in range(n)]
    out = {}
    req = s.get("required", [])
    for k, v in s.get("properties", {}).items():
        if k in req or rng.random() < 0.6:
            out[k] = gen(rng, root, v, depth + 1)
    extra = s.get("additionalProperties")
    if extra not in (None, False):
        for _ in range(rng.randint(0, 2)):
            k = rng.choice(["zz", "id", "x", "é"])
            if k not in out:
                out[k] = gen(rng, root, extra, depth + 1)
    return out


def mutate(rng, v):
    """v with one random change somewhere (the key order kept)"""
    if isinstance(v, dict) and v and rng.random() < 0.6:
        k = rng.choice(list(v))
        choice = rng.randrange(3)
        if choice == 0:
            del v[k]
        elif choice == 1:
            v["zz" + rand_string(rng, 0, 2)] = rand_value(rng)
        else:
            v[k] = mutate(rng, v[k])
        return v
    if isinstance(v, list) and v and rng.random() < 0.6:
        i = rng.randrange(len(v))
        choice = rng.randrange(3)
        if choice == 0:
            v.pop(i)
        elif choice == 1:
            v.append(copy.deepcopy(v[i]))
        else:
            v[i] = mutate(rng, v[i])
        return v
    if isinstance(v, int) and not isinstance(v, bool) and rng.random() < 0.5:
        return v + rng.choice([-1, 1, -1000, 1000])
    if isinstance(v, str) and rng.random() < 0.5:
        return v + rng.choice(CHARS) if rng.random() < 0.5 else v[:-1]
    return rand_value(rng)


def strict(s):
    """the compiler's reading: additionalProperties absent beside properties/required = false"""
    if isinstance(s, list):
        return [strict(x) for x in s]
    if not isinstance(s, dict):
        return s
    if "allOf" in s:
        return strict(merged(s))
    out = {k: strict(v) if k not in ("enum", "const") else v for k, v in s.items()}
    if isinstance(s.get("pattern"), str) and s["pattern"].endswith("$"):
        out["pattern"] = s["pattern"][:-1] + r"\Z"  # ECMA-262's $; Python's also matches before a final newline
    if ("properties" in s or "required" in s) and "additionalProperties" not in s and "allOf" not in s:
        out["additionalProperties"] = False
    return out


def extra_format_checks(checker):
    """time and date-time, which jsonschema checks only with rfc3339-validator"""
    rfc_time = r"\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)"

    @checker.checks("date-time", raises=ValueError)
    def date_time(s):
        return not isinstance(s, str) or (re.fullmatch(r"\d{4}-\d\d-\d\d[Tt]" + rfc_time, s) is not None and
                                          datetime.datetime.fromisoformat(s.replace("z", "Z")) is not None)

    @checker.checks("time", raises=ValueError)
    def time(s):
        return not isinstance(s, str) or (re.fullmatch(rfc_time, s) is not None and
                                          datetime.time.fromisoformat(s) is not None)
    return checker


def grammar_accepts(schema, docs):
    out = subprocess.run([TOOL, json.dumps(schema)], input="\n".join(docs) + "\n", capture_output=True, text=True,
                         timeout=600)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == len(docs), out.stdout[:500] + out.stderr[:500]
    return [x == "1" for x in lines]


@pytest.mark.parametrize("name,schema,exact", SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_grammar_matches_jsonschema(name, schema, exact):
    if not os.path.exists(TOOL):
        pytest.skip(f"{TOOL} not built (cmake --build build --target grammar_accept)")
    rng = random.Random(name)
    checker = extra_format_checks(copy.deepcopy(jsonschema.Draft202012Validator.FORMAT_CHECKER))
    validator = jsonschema.Draft202012Validator(strict(schema), format_checker=checker)
    values = []
    for i in range(400):
        v = gen(rng, schema, schema)
        values.append(mutate(rng, v) if i % 2 else v)
    docs = []
    for i, v in enumerate(values):
        docs.append(json.dumps(v, ensure_ascii=False, separators=(",", ":") if i % 3 else None))
    accepted = grammar_accepts(schema, docs)
    valid = [validator.is_valid(json.loads(d)) for d in docs]
    for d, a, ok in zip(docs, accepted, valid):
        assert not a or ok, f"{name}: grammar accepts an invalid document: {d}"
        if exact:
            assert a or not ok, f"{name}: grammar refuses a valid document: {d}"
    assert sum(valid) >= 20, f"{name}: too few valid documents"
    assert schema is True or len(docs) - sum(valid) >= 10, f"{name}: too few invalid documents"
