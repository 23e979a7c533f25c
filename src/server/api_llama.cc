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

class LlamaCompletionApi : public WireApi {
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
              {"truncated", p.truncated || r.finish == FinishReason::kContext},
              {"stop_type", stop_type_name(r.finish)},
              {"stopping_word", r.stop_word},
              {"context_shifts", r.stats.n_shifts},
              {"generation_settings", generation_settings_json(p.req)},
              {"timings", timings_json(r.stats)}};
    j["tokens"] = p.return_tokens ? Json(r.tokens) : Json::array();
    if (p.logprobs) j["completion_probabilities"] = probs_json(p, r.probs, d);
    return j;
  }
};

// The text of an "input_extra" chunk's field, or an error naming it (llama-server's texts).
Status chunk_field(const Json& chunk, const char* key, const char* fallback, std::string* out) {
  auto it = chunk.find(key);
  if (it == chunk.end() && fallback != nullptr) {
    *out = fallback;
    return Status();
  }
  if (it == chunk.end() || !it->is_string()) {
    return Status::invalid_argument(
        fallback == nullptr
            ? std::string("extra_context chunk must contain a \"text\" field with a string value")
            : fmt::format("extra_context chunk's \"{}\" field must be a string", key));
  }
  *out = it->get<std::string>();
  return Status();
}

Status optional_text(const Json& b, const char* key, std::string* out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return Status();
  if (!it->is_string()) return Status::invalid_argument(fmt::format("'{}' must be a string", key));
  *out = it->get<std::string>();
  return Status();
}

// /infill. The prompt, as llama-server lays it out for fill-in-the-middle (facts from its
// output on the same model):
//   [BOS when the vocabulary adds it]
//   extra := [FIM_REP "myproject\n"]                 (when the model has REP and SEP tokens)
//            per input_extra chunk: FIM_SEP filename "\n" text
//                                   (without a SEP token: "\n\n--- snippet ---\n\n" text)
//            [FIM_SEP "filename\n"]                   (with a SEP token)
//   extra's last max(0, n_ctx - n_batch - 2 n_predict) tokens, then
//   FIM_PRE prefix' prompt FIM_SUF suffix' FIM_MID
// where prefix' is the prefix's last 3 (n_batch / 4) tokens and suffix' the suffix's first
// max(0, n_batch / 4 - (2 + |prompt|)) tokens. Every text is tokenized on its own, without
// special-token parsing, except "prompt" (parsed as /completion parses a prompt).
class LlamaInfillApi final : public LlamaCompletionApi {
 public:
  Status parse_one(const Json& b, const Json*, const Tokenizer& tok, const ChatTemplate& tmpl,
                   const ApiDefaults& d, ParsedCompletion* out) const override {
    std::string missing;
    if (tok.fim_pre() == kTokenNull) missing += "prefix token is missing. ";
    if (tok.fim_suf() == kTokenNull) missing += "suffix token is missing. ";
    if (tok.fim_mid() == kTokenNull) missing += "middle token is missing. ";
    if (!missing.empty()) {
      return Status::not_supported("Infill is not supported by this model: " + missing);
    }
    if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
    std::string prefix, suffix, prompt_text;
    MNEMO_RETURN_IF_ERROR(optional_text(b, "input_prefix", &prefix));
    MNEMO_RETURN_IF_ERROR(optional_text(b, "input_suffix", &suffix));
    MNEMO_RETURN_IF_ERROR(optional_text(b, "prompt", &prompt_text));
    auto text = [&](const std::string& t) { return tok.tokenize(t, false, false); };
    auto append = [](std::vector<TokenId>* to, const std::vector<TokenId>& v) {
      to->insert(to->end(), v.begin(), v.end());
    };
    std::vector<TokenId> extra;
    const bool has_sep = tok.fim_sep() != kTokenNull;
    if (tok.fim_rep() != kTokenNull && has_sep) {
      extra.push_back(tok.fim_rep());
      append(&extra, text("myproject\n"));
    }
    if (auto it = b.find("input_extra"); it != b.end() && !it->is_null()) {
      if (!it->is_array()) return Status::invalid_argument("'input_extra' must be an array");
      for (const Json& chunk : *it) {
        if (!chunk.is_object()) {
          return Status::invalid_argument("extra_context chunk must be a JSON object");
        }
        std::string chunk_text, filename;
        MNEMO_RETURN_IF_ERROR(chunk_field(chunk, "text", nullptr, &chunk_text));
        MNEMO_RETURN_IF_ERROR(chunk_field(chunk, "filename", "tmp", &filename));
        if (has_sep) {
          extra.push_back(tok.fim_sep());
          append(&extra, text(filename + "\n"));
        } else {
          append(&extra, text("\n\n--- snippet ---\n\n"));
        }
        append(&extra, text(chunk_text));
      }
    }
    if (has_sep) {
      extra.push_back(tok.fim_sep());
      append(&extra, text("filename\n"));
    }
    int64_t n_predict_asked = -1;
    MNEMO_RETURN_IF_ERROR(get_int(b, "n_predict", -1, INT32_MAX, &n_predict_asked));
    const std::vector<TokenId> prompt_ids =
        tok.tokenize(prompt_text, /*add_special=*/false, /*parse_special=*/true);
    std::vector<TokenId> pre = text(prefix), suf = text(suffix);
    const int64_t n_batch = d.n_batch;
    const size_t n_pre = std::min<size_t>(pre.size(), size_t(3 * (n_batch / 4)));
    const size_t n_suf = std::min<size_t>(
        suf.size(), size_t(std::max<int64_t>(0, n_batch / 4 - (2 + int64_t(prompt_ids.size())))));
    const int64_t extra_room = int64_t(d.n_ctx_seq) - n_batch - 2 * n_predict_asked;
    const size_t n_extra = std::min<size_t>(extra.size(), size_t(std::max<int64_t>(0, extra_room)));

    std::vector<TokenId> ids;
    if (tok.add_bos() && tok.bos() != kTokenNull) ids.push_back(tok.bos());
    ids.insert(ids.end(), extra.end() - ptrdiff_t(n_extra), extra.end());
    ids.push_back(tok.fim_pre());
    ids.insert(ids.end(), pre.end() - ptrdiff_t(n_pre), pre.end());
    append(&ids, prompt_ids);
    ids.push_back(tok.fim_suf());
    ids.insert(ids.end(), suf.begin(), suf.begin() + ptrdiff_t(n_suf));
    ids.push_back(tok.fim_mid());

    Json body = b;
    body["prompt"] = Json(ids);
    return LlamaCompletionApi::parse_one(body, nullptr, tok, tmpl, d, out);
  }

  Status parse(const Json& b, const Tokenizer& tok, const ChatTemplate& tmpl, const ApiDefaults& d,
               std::vector<ParsedCompletion>* out) const override {
    out->assign(1, ParsedCompletion());
    return parse_one(b, nullptr, tok, tmpl, d, &(*out)[0]);
  }
};

}  // namespace

const WireApi& llama_completion_api() {
  static const LlamaCompletionApi api;
  return api;
}

const WireApi& llama_infill_api() {
  static const LlamaInfillApi api;
  return api;
}

}  // namespace mnemo::server
