#include "server/api.h"

#include <utility>

namespace mnemo::server {

SseEvent SseEvent::json(const Json& j, std::string name) {
  return SseEvent{std::move(name), dump(j)};
}

std::string SseEvent::wire() const {
  std::string s;
  if (!name.empty()) s += "event: " + name + "\n";
  s += "data: " + data + "\n\n";
  return s;
}

Status WireApi::parse(const Json& body, const Tokenizer& tok, const ChatTemplate& tmpl,
                      const ApiDefaults& d, std::vector<ParsedCompletion>* out) const {
  out->assign(1, ParsedCompletion());
  return parse_one(body, nullptr, tok, tmpl, d, &out->front());
}

Json WireApi::response_multi(std::vector<Json> each, const CompletionStats&) const {
  Json out = Json::array();
  for (Json& j : each) out.push_back(std::move(j));
  return out;
}

std::vector<SseEvent> WireApi::stream_begin(const ParsedCompletion&, CompletionResult&,
                                            const ApiDefaults&, const ResponseIds&) const {
  return {};
}

std::vector<SseEvent> WireApi::stream_progress(const ParsedCompletion&, const CompletionEvent&,
                                               int32_t, const ApiDefaults&,
                                               const ResponseIds&) const {
  return {};
}

std::vector<SseEvent> WireApi::stream_close(const ParsedCompletion&, const CompletionStats*,
                                            const ApiDefaults&, const ResponseIds&) const {
  return {};
}

std::string WireApi::keep_alive() const { return ": keep-alive\n\n"; }

Json WireApi::error_body(const WireError& e) const {
  Json j = error_json(e.kind, e.message);
  if (e.prompt_size) {  // llama-server's fields of exceed_context_size_error
    j["error"]["n_prompt_tokens"] = e.prompt_size->n_prompt_tokens;
    j["error"]["n_ctx"] = e.prompt_size->n_ctx;
  }
  return j;
}

std::vector<SseEvent> WireApi::stream_error(const WireError& e) const {
  return {SseEvent::json(error_body(e))};
}

int WireApi::http_status(ErrorKind kind) const { return http_error(kind).status; }
std::vector<SseEvent> WireApi::stream_failed(const ParsedCompletion&, CompletionResult&,
                                             const WireError& e, const ApiDefaults&,
                                             const ResponseIds&) const {
  return stream_error(e);
}

const WireApi& wire_api(Api api) {
  switch (api) {
    case Api::kOaiCompletion:
      return openai_completion_api();
    case Api::kOaiChat:
      return openai_chat_api();
    case Api::kLlama:
      break;
  }
  return llama_completion_api();
}

Status parse_completion(const Json& body, Api api, const Tokenizer& tok, const ChatTemplate& tmpl,
                        const ApiDefaults& defaults, ParsedCompletion* out) {
  return wire_api(api).parse_one(body, nullptr, tok, tmpl, defaults, out);
}

Status parse_completions(const Json& body, Api api, const Tokenizer& tok, const ChatTemplate& tmpl,
                         const ApiDefaults& d, std::vector<ParsedCompletion>* out) {
  return wire_api(api).parse(body, tok, tmpl, d, out);
}

ResponseIds new_response_ids(Api api) { return new_response_ids(wire_api(api).id_prefix()); }

Json completion_json(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                     const ResponseIds& ids) {
  return (p.wire != nullptr ? *p.wire : llama_completion_api()).response(p, r, d, ids);
}

}  // namespace mnemo::server
