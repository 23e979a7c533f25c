"""Random JSON schemas for the structured-output tests: small (a model finishes an answer in a
few dozen tokens: every string has a maxLength, every array a maxItems), mixing the keywords
include/mnemo/json_schema.h supports with the combinations it must hold exactly (keywords beside
anyOf / oneOf / allOf / $ref / enum / const, objects without properties, oneOf), and a few
schemas the converter must refuse. Seeded: `SchemaGen(seed)` gives the same schemas every run.

`SchemaGen.schema()` returns (schema, refused): refused is None for a schema the server must
take, else the word its 400 message must hold (the keyword refused).
"""
import random

NAMES = ["id", "name", "tag", "ok", "n", "kind"]
WORDS = ["red", "green", "blue", "ab", "xyz", "on", "off", "cat"]


class SchemaGen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def schema(self):
        """One schema and the keyword the server must refuse it for (None: it must take it)."""
        r = self.r
        roll = r.random()
        if roll < 0.05:
            return self.unsupported()
        if roll < 0.10:
            return self.overlapping_one_of(), "'oneOf'"
        kind = r.choice([self.object, self.object, self.object_without_properties, self.array,
                         self.any_of, self.one_of, self.listed, self.all_of, self.ref,
                         self.leaf])
        return kind(0), None

    # Leaves: values a model writes in a few tokens.
    def string(self):
        s = {"type": "string", "maxLength": self.r.randint(1, 8)}
        if self.r.random() < 0.4:
            s["minLength"] = self.r.randint(0, s["maxLength"])
        return s

    def leaf(self, depth=0):
        r = self.r
        return r.choice([
            self.string,
            lambda: {"type": "integer"},
            lambda: {"type": "number"},
            lambda: {"type": "boolean"},
            lambda: {"type": ["integer", "null"]},
            lambda: {"type": ["string", "boolean"], "maxLength": r.randint(1, 6)},
            lambda: {"enum": r.sample(WORDS, r.randint(1, 4))},
            lambda: {"enum": [r.randint(-5, 50), r.choice(WORDS), None]},
            lambda: {"const": r.choice([r.choice(WORDS), r.randint(0, 9), True, None])},
        ])()

    def inner(self, depth):
        if depth >= 2 or self.r.random() < 0.6:
            return self.leaf(depth)
        return self.r.choice([self.object, self.array, self.any_of, self.one_of, self.listed,
                              self.all_of])(depth)

    # Objects.
    def object(self, depth):
        r = self.r
        names = r.sample(NAMES, r.randint(1, 3))
        s = {"type": "object", "properties": {n: self.inner(depth + 1) for n in names}}
        required = [n for n in names if r.random() < 0.6]
        if required:
            s["required"] = required
        if r.random() < 0.5:
            s["additionalProperties"] = False
        return s

    def object_without_properties(self, depth):
        r = self.r
        roll = r.random()
        if roll < 0.4:  # the empty object only
            return {"type": "object", "additionalProperties": False}
        if roll < 0.6:  # required keys with any value
            return {"type": "object", "required": [r.choice(NAMES)]}
        # required in anyOf branches, properties beside them
        names = r.sample(NAMES, 2)
        return {"type": "object", "properties": {n: self.leaf() for n in names},
                "anyOf": [{"required": [names[0]]}, {"required": [names[1]]}],
                "additionalProperties": False}

    # Arrays.
    def array(self, depth):
        r = self.r
        s = {"type": "array", "items": self.inner(depth + 1), "maxItems": r.randint(1, 3)}
        if r.random() < 0.5:
            s["minItems"] = r.randint(0, s["maxItems"])
        return s

    # Applicators, with keywords beside them.
    def any_of(self, depth):
        r = self.r
        branches = [self.inner(depth + 1) for _ in range(r.randint(2, 3))]
        s = {"anyOf": branches}
        roll = r.random()
        if roll < 0.3:  # a type beside: the branches of other types drop out
            s["anyOf"].append({"type": "integer"})
            s["type"] = ["integer", r.choice(["string", "null", "boolean"])]
        elif roll < 0.5:  # a string bound beside
            s["anyOf"].append({"type": "string", "maxLength": 6})
            s["minLength"] = r.randint(1, 3)
        return s

    def one_of(self, depth):
        r = self.r
        roll = r.random()
        if roll < 0.4:  # branches of different types
            pool = [self.string(), {"type": "integer"}, {"type": "boolean"}, {"type": "null"},
                    {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
                    {"type": "object", "properties": {"v": self.leaf()}, "required": ["v"]}]
            s = {"oneOf": r.sample(pool, r.randint(2, 3))}
        elif roll < 0.6:  # listed values (a value in two branches is dropped)
            s = {"oneOf": [{"enum": r.sample(WORDS, 3)}, {"enum": r.sample(WORDS, 3)}]}
            if not set(s["oneOf"][0]["enum"]) ^ set(s["oneOf"][1]["enum"]):
                s["oneOf"][1]["enum"].append("other")
        elif roll < 0.85:  # objects told apart by a required const
            s = {"oneOf": [
                {"type": "object", "properties": {"kind": {"const": k}, "v": self.leaf()},
                 "required": ["kind"], "additionalProperties": False}
                for k in r.sample(WORDS, r.randint(2, 3))]}
        else:  # a listed branch whose values the other rejects, a bound beside
            s = {"oneOf": [{"const": r.choice(WORDS)}, {"type": "integer"}, {"type": "null"}]}
        if r.random() < 0.3:
            s["type"] = sorted({"string", "integer", "object", "array", "null", "boolean"}
                               - {r.choice(["boolean", "null"])})
        return s

    def overlapping_one_of(self):
        r = self.r
        return r.choice([
            {"oneOf": [{"type": "number"}, {"type": "integer"}]},
            {"oneOf": [self.string(), {"type": "string", "minLength": 2, "maxLength": 5}]},
            {"type": "object", "properties": {"a": {"oneOf": [
                {"type": "object"}, {"type": "object", "properties": {"x": {"type": "null"}}}]}}},
        ])

    def listed(self, depth):
        """enum / const with keywords beside them (filtered by evaluating them)."""
        r = self.r
        values = r.sample(WORDS, 3) + [r.randint(0, 99), None]
        roll = r.random()
        if roll < 0.3:
            return {"enum": values, "type": "string", "minLength": 3}
        if roll < 0.5:
            return {"enum": values, "anyOf": [{"type": "integer"}, {"type": "null"}]}
        if roll < 0.7:
            return {"enum": values, "maxLength": 2}  # ints and null pass; long words do not
        if roll < 0.85:
            return {"const": r.choice(values[:3]), "type": "string"}
        return {"enum": values, "oneOf": [{"type": "string"}, {"const": values[0]}]}

    def all_of(self, depth):
        r = self.r
        if r.random() < 0.5:
            return {"allOf": [self.string()], "minLength": 1}
        return {"allOf": [{"type": "array", "items": self.leaf(), "maxItems": 3}],
                "minItems": 1}

    def ref(self, depth):
        r = self.r
        item = self.object(1) if r.random() < 0.5 else self.leaf()
        if r.random() < 0.5:  # a keyword beside the $ref
            return {"$defs": {"word": {"type": "string", "maxLength": 8}},
                    "$ref": "#/$defs/word", "minLength": r.randint(1, 4)}
        return {"$defs": {"item": item}, "type": "object",
                "properties": {"first": {"$ref": "#/$defs/item"},
                               "rest": {"type": "array", "items": {"$ref": "#/$defs/item"},
                                        "maxItems": 2}},
                "required": ["first"]}

    def unsupported(self):
        r = self.r
        keyword, schema = r.choice([
            ("pattern", {"type": "string", "pattern": "^a+$", "maxLength": 4}),
            ("minimum", {"type": "integer", "minimum": 0}),
            ("format", {"type": "object", "properties": {"d": {"type": "string",
                                                                "format": "date"}}}),
            ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
            ("not", {"not": {"type": "null"}}),
        ])
        return schema, f"'{keyword}'"
