// OpenAI's Responses API, the request side (api_responses.h): a POST /v1/responses body becomes
// an OpenAI chat-completions body, which the steps every chat surface shares then parse
// (request.h, chat_output.h): the stored conversation of previous_response_id and the "input"
// items as chat messages, "instructions" as a system message first, function tools, tool_choice,
// text.format as response_format, max_output_tokens. Errors are InvalidArgument whose message
// starts with the quoted field it is about (the error body's "param"), NotFound for an unknown
// previous_response_id.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <string_view>
#include <utility>

#include "server/api_responses.h"
#include "server/response_store.h"

namespace mnemo::server {
namespace {

Status bad(std::string message) { return Status::invalid_argument(std::move(message)); }

bool is_nonempty_string(const Json& j) {
  return j.is_string() && !j.get_ref<const std::string&>().empty();
}

// The body's field `key`, or null when it is absent.
const Json& field(const Json& b, const char* key) {
  static const Json kNull;
  auto it = b.find(key);
  return it == b.end() ? kNull : *it;
}

// The text of a content list's parts: "input_text" / "output_text" (and "text", as chat
// completions name it) give their text, "refusal" its refusal. A single part is its text, several
// stay text parts (the chat template joins them, as for chat completions). Other part types
// (images, files, audio) are refused, naming the part.
Status content_parts(const Json& parts, const std::string& where, Json* out) {
  Json texts = Json::array();
  for (size_t k = 0; k < parts.size(); ++k) {
    const Json& part = parts[k];
    const std::string at = fmt::format("{}[{}]", where, k);
    if (!part.is_object() || !field(part, "type").is_string()) {
      return bad(fmt::format("'{}' must be an object with a 'type'", at));
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type != "input_text" && type != "output_text" && type != "text" && type != "refusal") {
      const bool media = type == "input_image" || type == "input_file" || type == "input_audio";
      return bad(fmt::format(
          "'{}.type' is '{}': only text parts (input_text, output_text) are supported{}{}", at,
          type, media ? "; " : "", media ? kNoMediaModel : std::string_view()));
    }
    if (!field(part, key).is_string()) {
      return bad(fmt::format("'{}.{}' must be a string", at, key));
    }
    texts.push_back({{"type", "text"}, {"text", part[key]}});
  }
  if (texts.size() == 1) {
    *out = texts[0]["text"];
  } else {
    *out = std::move(texts);
  }
  return Status();
}

// A message's or a function_call_output's "content" / "output": a string or a list of parts.
Status content_of(const Json& c, const std::string& where, Json* out) {
  if (c.is_string()) {
    *out = c;
    return Status();
  }
  if (!c.is_array()) return bad(fmt::format("'{}' must be a string or an array of parts", where));
  return content_parts(c, where, out);
}

// The translation of "input" into chat messages appended to a conversation.
class InputReader {
 public:
  explicit InputReader(Json* conv) : conv_(*conv) {
    // The calls of the stored conversation can be answered too.
    for (const Json& m : conv_) {
      for (const Json& c : m.value("tool_calls", Json::array())) add_call(c);
    }
  }

  Status read(const Json& input) {
    if (input.is_string()) {
      conv_.push_back({{"role", "user"}, {"content", input}});
      return Status();
    }
    if (!input.is_array() || input.empty()) {
      return bad("'input' must be a string or a non-empty array of input items");
    }
    for (size_t i = 0; i < input.size(); ++i) MNEMO_RETURN_IF_ERROR(item(input[i], i));
    return Status();
  }

 private:
  Status item(const Json& it, size_t i) {
    const std::string where = fmt::format("input[{}]", i);
    if (!it.is_object()) return bad(fmt::format("'{}' must be an object", where));
    const Json& type = field(it, "type");
    if (type.is_null()) {
      if (field(it, "role").is_null()) {
        return bad(fmt::format("'{}' has neither a 'type' nor a 'role'", where));
      }
      return message(it, where);
    }
    if (!type.is_string()) return bad(fmt::format("'{}.type' must be a string", where));
    const std::string& t = type.get_ref<const std::string&>();
    if (t == "message") return message(it, where);
    if (t == "function_call") return function_call(it, where);
    if (t == "function_call_output") return call_output(it, where);
    if (t == "reasoning") return reasoning(it, where);
    static constexpr std::array<std::string_view, 14> kHosted = {
        "item_reference",          "file_search_call",
        "web_search_call",         "computer_call",
        "computer_call_output",    "code_interpreter_call",
        "image_generation_call",   "local_shell_call",
        "local_shell_call_output", "mcp_call",
        "mcp_list_tools",          "mcp_approval_request",
        "custom_tool_call",        "custom_tool_call_output"};
    if (std::find(kHosted.begin(), kHosted.end(), t) != kHosted.end()) {
      return bad(
          fmt::format("'{}.type' is '{}', which is not supported (only message, "
                      "function_call, function_call_output and reasoning items)",
                      where, t));
    }
    return bad(fmt::format("'{}.type' is '{}', which is not an input item type", where, t));
  }

  // {"role": user | system | developer | assistant, "content"}: developer becomes system; an
  // assistant message takes the reasoning item before it.
  Status message(const Json& it, const std::string& where) {
    const Json& role = field(it, "role");
    const std::string r = role.is_string() ? role.get<std::string>() : "";
    if (r != "user" && r != "system" && r != "developer" && r != "assistant") {
      return bad(fmt::format("'{}.role' must be user, system, developer or assistant", where));
    }
    Json content;
    MNEMO_RETURN_IF_ERROR(content_of(field(it, "content"), where + ".content", &content));
    Json m = {{"role", r == "developer" ? "system" : r}, {"content", std::move(content)}};
    if (r == "assistant") take_reasoning(&m);
    reasoning_.clear();  // a reasoning item belongs to the assistant turn right after it
    conv_.push_back(std::move(m));
    return Status();
  }

  // {"call_id", "name", "arguments"}: a call of the assistant turn just before (consecutive calls,
  // and calls after an assistant message, are one turn, as the model wrote them), else of a new
  // assistant turn.
  Status function_call(const Json& it, const std::string& where) {
    if (!is_nonempty_string(field(it, "call_id"))) {
      return bad(fmt::format("'{}.call_id' must be a non-empty string", where));
    }
    if (!is_nonempty_string(field(it, "name"))) {
      return bad(fmt::format("'{}.name' must be a non-empty string", where));
    }
    const Json& args = field(it, "arguments");
    if (!args.is_null() && !args.is_string()) {
      return bad(fmt::format("'{}.arguments' must be a string (JSON text)", where));
    }
    Json call = {{"id", it["call_id"]},
                 {"type", "function"},
                 {"function", {{"name", it["name"]}, {"arguments", args.is_null() ? "{}" : args}}}};
    add_call(call);
    const bool joins = reasoning_.empty() && !conv_.empty() && conv_.back()["role"] == "assistant";
    if (!joins) {
      Json m = {{"role", "assistant"}, {"content", nullptr}};
      take_reasoning(&m);
      conv_.push_back(std::move(m));
    }
    Json& turn = conv_.back();
    if (!turn.contains("tool_calls")) turn["tool_calls"] = Json::array();
    turn["tool_calls"].push_back(std::move(call));
    return Status();
  }

  // {"call_id", "output"}: the result of a call made earlier (in this input or the stored
  // conversation), as a "tool" message.
  Status call_output(const Json& it, const std::string& where) {
    const Json& id = field(it, "call_id");
    if (!is_nonempty_string(id)) {
      return bad(fmt::format("'{}.call_id' must be a non-empty string", where));
    }
    if (calls_.count(id.get<std::string>()) == 0) {
      return bad(fmt::format("'{}.call_id': no function call found with call_id '{}'", where,
                             id.get<std::string>().substr(0, 64)));
    }
    Json output;
    MNEMO_RETURN_IF_ERROR(content_of(field(it, "output"), where + ".output", &output));
    reasoning_.clear();
    conv_.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", std::move(output)}});
    return Status();
  }

  // {"content": [{"type": "reasoning_text", "text"}], "summary", "encrypted_content"}: the
  // reasoning_content of the assistant turn that follows (dropped if none follows).
  Status reasoning(const Json& it, const std::string& where) {
    const Json& content = field(it, "content");
    if (!content.is_null() && !content.is_array()) {
      return bad(fmt::format("'{}.content' must be an array of reasoning_text parts", where));
    }
    reasoning_.clear();
    for (const Json& part : content.is_array() ? content : Json::array()) {
      if (!part.is_object() || !field(part, "text").is_string()) {
        return bad(fmt::format("'{}.content' must be an array of reasoning_text parts", where));
      }
      reasoning_ += part["text"].get<std::string>();
    }
    return Status();
  }

  void take_reasoning(Json* m) {
    if (!reasoning_.empty()) (*m)["reasoning_content"] = reasoning_;
    reasoning_.clear();
  }

  void add_call(const Json& c) {
    if (c.is_object() && c.contains("id") && c["id"].is_string()) {
      calls_[c["id"].get<std::string>()] = true;
    }
  }

  Json& conv_;
  std::map<std::string, bool> calls_;  // call ids that a function_call_output may answer
  std::string reasoning_;              // a reasoning item waiting for its assistant turn
};

// "tools": function tools ({"type": "function", "name", "description", "parameters", "strict"})
// as chat completions' {"type": "function", "function": {...}}; echoed in OpenAI's form.
Status read_tools(const Json& b, Json* chat, Json* echo) {
  const Json& tools = field(b, "tools");
  (*echo)["tools"] = Json::array();
  if (tools.is_null()) return Status();
  if (!tools.is_array()) return bad("'tools' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object() || !field(t, "type").is_string()) {
      return bad(fmt::format("'{}' must be an object with a 'type'", where));
    }
    const std::string& type = t["type"].get_ref<const std::string&>();
    if (type != "function") {
      return bad(fmt::format("'{}.type' is '{}': only function tools are supported", where, type));
    }
    if (!is_nonempty_string(field(t, "name"))) {
      return bad(fmt::format("'{}.name' must be a non-empty string", where));
    }
    const Json& desc = field(t, "description");
    const Json& params = field(t, "parameters");
    const Json& strict = field(t, "strict");
    if (!desc.is_null() && !desc.is_string()) {
      return bad(fmt::format("'{}.description' must be a string", where));
    }
    if (!params.is_null() && !params.is_object()) {
      return bad(fmt::format("'{}.parameters' must be a JSON Schema object", where));
    }
    if (!strict.is_null() && !strict.is_boolean()) {
      return bad(fmt::format("'{}.strict' must be a boolean", where));
    }
    Json fn = {{"name", t["name"]}};
    if (!desc.is_null()) fn["description"] = desc;
    if (!params.is_null()) fn["parameters"] = params;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    (*echo)["tools"].push_back({{"type", "function"},
                                {"name", t["name"]},
                                {"description", desc},
                                {"parameters", params},
                                {"strict", strict}});
  }
  (*chat)["tools"] = std::move(out);
  return Status();
}

// "tool_choice": "auto" | "none" | "required" | {"type": "function", "name"}; and
// "parallel_tool_calls".
Status read_tool_choice(const Json& b, Json* chat, Json* echo) {
  const Json& tc = field(b, "tool_choice");
  (*echo)["tool_choice"] = tc.is_null() ? Json("auto") : tc;
  if (tc.is_string()) {
    const std::string& s = tc.get_ref<const std::string&>();
    if (s != "auto" && s != "none" && s != "required") {
      return bad(
          "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": "
          "\"function\", \"name\": ...}");
    }
    (*chat)["tool_choice"] = tc;
  } else if (tc.is_object()) {
    if (field(tc, "type") != "function" || !is_nonempty_string(field(tc, "name"))) {
      return bad(
          "'tool_choice' must be {\"type\": \"function\", \"name\": ...} (only function "
          "tools are supported)");
    }
    (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  } else if (!tc.is_null()) {
    return bad("'tool_choice' must be a string or an object");
  }
  const Json& parallel = field(b, "parallel_tool_calls");
  if (!parallel.is_null() && !parallel.is_boolean()) {
    return bad("'parallel_tool_calls' must be a boolean");
  }
  if (parallel.is_boolean()) (*chat)["parallel_tool_calls"] = parallel;
  (*echo)["parallel_tool_calls"] = parallel.is_boolean() ? parallel.get<bool>() : true;
  return Status();
}

// "text": {"format": {"type": "text"} | {"type": "json_object"} | {"type": "json_schema", "name",
// "schema", "strict"}, "verbosity"} -> response_format.
Status read_text(const Json& b, Json* chat, Json* echo) {
  const Json& text = field(b, "text");
  (*echo)["text"] = {{"format", {{"type", "text"}}}};
  if (text.is_null()) return Status();
  if (!text.is_object()) return bad("'text' must be an object");
  const Json& format = field(text, "format");
  (*echo)["text"] = text;
  if (format.is_null()) {
    (*echo)["text"]["format"] = {{"type", "text"}};
    return Status();
  }
  if (!format.is_object() || !field(format, "type").is_string()) {
    return bad("'text.format' must be an object with a 'type'");
  }
  const std::string& type = format["type"].get_ref<const std::string&>();
  if (type == "json_object") {
    (*chat)["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    if (!field(format, "schema").is_object()) {
      return bad("'text.format.schema' must be a JSON Schema object");
    }
    const Json& name = field(format, "name");
    if (!name.is_null() && !name.is_string()) return bad("'text.format.name' must be a string");
    (*chat)["response_format"] = {
        {"type", "json_schema"},
        {"json_schema",
         {{"name", name.is_string() ? name : Json("")}, {"schema", format["schema"]}}}};
  } else if (type != "text") {
    return bad(fmt::format(
        "'text.format.type' is '{}'; it must be text, json_object or json_schema", type));
  }
  return Status();
}

// The fields a local model takes as given or ignores, checked: reasoning {effort, summary},
// metadata, user, store, truncation; and the ones it cannot honour refused.
Status read_options(const Json& b, Json* echo) {
  const Json& reasoning = field(b, "reasoning");
  if (!reasoning.is_null()) {
    if (!reasoning.is_object()) return bad("'reasoning' must be an object");
    static constexpr std::array<std::string_view, 6> kEfforts = {"none",   "minimal", "low",
                                                                 "medium", "high",    "xhigh"};
    const Json& effort = field(reasoning, "effort");
    if (!effort.is_null() &&
        !(effort.is_string() && std::find(kEfforts.begin(), kEfforts.end(),
                                          effort.get<std::string>()) != kEfforts.end())) {
      return bad("'reasoning.effort' must be none, minimal, low, medium, high or xhigh");
    }
  }
  const Json& metadata = field(b, "metadata");
  if (!metadata.is_null()) {
    if (!metadata.is_object()) return bad("'metadata' must be an object of strings");
    for (const auto& kv : metadata.items()) {
      if (!kv.value().is_string()) return bad("'metadata' must be an object of strings");
    }
  }
  const Json& user = field(b, "user");
  if (!user.is_null() && !user.is_string()) return bad("'user' must be a string");
  bool store = true;
  MNEMO_RETURN_IF_ERROR(get_bool(b, "store", &store));
  const Json& truncation = field(b, "truncation");
  if (!truncation.is_null() && truncation != "auto" && truncation != "disabled") {
    return bad("'truncation' must be \"auto\" or \"disabled\"");
  }
  bool background = false;
  MNEMO_RETURN_IF_ERROR(get_bool(b, "background", &background));
  if (background) return bad("'background' is not supported: responses run in the foreground");
  for (const char* key : {"conversation", "prompt"}) {
    if (!field(b, key).is_null()) return bad(fmt::format("'{}' is not supported", key));
  }
  int64_t top_logprobs = 0;
  MNEMO_RETURN_IF_ERROR(get_int(b, "top_logprobs", 0, 20, &top_logprobs));
  if (top_logprobs > 0) return bad("'top_logprobs' is not supported on /v1/responses");
  (*echo)["reasoning"] = reasoning.is_null() ? Json{{"effort", nullptr}, {"summary", nullptr}}
                                             : Json{{"effort", field(reasoning, "effort")},
                                                    {"summary", field(reasoning, "summary")}};
  (*echo)["store"] = store;
  (*echo)["user"] = user;
  (*echo)["metadata"] = metadata.is_null() ? Json::object() : metadata;
  return Status();
}

// The llama-server extensions chat completions take, passed on as they are.
constexpr std::array<const char*, 16> kExtensions = {"top_k",
                                                     "min_p",
                                                     "seed",
                                                     "repeat_penalty",
                                                     "repeat_last_n",
                                                     "presence_penalty",
                                                     "frequency_penalty",
                                                     "logit_bias",
                                                     "stop",
                                                     "cache_prompt",
                                                     "id_slot",
                                                     "n_keep",
                                                     "ignore_eos",
                                                     "chat_template_kwargs",
                                                     "reasoning_format",
                                                     "reasoning_budget_tokens"};

}  // namespace

Status responses_to_chat(const Json& b, const ApiDefaults& d, ResponsesRequest* out) {
  Json& chat = out->chat;
  Json& echo = out->echo;
  chat = Json::object();
  echo = Json::object();
  out->conversation = Json::array();
  const Json& prev = field(b, "previous_response_id");
  if (!prev.is_null()) {
    if (!prev.is_string()) return bad("'previous_response_id' must be a string");
    auto stored = d.responses != nullptr ? d.responses->get(prev.get<std::string>()) : nullptr;
    if (stored == nullptr) {
      return Status::not_found(fmt::format("Previous response with id '{}' not found.",
                                           prev.get<std::string>().substr(0, 128)));
    }
    out->conversation = stored->messages;
  }
  const Json& instructions = field(b, "instructions");
  if (!instructions.is_null() && !instructions.is_string()) {
    return bad("'instructions' must be a string");
  }
  if (field(b, "input").is_null()) return bad("'input' is missing");
  InputReader reader(&out->conversation);
  MNEMO_RETURN_IF_ERROR(reader.read(b["input"]));
  chat["messages"] = Json::array();
  if (!instructions.is_null()) {
    chat["messages"].push_back({{"role", "system"}, {"content", instructions}});
  }
  for (const Json& m : out->conversation) chat["messages"].push_back(m);
  echo["instructions"] = instructions;
  int64_t max_output = -1;
  MNEMO_RETURN_IF_ERROR(get_int(b, "max_output_tokens", 1, INT32_MAX, &max_output));
  out->max_output_tokens = max_output;
  echo["max_output_tokens"] = max_output < 0 ? Json() : Json(max_output);
  echo["model"] = d.model_name;
  MNEMO_RETURN_IF_ERROR(read_tool_choice(b, &chat, &echo));
  echo["previous_response_id"] = prev;
  MNEMO_RETURN_IF_ERROR(read_options(b, &echo));
  MNEMO_RETURN_IF_ERROR(read_text(b, &chat, &echo));
  MNEMO_RETURN_IF_ERROR(read_tools(b, &chat, &echo));
  echo["truncation"] = "disabled";
  out->store = echo["store"].get<bool>();
  for (const char* key : {"temperature", "top_p", "stream"}) {
    if (b.contains(key)) chat[key] = b[key];
  }
  for (const char* key : kExtensions) {
    if (b.contains(key)) chat[key] = b[key];
  }
  return Status();
}

Status in_responses_terms(const Status& st) {
  if (st.ok()) return st;
  std::string m = st.message();
  // Chat completions' names of the fields, as the Responses API names them.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kNames = {{
      {"response_format.json_schema.schema", "text.format.schema"},
      {"response_format.schema", "text.format.schema"},
      {"response_format", "text.format"},
      {"'messages'", "'input'"},
      {".function.", "."},
  }};
  for (const auto& [from, to] : kNames) {
    for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size())) {
      m.replace(at, from.size(), to);
    }
  }
  // "tools[0].parameters: ..." names its field first, quoted as every other message does.
  if (m.rfind("tools[", 0) == 0) {
    if (const size_t colon = m.find(": "); colon != std::string::npos) {
      m = "'" + m.substr(0, colon) + "'" + m.substr(colon);
    }
  }
  return Status(st.code(), std::move(m));
}

}  // namespace mnemo::server
