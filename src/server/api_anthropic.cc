// Anthropic's Messages API (docs/api.md, "POST /v1/messages"): POST /v1/messages and the body
// of POST /v1/messages/count_tokens. A request is translated into an OpenAI chat-completions
// body (system, messages with their text, tool_use, tool_result and thinking blocks, tools,
// tool_choice, stop_sequences, thinking) and parsed by the steps OpenAI chat takes (request.h,
// chat_output.h), so the chat template renders every part of it; errors name Anthropic's
// fields. Responses are "message" objects with content blocks (thinking, text, tool_use);
// streams are SSE events with names (message_start, content_block_start / _delta / _stop,
// message_delta, message_stop, ping); errors are {"type": "error", "error": {"type",
// "message"}} with Anthropic's statuses. The WireApi seam is api.h.
#include <fmt/format.h>

#include <algorithm>

#include "mnemo/log.h"
#include "server/api.h"
#include "server/chat_output.h"

namespace mnemo::server {
namespace {

// Claude Code's first system block: "x-anthropic-billing-header: cc_version=...; cch=...;",
// different in every request. Kept, it would change the prompt's first tokens every time, so no
// prompt would ever be reused: such blocks are dropped.
constexpr std::string_view kBillingHeader = "x-anthropic-billing-header:";

// The kinds of content block of a stream (ChatStreamState::open_block).
enum BlockKind : int32_t { kNoBlock = 0, kThinkingBlock, kTextBlock, kToolUseBlock };

// The string "type" of a JSON object, or "".
std::string type_of(const Json& j) {
  auto t = j.is_object() ? j.find("type") : j.end();
  return t != j.end() && t->is_string() ? t->get<std::string>() : std::string();
}

// A non-empty string field of `j` into *out. Errors: InvalidArgument naming `where`.
Status get_name(const Json& j, const char* key, const std::string& where, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    return Status::invalid_argument(fmt::format("{}.{} must be a non-empty string", where, key));
  }
  *out = it->get<std::string>();
  return Status();
}

// Appends `text` to *out, after a newline when *out holds text already (text blocks of one turn,
// as the chat template joins text parts).
void append_text(const std::string& text, std::string* out) {
  if (!out->empty() && !text.empty()) *out += '\n';
  *out += text;
}

// "system": a string, or text blocks (those starting with kBillingHeader dropped).
Status system_text(const Json& b, std::string* out) {
  auto it = b.find("system");
  if (it == b.end() || it->is_null()) return Status();
  if (it->is_string()) {
    *out = it->get<std::string>();
    return Status();
  }
  if (!it->is_array()) {
    return Status::invalid_argument("'system' must be a string or an array of text blocks");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& block = (*it)[i];
    if (type_of(block) != "text" || !block.contains("text") || !block["text"].is_string()) {
      return Status::invalid_argument(fmt::format(
          "system[{}] must be a text block: {{\"type\": \"text\", \"text\": string}}", i));
    }
    const std::string& text = block["text"].get_ref<const std::string&>();
    if (text.compare(0, kBillingHeader.size(), kBillingHeader) == 0) continue;
    append_text(text, out);
  }
  return Status();
}

// A tool_result block's "content": a string, text blocks, or absent.
Status tool_result_text(const Json& block, const std::string& where, std::string* out) {
  auto it = block.find("content");
  if (it == block.end() || it->is_null()) return Status();
  if (it->is_string()) {
    *out = it->get<std::string>();
    return Status();
  }
  if (!it->is_array()) {
    return Status::invalid_argument(where + ".content must be a string or an array of text blocks");
  }
  for (size_t k = 0; k < it->size(); ++k) {
    const Json& part = (*it)[k];
    const std::string type = type_of(part);
    if (type != "text" || !part.contains("text") || !part["text"].is_string()) {
      return Status::invalid_argument(fmt::format(
          "{}.content[{}]: only text blocks are supported in a tool_result{}", where, k,
          type == "image" || type == "document" ? std::string("; ") + std::string(kNoMediaModel)
                                                 : std::string()));
    }
    append_text(part["text"].get<std::string>(), out);
  }
  return Status();
}

// Consecutive messages of one role, as one OpenAI turn (Anthropic combines such turns).
struct Turn {
  std::string role;
  std::string text;
  std::string reasoning;              // thinking blocks (assistant)
  Json tool_calls = Json::array();    // tool_use blocks as OpenAI tool_calls (assistant)
  Json tool_results = Json::array();  // tool_result blocks as role "tool" messages (user)
};

// One content block of messages[i] (at `where`) into the turn. `call_ids`: the ids of the
// tool_use blocks so far (a tool_result must answer one of them).
Status add_block(const Json& block, const std::string& where, Turn* t,
                 std::vector<std::string>* call_ids) {
  const std::string type = type_of(block);
  const bool assistant = t->role == "assistant";
  if (type == "text") {
    auto text = block.find("text");
    if (text == block.end() || !text->is_string()) {
      return Status::invalid_argument(where + ".text must be a string");
    }
    append_text(text->get<std::string>(), &t->text);
  } else if (type == "image" || type == "document") {
    return Status::invalid_argument(fmt::format(
        "{}: {} blocks are not supported: {}", where, type, kNoMediaModel));
  } else if (type == "tool_use" && assistant) {
    std::string id, name;
    MNEMO_RETURN_IF_ERROR(get_name(block, "id", where, &id));
    MNEMO_RETURN_IF_ERROR(get_name(block, "name", where, &name));
    auto input = block.find("input");
    if (input != block.end() && !input->is_null() && !input->is_object()) {
      return Status::invalid_argument(where + ".input must be an object");
    }
    const std::string args =
        input == block.end() || input->is_null() ? std::string("{}") : dump(*input);
    t->tool_calls.push_back(
        {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}});
    call_ids->push_back(std::move(id));
  } else if (type == "tool_result" && !assistant) {
    auto id = block.find("tool_use_id");
    if (id == block.end() || !id->is_string()) {
      return Status::invalid_argument(where + " (tool_result): tool_use_id must be a string");
    }
    const std::string& use_id = id->get_ref<const std::string&>();
    if (std::find(call_ids->begin(), call_ids->end(), use_id) == call_ids->end()) {
      return Status::invalid_argument(fmt::format(
          "{} (tool_result): tool_use_id '{}' answers no tool_use block of an earlier assistant "
          "message",
          where, use_id.substr(0, 64)));
    }
    bool is_error = false;
    MNEMO_RETURN_IF_ERROR(get_bool(block, "is_error", &is_error).with_context(where));
    std::string text;
    MNEMO_RETURN_IF_ERROR(tool_result_text(block, where, &text));
    t->tool_results.push_back({{"role", "tool"}, {"tool_call_id", use_id}, {"content", text}});
  } else if (type == "thinking" && assistant) {
    auto thinking = block.find("thinking");
    if (thinking == block.end() || !thinking->is_string()) {
      return Status::invalid_argument(where + ".thinking must be a string");
    }
    append_text(thinking->get<std::string>(), &t->reasoning);
  } else if (type == "redacted_thinking" && assistant) {
    // Encrypted thinking of another model: nothing this one can read.
  } else if (type == "tool_use" || type == "tool_result" || type == "thinking" ||
             type == "redacted_thinking") {
    return Status::invalid_argument(fmt::format("{}: a {} block belongs in {} message", where, type,
                                                assistant ? "a user" : "an assistant"));
  } else if (type.empty()) {
    return Status::invalid_argument(where + " must be a content block with a string \"type\"");
  } else {
    return Status::invalid_argument(
        fmt::format("{}: content blocks of type '{}' are not supported", where, type));
  }
  return Status();
}

// A turn as OpenAI messages: a user turn's tool results (role "tool", in order) before its text;
// an assistant turn's text, reasoning_content and tool_calls as one message.
void emit_turn(Turn t, Json* out) {
  if (t.role == "assistant") {
    Json m = {{"role", "assistant"}};
    m["content"] = t.text.empty() && !t.tool_calls.empty() ? Json() : Json(t.text);
    if (!t.reasoning.empty()) m["reasoning_content"] = std::move(t.reasoning);
    if (!t.tool_calls.empty()) m["tool_calls"] = std::move(t.tool_calls);
    out->push_back(std::move(m));
    return;
  }
  const bool results = !t.tool_results.empty();
  for (Json& r : t.tool_results) out->push_back(std::move(r));
  if (!results || !t.text.empty()) out->push_back({{"role", "user"}, {"content", t.text}});
}

// "system" and "messages" as OpenAI chat messages into *out.
Status translate_messages(const Json& b, Json* out) {
  *out = Json::array();
  std::string system;
  MNEMO_RETURN_IF_ERROR(system_text(b, &system));
  if (!system.empty()) out->push_back({{"role", "system"}, {"content", system}});
  auto it = b.find("messages");
  if (it == b.end() || !it->is_array() || it->empty()) {
    return Status::invalid_argument("'messages' must be a non-empty array");
  }
  std::vector<std::string> call_ids;
  Turn turn;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return Status::invalid_argument(where + " must be an object");
    auto role = m.find("role");
    if (role == m.end() || !(*role == "user" || *role == "assistant")) {
      return Status::invalid_argument(where + ".role must be \"user\" or \"assistant\"");
    }
    if (*role != turn.role) {
      if (!turn.role.empty()) emit_turn(std::move(turn), out);
      turn = Turn();
      turn.role = role->get<std::string>();
    }
    auto content = m.find("content");
    if (content == m.end() || !(content->is_string() || content->is_array())) {
      return Status::invalid_argument(where +
                                      ".content must be a string or an array of content blocks");
    }
    if (content->is_string()) {
      append_text(content->get<std::string>(), &turn.text);
      continue;
    }
    for (size_t j = 0; j < content->size(); ++j) {
      MNEMO_RETURN_IF_ERROR(
          add_block((*content)[j], fmt::format("{}.content[{}]", where, j), &turn, &call_ids));
    }
  }
  if (turn.role == "assistant" && !turn.tool_calls.empty()) {
    return Status::invalid_argument(
        "'messages' ends with an assistant message holding tool_use blocks: send their "
        "tool_result blocks (in a user message) first");
  }
  emit_turn(std::move(turn), out);
  return Status();
}

// "tools": [{"name", "description", "input_schema"}] (custom tools) as OpenAI's function tools.
Status translate_tools(const Json& b, Json* oai) {
  auto it = b.find("tools");
  if (it == b.end() || it->is_null()) return Status();
  if (!it->is_array()) return Status::invalid_argument("'tools' must be an array");
  Json tools = Json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object()) return Status::invalid_argument(where + " must be an object");
    if (auto type = t.find("type"); type != t.end() && !type->is_null() && *type != "custom") {
      return Status::invalid_argument(fmt::format(
          "{}: tools of type '{}' (Anthropic's server tools) are not supported; declare a "
          "custom tool: {{\"name\", \"description\", \"input_schema\"}}",
          where, type->is_string() ? type->get<std::string>() : type->dump()));
    }
    std::string name;
    MNEMO_RETURN_IF_ERROR(get_name(t, "name", where, &name));
    Json fn = {{"name", name}};
    if (auto d = t.find("description"); d != t.end() && !d->is_null()) {
      if (!d->is_string()) return Status::invalid_argument(where + ".description must be a string");
      fn["description"] = *d;
    }
    auto schema = t.find("input_schema");
    if (schema != t.end() && !schema->is_null()) {
      if (!schema->is_object()) {
        return Status::invalid_argument(where + ".input_schema must be a JSON Schema object");
      }
      fn["parameters"] = *schema;
    }
    tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  (*oai)["tools"] = std::move(tools);
  return Status();
}

// "tool_choice": {"type": auto | any | tool (with "name") | none, "disable_parallel_tool_use"}
// as OpenAI's tool_choice and parallel_tool_calls.
Status translate_tool_choice(const Json& b, Json* oai) {
  auto it = b.find("tool_choice");
  if (it == b.end() || it->is_null()) return Status();
  const std::string type = type_of(*it);
  if (type == "auto" || type == "none") {
    (*oai)["tool_choice"] = type;
  } else if (type == "any") {
    (*oai)["tool_choice"] = "required";
  } else if (type == "tool") {
    std::string name;
    MNEMO_RETURN_IF_ERROR(get_name(*it, "name", "tool_choice", &name));
    (*oai)["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else {
    return Status::invalid_argument(
        "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
  }
  bool one_call = false;
  MNEMO_RETURN_IF_ERROR(
      get_bool(*it, "disable_parallel_tool_use", &one_call).with_context("tool_choice"));
  (*oai)["parallel_tool_calls"] = !one_call;
  return Status();
}

// "thinking": {"type": "enabled", "budget_tokens"} -> reasoning_budget_tokens and the
// template's enable_thinking; {"type": "disabled"} -> enable_thinking false; "adaptive" (the
// model decides) -> enable_thinking true.
Status translate_thinking(const Json& b, Json* oai) {
  auto it = b.find("thinking");
  if (it == b.end() || it->is_null()) return Status();
  const std::string type = type_of(*it);
  if (type != "enabled" && type != "disabled" && type != "adaptive") {
    return Status::invalid_argument(
        "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": "
        "\"disabled\"}");
  }
  if (type == "enabled") {
    int64_t budget = -1;
    MNEMO_RETURN_IF_ERROR(
        get_int(*it, "budget_tokens", 0, INT32_MAX, &budget).with_context("thinking"));
    if (budget >= 0) (*oai)["reasoning_budget_tokens"] = budget;
  }
  Json& kwargs = (*oai)["chat_template_kwargs"];
  if (kwargs.is_null()) kwargs = Json::object();
  if (kwargs.is_object()) kwargs["enable_thinking"] = type != "disabled";
  return Status();
}

// The OpenAI chat body of an Anthropic messages body: its other fields as they are (sampling
// fields share their names; llama-server's extensions pass), its Anthropic fields translated.
Status to_chat_body(const Json& b, Json* oai) {
  *oai = Json::object();
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string& k = it.key();
    if (k != "messages" && k != "system" && k != "tools" && k != "tool_choice" && k != "stop" &&
        k != "stop_sequences" && k != "thinking" && k != "metadata" && k != "max_tokens" &&
        k != "parallel_tool_calls" && k != "reasoning_budget_tokens") {
      (*oai)[k] = it.value();
    }
  }
  Json messages;
  MNEMO_RETURN_IF_ERROR(translate_messages(b, &messages));
  (*oai)["messages"] = std::move(messages);
  MNEMO_RETURN_IF_ERROR(translate_tools(b, oai));
  MNEMO_RETURN_IF_ERROR(translate_tool_choice(b, oai));
  MNEMO_RETURN_IF_ERROR(translate_thinking(b, oai));
  if (auto s = b.find("stop_sequences"); s != b.end() && !s->is_null()) {
    if (!s->is_array()) return Status::invalid_argument("'stop_sequences' must be an array");
    (*oai)["stop"] = *s;
  }
  return Status();
}

// A message from the shared parsing steps with OpenAI's field names replaced by Anthropic's.
Status renamed(const Status& st) {
  if (st.ok()) return st;
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {".function.parameters", ".input_schema"},
      {".function.name", ".name"},
      {"'stop'", "'stop_sequences'"},
      {"a stop string", "a stop sequence"},
      {"tool_call_id", "tool_use_id"},
      {"'reasoning_budget_tokens'", "'thinking.budget_tokens'"},
  };
  std::string m = st.message();
  for (const auto& [from, to] : kNames) {
    for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size())) {
      m.replace(at, from.size(), to);
    }
  }
  return Status(st.code(), std::move(m));
}

// Anthropic's stop_reason: "tool_use" when the message holds calls (unless the token limit cut
// it), "stop_sequence", "max_tokens", else "end_turn".
const char* stop_reason(FinishReason r, bool calls) {
  if (r == FinishReason::kLimit || r == FinishReason::kContext) return "max_tokens";
  if (calls) return "tool_use";
  return r == FinishReason::kWord ? "stop_sequence" : "end_turn";
}

Json stop_sequence(const CompletionResult& r) {
  return r.finish == FinishReason::kWord ? Json(r.stop_word) : Json();
}

// Anthropic's "usage": input_tokens (read, not reused), cache_creation_input_tokens (0: every
// prompt is kept without a charge), cache_read_input_tokens (reused), output_tokens.
Json usage_json(const CompletionStats& s, int32_t n_output) {
  return {{"input_tokens", s.n_prompt - s.n_cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", s.n_cached},
          {"output_tokens", n_output}};
}

// A tool_use block's id: a call id of ours ("call_...") as Anthropic writes them ("toolu_...");
// an id the model's format gave stays as it is (the template renders it back).
std::string tool_use_id(const std::string& call_id) {
  return call_id.rfind("call_", 0) == 0 ? "toolu_" + call_id.substr(5) : call_id;
}

// A call's arguments as the tool_use block's "input" object ({} when not an object's text).
Json tool_input(const std::string& arguments) {
  Json j = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) return j;
  if (!arguments.empty()) {
    MNEMO_LOG(kWarn) << "tool call arguments are not a JSON object";
  }
  return Json::object();
}

// The "message" object: id, type, role, model, content, stop_reason, stop_sequence, usage.
Json message_json(const ApiDefaults& d, const ResponseIds& ids, Json content, Json reason,
                  Json sequence, Json usage) {
  return {{"id", ids.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", d.model_name},
          {"content", content},
          {"stop_reason", std::move(reason)},
          {"stop_sequence", sequence},
          {"usage", std::move(usage)}};
}

// An event named `type` whose data is {"type": type, ...fields}.
SseEvent event(const char* type, Json fields = Json::object()) {
  Json j = {{"type", type}};
  for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = std::move(it.value());
  return SseEvent::json(j, type);
}

// Ends the open content block, if any (a thinking block with its empty signature first).
void close_block(ChatStreamState& st, std::vector<SseEvent>* out) {
  if (st.open_block == kNoBlock) return;
  const int32_t index = st.n_blocks - 1;
  if (st.open_block == kThinkingBlock) {
    out->push_back(
        event("content_block_delta",
              {{"index", index}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}));
  }
  out->push_back(event("content_block_stop", {{"index", index}}));
  st.open_block = kNoBlock;
}

// Starts a block of `kind` (the open one ended first) unless one of that kind is open and
// !fresh.
void open_block(BlockKind kind, Json block, bool fresh, ChatStreamState& st,
                std::vector<SseEvent>* out) {
  if (st.open_block == kind && !fresh) return;
  close_block(st, out);
  out->push_back(
      event("content_block_start", {{"index", st.n_blocks}, {"content_block", std::move(block)}}));
  st.open_block = kind;
  ++st.n_blocks;
}

// A delta of the open block.
void block_delta(const ChatStreamState& st, Json delta, std::vector<SseEvent>* out) {
  out->push_back(
      event("content_block_delta", {{"index", st.n_blocks - 1}, {"delta", std::move(delta)}}));
}

// The block events of a chat delta: argument pieces of the open tool_use block, thinking, text,
// then new tool_use blocks (each with its first arguments).
void diff_events(const chat_parse::ChatMsgDiff& diff, ChatStreamState& st,
                 std::vector<SseEvent>* out) {
  for (const chat_parse::ToolCallDelta& c : diff.tool_calls) {
    if (!c.name.empty() || c.arguments.empty()) continue;
    if (st.open_block == kToolUseBlock) {
      block_delta(st, {{"type", "input_json_delta"}, {"partial_json", c.arguments}}, out);
    } else {
      MNEMO_LOG(kWarn) << "anthropic stream: arguments of a closed tool_use block dropped";
    }
  }
  if (!diff.reasoning_content.empty()) {
    open_block(kThinkingBlock, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, false,
               st, out);
    block_delta(st, {{"type", "thinking_delta"}, {"thinking", diff.reasoning_content}}, out);
  }
  if (!diff.content.empty()) {
    open_block(kTextBlock, {{"type", "text"}, {"text", ""}}, false, st, out);
    block_delta(st, {{"type", "text_delta"}, {"text", diff.content}}, out);
  }
  for (const chat_parse::ToolCallDelta& c : diff.tool_calls) {
    if (c.name.empty()) continue;
    open_block(kToolUseBlock,
               {{"type", "tool_use"},
                {"id", tool_use_id(c.id)},
                {"name", c.name},
                {"input", Json::object()}},
               true, st, out);
    if (!c.arguments.empty()) {
      block_delta(st, {{"type", "input_json_delta"}, {"partial_json", c.arguments}}, out);
    }
  }
}

// Anthropic's error types by ErrorKind, with their statuses.
struct AnthropicError {
  int status;
  const char* type;
};

AnthropicError anthropic_error(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
    case ErrorKind::kPromptTooLong:
    case ErrorKind::kNotSupported:
      return {400, "invalid_request_error"};
    case ErrorKind::kUnauthorized:
      return {401, "authentication_error"};
    case ErrorKind::kNotFound:
      return {404, "not_found_error"};
    case ErrorKind::kBodyTooLarge:
      return {413, "request_too_large"};
    case ErrorKind::kBusy:
      return {429, "rate_limit_error"};
    case ErrorKind::kCacheFull:
    case ErrorKind::kQueueFull:
    case ErrorKind::kTimeout:
      return {529, "overloaded_error"};
    case ErrorKind::kInternal:
    case ErrorKind::kCount:
      break;
  }
  return {500, "api_error"};
}

class AnthropicApi final : public WireApi {
 public:
  std::string_view id_prefix() const override { return "msg_"; }

  Status parse_one(const Json& b, const Json*, const Tokenizer& tok, const ChatTemplate& tmpl,
                   const ApiDefaults& d, ParsedCompletion* out) const override {
    if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
    Json oai;
    MNEMO_RETURN_IF_ERROR(to_chat_body(b, &oai));
    ParsedCompletion p = new_completion(*this, d);
    CompletionRequest& q = p.req;
    std::string prompt_text;
    MNEMO_RETURN_IF_ERROR(renamed(
        parse_chat_prompt(oai, tok, tmpl, d, &q.prompt, &out->n_prompt_tokens, &prompt_text)));
    // Anthropic requires max_tokens and clients ask for much (Claude Code: 32000): more than
    // --n-predict-max is lowered to it, not refused; absent takes -n's default.
    int64_t n_predict = -1;
    MNEMO_RETURN_IF_ERROR(get_int(b, "max_tokens", 0, INT32_MAX, &n_predict));
    if (n_predict > d.n_predict_max) n_predict = d.n_predict_max;
    MNEMO_RETURN_IF_ERROR(set_n_predict(n_predict, "'max_tokens'", d, &q));
    MNEMO_RETURN_IF_ERROR(renamed(parse_sampling(oai, tok, &q)));
    MNEMO_RETURN_IF_ERROR(renamed(parse_chat_output(oai, prompt_text, d, &p)));
    MNEMO_RETURN_IF_ERROR(renamed(parse_options(oai, d, &p)));
    return finish_completion(std::move(p), d, out);
  }

  // {"type": "message", "content": [thinking, text, tool_use...], "stop_reason", "usage"}.
  Json response(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                const ResponseIds& ids) const override {
    std::vector<std::string> call_ids = r.chat.call_ids;
    const chat_parse::ChatMsg msg = final_chat_message(p, r, &call_ids);
    Json content = Json::array();
    if (!msg.reasoning_content.empty()) {
      content.push_back(
          {{"type", "thinking"}, {"thinking", msg.reasoning_content}, {"signature", ""}});
    }
    if (!msg.content.empty()) content.push_back({{"type", "text"}, {"text", msg.content}});
    for (size_t i = 0; i < msg.tool_calls.size(); ++i) {
      const chat_parse::ToolCall& c = msg.tool_calls[i];
      content.push_back({{"type", "tool_use"},
                         {"id", tool_use_id(i < call_ids.size() ? call_ids[i] : c.id)},
                         {"name", c.name},
                         {"input", tool_input(c.arguments)}});
    }
    return message_json(d, ids, std::move(content), stop_reason(r.finish, !msg.tool_calls.empty()),
                        stop_sequence(r), usage_json(r.stats, r.stats.n_generated));
  }

  // message_start (the admission's token counts), then one ping.
  std::vector<SseEvent> stream_begin(const ParsedCompletion&, CompletionResult& r,
                                     const ApiDefaults& d, const ResponseIds& ids) const override {
    return {event("message_start", {{"message", message_json(d, ids, Json::array(), Json(), Json(),
                                                             usage_json(r.stats, 0))}}),
            event("ping")};
  }

  std::vector<SseEvent> stream_delta(const ParsedCompletion& p, const CompletionEvent&,
                                     CompletionResult& r, int32_t, const ApiDefaults&,
                                     const ResponseIds&) const override {
    std::vector<SseEvent> out;
    diff_events(next_chat_delta(p, r, /*done=*/false), r.chat, &out);
    return out;
  }

  // What the final parse adds, the open block's end, message_delta (stop_reason, usage) and
  // message_stop.
  std::vector<SseEvent> stream_end(const ParsedCompletion& p, CompletionResult& r,
                                   const ApiDefaults&, const ResponseIds&) const override {
    std::vector<SseEvent> out;
    diff_events(next_chat_delta(p, r, /*done=*/true), r.chat, &out);
    close_block(r.chat, &out);
    Json usage = usage_json(r.stats, r.stats.n_generated);
    out.push_back(event("message_delta",
                        {{"delta",
                          {{"stop_reason", stop_reason(r.finish, !r.chat.sent.tool_calls.empty())},
                           {"stop_sequence", stop_sequence(r)}}},
                         {"usage",
                          {{"output_tokens", usage["output_tokens"]},
                           {"input_tokens", usage["input_tokens"]},
                           {"cache_creation_input_tokens", 0},
                           {"cache_read_input_tokens", usage["cache_read_input_tokens"]}}}}));
    out.push_back(event("message_stop"));
    return out;
  }

  std::string keep_alive() const override {
    return SseEvent::json(Json{{"type", "ping"}}, "ping").wire();
  }

  // {"type": "error", "error": {"type", "message"}}; a prompt too long says so as Anthropic
  // does ("prompt is too long: N tokens > M maximum", which clients such as Claude Code read).
  Json error_body(const WireError& e) const override {
    std::string message = e.message;
    if (e.prompt_size) {
      message = fmt::format("prompt is too long: {} tokens > {} maximum ({})",
                            e.prompt_size->n_prompt_tokens,
                            e.prompt_size->n_ctx > 0 ? e.prompt_size->n_ctx - 1 : 0, e.message);
    }
    return {{"type", "error"},
            {"error", {{"type", anthropic_error(e.kind).type}, {"message", message}}}};
  }

  std::vector<SseEvent> stream_error(const WireError& e) const override {
    return {SseEvent::json(error_body(e), "error")};
  }

  int http_status(ErrorKind kind) const override { return anthropic_error(kind).status; }
};

}  // namespace

const WireApi& anthropic_messages_api() {
  static const AnthropicApi api;
  return api;
}

Json message_token_count_json(size_t n_prompt_tokens) {
  return {{"input_tokens", n_prompt_tokens}};
}

}  // namespace mnemo::server
