// The request model every wire API shares (docs/design.md §1): a completion request as one
// surface parsed it (ParsedCompletion, around the engine's one CompletionRequest), what the
// HTTP thread collects from its events (CompletionResult), response ids, and the parsing steps
// the surfaces have in common: typed field readers, sampling parameters, stop strings,
// logit_bias, structured output, the prompt and its length checks, chat messages, the
// expansion of several prompts and choices. Also the JSON of every endpoint: parsing a body,
// dumping, the error object. Runs on HTTP threads; knows nothing about sockets (httplib stays in
// http*.cc) nor about any one API's field names beyond the shared ones. Errors are Status
// values with messages that name the field; nothing here throws (nlohmann calls are guarded by
// type checks).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat_parse/chat_parse.h"
#include "mnemo/chat.h"
#include "mnemo/sampling.h"
#include "mnemo/status.h"
#include "mnemo/tokenizer.h"
#include "server/engine.h"

namespace mnemo::server {

// Objects keep their keys in insertion order (as llama-server's): a JSON schema's "properties"
// keep the order the client wrote, and responses list fields in the order they are built.
using Json = nlohmann::ordered_json;

class WireApi;        // api.h: one API surface (its parser and its response builders)
class ResponseStore;  // response_store.h: the responses kept for OpenAI's Responses API

/// The server's chat output settings (chat_output.h): how a chat model's text becomes an
/// assistant message (content, reasoning, tool calls).
struct ChatDefaults {
  /// The tool-call and reasoning markup of the server's chat template (detect_chat_format).
  chat_parse::ChatFormat format = chat_parse::ChatFormat::kGeneric;
  /// --reasoning-format: none keeps the thinking in content; deepseek / auto split it.
  chat_parse::ReasoningFormat reasoning = chat_parse::ReasoningFormat::kAuto;
  /// --reasoning-budget: tokens of thinking before the end marker is forced (-1: no limit).
  int32_t reasoning_budget = -1;
  /// The format's markers; think_close's tokens (parse_special), for the budget.
  chat_parse::FormatMarkers markers;
  std::vector<TokenId> think_close_tokens;
  /// Control tokens whose text is one of markers.markup: generated as text (preserved tokens).
  std::vector<TokenId> preserved_tokens;
};

/// Server-wide settings the API layer needs.
struct ApiDefaults {
  SamplingParams sampling;       // values for fields a request leaves out
  int32_t n_predict = -1;        // -n: default tokens to generate (-1: n_predict_max)
  int32_t n_predict_max = 4096;  // requests asking for more get 400
  int32_t n_keep = 0;            // --keep
  uint32_t n_slots = 1;
  uint32_t n_ctx_seq = 0;  // prompts of this many tokens or more get 413 before queueing
  /// --context-shift: a prompt of n_ctx_seq tokens or more is truncated (finish_completion)
  /// instead of refused.
  bool context_shift = false;
  uint32_t n_batch = 2048;  // -b: bounds /infill's prefix and suffix, as llama-server's
  /// The longest token text of the vocabulary in bytes (Tokenizer::token_text): no token covers
  /// more bytes of a prompt, so a prompt of B bytes has at least B / max_token_bytes tokens. A
  /// prompt that long is refused before its template is rendered or it is tokenized (0: no check).
  size_t max_token_bytes = 0;
  size_t max_stop = 16;            // stop strings per request
  size_t max_stop_bytes = 256;     // bytes per stop string
  std::string model_name;          // "model" in responses and /v1/models
  const Tokenizer* tok = nullptr;  // token texts of log-probabilities (must be set)
  /// --chat-template-kwargs: template variables for every chat request (a JSON object).
  Json chat_template_kwargs = Json::object();
  ChatDefaults chat;
  /// The responses kept for OpenAI's Responses API (store / previous_response_id): the HTTP
  /// front's, thread-safe; null where none is kept (a surface then answers as if none matched).
  ResponseStore* responses = nullptr;
};

/// How a chat completion's text becomes an assistant message (chat_output.h).
struct ChatOutput {
  /// Parse the text into content, reasoning and tool calls; false: the text is the content.
  bool parse = false;
  chat_parse::ParseOptions opt;
};

/// A chat stream's progress (chat_output.h's next_chat_delta): the message the deltas sent so
/// far add up to, and the ids given to its tool calls.
struct ChatStreamState {
  chat_parse::ChatMsg sent;
  std::vector<std::string> call_ids;
  bool broken = false;  // a parse did not extend the previous one: no more deltas but content
  /// Streams of content blocks (Anthropic's messages): the blocks started so far (the open one
  /// is n_blocks - 1) and the open one's kind, in that surface's own numbering (0: none open).
  int32_t n_blocks = 0;
  int32_t open_block = 0;
};

/// A completion request as parsed from JSON. The options beyond `req` are what the surfaces'
/// response builders need; a surface leaves the ones it has no field for at their defaults.
struct ParsedCompletion {
  const WireApi* wire = nullptr;  // the surface that parsed it: its builders answer it
  CompletionRequest req;
  bool stream = false;
  bool include_usage = false;      // OpenAI stream_options.include_usage
  bool return_tokens = false;      // /completion: "tokens" in every response object
  bool logprobs = false;           // /completion n_probs > 0, or chat "logprobs": true
  int32_t top_logprobs = 0;        // alternatives per token in the response (<= 20)
  bool timings_per_token = false;  // "timings" in every stream chunk, not only the last
  /// /completion "response_fields": the non-streamed response holds only these fields; a path
  /// "a/b" takes field b of object a and is the key of the result (as llama-server).
  std::vector<std::string> response_fields;
  /// The prompt's length in tokens; also set when parse_completion refuses the prompt as too
  /// long (OutOfRange), then a lower bound if the prompt was refused by its text's size.
  size_t n_prompt_tokens = 0;
  /// The prompt was cut to fit the slot (--context-shift; llama-server's "truncated").
  bool truncated = false;
  /// Several completions of one request (several prompts, or "n" > 1): this one's place in the
  /// answer ("index"), and the index of the first completion of the same prompt when this is a
  /// later copy (-1 otherwise): a copy is started once that one's prompt is in memory, so it
  /// reuses it (another slot's prefix, seq_cp) instead of reading it again.
  int32_t index = 0;
  int32_t copy_of = -1;
  /// Chat surfaces: how the text becomes a message (tool calls, reasoning).
  ChatOutput chat;
  /// What the parsing surface's builders need of the request beyond the fields above, in its
  /// own form (OpenAI responses: the request fields its response object echoes and the
  /// conversation it stores); null for the surfaces that need nothing more.
  Json wire_state;
};

/// What the HTTP thread collected from a completion's events.
struct CompletionResult {
  std::string text;
  std::vector<TokenId> tokens;
  std::vector<TokenProbs> probs;  // one per token when logprobs were asked for
  FinishReason finish = FinishReason::kNone;
  std::string stop_word;
  CompletionStats stats;
  /// Chat surfaces while streaming: what was sent of the message.
  ChatStreamState chat;
  /// What the surface's stream keeps between its events beyond `chat`, in its own form (OpenAI
  /// responses: the next sequence_number and the output items opened); null until it keeps any.
  Json wire_stream;
};

/// Identity of one response (shared by all chunks of a stream).
struct ResponseIds {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
};

/// A fresh id: `prefix` and 24 random hex digits; created now.
ResponseIds new_response_ids(std::string_view prefix);

// ---- Typed field readers: absent or null leaves *out unchanged; a wrong type or range is an
// InvalidArgument naming the field.

/// A boolean field.
Status get_bool(const Json& b, const char* key, bool* out);
/// An integer field in [lo, hi]; a float with no fraction (16.0) is taken as an integer.
Status get_int(const Json& b, const char* key, int64_t lo, int64_t hi, int64_t* out);
/// get_int into a narrower integer type (lo and hi must fit T).
template <typename T>
Status get_int_as(const Json& b, const char* key, int64_t lo, int64_t hi, T* out) {
  int64_t v = static_cast<int64_t>(*out);
  MNEMO_RETURN_IF_ERROR(get_int(b, key, lo, hi, &v));
  *out = static_cast<T>(v);
  return Status();
}
/// A number field in [lo, hi].
Status get_float(const Json& b, const char* key, double lo, double hi, float* out);
/// One token id (a JSON integer in [0, n_vocab)); `field` names it in the error.
Status check_token(const Json& t, const Tokenizer& tok, const char* field, TokenId* out);

// ---- The parsing steps of a completion, in the order a surface runs them (errors name the
// field; the first error found is the one returned).

/// A completion with the server's defaults (sampling, n_keep), parsed by `wire`.
ParsedCompletion new_completion(const WireApi& wire, const ApiDefaults& d);

/// The prompt of a text completion: `prompt` when not null (one element of a list of prompts),
/// else the body's "prompt": a string, or a list mixing strings and token ids (one prompt; the
/// first string piece gets the vocabulary's BOS; special-token texts are recognised), tokenized
/// into *ids. A prompt whose text alone cannot fit a slot is refused before it is tokenized.
/// Errors: InvalidArgument naming 'prompt' (missing, empty, several prompts, bad token id);
/// OutOfRange when too long by its text, with *n_prompt_tokens set to the lower bound.
Status parse_text_prompt(const Json& b, const Json* prompt, const Tokenizer& tok,
                         const ApiDefaults& d, std::vector<TokenId>* ids, size_t* n_prompt_tokens);
/// The prompt of a chat completion: the body's "messages" rendered by render_chat_prompt and
/// tokenized into *ids (special tokens and BOS as the template's text says); the rendered text
/// into *text when not null. Errors: those of
/// render_chat_prompt, OutOfRange as parse_text_prompt's, InvalidArgument for an empty prompt.
Status parse_chat_prompt(const Json& b, const Tokenizer& tok, const ChatTemplate& tmpl,
                         const ApiDefaults& d, std::vector<TokenId>* ids, size_t* n_prompt_tokens,
                         std::string* text = nullptr);
/// Tokens to generate: `n` as read from the field named `field` (< 0: absent, then -n or
/// n_predict_max). Errors: InvalidArgument naming `field` past n_predict_max.
Status set_n_predict(int64_t n, const char* field, const ApiDefaults& d, CompletionRequest* q);
/// The sampling fields every surface takes: temperature, top_p, min_p, top_k,
/// frequency_penalty, presence_penalty, repeat_penalty, repeat_last_n, seed (negative: random),
/// logit_bias (llama-server's and OpenAI's forms) and structured output ("grammar" GBNF,
/// "json_schema", OpenAI's "response_format"; at most one of them) into q->sampling and
/// q->grammar, then SamplingParams::validate.
Status parse_sampling(const Json& b, const Tokenizer& tok, CompletionRequest* q);
/// The fields every surface takes beyond sampling: stop, stream, cache_prompt, ignore_eos,
/// return_tokens, timings_per_token, post_sampling_probs, return_progress, response_fields,
/// n_keep, id_slot (in [-1, n_slots)).
Status parse_options(const Json& b, const ApiDefaults& d, ParsedCompletion* p);
/// The last step: n_probs from logprobs / top_logprobs, n_prompt_tokens, and the prompt's
/// length check; moves p into *out. Errors: OutOfRange when the prompt is n_ctx_seq tokens or
/// longer (out->n_prompt_tokens then set, *out otherwise unchanged).
Status finish_completion(ParsedCompletion p, const ApiDefaults& d, ParsedCompletion* out);

/// OpenAI's "n": choices per prompt, 1 to kMaxChoices.
constexpr int64_t kMaxChoices = 16;
/// Completions of one request at most (prompts x n).
constexpr int64_t kMaxCompletions = 64;
/// Parses one completion of the body: of `prompt` (not null: one element of the body's list of
/// prompts) or of the body's own prompt (null).
using ParseOne = std::function<Status(const Json* prompt, ParsedCompletion* out)>;
/// Every completion a request asks for, in answer order: one per prompt, each `n` times. With
/// `prompt_lists`, a "prompt" that is a list without numbers (strings, or lists of ids) is one
/// prompt per element (llama-server's rule; a list with a number is one prompt). Copy j of a
/// prompt with an explicit "seed" gets seed + j, so the choices differ and are reproducible.
/// Errors: InvalidArgument for more than kMaxCompletions; those of `one` (for the prompt that
/// failed, with "prompt i" as context when there are several; out then holds that one attempt,
/// whose n_prompt_tokens may be set).
Status expand_completions(const Json& b, int64_t n, bool prompt_lists, const ParseOne& one,
                          std::vector<ParsedCompletion>* out);

// ---- Chat prompts (OpenAI's messages; chat completions and /apply-template).

/// The body's "messages": role strings, content a string, null (an assistant's tool-call turn)
/// or text parts; not two trailing assistant messages. Errors: InvalidArgument naming the
/// message.
Status chat_messages(const Json& body, std::vector<ChatMessage>* out);
/// The prompt text of a chat body: its "messages" (the checks of chat_messages) rendered by
/// `tmpl` with the body's "tools" and "chat_template_kwargs" (over d.chat_template_kwargs).
/// Errors: InvalidArgument naming the message, or the template's error ("chat template: ...",
/// raise_exception's text).
Status render_chat_prompt(const Json& body, const ChatTemplate& tmpl, const ApiDefaults& d,
                          std::string* out);

// ---- Response pieces more than one surface uses.

/// llama-server's "timings": cache_n, prompt_n / _ms / _per_token_ms / _per_second, predicted_n
/// / _ms / _per_token_ms / _per_second (prompt_n excludes the cached tokens).
Json timings_json(const CompletionStats& s);
/// Cuts a prompt of n_ctx tokens or more to fewer than n_ctx, as llama-server truncated long
/// prompts under --context-shift: the first n_keep tokens stay (n_keep < 0: the whole prompt;
/// at most n_ctx - 4), the rest is cut in blocks of (n_ctx - n_keep) / 2 tokens from just after
/// them, as many whole blocks as leave at least one block of the prompt's end. n_ctx >= 8.
void truncate_prompt(std::vector<TokenId>* prompt, int32_t n_keep, uint32_t n_ctx);
/// A request's settings as llama-server shows them ("generation_settings" of a /completion
/// answer, "params" of a /slots entry): n_predict, temperature, top_k, top_p, min_p, the
/// penalties, seed, n_keep, stop, ignore_eos, cache_prompt, n_probs, post_sampling_probs and
/// logit_bias ([{"token": id, "bias": b}], a ban's bias null).
Json generation_settings_json(const CompletionRequest& q);
/// One entry per token: {"id" (with_id), "token", "logprob", "bytes", "top_logprobs": at most
/// top_n such entries}; with post_sampling probabilities "prob" and "top_probs" instead.
Json token_probs_json(const std::vector<TokenProbs>& probs, int32_t top_n, const Tokenizer& tok,
                      bool with_id);
/// llama-server's "prompt_progress": {"total", "cache", "processed", "time_ms"} of a kProgress
/// event.
Json prompt_progress_json(const CompletionEvent& ev);

// ---- Bodies and errors of every endpoint.

/// {"error": {"code": status, "message": ..., "type": ...}} (the shape OpenAI and llama.cpp use;
/// status and type from http_error, errors.h).
Json error_json(ErrorKind kind, const std::string& message);

/// Parses a request body as JSON. Nesting deeper than kMaxJsonDepth (64) levels is refused
/// before parsing (a linear scan: deep values cost stack when destroyed, and nlohmann's parser
/// with a depth callback is quadratic in the length of an array of objects). Errors:
/// InvalidArgument "malformed JSON: ..." (syntax, depth, a number out of double's range).
constexpr size_t kMaxJsonDepth = 64;
Status parse_json_body(std::string_view body, Json* out);

/// A Content-Length header's value (RFC 9110 §8.6: 1*DIGIT) as a byte count. Errors:
/// InvalidArgument for anything but 1 to 19 decimal digits (a sign, a list, 2^64 and beyond).
Status parse_content_length(std::string_view text, uint64_t* out);

/// Dumps JSON for the wire: invalid UTF-8 in strings becomes U+FFFD instead of throwing.
std::string dump(const Json& j);

}  // namespace mnemo::server
