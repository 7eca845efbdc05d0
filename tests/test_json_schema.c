/* The JSON Schema compiler: documents each schema's grammar must accept or
 * reject (fed byte by byte through tk_gstate), and schemas it must refuse
 * with an error naming the keyword or field and where it is. */
#include <string.h>

#include "grammar/grammar.h"
#include "grammar_feed.h"
#include "tk_test.h"


typedef struct scase {
    const char *schema;
    const char *accept[8];
    const char *reject[8];
} scase;

static const scase cases[] = {
    /* OpenAI-style function parameters: order kept, required present, no extra keys */
    {"{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]},"
     "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"],\"additionalProperties\":false}",
     {"{\"city\":\"Oslo\"}", "{\"city\":\"Oslo\",\"unit\":\"c\"}", "{ \"city\" : \"\", \"days\" : -3 }",
      "{\"city\":\"a\",\"unit\":\"f\",\"days\":0}"},
     {"{}", "{\"unit\":\"c\"}", "{\"unit\":\"c\",\"city\":\"Oslo\"}", "{\"city\":\"Oslo\",\"x\":1}",
      "{\"city\":\"Oslo\",}", "{\"city\":\"Oslo\",\"unit\":\"k\"}", "{\"city\":1}", " {\"city\":\"a\"}"}},
    /* all optional: any subset in order */
    {"{\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"boolean\"}}}",
     {"{}", "{\"a\":null}", "{\"b\":true}", "{\"a\":null,\"b\":false}"},
     {"{,\"b\":true}", "{\"b\":true,\"a\":null}", "{\"a\":null,}", "{\"a\":1}"}},
    /* absent additionalProperties without properties: any members */
    {"{\"type\":\"object\"}", {"{}", "{\"x\":[1,{\"y\":null}]}"}, {"[]", "{\"x\"}"}},
    /* additionalProperties as a schema beside properties: other keys only */
    {"{\"properties\":{\"ab\":{\"type\":\"string\"}},\"required\":[\"ab\"],\"additionalProperties\":{\"type\":\"integer\"}}",
     {"{\"ab\":\"x\"}", "{\"ab\":\"x\",\"a\":1}", "{\"ab\":\"x\",\"abc\":2,\"b\":3}", "{\"ab\":\"x\",\"\":4}"},
     {"{\"ab\":\"x\",\"ab\":1}", "{\"ab\":\"x\",\"a\":\"s\"}", "{\"a\":1}"}},
    /* excluded names sharing a prefix, one with a multi-byte character (a fuzz find) */
    {"{\"properties\":{\"ab\":{},\"a\\u00e9\":{}},\"additionalProperties\":{\"type\":\"null\"}}",
     {"{\"a\":null}", "{\"ab\":1,\"a\xc3\xa9\":[],\"aa\":null,\"a\xc3\xa8\":null}", "{\"abc\":null}"},
     {"{\"ab\":1,\"ab\":null}", "{\"a\xc3\xa9\":null,\"ab\":1}", "{\"b\":1}"}},
    /* strings: lengths count code points and escapes as one */
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
     {"\"ab\"", "\"abc\"", "\"\\u00e9\\n\"", "\"\xc3\xa9\xe2\x82\xac\"", "\"\\ud83d\\ude00x\""},
     {"\"a\"", "\"abcd\"", "\"\\q\"", "\"a\nb\"", "\"\\ud83d\"", "\"\\ud83dx\""}},
    /* pattern over the decoded string: " and \ must be escaped, a search without anchors */
    {"{\"type\":\"string\",\"pattern\":\"^[a-z\\\"]+$\"}", {"\"ab\"", "\"a\\\"b\"", "\"\\u0022\""}, {"\"a\"b\"", "\"\"", "\"A\""}},
    {"{\"type\":\"string\",\"pattern\":\"[0-9]{3}\"}", {"\"123\"", "\"ab123cd\""}, {"\"12\"", "\"a1b2c3\""}},
    {"{\"type\":\"string\",\"pattern\":\"^a\\\\tb$\"}", {"\"a\\tb\"", "\"a\\u0009b\""}, {"\"a\tb\"", "\"ab\""}},
    /* formats */
    {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-29\"", "\"1999-12-31\"", "\"2000-02-29\""},
     {"\"2023-02-29\"", "\"1900-02-29\"", "\"2024-04-31\"", "\"2024-13-01\"", "\"0000-01-01\"", "\"24-01-01\""}},
    {"{\"format\":\"date-time\",\"type\":\"string\"}", {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T03:04:05.123+05:30\""},
     {"\"2024-01-02T24:00:00Z\"", "\"2024-01-02T03:04:05\"", "\"2024-01-02 03:04:05Z\""}},
    {"{\"type\":\"string\",\"format\":\"time\"}", {"\"23:59:59Z\"", "\"00:00:00-08:00\""}, {"\"23:60:00Z\"", "\"12:30Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-A456-426614174000\""},
     {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""}},
    {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b+c@example.com\""}, {"\"a@b\"", "\"@b.com\"", "\"ab.com\""}},
    /* integers: exact ranges */
    {"{\"type\":\"integer\",\"minimum\":-15,\"maximum\":120}", {"-15", "-9", "0", "7", "99", "120", "100"},
     {"-16", "121", "130", "-0", "007", "1.0", "1e2", "200"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":99}", {"100", "123456789012345"}, {"99", "0", "-5", "10"}},
    {"{\"type\":\"integer\",\"minimum\":2.5,\"exclusiveMaximum\":5}", {"3", "4"}, {"2", "5"}},
    /* draft 4 / OpenAPI 3.0 boolean exclusiveMaximum */
    {"{\"type\":\"integer\",\"maximum\":10,\"exclusiveMaximum\":true}", {"9", "-100"}, {"10"}},
    /* numbers: integral bounds exact, no exponent when bounded */
    {"{\"type\":\"number\",\"minimum\":0,\"exclusiveMaximum\":1}", {"0", "0.5", "0.999", "0.0"},
     {"1", "1.0", "-0.5", "1.5", "5e-1"}},
    {"{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":2}", {"-1", "-0.25", "2", "2.000", "1.75"}, {"-2", "2.01", "3"}},
    {"{\"type\":\"number\"}", {"0", "-1.5e+10", "3.25", "1E5"}, {"01", ".5", "1.", "+1", "NaN"}},
    /* type lists, nullable, enum, const */
    {"{\"type\":[\"string\",\"null\"]}", {"\"x\"", "null"}, {"1", "true"}},
    {"{\"type\":\"integer\",\"nullable\":true}", {"5", "null"}, {"\"5\""}},
    {"{\"enum\":[\"a\",1,null,[1,2],{\"k\":true}],\"type\":[\"string\",\"array\",\"object\"]}",
     {"\"a\"", "[1,2]", "[ 1 , 2 ]", "{\"k\":true}"}, {"1", "null", "[2,1]", "{\"k\":false}"}},
    {"{\"const\":\"fixed\"}", {"\"fixed\""}, {"\"fixe\"", "\"fixedd\""}},
    /* arrays */
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
     {"[1]", "[1,2,3]", "[ 1 , 2 ]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],\"items\":false}",
     {"[]", "[\"a\"]", "[\"a\",true]"}, {"[true]", "[\"a\",true,1]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"minItems\":3,\"items\":{\"type\":\"null\"}}",
     {"[\"a\",null,null]", "[\"a\",null,null,null]"}, {"[\"a\",null]", "[null,null,null]"}},
    /* combinators */
    {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\",\"minimum\":0}]}", {"\"s\"", "5"}, {"-5", "null"}},
    {"{\"type\":\"integer\",\"oneOf\":[{\"maximum\":-10},{\"minimum\":10}]}", {"-10", "10", "55"}, {"0", "9", "\"a\""}},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
     "{\"properties\":{\"a\":{\"minimum\":0},\"b\":{\"type\":\"string\"}}}]}",
     {"{\"a\":1}", "{\"a\":0,\"b\":\"x\"}"}, {"{\"a\":-1}", "{\"b\":\"x\"}", "{\"a\":\"1\"}"}},
    /* $ref, $defs, definitions, recursion through arrays */
    {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
     "\"required\":[\"c\"]}},\"$ref\":\"#/$defs/n\"}",
     {"{\"c\":[]}", "{\"c\":[{\"c\":[]},{\"c\":[{\"c\":[]}]}]}"}, {"{}", "{\"c\":[{}]}"}},
    {"{\"definitions\":{\"s\":{\"type\":\"string\"}},\"properties\":{\"x\":{\"$ref\":\"#/definitions/s\",\"maxLength\":1}}}",
     {"{\"x\":\"a\"}", "{}"}, {"{\"x\":\"ab\"}", "{\"x\":1}"}},
    /* boolean schemas and annotations */
    {"true", {"1", "{\"a\":[null]}", "\"s\""}, {"", "[1,]"}},
    {"{\"title\":\"t\",\"description\":\"d\",\"examples\":[1],\"default\":1,\"$schema\":\"x\",\"$id\":\"y\",\"$comment\":\"z\","
     "\"deprecated\":false,\"readOnly\":true,\"writeOnly\":false,\"type\":\"boolean\"}",
     {"true", "false"}, {"1"}},
    {"{\"properties\":{\"gone\":false,\"x\":{\"type\":\"null\"}}}", {"{}", "{\"x\":null}"}, {"{\"gone\":1}"}},
    /* a property name that needs escaping */
    {"{\"properties\":{\"a\\\"b\\n\":{\"type\":\"null\"}},\"required\":[\"a\\\"b\\n\"]}", {"{\"a\\\"b\\n\":null}"}, {"{}"}},
};

typedef struct ecase {
    const char *schema;
    const char *message; /* a part of the error */
} ecase;

static const ecase errors[] = {
    {"{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"object\",\"patternProperties\":{}}}}",
     "unsupported keyword 'patternProperties' at /properties/tags"},
    {"{\"multipleOf\":2}", "unsupported keyword 'multipleOf' at (root)"},
    {"{\"type\":\"strin\"}", "'type' must be a type name"},
    {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "'minLength' greater than 'maxLength'"},
    {"{\"type\":\"array\",\"minItems\":5,\"maxItems\":2}", "'minItems' greater than 'maxItems'"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":2}", "minimum is greater than the maximum"},
    {"{\"type\":\"integer\",\"minimum\":2.2,\"maximum\":2.8}", "no integer lies between"},
    {"{\"type\":\"string\",\"maxLength\":100000}", "'maxLength' over the limit (1000)"},
    {"{\"type\":\"array\",\"minItems\":-1}", "'minItems' must be a non-negative integer"},
    {"{\"type\":\"string\",\"format\":\"hostname\"}", "unsupported format 'hostname'"},
    {"{\"type\":\"string\",\"pattern\":\"(a\"}", "'pattern' at (root): regex: expected ')'"},
    {"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "only one of pattern, format and minLength/maxLength"},
    {"{\"$ref\":\"other.json#/a\"}", "only local references"},
    {"{\"$ref\":\"#/$defs/missing\"}", "names nothing in the document"},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "recurses without an object or array"},
    {"{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
     "recurses without an object or array"},
    {"{\"allOf\":[{\"type\":\"string\",\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "allOf: cannot merge differing 'pattern'"},
    {"{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},{\"properties\":{\"b\":{}}}]}",
     "property 'b' is refused"},
    {"{\"enum\":[1,2],\"minimum\":1}", "'minimum' beside enum/const"},
    {"{\"items\":[{\"type\":\"string\"}]}", "'items' as an array"},
    {"false", "accepts no JSON value"},
    {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", "accepts no JSON value"},
    {"{\"type\":", "invalid JSON"},
    {"{\"type\":\"string\",\"type\":\"null\"}", "invalid JSON"},
    {"{\"properties\":{\"a\":{\"properties\":{\"b\":5}}}}", "a schema must be an object or a boolean at /properties/a/properties/b"},
    {"{\"properties\":{\"a~b/c\":{\"minProperties\":1}}}", "at /properties/a~0b~1c"},
    {"{\"type\":\"number\",\"maximum\":1e300}", "beyond +-1e18"},
    {"{\"anyOf\":[]}", "'anyOf' must be a non-empty array"},
    /* self-merging recursion: each level merges the sibling into a branch that refers back */
    {"{\"$defs\":{\"a\":{\"type\":\"object\",\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},"
     "\"$ref\":\"#/$defs/a\"}",
     "nested deeper than 64"},
};

/* A schema nested deeper than the compiler allows: properties in properties. */
static char *deep_schema(int depth) {
    const char *open = "{\"properties\":{\"a\":", *close = "}}";
    size_t n = (strlen(open) + strlen(close)) * (size_t)depth + 3;
    char *s = malloc(n);
    if (!s) return NULL;
    s[0] = 0;
    for (int i = 0; i < depth; i++) strcat(s, open);
    strcat(s, "{}");
    for (int i = 0; i < depth; i++) strcat(s, close);
    return s;
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const scase *c = &cases[i];
        tk_grammar g;
        tk_err err = {{0}};
        int rc = tk_grammar_from_json_schema(&g, c->schema, strlen(c->schema), &err);
        CHECK(rc == 0, "schema %zu compiles: %s", i, err.msg);
        if (rc) continue;
        for (int j = 0; j < 8 && c->accept[j]; j++)
            CHECK(grammar_matches(&g, c->accept[j]) == 1, "schema %zu accepts %s", i, c->accept[j]);
        for (int j = 0; j < 8 && c->reject[j]; j++)
            CHECK(grammar_matches(&g, c->reject[j]) == 0, "schema %zu rejects %s", i, c->reject[j]);
        tk_grammar_free(&g);
    }
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        tk_grammar g;
        tk_err err = {{0}};
        int rc = tk_grammar_from_json_schema(&g, errors[i].schema, strlen(errors[i].schema), &err);
        CHECK(rc == -1 && strstr(err.msg, errors[i].message), "schema %s: error '%s' (got '%s')", errors[i].schema,
              errors[i].message, rc ? err.msg : "none");
        if (rc == 0) tk_grammar_free(&g);
    }
    /* hostile sizes: nesting, and enum / repetition bounds */
    char *deep = deep_schema(200);
    tk_grammar g;
    tk_err err = {{0}};
    CHECK(deep && tk_grammar_from_json_schema(&g, deep, strlen(deep), &err) == -1 && strstr(err.msg, "nested deeper than 64"),
          "deep nesting refused: %s", err.msg);
    free(deep);
    deep = deep_schema(30);
    CHECK(deep && tk_grammar_from_json_schema(&g, deep, strlen(deep), &err) == 0, "30 levels compile: %s", err.msg);
    if (deep) {
        tk_grammar_free(&g);
        free(deep);
    }
    /* d_i: two branches merging a sibling into d_{i+1}: 2^24 subschemas without the work bound */
    char *dag = malloc(24 * 120 + 64);
    if (dag) {
        strcpy(dag, "{\"$defs\":{");
        for (int i = 0; i < 24; i++)
            sprintf(dag + strlen(dag), "\"d%d\":{\"type\":\"object\",\"anyOf\":[{\"$ref\":\"#/$defs/d%d\"},{\"$ref\":\"#/$defs/d%d\"}]},",
                    i, i + 1, i + 1);
        strcat(dag, "\"d24\":{}},\"$ref\":\"#/$defs/d0\"}");
        CHECK(tk_grammar_from_json_schema(&g, dag, strlen(dag), &err) == -1 && strstr(err.msg, "subschemas to compile"),
              "exponential merging refused: %s", err.msg);
        free(dag);
    }
    size_t big = 5000 * 4 + 16;
    char *en = malloc(big);
    if (en) {
        strcpy(en, "{\"enum\":[");
        for (int i = 0; i < 5000; i++) strcat(en, i ? ",1" : "1");
        strcat(en, "]}");
        CHECK(tk_grammar_from_json_schema(&g, en, strlen(en), &err) == -1 && strstr(err.msg, "more than 4096 values"),
              "big enum refused: %s", err.msg);
        free(en);
    }
    const char *wide = "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":1000},\"maxItems\":1000}";
    int rc = tk_grammar_from_json_schema(&g, wide, strlen(wide), &err);
    CHECK(rc == 0, "large bounds compile: %s", err.msg);
    if (rc == 0) {
        CHECK(grammar_matches(&g, "[\"abc\",\"\"]") == 1, "large bounds grammar works");
        tk_grammar_free(&g);
    }
    TK_TEST_END();
}
