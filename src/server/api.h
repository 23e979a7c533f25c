// The API boundary: JSON request bodies -> native requests (CompletionRequest, ...), and native
// results -> JSON response bodies, for llama.cpp's /completion and OpenAI's /v1/completions and
// /v1/chat/completions (field names as those APIs define them). Runs on HTTP threads; knows
// nothing about sockets (httplib stays in http.cc). Errors are Status values with messages
// that name the field; nothing here throws (nlohmann calls are guarded by type checks).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/chat.h"
#include "mnemo/sampling.h"
#include "mnemo/status.h"
#include "mnemo/tokenizer.h"
#include "server/engine.h"

namespace mnemo::server {

// Objects keep their keys in insertion order (as llama-server's): a JSON schema's "properties"
// keep the order the client wrote, and responses list fields in the order they are built.
using Json = nlohmann::ordered_json;

/// Which API a completion request came through (decides field names both ways).
enum class Api : uint8_t { kLlama, kOaiCompletion, kOaiChat };

/// Server-wide settings the API layer needs.
struct ApiDefaults {
  SamplingParams sampling;       // values for fields a request leaves out
  int32_t n_predict = -1;        // -n: default tokens to generate (-1: n_predict_max)
  int32_t n_predict_max = 4096;  // requests asking for more get 400
  int32_t n_keep = 0;            // --keep
  uint32_t n_slots = 1;
  uint32_t n_ctx_seq = 0;  // prompts of this many tokens or more get 413 before queueing
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
};

/// A completion request as parsed from JSON.
struct ParsedCompletion {
  Api api = Api::kLlama;
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
  /// Several completions of one request (several prompts, or "n" > 1): this one's place in the
  /// answer ("index"), and the index of the first completion of the same prompt when this is a
  /// later copy (-1 otherwise): a copy is started once that one's prompt is in memory, so it
  /// reuses it (another slot's prefix, seq_cp) instead of reading it again.
  int32_t index = 0;
  int32_t copy_of = -1;
};

/// Parses a completion body (an object). The prompt is templated (chat) and tokenized here.
/// Errors: InvalidArgument naming the field (wrong type, out of range, unsupported option),
/// OutOfRange when the prompt is n_ctx_seq tokens or longer (HTTP 400
/// exceed_context_size_error). "prompt" must be one prompt (see parse_completions).
Status parse_completion(const Json& body, Api api, const Tokenizer& tok, const ChatTemplate& tmpl,
                        const ApiDefaults& defaults, ParsedCompletion* out);

/// Every completion a request asks for, in answer order: one per prompt of "prompt" (as
/// llama-server: a string, a list of token ids, or a list mixing ids and strings is one prompt;
/// a list without numbers, of strings or of such lists, is one prompt per element; at most 64),
/// each "n" times (OpenAI endpoints, 1 to 16; at most 64 in all). Copy j of a prompt with an
/// explicit "seed" gets seed + j, so the choices differ and are reproducible. Errors: those of
/// parse_completion (for the prompt that failed; out->front().n_prompt_tokens then set), and
/// InvalidArgument for a bad "n" or too many completions.
Status parse_completions(const Json& body, Api api, const Tokenizer& tok, const ChatTemplate& tmpl,
                         const ApiDefaults& d, std::vector<ParsedCompletion>* out);

/// What the HTTP thread collected from a completion's events.
struct CompletionResult {
  std::string text;
  std::vector<TokenId> tokens;
  std::vector<TokenProbs> probs;  // one per token when logprobs were asked for
  FinishReason finish = FinishReason::kNone;
  std::string stop_word;
  CompletionStats stats;
};

/// Identity of one response (shared by all chunks of a stream).
struct ResponseIds {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
};

/// A fresh id with the API's prefix and 24 random hex digits.
ResponseIds new_response_ids(Api api);

/// OpenAI finish_reason: "stop" (end-of-generation token or stop string) or "length".
const char* finish_reason_name(FinishReason r);

/// The non-streamed response body.
Json completion_json(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                     const ResponseIds& ids);
/// Streaming: the objects to send, each as one SSE "data:" event, in order.
/// First: chat's role delta (nothing for the others).
std::vector<Json> stream_begin(const ParsedCompletion& p, const ApiDefaults& d,
                               const ResponseIds& ids);
/// One text delta (/completion: its tokens, tokens_predicted and tokens_evaluated so far; probs
/// when asked for: llama.cpp's "completion_probabilities", OpenAI chat's "logprobs":
/// {"content": [...]}; "timings" so far with timings_per_token).
Json stream_delta(const ParsedCompletion& p, const std::string& text,
                  const std::vector<TokenId>& tokens, const std::vector<TokenProbs>& probs,
                  const CompletionStats& stats, int32_t id_slot, const ApiDefaults& d,
                  const ResponseIds& ids);
/// The last objects: the finish_reason chunk (and a usage chunk when asked), or /completion's
/// final object with stop = true and the timings. OpenAI streams then end with "[DONE]".
std::vector<Json> stream_end(const ParsedCompletion& p, const CompletionResult& r,
                             const ApiDefaults& d, const ResponseIds& ids);

/// OpenAI's "usage": prompt_tokens (n_prompt), completion_tokens (n_generated), total_tokens,
/// prompt_tokens_details.cached_tokens (n_cached).
Json usage_json(const CompletionStats& s);

/// A prompt-progress chunk (return_progress, as llama-server): the delta shape of the endpoint
/// with "prompt_progress": {"total", "cache", "processed", "time_ms"}.
Json stream_progress(const ParsedCompletion& p, const CompletionEvent& ev, int32_t id_slot,
                     const ApiDefaults& d, const ResponseIds& ids);

/// The last chunk of a stream of several completions with stream_options.include_usage: usage
/// and timings of them all (prompt tokens counted once per prompt).
Json stream_usage(const ParsedCompletion& p, const CompletionStats& sum, const ApiDefaults& d,
                  const ResponseIds& ids);

/// {"error": {"code": status, "message": ..., "type": ...}} (the shape OpenAI and llama.cpp use;
/// status and type from http_error, errors.h).
Json error_json(ErrorKind kind, const std::string& message);
/// A K/V type's name ("f16", "q8_0", ...), or null for nullopt (a slot that holds no K/V).
Json type_json(const std::optional<GgmlType>& t);

/// Parses a request body as JSON. Nesting deeper than kMaxJsonDepth (64) levels is refused
/// before parsing (a linear scan: deep values cost stack when destroyed, and nlohmann's parser
/// with a depth callback is quadratic in the length of an array of objects). Errors:
/// InvalidArgument "malformed JSON: ..." (syntax, depth, a number out of double's range).
constexpr size_t kMaxJsonDepth = 64;
Status parse_json_body(std::string_view body, Json* out);

/// The prompt text of a chat body: its "messages" (the checks of /v1/chat/completions: roles,
/// text parts only, no two trailing assistant messages) rendered by `tmpl` with the body's
/// "tools" and "chat_template_kwargs" (over d.chat_template_kwargs). Errors: InvalidArgument
/// naming the message, or the template's error ("chat template: ...", raise_exception's text).
Status render_chat_prompt(const Json& body, const ChatTemplate& tmpl, const ApiDefaults& d,
                          std::string* out);

/// A Content-Length header's value (RFC 9110 §8.6: 1*DIGIT) as a byte count. Errors:
/// InvalidArgument for anything but 1 to 19 decimal digits (a sign, a list, 2^64 and beyond).
Status parse_content_length(std::string_view text, uint64_t* out);

/// The {id} of /slots/{id}: decimal digits naming a slot below n_slots. Errors: InvalidArgument
/// "invalid slot id" for empty or non-digit text (the message quotes at most 16 bytes of it),
/// NotFound for a number that names no slot.
Status parse_slot_id(std::string_view text, uint32_t n_slots, int32_t* out);

/// POST /tokenize {"content", "add_special" (false), "parse_special" (true), "with_pieces"
/// (false)} -> {"tokens": [...]} (with_pieces: [{"id", "piece"}], a piece that is not valid
/// UTF-8 is given as an array of byte values).
Status tokenize_json(const Json& body, const Tokenizer& tok, Json* out);
/// POST /detokenize {"tokens": [...]} -> {"content": ...}; ids must be in [0, n_vocab).
Status detokenize_json(const Json& body, const Tokenizer& tok, Json* out);

/// GET /slots: one object per slot; "type_k" / "type_v" are null for a slot that holds no K/V.
Json slots_json(const ControlReply& snap);
/// POST /cache/requantize body -> the request. {"ctk": type, "ctv": type, "slot": optional, in
/// [0, n_slots)}. A missing ctk / ctv stays nullopt: the loop keeps that type as the target
/// slot (or slot 0) has it now. Errors: InvalidArgument naming the field.
Status parse_requantize(const Json& body, uint32_t n_slots, ControlRequest* out);

/// Dumps JSON for the wire: invalid UTF-8 in strings becomes U+FFFD instead of throwing.
std::string dump(const Json& j);

}  // namespace mnemo::server
