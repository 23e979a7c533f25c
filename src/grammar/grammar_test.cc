// GBNF parsing and matching, token masks against a brute-force check of every token, and JSON
// Schema grammars against hand-picked valid and invalid documents.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

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

TEST(JsonSchemaTest, JsonObjectGrammar) {
  auto g = parse(json_object_gbnf());
  EXPECT_TRUE(accepts(g, R"({"a": [1, 2.5, "x", true, null, {}]})"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, R"({"a": 01})"));
}

}  // namespace
}  // namespace mnemo::grammar
