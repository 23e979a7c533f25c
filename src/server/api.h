// The API boundary's seam (docs/design.md §1, §2): one WireApi per wire API, each in a file of
// its own, translating a JSON request body into the engine's one request type (the
// CompletionRequest inside ParsedCompletion, request.h) and the engine's events back into that
// API's responses, with field names as that API defines them. The HTTP plumbing
// (http_exchange.cc) does the rest for every surface alike: submitting, waiting for a slot
// under --timeout, the whitespace heartbeat of a slow non-streamed answer, SSE framing and
// keep-alives, cancelling when the client goes away, several completions of one request.
//
// Surfaces: llama.cpp's /completion (api_llama.cc), OpenAI's /v1/completions and
// /v1/chat/completions (api_openai.cc), Anthropic's /v1/messages (api_anthropic.cc), OpenAI's
// /v1/responses (api_responses.cc). The control and utility endpoints (/slots, /props,
// /tokenize, ...) are in api_control.h. This header includes that one and the request model, so
// a user of the API layer includes this header alone.
//
// A new API is one new file: a WireApi subclass and the function returning its instance
// (declared below), and one route in http.cc (Front::install) naming that instance.
// Runs on HTTP threads; knows nothing about sockets (httplib stays in http*.cc). Nothing here
// throws (nlohmann calls are guarded by type checks).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_control.h"
#include "server/request.h"

namespace mnemo::server {

/// One server-sent event (text/event-stream, the HTML standard's §9.2): "event: NAME" when
/// named, then "data: DATA", then an empty line.
struct SseEvent {
  std::string name;  // empty: no event line (llama.cpp's and OpenAI's streams)
  std::string data;  // one line: JSON text, or a sentinel such as OpenAI's "[DONE]"

  /// An unnamed or named event carrying `j` (as dump() writes it).
  static SseEvent json(const Json& j, std::string name = {});
  /// The event's bytes on the wire.
  std::string wire() const;
};

/// A failed request as a surface tells its client. The HTTP status is http_error(kind)'s.
struct WireError {
  /// A prompt refused as too long while parsing (kPromptTooLong): its length in tokens (a lower
  /// bound when it was refused by its text's size) and the tokens one slot holds.
  struct PromptSize {
    size_t n_prompt_tokens = 0;
    uint32_t n_ctx = 0;
  };
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
  std::optional<PromptSize> prompt_size;
};

/// One wire API: (a) its parser of request bodies, (b) its non-streamed response, (c) its
/// stream events, (d) its error body. Instances are stateless singletons (thread-safe); every
/// builder gets the server's defaults (model name, tokenizer) and the response's ids.
class WireApi {
 public:
  virtual ~WireApi() = default;

  /// The prefix of this API's response ids ("chatcmpl-", "cmpl-"): new_response_ids.
  virtual std::string_view id_prefix() const = 0;

  // ---- (a) Parsing.

  /// One completion of the body: of `prompt` (not null: one element of the body's list of
  /// prompts) or of the body's own prompt, which must then be one prompt. The prompt is
  /// templated and tokenized here; out->wire is this. Errors: InvalidArgument naming the field
  /// (wrong type, out of range, unsupported option), OutOfRange when the prompt is n_ctx_seq
  /// tokens or longer (HTTP 400 exceed_context_size_error; out->n_prompt_tokens then set).
  virtual Status parse_one(const Json& body, const Json* prompt, const Tokenizer& tok,
                           const ChatTemplate& tmpl, const ApiDefaults& d,
                           ParsedCompletion* out) const = 0;
  /// Every completion the body asks for, in answer order ("index" 0, 1, ...). Default: the one
  /// completion of parse_one. Errors: those of parse_one (out->front() then holds the attempt
  /// that failed), InvalidArgument for a bad count of prompts or choices.
  virtual Status parse(const Json& body, const Tokenizer& tok, const ChatTemplate& tmpl,
                       const ApiDefaults& d, std::vector<ParsedCompletion>* out) const;

  // ---- (b) The non-streamed response.

  /// The body answering one completion.
  virtual Json response(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                        const ResponseIds& ids) const = 0;
  /// The body answering several completions of one request: `each` holds response() of every
  /// one in index order, `usage` their sums (prompt tokens counted once per prompt: copies
  /// share their first's; the timings of completion 0). Default: `each` as an array.
  virtual Json response_multi(std::vector<Json> each, const CompletionStats& usage) const;

  // ---- (c) Streaming: the events to send, in order. A stream of several completions sends
  // every completion's stream_begin first, then their events interleaved as they come (no
  // progress events), then one stream_close.

  /// Before any other event of p's completion. r.stats holds the admission's numbers (id_slot,
  /// n_prompt, n_cached) for a single completion, which begins once it holds a slot; zeros for
  /// the completions of a multi-completion stream, which begin before they are admitted.
  /// Default: none.
  virtual std::vector<SseEvent> stream_begin(const ParsedCompletion& p, CompletionResult& r,
                                             const ApiDefaults& d, const ResponseIds& ids) const;
  /// A kProgress event (return_progress) of the slot `id_slot`. Default: none.
  virtual std::vector<SseEvent> stream_progress(const ParsedCompletion& p,
                                                const CompletionEvent& ev, int32_t id_slot,
                                                const ApiDefaults& d, const ResponseIds& ids) const;
  /// A kText event: its text, tokens and probs, ev.stats so far; r holds everything so far
  /// (ev included) and keeps what a stream has sent (r.chat, for the chat surfaces). None when
  /// the event holds nothing this API shows (a token whose text is held back, without
  /// log-probabilities).
  virtual std::vector<SseEvent> stream_delta(const ParsedCompletion& p, const CompletionEvent& ev,
                                             CompletionResult& r, int32_t id_slot,
                                             const ApiDefaults& d,
                                             const ResponseIds& ids) const = 0;
  /// p's completion ended (kDone); r holds all of it.
  virtual std::vector<SseEvent> stream_end(const ParsedCompletion& p, CompletionResult& r,
                                           const ApiDefaults& d, const ResponseIds& ids) const = 0;
  /// After the last completion ended: `first` is completion 0, `usage` the sums of them all (as
  /// response_multi's), or null when a stream of several completions ends with an error (a
  /// single completion's stream that failed ends after its error events, without this).
  /// Default: none.
  virtual std::vector<SseEvent> stream_close(const ParsedCompletion& first,
                                             const CompletionStats* usage, const ApiDefaults& d,
                                             const ResponseIds& ids) const;
  /// The bytes a stream sends after kPoll without an event (a client alive?). Default: the SSE
  /// comment ": keep-alive".
  virtual std::string keep_alive() const;

  // ---- (d) Errors.

  /// The body of an error response. Default: error_json, with llama-server's "n_prompt_tokens"
  /// and "n_ctx" added to "error" when prompt_size is set.
  virtual Json error_body(const WireError& e) const;
  /// The events reporting an error in a stream. Default: error_body as one unnamed event.
  virtual std::vector<SseEvent> stream_error(const WireError& e) const;
  /// The HTTP status of an error response. Default: http_error(kind).status (errors.h).
  virtual int http_status(ErrorKind kind) const;
  /// The events reporting an error of p's completion in its own stream (begun with
  /// stream_begin; r holds what was sent): for an API whose error events carry the stream's
  /// state. Default: stream_error(e).
  virtual std::vector<SseEvent> stream_failed(const ParsedCompletion& p, CompletionResult& r,
                                              const WireError& e, const ApiDefaults& d,
                                              const ResponseIds& ids) const;
};

/// The wire APIs of the completion routes.
enum class Api : uint8_t { kLlama, kOaiCompletion, kOaiChat };

/// llama.cpp's POST /completion (api_llama.cc).
const WireApi& llama_completion_api();
/// llama-server's POST /infill: fill-in-the-middle from "input_prefix", "input_suffix",
/// "input_extra" ([{"filename", "text"}], other files of the repository) and "prompt" (text
/// that continues the prefix), laid out with the model's FIM tokens as llama-server lays them
/// out; answered as /completion. A model without FIM prefix / suffix / middle tokens gets
/// NotSupported (501) naming the missing ones.
const WireApi& llama_infill_api();
/// OpenAI's POST /v1/completions (api_openai.cc).
const WireApi& openai_completion_api();
/// OpenAI's POST /v1/chat/completions (api_openai.cc).
const WireApi& openai_chat_api();
/// Anthropic's POST /v1/messages (api_anthropic.cc).
const WireApi& anthropic_messages_api();
/// Anthropic's POST /v1/messages/count_tokens answer for a messages body whose prompt (parsed by
/// anthropic_messages_api) has n_prompt_tokens tokens: {"input_tokens": n_prompt_tokens}.
Json message_token_count_json(size_t n_prompt_tokens);
/// OpenAI's POST /v1/responses (api_responses.cc): a completion of the conversation its input
/// and previous_response_id name, kept in d.responses when its "store" is true.
const WireApi& openai_responses_api();
/// OpenAI's GET /v1/responses/{id} (`erase` false) and DELETE (`erase` true) on `store`: into
/// *out the response object kept under `id`, or {"id", "object": "response", "deleted": true}
/// (the entry removed). Returns the HTTP status: 200, or 404 with OpenAI's error body when no
/// response is kept under `id` (never stored, evicted, deleted).
int stored_response(ResponseStore& store, std::string_view id, bool erase, Json* out);
/// The instance of `api`.
const WireApi& wire_api(Api api);

/// wire_api(api).parse_one of the body's own prompt: "prompt" must be one prompt (see
/// parse_completions).
Status parse_completion(const Json& body, Api api, const Tokenizer& tok, const ChatTemplate& tmpl,
                        const ApiDefaults& defaults, ParsedCompletion* out);

/// wire_api(api).parse: one completion per prompt of "prompt" (as llama-server: a string, a
/// list of token ids, or a list mixing ids and strings is one prompt; a list without numbers,
/// of strings or of such lists, is one prompt per element; at most 64), each "n" times (OpenAI
/// endpoints, 1 to 16; at most 64 in all). Copy j of a prompt with an explicit "seed" gets
/// seed + j. Errors: those of parse_completion (for the prompt that failed;
/// out->front().n_prompt_tokens then set), and InvalidArgument for a bad "n" or too many
/// completions.
Status parse_completions(const Json& body, Api api, const Tokenizer& tok, const ChatTemplate& tmpl,
                         const ApiDefaults& d, std::vector<ParsedCompletion>* out);

/// A fresh id with the API's prefix and 24 random hex digits.
ResponseIds new_response_ids(Api api);

/// The non-streamed response body of p (p.wire's response()).
Json completion_json(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                     const ResponseIds& ids);

}  // namespace mnemo::server
