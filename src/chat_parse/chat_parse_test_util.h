// Helpers of the chat_parse tests: the tools the test outputs call, and the check every
// well-formed output goes through (the final parse, then the output streamed one byte at a time
// through diff_chat_msg).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat_parse/chat_parse.h"

namespace mnemo::chat_parse::testing {

/// get_weather(city: string, days?: integer), python(code: string), special_function(arg1: int).
inline std::vector<ToolSpec> test_tools() {
  using Json = nlohmann::ordered_json;
  return {
      {"get_weather", Json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
          "days": {"type": "integer"}}, "required": ["city"]})")},
      {"python", Json::parse(R"({"type": "object", "properties": {"code": {"type": "string"}},
          "required": ["code"]})")},
      {"special_function", Json::parse(R"({"type": "object", "properties": {"arg1":
          {"type": "integer"}}, "required": ["arg1"]})")},
  };
}

inline ParseOptions options(ChatFormat f) {
  ParseOptions o;
  o.format = f;
  o.tools = test_tools();
  o.parallel_tool_calls = true;
  return o;
}

inline std::string show(const ChatMsg& m) {
  std::string s = "content=[" + m.content + "] reasoning=[" + m.reasoning_content + "]";
  for (const ToolCall& c : m.tool_calls) {
    s += " call{id=[" + c.id + "] name=[" + c.name + "] args=[" + c.arguments + "]}";
  }
  return s;
}

}  // namespace mnemo::chat_parse::testing

namespace mnemo::chat_parse {
inline void PrintTo(const ChatMsg& m, std::ostream* os) { *os << testing::show(m); }
}  // namespace mnemo::chat_parse

namespace mnemo::chat_parse::testing {

/// Markup that must never reach content or reasoning of a well-formed output.
inline const std::vector<std::string>& markup() {
  static const std::vector<std::string> m = {
      "<tool_call",   "</tool_call", "[TOOL_CALLS]", "[ARGS]",         "<｜tool",    "<|tool",
      "<function",    "</function",  "<parameter",   "<think>",        "</think>",   "[THINK]",
      "[/THINK]",     "<|channel|>", "<|message|>",  "<|python_tag|>", "<arg_key>",  "<arg_value>",
      "<|START",      "<|END",       "<seed:",       "<minimax:",      "<invoke",    "<TOOLCALL>",
      "<tool_calls>", "functools[",  "<response>",   "</response>",    "<thinking>", "<|call|>",
      "<|end|>"};
  return m;
}

/// Parses `text` final and checks it against `want`; with `stream`, also parses every byte prefix
/// partial and checks the streaming contract: each parse extends the previous one (diff_chat_msg
/// succeeds), each is a prefix of the final message, no markup shows, and the deltas add up to
/// the final message.
inline void check(const std::string& text, const ParseOptions& opt, const ChatMsg& want,
                  bool stream = true) {
  SCOPED_TRACE("output: " + text);
  ParseOptions fin = opt;
  fin.is_partial = false;
  const ChatMsg got = parse_chat_output(text, fin);
  EXPECT_EQ(got, want) << "got  " << show(got) << "\nwant " << show(want);
  if (!stream) return;
  for (const std::string& m : markup()) {
    EXPECT_EQ(want.content.find(m), std::string::npos) << "markup in content: " << m;
  }
  ParseOptions part = opt;
  part.is_partial = true;
  ChatMsg prev, sum;
  for (size_t n = 0; n <= text.size(); ++n) {
    const bool last = n == text.size();
    const ChatMsg now = parse_chat_output(std::string_view(text).substr(0, n), last ? fin : part);
    auto d = diff_chat_msg(prev, now);
    ASSERT_TRUE(d.ok()) << "prefix " << n << ": " << d.status().to_string() << "\nprev "
                        << show(prev) << "\nnow  " << show(now);
    ASSERT_TRUE(want.content.starts_with(now.content)) << "prefix " << n << ": " << show(now);
    ASSERT_TRUE(want.reasoning_content.starts_with(now.reasoning_content))
        << "prefix " << n << ": " << show(now);
    ASSERT_LE(now.tool_calls.size(), want.tool_calls.size()) << "prefix " << n;
    sum.content += d->content;
    sum.reasoning_content += d->reasoning_content;
    for (const ToolCallDelta& t : d->tool_calls) {
      if (t.index >= sum.tool_calls.size()) {
        ASSERT_EQ(t.index, sum.tool_calls.size());
        sum.tool_calls.push_back({t.id, t.name, ""});
      }
      sum.tool_calls[t.index].arguments += t.arguments;
    }
    prev = now;
  }
  EXPECT_EQ(sum, got) << "deltas add up to " << show(sum);
}

inline ToolCall call(std::string name, std::string args, std::string id = "") {
  return {std::move(id), std::move(name), std::move(args)};
}

inline ChatMsg msg(std::string content, std::string reasoning = "",
                   std::vector<ToolCall> calls = {}) {
  return {std::move(content), std::move(reasoning), std::move(calls)};
}

}  // namespace mnemo::chat_parse::testing
