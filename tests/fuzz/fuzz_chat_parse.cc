// libFuzzer target for chat_parse (src/chat_parse/chat_parse.h): the input's first byte picks the
// format, the second the options, the rest is a model's output (the model is steered by users' prompts, so
// its text is outside input), parsed final and, streamed, at every prefix; the whole input is
// also a chat template for detect_chat_format.
//
// Invariants (checked with abort()): a parse never shows more content and reasoning than the
// text has bytes plus the separators it adds; a stream's deltas always come back (an error
// status for a malformed output is fine, a crash is not); the fallback off or on parses alike
// when no tool is declared. Crashes, hangs and sanitizer reports are libFuzzer's to find. Seed
// corpus: tests/fuzz/corpus/chat_parse/. Run: scripts/fuzz [SECONDS].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chat_parse/chat_parse.h"

namespace {

using mnemo::chat_parse::ChatFormat;
using mnemo::chat_parse::ChatMsg;
using mnemo::chat_parse::ParseOptions;

const std::vector<mnemo::chat_parse::ToolSpec>& tools() {
  static const std::vector<mnemo::chat_parse::ToolSpec> t = {
      {"get_weather", nlohmann::ordered_json::parse(
                          R"({"type": "object", "properties": {"city": {"type": "string"},
                              "days": {"type": "integer"}}, "required": ["city"]})")},
      {"python", nlohmann::ordered_json::parse(
                     R"({"type": "object", "properties": {"code": {"type": "string"}}})")}};
  return t;
}

void check_size(const ChatMsg& m, size_t n) {
  // gpt-oss joins analysis messages with one "\n": never more than one per two bytes.
  if (m.content.size() + m.reasoning_content.size() > n + n / 2 + 1) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 4096) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  (void)mnemo::chat_parse::detect_chat_format(all);
  const uint8_t flags = data[1];
  const std::string_view text = all.substr(2);
  ParseOptions o;
  o.format = ChatFormat(data[0] % (int(ChatFormat::kGptOss) + 1));
  o.thinking_forced_open = flags & 0x20;
  o.parse_tool_calls = !(flags & 0x40);
  o.bare_json_calls = flags & 0x80;
  o.reasoning = (flags & 0x10) ? mnemo::chat_parse::ReasoningFormat::kNone
                               : mnemo::chat_parse::ReasoningFormat::kAuto;
  o.tools = tools();
  const ChatMsg whole = mnemo::chat_parse::parse_chat_output(text, o);
  check_size(whole, text.size());
  o.is_partial = true;
  ChatMsg prev;
  for (size_t n = 0; n <= text.size(); n += 1 + n / 64) {
    const ChatMsg now = mnemo::chat_parse::parse_chat_output(text.substr(0, n), o);
    check_size(now, n);
    (void)mnemo::chat_parse::diff_chat_msg(prev, now);
    prev = now;
  }
  o.is_partial = false;
  o.tools.clear();
  const ChatMsg no_tools = mnemo::chat_parse::parse_chat_output(text, o);
  o.bare_json_calls = !o.bare_json_calls;
  if (!(mnemo::chat_parse::parse_chat_output(text, o) == no_tools)) abort();
  return 0;
}
