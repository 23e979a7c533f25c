// The JSON scanner, the diff, and the rules every format shares (shown on Hermes, the most used
// format): reasoning, content around calls, malformed and unfinished calls, partial openers.
// Formats one by one: chat_parse_formats_test.cc; detection: chat_parse_detect_test.cc; the
// small-model fallback and the tool grammar: chat_parse_grammar_test.cc.
#include "chat_parse/chat_parse_test_util.h"
#include "chat_parse/json_scan.h"

namespace mnemo::chat_parse {
namespace {

using namespace testing;  // NOLINT(build/namespaces): chat_parse_test_util.h's helpers

TEST(JsonScanTest, CompleteIncompleteInvalid) {
  struct Case {
    std::string text;
    Scan want;
  };
  const Case cases[] = {
      {R"({"a": [1, 2.5e3, true, null, "x\"y"]})", Scan::kComplete},
      {R"({"a": [1, 2)", Scan::kIncomplete},
      {R"({"a": "x\)", Scan::kIncomplete},
      {R"({"a": "\u00)", Scan::kIncomplete},
      {R"({"a": tr)", Scan::kIncomplete},
      {R"({"a": -)", Scan::kIncomplete},
      {R"({"a": 1.)", Scan::kIncomplete},
      {R"({"a")", Scan::kIncomplete},
      {R"({"a": })", Scan::kInvalid},
      {R"({"a": tx})", Scan::kInvalid},
      {R"({"a": "\q"})", Scan::kInvalid},
      {R"({"a" 1})", Scan::kInvalid},
      {R"([1,, 2])", Scan::kInvalid},
      {R"({a: 1})", Scan::kInvalid},
      {"\"line\nbreak\"", Scan::kInvalid},
      {"01", Scan::kComplete},  // the value is "0"; what follows is the caller's
  };
  for (const Case& c : cases) {
    EXPECT_EQ(scan_value(c.text, 0).status, c.want) << c.text;
  }
  EXPECT_EQ(scan_value("12", 0).status, Scan::kIncomplete);  // more digits may come
  EXPECT_EQ(scan_value("12", 0, /*final=*/true).status, Scan::kComplete);
  EXPECT_EQ(scan_value(R"({"a": 1} tail)", 0).end, 8u);
  EXPECT_EQ(scan_value(std::string(600, '['), 0).status, Scan::kInvalid);  // too deep
}

TEST(JsonScanTest, ObjectMembers) {
  const std::string text = R"({"name": "f", "arguments": {"x": [1, )";
  const ObjectScan os = scan_object(text, 0);
  EXPECT_EQ(os.status, Scan::kIncomplete);
  ASSERT_EQ(os.members.size(), 2u);
  EXPECT_EQ(os.members[0].key, "name");
  EXPECT_EQ(os.members[0].value.status, Scan::kComplete);
  EXPECT_EQ(os.members[1].key, "arguments");
  EXPECT_EQ(os.members[1].value.status, Scan::kIncomplete);
  EXPECT_EQ(text.substr(os.members[1].value_pos, 1), "{");
  ASSERT_NE(os.find("name"), nullptr);
  EXPECT_EQ(os.find("id"), nullptr);
}

TEST(JsonScanTest, DecodeStringGrowsWithTheText) {
  const std::string s = R"("a\n\"\u00e9\ud83d\ude00b")";
  bool closed = false;
  EXPECT_EQ(decode_string(s, 0, s.size(), &closed), "a\n\"é😀b");
  EXPECT_TRUE(closed);
  std::string prev;
  for (size_t n = 1; n <= s.size(); ++n) {
    const std::string d = decode_string(s, 0, n, &closed);
    EXPECT_TRUE(d.starts_with(prev)) << n;
    EXPECT_EQ(closed, n == s.size()) << n;
    prev = d;
  }
  EXPECT_EQ(decode_string(R"("\ud83dx")", 0, 9, &closed), "\xEF\xBF\xBDx");  // lone surrogate
  EXPECT_EQ(json_escape("a\"\\\n\x01é"), "a\\\"\\\\\\n\\u0001é");
  EXPECT_EQ(utf8_complete_prefix("ab\xC3"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xC3\xA9"), 4u);
}

TEST(ChatMsgDiffTest, DeltasAndErrors) {
  const ChatMsg a = msg("Hel", "th", {call("f", "{\"a\"", "id1")});
  const ChatMsg b = msg("Hello", "think", {call("f", "{\"a\": 1}", "id1"), call("g", "{")});
  auto d = diff_chat_msg(a, b);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->content, "lo");
  EXPECT_EQ(d->reasoning_content, "ink");
  ASSERT_EQ(d->tool_calls.size(), 2u);
  EXPECT_EQ(d->tool_calls[0], (ToolCallDelta{0, "", "", ": 1}"}));
  EXPECT_EQ(d->tool_calls[1], (ToolCallDelta{1, "", "g", "{"}));
  EXPECT_TRUE(diff_chat_msg(b, b)->empty());
  EXPECT_FALSE(diff_chat_msg(b, a).ok());                  // calls vanish
  EXPECT_FALSE(diff_chat_msg(msg("ab"), msg("ac")).ok());  // content rewritten
  EXPECT_FALSE(diff_chat_msg(msg("", "", {call("f", "{}")}), msg("", "", {call("h", "{}")})).ok());
  EXPECT_FALSE(
      diff_chat_msg(msg("", "", {call("f", "{}")}), msg("", "", {call("f", "{}", "x")})).ok());
}

TEST(ChatParseTest, ContentOnly) {
  check("Hello, world!\nWhat's up?", options(ChatFormat::kHermes),
        msg("Hello, world!\nWhat's up?"));
  check("  padded \n", options(ChatFormat::kHermes), msg("padded"));
  check("", options(ChatFormat::kHermes), msg(""));
  check("Résumé: 日本語 😀 ok", options(ChatFormat::kHermes), msg("Résumé: 日本語 😀 ok"));
}

TEST(ChatParseTest, Reasoning) {
  const ParseOptions o = options(ChatFormat::kHermes);
  check("<think>\nI'm\nthinking\n</think>\n\nHello", o, msg("Hello", "I'm\nthinking"));
  check("<think></think>Hello", o, msg("Hello"));
  // Never closed: reasoning to the end.
  check("<think>still thinking", o, msg("", "still thinking"));
  // Not at the start: content.
  check("Hello <think>x</think>", o, msg("Hello <think>x</think>"), /*stream=*/false);
  ParseOptions forced = o;
  forced.thinking_forced_open = true;
  check("I'm thinking</think>Hello", forced, msg("Hello", "I'm thinking"));
  check("<think>I'm thinking</think>Hello", forced, msg("Hello", "I'm thinking"));
  check("</think>Hello", forced, msg("Hello"));
  check("no closing tag at all", forced, msg("", "no closing tag at all"));
  ParseOptions none = o;
  none.reasoning = ReasoningFormat::kNone;
  check("<think>x</think>Hello", none, msg("<think>x</think>Hello"), /*stream=*/false);
  none.thinking_forced_open = true;
  check("x</think>Hello", none, msg("x</think>Hello"), /*stream=*/false);
  ParseOptions deepseek = o;
  deepseek.reasoning = ReasoningFormat::kDeepSeek;
  check("<think>x</think>Hello", deepseek, msg("Hello", "x"));
}

TEST(ChatParseTest, HermesCalls) {
  const ParseOptions o = options(ChatFormat::kHermes);
  const std::string one =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>";
  const ToolCall paris = call("get_weather", "{\"city\": \"Paris\"}");
  check(one, o, msg("", "", {paris}));
  check(one + "\n" +
            "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}}\n"
            "</tool_call>",
        o, msg("", "", {paris, call("python", "{\"code\": \"print(1)\"}")}));
  check("Let me check.\n\n" + one, o, msg("Let me check.", "", {paris}));
  check("<think>Need the weather.</think>\n" + one + "\nDone.", o,
        msg("Done.", "Need the weather.", {paris}));
  // The closer left out (a stop string ate it): still a call.
  check("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", o,
        msg("", "", {paris}));
  // Arguments as a JSON string, arguments missing.
  check(R"(<tool_call>{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}</tool_call>)",
        o, msg("", "", {paris}));
  check(R"(<tool_call>{"name": "get_time"}</tool_call>)", o, msg("", "", {call("get_time", "{}")}));
  // Several calls as an array in one block.
  check(
      "<tool_call>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
      "{\"name\": \"get_time\", \"arguments\": {}}]</tool_call>",
      o, msg("", "", {paris, call("get_time", "{}")}));
  // Markup inside the reasoning is reasoning.
  check("<think>maybe " + one + "</think>Done", o, msg("Done", "maybe " + one), false);
}

TEST(ChatParseTest, MalformedCallsStayContent) {
  const ParseOptions o = options(ChatFormat::kHermes);
  for (const std::string bad : {
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>",
           "<tool_call>\nnot json\n</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>",  // no name
           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
       }) {
    check(bad, o, msg(bad), /*stream=*/false);
  }
  // Unfinished at the end of a final text (the token limit): dropped, never content; a whole
  // call before it stays.
  check("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", o, msg(""),
        false);
  check("Text <tool_call>", o, msg("Text"), false);
  check("<tool_call>{\"name\": \"python\", \"arguments\": {}}</tool_call>\n<tool_call>\n{\"na", o,
        msg("", "", {call("python", "{}")}), false);
  // A malformed call does not hide a good one after it.
  check(
      "<tool_call>oops</tool_call> <tool_call>{\"name\": \"python\", \"arguments\": {}}"
      "</tool_call>",
      o, msg("<tool_call>oops</tool_call>", "", {call("python", "{}")}), false);
  // Streamed, the unfinished call shows as a partial call, never as content.
  ParseOptions p = o;
  p.is_partial = true;
  EXPECT_EQ(
      parse_chat_output("Hi <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", p),
      msg("Hi", "", {call("get_weather", "{\"ci")}));
  EXPECT_EQ(parse_chat_output("Hi <tool_call>\n{\"name\": \"get_wea", p), msg("Hi"));
}

TEST(ChatParseTest, PartialOpenersAreHeldBack) {
  ParseOptions p = options(ChatFormat::kHermes);
  p.is_partial = true;
  EXPECT_EQ(parse_chat_output("Hello <tool_", p), msg("Hello"));
  EXPECT_EQ(parse_chat_output("Hello <tool_x", p), msg("Hello <tool_x"));
  EXPECT_EQ(parse_chat_output("<thi", p), msg(""));
  EXPECT_EQ(parse_chat_output("<b>", p), msg("<b>"));
  EXPECT_EQ(parse_chat_output("caf\xC3", p), msg("caf"));  // half of "é"
  // The same texts, final, are content as written.
  p.is_partial = false;
  EXPECT_EQ(parse_chat_output("Hello <tool_", p), msg("Hello <tool_"));
  EXPECT_EQ(parse_chat_output("<thi", p), msg("<thi"));
}

TEST(ChatParseTest, PromptOpensThinking) {
  EXPECT_TRUE(prompt_opens_thinking(ChatFormat::kHermes, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking(ChatFormat::kHermes, "<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_thinking(ChatFormat::kDeepSeekV31, "<｜Assistant｜></think>"));
  EXPECT_TRUE(prompt_opens_thinking(ChatFormat::kMistral, "[INST]hi[/INST][THINK]"));
  EXPECT_FALSE(prompt_opens_thinking(ChatFormat::kLlama3, "<think>"));
}

TEST(ChatParseTest, ToolCallsOffLeavesMarkupInContent) {
  ParseOptions o = options(ChatFormat::kHermes);
  o.parse_tool_calls = false;
  const std::string text =
      "<think>hm</think><tool_call>{\"name\": \"python\", \"arguments\": {}}</tool_call>";
  check(text, o, msg("<tool_call>{\"name\": \"python\", \"arguments\": {}}</tool_call>", "hm"),
        false);
}

TEST(ChatParseTest, StreamingArgumentsGrowByPrefix) {
  // Long arguments with escapes and multi-byte characters, one byte at a time.
  const std::string text =
      "Sure.<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"print(\\\"héllo\\\\n "
      "😀\\\")\\nx = [1, 2]\"}}</tool_call>";
  check(text, options(ChatFormat::kHermes),
        msg("Sure.", "",
            {call("python", "{\"code\": \"print(\\\"héllo\\\\n 😀\\\")\\nx = [1, 2]\"}")}));
}

}  // namespace
}  // namespace mnemo::chat_parse
