// Formats that write each argument as tagged text: Qwen3-Coder (<function=N><parameter=K>V
// </parameter></function> in <tool_call>), Seed-OSS (the same in <seed:tool_call>), MiniMax M2
// (<invoke name="N"><parameter name="K">V</parameter></invoke>) and GLM 4.5
// (<tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>). The arguments JSON is
// built as the values come: {"k":"text so far, then "}" when the call ends.
#include "chat_parse/engine.h"

namespace mnemo::chat_parse {
namespace {

using Json = nlohmann::ordered_json;

struct XmlSpec {
  std::string_view block_open, block_close;
  bool bare_function_opens;  // the function tag alone starts a call (Qwen3-Coder)
  bool many_per_block;       // several functions in one block (MiniMax)
  std::string_view fn_open, fn_name_end, fn_close;
  std::string_view param_open, param_name_end, param_close;
  bool strip_newline;  // one newline either side of a value is markup
};

constexpr XmlSpec kQwen3Coder{
    "<tool_call>", "</tool_call>", true, false,          "<function=", ">",
    "</function>", "<parameter=",  ">",  "</parameter>", true};
constexpr XmlSpec kSeedOss{
    "<seed:tool_call>", "</seed:tool_call>", false, false,          "<function=", ">",
    "</function>",      "<parameter=",       ">",   "</parameter>", true};
constexpr XmlSpec kMiniMax{"<minimax:tool_call>",
                           "</minimax:tool_call>",
                           false,
                           true,
                           "<invoke name=\"",
                           "\">",
                           "</invoke>",
                           "<parameter name=\"",
                           "\">",
                           "</parameter>",
                           false};

// Builds a call's arguments object value by value.
class ArgBuilder {
 public:
  explicit ArgBuilder(const Json* schema) : schema_(schema) {}

  /// A whole value: the raw text for string parameters, else its JSON (a string when the text
  /// is not JSON).
  void add_whole(std::string_view key, std::string_view raw) {
    key_(key);
    if (is_string(key)) {
      out_ += "\"" + json_escape(raw) + "\"";
      return;
    }
    Json v = Json::parse(trim_view(raw), nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) {
      out_ += "\"" + json_escape(raw) + "\"";
    } else {
      out_ += v.dump(-1, ' ', false, Json::error_handler_t::replace);
    }
  }
  /// The arguments with a value still being written: a string parameter shows its text so far,
  /// any other is left out until whole (its type is known only then).
  std::string with_partial(std::string_view key, std::string_view raw) const {
    if (!is_string(key)) return out_;
    return out_ + (first_ ? "" : ",") + "\"" + json_escape(key) + "\":\"" + json_escape(raw);
  }
  const std::string& open() const { return out_; }
  std::string closed() const { return out_ + "}"; }

 private:
  void key_(std::string_view key) {
    if (!first_) out_ += ",";
    first_ = false;
    out_ += "\"" + json_escape(key) + "\":";
  }
  bool is_string(std::string_view key) const {
    if (schema_ == nullptr || !schema_->is_object()) return false;
    auto props = schema_->find("properties");
    if (props == schema_->end() || !props->is_object()) return false;
    auto p = props->find(std::string(key));
    return p != props->end() && string_schema(*p);
  }

  const Json* schema_;
  std::string out_ = "{";
  bool first_ = true;
};

// A function name ending at the first of `ends` (*name_end: where that end starts); kIncomplete
// while it may still be being written.
Outcome read_name(const Ctx& ctx, size_t pos, std::span<const std::string_view> ends,
                  std::string* name, size_t* name_end) {
  size_t e = std::string_view::npos;
  for (std::string_view t : ends) e = std::min(e, ctx.text.find(t, pos));
  if (e == std::string_view::npos) {
    std::string_view raw = ctx.text.substr(pos);
    for (std::string_view t : ends) raw = drop_partial(raw, t);
    raw = trim_view(raw);
    return raw.size() <= 256 && (raw.empty() || is_name(raw)) ? Outcome::kIncomplete
                                                              : Outcome::kInvalid;
  }
  *name = std::string(trim_view(ctx.text.substr(pos, e - pos)));
  *name_end = e;
  return is_name(*name) ? Outcome::kDone : Outcome::kInvalid;
}

// The end of a call's arguments at `r` when no more values come: kDone (closer found, or left
// out at the end of a final text) or kIncomplete; kInvalid when something else follows.
Outcome end_of_values(const Ctx& ctx, size_t r, std::string_view value_open,
                      std::string_view fn_close, size_t* end) {
  if (ctx.starts_with(r, fn_close)) {
    *end = r + fn_close.size();
    return Outcome::kDone;
  }
  if (r >= ctx.size() || ctx.prefix_of(r, value_open) || ctx.prefix_of(r, fn_close)) {
    *end = ctx.size();
    return ctx.partial() ? Outcome::kIncomplete : Outcome::kDone;
  }
  return Outcome::kInvalid;
}

// One function at text[pos] (at spec.fn_open): adds the call (once named) to *calls.
Outcome parse_xml_call(Ctx& ctx, size_t pos, const XmlSpec& spec, std::vector<ToolCall>* calls,
                       size_t* end) {
  ToolCall call;
  size_t p = 0;
  const std::string_view name_ends[] = {spec.fn_name_end};
  const Outcome named = read_name(ctx, pos + spec.fn_open.size(), name_ends, &call.name, &p);
  if (named != Outcome::kDone) return named;
  p += spec.fn_name_end.size();
  ArgBuilder args(ctx.tool_schema(call.name));
  auto emit = [&](std::string arguments, Outcome o) {
    call.arguments = std::move(arguments);
    calls->push_back(std::move(call));
    return o;
  };
  while (true) {
    const size_t r = skip_ws(ctx.text, p);
    if (!ctx.starts_with(r, spec.param_open)) {
      const Outcome o = end_of_values(ctx, r, spec.param_open, spec.fn_close, end);
      if (o == Outcome::kInvalid) return o;
      return emit(o == Outcome::kDone ? args.closed() : args.open(), o);
    }
    const size_t k = r + spec.param_open.size();
    const size_t ke = ctx.text.find(spec.param_name_end, k);
    if (ke == std::string_view::npos) return emit(args.open(), Outcome::kIncomplete);
    const std::string_view key = ctx.text.substr(k, ke - k);
    if (key.empty() || key.find_first_of("<>\n") != std::string_view::npos)
      return Outcome::kInvalid;
    size_t v = ke + spec.param_name_end.size();
    if (spec.strip_newline && ctx.starts_with(v, "\n")) ++v;
    const size_t ve = ctx.text.find(spec.param_close, std::min(v, ctx.size()));
    if (ve == std::string_view::npos) {
      std::string_view raw =
          drop_partial(ctx.text.substr(std::min(v, ctx.size())), spec.param_close);
      if (spec.strip_newline && raw.ends_with("\n")) raw.remove_suffix(1);
      return emit(args.with_partial(key, raw), Outcome::kIncomplete);
    }
    std::string_view raw = ctx.text.substr(v, ve - v);
    if (spec.strip_newline && raw.ends_with("\n")) raw.remove_suffix(1);
    args.add_whole(key, raw);
    p = ve + spec.param_close.size();
  }
}

SectionResult parse_xml(Ctx& ctx, size_t pos, const XmlSpec& spec) {
  SectionResult r;
  size_t p = pos;
  if (ctx.starts_with(pos, spec.block_open)) {
    p = skip_ws(ctx.text, pos + spec.block_open.size());
    // A model of the family that writes Hermes' JSON in the block instead: taken too.
    if (p < ctx.size() && (ctx.text[p] == '{' || ctx.text[p] == '[')) {
      return parse_json_calls(ctx, p, {.id = ""}, spec.block_close);
    }
  }
  while (true) {
    const size_t q = skip_ws(ctx.text, p);
    if (ctx.starts_with(q, spec.fn_open)) {
      size_t end = q;
      const Outcome o = parse_xml_call(ctx, q, spec, &r.calls, &end);
      if (o != Outcome::kDone) return {o, q, std::move(r.calls)};
      p = end;
      if (spec.many_per_block) continue;
      break;
    }
    if (q >= ctx.size() || ctx.prefix_of(q, spec.fn_open)) {
      if (ctx.partial() || r.calls.empty()) return {Outcome::kIncomplete, q, std::move(r.calls)};
    }
    break;
  }
  if (r.calls.empty()) return {Outcome::kInvalid, p, {}};
  return close_section(ctx, p, spec.block_close, std::move(r.calls));
}

SectionResult parse_qwen3_coder(Ctx& ctx, size_t pos) { return parse_xml(ctx, pos, kQwen3Coder); }
SectionResult parse_seed_oss(Ctx& ctx, size_t pos) { return parse_xml(ctx, pos, kSeedOss); }
SectionResult parse_minimax(Ctx& ctx, size_t pos) { return parse_xml(ctx, pos, kMiniMax); }

// GLM: <tool_call>NAME (then a newline, or the first <arg_key>, or </tool_call>).
SectionResult parse_glm(Ctx& ctx, size_t pos) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  constexpr std::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>";
  constexpr std::string_view kValue = "<arg_value>", kValueEnd = "</arg_value>";
  ToolCall call;
  size_t p = 0;
  const std::string_view name_ends[] = {"\n", kKey, kClose};
  const Outcome named = read_name(ctx, pos + kOpen.size(), name_ends, &call.name, &p);
  if (named != Outcome::kDone) return {named, pos, {}};
  ArgBuilder args(ctx.tool_schema(call.name));
  auto emit = [&](std::string arguments, Outcome o, size_t end) {
    call.arguments = std::move(arguments);
    SectionResult r{o, end, {}};
    r.calls.push_back(std::move(call));
    return r;
  };
  while (true) {
    const size_t r = skip_ws(ctx.text, p);
    if (!ctx.starts_with(r, kKey)) {
      size_t end = r;
      const Outcome o = end_of_values(ctx, r, kKey, kClose, &end);
      if (o == Outcome::kInvalid) return {o, pos, {}};
      return emit(o == Outcome::kDone ? args.closed() : args.open(), o, end);
    }
    const size_t k = r + kKey.size();
    const size_t ke = ctx.text.find(kKeyEnd, k);
    if (ke == std::string_view::npos) return emit(args.open(), Outcome::kIncomplete, ctx.size());
    const std::string_view key = trim_view(ctx.text.substr(k, ke - k));
    if (key.empty() || key.find_first_of("<>") != std::string_view::npos)
      return {Outcome::kInvalid, pos, {}};
    const size_t v0 = skip_ws(ctx.text, ke + kKeyEnd.size());
    if (!ctx.starts_with(v0, kValue)) {
      if (v0 >= ctx.size() || ctx.prefix_of(v0, kValue)) {
        return emit(args.open(), Outcome::kIncomplete, ctx.size());
      }
      return {Outcome::kInvalid, pos, {}};
    }
    const size_t v = v0 + kValue.size();
    const size_t ve = ctx.text.find(kValueEnd, v);
    if (ve == std::string_view::npos) {
      const std::string_view raw = drop_partial(ctx.text.substr(v), kValueEnd);
      return emit(args.with_partial(key, raw), Outcome::kIncomplete, ctx.size());
    }
    args.add_whole(key, ctx.text.substr(v, ve - v));
    p = ve + kValueEnd.size();
  }
}

}  // namespace

void parse_xml_family(Ctx& ctx, size_t pos) {
  std::vector<Section> sections;
  if (ctx.opt.parse_tool_calls) {
    switch (ctx.opt.format) {
      case ChatFormat::kQwen3Coder:
        sections.push_back({{kQwen3Coder.block_open, kQwen3Coder.fn_open}, parse_qwen3_coder});
        break;
      case ChatFormat::kSeedOss:
        sections.push_back({{kSeedOss.block_open}, parse_seed_oss});
        break;
      case ChatFormat::kMiniMaxM2:
        sections.push_back({{kMiniMax.block_open}, parse_minimax});
        break;
      case ChatFormat::kGlm45:
        sections.push_back({{"<tool_call>"}, parse_glm});
        break;
      default:
        break;
    }
  }
  scan_sections(ctx, pos, sections);
}

}  // namespace mnemo::chat_parse
