// Tool calls and reasoning for the chat surfaces (chat_output.h).
#include "server/chat_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <utility>

#include "mnemo/grammar.h"
#include "mnemo/json_schema.h"
#include "mnemo/log.h"

namespace mnemo::server {
namespace {

using chat_parse::ChatMsg;
using chat_parse::ReasoningFormat;
using chat_parse::ToolChoice;
using chat_parse::ToolSpec;

// A schema json_schema_to_gbnf refuses for a keyword it cannot hold exactly (a schema that is
// fine JSON Schema), rather than for being malformed.
bool unsupported_keyword(const Status& st) {
  const std::string& m = st.message();
  return m.find("is not supported") != std::string::npos ||
         m.find("is supported ") != std::string::npos;
}

// One entry of "tools": {"type": "function", "function": {"name", "description",
// "parameters"}}. A tool without parameters takes none ({"type": "object"}).
Status parse_tool(const Json& t, size_t i, ToolSpec* out) {
  const std::string where = fmt::format("tools[{}]", i);
  if (!t.is_object()) return Status::invalid_argument(where + " must be an object");
  if (auto type = t.find("type"); type != t.end() && !(type->is_string() && *type == "function")) {
    return Status::invalid_argument(where + ".type must be \"function\" (the only tool type)");
  }
  auto fn = t.find("function");
  if (fn == t.end() || !fn->is_object()) {
    return Status::invalid_argument(where + ".function must be an object");
  }
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty() ||
      name->get_ref<const std::string&>().size() > 256) {
    return Status::invalid_argument(where + ".function.name must be a non-empty string");
  }
  out->name = name->get<std::string>();
  auto params = fn->find("parameters");
  if (params == fn->end() || params->is_null()) {
    out->parameters = Json{{"type", "object"}, {"properties", Json::object()}};
    return Status();
  }
  if (!params->is_object()) {
    return Status::invalid_argument(where + ".function.parameters must be a JSON Schema object");
  }
  // A malformed schema is the request's error; a keyword the grammar cannot hold is not (the
  // tool works, unconstrained).
  if (auto g = grammar::json_schema_to_gbnf(params->dump());
      !g.ok() && !unsupported_keyword(g.status())) {
    return Status::invalid_argument(where + ".function.parameters: " + g.status().message());
  }
  out->parameters = *params;
  return Status();
}

Status parse_tools(const Json& b, std::vector<ToolSpec>* out) {
  auto it = b.find("tools");
  if (it == b.end() || it->is_null()) return Status();
  if (!it->is_array()) return Status::invalid_argument("'tools' must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    ToolSpec t;
    MNEMO_RETURN_IF_ERROR(parse_tool((*it)[i], i, &t));
    for (const ToolSpec& o : *out) {
      if (o.name == t.name) {
        return Status::invalid_argument(
            fmt::format("tools[{}]: a tool named '{}' is declared twice", i, t.name));
      }
    }
    out->push_back(std::move(t));
  }
  return Status();
}

// "tool_choice": "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
// (also {"type": "function", "name"}). *none for "none".
Status parse_tool_choice(const Json& b, const std::vector<ToolSpec>& tools, ToolChoice* out,
                         bool* none) {
  *none = false;
  auto it = b.find("tool_choice");
  if (it == b.end() || it->is_null()) return Status();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    if (s == "none") {
      *none = true;
    } else if (s == "required") {
      out->kind = ToolChoice::Kind::kRequired;
    } else if (s != "auto") {
      return Status::invalid_argument(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
          "\"function\": {\"name\": ...}}");
    }
  } else {
    const Json* name = nullptr;
    if (it->is_object() && it->contains("function") && (*it)["function"].is_object()) {
      name = (*it)["function"].contains("name") ? &(*it)["function"]["name"] : nullptr;
    } else if (it->is_object() && it->contains("name")) {
      name = &(*it)["name"];
    }
    if (name == nullptr || !name->is_string()) {
      return Status::invalid_argument(
          "'tool_choice' must name a function: {\"type\": "
          "\"function\", \"function\": {\"name\": ...}}");
    }
    out->kind = ToolChoice::Kind::kNamed;
    out->name = name->get<std::string>();
    const bool declared = std::any_of(tools.begin(), tools.end(),
                                      [&](const ToolSpec& t) { return t.name == out->name; });
    if (!declared) {
      return Status::invalid_argument(fmt::format(
          "'tool_choice' names '{}', which is not one of the request's tools", out->name));
    }
  }
  if (out->kind != ToolChoice::Kind::kAuto && !*none && tools.empty()) {
    return Status::invalid_argument("'tool_choice' asks for a tool call but 'tools' is empty");
  }
  return Status();
}

Status parse_reasoning_format(const Json& b, ReasoningFormat* out) {
  auto it = b.find("reasoning_format");
  if (it == b.end() || it->is_null()) return Status();
  const std::string s = it->is_string() ? it->get<std::string>() : "";
  if (s == "none") {
    *out = ReasoningFormat::kNone;
  } else if (s == "deepseek" || s == "deepseek-legacy") {
    *out = ReasoningFormat::kDeepSeek;
  } else if (s == "auto") {
    *out = ReasoningFormat::kAuto;
  } else {
    return Status::invalid_argument(
        "'reasoning_format' must be \"none\", \"deepseek\" or \"auto\"");
  }
  return Status();
}

// The grammar of the request's tool calls: from the first token when a call is forced, else
// lazily from the format's opener. A forced call whose schema the grammar cannot hold is the
// request's error (naming the keyword); without force the calls are only parsed then.
Status set_tool_grammar(const std::vector<ToolSpec>& tools, const ToolChoice& choice, bool parallel,
                        const ApiDefaults& d, CompletionRequest* q) {
  if (q->grammar) {
    return Status::invalid_argument(
        "'tools' cannot be combined with 'grammar', 'json_schema' or 'response_format'");
  }
  auto g = chat_parse::tool_call_grammar(d.chat.format, tools, choice, parallel);
  const bool forced = choice.kind != ToolChoice::Kind::kAuto;
  if (!g.ok()) {
    if (forced) return Status::invalid_argument("'tool_choice': " + g.status().message());
    MNEMO_LOG(kDebug) << "tool calls not constrained: " << g.status().message();
    return Status();
  }
  if (!forced && (!g->lazy || g->triggers.empty())) return Status();  // e.g. the generic format
  auto parsed = grammar::Grammar::parse(g->gbnf);
  if (!parsed.ok()) {
    MNEMO_LOG(kError) << "tool-call grammar does not parse: " << parsed.status().message();
    if (forced) return Status::internal("the tool-call grammar does not parse");
    return Status();
  }
  q->grammar = std::move(parsed).value();
  if (!forced) q->grammar_triggers = g->triggers;
  return Status();
}

std::string new_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:012x}{:012x}", rng() & 0xffffffffffffull, rng() & 0xffffffffffffull);
}

}  // namespace

ChatDefaults chat_defaults(std::string_view template_source, const Tokenizer& tok,
                           ReasoningFormat reasoning, int32_t reasoning_budget) {
  ChatDefaults c;
  c.format = chat_parse::detect_chat_format(template_source);
  c.reasoning = reasoning;
  c.reasoning_budget = reasoning_budget;
  c.markers = chat_parse::format_markers(c.format);
  if (!c.markers.think_close.empty()) {
    c.think_close_tokens =
        tok.tokenize(c.markers.think_close, /*add_special=*/false, /*parse_special=*/true);
  }
  for (const std::string& m : c.markers.markup) {
    const std::vector<TokenId> ids = tok.tokenize(m, /*add_special=*/false, /*parse_special=*/true);
    if (ids.size() == 1 && tok.is_control(ids[0]) &&
        std::find(c.preserved_tokens.begin(), c.preserved_tokens.end(), ids[0]) ==
            c.preserved_tokens.end()) {
      c.preserved_tokens.push_back(ids[0]);
    }
  }
  return c;
}

Status parse_chat_output(const Json& b, std::string_view prompt_text, const ApiDefaults& d,
                         ParsedCompletion* p) {
  chat_parse::ParseOptions& o = p->chat.opt;
  CompletionRequest& q = p->req;
  o.format = d.chat.format;
  o.reasoning = d.chat.reasoning;
  MNEMO_RETURN_IF_ERROR(parse_reasoning_format(b, &o.reasoning));
  int64_t budget = d.chat.reasoning_budget;
  MNEMO_RETURN_IF_ERROR(get_int(b, "reasoning_budget_tokens", -1, INT32_MAX, &budget));
  std::vector<ToolSpec> tools;
  MNEMO_RETURN_IF_ERROR(parse_tools(b, &tools));
  ToolChoice choice;
  bool none = false;
  MNEMO_RETURN_IF_ERROR(parse_tool_choice(b, tools, &choice, &none));
  // As llama-server: several calls by default where the template has a tool-call format of its
  // own (it can show several), one call for the generic JSON answer.
  bool parallel = d.chat.format != chat_parse::ChatFormat::kGeneric &&
                  d.chat.format != chat_parse::ChatFormat::kGenericThink;
  MNEMO_RETURN_IF_ERROR(get_bool(b, "parallel_tool_calls", &parallel));

  const bool use_tools = !tools.empty() && !none;
  const bool thinks = !d.chat.markers.think_open.empty();
  o.thinking_forced_open = chat_parse::prompt_opens_thinking(o.format, prompt_text);
  o.parse_tool_calls = use_tools;
  o.parallel_tool_calls = parallel;
  o.bare_json_calls = use_tools && choice.kind == ToolChoice::Kind::kAuto;
  o.tools = tools;
  p->chat.parse = use_tools || thinks || o.format == chat_parse::ChatFormat::kGptOss;
  if (!p->chat.parse) return Status();
  q.preserved_tokens = d.chat.preserved_tokens;
  if (thinks && budget >= 0) {
    q.reasoning.budget = static_cast<int32_t>(budget);
    q.reasoning.open = o.thinking_forced_open;
    q.reasoning.start = d.chat.markers.think_open;
    q.reasoning.end = d.chat.markers.think_close;
    q.reasoning.end_tokens = d.chat.think_close_tokens;
  }
  if (use_tools) MNEMO_RETURN_IF_ERROR(set_tool_grammar(tools, choice, parallel, d, &q));
  return Status();
}

namespace {

// The ids of msg's calls: kept from what a stream sent, else the format's, else new ones.
void assign_ids(const ChatMsg& msg, std::vector<std::string>* ids) {
  for (size_t i = ids->size(); i < msg.tool_calls.size(); ++i) {
    ids->push_back(msg.tool_calls[i].id.empty() ? new_call_id() : msg.tool_calls[i].id);
  }
}

}  // namespace

ChatMsg final_chat_message(const ParsedCompletion& p, const CompletionResult& r,
                           std::vector<std::string>* ids) {
  ChatMsg msg;
  if (!p.chat.parse) {
    msg.content = r.text;
    return msg;
  }
  chat_parse::ParseOptions o = p.chat.opt;
  o.is_partial = false;
  msg = chat_parse::parse_chat_output(r.text, o);
  assign_ids(msg, ids);
  return msg;
}

chat_parse::ChatMsgDiff next_chat_delta(const ParsedCompletion& p, CompletionResult& r, bool done) {
  chat_parse::ChatMsgDiff diff;
  ChatStreamState& st = r.chat;
  if (!p.chat.parse) {  // the text is the content
    diff.content = r.text.substr(std::min(r.text.size(), st.sent.content.size()));
    st.sent.content = r.text;
    return diff;
  }
  if (st.broken) return diff;
  chat_parse::ParseOptions o = p.chat.opt;
  o.is_partial = !done;
  ChatMsg now = chat_parse::parse_chat_output(r.text, o);
  auto d = chat_parse::diff_chat_msg(st.sent, now);
  if (!d.ok()) {
    MNEMO_LOG(kWarn) << "chat stream: " << d.status().message() << "; no more deltas";
    st.broken = true;
    return diff;
  }
  diff = std::move(d).value();
  assign_ids(now, &st.call_ids);
  for (chat_parse::ToolCallDelta& c : diff.tool_calls) {
    if (!c.name.empty() && c.id.empty()) c.id = st.call_ids[c.index];
  }
  st.sent = std::move(now);
  return diff;
}

Json tool_calls_json(const ChatMsg& msg, const std::vector<std::string>& ids) {
  Json out = Json::array();
  for (size_t i = 0; i < msg.tool_calls.size(); ++i) {
    const chat_parse::ToolCall& c = msg.tool_calls[i];
    out.push_back({{"id", i < ids.size() ? ids[i] : c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

}  // namespace mnemo::server
