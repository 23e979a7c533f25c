// GBNF parsing and matching, token masks against a brute-force check of every token, and JSON
// Schema grammars against hand-picked valid and invalid documents.
#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "grammar/json_schema_eval.h"
#include "mnemo/grammar.h"
#include "mnemo/json_schema.h"

namespace mnemo::grammar {
namespace {

std::shared_ptr<const Grammar> parse(const std::string& text) {
  auto g = Grammar::parse(text);
  EXPECT_TRUE(g.ok()) << g.status().to_string() << "\n" << text;
  return g.ok() ? *g : nullptr;
}

// Whole-string membership: every code point accepted and the end allowed.
bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g);
  return m.accept_text(s) && m.can_end();
}

TEST(GrammarTest, ElementsAndRepetitions) {
  auto g = parse(R"(# a comment
root ::= "ab" [0-9]+ x? ( "-" | "+" ){2} y{1,3} z{2,} tail
x ::= [^a-z]
y ::= "y"
z ::= "z"
tail ::= . "\n" "\x41" "\u00e9"
  | "!"
)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(g, "ab12-+yzz!"));
  EXPECT_TRUE(accepts(g, "ab1X+-yyyzzzzq\nAé"));
  EXPECT_FALSE(accepts(g, "ab-+yzz!"));      // [0-9]+ needs one
  EXPECT_FALSE(accepts(g, "ab1x-+yzz!"));    // x is not a lower-case letter
  EXPECT_FALSE(accepts(g, "ab1-yzz!"));      // {2}
  EXPECT_FALSE(accepts(g, "ab1-+yyyyzz!"));  // {1,3}
  EXPECT_FALSE(accepts(g, "ab1-+yz!"));      // {2,}
  EXPECT_FALSE(accepts(g, "ab1-+yzz"));      // tail missing
  Matcher m(g);
  EXPECT_TRUE(m.accept_text("ab"));
  EXPECT_FALSE(m.accept('q'));
  EXPECT_TRUE(m.accept('7'));  // a refused code point changed nothing
  EXPECT_FALSE(m.can_end());
}

TEST(GrammarTest, LongRepetitionsKeepStacksShallow) {
  auto g = parse("root ::= \"[\" item* \"]\"\nitem ::= [a-z] | \",\"\n");
  Matcher m(g);
  ASSERT_TRUE(m.accept('['));
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(m.accept(i % 2 ? ',' : 'k')) << i;
  size_t deepest = 0;
  for (const auto& s : m.stacks()) deepest = std::max(deepest, s.size());
  EXPECT_LE(deepest, 4u);
  EXPECT_TRUE(m.accept(']'));
  EXPECT_TRUE(m.can_end() && m.done());
}

// 16 nested rules of two alternatives each would make 65536 stacks; the matcher keeps a
// bounded number, so a hostile grammar cannot take the server's memory.
TEST(GrammarTest, AmbiguousGrammarsStayBounded) {
  std::string text = "root ::= r0\n";
  for (int i = 0; i < 16; ++i) {
    text += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"a\" | r" +
            std::to_string(i + 1) + " \"a\" \"b\"?\n";
  }
  text += "r16 ::= \"x\"\n";
  auto g = parse(text);
  ASSERT_NE(g, nullptr);
  Matcher m(g);
  EXPECT_LE(m.stacks().size(), 20000u);
  EXPECT_TRUE(m.accept('x'));
  EXPECT_LE(m.stacks().size(), 20000u);
}

TEST(GrammarTest, ErrorsNameTheProblem) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"root ::= foo\n", "'foo' is used but not defined"},
      {"start ::= \"a\"\n", "no rule 'root'"},
      {"root ::= root \"a\" | \"b\"\n", "left-recursive"},
      {"root ::= a\na ::= b? root\nb ::= \"x\"\n", "left-recursive"},
      {"root ::= \"a\n", "line 1"},
      {"root ::= [a-\n", "class"},
      {"root ::= \"a\"{5,2}\n", "n < m"},
      {"root ::= \"a\"{99999}\n", "over 10000"},
      {"root ::= ( \"a\"\n", "expected ')'"},
      {"root ::= *\n", "follows nothing"},
      {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"},
      {"root ::= \"\\q\"\n", "unknown escape"},
      {"root ::= \"a\"\n\nx ::= \"b\" @\n", "line 3"},
  };
  for (const Case& c : cases) {
    auto g = Grammar::parse(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.expect), std::string::npos)
        << c.text << " -> " << g.status().message();
  }
}

TEST(GrammarTest, Utf8Decoding) {
  std::vector<uint32_t> cps;
  EXPECT_TRUE(decode_utf8("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", &cps));
  EXPECT_EQ(cps, (std::vector<uint32_t>{'a', 0xE9, 0x20AC, 0x1F600}));
  for (const char* bad :
       {"\xc3", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xff"}) {
    EXPECT_FALSE(decode_utf8(bad, &cps)) << bad;
  }
}

// The trie walk gives exactly the tokens a brute-force check (each token's text on a copy of
// the matcher) allows, at every step of a walk through a JSON document.
TEST(GrammarTest, MaskEqualsBruteForce) {
  auto gbnf = json_schema_to_gbnf(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
          "tags":{"type":"array","items":{"enum":["a","bc"]},"maxItems":3},
          "n":{"type":"integer"}},"required":["name"]})");
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().to_string();
  auto g = parse(*gbnf);
  ASSERT_NE(g, nullptr);
  std::vector<std::string> pieces = {"",     "{",        "}",  "\"",    "name",        "\":",  " ",
                                     ",",    "\"tags\"", ":[", "\"a\"", "]",           "\"bc", "n",
                                     "12",   "-",        "0",  "\xc3",  "\"name\":\"", "x\"",  "é",
                                     "tags", "\":\"",    "\n"};
  const int32_t eog = int32_t(pieces.size());
  pieces.push_back("<eos>");
  Vocab vocab(pieces, {eog});
  const std::string doc = "{\"name\":\"xé\", \"tags\":[\"a\",\"bc\"],\n\"n\":-12}";
  Matcher m(g);
  std::vector<uint8_t> mask;
  std::vector<uint32_t> cps;
  ASSERT_TRUE(decode_utf8(doc, &cps));
  for (size_t i = 0; i <= cps.size(); ++i) {
    vocab.allowed(m, &mask);
    for (size_t t = 0; t < pieces.size(); ++t) {
      bool want = false;
      if (int32_t(t) == eog) {
        want = m.can_end();
      } else if (!pieces[t].empty()) {
        Matcher copy = m;
        want = copy.accept_text(pieces[t]);
      }
      ASSERT_EQ(mask[t], want) << "step " << i << " token '" << pieces[t] << "'";
    }
    if (i < cps.size()) ASSERT_TRUE(m.accept(cps[i])) << i;
  }
  EXPECT_TRUE(m.can_end());
}

TEST(JsonSchemaTest, AcceptsWhatTheSchemaAccepts) {
  struct Case {
    const char* schema;
    std::vector<const char*> valid, invalid;
  } cases[] = {
      {R"({"const": {"a": 1}})", {R"({"a":1})"}, {R"({"a": 1})", "1"}},
      {R"({"enum": ["red", 3, null]})", {R"("red")", "3", "null"}, {R"("blue")", "4"}},
      {R"({"type": "integer"})", {"0", "-7", "123"}, {"01", "1.5", "-", "\"1\""}},
      {R"({"type": "number"})", {"0", "-7.25", "1e10", "2.5E-3"}, {".5", "1.", "+1"}},
      {R"({"type": ["string", "null"]})", {R"("x")", "null"}, {"1"}},
      {R"({"type": "string", "minLength": 2, "maxLength": 3})",
       {R"("ab")", R"("a\"c")", R"("\u00e9é")"},
       {R"("a")", R"("abcd")"}},
      {R"({"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2})",
       {"[true]", "[ true , false ]"},
       {"[]", "[true,true,true]", "[1]"}},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
           "c": {"type": "null"}}, "required": ["b"]})",
       {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({"a":1,"b":"x","c":null})",
        R"({"b":"x","c":null})", R"({ "a" : 1 , "b" : "x" })"},
       {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x","d":1})", R"({"b":"x",})"}},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})",
       {"{}", R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"},
       {R"({"b":2,"a":1})", R"({,"b":2})"}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
           "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
           "required": ["v", "next"]}}, "$ref": "#/$defs/node"})",
       {R"({"v":1,"next":{"v":2,"next":null}})"},
       {R"({"v":1,"next":{"v":2}})"}},
      {R"({"type": "object"})", {R"({"x":[1,{"y":null}],"z":"w"})", "{}"}, {"[]", R"({"x"})"}},
  };
  for (const Case& c : cases) {
    auto gbnf = json_schema_to_gbnf(c.schema);
    ASSERT_TRUE(gbnf.ok()) << c.schema << ": " << gbnf.status().to_string();
    auto g = parse(*gbnf);
    ASSERT_NE(g, nullptr) << *gbnf;
    for (const char* v : c.valid) EXPECT_TRUE(accepts(g, v)) << c.schema << "\n  " << v;
    for (const char* v : c.invalid) EXPECT_FALSE(accepts(g, v)) << c.schema << "\n  " << v;
  }
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreNamed) {
  struct Case {
    const char* schema;
    const char* expect;
  } cases[] = {
      {R"({"type": "string", "pattern": "^a+$"})", "'pattern' is not supported"},
      {R"({"type": "integer", "minimum": 0})", "'minimum' is not supported"},
      {R"({"properties": {"a": {"type": "string", "format": "date"}}})",
       "/properties/a: 'format' is not supported"},
      {R"({"$ref": "https://example.com/s.json"})", "cannot be resolved"},
      {R"({"type": "thing"})", "unknown type 'thing'"},
      {R"({"type": "object", "properties": {}, "required": ["x"]})", "not in 'properties'"},
      {R"({"type": "object", "additionalProperties": {"type": "string"}})", "additionalProperties"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "'allOf'"},
      {"{nope", "malformed JSON"},
      {"false", "accepts nothing"},
  };
  for (const Case& c : cases) {
    auto gbnf = json_schema_to_gbnf(c.schema);
    ASSERT_FALSE(gbnf.ok()) << c.schema;
    EXPECT_NE(gbnf.status().message().find(c.expect), std::string::npos)
        << c.schema << " -> " << gbnf.status().message();
  }
}

// Each case: a schema, JSON texts its grammar must accept, and texts the schema rejects that the
// grammar must refuse.
struct SchemaCase {
  const char* schema;
  std::vector<const char*> valid, invalid;
};

void expect_cases(const std::vector<SchemaCase>& cases) {
  for (const SchemaCase& c : cases) {
    auto gbnf = json_schema_to_gbnf(c.schema);
    ASSERT_TRUE(gbnf.ok()) << c.schema << ": " << gbnf.status().to_string();
    auto g = parse(*gbnf);
    ASSERT_NE(g, nullptr) << *gbnf;
    for (const char* v : c.valid) EXPECT_TRUE(accepts(g, v)) << c.schema << "\n  " << v;
    for (const char* v : c.invalid) EXPECT_FALSE(accepts(g, v)) << c.schema << "\n  " << v;
  }
}

// Each case: a schema the converter refuses, and words its message holds.
void expect_refused(const std::vector<std::pair<const char*, std::vector<const char*>>>& cases) {
  for (const auto& [schema, words] : cases) {
    auto gbnf = json_schema_to_gbnf(schema);
    ASSERT_FALSE(gbnf.ok()) << schema << "\n" << *gbnf;
    EXPECT_EQ(gbnf.status().code(), StatusCode::kInvalidArgument);
    for (const char* w : words) {
      EXPECT_NE(gbnf.status().message().find(w), std::string::npos)
          << schema << " -> " << gbnf.status().message();
    }
  }
}

// An object schema without "properties": additionalProperties false means the empty object only;
// "required" names keys that must appear (with any value: no schema is given for them).
TEST(JsonSchemaTest, ObjectsWithoutProperties) {
  expect_cases({
      {R"({"type": "object", "additionalProperties": false})",
       {"{}", "{ }"},
       {R"({"a":1})", R"({"":null})"}},
      {R"({"type": "object", "required": ["a", "b"]})",
       {R"({"a":1,"b":[2]})", R"({"a":{"x":null},"b":"y"})"},
       {"{}", R"({"a":1})", R"({"b":1})", R"({"c":1})"}},
      {R"({"required": ["a"]})", {R"({"a":true})"}, {"{}", "1", R"("a")"}},
  });
  expect_refused({
      {R"({"type": "object", "required": ["a"], "additionalProperties": false})",
       {"accepts nothing", "\"a\""}},
  });
}

// oneOf admits a value matching exactly one branch: exact when the branches cannot overlap (types
// apart, distinct const/enum values, objects told apart by a required const), refused otherwise.
TEST(JsonSchemaTest, OneOfIsExactOrRefused) {
  expect_cases({
      {R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})", {R"("x")", "1"}, {"null"}},
      {R"({"oneOf": [{"enum": [1, 2]}, {"enum": [2, 3]}]})", {"1", "3"}, {"2"}},
      {R"({"oneOf": [{"const": "a"}, {"type": "integer"}, {"type": "null"}]})",
       {R"("a")", "7", "null"},
       {R"("b")"}},
      {R"({"oneOf": [
           {"type": "object", "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}},
            "required": ["kind", "n"]},
           {"type": "object", "properties": {"kind": {"const": "b"}, "n": {"type": "string"}},
            "required": ["kind"]}]})",
       {R"({"kind":"a","n":1})", R"({"kind":"b"})", R"({"kind":"b","n":"x"})"},
       {R"({"kind":"a"})", R"({"kind":"b","n":1})", R"({"kind":"c","n":1})"}},
  });
  expect_refused({
      {R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})",
       {"'oneOf'", "is not supported", "0 and 1"}},
      {R"({"oneOf": [{"type": "string"}, {"const": "x"}]})", {"'oneOf'", "is not supported"}},
      // A string matches both: "properties" does not make a schema object-only.
      {R"({"oneOf": [{"properties": {"a": {"type": "null"}}}, {"type": "string"}]})", {"'oneOf'"}},
      {R"({"properties": {"v": {"oneOf": [{"type": "object"},
           {"type": "object", "required": ["a"]}]}}})",
       {"/properties/v", "'oneOf'"}},
  });
}

// Keywords beside anyOf / oneOf / allOf / $ref / enum / const hold as well: enum and const
// values are filtered by evaluating every sibling; the others are intersected per branch.
TEST(JsonSchemaTest, SiblingKeywordsAreIntersected) {
  expect_cases({
      {R"({"type": "string", "enum": ["ab", "abcd", 3], "minLength": 3})",
       {R"("abcd")"},
       {R"("ab")", "3"}},
      {R"({"enum": [1, "a", null], "anyOf": [{"type": "string"}, {"type": "null"}]})",
       {R"("a")", "null"},
       {"1"}},
      {R"({"enum": [1, 2.5], "oneOf": [{"type": "number"}, {"type": "integer"}]})", {"2.5"}, {"1"}},
      {R"({"const": {"a": 1}, "type": "object", "required": ["a"]})", {R"({"a":1})"}, {}},
      {R"({"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "object"}],
           "type": ["object", "integer"]})",
       {"1", "{}"},
       {R"("x")"}},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
           "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})",
       {R"({"a":1})", R"({"b":"x"})", R"({"a":1,"b":"x"})"},
       {"{}"}},
      {R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2})",
       {R"("ab")"},
       {R"("abc")", "1"}},
      {R"({"allOf": [{"type": "array", "items": {"type": "integer"}}], "maxItems": 1})",
       {"[1]"},
       {"[1,2]", R"(["x"])"}},
      {R"({"oneOf": [{"type": "string"}, {"type": "null"}], "minLength": 2})",
       {R"("ab")", "null"},
       {R"("a")"}},
      {R"({"anyOf": [{"type": "string", "maxLength": 3}], "minLength": 2})",
       {R"("abc")"},
       {R"("a")", R"("abcd")"}},
  });
  expect_refused({
      {R"({"const": 1, "type": "string"})", {"accepts nothing", "'const'"}},
      {R"({"enum": ["a", "b"], "minLength": 2})", {"accepts nothing", "'enum'"}},
      {R"({"anyOf": [{"type": "string"}, {"type": "null"}], "type": "integer"})",
       {"accepts nothing"}},
  });
}

// Keywords of one type constrain values of that type even where "type" is absent; the grammar
// then offers that type (a schema naming string keywords only means strings).
TEST(JsonSchemaTest, TypelessKeywordsStillConstrain) {
  expect_cases({
      {R"({"minLength": 2})", {R"("ab")"}, {R"("a")"}},
      {R"({"maxItems": 1})", {"[]", "[1]"}, {"[1,2]"}},
      {R"({"properties": {"a": {"maxLength": 1}}})", {R"({"a":"x"})"}, {R"({"a":"xy"})"}},
      // No string meets both bounds: the schema means every other value.
      {R"({"anyOf": [{"minLength": 3}], "maxLength": 2})",
       {"1", "null", "{}", "[]"},
       {R"("ab")", R"("abc")"}},
      {R"({"required": ["a"], "additionalProperties": false})",
       {"1", R"("a")"},
       {"{}", R"({"a":1})"}},
  });
}

// A \u escape of a surrogate would let two escapes decode to one character (so a string under
// minLength pass the grammar); the grammar takes such characters as UTF-8 only.
TEST(JsonSchemaTest, SurrogateEscapesAreNotAdmitted) {
  expect_cases({
      {R"({"type": "string", "minLength": 2})",
       {R"("\u00e9\u0041")", "\"\xf0\x9f\x98\x80x\""},
       {R"("\ud83d\ude00")", R"("\uD83D\uDE00")"}},
  });
}

// A $ref that comes back to itself without going into a property or an item would be a
// left-recursive grammar (and a value that never ends).
TEST(JsonSchemaTest, InPlaceRefCyclesAreRefused) {
  expect_refused({
      {R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}},
           "$ref": "#/$defs/a"})",
       {"'$ref'", "#/$defs/a"}},
  });
}

// Random schemas mixing the supported keywords (a few refused ones among them), depth-limited.
class SchemaGen {
 public:
  explicit SchemaGen(uint32_t seed) : rng_(seed) {}

  schema::Json root() {
    if (pick(5) > 0) return gen(0);
    // A recursive definition, referred to with a keyword beside the "$ref" now and then.
    schema::Json def = {
        {"type", "object"},
        {"properties",
         {{"v", gen(2)}, {"next", {{"anyOf", {{{"$ref", "#/$defs/d"}}, {{"type", "null"}}}}}}}},
        {"required", {"v"}}};
    schema::Json s = {{"$defs", {{"d", def}}}, {"$ref", "#/$defs/d"}};
    if (pick(2)) s["required"] = {"next"};
    return s;
  }

 private:
  size_t pick(size_t n) { return rng_() % n; }
  schema::Json value() {
    static const char* kPool[] = {"0",      "1",        "2.5",  "-3",        "\"a\"",
                                  "\"ab\"", "\"abcd\"", "\"\"", "true",      "false",
                                  "null",   "[]",       "[1]",  "{\"a\":1}", "{}"};
    return schema::Json::parse(kPool[pick(std::size(kPool))]);
  }
  const char* type_name() {
    static const char* kTypes[] = {"string", "integer", "number", "boolean",
                                   "null",   "object",  "array"};
    return kTypes[pick(std::size(kTypes))];
  }
  // A keyword or two beside an applicator, an enum or a const.
  void sibling(schema::Json* s) {
    switch (pick(6)) {
      case 0:
        (*s)["type"] = type_name();
        break;
      case 1:
        (*s)["type"] = {type_name(), type_name()};
        break;
      case 2:
        (*s)["minLength"] = pick(3);
        break;
      case 3:
        (*s)["maxItems"] = pick(3);
        break;
      case 4:
        (*s)["required"] = {"a"};
        break;
      default:
        break;
    }
  }
  schema::Json gen(int depth) {
    schema::Json s = schema::Json::object();
    switch (pick(depth >= 2 ? 5 : 12)) {
      case 0:
        s["type"] = "string";
        if (pick(2)) s["minLength"] = pick(3);
        if (pick(2)) s["maxLength"] = 2 + pick(3);
        break;
      case 1:
        s["type"] = type_name();
        break;
      case 2:
        s["type"] = {type_name(), type_name()};
        break;
      case 3:
        for (size_t i = 0, n = 1 + pick(4); i < n; ++i) s["enum"].push_back(value());
        sibling(&s);
        break;
      case 4:
        s["const"] = value();
        sibling(&s);
        break;
      case 5: {
        s["type"] = "object";
        for (const char* name : {"a", "b", "c"}) {
          if (pick(3) == 0) continue;
          s["properties"][name] = gen(depth + 1);
          if (pick(2)) s["required"].push_back(name);
        }
        if (pick(2)) s["additionalProperties"] = false;
        break;
      }
      case 6:
        s["type"] = "object";
        if (pick(2)) s["additionalProperties"] = false;
        if (pick(2)) s["required"] = {"a"};
        break;
      case 7:
        s["type"] = "array";
        s["items"] = gen(depth + 1);
        if (pick(2)) s["minItems"] = pick(2);
        if (pick(2)) s["maxItems"] = 1 + pick(3);
        break;
      case 8:
      case 9:
        for (size_t i = 0, n = 2 + pick(2); i < n; ++i) {
          s[pick(2) ? "anyOf" : "oneOf"].push_back(gen(depth + 1));
        }
        sibling(&s);
        break;
      case 10:
        s["allOf"] = {gen(depth + 1)};
        sibling(&s);
        break;
      default:
        s[pick(2) ? "minLength" : "maxItems"] = 1 + pick(2);
        break;
    }
    return s;
  }

  std::mt19937 rng_;
};

// A random text the grammar accepts: a walk over one-character tokens that the mask allows,
// closing brackets and quotes favoured; "" when the walk runs long or gets stuck.
std::string sample(const std::shared_ptr<const Grammar>& g, const Vocab& vocab,
                   const std::vector<std::string>& pieces, std::mt19937& rng) {
  Matcher m(g);
  std::string out;
  std::vector<uint8_t> mask;
  for (int step = 0; step < 400; ++step) {
    if (m.can_end() && (rng() % 3 == 0 || step > 200)) return out;
    vocab.allowed(m, &mask);
    std::vector<size_t> tokens;
    std::vector<double> weights;
    for (size_t t = 0; t + 1 < pieces.size(); ++t) {
      if (!mask[t]) continue;
      tokens.push_back(t);
      const bool closer = std::string_view("\"]}0").find(pieces[t]) != std::string_view::npos;
      weights.push_back(closer ? (step > 100 ? 500.0 : 20.0) : 1.0);
    }
    if (tokens.empty()) return m.can_end() ? out : "";
    const size_t t =
        tokens[std::discrete_distribution<size_t>(weights.begin(), weights.end())(rng)];
    EXPECT_TRUE(m.accept_text(pieces[t]));
    out += pieces[t];
  }
  return "";
}

// Texts sampled from the grammars of random schemas are JSON the schema accepts, by the
// converter's own evaluator (JSON Schema 2020-12's meaning; tests/python/test_structured_output.py
// checks the model's answers against the jsonschema package).
TEST(JsonSchemaTest, SampledTextsSatisfyRandomSchemas) {
  std::vector<std::string> pieces;
  for (char c = 0x20; c < 0x7F; ++c) pieces.push_back(std::string(1, c));
  for (const char* p : {"\n", "\xc3\xa9", "\xf0\x9f\x98\x80", "<eos>"}) pieces.push_back(p);
  Vocab vocab(pieces, {int32_t(pieces.size() - 1)});
  SchemaGen gen(27);
  std::mt19937 rng(7);
  int converted = 0, refused = 0, texts = 0;
  for (int i = 0; i < 400; ++i) {
    const schema::Json s = gen.root();
    auto gbnf = json_schema_to_gbnf(s.dump());
    if (!gbnf.ok()) {
      ++refused;
      const std::string msg = gbnf.status().message();
      EXPECT_TRUE(msg.find("is not supported") != std::string::npos ||
                  msg.find("accepts nothing") != std::string::npos)
          << s.dump() << " -> " << msg;
      continue;
    }
    ++converted;
    auto g = parse(*gbnf);
    ASSERT_NE(g, nullptr) << s.dump();
    schema::Document doc(s);
    for (int k = 0; k < 6; ++k) {
      const std::string text = sample(g, vocab, pieces, rng);
      if (text.empty()) continue;
      ++texts;
      const auto v = schema::Json::parse(text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << s.dump() << "\n  not JSON: " << text;
      EXPECT_TRUE(doc.eval(s, v)) << s.dump() << "\n  " << text;
    }
  }
  EXPECT_GT(converted, 200);
  EXPECT_GT(texts, 1000);
  std::cout << converted << " schemas converted, " << refused << " refused, " << texts
            << " texts sampled\n";
}

TEST(JsonSchemaTest, JsonObjectGrammar) {
  auto g = parse(json_object_gbnf());
  EXPECT_TRUE(accepts(g, R"({"a": [1, 2.5, "x", true, null, {}]})"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, R"({"a": 01})"));
}

}  // namespace
}  // namespace mnemo::grammar
