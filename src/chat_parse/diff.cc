// Deltas between two successive parses of one stream (contract in chat_parse.h).
#include <fmt/format.h>

#include "chat_parse/chat_parse.h"

namespace mnemo::chat_parse {
namespace {

Status not_extended(std::string_view what, size_t index = SIZE_MAX) {
  return Status::internal(
      fmt::format("chat parse: the new parse does not extend the previous one ({}{})", what,
                  index == SIZE_MAX ? "" : fmt::format(" of tool call {}", index)));
}

}  // namespace

Result<ChatMsgDiff> diff_chat_msg(const ChatMsg& before, const ChatMsg& after) {
  ChatMsgDiff d;
  if (!after.content.starts_with(before.content)) return not_extended("content");
  if (!after.reasoning_content.starts_with(before.reasoning_content)) {
    return not_extended("reasoning_content");
  }
  if (after.tool_calls.size() < before.tool_calls.size()) return not_extended("a call vanished");
  d.content = after.content.substr(before.content.size());
  d.reasoning_content = after.reasoning_content.substr(before.reasoning_content.size());
  for (size_t i = 0; i < after.tool_calls.size(); ++i) {
    const ToolCall& now = after.tool_calls[i];
    if (i >= before.tool_calls.size()) {
      d.tool_calls.push_back({i, now.id, now.name, now.arguments});
      continue;
    }
    const ToolCall& was = before.tool_calls[i];
    if (now.name != was.name) return not_extended("the name", i);
    if (now.id != was.id) return not_extended("the id", i);
    if (!now.arguments.starts_with(was.arguments)) return not_extended("the arguments", i);
    if (now.arguments.size() > was.arguments.size()) {
      d.tool_calls.push_back({i, "", "", now.arguments.substr(was.arguments.size())});
    }
  }
  return d;
}

}  // namespace mnemo::chat_parse
