// Tool calls and reasoning for the chat surfaces (OpenAI chat completions, Anthropic messages,
// OpenAI responses): what a chat request asks of the model's output, and the assistant message
// its text becomes, whole or streamed. The parsing itself is src/chat_parse (the formats, their
// detection from the template, the small-model fallback, the tool-call grammar); this file is
// the request side of it (docs/api.md):
//   - "tools" (OpenAI chat's [{"type": "function", "function": {"name", "description",
//     "parameters"}}]): each name and parameters schema checked; the template renders them;
//   - "tool_choice": "none" (the text stays content), "auto" (calls parsed; the format's
//     grammar applies lazily from its opener, and a fenced or bare JSON call of a declared tool
//     whose arguments match its schema counts: small models answer so), "required" or
//     {"type": "function", "function": {"name"}} (the grammar constrains the answer from the
//     first token: a call, of that tool, whose arguments match its schema);
//     "parallel_tool_calls" lets the grammar take several calls (default: true where the
//     template has a tool-call format of its own, false for the generic JSON answer, as
//     llama-server);
//   - "reasoning_format" (none | deepseek | auto, over --reasoning-format) and
//     "reasoning_budget_tokens" (over --reasoning-budget): the thinking split into
//     reasoning_content, and its length bounded (the end marker is then generated, and the
//     answer follows).
// Runs on HTTP threads.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat_parse/chat_parse.h"
#include "server/request.h"

namespace mnemo::server {

/// ChatDefaults for a server whose chat template's source is `template_source` ("" for a
/// family's fixed format): the format detected, its markers, the tokens of its end-of-thinking
/// marker and the control tokens among its markers (each marker that tokenizes, special tokens
/// parsed, to one control token).
ChatDefaults chat_defaults(std::string_view template_source, const Tokenizer& tok,
                           chat_parse::ReasoningFormat reasoning, int32_t reasoning_budget);

/// Reads "tools", "tool_choice", "parallel_tool_calls", "reasoning_format" and
/// "reasoning_budget_tokens" of a chat body whose prompt (rendered) is `prompt_text`, and sets
/// p->chat and p->req's grammar, grammar_triggers, preserved_tokens and reasoning. Call after
/// parse_sampling. Errors: InvalidArgument naming the field: a tool that is not {"type":
/// "function", "function": {"name": non-empty, "parameters": object}}, two tools of one name, a
/// schema the grammar cannot hold when the choice forces a call (the keyword named), a
/// tool_choice naming no declared tool or "required" without tools, tools together with
/// "grammar" / "json_schema" / "response_format" (as llama-server), a bad reasoning field.
Status parse_chat_output(const Json& body, std::string_view prompt_text, const ApiDefaults& d,
                         ParsedCompletion* p);

/// The assistant message of a finished completion: the text parsed as p.chat says (all of it the
/// content when !p.chat.parse), with every tool call given an id in *ids (which holds the ids a
/// stream already sent, e.g. r.chat.call_ids; the rest: the format's, or a new "call_" + 24
/// hex digits).
chat_parse::ChatMsg final_chat_message(const ParsedCompletion& p, const CompletionResult& r,
                                       std::vector<std::string>* ids);

/// Streaming: what the text so far (r.text) adds to the message sent so far (r.chat), which it
/// updates; `done` for the last call (the text is final). Tool-call deltas carry their ids (set
/// in r.chat.call_ids on a call's first delta). Without p.chat.parse the delta is the new text.
/// A parse that does not extend the previous one (markup that turned out malformed after its
/// call was sent) ends the deltas: the stream then ends with what was sent (logged).
chat_parse::ChatMsgDiff next_chat_delta(const ParsedCompletion& p, CompletionResult& r, bool done);

/// OpenAI's "tool_calls" of a message: [{"id", "type": "function", "function": {"name",
/// "arguments"}}].
Json tool_calls_json(const chat_parse::ChatMsg& msg, const std::vector<std::string>& ids);

}  // namespace mnemo::server
