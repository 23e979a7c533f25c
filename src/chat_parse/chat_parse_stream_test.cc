// Randomized outputs: well-formed ones (reasoning, content, one to three calls with awkward
// argument strings) go through the streaming check of every format family; arbitrary soups of
// markup pieces must parse without a crash, final and at every prefix.
#include <random>

#include "chat_parse/chat_parse_test_util.h"
#include "chat_parse/json_scan.h"

namespace mnemo::chat_parse {
namespace {

using namespace testing;  // NOLINT(build/namespaces): chat_parse_test_util.h's helpers

// Argument strings that stress escaping and markers (none holds an XML closer).
const char* const kCities[] = {"Paris",      "São Paulo", "a \"quoted\" city", "back\\slash",
                               "new\nline",  "tab\there", "<b>bold</b>",       "{braces}",
                               "emoji 😀 ok", "日本語",    "[TOOL] [ARGS",      "50% <|x|>"};
const char* const kWords[] = {"Sure.",   "Let me check", "the weather", "a < b",     "x > y",
                              "émoji 😀", "[1, 2]",       "done",        "{not json", "tool_call"};

struct Written {
  std::string text;
  ToolCall call;
};

// One call of get_weather(city) in format f, and what the parser must read back.
Written write_call(ChatFormat f, const std::string& city, int index) {
  const std::string json = "{\"city\": \"" + json_escape(city) + "\"}";
  const std::string compact = "{\"city\":\"" + json_escape(city) + "\"}";
  switch (f) {
    case ChatFormat::kHermes:
      return {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + json + "}\n</tool_call>",
              call("get_weather", json)};
    case ChatFormat::kQwen3Coder:
      return {"<tool_call>\n<function=get_weather>\n<parameter=city>\n" + city +
                  "\n</parameter>\n</function>\n</tool_call>",
              call("get_weather", compact)};
    case ChatFormat::kGlm45:
      return {"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>" + city +
                  "</arg_value>\n</tool_call>",
              call("get_weather", compact)};
    case ChatFormat::kMiniMaxM2:
      return {"<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">" +
                  city + "</parameter>\n</invoke>\n</minimax:tool_call>",
              call("get_weather", compact)};
    case ChatFormat::kMistral: {
      const std::string id = "abcdefgh" + std::to_string(index);
      return {"[TOOL_CALLS]get_weather[CALL_ID]" + id + "[ARGS]" + json,
              call("get_weather", json, id)};
    }
    case ChatFormat::kMistralNemo: {
      const std::string id = "abcdefgh" + std::to_string(index);
      return {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + json + ", \"id\": \"" +
                  id + "\"}]",
              call("get_weather", json, id)};
    }
    case ChatFormat::kDeepSeekV31:
      return {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" + json +
                  "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
              call("get_weather", json)};
    case ChatFormat::kDeepSeekR1:
      return {
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```"
          "json\n" +
              json + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
          call("get_weather", json)};
    case ChatFormat::kKimiK2: {
      const std::string id = "functions.get_weather:" + std::to_string(index);
      return {"<|tool_calls_section_begin|><|tool_call_begin|>" + id +
                  "<|tool_call_argument_begin|>" + json +
                  "<|tool_call_end|><|tool_calls_section_end|>",
              call("get_weather", json, id)};
    }
    case ChatFormat::kGranite:
      return {"<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " + json + "}]",
              call("get_weather", json)};
    case ChatFormat::kCommandR7B:
      return {"<|START_ACTION|>[{\"tool_call_id\": \"" + std::to_string(index) +
                  "\", \"tool_name\": \"get_weather\", \"parameters\": " + json +
                  "}]<|END_ACTION|>",
              call("get_weather", json, std::to_string(index))};
    case ChatFormat::kGptOss:
      return {
          "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
          "<|message|>" +
              json + "<|call|>",
          call("get_weather", json)};
    default:
      return {};
  }
}

std::string think(ChatFormat f, const std::string& r) {
  switch (f) {
    case ChatFormat::kMistral:
      return "[THINK]" + r + "[/THINK]";
    case ChatFormat::kCommandR7B:
      return "<|START_THINKING|>" + r + "<|END_THINKING|>";
    case ChatFormat::kGptOss:
      return "<|channel|>analysis<|message|>" + r + "<|end|>";
    case ChatFormat::kMistralNemo:
      return "";
    default:
      return "<think>" + r + "</think>";
  }
}

std::string content_of(ChatFormat f, const std::string& c) {
  if (f == ChatFormat::kGptOss)
    return "<|start|>assistant<|channel|>commentary<|message|>" + c + "<|end|>";
  return c;
}

TEST(ChatParseStreamTest, RandomWellFormedOutputs) {
  std::mt19937 rng(7);
  auto pick = [&](auto& arr) { return std::string(arr[rng() % std::size(arr)]); };
  const ChatFormat formats[] = {
      ChatFormat::kHermes,      ChatFormat::kQwen3Coder, ChatFormat::kGlm45,
      ChatFormat::kMiniMaxM2,   ChatFormat::kMistral,    ChatFormat::kMistralNemo,
      ChatFormat::kDeepSeekV31, ChatFormat::kDeepSeekR1, ChatFormat::kKimiK2,
      ChatFormat::kGranite,     ChatFormat::kCommandR7B, ChatFormat::kGptOss};
  for (ChatFormat f : formats) {
    for (int i = 0; i < 12; ++i) {
      std::string text;
      ChatMsg want;
      if (rng() % 2 && !think(f, "x").empty()) {
        want.reasoning_content = pick(kWords) + " " + pick(kCities);
        text += think(f, want.reasoning_content);
      }
      if (rng() % 2) {
        want.content = pick(kWords) + " " + pick(kWords);
        text += content_of(f, want.content) + "\n";
      }
      const int calls = int(rng() % 4);
      for (int c = 0; c < calls; ++c) {
        Written w = write_call(f, pick(kCities), c);
        text += w.text + (rng() % 2 ? "\n" : "");
        want.tool_calls.push_back(w.call);
      }
      SCOPED_TRACE(std::string(chat_format_name(f)) + " case " + std::to_string(i));
      check(text, options(f), want);
    }
  }
}

TEST(ChatParseStreamTest, ArbitraryTextNeverBreaksTheParser) {
  const char* const pieces[] = {
      "<tool_call>",
      "</tool_call>",
      "<think>",
      "</think>",
      "{\"name\": \"get_weather\"",
      ", \"arguments\": {",
      "\"city\": \"Pa",
      "}",
      "]",
      "[",
      "\"",
      "\\",
      "<function=",
      ">",
      "<parameter=city>",
      "</parameter>",
      "</function>",
      "[TOOL_CALLS]",
      "[ARGS]",
      "[CALL_ID]",
      "<｜tool▁calls▁begin｜>",
      "<｜tool▁call▁begin｜>",
      "<｜tool▁sep｜>",
      "<｜tool▁call▁end｜>",
      "<|tool_calls_section_begin|>",
      "<|tool_call_begin|>",
      "functions.x:0",
      "<|tool_call_argument_begin|>",
      "<|channel|>",
      "analysis",
      "final",
      "<|message|>",
      "<|end|>",
      "<|start|>",
      " to=functions.get_weather",
      "<|python_tag|>",
      "x.call(",
      "q=",
      "<arg_key>",
      "</arg_key>",
      "<arg_value>",
      "</arg_value>",
      "```json\n",
      "```",
      "text ",
      "\n",
      "😀",
      "\xC3",
      "\xff",
      "{\"response\": \"",
      "{\"tool_calls\": [",
      "<|tool_call|>",
      "<|START_ACTION|>",
      "<response>",
      "<seed:tool_call>",
      "<invoke name=\"",
  };
  std::mt19937 rng(11);
  for (int f = 0; f <= int(ChatFormat::kGptOss); ++f) {
    for (int i = 0; i < 60; ++i) {
      std::string text;
      const int n = 1 + int(rng() % 12);
      for (int k = 0; k < n; ++k) text += pieces[rng() % std::size(pieces)];
      ParseOptions o = options(ChatFormat(f));
      o.bare_json_calls = rng() % 2;
      o.thinking_forced_open = rng() % 2;
      o.reasoning = rng() % 3 ? ReasoningFormat::kAuto : ReasoningFormat::kNone;
      const ChatMsg whole = parse_chat_output(text, o);
      EXPECT_LE(whole.content.size(), text.size()) << text;
      o.is_partial = true;
      for (size_t m = 0; m <= text.size(); ++m) {
        const ChatMsg part = parse_chat_output(std::string_view(text).substr(0, m), o);
        EXPECT_LE(part.content.size() + part.reasoning_content.size(), m) << text;
      }
    }
  }
}

}  // namespace
}  // namespace mnemo::chat_parse
