// OpenAI's completion APIs: POST /v1/completions ("prompt", "max_tokens", "n", "echo" refused)
// and POST /v1/chat/completions ("messages" through the chat template, "logprobs" /
// "top_logprobs", "stream_options.include_usage"), with the llama-server extensions every
// surface takes (request.h). Responses: "text_completion" / "chat.completion" objects with
// "choices", "usage" and llama-server's "timings"; streams of SSE "data:" chunks ending with
// "data: [DONE]". The WireApi seam is api.h.
#include <fmt/format.h>

#include "server/api.h"
#include "server/chat_output.h"

namespace mnemo::server {
namespace {

// OpenAI finish_reason: "stop" (end-of-generation token or stop string) or "length".
const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kLimit:
    case FinishReason::kContext:
      return "length";
    default:
      return "stop";
  }
}

// OpenAI's "usage": prompt_tokens (n_prompt), completion_tokens (n_generated), total_tokens,
// prompt_tokens_details.cached_tokens (n_cached).
Json usage_json(const CompletionStats& s) {
  return {{"prompt_tokens", s.n_prompt},
          {"completion_tokens", s.n_generated},
          {"total_tokens", s.n_prompt + s.n_generated},
          {"prompt_tokens_details", {{"cached_tokens", s.n_cached}}}};
}

class OpenAiApi final : public WireApi {
 public:
  explicit OpenAiApi(bool chat) : chat_(chat) {}

  std::string_view id_prefix() const override { return chat_ ? "chatcmpl-" : "cmpl-"; }

  Status parse_one(const Json& b, const Json* prompt, const Tokenizer& tok,
                   const ChatTemplate& tmpl, const ApiDefaults& d,
                   ParsedCompletion* out) const override {
    if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
    ParsedCompletion p = new_completion(*this, d);
    CompletionRequest& q = p.req;
    std::string prompt_text;
    if (chat_) {
      MNEMO_RETURN_IF_ERROR(
          parse_chat_prompt(b, tok, tmpl, d, &q.prompt, &out->n_prompt_tokens, &prompt_text));
    } else {
      MNEMO_RETURN_IF_ERROR(parse_text_prompt(b, prompt, tok, d, &q.prompt, &out->n_prompt_tokens));
    }
    int64_t n_predict = -1;
    MNEMO_RETURN_IF_ERROR(get_int(b, "max_tokens", 0, INT32_MAX, &n_predict));
    MNEMO_RETURN_IF_ERROR(get_int(b, "max_completion_tokens", 0, INT32_MAX, &n_predict));
    MNEMO_RETURN_IF_ERROR(set_n_predict(n_predict, "'max_tokens'", d, &q));
    MNEMO_RETURN_IF_ERROR(parse_sampling(b, tok, &q));
    if (chat_) MNEMO_RETURN_IF_ERROR(parse_chat_output(b, prompt_text, d, &p));
    MNEMO_RETURN_IF_ERROR(parse_options(b, d, &p));
    int64_t n = 1;
    MNEMO_RETURN_IF_ERROR(get_int(b, "n", 1, kMaxChoices, &n));
    auto so = b.find("stream_options");
    if (so != b.end() && !so->is_null()) {
      if (!so->is_object()) return Status::invalid_argument("'stream_options' must be an object");
      MNEMO_RETURN_IF_ERROR(get_bool(*so, "include_usage", &p.include_usage));
    }
    bool flag = false;
    MNEMO_RETURN_IF_ERROR(get_bool(b, "echo", &flag));
    if (flag) return Status::invalid_argument("'echo' is not supported");
    MNEMO_RETURN_IF_ERROR(parse_logprobs(b, &p));
    return finish_completion(std::move(p), d, out);
  }

  // One completion per prompt (/v1/completions: a list of prompts is several), each "n" times.
  Status parse(const Json& b, const Tokenizer& tok, const ChatTemplate& tmpl, const ApiDefaults& d,
               std::vector<ParsedCompletion>* out) const override {
    out->clear();
    if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
    int64_t n = 1;
    MNEMO_RETURN_IF_ERROR(get_int(b, "n", 1, kMaxChoices, &n));
    return expand_completions(
        b, n, /*prompt_lists=*/!chat_,
        [&](const Json* prompt, ParsedCompletion* c) {
          return parse_one(b, prompt, tok, tmpl, d, c);
        },
        out);
  }

  Json response(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                const ResponseIds& ids) const override {
    Json j = chunk(d, ids);
    if (chat_) {
      std::vector<std::string> call_ids = r.chat.call_ids;
      const chat_parse::ChatMsg msg = final_chat_message(p, r, &call_ids);
      Json message = {{"role", "assistant"}, {"content", msg.content}};
      if (msg.content.empty() && !msg.tool_calls.empty()) message["content"] = nullptr;
      if (!msg.reasoning_content.empty()) message["reasoning_content"] = msg.reasoning_content;
      if (!msg.tool_calls.empty()) message["tool_calls"] = tool_calls_json(msg, call_ids);
      j["object"] = "chat.completion";
      j["choices"] =
          Json::array({{{"index", p.index},
                        {"message", std::move(message)},
                        {"logprobs", p.logprobs ? probs_json(p, r.probs, d) : Json()},
                        {"finish_reason",
                         msg.tool_calls.empty() ? finish_reason_name(r.finish) : "tool_calls"}}});
    } else {
      j["choices"] = Json::array({{{"index", p.index},
                                   {"text", r.text},
                                   {"logprobs", nullptr},
                                   {"finish_reason", finish_reason_name(r.finish)}}});
    }
    j["usage"] = usage_json(r.stats);
    j["timings"] = timings_json(r.stats);
    return j;
  }

  // Completion 0's response with every completion's choice, and the usage of them all.
  Json response_multi(std::vector<Json> each, const CompletionStats& usage) const override {
    Json out = each.front();
    out["choices"] = Json::array();
    for (const Json& e : each) out["choices"].push_back(e["choices"][0]);
    out["usage"] = usage_json(usage);
    return out;
  }

  // Chat's role delta (nothing for /v1/completions).
  std::vector<SseEvent> stream_begin(const ParsedCompletion& p, CompletionResult&,
                                     const ApiDefaults& d, const ResponseIds& ids) const override {
    if (!chat_) return {};
    Json j = chunk(d, ids);
    j["choices"] = Json::array({{{"index", p.index},
                                 {"delta", {{"role", "assistant"}, {"content", nullptr}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
    return {SseEvent::json(j)};
  }

  // A chunk with an empty choice and llama-server's "prompt_progress".
  std::vector<SseEvent> stream_progress(const ParsedCompletion& p, const CompletionEvent& ev,
                                        int32_t, const ApiDefaults& d,
                                        const ResponseIds& ids) const override {
    Json j = chunk(d, ids);
    if (chat_) {
      j["choices"] = Json::array({{{"index", p.index},
                                   {"delta", {{"role", "assistant"}, {"content", nullptr}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
    } else {
      j["choices"] = Json::array(
          {{{"index", p.index}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
    }
    j["prompt_progress"] = prompt_progress_json(ev);
    return {SseEvent::json(j)};
  }

  // One delta (chat: the message's new content, reasoning_content and tool-call pieces, with
  // "logprobs": {"content": [...]} when asked for; "timings" so far with timings_per_token).
  std::vector<SseEvent> stream_delta(const ParsedCompletion& p, const CompletionEvent& ev,
                                     CompletionResult& r, int32_t, const ApiDefaults& d,
                                     const ResponseIds& ids) const override {
    Json j = chunk(d, ids);
    if (chat_) {
      const chat_parse::ChatMsgDiff diff = next_chat_delta(p, r, /*done=*/false);
      if (diff.empty() && !p.logprobs) return {};
      j["choices"] = Json::array({{{"index", p.index},
                                   {"delta", delta_json(diff, /*always_content=*/true)},
                                   {"logprobs", p.logprobs ? probs_json(p, ev.probs, d) : Json()},
                                   {"finish_reason", nullptr}}});
    } else {
      if (ev.text.empty()) return {};
      j["choices"] = Json::array({{{"index", p.index},
                                   {"text", ev.text},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
    }
    if (p.timings_per_token) j["timings"] = timings_json(ev.stats);
    return {SseEvent::json(j)};
  }

  // The finish_reason chunk, with the timings.
  std::vector<SseEvent> stream_end(const ParsedCompletion& p, CompletionResult& r,
                                   const ApiDefaults& d, const ResponseIds& ids) const override {
    std::vector<SseEvent> out;
    Json j = chunk(d, ids);
    if (chat_) {
      // What the final parse adds (a call or text held back until the end).
      const chat_parse::ChatMsgDiff diff = next_chat_delta(p, r, /*done=*/true);
      if (!diff.empty()) {
        Json last = chunk(d, ids);
        last["choices"] = Json::array({{{"index", p.index},
                                        {"delta", delta_json(diff, /*always_content=*/false)},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}}});
        out.push_back(SseEvent::json(last));
      }
      const bool calls = !r.chat.sent.tool_calls.empty();
      j["choices"] =
          Json::array({{{"index", p.index},
                        {"delta", Json::object()},
                        {"logprobs", nullptr},
                        {"finish_reason", calls ? "tool_calls" : finish_reason_name(r.finish)}}});
    } else {
      j["choices"] = Json::array({{{"index", p.index},
                                   {"text", ""},
                                   {"logprobs", nullptr},
                                   {"finish_reason", finish_reason_name(r.finish)}}});
    }
    j["timings"] = timings_json(r.stats);
    out.push_back(SseEvent::json(j));
    return out;
  }

  // With stream_options.include_usage, a chunk without choices holding the usage and timings
  // of them all; then "[DONE]".
  std::vector<SseEvent> stream_close(const ParsedCompletion& first, const CompletionStats* usage,
                                     const ApiDefaults& d, const ResponseIds& ids) const override {
    std::vector<SseEvent> out;
    if (usage != nullptr && first.include_usage) {
      Json u = chunk(d, ids);
      u["choices"] = Json::array();
      u["usage"] = usage_json(*usage);
      u["timings"] = timings_json(*usage);
      out.push_back(SseEvent::json(u));
    }
    out.push_back(SseEvent{"", "[DONE]"});
    return out;
  }

 private:
  // chat: "logprobs" (bool) and "top_logprobs" (0 to 20, needs logprobs); /v1/completions:
  // "logprobs" refused unless false.
  Status parse_logprobs(const Json& b, ParsedCompletion* p) const {
    if (chat_) {
      MNEMO_RETURN_IF_ERROR(get_bool(b, "logprobs", &p->logprobs));
      MNEMO_RETURN_IF_ERROR(get_int_as(b, "top_logprobs", 0, 20, &p->top_logprobs));
      if (p->top_logprobs > 0 && !p->logprobs) {
        return Status::invalid_argument("'top_logprobs' needs 'logprobs': true");
      }
      return Status();
    }
    auto lp = b.find("logprobs");
    if (lp != b.end() && !lp->is_null() && !(lp->is_boolean() && !lp->get<bool>())) {
      return Status::invalid_argument(
          "'logprobs' is not supported on /v1/completions (use /v1/chat/completions or "
          "/completion's n_probs)");
    }
    return Status();
  }

  // A chat delta: "content" (also when empty, as before tool calls existed, when
  // always_content), "reasoning_content" and OpenAI's "tool_calls" pieces ({"index", then "id",
  // "type" and "function.name" on a call's first piece, "function.arguments" fragments).
  static Json delta_json(const chat_parse::ChatMsgDiff& diff, bool always_content) {
    Json delta = Json::object();
    if (always_content || !diff.content.empty()) delta["content"] = diff.content;
    if (!diff.reasoning_content.empty()) delta["reasoning_content"] = diff.reasoning_content;
    if (!diff.tool_calls.empty()) {
      if (diff.content.empty() && delta.contains("content")) delta.erase("content");
      Json calls = Json::array();
      for (const chat_parse::ToolCallDelta& c : diff.tool_calls) {
        Json call = {{"index", c.index}};
        if (!c.name.empty()) {
          call["id"] = c.id;
          call["type"] = "function";
          call["function"] = {{"name", c.name}, {"arguments", c.arguments}};
        } else {
          call["function"] = {{"arguments", c.arguments}};
        }
        calls.push_back(std::move(call));
      }
      delta["tool_calls"] = std::move(calls);
    }
    return delta;
  }

  // The fields every object of a response or stream starts with.
  Json chunk(const ApiDefaults& d, const ResponseIds& ids) const {
    return {{"id", ids.id},
            {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
            {"created", ids.created},
            {"model", d.model_name},
            {"system_fingerprint", "mnemo-0.1.0"}};
  }

  // Chat's "logprobs": {"content": [...]} (entries without "id").
  static Json probs_json(const ParsedCompletion& p, const std::vector<TokenProbs>& probs,
                         const ApiDefaults& d) {
    return {{"content", token_probs_json(probs, p.top_logprobs, *d.tok, /*with_id=*/false)}};
  }

  const bool chat_;
};

}  // namespace

const WireApi& openai_completion_api() {
  static const OpenAiApi api(/*chat=*/false);
  return api;
}

const WireApi& openai_chat_api() {
  static const OpenAiApi api(/*chat=*/true);
  return api;
}

}  // namespace mnemo::server
