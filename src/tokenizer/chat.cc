// Chat template families (see include/mnemo/chat.h). Detection and formats follow llama.cpp's
// src/llama-chat.cpp (llm_chat_detect_template, llm_chat_apply_template).
#include "mnemo/chat.h"

#include <fmt/format.h>

#include "mnemo/jinja.h"
#include "mnemo/log.h"
#include "mnemo/tokenizer.h"

namespace mnemo {

namespace {

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

// The fixed system message a chatml template writes when the conversation has none, found as a
// constant Jinja string "<|im_start|>system\n...<|im_end|>" (the newline either raw or the
// escape "\n"). "" if the template has no such constant.
std::string find_default_system(std::string_view tmpl) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  constexpr std::string_view kClose = "<|im_end|>";
  for (size_t at = tmpl.find(kOpen); at != std::string_view::npos; at = tmpl.find(kOpen, at + 1)) {
    size_t p = at + kOpen.size();
    if (tmpl.substr(p, 1) == "\n") {
      p += 1;
    } else if (tmpl.substr(p, 2) == "\\n") {
      p += 2;
    } else {
      continue;
    }
    const size_t end = tmpl.find(kClose, p);
    if (end == std::string_view::npos) continue;
    const std::string_view body = tmpl.substr(p, end - p);
    // Only a constant: no string delimiters, expressions or concatenation inside.
    if (body.empty() || body.find_first_of("'\"{}+") != std::string_view::npos) continue;
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size()) {
        const char e = body[++i];
        out.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e);
      } else {
        out.push_back(body[i]);
      }
    }
    return out;
  }
  return {};
}

// The family whose distinctive markers the template text has (the first match of this list,
// most specific first); false when none. Each rule was checked against the format llama-server
// --no-jinja picks for a text holding just those markers (tests/fixtures/
// builtin_chat_templates.json, "detect"); llama-server knows more markers than these.
bool recognise(std::string_view t, ChatTemplateFamily* out) {
  using F = ChatTemplateFamily;
  auto has = [&](std::string_view what) { return contains(t, what); };
  F f;
  if (has("<|im_start|>") && has("<|im_sep|>")) {
    f = F::kPhi4;
  } else if (has("<|im_start|>") && has("<end_of_utterance>")) {
    f = F::kSmolvlm;
  } else if (has("<|im_start|>")) {
    f = F::kChatml;
  } else if (has("<start_of_turn>")) {
    f = F::kGemma;
  } else if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
    f = F::kLlama3;
  } else if (has("<|header_start|>") && has("<|header_end|>")) {
    f = F::kLlama4;
  } else if (has("[SYSTEM_PROMPT]")) {
    f = F::kMistralV7;
  } else if (has("<<SYS>>")) {
    f = F::kLlama2Sys;
  } else if (has("[INST]")) {
    f = F::kLlama2;
  } else if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>")) {
    f = F::kCommandR;
  } else if (has("[gMASK]<sop>")) {
    f = F::kChatglm4;
  } else if (has("[gMASK]sop")) {
    f = F::kChatglm3;
  } else if (has("<|start_of_role|>")) {
    f = F::kGranite;
  } else if (has("<seed:bos>")) {
    f = F::kSeedOss;
  } else if (has("<|role_start|>")) {
    f = F::kMegrez;
  } else if (has("<用户>")) {
    f = F::kMinicpm;
  } else if (has("GPT4 Correct ")) {
    f = F::kOpenchat;
  } else if (has("<|assistant|>") && has("<|end|>")) {
    f = F::kPhi3;
  } else if (has("<|user|>") && has("<|endoftext|>")) {
    f = F::kZephyr;
  } else if (has("USER: ") && has("ASSISTANT: ")) {
    f = has("SYSTEM: ") ? F::kVicunaOrca : F::kVicuna;
  } else {
    return false;
  }
  *out = f;
  return true;
}

}  // namespace

ChatTemplate ChatTemplate::from_family(ChatTemplateFamily family) {
  ChatTemplate t;
  t.family_ = family;
  return t;
}

Result<ChatTemplate> ChatTemplate::from_name(std::string_view name) {
  for (ChatTemplateFamily f : chat_template_families()) {
    if (name == chat_template_family_name(f)) return from_family(f);
  }
  return Status::invalid_argument("unknown chat template name '" + std::string(name) +
                                  "' (known: " + chat_template_names() + ")");
}

ChatTemplate ChatTemplate::detect(std::string_view tmpl) { return detect_impl(tmpl, true); }

ChatTemplate ChatTemplate::detect_impl(std::string_view tmpl, bool warn) {
  auto by_name = from_name(tmpl);
  if (by_name.ok()) return by_name.value();
  ChatTemplate t;
  if (recognise(tmpl, &t.family_)) {
    if (t.family_ == ChatTemplateFamily::kChatml) t.default_system_ = find_default_system(tmpl);
    return t;
  }
  t.family_ = ChatTemplateFamily::kChatml;
  t.recognized_ = false;
  if (!warn) return t;
  if (tmpl.empty()) {
    MNEMO_LOG(kWarn) << "chat template: the model has no tokenizer.chat_template; using chatml "
                        "(<|im_start|>role ... <|im_end|>), which may not be what it expects";
  } else {
    MNEMO_LOG(kWarn) << "chat template: not a known family: '" << tmpl.substr(0, 60)
                     << (tmpl.size() > 60 ? "..." : "") << "'; using chatml";
  }
  return t;
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  if (family_ == ChatTemplateFamily::kChatml && !default_system_.empty() && !messages.empty() &&
      messages[0].role != "system") {
    std::vector<ChatMessage> with_system;
    with_system.reserve(messages.size() + 1);
    with_system.push_back({"system", default_system_});
    with_system.insert(with_system.end(), messages.begin(), messages.end());
    return render_chat_family(family_, with_system, add_generation_prompt);
  }
  return render_chat_family(family_, messages, add_generation_prompt);
}

namespace {

using Json = nlohmann::ordered_json;

// The text of messages[i].content: a string, null (""), or text parts joined with `sep`.
Status content_text(const Json& m, size_t i, std::string_view sep, std::string* out) {
  auto content = m.find("content");
  if (content == m.end() || content->is_null()) return Status();
  if (content->is_string()) {
    *out = content->get<std::string>();
    return Status();
  }
  if (!content->is_array()) {
    return Status::invalid_argument(
        fmt::format("messages[{}].content must be a string or an array of parts", i));
  }
  for (size_t k = 0; k < content->size(); ++k) {
    const Json& part = (*content)[k];
    auto type = part.is_object() ? part.find("type") : part.end();
    auto text = part.is_object() ? part.find("text") : part.end();
    if (!part.is_object() || type == part.end() || !type->is_string() ||
        type->get<std::string>() != "text" || text == part.end() || !text->is_string()) {
      if (type != part.end() && type->is_string() && type->get<std::string>() != "text") {
        return Status::invalid_argument(
            fmt::format("messages[{}].content[{}]: parts of type '{}' are not supported: {}", i,
                        k, type->get<std::string>().substr(0, 40), kNoMediaModel));
      }
      return Status::invalid_argument(
          fmt::format("messages[{}].content: only parts of type \"text\" are supported", i));
    }
    if (k > 0) out->append(sep);
    out->append(text->get<std::string>());
  }
  return Status();
}

// True when the JSON text nests arrays / objects at most `limit` deep (a linear scan, so a
// hostile text is refused before the parser and the value's destructor recurse into it).
bool shallow_json(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// A message's tool_calls[].function.arguments in the form the template reads: parsed into an
// object when `objects` (text that is not a JSON object's stays as it is), else as JSON text.
void arguments_as(Json* m, bool objects) {
  auto calls = m->find("tool_calls");
  if (calls == m->end() || !calls->is_array()) return;
  for (Json& call : *calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    Json& fn = call["function"];
    auto args = fn.find("arguments");
    if (args == fn.end()) continue;
    if (objects && args->is_string() && shallow_json(args->get_ref<const std::string&>(), 64)) {
      Json parsed = Json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) *args = std::move(parsed);
    } else if (!objects && !args->is_string()) {
      *args = args->dump();
    }
  }
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_jinja(std::string_view source, std::string bos_token,
                                              std::string eos_token, bool add_bos, bool add_eos) {
  auto parsed = jinja::Template::parse(source);
  if (!parsed.ok()) {
    return Status::invalid_argument("chat template: " + parsed.status().message());
  }
  ChatTemplate t;
  {
    // The family too, quietly: apply() and logs name it.
    ChatTemplate family = detect_impl(source, /*warn=*/false);
    if (family.recognized()) t = std::move(family);
  }
  t.jinja_ = std::make_shared<const jinja::Template>(std::move(parsed).value());
  t.source_ = std::string(source);
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  t.add_bos_ = add_bos;
  t.add_eos_ = add_eos;
  {
    // Which form of tool-call arguments the template reads (object_arguments()).
    Json call = {
        {"id", "call_probe"},
        {"type", "function"},
        {"function", {{"name", "probe_tool"}, {"arguments", {{"probe_arg", "probe_value"}}}}}};
    Json ctx = {{"messages", Json::array({{{"role", "user"}, {"content", "probe"}},
                                          {{"role", "assistant"},
                                           {"content", ""},
                                           {"tool_calls", Json::array({std::move(call)})}}})},
                {"add_generation_prompt", false}};
    auto out = t.render_jinja(std::move(ctx));
    t.object_arguments_ = out.ok() && out->find("probe_value") != std::string::npos &&
                          out->find("'probe_arg'") == std::string::npos;
  }
  {
    // Whether it writes a system message (system_role()).
    constexpr std::string_view kNeedle = "<system probe 7f3a>";
    Json ctx = {{"messages", Json::array({{{"role", "system"}, {"content", kNeedle}},
                                          {{"role", "user"}, {"content", "probe"}}})},
                {"add_generation_prompt", false}};
    auto out = t.render_jinja(std::move(ctx));
    t.system_role_ = out.ok() && out->find(kNeedle) != std::string::npos;
  }
  return t;
}

Result<ChatTemplate> ChatTemplate::choose(const Tokenizer& tok, std::string_view name_or_source,
                                          const std::string* file_text, bool jinja,
                                          bool jinja_explicit) {
  auto text_of = [&](TokenId id) {
    return id == kTokenNull ? std::string() : tok.token_to_piece(id, /*special=*/true);
  };
  auto as_jinja = [&](std::string_view src) {
    return from_jinja(src, text_of(tok.bos()), text_of(tok.eos()), tok.add_bos(), tok.add_eos());
  };
  if (!name_or_source.empty()) {
    if (jinja && !jinja_explicit) {
      // Jinja by default only: a built-in name is that format (llama-server would render the
      // name's text; no one means that).
      if (auto named = from_name(name_or_source); named.ok()) return named;
    }
    if (jinja) {
      // As llama-server: with Jinja the text is the template, whatever it looks like.
      if (from_name(name_or_source).ok()) {
        MNEMO_LOG(kWarn) << "chat template: '" << name_or_source
                         << "' is used as a Jinja template's text (it renders as it stands), as "
                            "llama-server does with --jinja; leave --jinja out to render the "
                            "built-in format of that name";
      }
      return as_jinja(name_or_source);
    }
    if (auto named = from_name(name_or_source); named.ok()) return named;
    ChatTemplate t = detect_impl(name_or_source, /*warn=*/false);
    if (t.recognized()) return t;
    return Status::invalid_argument(fmt::format(
        "unknown chat template name '{}' (known: {}; or a template text of one of those "
        "formats; with --jinja, any Jinja template's text)",
        name_or_source.substr(0, 40), chat_template_names()));
  }
  if (file_text != nullptr) {
    if (jinja) return as_jinja(*file_text);
    return detect(*file_text);
  }
  const std::string& model_template = tok.chat_template();
  if (jinja && !model_template.empty()) {
    auto t = as_jinja(model_template);
    if (t.ok()) return t;
    MNEMO_LOG(kWarn) << "the model's " << t.status().message()
                     << "; rendering its family's format instead";
  }
  return detect(model_template);
}

std::string_view ChatTemplate::mode_name() const {
  return is_jinja() ? std::string_view("jinja") : chat_template_family_name(family_);
}

Result<std::string> ChatTemplate::render(const Json& messages, const Json& variables) const {
  if (!messages.is_array()) return Status::invalid_argument("'messages' must be an array");
  Json msgs = Json::array();
  std::vector<ChatMessage> plain;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    auto role = m.is_object() ? m.find("role") : m.end();
    if (!m.is_object() || role == m.end() || !role->is_string()) {
      return Status::invalid_argument(fmt::format("messages[{}].role must be a string", i));
    }
    std::string text;
    MNEMO_RETURN_IF_ERROR(content_text(m, i, "\n", &text));
    Json copy = m;
    if (m.contains("content") && m["content"].is_array()) copy["content"] = text;
    arguments_as(&copy, object_arguments_);
    msgs.push_back(std::move(copy));
    plain.push_back({role->get<std::string>(), std::move(text)});
  }
  // A trailing assistant message is continued, not closed.
  std::string prefill;
  if (!plain.empty() && plain.back().role == "assistant") {
    MNEMO_RETURN_IF_ERROR(content_text(messages.back(), messages.size() - 1, "\n\n", &prefill));
    msgs.erase(msgs.end() - 1);
    plain.pop_back();
  }
  if (!is_jinja()) return apply(plain, /*add_generation_prompt=*/true) + prefill;
  if (!system_role_ && !msgs.empty() && msgs[0].value("role", "") == "system") {
    // As llama-server: the first system message goes before the next message's content.
    if (msgs.size() > 1) {
      const Json& next = msgs[1]["content"];
      msgs[1]["content"] =
          plain[0].content + "\n" + (next.is_string() ? next.get<std::string>() : std::string());
    }
    msgs.erase(msgs.begin());
  }

  Json ctx = Json::object();
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it) {
      if (it.key() == "chat_template_kwargs") {
        if (!it.value().is_object()) {
          return Status::invalid_argument("'chat_template_kwargs' must be an object");
        }
        for (auto kv = it.value().begin(); kv != it.value().end(); ++kv) ctx[kv.key()] = kv.value();
      } else if (it.key() == "tools") {
        if (!it.value().is_null() && !(it.value().is_array() && it.value().empty())) {
          ctx["tools"] = it.value();
        }
      } else {
        ctx[it.key()] = it.value();
      }
    }
  }
  ctx["messages"] = std::move(msgs);
  ctx["add_generation_prompt"] = true;
  MNEMO_ASSIGN_OR_RETURN(std::string text, render_jinja(std::move(ctx)));
  return text + prefill;
}

Result<std::string> ChatTemplate::render_jinja(Json ctx) const {
  ctx["bos_token"] = bos_token_;
  ctx["eos_token"] = eos_token_;
  auto out = jinja_->render(ctx);
  if (!out.ok()) return Status(out.status().code(), "chat template: " + out.status().message());
  std::string text = std::move(out).value();
  if (add_bos_ && !bos_token_.empty() && starts_with(text, bos_token_)) {
    text.erase(0, bos_token_.size());
  }
  if (add_eos_ && !eos_token_.empty() && ends_with(text, eos_token_)) {
    text.erase(text.size() - eos_token_.size());
  }
  return text;
}

std::string apply_chat_template(std::string_view template_text,
                                const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  return ChatTemplate::detect(template_text).apply(messages, add_generation_prompt);
}

}  // namespace mnemo
