// The machinery every format parser shares: the state of one parse, the reasoning split, the
// scan of the answer for call markup (with partial openers held back), and the helpers the
// call parsers build on. Internal to chat_parse/.
//
// One parse runs from scratch over the whole text (no state is kept between the parses of a
// stream); the streaming contract of chat_parse.h follows from each step below only ever
// appending, for a longer text, to what it gave for a shorter one.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat_parse/chat_parse.h"
#include "chat_parse/json_scan.h"

namespace mnemo::chat_parse {

/// The state of one parse: the text, the options and what was found so far. content and
/// reasoning are raw (trimmed at the end by finish()).
struct Ctx {
  std::string_view text;
  const ParseOptions& opt;
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> calls;

  Ctx(std::string_view t, const ParseOptions& o) : text(t), opt(o) {}
  bool partial() const { return opt.is_partial; }
  size_t size() const { return text.size(); }
  bool starts_with(size_t pos, std::string_view s) const {
    return pos <= text.size() && text.substr(pos).starts_with(s);
  }
  /// text[pos..] is a proper prefix of `s` (more text could complete it).
  bool prefix_of(size_t pos, std::string_view s) const {
    const std::string_view rest = text.substr(std::min(pos, text.size()));
    return rest.size() < s.size() && s.starts_with(rest);
  }
  /// The parameters schema of the declared tool `name`, or nullptr.
  const nlohmann::ordered_json* tool_schema(std::string_view name) const;
};

/// How a call section (markup starting at an opener) ended.
enum class Outcome : unsigned char {
  kDone,        // parsed; the section ends at `end`
  kIncomplete,  // the text ends inside it (partial: the section's calls so far stand)
  kInvalid,     // not this format's markup: its opener is content
};

struct SectionResult {
  Outcome outcome = Outcome::kInvalid;
  size_t end = 0;
  std::vector<ToolCall> calls;  // kDone: all; kIncomplete: whole calls and the one being written
};

/// A kind of markup found in the answer: what starts it, and its parser (called with text[pos]
/// at one of the openers).
struct Section {
  std::vector<std::string_view> openers;
  SectionResult (*parse)(Ctx& ctx, size_t pos);
};

/// Reasoning tags of a format.
struct ThinkTags {
  std::string_view open;
  std::string_view close;
};

/// Splits the reasoning at `pos` (the output's start) into ctx.reasoning (or, with
/// ReasoningFormat::kNone, ctx.content as written). Returns where the answer starts
/// (ctx.size() when the reasoning runs to the end or is held back).
size_t split_reasoning(Ctx& ctx, size_t pos, const ThinkTags& tags);

/// Scans text[pos..] for the sections' openers: text between them is content, each section is
/// parsed; a partial text's trailing piece that may start an opener is held back.
void scan_sections(Ctx& ctx, size_t pos, std::span<const Section> sections);

/// The answer at pos is content, with a partial opener of `openers` held back at its end.
void add_content(Ctx& ctx, size_t pos, size_t end, std::span<const std::string_view> openers);

/// Trims and (partial) cuts incomplete UTF-8 from content and reasoning; returns the message.
ChatMsg finish(Ctx& ctx);

/// A section that is just a marker to drop (Granite's <response>): kDone past it.
SectionResult drop_marker(Ctx& ctx, size_t pos, std::string_view marker);

/// Where an expected closing tag stands at text[pos] (after white space).
enum class Close : unsigned char { kFound, kMaybe, kAbsent };
Close find_close(const Ctx& ctx, size_t pos, std::string_view tag, size_t* end);

/// The keys of a JSON call object.
struct CallKeys {
  std::string_view name = "name";
  std::string_view args = "arguments";
  std::string_view args_alt = "parameters";
  std::string_view id = "id";  // "" when the format gives no ids
  /// The id may come after the arguments (Mistral Nemo): a partial call is held back until its
  /// id or its end is seen, so that the call appears with its id.
  bool hold_for_id = false;
};

/// A JSON call object at text[pos] ('{').
struct CallParse {
  Scan status = Scan::kInvalid;
  size_t end = 0;
  std::optional<ToolCall> call;  // kComplete: always; kIncomplete: once the name is known
};
CallParse parse_call_object(const Ctx& ctx, size_t pos, const CallKeys& keys);

/// The arguments JSON at text[pos] (after white space): the model's text of the value.
struct ArgsParse {
  Scan status = Scan::kInvalid;
  size_t end = 0;
  std::string args;  // kComplete: the value's text; kIncomplete: the text so far
};
ArgsParse parse_args(const Ctx& ctx, size_t pos);

/// A section of calls as a JSON array at text[pos] ('[') then `closer` ("" for none).
SectionResult parse_call_array(Ctx& ctx, size_t pos, const CallKeys& keys, std::string_view closer);

/// One JSON call object at text[pos] ('{'), or (a '[' there) an array of them, then `closer`
/// (optional, as close_section).
SectionResult parse_json_calls(Ctx& ctx, size_t pos, const CallKeys& keys, std::string_view closer);

/// Ends a section whose calls are whole at `pos`: the closing tag (optional, kMaybe while it
/// may still come) then kDone. Used by the formats whose closer a model may leave out.
SectionResult close_section(const Ctx& ctx, size_t pos, std::string_view closer,
                            std::vector<ToolCall> calls);

/// Name characters of the tagged formats ([A-Za-z0-9_.:-]), at least one.
bool is_name(std::string_view s);

/// Whether the JSON schema `s` only admits strings ("type": "string", a list of it and "null",
/// a string enum or const, anyOf / oneOf of such): an XML value for it is its raw text.
bool string_schema(const nlohmann::ordered_json& s);

/// `s` without a trailing piece of `tag` (its longest suffix that is a proper prefix of `tag`).
std::string_view drop_partial(std::string_view s, std::string_view tag);

/// `s` without JSON white space at either end.
std::string_view trim_view(std::string_view s);

/// Llama 3.x's and Functionary's <|python_tag|> section: NAME.call(k=JSON, ...) or code.
SectionResult parse_python_tag(Ctx& ctx, size_t pos);

/// Parsers of the format families (formats_*.cc): each fills ctx from text[pos..] (the answer
/// after the reasoning).
void parse_json_family(Ctx& ctx, size_t pos);
void parse_tagged_family(Ctx& ctx, size_t pos);
void parse_xml_family(Ctx& ctx, size_t pos);
void parse_llama3(Ctx& ctx, size_t pos);
void parse_generic(Ctx& ctx, size_t pos);
/// gpt-oss parses its whole text (its reasoning is a channel).
ChatMsg parse_gpt_oss(Ctx& ctx);

/// The small-model fallback on a parsed message (chat_parse.h); may hold back or convert content.
void apply_bare_json_fallback(const ParseOptions& opt, ChatMsg* msg);

/// The reasoning tags of a format (empty open: none).
ThinkTags think_tags(ChatFormat f);

}  // namespace mnemo::chat_parse
