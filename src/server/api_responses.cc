// OpenAI's Responses API (api_responses.h, docs/api.md): POST /v1/responses runs as a chat
// completion (api_responses_input.cc reads the body into one; the chat surfaces' parsing steps
// follow) and answers with a "response" object whose "output" holds a reasoning item, a message
// item and one function_call item per tool call, in that order; streamed as OpenAI's numbered
// events (response.created ... response.completed). With "store" (the default) the response and
// its conversation are kept in the ResponseStore (d.responses), so that a later request names it
// as previous_response_id and sends only its new input: its prompt, rendered from the stored
// conversation, extends the previous prompt and output, whose memory the prompt cache finds as it
// finds any prefix. GET and DELETE /v1/responses/{id} read and remove a kept response.
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <ctime>
#include <utility>

#include "mnemo/log.h"
#include "server/api.h"
#include "server/api_responses.h"
#include "server/chat_output.h"
#include "server/response_store.h"

namespace mnemo::server {
namespace {

using chat_parse::ChatMsg;
using chat_parse::ChatMsgDiff;

// OpenAI's error object.
Json openai_error(const std::string& message, const char* type, Json param, Json code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", std::move(param)},
            {"code", std::move(code)}}}};
}

// The field a request error is about: the field path quoted at the start of its message (how
// every parser of a request names it: "'input[2].call_id' must be ..."), else null.
Json param_of(const std::string& m) {
  if (m.size() < 3 || m[0] != '\'') return nullptr;
  const size_t end = m.find('\'', 1);
  if (end == std::string::npos || end == 1) return nullptr;
  std::string p = m.substr(1, end - 1);
  for (char c : p) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '[' &&
        c != ']') {
      return nullptr;
    }
  }
  return p;
}

bool is_incomplete(FinishReason f) {
  return f == FinishReason::kLimit || f == FinishReason::kContext;
}

// An output item's id: its kind's prefix ("rs_", "msg_", "fc_"), the response id's digits and
// its place in "output", so a stream's items and its final response name them alike.
std::string item_id(const Json& item, const ResponseIds& ids, size_t index) {
  const std::string& type = item["type"].get_ref<const std::string&>();
  const char* prefix = type == "reasoning" ? "rs_" : type == "message" ? "msg_" : "fc_";
  return fmt::format("{}{}{:04x}", prefix, ids.id.substr(ids.id.find('_') + 1), index);
}

Json text_part(const Json& text) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", Json::array()},
          {"logprobs", Json::array()}};
}

// The output items of a response are kept as {"type": reasoning | message | function_call,
// "text" (the reasoning, the message's text or the call's arguments), "call_id" and "name" (a
// call), "status" (once finished; reasoning items have none)}. One as "output" shows it; with
// !done as response.output_item.added shows it (in progress, no text yet).
Json item_json(const Json& it, const std::string& id, bool done) {
  const std::string& type = it["type"].get_ref<const std::string&>();
  if (type == "reasoning") {
    Json content = Json::array();
    if (done) content.push_back({{"type", "reasoning_text"}, {"text", it["text"]}});
    return {{"type", "reasoning"},
            {"id", id},
            {"summary", Json::array()},
            {"content", std::move(content)}};
  }
  const Json status = done ? it.value("status", Json("completed")) : Json("in_progress");
  if (type == "message") {
    Json content = Json::array();
    if (done) content.push_back(text_part(it["text"]));
    return {{"type", "message"},
            {"id", id},
            {"status", status},
            {"role", "assistant"},
            {"content", std::move(content)}};
  }
  return {{"type", "function_call"},
          {"id", id},
          {"call_id", it["call_id"]},
          {"name", it["name"]},
          {"arguments", done ? it["text"] : Json("")},
          {"status", status}};
}

Json output_json(const Json& items, const ResponseIds& ids) {
  Json out = Json::array();
  for (size_t i = 0; i < items.size(); ++i) {
    out.push_back(item_json(items[i], item_id(items[i], ids, i), /*done=*/true));
  }
  return out;
}

// The items of a finished message: its reasoning, its text (also when empty, unless it made
// calls), its calls; the last one "incomplete" when the response is.
Json items_of(const ChatMsg& msg, const std::vector<std::string>& call_ids, bool incomplete) {
  Json items = Json::array();
  if (!msg.reasoning_content.empty()) {
    items.push_back({{"type", "reasoning"}, {"text", msg.reasoning_content}});
  }
  if (!msg.content.empty() || msg.tool_calls.empty()) {
    items.push_back({{"type", "message"}, {"text", msg.content}, {"status", "completed"}});
  }
  for (size_t i = 0; i < msg.tool_calls.size(); ++i) {
    items.push_back({{"type", "function_call"},
                     {"text", msg.tool_calls[i].arguments},
                     {"call_id", i < call_ids.size() ? call_ids[i] : msg.tool_calls[i].id},
                     {"name", msg.tool_calls[i].name},
                     {"status", "completed"}});
  }
  if (incomplete && items.back()["type"] != "reasoning") items.back()["status"] = "incomplete";
  return items;
}

// The assistant turn a response adds to its conversation, as chat completions answer it: what
// the template renders the next turn's prompt from.
Json assistant_message(const ChatMsg& msg, const std::vector<std::string>& call_ids) {
  Json m = {{"role", "assistant"}, {"content", msg.content}};
  if (msg.content.empty() && !msg.tool_calls.empty()) m["content"] = nullptr;
  if (!msg.reasoning_content.empty()) m["reasoning_content"] = msg.reasoning_content;
  if (!msg.tool_calls.empty()) m["tool_calls"] = tool_calls_json(msg, call_ids);
  return m;
}

// OpenAI's "usage". cache_write_tokens: the prompt tokens evaluated, which the slot keeps (and
// the prompt cache after it); reasoning_tokens: the reasoning's length as the tokenizer counts
// it (the tokens generated for it, give or take a re-tokenization).
Json usage_json(const CompletionStats& s, const std::string& reasoning, const ApiDefaults& d) {
  int64_t reasoning_tokens = 0;
  if (!reasoning.empty() && d.tok != nullptr) {
    reasoning_tokens =
        std::min<int64_t>(s.n_generated, int64_t(d.tok->tokenize(reasoning, false, false).size()));
  }
  return {{"input_tokens", s.n_prompt},
          {"input_tokens_details",
           {{"cached_tokens", s.n_cached}, {"cache_write_tokens", s.n_prompt - s.n_cached}}},
          {"output_tokens", s.n_generated},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", s.n_prompt + s.n_generated}};
}

// The response object: `status` in_progress | completed | incomplete | failed, the request's
// fields as p.wire_state["echo"] holds them.
Json response_object(const ParsedCompletion& p, const ResponseIds& ids, const char* status,
                     Json output, Json usage) {
  const Json e = p.wire_state.value("echo", Json::object());
  const std::string s = status;
  const bool finished = s == "completed" || s == "incomplete";
  Json j = {{"id", ids.id},
            {"object", "response"},
            {"created_at", ids.created},
            {"status", status},
            {"background", false},
            {"completed_at", finished ? Json(int64_t(std::time(nullptr))) : Json()},
            {"error", nullptr},
            {"incomplete_details", nullptr}};
  if (s == "incomplete") j["incomplete_details"] = {{"reason", "max_output_tokens"}};
  for (const char* key : {"instructions", "max_output_tokens", "model"})
    j[key] = e.value(key, Json());
  j["output"] = std::move(output);
  for (const char* key : {"parallel_tool_calls", "previous_response_id", "reasoning", "store",
                          "temperature", "text", "tool_choice", "tools", "top_p", "truncation"}) {
    j[key] = e.value(key, Json());
  }
  j["usage"] = std::move(usage);
  j["user"] = e.value("user", Json());
  j["metadata"] = e.value("metadata", Json::object());
  return j;
}

// Keeps a finished response and its conversation (with `msg`, its output) when it asked to be
// stored.
void keep(const ParsedCompletion& p, const ApiDefaults& d, const ResponseIds& ids,
          const Json& response, const ChatMsg& msg, const std::vector<std::string>& call_ids) {
  if (d.responses == nullptr || !p.wire_state.value("store", false)) return;
  StoredResponse s;
  s.id = ids.id;
  s.response = response;
  s.messages = p.wire_state.value("conversation", Json::array());
  s.messages.push_back(assistant_message(msg, call_ids));
  if (!d.responses->put(std::move(s))) {
    MNEMO_LOG(kWarn) << "response " << ids.id << " is larger than --responses-max-mb: not stored";
  }
}

// One numbered stream event: "event: TYPE", data {"type", "sequence_number", fields...}.
SseEvent numbered(const char* type, int64_t seq, const Json& fields) {
  Json j = {{"type", type}, {"sequence_number", seq}};
  for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = it.value();
  return SseEvent::json(j, type);
}

// A stream's events after response.created and response.in_progress (sequence numbers 0 and 1),
// with the output items they open, fill and close. Its state is r.wire_stream: {"seq": the next
// sequence_number, "items": the output items so far (as items_of makes them; "text" is what was
// sent; a call's "call" is its index among the message's calls), "open": the last item is open}.
class StreamWriter {
 public:
  StreamWriter(CompletionResult& r, const ResponseIds& ids) : st_(r.wire_stream), ids_(ids) {
    if (st_.is_null()) st_ = {{"seq", 2}, {"items", Json::array()}, {"open", false}};
  }

  std::vector<SseEvent> take() { return std::move(out_); }
  const Json& items() const { return st_["items"]; }

  void event(const char* type, const Json& fields) {
    const int64_t seq = st_["seq"].get<int64_t>();
    st_["seq"] = seq + 1;
    out_.push_back(numbered(type, seq, fields));
  }

  // What a parse added: reasoning, then text, then calls (each call's name opens its item).
  void diff(const ChatMsgDiff& d) {
    if (!d.reasoning_content.empty()) text("reasoning", d.reasoning_content);
    if (!d.content.empty()) text("message", d.content);
    for (const chat_parse::ToolCallDelta& c : d.tool_calls) {
      if (!c.name.empty()) {
        open({{"type", "function_call"},
              {"text", ""},
              {"call_id", c.id},
              {"name", c.name},
              {"call", c.index}});
      }
      if (!c.arguments.empty()) arguments(c.index, c.arguments);
    }
  }

  // The end: an (empty) message when neither text nor a call was sent, as the non-streamed
  // response has one; the last item closed, "incomplete" when the response is.
  void finish(bool incomplete) {
    bool answered = false;
    for (const Json& it : list()) answered = answered || it["type"] != "reasoning";
    if (!answered) open({{"type", "message"}, {"text", ""}});
    close(incomplete);
  }

 private:
  Json& list() { return st_["items"]; }

  // The fields naming item i.
  Json ref(size_t i, bool content) {
    Json j = {{"item_id", item_id(list()[i], ids_, i)}, {"output_index", i}};
    if (content) j["content_index"] = 0;
    return j;
  }

  // Text for the open item of `type`, opening one first when the open item is another.
  void text(const char* type, const std::string& delta) {
    if (!st_["open"].get<bool>() || list().back()["type"] != type) {
      open({{"type", type}, {"text", ""}});
    }
    const size_t i = list().size() - 1;
    Json& it = list()[i];
    it["text"] = it["text"].get<std::string>() + delta;
    Json f = ref(i, true);
    f["delta"] = delta;
    if (it["type"] == "reasoning") {
      event("response.reasoning_text.delta", f);
    } else {
      f["logprobs"] = Json::array();
      event("response.output_text.delta", f);
    }
  }

  void arguments(size_t call, const std::string& delta) {
    for (size_t i = 0; i < list().size(); ++i) {
      Json& it = list()[i];
      if (it["type"] != "function_call" || it["call"] != call) continue;
      it["text"] = it["text"].get<std::string>() + delta;
      Json f = ref(i, false);
      f["delta"] = delta;
      event("response.function_call_arguments.delta", f);
      return;
    }
  }

  void open(Json it) {
    close(false);
    list().push_back(std::move(it));
    st_["open"] = true;
    const size_t i = list().size() - 1;
    const Json& item = list()[i];
    event("response.output_item.added",
          {{"output_index", i}, {"item", item_json(item, item_id(item, ids_, i), false)}});
    if (item["type"] == "function_call") return;
    Json f = ref(i, true);
    f["part"] = item["type"] == "reasoning" ? Json{{"type", "reasoning_text"}, {"text", ""}}
                                            : text_part("");
    event("response.content_part.added", f);
  }

  void close(bool incomplete) {
    if (!st_["open"].get<bool>()) return;
    st_["open"] = false;
    const size_t i = list().size() - 1;
    Json& it = list()[i];
    const std::string type = it["type"].get<std::string>();
    if (type != "reasoning") it["status"] = incomplete ? "incomplete" : "completed";
    Json f = ref(i, type != "function_call");
    if (type == "function_call") {
      f["name"] = it["name"];
      f["arguments"] = it["text"];
      event("response.function_call_arguments.done", f);
    } else {
      Json done = f;
      done["text"] = it["text"];
      if (type == "message") done["logprobs"] = Json::array();
      event(type == "reasoning" ? "response.reasoning_text.done" : "response.output_text.done",
            done);
      f["part"] = type == "reasoning" ? Json{{"type", "reasoning_text"}, {"text", it["text"]}}
                                      : text_part(it["text"]);
      event("response.content_part.done", f);
    }
    event("response.output_item.done",
          {{"output_index", i}, {"item", item_json(it, item_id(it, ids_, i), true)}});
  }

  Json& st_;
  const ResponseIds& ids_;
  std::vector<SseEvent> out_;
};

// A number as the client wrote it, or the server's float default without its float noise.
Json echo_number(const Json& b, const char* key, float value) {
  if (auto it = b.find(key); it != b.end() && it->is_number()) return *it;
  return std::round(double(value) * 1e6) / 1e6;
}

class ResponsesApi final : public WireApi {
 public:
  std::string_view id_prefix() const override { return "resp_"; }

  Status parse_one(const Json& b, const Json*, const Tokenizer& tok, const ChatTemplate& tmpl,
                   const ApiDefaults& d, ParsedCompletion* out) const override {
    if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
    ResponsesRequest rq;
    MNEMO_RETURN_IF_ERROR(responses_to_chat(b, d, &rq));
    ParsedCompletion p = new_completion(*this, d);
    CompletionRequest& q = p.req;
    std::string prompt_text;
    MNEMO_RETURN_IF_ERROR(in_responses_terms(
        parse_chat_prompt(rq.chat, tok, tmpl, d, &q.prompt, &out->n_prompt_tokens, &prompt_text)));
    MNEMO_RETURN_IF_ERROR(set_n_predict(rq.max_output_tokens, "'max_output_tokens'", d, &q));
    MNEMO_RETURN_IF_ERROR(in_responses_terms(parse_sampling(rq.chat, tok, &q)));
    MNEMO_RETURN_IF_ERROR(in_responses_terms(parse_chat_output(rq.chat, prompt_text, d, &p)));
    MNEMO_RETURN_IF_ERROR(in_responses_terms(parse_options(rq.chat, d, &p)));
    rq.echo["temperature"] = echo_number(b, "temperature", q.sampling.temp);
    rq.echo["top_p"] = echo_number(b, "top_p", q.sampling.top_p);
    rq.echo["parallel_tool_calls"] = p.chat.opt.parallel_tool_calls;
    p.wire_state = {{"echo", std::move(rq.echo)},
                    {"conversation", std::move(rq.conversation)},
                    {"store", rq.store}};
    return finish_completion(std::move(p), d, out);
  }

  Json response(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                const ResponseIds& ids) const override {
    std::vector<std::string> call_ids = r.chat.call_ids;
    const ChatMsg msg = final_chat_message(p, r, &call_ids);
    const bool incomplete = is_incomplete(r.finish);
    Json j = response_object(p, ids, incomplete ? "incomplete" : "completed",
                             output_json(items_of(msg, call_ids, incomplete), ids),
                             usage_json(r.stats, msg.reasoning_content, d));
    keep(p, d, ids, j, msg, call_ids);
    return j;
  }

  // response.created and response.in_progress: the response, in progress, without output.
  std::vector<SseEvent> stream_begin(const ParsedCompletion& p, CompletionResult&,
                                     const ApiDefaults&, const ResponseIds& ids) const override {
    const Json r = response_object(p, ids, "in_progress", Json::array(), nullptr);
    return {numbered("response.created", 0, {{"response", r}}),
            numbered("response.in_progress", 1, {{"response", r}})};
  }

  std::vector<SseEvent> stream_delta(const ParsedCompletion& p, const CompletionEvent&,
                                     CompletionResult& r, int32_t, const ApiDefaults&,
                                     const ResponseIds& ids) const override {
    const ChatMsgDiff diff = next_chat_delta(p, r, /*done=*/false);
    if (diff.empty()) return {};
    StreamWriter w(r, ids);
    w.diff(diff);
    return w.take();
  }

  // What the final parse adds, the last item closed, then response.completed (or
  // response.incomplete) with the whole response, which is then kept when it asked to be.
  std::vector<SseEvent> stream_end(const ParsedCompletion& p, CompletionResult& r,
                                   const ApiDefaults& d, const ResponseIds& ids) const override {
    StreamWriter w(r, ids);
    w.diff(next_chat_delta(p, r, /*done=*/true));
    const bool incomplete = is_incomplete(r.finish);
    w.finish(incomplete);
    const ChatMsg& msg = r.chat.sent;
    Json j =
        response_object(p, ids, incomplete ? "incomplete" : "completed",
                        output_json(w.items(), ids), usage_json(r.stats, msg.reasoning_content, d));
    keep(p, d, ids, j, msg, r.chat.call_ids);
    w.event(incomplete ? "response.incomplete" : "response.completed", {{"response", j}});
    return w.take();
  }

  // {"error": {"message", "type", "param", "code"}}: "param" the field a request error names;
  // an unknown previous_response_id (the only NotFound of this surface) and a prompt too long
  // for the context have OpenAI's codes.
  Json error_body(const WireError& e) const override {
    if (e.kind == ErrorKind::kNotFound) {
      return openai_error(e.message, "invalid_request_error", "previous_response_id",
                          "previous_response_not_found");
    }
    if (e.kind == ErrorKind::kPromptTooLong) {
      return openai_error(e.message, "invalid_request_error", "input", "context_length_exceeded");
    }
    return openai_error(e.message, http_error(e.kind).type,
                        e.kind == ErrorKind::kInvalidRequest ? param_of(e.message) : Json(),
                        nullptr);
  }

  // An "error" event (no stream to number it in).
  std::vector<SseEvent> stream_error(const WireError& e) const override {
    const Json err = error_body(e)["error"];
    return {numbered(
        "error", 0, {{"code", err["code"]}, {"message", err["message"]}, {"param", err["param"]}})};
  }

  // An "error" event, then response.failed with the output so far.
  std::vector<SseEvent> stream_failed(const ParsedCompletion& p, CompletionResult& r,
                                      const WireError& e, const ApiDefaults&,
                                      const ResponseIds& ids) const override {
    StreamWriter w(r, ids);
    const Json err = error_body(e)["error"];
    w.event("error", {{"code", err["code"]}, {"message", err["message"]}, {"param", err["param"]}});
    Json j = response_object(p, ids, "failed", output_json(w.items(), ids), nullptr);
    j["error"] = {{"code", "server_error"}, {"message", e.message}};
    w.event("response.failed", {{"response", j}});
    return w.take();
  }
};

}  // namespace

const WireApi& openai_responses_api() {
  static const ResponsesApi api;
  return api;
}

int stored_response(ResponseStore& store, std::string_view id, bool erase, Json* out) {
  std::shared_ptr<const StoredResponse> kept;
  const bool found = erase ? store.erase(id) : (kept = store.get(id)) != nullptr;
  if (!found) {
    *out = openai_error(fmt::format("Response with id '{}' not found.", id.substr(0, 128)),
                        "invalid_request_error", nullptr, nullptr);
    return 404;
  }
  *out = erase ? Json{{"id", std::string(id)}, {"object", "response"}, {"deleted", true}}
               : kept->response;
  return 200;
}

}  // namespace mnemo::server
