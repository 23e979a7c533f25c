// llama.cpp's native completion API, POST /completion (and /completions), with llama-server's
// field names: "prompt" (a string, token ids, a mix, or a list of prompts), "n_predict",
// "n_probs", llama-server's extensions; responses with "content", "tokens", "stop",
// "generation_settings", "timings", "completion_probabilities"; a stream of SSE "data:" objects
// whose last has "stop": true (no "[DONE]"). The WireApi seam is api.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "server/api.h"

namespace mnemo::server {
namespace {

const char* stop_type_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kWord:
      return "word";
    case FinishReason::kLimit:
    case FinishReason::kContext:
      return "limit";
    default:
      return "none";
  }
}

// [{"token": id, "bias": b}], a ban's bias null (as llama-server shows them).
Json logit_bias_json(const std::vector<LogitBias>& v) {
  Json a = Json::array();
  for (const LogitBias& lb : v) {
    a.push_back({{"token", lb.token}, {"bias", std::isinf(lb.bias) ? Json() : Json(lb.bias)}});
  }
  return a;
}

Json generation_settings(const CompletionRequest& q) {
  const SamplingParams& s = q.sampling;
  return {{"n_predict", q.n_predict},
          {"temperature", s.temp},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"min_p", s.min_p},
          {"repeat_penalty", s.repeat_penalty},
          {"repeat_last_n", s.repeat_last_n},
          {"frequency_penalty", s.frequency_penalty},
          {"presence_penalty", s.presence_penalty},
          {"seed", s.seed},
          {"n_keep", q.n_keep},
          {"stop", q.stop},
          {"ignore_eos", q.ignore_eos},
          {"cache_prompt", q.cache_prompt},
          {"logit_bias", logit_bias_json(s.logit_bias)}};
}

// llama.cpp's "completion_probabilities" for these tokens (entries with "id").
Json probs_json(const ParsedCompletion& p, const std::vector<TokenProbs>& probs,
                const ApiDefaults& d) {
  return token_probs_json(probs, p.top_logprobs, *d.tok, /*with_id=*/true);
}

// "response_fields": only these fields of j; a path "a/b" takes field b of object a and is the
// key of the result (as llama-server); a path that names nothing is left out.
Json select_fields(const Json& j, const std::vector<std::string>& fields) {
  Json only = Json::object();
  for (const std::string& f : fields) {
    const Json* v = &j;
    size_t i = 0;
    while (v != nullptr && i <= f.size()) {
      size_t e = f.find('/', i);
      if (e == std::string::npos) e = f.size();
      const std::string key = f.substr(i, e - i);
      v = v->is_object() && v->contains(key) ? &(*v)[key] : nullptr;
      i = e + 1;
    }
    if (v != nullptr) only[f] = *v;
  }
  return only;
}

class LlamaCompletionApi final : public WireApi {
 public:
  std::string_view id_prefix() const override { return "cmpl-"; }

  Status parse_one(const Json& b, const Json* prompt, const Tokenizer& tok, const ChatTemplate&,
                   const ApiDefaults& d, ParsedCompletion* out) const override {
    if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
    ParsedCompletion p = new_completion(*this, d);
    CompletionRequest& q = p.req;
    MNEMO_RETURN_IF_ERROR(parse_text_prompt(b, prompt, tok, d, &q.prompt, &out->n_prompt_tokens));
    int64_t n_predict = -1;
    MNEMO_RETURN_IF_ERROR(get_int(b, "n_predict", -1, INT32_MAX, &n_predict));
    MNEMO_RETURN_IF_ERROR(set_n_predict(n_predict, "'n_predict'", d, &q));
    MNEMO_RETURN_IF_ERROR(parse_sampling(b, tok, &q));
    MNEMO_RETURN_IF_ERROR(parse_options(b, d, &p));
    MNEMO_RETURN_IF_ERROR(get_int_as(b, "n_probs", 0, 20, &p.top_logprobs));
    p.logprobs = p.top_logprobs > 0;
    return finish_completion(std::move(p), d, out);
  }

  // One completion per prompt (a list of prompts is several); no "n".
  Status parse(const Json& b, const Tokenizer& tok, const ChatTemplate& tmpl, const ApiDefaults& d,
               std::vector<ParsedCompletion>* out) const override {
    out->clear();
    if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
    return expand_completions(
        b, /*n=*/1, /*prompt_lists=*/true,
        [&](const Json* prompt, ParsedCompletion* c) {
          return parse_one(b, prompt, tok, tmpl, d, c);
        },
        out);
  }

  Json response(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                const ResponseIds&) const override {
    Json j = whole_response(p, r, d);
    return p.response_fields.empty() ? j : select_fields(j, p.response_fields);
  }

  // A prompt-progress object (return_progress, as llama-server): the delta's shape with
  // "prompt_progress".
  std::vector<SseEvent> stream_progress(const ParsedCompletion& p, const CompletionEvent& ev,
                                        int32_t id_slot, const ApiDefaults&,
                                        const ResponseIds&) const override {
    return {SseEvent::json({{"index", p.index},
                            {"content", ""},
                            {"tokens", Json::array()},
                            {"stop", false},
                            {"id_slot", id_slot},
                            {"tokens_predicted", 0},
                            {"tokens_evaluated", ev.stats.n_prompt},
                            {"prompt_progress", prompt_progress_json(ev)}})};
  }

  // One text delta: its tokens, tokens_predicted and tokens_evaluated so far;
  // "completion_probabilities" when asked for; "timings" so far with timings_per_token. Sent
  // for tokens whose text is held back too (their ids are news).
  std::vector<SseEvent> stream_delta(const ParsedCompletion& p, const CompletionEvent& ev,
                                     CompletionResult& r, int32_t id_slot, const ApiDefaults& d,
                                     const ResponseIds&) const override {
    if (ev.text.empty() && !p.logprobs && ev.tokens.empty()) return {};
    Json j = {{"index", p.index},
              {"content", ev.text},
              {"tokens", ev.tokens},
              {"stop", false},
              {"id_slot", id_slot},
              {"tokens_predicted", ev.stats.n_generated},
              {"tokens_evaluated", ev.stats.n_prompt}};
    if (p.logprobs) j["completion_probabilities"] = probs_json(p, ev.probs, d);
    if (p.timings_per_token) j["timings"] = timings_json(ev.stats);
    return {SseEvent::json(j)};
  }

  // The final object: the whole response (response_fields shape only the non-streamed answer)
  // with "stop": true and the timings, its content and tokens already sent.
  std::vector<SseEvent> stream_end(const ParsedCompletion& p, CompletionResult& r,
                                   const ApiDefaults& d, const ResponseIds&) const override {
    Json j = whole_response(p, r, d);
    j["content"] = "";
    j["tokens"] = Json::array();
    if (p.logprobs) j["completion_probabilities"] = Json::array();
    return {SseEvent::json(j)};
  }

 private:
  // The response with every field (response_fields not applied).
  static Json whole_response(const ParsedCompletion& p, const CompletionResult& r,
                             const ApiDefaults& d) {
    Json j = {{"index", p.index},
              {"content", r.text},
              {"id_slot", r.stats.id_slot},
              {"stop", true},
              {"model", d.model_name},
              {"tokens_predicted", r.stats.n_generated},
              {"tokens_evaluated", r.stats.n_prompt},
              // As llama-server: the tokens the slot holds now (the last sampled one is not
              // decoded); the prompt tokens reused are timings.cache_n.
              {"tokens_cached", std::max(0, r.stats.n_prompt + r.stats.n_generated - 1)},
              {"prompt", d.tok->detokenize(p.req.prompt, DetokenizeOptions{true, true})},
              {"has_new_line", r.text.find('\n') != std::string::npos},
              {"truncated", r.finish == FinishReason::kContext},
              {"stop_type", stop_type_name(r.finish)},
              {"stopping_word", r.stop_word},
              {"context_shifts", r.stats.n_shifts},
              {"generation_settings", generation_settings(p.req)},
              {"timings", timings_json(r.stats)}};
    j["tokens"] = p.return_tokens ? Json(r.tokens) : Json::array();
    if (p.logprobs) j["completion_probabilities"] = probs_json(p, r.probs, d);
    return j;
  }
};

}  // namespace

const WireApi& llama_completion_api() {
  static const LlamaCompletionApi api;
  return api;
}

}  // namespace mnemo::server
