// Chat templates: a list of messages -> the prompt text a chat model was trained on.
//
// mnemo does not run Jinja. Like llama.cpp's llm_chat_detect_template / llm_chat_apply_template
// (src/llama-chat.cpp), it recognises the template family from distinctive substrings of the
// model's tokenizer.chat_template and renders that family's format itself:
//
//   chatml, recognised by "<|im_start|>":
//       <|im_start|>{role}\n{content}<|im_end|>\n
//   gemma, recognised by "<start_of_turn>":
//       <start_of_turn>{user|model}\n{content}<end_of_turn>\n
//   llama3, recognised by "<|start_header_id|>" and "<|end_header_id|>":
//       <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//
// (Checked in this order, as llama.cpp does.) Family rules, as llama.cpp renders them:
//   - chatml: content verbatim. If the model's template writes a fixed system message when the
//     conversation does not start with one (SmolLM2, Qwen 2), that message is inserted too.
//   - llama3: content trimmed of leading/trailing whitespace.
//   - gemma: content trimmed; role "assistant" becomes "model"; system messages are not turns:
//     their trimmed text, followed by "\n\n", is put at the start of the next user turn.
// add_generation_prompt appends the opening of an assistant turn. No BOS is written: the
// tokenizer adds it (Tokenizer::tokenize with add_special). Render the result with
// parse_special = true so the markers become their control tokens.
//
// A missing or unrecognised template logs a warning and falls back to chatml.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/status.h"

namespace mnemo {

/// One message of a conversation. role: "system", "user", "assistant" (others are written
/// as given).
struct ChatMessage {
  std::string role;
  std::string content;
};

/// The template families mnemo renders.
enum class ChatTemplateFamily : uint8_t { kChatml, kLlama3, kGemma };

/// "chatml", "llama3", "gemma".
std::string_view chat_template_family_name(ChatTemplateFamily family);

/// A recognised chat template. Cheap to copy; immutable; thread-safe.
class ChatTemplate {
 public:
  /// Recognises the family of a Jinja template string (a model's tokenizer.chat_template) or of
  /// a family name ("chatml", "llama3", "gemma"). Empty or unrecognised: a warning naming the
  /// problem, and chatml (recognized() is then false).
  static ChatTemplate detect(std::string_view template_text);
  /// By family name; InvalidArgument listing the names for any other string.
  static Result<ChatTemplate> from_name(std::string_view name);
  static ChatTemplate from_family(ChatTemplateFamily family);

  ChatTemplateFamily family() const { return family_; }
  /// False when detect() fell back to chatml.
  bool recognized() const { return recognized_; }
  /// chatml only: the system message the model's template inserts when the conversation has
  /// none ("" if it inserts none).
  const std::string& default_system() const { return default_system_; }

  /// The prompt for `messages`; with add_generation_prompt, ends with the opening of an
  /// assistant turn.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  ChatTemplateFamily family_ = ChatTemplateFamily::kChatml;
  bool recognized_ = true;
  std::string default_system_;
};

/// Shorthand: ChatTemplate::detect(template_text).apply(messages, add_generation_prompt).
std::string apply_chat_template(std::string_view template_text,
                                const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

}  // namespace mnemo
