// Parsing a chat model's output into an OpenAI-style assistant message: content, the reasoning
// ("thinking") split into reasoning_content, and tool calls parsed from the model's own markup;
// streamed (a prefix of the output at a time) and not. Also the grammar that constrains a
// model to its tool-call markup. This module renders nothing: the prompt (tools included) is
// the chat template's job (src/tokenizer/chat.cc).
//
// Formats (ChatFormat), chosen from the chat template's source (detect_chat_format) by markers
// the template writes, as llama-server does. What each model writes, from llama.cpp's
// docs/function-calling.md and tests/test-chat.cpp (as facts; the code and test data here are
// our own) and the model cards / chat templates of each family:
//   kGeneric        no native tool format: the server asks the model (a system message) to answer
//                   a JSON object {"tool_call": {"name": N, "arguments": {...}}}, {"tool_calls":
//                   [{"name", "arguments", "id"}, ...]} (parallel) or {"response": "..."}
//                   (llama.cpp's "Generic" format); without tools the output is content.
//   kGenericThink   the same, after a <think>...</think> split (templates that think but have no
//                   tool format: SmolLM3, RWKV world, DeepSeek V3.2 / V4's DSML, ...).
//   kHermes         Hermes 2 Pro / 3, Qwen 2.5, Qwen 3, QwQ, Granite 4, MiMo-VL, Bielik, Reka:
//                   <tool_call>{"name": N, "arguments": {...}}</tool_call>, repeated (a JSON array
//                   of calls in one block is taken too); <think>.
//   kQwen3Coder     Qwen3-Coder, Qwen 3.5, Nemotron 3 Nano, StepFun 3.5: <tool_call>\n<function=N>
//                   \n<parameter=K>\nVALUE\n</parameter>\n</function>\n</tool_call> (the first
//                   call may omit <tool_call>; Hermes' JSON inside <tool_call> is taken too);
//                   <think>.
//   kSeedOss        ByteDance Seed-OSS: the same inside <seed:tool_call>; <seed:think>.
//   kMiniMaxM2      MiniMax M2: <minimax:tool_call><invoke name="N"><parameter name="K">V
//                   </parameter></invoke></minimax:tool_call>; <think>.
//   kGlm45          GLM 4.5 / 4.6 / 4.7, Spark 2.5, Laguna, Ling 3: <tool_call>N\n<arg_key>K
//                   </arg_key>\n<arg_value>V</arg_value>\n</tool_call>; <think>.
//     (XML formats: a VALUE of a parameter whose schema type is string is the raw text; others
//     are parsed as JSON, and kept as a string when that fails. Qwen3-Coder strips one newline
//     either side of a value.)
//   kLlama3         Llama 3.1 / 3.2 / 3.3: the whole answer a JSON object {"name": N,
//                   "parameters": {...}} (also {"type": "function", "name": ...} and
//                   "arguments"), several separated by ';'; <|python_tag|>NAME.call(k=JSON, ...)
//                   for built-in tools (brave_search, wolfram_alpha, ...), <|python_tag|>CODE for
//                   the code interpreter: tool "python" ("ipython" when only that is declared)
//                   with {"code": CODE}.
//   kFunctionaryV31 Functionary v3.1: <function=N>{...}</function>; <|python_tag|>CODE.
//   kFirefunctionV2 FireFunction v2: functools[{"name": N, "arguments": {...}}, ...].
//   kMistralNemo    Mistral Nemo / 7B v0.3: [TOOL_CALLS][{"name": N, "arguments": {...},
//                   "id": "abcdefghi"}, ...].
//   kMistral        Mistral Small 3.2, Devstral, Magistral, Ministral 3: [TOOL_CALLS]N[ARGS]{...}
//                   (Small 3.2: [TOOL_CALLS]N[CALL_ID]ID[ARGS]{...}), repeated; [THINK]..[/THINK].
//                   Both Mistral parsers read both forms.
//   kDeepSeekR1     DeepSeek R1 and its distills:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
//                   <｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>;
//                   <think>.
//   kDeepSeekV31    DeepSeek V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}
//                   <｜tool▁call▁end｜><｜tool▁calls▁end｜>; <think> (the prompt opens it).
//   kGranite        Granite 3.x: <|tool_call|>[{"name": N, "arguments": {...}}, ...]; <think>,
//                   and the answer inside <response>...</response> when thinking.
//   kKimiK2         Kimi K2 / K2 Thinking: <|tool_calls_section_begin|><|tool_call_begin|>
//                   functions.N:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>
//                   <|tool_calls_section_end|> (id "functions.N:IDX"); <think>.
//   kCommandR7B     Command R7B, Cohere2 MoE: <|START_THINKING|>..<|END_THINKING|>,
//   <|START_ACTION|>
//                   [{"tool_call_id": "0", "tool_name": N, "parameters": {...}}]<|END_ACTION|>,
//                   answer inside <|START_RESPONSE|>/<|START_TEXT|> markers.
//   kApriel15       Apriel 1.5: <thinking>..</thinking>, <tool_calls>[{...}, ...]</tool_calls>.
//                   Apriel 1.6 writes the same calls (its reasoning, ended by [BEGIN FINAL
//                   RESPONSE], is not split: it stays content).
//   kNemotronV2     Nemotron Nano v2: <think>, <TOOLCALL>[{...}, ...]</TOOLCALL>.
//   kGptOss         gpt-oss (harmony): messages <|channel|>analysis<|message|>...<|end|>
//   (reasoning),
//                   <|start|>assistant<|channel|>final<|message|>... (content), tool calls
//                   <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}<|call|>
//                   (the recipient may also stand before <|channel|>); a call to a built-in
//                   recipient (python, browser.*, container.*) is dropped.
//
// Small models' tool calls: a small model (Qwen2.5-Coder-1.5B, greedy) answers a tool request
// with a fenced JSON object instead of its template's markup:
//   ```json
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   ```
// With ParseOptions::bare_json_calls (the server sets it when the request declares tools and
// tool_choice is auto), an answer that is, whole (whitespace and one ``` / ```json fence around
// it allowed), one JSON object {"name": N, "arguments" | "parameters": {...}} (or the same inside
// one more pair of braces, {{...}}, as Qwen 2.5's rendered template shows its call format and
// small models copy it) becomes a call when N
// is a declared tool AND the arguments match that tool's parameters schema: the schema is turned
// into a grammar (grammar::json_schema_to_gbnf) and the arguments' compact JSON text (keys put in
// the schema's order) must be a sentence of it (grammar::Matcher). A schema that cannot be
// converted switches the fallback off for that tool. Anything else stays content. While
// streaming such an answer is held back (neither content nor call) until it is known.
//
// Decisions (each tested):
//   - Markup never reaches content. A call whose body is malformed (bad JSON, an unknown
//     structure) leaves its text in content and parsing goes on after its opener. A call whose
//     body is complete but whose closer is missing (the model stopped on it, or a stop string
//     cut it) is a call. A call section whose body is unfinished at the end of a final
//     (non-partial) text (the model ran out of tokens inside it) is dropped, calls and text:
//     llama-server leaves its text in content, but markup must not reach the content; a partial
//     text shows the calls written so far.
//   - Reasoning is recognized at the start of the output (after whitespace) or from its first
//     byte when thinking_forced_open. Reasoning never closed is reasoning to the end (the model
//     ran out of tokens thinking). ReasoningFormat::kNone keeps the reasoning's text, tags
//     included, in content, but still does not look for tool calls inside it.
//   - content and reasoning_content are trimmed of white space at both ends.
//   - parse_tool_calls false (no tools, or tool_choice none): every markup stays content, except
//     reasoning and gpt-oss's channel structure (whose tool-call messages then stay as raw text).
//   - Several calls are parsed whatever parallel_tool_calls says (it shapes the grammar only).
//   - Streaming: see parse_chat_output and diff_chat_msg. Each parse reads the whole text again
//     (no state between parses), linear in its length: about 0.1 ms per 100 KB on one core, 0.4
//     ms for a 100 KB argument of an XML format.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/status.h"

namespace mnemo::chat_parse {

/// The tool-call and reasoning markup a model writes (see the file comment for each).
enum class ChatFormat : uint8_t {
  kGeneric,
  kGenericThink,
  kHermes,
  kQwen3Coder,
  kSeedOss,
  kMiniMaxM2,
  kGlm45,
  kLlama3,
  kFunctionaryV31,
  kFirefunctionV2,
  kMistralNemo,
  kMistral,
  kDeepSeekR1,
  kDeepSeekV31,
  kGranite,
  kKimiK2,
  kCommandR7B,
  kApriel15,
  kNemotronV2,
  kGptOss,
};

/// A stable lower-case name ("hermes", "qwen3-coder", ...), for logs and /props.
std::string_view chat_format_name(ChatFormat f);

/// The format whose markers the Jinja template source holds (rules in detect.cc; first match
/// wins); kGeneric (kGenericThink when it has </think>) when none matches.
ChatFormat detect_chat_format(std::string_view template_source);

/// What happens to the model's thinking.
enum class ReasoningFormat : uint8_t {
  kNone,      // stays in content as written (tags included)
  kDeepSeek,  // split into reasoning_content
  kAuto,      // as kDeepSeek
};

/// A declared tool: the function's name and its parameters JSON schema (null: none given).
struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;
};

/// How to parse one output (or the prefix of one, while streaming).
struct ParseOptions {
  ChatFormat format = ChatFormat::kGeneric;
  ReasoningFormat reasoning = ReasoningFormat::kAuto;
  /// The prompt ended with the opening think tag (Qwen3 / DeepSeek R1 / GLM 4.7 generation
  /// prompts), so the output starts inside the reasoning.
  bool thinking_forced_open = false;
  /// The text is a prefix of the output (streaming): see parse_chat_output.
  bool is_partial = false;
  /// false when the request has no tools or tool_choice is none: markup stays content.
  bool parse_tool_calls = true;
  /// The request allows several calls (used by tool_call_grammar; the parsers take any number).
  bool parallel_tool_calls = false;
  /// The small-model fallback of the file comment (set with tools and tool_choice auto).
  bool bare_json_calls = false;
  /// The request's tools: types the values of XML formats and validates the fallback.
  std::vector<ToolSpec> tools;
};

/// One tool call. arguments is a JSON text: for JSON formats the model's own text of the
/// arguments value (whitespace as written), for XML formats a compact object built from the
/// parameters in the model's order; in a partial parse, a prefix of the final text.
struct ToolCall {
  std::string id;  // the id the format gives ("functions.get_weather:0", Mistral's); else empty
  std::string name;
  std::string arguments;
  bool operator==(const ToolCall&) const = default;
};

/// The parsed assistant message.
struct ChatMsg {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  bool operator==(const ChatMsg&) const = default;
};

/// Parses `text` (the model's output; with is_partial, the output so far). Never fails: what
/// is not markup of opt.format is content.
///
/// Streaming contract, for texts P1, P2, ... each a prefix of the next, parsed with is_partial
/// (the last one may be parsed final): content and reasoning_content of each parse are prefixes
/// of the next one's; tool_calls only grow; a call appears once its name is known, with its id
/// (a call of a format whose JSON object may carry an "id" after the arguments, as Mistral
/// Nemo's, the generic format's, Command R7B's and Apriel's, waits for the id or for its end);
/// its arguments are a prefix of its later arguments. A trailing piece that may be the start of
/// markup ("<tool_", "[TOOL", "<thi") or of a UTF-8 character is held back until it is known. This
/// holds for every prefix of an output that is well formed; a call whose markup turns out malformed
/// after it appeared can vanish (diff_chat_msg reports that as an error).
ChatMsg parse_chat_output(std::string_view text, const ParseOptions& opt);

/// Whether a rendered prompt leaves the model inside its reasoning: it ends (white space aside)
/// with the format's opening think tag, as the generation prompts of Qwen3 (thinking), DeepSeek
/// R1 and V3.1 (thinking) and GLM 4.7 do; then set ParseOptions::thinking_forced_open. false for
/// formats without think tags (gpt-oss's channels included).
bool prompt_opens_thinking(ChatFormat format, std::string_view prompt);

/// The marker strings of a format: its reasoning tags (empty for a format without them) and every
/// piece of its markup (the tags, tool-call openers, closers and separators, gpt-oss's channel
/// markers). A server renders the tokens whose text is one of `markup` as text even when they
/// are control tokens, so the parser sees them (llama-server's "preserved tokens"), and ends a
/// spent reasoning budget with think_close.
struct FormatMarkers {
  std::string think_open, think_close;
  std::vector<std::string> markup;
};
FormatMarkers format_markers(ChatFormat format);

/// A new piece of one tool call, for an OpenAI "tool_calls" delta.
struct ToolCallDelta {
  size_t index = 0;       // position in ChatMsg::tool_calls
  std::string id;         // set in the call's first delta only (may be empty: make one)
  std::string name;       // set in the call's first delta only
  std::string arguments;  // what to append to the arguments sent so far
  bool operator==(const ToolCallDelta&) const = default;
};

/// What a parse added to the previous one.
struct ChatMsgDiff {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning_content.empty() && tool_calls.empty(); }
};

/// The deltas from `before` to `after` (two successive parses of one stream). Errors:
/// Internal when `after` does not extend `before` (a field is not a prefix of its successor, a
/// call vanished or changed its name or id), which the streaming contract rules out for well
/// formed output.
Result<ChatMsgDiff> diff_chat_msg(const ChatMsg& before, const ChatMsg& after);

/// Which calls a grammar must force.
struct ToolChoice {
  enum class Kind : uint8_t { kAuto, kRequired, kNamed };
  Kind kind = Kind::kAuto;
  std::string name;  // kNamed: the function
};

/// A grammar for a format's tool-call markup.
struct ToolGrammar {
  /// GBNF (include/mnemo/grammar.h) whose root is one call (or, with parallel_tool_calls, one or
  /// more) in the format's markup, each call's arguments matching its tool's schema. The
  /// grammar is over text: special-token markers ("[TOOL_CALLS]", "<|tool_call|>") are their
  /// text, so a sampler must match them against the token's text.
  std::string gbnf;
  /// The format's openers: with tool_choice auto the grammar applies lazily, from the first
  /// occurrence of one of them in the generated text (the trigger is the grammar's first text).
  /// kLlama3's JSON triggers count only at the start of the answer.
  std::vector<std::string> triggers;
  /// true for tool_choice auto (apply after a trigger); false: the whole output is the grammar.
  bool lazy = true;
};

/// The grammar for calling `tools` in `format`. kGeneric / kGenericThink give the whole JSON
/// answer of the generic format (never lazy). Errors: InvalidArgument for no tools, a named
/// tool that is not declared, or a parameters schema json_schema_to_gbnf refuses (XML formats
/// also need an object schema with "properties"); NotSupported for formats without a grammar.
Result<ToolGrammar> tool_call_grammar(ChatFormat format, std::span<const ToolSpec> tools,
                                      const ToolChoice& choice, bool parallel_tool_calls);

}  // namespace mnemo::chat_parse
