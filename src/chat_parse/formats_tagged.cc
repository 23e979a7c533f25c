// Formats that write a call as markers around the function's name and its JSON arguments:
// Mistral ([TOOL_CALLS]N[CALL_ID]ID[ARGS]{...}, and Nemo's [TOOL_CALLS][{...}] array), DeepSeek
// R1 and V3.1 (<｜tool▁call▁begin｜>...<｜tool▁sep｜>...), Kimi K2
// (<|tool_call_begin|>functions.N:I
// <|tool_call_argument_begin|>{...}) and Functionary v3.1 (<function=N>{...}</function>).
#include <algorithm>

#include "chat_parse/engine.h"

namespace mnemo::chat_parse {
namespace {

// How the text between a call's opener and its arguments names the function.
enum class Header : unsigned char {
  kName,        // the name
  kMistral,     // NAME or NAME[CALL_ID]ID
  kKimi,        // functions.NAME:INDEX, which is also the id
  kDeepSeekR1,  // TYPE<｜tool▁sep｜>NAME\n (then a ```json fence)
};

struct TaggedSpec {
  std::string_view section_open;   // "" : one call per section
  std::string_view section_close;  // "" : none
  std::string_view call_open;
  std::string_view header_end;  // between the header and the arguments
  std::string_view call_close;  // "" : none
  Header header = Header::kName;
};

constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";

constexpr TaggedSpec kDeepSeekV31{kDsCallsBegin, kDsCallsEnd, kDsCallBegin,
                                  kDsSep,        kDsCallEnd,  Header::kName};
constexpr TaggedSpec kDeepSeekR1{kDsCallsBegin, kDsCallsEnd, kDsCallBegin,
                                 "```",         kDsCallEnd,  Header::kDeepSeekR1};
constexpr TaggedSpec kKimi{
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>",          Header::kKimi};
constexpr TaggedSpec kFunctionary{"", "", "<function=", ">", "</function>", Header::kName};
constexpr TaggedSpec kMistralNamed{"", "", "[TOOL_CALLS]", "[ARGS]", "", Header::kMistral};

// The name (and id) a whole header gives; false when it is not one.
bool decode_header(std::string_view raw, Header kind, ToolCall* call) {
  std::string_view h = trim_view(raw);
  switch (kind) {
    case Header::kName:
      call->name = std::string(h);
      return is_name(h);
    case Header::kMistral: {
      const size_t c = h.find("[CALL_ID]");
      if (c != std::string_view::npos) {
        call->id = std::string(trim_view(h.substr(c + 9)));
        h = trim_view(h.substr(0, c));
        if (!is_name(call->id)) return false;
      }
      call->name = std::string(h);
      return is_name(h);
    }
    case Header::kKimi: {
      call->id = std::string(h);
      if (h.starts_with("functions.")) h.remove_prefix(10);
      const size_t colon = h.rfind(':');
      if (colon != std::string_view::npos &&
          std::all_of(h.begin() + long(colon) + 1, h.end(),
                      [](char c) { return c >= '0' && c <= '9'; })) {
        h = h.substr(0, colon);
      }
      call->name = std::string(h);
      return is_name(h);
    }
    case Header::kDeepSeekR1: {
      const size_t sep = h.find(kDsSep);
      if (sep == std::string_view::npos) return false;
      h = trim_view(h.substr(sep + kDsSep.size()));
      call->name = std::string(h);
      return is_name(h);
    }
  }
  return false;
}

// A header whose end marker has not come yet: may it still become one?
bool header_may_continue(std::string_view raw, const TaggedSpec& spec) {
  if (raw.size() > 256) return false;
  if (spec.header == Header::kDeepSeekR1) return true;
  raw = drop_partial(raw, spec.header_end);
  if (spec.header == Header::kMistral) {
    const size_t c = raw.find("[CALL_ID]");
    if (c != std::string_view::npos) {
      const std::string_view id = trim_view(raw.substr(c + 9));
      return is_name(trim_view(raw.substr(0, c))) && (id.empty() || is_name(id));
    }
    raw = drop_partial(raw, "[CALL_ID]");
  }
  const std::string_view name = trim_view(raw);
  return name.empty() || is_name(name);
}

// One call at text[pos] (at spec.call_open). Adds the call (whole, or partial once named) to
// *calls; returns kDone with *end past the call, or why not.
Outcome parse_one_call(Ctx& ctx, size_t pos, const TaggedSpec& spec, std::vector<ToolCall>* calls,
                       size_t* end) {
  const size_t h = pos + spec.call_open.size();
  const size_t he = ctx.text.find(spec.header_end, h);
  if (he == std::string_view::npos) {
    std::string_view raw = ctx.text.substr(h);
    return header_may_continue(raw, spec) ? Outcome::kIncomplete : Outcome::kInvalid;
  }
  ToolCall call;
  if (!decode_header(ctx.text.substr(h, he - h), spec.header, &call)) return Outcome::kInvalid;
  size_t p = he + spec.header_end.size();
  if (spec.header == Header::kDeepSeekR1 && ctx.starts_with(p, "json")) p += 4;
  if (spec.header == Header::kDeepSeekR1 && ctx.prefix_of(p, "json")) {
    calls->push_back(std::move(call));
    return Outcome::kIncomplete;
  }
  ArgsParse a = parse_args(ctx, p);
  if (a.status == Scan::kInvalid) return Outcome::kInvalid;
  call.arguments = std::move(a.args);
  calls->push_back(std::move(call));
  if (a.status == Scan::kIncomplete) return Outcome::kIncomplete;
  p = a.end;
  const std::string_view fence = spec.header == Header::kDeepSeekR1 ? "```" : "";
  for (std::string_view closer : {fence, spec.call_close}) {
    if (closer.empty()) continue;
    size_t e = p;
    const Close c = find_close(ctx, p, closer, &e);
    if (c == Close::kFound) p = e;
    if (c == Close::kMaybe) {
      if (ctx.partial()) return Outcome::kIncomplete;
      p = ctx.size();
    }
  }
  *end = p;
  return Outcome::kDone;
}

// A section of calls (or one call when the spec has no section markers) at text[pos].
SectionResult parse_tagged(Ctx& ctx, size_t pos, const TaggedSpec& spec) {
  SectionResult r;
  size_t p = pos;
  const bool section = !spec.section_open.empty() && ctx.starts_with(pos, spec.section_open);
  if (section) p += spec.section_open.size();
  while (true) {
    const size_t q = skip_ws(ctx.text, p);
    if (ctx.starts_with(q, spec.call_open)) {
      size_t end = q;
      const Outcome o = parse_one_call(ctx, q, spec, &r.calls, &end);
      if (o != Outcome::kDone) {
        r.outcome = o;
        r.end = q;
        return r;
      }
      p = end;
      if (spec.section_open.empty()) break;
      continue;
    }
    if (!section || spec.section_close.empty()) break;
    // Within a section: its end, more to come, or (left out) whatever follows.
    if (ctx.starts_with(q, spec.section_close)) {
      p = q + spec.section_close.size();
      break;
    }
    if (q >= ctx.size() || ctx.prefix_of(q, spec.call_open) ||
        ctx.prefix_of(q, spec.section_close)) {
      if (ctx.partial() || r.calls.empty()) {
        r.outcome = Outcome::kIncomplete;
        r.end = q;
        return r;
      }
      p = ctx.size();
    }
    break;
  }
  r.outcome = r.calls.empty() && section && p == pos + spec.section_open.size() ? Outcome::kInvalid
                                                                                : Outcome::kDone;
  r.end = p;
  return r;
}

SectionResult parse_mistral(Ctx& ctx, size_t pos) {
  const size_t q = skip_ws(ctx.text, pos + std::string_view("[TOOL_CALLS]").size());
  if (q >= ctx.size()) return {Outcome::kIncomplete, ctx.size(), {}};
  if (ctx.text[q] == '[') return parse_call_array(ctx, q, {.hold_for_id = true}, "");
  return parse_tagged(ctx, pos, kMistralNamed);
}
SectionResult parse_deepseek_v31(Ctx& ctx, size_t pos) {
  return parse_tagged(ctx, pos, kDeepSeekV31);
}
SectionResult parse_deepseek_r1(Ctx& ctx, size_t pos) {
  return parse_tagged(ctx, pos, kDeepSeekR1);
}
SectionResult parse_kimi(Ctx& ctx, size_t pos) { return parse_tagged(ctx, pos, kKimi); }
SectionResult parse_functionary(Ctx& ctx, size_t pos) {
  return parse_tagged(ctx, pos, kFunctionary);
}

}  // namespace

void parse_tagged_family(Ctx& ctx, size_t pos) {
  std::vector<Section> sections;
  if (ctx.opt.parse_tool_calls) {
    switch (ctx.opt.format) {
      case ChatFormat::kMistral:
      case ChatFormat::kMistralNemo:
        sections.push_back({{"[TOOL_CALLS]"}, parse_mistral});
        break;
      case ChatFormat::kDeepSeekV31:
        sections.push_back({{kDsCallsBegin, kDsCallBegin}, parse_deepseek_v31});
        break;
      case ChatFormat::kDeepSeekR1:
        sections.push_back({{kDsCallsBegin, kDsCallBegin}, parse_deepseek_r1});
        break;
      case ChatFormat::kKimiK2:
        sections.push_back({{kKimi.section_open, kKimi.call_open}, parse_kimi});
        break;
      case ChatFormat::kFunctionaryV31:
        sections.push_back({{"<function="}, parse_functionary});
        sections.push_back({{"<|python_tag|>"}, parse_python_tag});
        break;
      default:
        break;
    }
  }
  scan_sections(ctx, pos, sections);
}

}  // namespace mnemo::chat_parse
