// The small-model fallback (chat_parse.h): a whole answer that is one JSON call object of a
// declared tool, its arguments matching the tool's schema, becomes that call.
#include <algorithm>

#include "chat_parse/engine.h"
#include "mnemo/grammar.h"
#include "mnemo/json_schema.h"

namespace mnemo::chat_parse {
namespace {

using Json = nlohmann::ordered_json;

// `v` with the keys of each object put in its schema's "properties" order (the order the
// schema's grammar wants); keys the schema does not name stay after, in their order.
Json schema_order(const Json& v, const Json& schema) {
  if (!schema.is_object()) return v;
  if (v.is_object()) {
    auto props = schema.find("properties");
    if (props == schema.end() || !props->is_object()) return v;
    Json out = Json::object();
    for (const auto& [key, sub] : props->items()) {
      if (auto it = v.find(key); it != v.end()) out[key] = schema_order(*it, sub);
    }
    for (const auto& [key, value] : v.items()) {
      if (!out.contains(key)) out[key] = value;
    }
    return out;
  }
  if (v.is_array()) {
    auto items = schema.find("items");
    if (items == schema.end()) return v;
    Json out = Json::array();
    for (const Json& x : v) out.push_back(schema_order(x, *items));
    return out;
  }
  return v;
}

// The arguments (a JSON text) match the schema: the schema's grammar accepts their compact text.
bool args_match(std::string_view args, const Json& schema) {
  if (schema.is_null()) return false;
  const Json v = Json::parse(args, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_object()) return false;
  auto gbnf = grammar::json_schema_to_gbnf(schema.dump());
  if (!gbnf.ok()) return false;  // a schema the converter refuses: no fallback for the tool
  auto g = grammar::Grammar::parse(*gbnf);
  if (!g.ok()) return false;
  grammar::Matcher m(*g);
  const std::string text =
      schema_order(v, schema).dump(-1, ' ', false, Json::error_handler_t::replace);
  return m.accept_text(text) && m.can_end();
}

enum class Verdict : unsigned char { kCall, kHold, kContent };

// Whether `c` (the trimmed content) is, or may still become, a whole call object.
Verdict judge(const ParseOptions& opt, std::string_view c, ToolCall* call) {
  const bool partial = opt.is_partial;
  auto prefix_of = [](std::string_view s, std::string_view of) {
    return s.size() < of.size() && of.starts_with(s);
  };
  size_t p = 0;
  const bool fenced = c.starts_with("```");
  if (fenced) {
    p = 3;
    if (c.substr(p).starts_with("json")) {
      p += 4;
    } else if (partial && p < c.size() && prefix_of(c.substr(p), "json")) {
      return Verdict::kHold;
    }
  } else if (partial && !c.empty() && prefix_of(c, "```")) {
    return Verdict::kHold;
  }
  p = skip_ws(c, p);
  if (p >= c.size()) return partial && fenced ? Verdict::kHold : Verdict::kContent;
  if (c[p] != '{') return Verdict::kContent;
  // Qwen 2.5's template shows the call as {{"name": ..., "arguments": ...}} (the doubled braces
  // are in its rendered text) and small models copy it: one more pair of braces around the call.
  bool doubled = false;
  if (const size_t q = skip_ws(c, p + 1); q < c.size() && c[q] == '{') {
    doubled = true;
    p = q;
  }
  const ObjectScan os = scan_object(c, p);
  if (os.status == Scan::kInvalid) return Verdict::kContent;
  for (const JsonMember& m : os.members) {
    if (m.key != "name" && m.key != "arguments" && m.key != "parameters") return Verdict::kContent;
  }
  const JsonMember* name = os.find("name");
  if (name != nullptr && name->value.status == Scan::kComplete) {
    if (c[name->value_pos] != '"') return Verdict::kContent;
    bool closed = false;
    call->name = decode_string(c, name->value_pos, name->value.end, &closed);
    const bool declared = std::any_of(opt.tools.begin(), opt.tools.end(),
                                      [&](const ToolSpec& t) { return t.name == call->name; });
    if (!declared) return Verdict::kContent;
  }
  if (os.status == Scan::kIncomplete) return partial ? Verdict::kHold : Verdict::kContent;
  size_t after = skip_ws(c, os.end);
  if (doubled) {
    if (after < c.size() && c[after] == '}') {
      after = skip_ws(c, after + 1);
    } else {
      return partial && after == c.size() ? Verdict::kHold : Verdict::kContent;
    }
  }
  if (fenced && c.substr(after).starts_with("```")) {
    after = skip_ws(c, after + 3);
  } else if (fenced && partial && after < c.size() && prefix_of(c.substr(after), "```")) {
    return Verdict::kHold;
  }
  if (after != c.size() || name == nullptr) return Verdict::kContent;
  const JsonMember* args = os.find("arguments");
  if (args == nullptr) args = os.find("parameters");
  if (args == nullptr) return Verdict::kContent;
  std::string text(c.substr(args->value_pos, args->value.end - args->value_pos));
  if (c[args->value_pos] == '"') {  // stringified arguments
    bool closed = false;
    text = decode_string(c, args->value_pos, args->value.end, &closed);
  }
  const Json* schema = nullptr;
  for (const ToolSpec& t : opt.tools) {
    if (t.name == call->name) schema = &t.parameters;
  }
  if (schema == nullptr || !args_match(text, *schema)) return Verdict::kContent;
  call->arguments = std::move(text);
  // Whole, but a partial text may still go on: held until the output ends.
  return partial ? Verdict::kHold : Verdict::kCall;
}

}  // namespace

void apply_bare_json_fallback(const ParseOptions& opt, ChatMsg* msg) {
  if (opt.tools.empty() || !msg->tool_calls.empty()) return;
  ToolCall call;
  switch (judge(opt, msg->content, &call)) {
    case Verdict::kCall:
      msg->content.clear();
      msg->tool_calls.push_back(std::move(call));
      break;
    case Verdict::kHold:
      msg->content.clear();
      break;
    case Verdict::kContent:
      break;
  }
}

}  // namespace mnemo::chat_parse
