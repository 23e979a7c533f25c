// Chat templates: a list of messages -> the prompt text a chat model was trained on.
//
// Two ways to render, as llama-server has (its --jinja / --no-jinja):
//
// 1. Jinja (the default in the server): the model's tokenizer.chat_template, or a template
//    given by the operator, is run by mnemo's Jinja engine (include/mnemo/jinja.h) the way
//    Hugging Face transformers runs it, with the variables messages, add_generation_prompt,
//    bos_token, eos_token, tools (when the request has them) and the request's
//    chat_template_kwargs. As llama-server: a text part list as a message's content becomes
//    its parts joined with "\n"; a leading bos_token (trailing eos_token) is cut from the result
//    when the tokenizer adds that token itself.
//
// 2. Families (--no-jinja): llama.cpp's built-in templates, one per name llama-server accepts
//    for --chat-template (chat_template_families(): bailing ... zephyr, 54 names), rendered by
//    fixed code (src/tokenizer/chat_builtin.cc, whose comments give each format). Each format
//    was learnt from llama-server's own output and is compared with it byte for byte
//    (tests/fixtures/builtin_chat_templates.json). A few examples:
//   chatml:  <|im_start|>{role}\n{content}<|im_end|>\n, contents verbatim. If the model's
//            template writes a fixed system message when the conversation does not start with
//            one (SmolLM2, Qwen 2), that message is inserted too.
//   llama3:  <|start_header_id|>{role}<|end_header_id|>\n\n{content trimmed}<|eot_id|>
//   gemma:   <start_of_turn>{user|model}\n{content trimmed}<end_of_turn>\n; a system message is
//            no turn: its trimmed text and "\n\n" start the next user turn.
//   llama2:  [INST] {system}\n{user} [/INST]{assistant}</s>[INST] ...
//   mistral-v7: [SYSTEM_PROMPT] {system}[/SYSTEM_PROMPT][INST] {user}[/INST] {assistant}</s>
//   Formats differ in trimming, in where a system message goes (its own turn, the next user
//   turn, only as the first message, or nowhere) and in what they do with other roles (tool).
//   detect() recognises a family from distinctive substrings of a template text (the markers
//   of chatml, phi4, smolvlm, gemma, llama3, llama4, mistral-v7, llama2, command-r, chatglm,
//   granite, phi3, zephyr, vicuna, ...; as llama.cpp's llm_chat_detect_template does, with a
//   shorter list, each rule checked against llama-server's pick); a missing or unrecognised
//   template logs a warning and falls back to chatml.
// add_generation_prompt appends the opening of an assistant turn (some formats have none). No
// BOS is written: the tokenizer adds it (Tokenizer::tokenize with add_special). Render the
// result with parse_special = true so the markers become their control tokens.
//
// Which one, as llama-server: with Jinja, --chat-template TEXT is always the template's text
// (without markup it renders as it stands; a built-in name too); with --no-jinja it is a
// built-in name or a text whose family detect() recognises (see choose()). A Jinja template
// that writes no system message gets the first system message folded into the next message
// (system_role()).
//
// Both ways: when the conversation ends with an assistant message, it is a reply to continue
// (llama-server's prefill): the messages before it are rendered with the generation prompt and
// its content is appended (text parts joined with "\n\n", as llama-server).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mnemo/status.h"

namespace mnemo {

class Tokenizer;
namespace jinja {
class Template;
}

/// One message of a conversation. role: "system", "user", "assistant" (others are written
/// as given).
struct ChatMessage {
  std::string role;
  std::string content;
};

/// Why a media part (an image, audio or file) of a message or prompt is refused: the text
/// every API surface appends to the error naming the part.
inline constexpr std::string_view kNoMediaModel =
    "mnemo has no vision or audio model (no multimodal projector): send text only";

/// The template families mnemo renders by fixed code: llama.cpp's built-in templates, one per
/// name llama-server accepts for --chat-template (chat_template_family_name gives the name).
enum class ChatTemplateFamily : uint8_t {
  kChatml,
  kLlama3,
  kGemma,
  kBailing,
  kBailingThink,
  kBailing2,
  kChatglm3,
  kChatglm4,
  kCommandR,
  kDeepseek,
  kDeepseekOcr,
  kDeepseek2,
  kDeepseek3,
  kExaoneMoe,
  kExaone3,
  kExaone4,
  kFalcon3,
  kGigachat,
  kGlmedge,
  kGptOss,
  kGranite,
  kGranite40,
  kGranite41,
  kGrok2,
  kHunyuanDense,
  kHunyuanMoe,
  kHunyuanVl,
  kKimiK2,
  kLlama2,
  kLlama2Sys,
  kLlama2SysBos,
  kLlama2SysStrip,
  kLlama4,
  kMegrez,
  kMinicpm,
  kMistralV1,
  kMistralV3,
  kMistralV3Tekken,
  kMistralV7,
  kMistralV7Tekken,
  kMonarch,
  kOpenchat,
  kOrion,
  kPanguEmbedded,
  kPhi3,
  kPhi4,
  kRwkvWorld,
  kSeedOss,
  kSmolvlm,
  kSolarOpen,
  kVicuna,
  kVicunaOrca,
  kYandex,
  kZephyr,
};

/// The family's name as llama-server spells it ("chatml", "llama3", "mistral-v7", ...).
std::string_view chat_template_family_name(ChatTemplateFamily family);

/// Every family, in the order llama-server's --help lists their names (alphabetical).
std::vector<ChatTemplateFamily> chat_template_families();

/// The families' names in that order, joined with ", " (for help texts and errors).
std::string chat_template_names();

/// The family's fixed format for `messages` (contents verbatim, roles as given; see the file
/// comment), ending with the opening of an assistant turn when add_generation_prompt (a few
/// formats have none). Formats learnt from llama-server's output (src/tokenizer/
/// chat_builtin.cc); never fails.
std::string render_chat_family(ChatTemplateFamily family, const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt);

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

  /// A Jinja template (see the file comment). bos_token / eos_token: the texts the template
  /// sees; add_bos / add_eos: whether the tokenizer adds those tokens itself (then the rendered
  /// text's own copy is cut). The family is detected from `source` too (family()). Errors:
  /// InvalidArgument "chat template: line N: ..." for a template the engine cannot parse.
  static Result<ChatTemplate> from_jinja(std::string_view source, std::string bos_token,
                                         std::string eos_token, bool add_bos, bool add_eos);

  /// The template a server or `mnemo run` uses, chosen as llama-server chooses:
  ///   - `name_or_source` a built-in name and jinja on by default (not `jinja_explicit`):
  ///     that built-in format (llama-server renders the name's text there);
  ///   - `name_or_source` non-empty and jinja: Jinja source, whatever it is: a text without
  ///     markup renders as it stands, and so does a built-in name with --jinja given (a warning
  ///     says so);
  ///   - `name_or_source` non-empty and !jinja: a built-in name's family, else the family
  ///     detect() recognises in the text (InvalidArgument listing the names when none);
  ///   - else `file_text` non-null: Jinja source when jinja, else its detected family;
  ///   - else the model's tokenizer.chat_template: Jinja when jinja (a template the engine
  ///     cannot parse logs a warning and falls back to its family), else its family.
  /// Errors: InvalidArgument naming the problem (a syntax error's line).
  static Result<ChatTemplate> choose(const Tokenizer& tok, std::string_view name_or_source,
                                     const std::string* file_text, bool jinja,
                                     bool jinja_explicit = false);

  /// True when rendered by the Jinja engine.
  bool is_jinja() const { return jinja_ != nullptr; }
  /// The Jinja source ("" for a family).
  const std::string& source() const { return source_; }
  /// "jinja" or the family name.
  std::string_view mode_name() const;

  /// The family's format for `messages` (also for a Jinja template: its detected family); with
  /// add_generation_prompt, ends with the opening of an assistant turn.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  /// The prompt for an OpenAI-style conversation, ending with the opening of an assistant turn
  /// (or continuing a trailing assistant message). messages: a JSON array of objects with
  /// "role" and "content" (a string, null, or an array of {"type": "text", "text": ...}) and,
  /// for Jinja, whatever else the template reads (tool_calls, reasoning_content, ...).
  /// variables: more template variables (tools, chat_template_kwargs) as a JSON object; a
  /// family ignores them. Errors: InvalidArgument for a malformed message or a Jinja error
  /// (raise_exception's message), OutOfRange when the template runs past its limits.
  Result<std::string> render(const nlohmann::ordered_json& messages,
                             const nlohmann::ordered_json& variables) const;

  /// Whether the Jinja template reads an assistant tool call's function.arguments as an object
  /// (`| tojson`, `| items`: most tool-calling templates) rather than as the JSON text OpenAI
  /// clients send. Found once, when the template is made, by rendering a probe conversation with
  /// object arguments: objects when that succeeds, shows the probe's value and no Python dict
  /// literal. render() then hands the template each call's arguments parsed into an object
  /// (arguments that are not a JSON object's text stay as given), or as text.
  bool object_arguments() const { return object_arguments_; }

  /// Whether the Jinja template writes a system message: found once, when the template is made,
  /// by rendering a probe conversation (a system message, then a user message) and looking for
  /// the system text in the result (a template that raises on it, as Gemma 2's does, has none).
  /// Without it, render() does what llama-server does: a conversation's first message, when it
  /// is a system message, is removed and its text, followed by "\n", is put before the content
  /// of the message after it (whatever its role; nothing when there is none). Later system
  /// messages are passed as they are. True for a family.
  bool system_role() const { return system_role_; }

 private:
  // detect(), with the fallback's warning only when `warn`.
  static ChatTemplate detect_impl(std::string_view template_text, bool warn);
  // Renders `ctx` (messages and variables already in the template's form).
  Result<std::string> render_jinja(nlohmann::ordered_json ctx) const;
  ChatTemplateFamily family_ = ChatTemplateFamily::kChatml;
  bool recognized_ = true;
  std::string default_system_;
  std::shared_ptr<const jinja::Template> jinja_;
  std::string source_;
  std::string bos_token_, eos_token_;
  bool add_bos_ = false, add_eos_ = false;
  bool object_arguments_ = false;
  bool system_role_ = true;
};

/// Shorthand: ChatTemplate::detect(template_text).apply(messages, add_generation_prompt).
std::string apply_chat_template(std::string_view template_text,
                                const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

}  // namespace mnemo
