// The small-model fallback (a fenced or bare JSON call validated against the tool's schema) and
// tool_call_grammar: each format's grammar accepts the format's canonical call (which the
// format's parser reads back) and refuses a call whose arguments break the schema.
#include <set>

#include "chat_parse/chat_parse_test_util.h"
#include "mnemo/grammar.h"

namespace mnemo::chat_parse {
namespace {

using namespace testing;  // NOLINT(build/namespaces): chat_parse_test_util.h's helpers

ParseOptions fallback(ChatFormat f = ChatFormat::kHermes) {
  ParseOptions o = options(f);
  o.bare_json_calls = true;
  return o;
}

TEST(BareJsonCallsTest, FencedOrBareCallOfADeclaredTool) {
  const ParseOptions o = fallback();
  const ToolCall paris = call("get_weather", "{\"city\": \"Paris\"}");
  // Qwen2.5-Coder-1.5B's answer to a tool request.
  check("```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```", o,
        msg("", "", {paris}));
  check("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", o,
        msg("", "", {paris}));
  check("\n```\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n```\n", o,
        msg("", "", {paris}));
  // Keys in another order than the schema's, optional ones, stringified arguments.
  check("{\"arguments\": {\"days\": 3, \"city\": \"Paris\"}, \"name\": \"get_weather\"}", o,
        msg("", "", {call("get_weather", "{\"days\": 3, \"city\": \"Paris\"}")}));
  check(R"({"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"})", o,
        msg("", "", {paris}));
  // After reasoning, and in another format (Llama 3 has its own bare JSON, fenced is ours).
  check(
      "<think>Weather tool.</think>\n```json\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n```",
      o, msg("", "Weather tool.", {paris}));
  check("```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```",
        fallback(ChatFormat::kLlama3), msg("", "", {paris}));
  // Qwen 2.5's template text writes the call in doubled braces; Qwen2.5-Coder-1.5B copies it.
  check("{{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}", o,
        msg("", "", {paris}));
  // The generic format asked for {"tool_call": ...}; a small model answered the bare call.
  check("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        fallback(ChatFormat::kGeneric), msg("", "", {paris}));
}

TEST(BareJsonCallsTest, AnythingElseStaysContent) {
  const ParseOptions o = fallback();
  for (const std::string text : {
           // Not a declared tool; arguments against the schema (city not a string, unknown key,
           // required key missing); more than the object; another key; not an object.
           "{\"name\": \"get_time\", \"arguments\": {}}",
           "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 5}}\n```",
           "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"zip\": 1}}",
           "{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}",
           "Call it like this: {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
           "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\nThat is the call.",
           "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"why\": \"x\"}",
           "```python\nprint(1)\n```",
           "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
           "{{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
           "{{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}}",
       }) {
    check(text, o, msg(text), /*stream=*/false);
  }
  // Off unless asked for; and off for a tool whose schema the converter refuses.
  const std::string text = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
  check(text, options(ChatFormat::kHermes), msg(text), false);
  ParseOptions odd = o;
  odd.tools[0].parameters["properties"]["days"]["minimum"] = 1;
  check(text, odd, msg(text), false);
}

TEST(BareJsonCallsTest, StreamedTheCandidateIsHeldBack) {
  ParseOptions p = fallback();
  p.is_partial = true;
  const std::string text =
      "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```";
  for (size_t n = 0; n <= text.size(); ++n) {
    EXPECT_EQ(parse_chat_output(text.substr(0, n), p), msg("")) << n;
  }
  // Known not to be a call: shown at once.
  EXPECT_EQ(parse_chat_output("```python\npri", p), msg("```python\npri"));
  EXPECT_EQ(parse_chat_output("{\"name\": \"get_time\", \"argu", p),
            msg("{\"name\": \"get_time\", \"argu"));
  // A held answer that turns out to be prose is released whole (the stream stays monotone).
  check(
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}} is how you call it.",
      fallback(),
      msg("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}} is how you call it."),
      false);
}

// Whole-text membership.
bool accepts(const ToolGrammar& g, const std::string& text) {
  auto parsed = grammar::Grammar::parse(g.gbnf);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string() << "\n" << g.gbnf;
  if (!parsed.ok()) return false;
  grammar::Matcher m(*parsed);
  return m.accept_text(text) && m.can_end();
}

ToolGrammar grammar_for(ChatFormat f, ToolChoice choice = {}, bool parallel = false) {
  const std::vector<ToolSpec> tools = testing::test_tools();
  auto g = tool_call_grammar(f, tools, choice, parallel);
  EXPECT_TRUE(g.ok()) << chat_format_name(f) << ": " << g.status().to_string();
  return g.ok() ? *g : ToolGrammar{};
}

struct Canonical {
  ChatFormat format;
  std::string good;  // one call of get_weather(city = "Paris")
  std::string bad;   // the same call against the schema
};

std::vector<Canonical> canonical_calls() {
  const std::string p = "{\"city\": \"Paris\"}", b = "{\"city\": 5}";
  auto both = [&](ChatFormat f, const std::string& pre, const std::string& post) {
    return Canonical{f, pre + p + post, pre + b + post};
  };
  return {
      both(ChatFormat::kHermes,
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", "}\n</tool_call>"),
      both(ChatFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": ", "}"),
      both(ChatFormat::kFunctionaryV31, "<function=get_weather>", "</function>"),
      both(ChatFormat::kFirefunctionV2,
           "functools[{\"name\": \"get_weather\", \"arguments\": ", "}]"),
      both(ChatFormat::kMistralNemo,
           "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": ", ", \"id\": \"abcdefghi\"}]"),
      both(ChatFormat::kMistral, "[TOOL_CALLS]get_weather[ARGS]", ""),
      both(ChatFormat::kMistral, "[TOOL_CALLS]get_weather[CALL_ID]abcdefghi[ARGS]", ""),
      both(
          ChatFormat::kDeepSeekR1,
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n",
          "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
      both(ChatFormat::kDeepSeekV31,
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>",
           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
      both(ChatFormat::kGranite, "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": ", "}]"),
      both(ChatFormat::kKimiK2,
           "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
           "<|tool_call_argument_begin|>",
           "<|tool_call_end|><|tool_calls_section_end|>"),
      both(ChatFormat::kCommandR7B,
           "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", "
           "\"parameters\": ",
           "}\n]<|END_ACTION|>"),
      both(ChatFormat::kApriel15,
           "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": ", "}]</tool_calls>"),
      both(ChatFormat::kNemotronV2,
           "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": ", "}]</TOOLCALL>"),
      both(ChatFormat::kGptOss,
           "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>", ""),
      {ChatFormat::kQwen3Coder,
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis </b>\n</parameter>\n"
       "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
       "<parameter=days>\nsoon\n</parameter>\n</function>\n</tool_call>"},
      {ChatFormat::kSeedOss,
       "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n"
       "</seed:tool_call>",
       "<seed:tool_call>\n<function=get_weather>\n<parameter=days>3</parameter>\n</function>\n"
       "</seed:tool_call>"},
      {ChatFormat::kMiniMaxM2,
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris"
       "</parameter>\n</invoke>\n</minimax:tool_call>",
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"town\">Paris"
       "</parameter>\n</invoke>\n</minimax:tool_call>"},
      {ChatFormat::kGlm45,
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
       "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
       "<arg_key>days</arg_key>\n<arg_value>3.5</arg_value>\n</tool_call>"},
  };
}

TEST(ToolCallGrammarTest, AcceptsTheCanonicalCallRefusesBadArguments) {
  std::set<ChatFormat> covered;
  for (const Canonical& c : canonical_calls()) {
    SCOPED_TRACE(std::string(chat_format_name(c.format)) + ": " + c.good);
    covered.insert(c.format);
    const ToolGrammar g = grammar_for(c.format);
    EXPECT_TRUE(g.lazy);
    EXPECT_TRUE(accepts(g, c.good));
    EXPECT_FALSE(accepts(g, c.bad));
    // The text starts with a trigger, and the format's parser reads the call back.
    EXPECT_TRUE(std::any_of(g.triggers.begin(), g.triggers.end(),
                            [&](const std::string& t) { return c.good.starts_with(t); }));
    const ChatMsg m = parse_chat_output(c.good, options(c.format));
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(m.content, "");
    // Named: only that tool; another tool's call is refused.
    const ToolGrammar named = grammar_for(c.format, {ToolChoice::Kind::kNamed, "python"});
    EXPECT_FALSE(named.lazy);
    EXPECT_FALSE(accepts(named, c.good));
  }
  EXPECT_EQ(covered.size(), size_t(ChatFormat::kGptOss) - 1);  // all but the two generic ones
}

TEST(ToolCallGrammarTest, ParallelCalls) {
  const std::string one =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  const std::string two =
      one + "\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}\n</tool_call>";
  EXPECT_FALSE(accepts(grammar_for(ChatFormat::kHermes), two));
  EXPECT_TRUE(accepts(grammar_for(ChatFormat::kHermes, {}, true), two));
  const std::string nemo =
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
      "\"abcdefghi\"}, {\"name\": \"python\", \"arguments\": {\"code\": \"1\"}, \"id\": "
      "\"123456789\"}]";
  EXPECT_FALSE(accepts(grammar_for(ChatFormat::kMistralNemo), nemo));
  EXPECT_TRUE(accepts(grammar_for(ChatFormat::kMistralNemo, {}, true), nemo));
  const std::string qwen =
      "<tool_call>\n<function=python>\n<parameter=code>\nprint(\"</param\")\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n"
      "</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(accepts(grammar_for(ChatFormat::kQwen3Coder, {}, true), qwen));
  EXPECT_FALSE(accepts(grammar_for(ChatFormat::kQwen3Coder, {}, false), qwen));
}

TEST(ToolCallGrammarTest, GenericAnswer) {
  const ToolGrammar g = grammar_for(ChatFormat::kGeneric);
  EXPECT_FALSE(g.lazy);
  EXPECT_TRUE(g.triggers.empty());
  EXPECT_TRUE(accepts(
      g, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}"));
  EXPECT_TRUE(accepts(g, "{\"response\": \"Hello\"}"));
  EXPECT_FALSE(
      accepts(g, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": 5}}}"));
  EXPECT_FALSE(accepts(g, "{\"tool_call\": {\"name\": \"nope\", \"arguments\": {}}}"));
  const ToolGrammar required = grammar_for(ChatFormat::kGeneric, {ToolChoice::Kind::kRequired, ""});
  EXPECT_FALSE(accepts(required, "{\"response\": \"Hello\"}"));
  const ToolGrammar parallel = grammar_for(ChatFormat::kGeneric, {}, true);
  EXPECT_TRUE(accepts(parallel,
                      "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\": \"Paris\"}, \"id\": \"call_1\"}]}"));
  const ToolGrammar think = grammar_for(ChatFormat::kGenericThink);
  EXPECT_TRUE(accepts(think, "<think>a < b, </thin k></think>\n{\"response\": \"Hello\"}"));
  EXPECT_TRUE(accepts(think, "{\"response\": \"Hello\"}"));
}

TEST(ToolCallGrammarTest, Errors) {
  const std::vector<ToolSpec> tools = testing::test_tools();
  EXPECT_FALSE(tool_call_grammar(ChatFormat::kHermes, {}, {}, false).ok());
  EXPECT_FALSE(
      tool_call_grammar(ChatFormat::kHermes, tools, {ToolChoice::Kind::kNamed, "nope"}, false)
          .ok());
  std::vector<ToolSpec> odd = tools;
  odd[0].parameters["properties"]["days"]["minimum"] = 1;  // json_schema_to_gbnf refuses it
  auto g = tool_call_grammar(ChatFormat::kHermes, odd, {}, false);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("get_weather"), std::string::npos) << g.status().to_string();
  odd[0].parameters = nlohmann::ordered_json::parse(R"({"anyOf": [{"type": "object"}]})");
  EXPECT_FALSE(tool_call_grammar(ChatFormat::kQwen3Coder, odd, {}, false).ok());
  // No schema: any object (JSON formats), no parameters (XML formats).
  std::vector<ToolSpec> bare = {{"ping", nullptr}};
  EXPECT_TRUE(
      accepts(*tool_call_grammar(ChatFormat::kHermes, bare, {}, false),
              "<tool_call>{\"name\": \"ping\", \"arguments\": {\"any\": [1]}}</tool_call>"));
  EXPECT_TRUE(accepts(*tool_call_grammar(ChatFormat::kQwen3Coder, bare, {}, false),
                      "<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
}

}  // namespace
}  // namespace mnemo::chat_parse
