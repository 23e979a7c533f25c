// Llama 3.x: the answer is one JSON call {"name": N, "parameters": {...}} (or several separated by
// ';'), and <|python_tag|> starts a built-in tool call NAME.call(key=JSON, ...) or code for the
// code interpreter (also Functionary v3.1's).
#include "chat_parse/engine.h"

namespace mnemo::chat_parse {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Where text[pos..] stands against "IDENT . call (" (spaces allowed around the dot and paren).
enum class Builtin : unsigned char { kYes, kMaybe, kNo };
Builtin match_builtin(const Ctx& ctx, size_t pos, std::string* name, size_t* after) {
  size_t i = pos;
  while (i < ctx.size() && ident_char(ctx.text[i])) ++i;
  if (i >= ctx.size()) return Builtin::kMaybe;
  if (i == pos) return Builtin::kNo;
  *name = std::string(ctx.text.substr(pos, i - pos));
  auto spaces = [&](size_t j) {
    while (j < ctx.size() && ctx.text[j] == ' ') ++j;
    return j;
  };
  for (std::string_view piece : {".", "call", "("}) {
    i = spaces(i);
    if (ctx.starts_with(i, piece)) {
      i += piece.size();
    } else {
      return i >= ctx.size() || ctx.prefix_of(i, piece) ? Builtin::kMaybe : Builtin::kNo;
    }
  }
  *after = i;
  return Builtin::kYes;
}

// The keyword arguments of NAME.call( ... ) from `pos` into a JSON object.
SectionResult parse_builtin_args(Ctx& ctx, size_t pos, ToolCall call) {
  std::string args = "{";
  size_t p = pos;
  auto stop = [&](Outcome o) {
    call.arguments = args;
    SectionResult r{o, p, {}};
    if (o != Outcome::kInvalid) r.calls.push_back(std::move(call));
    return r;
  };
  while (true) {
    p = skip_ws(ctx.text, p);
    if (p >= ctx.size()) return stop(Outcome::kIncomplete);
    if (ctx.text[p] == ')') {
      args += "}";
      ++p;
      return stop(Outcome::kDone);
    }
    if (args.size() > 1) {
      if (ctx.text[p] != ',') return stop(Outcome::kInvalid);
      p = skip_ws(ctx.text, p + 1);
    }
    size_t k = p;
    while (k < ctx.size() && ident_char(ctx.text[k])) ++k;
    const size_t eq = skip_ws(ctx.text, k);
    if (eq >= ctx.size()) return stop(Outcome::kIncomplete);
    if (k == p || ctx.text[eq] != '=') return stop(Outcome::kInvalid);
    const size_t v = skip_ws(ctx.text, eq + 1);
    const ScanEnd value = scan_value(ctx.text, v);
    if (value.status == Scan::kInvalid) return stop(Outcome::kInvalid);
    if (args.size() > 1) args += ",";
    args += "\"" + json_escape(ctx.text.substr(p, k - p)) + "\":";
    args += ctx.text.substr(v, value.end - v);
    p = value.end;
    if (value.status == Scan::kIncomplete) return stop(Outcome::kIncomplete);
  }
}

// The code interpreter's tool name: "python", or "ipython" when only that one is declared.
std::string code_tool(const Ctx& ctx) {
  if (ctx.tool_schema("python") == nullptr && ctx.tool_schema("ipython") != nullptr) {
    return "ipython";
  }
  return "python";
}

// Whether the object at text[pos] is a Llama 3 call: kYes (whole), kMaybe (unfinished and still
// shaped like one: its first key "name" or "type"), kNo.
Builtin llama_shape(const Ctx& ctx, size_t pos) {
  const ObjectScan os = scan_object(ctx.text, pos);
  if (os.status == Scan::kInvalid) return Builtin::kNo;
  if (os.members.empty()) return os.status == Scan::kIncomplete ? Builtin::kMaybe : Builtin::kNo;
  const std::string& first = os.members[0].key;
  if (first != "name" && first != "type") return Builtin::kNo;
  if (const JsonMember* t = os.find("type"); t && t->value.status == Scan::kComplete) {
    const std::string_view v = ctx.text.substr(t->value_pos, t->value.end - t->value_pos);
    if (v != "\"function\"") return Builtin::kNo;
  }
  if (os.status == Scan::kIncomplete) return Builtin::kMaybe;
  const JsonMember* args = os.find("parameters");
  if (args == nullptr) args = os.find("arguments");
  const JsonMember* name = os.find("name");
  if (name == nullptr || ctx.text[name->value_pos] != '"') return Builtin::kNo;
  if (args == nullptr || ctx.text[args->value_pos] != '{') return Builtin::kNo;
  return Builtin::kYes;
}

}  // namespace

SectionResult parse_python_tag(Ctx& ctx, size_t pos) {
  const size_t p = skip_ws(ctx.text, pos + kPythonTag.size());
  std::string name;
  size_t after = p;
  const Builtin b = match_builtin(ctx, p, &name, &after);
  if (b == Builtin::kMaybe && ctx.partial()) return {Outcome::kIncomplete, ctx.size(), {}};
  if (b == Builtin::kYes) {
    ToolCall call;
    call.name = std::move(name);
    return parse_builtin_args(ctx, after, std::move(call));
  }
  // Code to the end of the message (<|eom_id|> / <|eot_id|> when the text keeps them).
  size_t end = std::min(ctx.text.find("<|eom_id|>", p), ctx.text.find("<|eot_id|>", p));
  std::string_view code;
  if (end == std::string_view::npos) {
    code = ctx.text.substr(p);
    if (ctx.partial()) code = drop_partial(drop_partial(code, "<|eom_id|>"), "<|eot_id|>");
    end = ctx.size();
  } else {
    code = ctx.text.substr(p, end - p);
    end += std::string_view("<|eom_id|>").size();
  }
  ToolCall call;
  call.name = code_tool(ctx);
  call.arguments = "{\"code\":\"" + json_escape(code);
  const bool whole = end < ctx.size() || !ctx.partial();
  if (whole) call.arguments += "\"}";
  SectionResult r{whole ? Outcome::kDone : Outcome::kIncomplete, end, {}};
  r.calls.push_back(std::move(call));
  return r;
}

void parse_llama3(Ctx& ctx, size_t pos) {
  std::vector<Section> sections;
  if (ctx.opt.parse_tool_calls) sections.push_back({{kPythonTag}, parse_python_tag});
  size_t p = skip_ws(ctx.text, pos);
  size_t rest = pos;  // where content scanning resumes
  constexpr CallKeys kKeys{.args = "parameters", .args_alt = "arguments", .id = ""};
  while (ctx.opt.parse_tool_calls && p < ctx.size() && ctx.text[p] == '{') {
    const Builtin shape = llama_shape(ctx, p);
    if (shape == Builtin::kNo) break;
    if (shape == Builtin::kMaybe) {
      if (!ctx.partial()) break;  // unfinished at the end: content
      CallParse cp = parse_call_object(ctx, p, kKeys);
      if (cp.call) ctx.calls.push_back(std::move(*cp.call));
      return;  // hold the rest back
    }
    CallParse cp = parse_call_object(ctx, p, kKeys);
    ctx.calls.push_back(std::move(*cp.call));
    p = skip_ws(ctx.text, cp.end);
    if (p < ctx.size() && ctx.text[p] == ';') p = skip_ws(ctx.text, p + 1);
    rest = p;
  }
  scan_sections(ctx, rest, sections);
}

}  // namespace mnemo::chat_parse
