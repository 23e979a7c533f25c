// Chat template families (see include/mnemo/chat.h). Detection and formats follow llama.cpp's
// src/llama-chat.cpp (llm_chat_detect_template, llm_chat_apply_template).
#include "mnemo/chat.h"

#include <cctype>

#include "mnemo/log.h"

namespace mnemo {

namespace {

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

// Leading and trailing ASCII whitespace removed (llama.cpp's trim uses isspace).
std::string trim(std::string_view s) {
  size_t a = 0;
  size_t b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
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

}  // namespace

std::string_view chat_template_family_name(ChatTemplateFamily family) {
  switch (family) {
    case ChatTemplateFamily::kChatml:
      return "chatml";
    case ChatTemplateFamily::kLlama3:
      return "llama3";
    case ChatTemplateFamily::kGemma:
      return "gemma";
  }
  return "?";
}

ChatTemplate ChatTemplate::from_family(ChatTemplateFamily family) {
  ChatTemplate t;
  t.family_ = family;
  return t;
}

Result<ChatTemplate> ChatTemplate::from_name(std::string_view name) {
  for (auto f :
       {ChatTemplateFamily::kChatml, ChatTemplateFamily::kLlama3, ChatTemplateFamily::kGemma}) {
    if (name == chat_template_family_name(f)) return from_family(f);
  }
  return Status::invalid_argument("unknown chat template name '" + std::string(name) +
                                  "' (known: chatml, llama3, gemma)");
}

ChatTemplate ChatTemplate::detect(std::string_view tmpl) {
  auto by_name = from_name(tmpl);
  if (by_name.ok()) return by_name.value();
  ChatTemplate t;
  if (contains(tmpl, "<|im_start|>")) {
    t.family_ = ChatTemplateFamily::kChatml;
    t.default_system_ = find_default_system(tmpl);
  } else if (contains(tmpl, "<start_of_turn>")) {
    t.family_ = ChatTemplateFamily::kGemma;
  } else if (contains(tmpl, "<|start_header_id|>") && contains(tmpl, "<|end_header_id|>")) {
    t.family_ = ChatTemplateFamily::kLlama3;
  } else {
    t.family_ = ChatTemplateFamily::kChatml;
    t.recognized_ = false;
    if (tmpl.empty()) {
      MNEMO_LOG(kWarn) << "chat template: the model has no tokenizer.chat_template; using chatml "
                          "(<|im_start|>role ... <|im_end|>), which may not be what it expects";
    } else {
      MNEMO_LOG(kWarn) << "chat template: not a known family (chatml, llama3, gemma): '"
                       << tmpl.substr(0, 60) << (tmpl.size() > 60 ? "..." : "")
                       << "'; using chatml";
    }
  }
  return t;
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  std::string out;
  switch (family_) {
    case ChatTemplateFamily::kChatml:
      if (!default_system_.empty() && !messages.empty() && messages[0].role != "system") {
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      }
      for (const ChatMessage& m : messages) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatTemplateFamily::kLlama3:
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) +
               "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplateFamily::kGemma: {
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system += trim(m.content);
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        out += "<start_of_turn>" + role + "\n";
        if (!system.empty() && role != "model") {
          out += system + "\n\n";
          system.clear();
        }
        out += trim(m.content) + "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }
  }
  return out;
}

std::string apply_chat_template(std::string_view template_text,
                                const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  return ChatTemplate::detect(template_text).apply(messages, add_generation_prompt);
}

}  // namespace mnemo
