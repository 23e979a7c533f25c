"""Structured output on the real binary and model: GBNF grammars ("grammar"), JSON schemas
("json_schema", OpenAI's response_format json_schema) and response_format json_object. Every
constrained answer is checked by an independent reference: Python's json and jsonschema
(Draft 2020-12) for schemas, Python's re for grammars that are regular languages. Bad grammars,
schemas and formats are 400s naming the problem. A seeded set of generated schemas
(helpers/schemas.py), each sampled once at temperature 1.0, checks the promise of
include/mnemo/json_schema.h: a complete answer always validates, and a schema the converter cannot
hold exactly is a 400 naming the keyword.
"""
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest
import requests

from helpers.schemas import SchemaGen
from helpers.server import Server


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "email": {"type": ["string", "null"]},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 15},
                    "minItems": 1, "maxItems": 3},
        "role": {"enum": ["admin", "user", "guest"]},
    },
    "required": ["name", "age", "hobbies", "role"],
    "additionalProperties": False,
}
TREE = {  # $ref through $defs, three levels deep (a recursive schema lets a model nest forever)
    "$defs": {
        "leaf": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 8}},
                 "required": ["label"]},
        "mid": {"type": "object",
                "properties": {"label": {"type": "string", "maxLength": 8},
                               "children": {"type": "array", "maxItems": 2,
                                            "items": {"$ref": "#/$defs/leaf"}}},
                "required": ["label", "children"]},
    },
    "type": "object",
    "properties": {"label": {"type": "string", "maxLength": 8},
                   "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/mid"}}},
    "required": ["label", "children"],
}
CHOICE = {"anyOf": [{"type": "object", "properties": {"ok": {"const": True}},
                     "required": ["ok"]},
                    {"type": "array", "items": {"type": "number"}, "minItems": 2,
                     "maxItems": 4}]}


@pytest.fixture(scope="module")
def srv(binary, model):
    s = Server(binary, model, "-np", 2, "-c", 2048)
    yield s
    assert s.alive(), "the server died:\n" + s.log()
    assert s.stop() == 0, s.log()


def chat(srv, content, **fields):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 300}
    body.update(fields)
    r = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["message"]["content"], choice["finish_reason"]


@pytest.mark.parametrize("schema", [PERSON, TREE, CHOICE], ids=["person", "tree", "choice"])
@pytest.mark.parametrize("temperature,seed", [(0, 0), (1.0, 11), (1.3, 12)])
def test_json_schema_answers_validate(srv, schema, temperature, seed):
    text, finish = chat(srv, "Answer with JSON only: describe something.",
                        temperature=temperature, seed=seed,
                        response_format={"type": "json_schema",
                                         "json_schema": {"name": "x", "schema": schema}})
    assert finish == "stop", text  # the grammar ended the answer, not max_tokens
    jsonschema.validate(json.loads(text), schema)


def test_json_schema_on_completion_keeps_property_order(srv):
    r = requests.post(srv.url + "/completion", timeout=300, json={
        "prompt": "A user record in JSON:", "n_predict": 160, "temperature": 0,
        "json_schema": PERSON})
    assert r.status_code == 200, r.text
    value = json.loads(r.json()["content"])
    jsonschema.validate(value, PERSON)
    assert list(value)[:2] == ["name", "age"]  # the order the schema gives


def test_json_object(srv):
    # json_object lets a model write any object, endless ones too; a two-key request ends well
    # within max_tokens (18-81 tokens measured over seeds 1-8), and every answer must be a whole
    # object: one cut by max_tokens is a failure, not a prefix to accept.
    for seed in (1, 2, 3, 4):
        text, finish = chat(srv, "Reply with a JSON object with two keys, name and age, for a cat.",
                            temperature=0.9, seed=seed, max_tokens=300,
                            response_format={"type": "json_object"})
        assert finish == "stop", text
        assert isinstance(json.loads(text), dict), text


@pytest.mark.parametrize("gbnf,pattern", [
    ('root ::= " " ("yes" | "no")', r" (yes|no)"),
    ('root ::= [0-9]{3} "-" [0-9]{4}', r"[0-9]{3}-[0-9]{4}"),
    ('root ::= word (" " word){2,4} "."\nword ::= [a-z]{1,8}', r"[a-z]{1,8}( [a-z]{1,8}){2,4}\."),
    ('root ::= "(" [^()\\n]* ")"', r"\([^()\n]*\)"),
])
def test_gbnf_answers_match_the_regex(srv, gbnf, pattern):
    for temperature, seed in ((0, 0), (1.2, 5)):
        r = requests.post(srv.url + "/completion", timeout=300, json={
            "prompt": "Write something:", "n_predict": 64, "temperature": temperature,
            "seed": seed, "grammar": gbnf})
        assert r.status_code == 200, r.text
        j = r.json()
        assert j["stop_type"] == "eos", j
        assert re.fullmatch(pattern, j["content"]), (gbnf, j["content"])


def test_bad_grammars_schemas_and_formats_are_400(srv):
    cases = [
        ({"grammar": "root ::= foo"}, "'foo' is used but not defined"),
        ({"grammar": "root ::= root \"a\""}, "left-recursive"),
        ({"grammar": 5}, "'grammar' must be a string"),
        ({"json_schema": {"type": "string", "pattern": "a+"}}, "'pattern' is not supported"),
        ({"json_schema": {"type": "integer", "maximum": 3}}, "'maximum' is not supported"),
        ({"json_schema": {"$ref": "#/$defs/missing"}}, "cannot be resolved"),
        ({"response_format": {"type": "sound"}}, "json_object or json_schema"),
        ({"response_format": {"type": "json_schema"}}, "needs 'json_schema'"),
        ({"response_format": "json"}, "must be an object"),
        ({"grammar": 'root ::= "a"', "json_schema": {"type": "string"}}, "send one"),
    ]
    for fields, expect in cases:
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        body.update(fields)
        r = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 400, (fields, r.text)
        assert expect in r.json()["error"]["message"], (fields, r.text)
    # "text" is no constraint.
    text, _ = chat(srv, "hi", max_tokens=3, response_format={"type": "text"})
    assert isinstance(text, str)


N_GENERATED = 240  # about 215 of them supported


@pytest.fixture(scope="module")
def srv4(binary, model):
    s = Server(binary, model, "-np", 4, "-c", 4096)
    yield s
    assert s.alive(), "the server died:\n" + s.log()
    assert s.stop() == 0, s.log()


def test_generated_schemas_at_temperature_1(srv4):
    """Every complete answer to a generated schema validates; every refused schema is a 400
    naming the keyword; no answer is cut by n_predict (the schemas are small)."""
    gen = SchemaGen(2027)
    cases = [gen.schema() for _ in range(N_GENERATED)]

    def ask(i):
        schema, _ = cases[i]
        return requests.post(srv4.url + "/completion", timeout=300, json={
            "prompt": f"A JSON value for the schema {json.dumps(schema)}:\n",
            "n_predict": 256, "temperature": 1.0, "seed": 1000 + i, "json_schema": schema})

    start = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(ask, range(len(cases))))
    seconds = time.monotonic() - start
    failures, valid, refused, tokens = [], 0, {}, 0
    for i, ((schema, keyword), r) in enumerate(zip(cases, responses)):
        jsonschema.Draft202012Validator.check_schema(schema)
        if keyword is not None:
            if r.status_code != 400 or keyword not in r.json()["error"]["message"]:
                failures.append((i, schema, f"want a 400 naming {keyword}", r.status_code, r.text))
            refused[keyword] = refused.get(keyword, 0) + 1
            continue
        if r.status_code != 200:
            failures.append((i, schema, "refused", r.status_code, r.text))
            continue
        j = r.json()
        tokens += j["tokens_predicted"]
        if j["stop_type"] != "eos":
            failures.append((i, schema, "not complete", j["stop_type"], j["content"]))
            continue
        try:
            value = json.loads(j["content"])
        except json.JSONDecodeError as e:
            failures.append((i, schema, "not JSON", str(e), j["content"]))
            continue
        errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]
        if errors:
            failures.append((i, schema, "invalid", errors, j["content"]))
            continue
        valid += 1
    print(f"{len(cases)} schemas: {valid} answers valid, refused {refused}, {tokens} tokens in "
          f"{seconds:.1f} s")
    assert not failures, "\n".join(map(repr, failures))
    assert valid >= 200
