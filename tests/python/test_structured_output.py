"""Structured output on the real binary and model: GBNF grammars ("grammar"), JSON schemas
("json_schema", OpenAI's response_format json_schema) and response_format json_object. Every
constrained answer is checked by an independent reference: Python's json and jsonschema
(Draft 2020-12) for schemas, Python's re for grammars that are regular languages. Bad grammars,
schemas and formats are 400s naming the problem.
"""
import json
import re

import jsonschema
import pytest
import requests

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
    for seed in (1, 2, 3):
        text, finish = chat(srv, "Give me a JSON object about cats.", temperature=0.9, seed=seed,
                            max_tokens=200, response_format={"type": "json_object"})
        if finish == "stop":
            assert isinstance(json.loads(text), dict), text
        else:  # cut by max_tokens: still a prefix of a JSON object
            assert text.lstrip().startswith("{"), text


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
