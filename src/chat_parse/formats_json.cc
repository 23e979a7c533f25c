// Formats whose calls are JSON objects {"name", "arguments"} after an opener: Hermes
// (<tool_call>{...}</tool_call>), and the JSON arrays of Granite 3 (<|tool_call|>[...]),
// FireFunction v2 (functools[...]), Apriel 1.5 (<tool_calls>[...]</tool_calls>), Nemotron Nano v2
// (<TOOLCALL>[...]</TOOLCALL>) and Command R7B (<|START_ACTION|>[...]<|END_ACTION|>, keys
// tool_call_id / tool_name / parameters). Markers around the answer (Granite's <response>,
// Command R7B's <|START_RESPONSE|>) are dropped.
#include "chat_parse/engine.h"

namespace mnemo::chat_parse {
namespace {

constexpr CallKeys kNoIds{.id = ""};

SectionResult parse_hermes(Ctx& ctx, size_t pos) {
  const size_t p = skip_ws(ctx.text, pos + std::string_view("<tool_call>").size());
  if (p >= ctx.size()) return {Outcome::kIncomplete, ctx.size(), {}};
  return parse_json_calls(ctx, p, kNoIds, "</tool_call>");
}

// An opener, white space, then a JSON array of calls (a single object is taken too), then an
// optional closer. (Hermes is the same with one object, but an array is taken there too.)
SectionResult array_after(Ctx& ctx, size_t pos, std::string_view opener, const CallKeys& keys,
                          std::string_view closer) {
  const size_t p = skip_ws(ctx.text, pos + opener.size());
  if (p >= ctx.size()) return {Outcome::kIncomplete, ctx.size(), {}};
  return parse_json_calls(ctx, p, keys, closer);
}

SectionResult parse_granite(Ctx& ctx, size_t pos) {
  return array_after(ctx, pos, "<|tool_call|>", kNoIds, "");
}
SectionResult parse_firefunction(Ctx& ctx, size_t pos) {
  // The opener ends with the array's "[": step back onto it.
  return array_after(ctx, pos, "functools", kNoIds, "");
}
SectionResult parse_apriel(Ctx& ctx, size_t pos) {
  return array_after(ctx, pos, "<tool_calls>", {.id = "id", .hold_for_id = true}, "</tool_calls>");
}
SectionResult parse_nemotron(Ctx& ctx, size_t pos) {
  return array_after(ctx, pos, "<TOOLCALL>", kNoIds, "</TOOLCALL>");
}
SectionResult parse_command_r(Ctx& ctx, size_t pos) {
  constexpr CallKeys kKeys{.name = "tool_name",
                           .args = "parameters",
                           .args_alt = "",
                           .id = "tool_call_id",
                           .hold_for_id = true};
  return array_after(ctx, pos, "<|START_ACTION|>", kKeys, "<|END_ACTION|>");
}

SectionResult drop_response(Ctx& ctx, size_t pos) {
  return drop_marker(ctx, pos, ctx.starts_with(pos, "<response>") ? "<response>" : "</response>");
}
SectionResult drop_cohere(Ctx& ctx, size_t pos) {
  for (std::string_view m :
       {"<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"}) {
    if (ctx.starts_with(pos, m)) return drop_marker(ctx, pos, m);
  }
  return {Outcome::kInvalid, pos, {}};
}

}  // namespace

void parse_json_family(Ctx& ctx, size_t pos) {
  std::vector<Section> sections;
  const bool calls = ctx.opt.parse_tool_calls;
  switch (ctx.opt.format) {
    case ChatFormat::kHermes:
      if (calls) sections.push_back({{"<tool_call>"}, parse_hermes});
      break;
    case ChatFormat::kGranite:
      if (calls) sections.push_back({{"<|tool_call|>"}, parse_granite});
      sections.push_back({{"<response>", "</response>"}, drop_response});
      break;
    case ChatFormat::kFirefunctionV2:
      if (calls) sections.push_back({{"functools["}, parse_firefunction});
      break;
    case ChatFormat::kApriel15:
      if (calls) sections.push_back({{"<tool_calls>"}, parse_apriel});
      break;
    case ChatFormat::kNemotronV2:
      if (calls) sections.push_back({{"<TOOLCALL>"}, parse_nemotron});
      break;
    case ChatFormat::kCommandR7B:
      if (calls) sections.push_back({{"<|START_ACTION|>"}, parse_command_r});
      sections.push_back(
          {{"<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"},
           drop_cohere});
      break;
    default:
      break;
  }
  scan_sections(ctx, pos, sections);
}

}  // namespace mnemo::chat_parse
