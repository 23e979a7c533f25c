// The HTTP transport of `mnemo serve` (the only file that uses cpp-httplib): routes, API-key
// check, body limits, SSE streaming, disconnect detection and the one-line-per-request log.
//
// Endpoints (JSON bodies; errors are {"error": {"code", "message", "type"}}):
//   GET  /                            the web page (chat and slots); never needs the API key
//   GET  /health                      {"status": "ok"}; never needs the API key
//   GET  /props                       model, n_ctx, slots, memory mode, K/V types per slot
//   GET  /slots                       per slot: state, tokens held, K/V types (null when the
//                                     slot holds no K/V), bytes serving it
//   POST /slots/{id}?action=save|restore|erase   {"filename": ...}; needs --slot-save-path
//   POST /cache/requantize            {"ctk", "ctv", "slot"?}: bytes before / after, ms
//   POST /completion, /completions    llama.cpp's fields; "stream": SSE "data:" events
//   POST /v1/completions              OpenAI; SSE ending with "data: [DONE]"
//   POST /v1/chat/completions, /chat/completions
//   GET  /v1/models, /models
//   POST /tokenize, /detokenize
//   POST /apply-template              {"messages"}: {"prompt": the chat template's text}
//   GET  /metrics                     Prometheus text; needs --metrics
//
// Threads: httplib's pool runs the handlers (JSON, chat template, tokenization) and waits on a
// TaskChannel for the engine's events. A streamed completion holds its pool thread while it
// streams; a client that goes away makes a write fail, which cancels the request (the slot is
// freed at the next step). A non-streamed completion that takes longer than kHeartbeat (250 ms) is
// sent as a chunked body that starts with whitespace written every 250 ms (JSON whitespace), so a
// disconnect is noticed there too; such a response has status 200 even if it ends in an error
// object.
#include <fmt/format.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/buffer.h"
#include "mnemo/chat.h"
#include "mnemo/log.h"
#include "mnemo/quant.h"
#include "mnemo/server.h"
#include "server/api.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/slot_files.h"

namespace mnemo::server {

// The web page's bytes (generated from src/server/webui/index.html at build time).
extern const unsigned char kWebIndex[];
extern const size_t kWebIndexSize;

namespace {

using httplib::DataSink;
using httplib::Request;
using httplib::Response;
using Clock = std::chrono::steady_clock;

constexpr auto kPoll = std::chrono::milliseconds(1000);  // stream keep-alive interval
// Non-streamed completions: how long a quick answer may take before the body switches to
// chunked, and the interval of the whitespace heartbeat after that. A closed connection fails
// the second write after the close, so a client that leaves is noticed within ~3 heartbeats.
constexpr auto kHeartbeat = std::chrono::milliseconds(250);

// Set by stop_server(); the running server's watcher thread polls it (as it waits for signals).
std::atomic<bool> g_stop_requested{false};

// httplib's task queue for `mnemo serve`: n_core threads always, and up to n_max while every
// thread is busy. httplib runs one connection per task, from its request line to its last
// keep-alive request, so clients that send slowly (or stream a long answer) hold threads; the
// extra threads keep /health, /metrics and other clients answered meanwhile. An extra thread
// ends after kIdle without work. Beyond n_max, connections wait in order.
class ElasticPool : public httplib::TaskQueue {
 public:
  ElasticPool(size_t n_core, size_t n_max) : n_core_(n_core), n_max_(std::max(n_core, n_max)) {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < n_core_; ++i) spawn(/*extra=*/false);
  }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > idle_ && live_ < n_max_) spawn(/*extra=*/true);
    cv_.notify_one();
  }

  // Runs the queued connections, then returns when every thread has ended.
  void shutdown() override {
    std::unique_lock<std::mutex> lk(mu_);
    shutdown_ = true;
    cv_.notify_all();
    ended_.wait(lk, [&] { return live_ == 0; });
  }

 private:
  static constexpr auto kIdle = std::chrono::seconds(10);

  // Under mu_. The threads are detached: shutdown() waits for live_ to reach 0 instead.
  void spawn(bool extra) {
    ++live_;
    std::thread([this, extra] { work(extra); }).detach();
  }

  void work(bool extra) {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      ++idle_;
      const auto ready = [&] { return shutdown_ || !jobs_.empty(); };
      const bool got = extra ? cv_.wait_for(lk, kIdle, ready) : (cv_.wait(lk, ready), true);
      --idle_;
      if (jobs_.empty() && (shutdown_ || !got)) break;
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lk.unlock();
      fn();
      lk.lock();
    }
    --live_;
    ended_.notify_all();  // under mu_: shutdown() cannot return (and free *this) before unlock
  }

  const size_t n_core_, n_max_;
  std::mutex mu_;
  std::condition_variable cv_, ended_;
  std::deque<std::function<void()>> jobs_;
  size_t live_ = 0, idle_ = 0;
  bool shutdown_ = false;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// What the request log line says beyond method, path and status.
struct RequestLog {
  Clock::time_point t0 = Clock::now();
  std::string extra;
  bool deferred = false;  // a content provider logs when the response ends
};

void log_request(const std::string& method, const std::string& path, int status,
                 const RequestLog& log) {
  MNEMO_LOG(kInfo) << fmt::format("{} {} {} {:.0f} ms{}", method, path, status, ms_since(log.t0),
                                  log.extra);
}

std::string completion_log(const CompletionStats& s, const char* outcome) {
  const double tps = s.gen_ms > 0 ? s.n_generated * 1000.0 / s.gen_ms : 0.0;
  return fmt::format(" | slot {} | prompt {} (cached {}) | generated {} | {:.1f} tok/s | {}",
                     s.id_slot, s.n_prompt, s.n_cached, s.n_generated, tps, outcome);
}

const char* outcome_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kWord:
      return "stop word";
    case FinishReason::kLimit:
      return "n_predict";
    case FinishReason::kContext:
      return "context full";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kNone:
      break;
  }
  return "";
}

// Constant-time comparison (the time taken does not reveal how much of the key matched).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

// One completion being answered: shared by the handler, the content provider and its releaser.
struct Exchange {
  ParsedCompletion parsed;
  ResponseIds ids;
  std::shared_ptr<TaskChannel> channel;
  CompletionResult result;
  bool begun = false;     // stream_begin written
  bool finished = false;  // the final event was handled
  bool logged = false;
  int32_t id_slot = -1;
  std::string outcome;  // for the log line
  RequestLog log;
  std::string method, path;  // for the deferred log line
};

class Front {
 public:
  Front(const Model& model, const Tokenizer& tok, Engine& engine, const ServerParams& params,
        Metrics& metrics, ChatTemplate tmpl, Json template_kwargs)
      : model_(model),
        tok_(tok),
        engine_(engine),
        params_(params),
        metrics_(metrics),
        tmpl_(std::move(tmpl)) {
    defaults_.chat_template_kwargs = std::move(template_kwargs);
    defaults_.sampling = params.sampling;
    defaults_.n_predict = params.n_predict;
    defaults_.n_predict_max = params.n_predict_max;
    defaults_.n_keep = params.n_keep;
    defaults_.n_slots = engine.info().n_slots;
    defaults_.tok = &tok;
    defaults_.n_ctx_seq = engine.info().n_ctx_seq;
    for (TokenId id = 0; id < tok.n_vocab(); ++id) {
      defaults_.max_token_bytes = std::max(defaults_.max_token_bytes, tok.token_text(id).size());
    }
    defaults_.model_name = params.model_alias.empty()
                               ? std::filesystem::path(params.model_path).filename().string()
                               : params.model_alias;
  }

  void install(httplib::Server& svr);

 private:
  using Handler = void (Front::*)(const Request&, Response&, RequestLog&);
  httplib::Server::Handler wrap(Handler h);
  // For POST routes: the handler reads the body itself. A request with neither Content-Length
  // nor a chunked Transfer-Encoding has no body (RFC 9112 §6.3): it is answered at once, not
  // read until the client closes. A body over --max-body is a 413.
  httplib::Server::HandlerWithContentReader wrap_post(Handler h);

  void reply_json(Response& res, const Json& j, int status = 200) {
    res.status = status;
    res.set_content(dump(j), "application/json; charset=utf-8");
  }
  // count: false for errors the engine reported (it counted them already).
  void reply_error(Response& res, ErrorKind kind, const std::string& msg, bool count = true) {
    if (count) metrics_.count_error(uint8_t(kind));
    reply_json(res, error_json(kind, msg), http_error(kind).status);
  }
  // Parses the body as JSON; on failure replies 400 and returns false.
  bool parse_body(const Request& req, Response& res, Json* out);
  // Waits for a control reply (bounded by --timeout); on failure replies and returns false.
  bool run_control(ControlRequest creq, Response& res, ControlReply* out);

  void health(const Request&, Response& res, RequestLog&) { reply_json(res, {{"status", "ok"}}); }
  // The web page (src/server/webui/index.html, built in); public: it asks for the API key.
  void web_page(const Request&, Response& res, RequestLog&) {
    res.status = 200;
    res.set_content(reinterpret_cast<const char*>(kWebIndex), kWebIndexSize,
                    "text/html; charset=utf-8");
  }
  // CORS response headers for a request from a web page of an allowed origin (none otherwise).
  void cors_headers(const Request& req, Response& res) const {
    const std::string origin = req.get_header_value("Origin");
    if (origin.empty() || res.has_header("Access-Control-Allow-Origin") || !origin_allowed(origin))
      return;
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Access-Control-Allow-Credentials", "true");
    res.set_header("Vary", "Origin");
  }
  bool origin_allowed(const std::string& origin) const {
    if (params_.allowed_origins == "*") return true;
    size_t i = 0;
    const std::string& list = params_.allowed_origins;
    while (i <= list.size()) {
      size_t j = list.find(',', i);
      if (j == std::string::npos) j = list.size();
      std::string item = list.substr(i, j - i);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      if (item == origin) return true;
      i = j + 1;
    }
    return false;
  }
  void props(const Request& req, Response& res, RequestLog& log);
  void slots(const Request& req, Response& res, RequestLog& log);
  void slot_action(const Request& req, Response& res, RequestLog& log);
  void requantize(const Request& req, Response& res, RequestLog& log);
  void models(const Request& req, Response& res, RequestLog& log);
  void tokenize(const Request& req, Response& res, RequestLog& log);
  void apply_template(const Request& req, Response& res, RequestLog& log);
  void detokenize(const Request& req, Response& res, RequestLog& log);
  void metrics(const Request& req, Response& res, RequestLog& log);
  void completion_llama(const Request& req, Response& res, RequestLog& log) {
    completion(req, res, log, Api::kLlama);
  }
  void completion_oai(const Request& req, Response& res, RequestLog& log) {
    completion(req, res, log, Api::kOaiCompletion);
  }
  void completion_chat(const Request& req, Response& res, RequestLog& log) {
    completion(req, res, log, Api::kOaiChat);
  }
  void completion(const Request& req, Response& res, RequestLog& log, Api api);
  // Several completions of one request (several prompts, or n > 1): started as parsed, except
  // that a copy of a prompt waits until the prompt's first completion has read it.
  void completion_multi(const Request& req, Response& res, RequestLog& log, Api api,
                        std::vector<ParsedCompletion> all);

  // Applies one event to the exchange's result. Returns true for the final event.
  bool absorb(Exchange& ex, const CompletionEvent& ev);
  // Streams events as SSE until the end; false when the client went away.
  bool pump_sse(Exchange& ex, DataSink& sink);
  void finish_log(Exchange& ex, int status);

  const Model& model_;
  const Tokenizer& tok_;
  Engine& engine_;
  const ServerParams& params_;
  Metrics& metrics_;
  ChatTemplate tmpl_;
  ApiDefaults defaults_;
};

httplib::Server::Handler Front::wrap(Handler h) {
  return [this, h](const Request& req, Response& res) {
    RequestLog log;
    try {
      (this->*h)(req, res, log);
    } catch (const Json::exception& e) {  // a value of the wrong type or range in the body
      reply_error(res, ErrorKind::kInvalidRequest, std::string("invalid request: ") + e.what());
    } catch (const std::exception& e) {  // a library's exception (nlohmann, std): never crash
      MNEMO_LOG(kError) << req.method << " " << req.path << ": " << e.what();
      reply_error(res, ErrorKind::kInternal, std::string("internal error: ") + e.what());
    }
    if (!log.deferred) log_request(req.method, req.path, res.status, log);
  };
}

httplib::Server::HandlerWithContentReader Front::wrap_post(Handler h) {
  auto inner = wrap(h);
  return [this, inner](const Request& req, Response& res, const httplib::ContentReader& reader) {
    const bool chunked =
        req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
    if (!req.has_header("Content-Length") && !chunked) {
      inner(req, res);  // no body
      return;
    }
    std::string body;
    bool too_large = false, too_slow = false;
    if (req.has_header("Content-Length")) {
      uint64_t length = 0;
      if (Status st = parse_content_length(req.get_header_value("Content-Length"), &length);
          !st.ok()) {
        reply_error(res, ErrorKind::kInvalidRequest, st.message());
        log_request(req.method, req.path, res.status, RequestLog{});
        return;
      }
      too_large = length > params_.max_body_bytes;
    }
    // Each read waits at most --read-timeout (httplib's socket timeout); the whole body must
    // arrive within --timeout. A body cut short is never acted on.
    bool complete = true;
    if (!too_large) {
      const auto deadline = Clock::now() + std::chrono::seconds(params_.timeout_s);
      complete = reader([&](const char* data, size_t n) {
        if (body.size() + n > params_.max_body_bytes) {
          too_large = true;
          return false;
        }
        if (Clock::now() > deadline) {
          too_slow = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
    }
    if (!too_large && (!complete || too_slow)) {
      Json j = error_json(ErrorKind::kInvalidRequest,
                          too_slow ? fmt::format("the request body did not arrive within {} s "
                                                 "(--timeout)",
                                                 params_.timeout_s)
                                   : std::string("the request body ended before its length"));
      res.status = 408;
      j["error"]["code"] = res.status;
      metrics_.count_error(uint8_t(ErrorKind::kInvalidRequest));
      res.set_content(dump(j), "application/json; charset=utf-8");
      res.set_header("Connection", "close");
      log_request(req.method, req.path, res.status, RequestLog{});
      return;
    }
    if (too_large) {
      reply_error(res, ErrorKind::kBodyTooLarge,
                  fmt::format("the request body is larger than {} bytes (--max-body)",
                              params_.max_body_bytes));
      log_request(req.method, req.path, res.status, RequestLog{});
      return;
    }
    Request with_body = req;
    with_body.body = std::move(body);
    inner(with_body, res);
  };
}

bool Front::parse_body(const Request& req, Response& res, Json* out) {
  if (Status st = parse_json_body(req.body, out); !st.ok()) {
    reply_error(res, ErrorKind::kInvalidRequest, st.message());
    return false;
  }
  return true;
}

bool Front::run_control(ControlRequest creq, Response& res, ControlReply* out) {
  auto f = engine_.control(std::move(creq));
  if (f.wait_for(std::chrono::seconds(params_.timeout_s)) != std::future_status::ready) {
    reply_error(res, ErrorKind::kTimeout, "the server loop did not answer in time");
    return false;
  }
  *out = f.get();
  if (!out->status.ok()) {
    reply_error(res, out->error_kind, out->status.message());
    return false;
  }
  return true;
}

void Front::props(const Request&, Response& res, RequestLog&) {
  ControlReply snap;
  if (!run_control({}, res, &snap)) return;
  const EngineInfo& info = engine_.info();
  Json slots = Json::array();
  for (const SlotInfo& s : snap.slots) {
    slots.push_back(
        {{"id", s.id}, {"type_k", type_json(s.type_k)}, {"type_v", type_json(s.type_v)}});
  }
  const SamplingParams& sp = params_.sampling;
  reply_json(res,
             {{"model", defaults_.model_name},
              // The file's name: no response shows the server's directories.
              {"model_path", std::filesystem::path(params_.model_path).filename().string()},
              {"model_description", model_.describe()},
              {"n_ctx", info.n_ctx},
              {"n_ctx_slot", info.n_ctx_seq},
              {"total_slots", info.n_slots},
              {"memory_mode", info.kv_unified ? "unified" : "split"},
              {"kv_unified", info.kv_unified},
              {"n_batch", info.n_batch},
              {"n_ubatch", info.n_ubatch},
              {"n_threads", info.n_threads},
              {"context_shift", info.context_shift},
              {"kv_policy", info.kv_policy},
              {"slots", slots},
              {"kv_bytes", snap.breakdown.tensor_bytes},
              // As llama-server: the template's text (a family's name when rendered by a
              // fixed format), and the special tokens it sees.
              {"chat_template", tmpl_.is_jinja() ? tmpl_.source() : std::string(tmpl_.mode_name())},
              {"chat_template_mode", tmpl_.mode_name()},
              {"bos_token", tok_.bos() == kTokenNull ? "" : tok_.token_to_piece(tok_.bos(), true)},
              {"eos_token", tok_.eos() == kTokenNull ? "" : tok_.token_to_piece(tok_.eos(), true)},
              // As llama-server: the slot's n_ctx and the settings a request gets.
              {"default_generation_settings",
               {{"n_ctx", info.n_ctx_seq},
                {"params",
                 {{"n_predict", params_.n_predict},
                  {"n_predict_max", params_.n_predict_max},
                  {"n_keep", params_.n_keep},
                  {"temperature", sp.temp},
                  {"top_k", sp.top_k},
                  {"top_p", sp.top_p},
                  {"min_p", sp.min_p},
                  {"repeat_penalty", sp.repeat_penalty},
                  {"repeat_last_n", sp.repeat_last_n},
                  {"frequency_penalty", sp.frequency_penalty},
                  {"presence_penalty", sp.presence_penalty},
                  {"seed", sp.seed},
                  {"logit_bias", Json::array()},
                  {"stream", false},
                  {"n_probs", 0},
                  {"timings_per_token", false}}}}},
              {"endpoint_slots", params_.slots_endpoint},
              {"endpoint_metrics", params_.metrics},
              {"build_info", "mnemo 0.1.0"}});
}

void Front::slots(const Request& req, Response& res, RequestLog&) {
  if (!params_.slots_endpoint) {
    reply_error(res, ErrorKind::kNotSupported,
                "the slots endpoint is disabled: start the server with --slots");
    return;
  }
  ControlReply snap;
  if (!run_control({}, res, &snap)) return;
  const std::string fail = req.get_param_value("fail_on_no_slot");
  if (!fail.empty() && fail != "0" && fail != "false" &&
      std::none_of(snap.slots.begin(), snap.slots.end(),
                   [](const SlotInfo& s) { return s.state == SlotState::kIdle; })) {
    reply_error(res, ErrorKind::kQueueFull, "no slot available");
    return;
  }
  reply_json(res, slots_json(snap));
}

void Front::slot_action(const Request& req, Response& res, RequestLog& log) {
  if (params_.slot_save_path.empty()) {
    reply_error(res, ErrorKind::kNotSupported,
                "slot actions are disabled: start the server with --slot-save-path DIR");
    return;
  }
  const std::string id_text = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  int32_t id = -1;
  if (Status st = parse_slot_id(id_text, engine_.info().n_slots, &id); !st.ok()) {
    reply_error(
        res, st.code() == StatusCode::kNotFound ? ErrorKind::kNotFound : ErrorKind::kInvalidRequest,
        st.message());
    return;
  }
  const std::string action = req.get_param_value("action");
  log.extra = fmt::format(" | slot {} | {}", id, action);
  ControlRequest creq;
  creq.slot = id;
  if (action == "erase") {
    creq.kind = ControlKind::kSlotErase;
    ControlReply r;
    if (!run_control(std::move(creq), res, &r)) return;
    reply_json(res, {{"id_slot", id}, {"n_erased", r.n_tokens}});
    return;
  }
  if (action != "save" && action != "restore") {
    reply_error(res, ErrorKind::kInvalidRequest,
                "'action' must be save, restore or erase (got '" + action + "')");
    return;
  }
  Json body;
  if (!parse_body(req, res, &body)) return;
  if (!body.is_object() || !body.contains("filename") || !body["filename"].is_string()) {
    reply_error(res, ErrorKind::kInvalidRequest, "'filename' must be a string");
    return;
  }
  const std::string filename = body["filename"].get<std::string>();
  auto path = slot_file_path(params_.slot_save_path, filename);
  if (!path.ok()) {
    reply_error(res, error_kind_for(path.status(), ErrorOrigin::kRequest),
                "bad 'filename': " + path.status().message());
    return;
  }
  creq.kind = action == "save" ? ControlKind::kSlotSave : ControlKind::kSlotRestore;
  creq.path = *path;
  ControlReply r;
  if (!run_control(std::move(creq), res, &r)) return;
  log.extra += fmt::format(" | {} tokens, {} bytes, {:.1f} ms", r.n_tokens, r.bytes, r.ms);
  if (action == "save") {
    reply_json(res, {{"id_slot", id},
                     {"filename", filename},
                     {"n_saved", r.n_tokens},
                     {"n_written", r.bytes},
                     {"timings", {{"save_ms", r.ms}}}});
  } else {
    reply_json(res, {{"id_slot", id},
                     {"filename", filename},
                     {"n_restored", r.n_tokens},
                     {"n_read", r.bytes},
                     {"timings", {{"restore_ms", r.ms}}}});
  }
}

void Front::requantize(const Request& req, Response& res, RequestLog& log) {
  Json body;
  if (!parse_body(req, res, &body)) return;
  ControlRequest creq;
  if (Status st = parse_requantize(body, engine_.info().n_slots, &creq); !st.ok()) {
    reply_error(res, error_kind_for(st, ErrorOrigin::kRequest), st.message());
    return;
  }
  ControlReply r;
  if (!run_control(creq, res, &r)) return;
  log.extra =
      fmt::format(" | slot {} -> {}/{} | {} -> {} bytes | {:.1f} ms", creq.slot,
                  type_name(r.type_k), type_name(r.type_v), r.bytes_before, r.bytes_after, r.ms);
  reply_json(res, {{"slot", creq.slot},
                   {"type_k", std::string(type_name(r.type_k))},
                   {"type_v", std::string(type_name(r.type_v))},
                   {"bytes_before", r.bytes_before},
                   {"bytes_after", r.bytes_after},
                   {"ms", r.ms}});
}

void Front::models(const Request&, Response& res, RequestLog&) {
  reply_json(res, {{"object", "list"},
                   {"data", Json::array({{{"id", defaults_.model_name},
                                          {"object", "model"},
                                          {"created", 0},
                                          {"owned_by", "mnemo"},
                                          {"meta",
                                           {{"n_ctx_train", model_.hparams().n_ctx_train},
                                            {"n_vocab", model_.hparams().n_vocab},
                                            {"n_params", model_.n_params()},
                                            {"size", model_.n_bytes()}}}}})}});
}

void Front::tokenize(const Request& req, Response& res, RequestLog&) {
  Json body, out;
  if (!parse_body(req, res, &body)) return;
  if (Status st = tokenize_json(body, tok_, &out); !st.ok()) {
    reply_error(res, error_kind_for(st, ErrorOrigin::kRequest), st.message());
    return;
  }
  reply_json(res, out);
}

// llama-server's POST /apply-template: {"messages": [...]} -> {"prompt": the rendered text}.
void Front::apply_template(const Request& req, Response& res, RequestLog&) {
  Json body;
  if (!parse_body(req, res, &body)) return;
  std::string prompt;
  if (Status st = render_chat_prompt(body, tmpl_, defaults_, &prompt); !st.ok()) {
    reply_error(res, ErrorKind::kInvalidRequest, st.message());
    return;
  }
  reply_json(res, {{"prompt", prompt}});
}

void Front::detokenize(const Request& req, Response& res, RequestLog&) {
  Json body, out;
  if (!parse_body(req, res, &body)) return;
  if (Status st = detokenize_json(body, tok_, &out); !st.ok()) {
    reply_error(res, error_kind_for(st, ErrorOrigin::kRequest), st.message());
    return;
  }
  reply_json(res, out);
}

void Front::metrics(const Request&, Response& res, RequestLog&) {
  if (!params_.metrics) {
    reply_error(res, ErrorKind::kNotSupported,
                "the metrics endpoint is disabled: start the server with --metrics");
    return;
  }
  ControlReply snap;
  if (!run_control({}, res, &snap)) return;
  res.status = 200;
  res.set_content(prometheus_text(metrics_, engine_.info(), snap),
                  "text/plain; version=0.0.4; charset=utf-8");
}

bool Front::absorb(Exchange& ex, const CompletionEvent& ev) {
  switch (ev.kind) {
    case CompletionEvent::Kind::kAdmitted:
      ex.id_slot = ev.stats.id_slot;
      return false;
    case CompletionEvent::Kind::kProgress:
      return false;
    case CompletionEvent::Kind::kText:
      ex.result.text += ev.text;
      ex.result.tokens.insert(ex.result.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      ex.result.probs.insert(ex.result.probs.end(), ev.probs.begin(), ev.probs.end());
      return false;
    case CompletionEvent::Kind::kDone:
      ex.result.finish = ev.finish;
      ex.result.stop_word = ev.stop_word;
      ex.result.stats = ev.stats;
      ex.outcome = completion_log(ev.stats, outcome_name(ev.finish));
      ex.finished = true;
      return true;
    case CompletionEvent::Kind::kError:
      ex.outcome = fmt::format(" | slot {} | error: {}", ex.id_slot, ev.error);
      ex.finished = true;
      return true;
  }
  return true;
}

void Front::finish_log(Exchange& ex, int status) {
  if (ex.logged) return;
  ex.logged = true;
  ex.log.extra = ex.outcome.empty()
                     ? fmt::format(" | slot {} | cancelled (client went away)", ex.id_slot)
                     : ex.outcome;
  log_request(ex.method, ex.path, status, ex.log);
}

bool Front::pump_sse(Exchange& ex, DataSink& sink) {
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  auto event = [&](const Json& j) { return write("data: " + dump(j) + "\n\n"); };
  const ParsedCompletion& p = ex.parsed;
  if (!ex.begun) {
    ex.begun = true;
    for (const Json& j : stream_begin(p, defaults_, ex.ids)) {
      if (!event(j)) return false;
    }
  }
  auto last_write = Clock::now();
  while (true) {
    auto ev = ex.channel->pop(kPoll);
    if (Clock::now() - last_write >= kPoll) {
      // Nothing sent for a while (a long prompt, text held back): an SSE comment keeps the
      // connection and finds a dead one.
      if (!write(": keep-alive\n\n")) return false;
      last_write = Clock::now();
    }
    if (!ev) continue;
    const CompletionEvent& e = *ev;
    const bool last = absorb(ex, e);
    if (e.kind == CompletionEvent::Kind::kProgress) {
      if (!event(stream_progress(p, e, ex.id_slot, defaults_, ex.ids))) return false;
      last_write = Clock::now();
    } else if (e.kind == CompletionEvent::Kind::kText) {
      const bool want =
          !e.text.empty() || p.logprobs || (p.api == Api::kLlama && !e.tokens.empty());
      if (want) {
        if (!event(stream_delta(p, e.text, e.tokens, e.probs, e.stats, ex.id_slot, defaults_,
                                ex.ids))) {
          return false;
        }
        last_write = Clock::now();
      }
    } else if (e.kind == CompletionEvent::Kind::kDone) {
      for (const Json& j : stream_end(p, ex.result, defaults_, ex.ids)) {
        if (!event(j)) return false;
      }
      if (p.api != Api::kLlama && !write("data: [DONE]\n\n")) return false;
    } else if (e.kind == CompletionEvent::Kind::kError) {
      if (!event(error_json(e.error_kind, e.error))) return false;
    }
    if (last) {
      sink.done();
      return true;
    }
  }
}

void Front::completion(const Request& req, Response& res, RequestLog& log, Api api) {
  Json body;
  if (!parse_body(req, res, &body)) return;
  auto ex = std::make_shared<Exchange>();
  std::vector<ParsedCompletion> all;
  if (Status st = parse_completions(body, api, tok_, tmpl_, defaults_, &all); !st.ok()) {
    const ErrorKind kind = error_kind_for(st, ErrorOrigin::kRequest);
    reply_error(res, kind, st.message());
    if (kind == ErrorKind::kPromptTooLong) {
      // llama-server's fields of exceed_context_size_error.
      Json j = error_json(kind, st.message());
      j["error"]["n_prompt_tokens"] = all.empty() ? 0 : all.front().n_prompt_tokens;
      j["error"]["n_ctx"] = engine_.info().n_ctx_seq;
      reply_json(res, j, res.status);
    }
    return;
  }
  if (all.size() > 1) {
    completion_multi(req, res, log, api, std::move(all));
    return;
  }
  ex->parsed = std::move(all.front());
  ex->ids = new_response_ids(api);
  ErrorKind kind = ErrorKind::kInternal;
  auto ch = engine_.submit(ex->parsed.req, &kind);
  if (!ch.ok()) {
    reply_error(res, kind, ch.status().message());
    return;
  }
  ex->channel = *ch;

  // Wait for a slot (queued requests wait here, bounded by --timeout).
  const auto deadline = Clock::now() + std::chrono::seconds(params_.timeout_s);
  while (true) {
    auto ev = ex->channel->pop(kPoll);
    if (!ev) {
      if (Clock::now() < deadline) continue;
      ex->channel->cancel();
      reply_error(res, ErrorKind::kTimeout,
                  fmt::format("no slot became free within {} s (--timeout)", params_.timeout_s));
      return;
    }
    if (ev->kind == CompletionEvent::Kind::kError) {
      log.extra = " | refused: " + ev->error;
      reply_error(res, ev->error_kind, ev->error, /*count=*/false);
      return;
    }
    absorb(*ex, *ev);
    break;  // kAdmitted
  }

  ex->log = log;
  ex->method = req.method;
  ex->path = req.path;
  log.deferred = true;
  if (ex->parsed.stream) {
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, ex](size_t, DataSink& sink) {
          if (pump_sse(*ex, sink)) return true;
          ex->channel->cancel();  // the client went away
          return false;
        },
        [this, ex](bool success) {
          if (!ex->finished) ex->channel->cancel();
          finish_log(*ex, success ? 200 : 499);
        });
    return;
  }

  // Not streamed: a quick answer gets an exact status; a slow one switches to a chunked body.
  const auto quick = Clock::now() + kHeartbeat;
  while (!ex->finished && Clock::now() < quick) {
    auto ev = ex->channel->pop(std::chrono::duration_cast<std::chrono::milliseconds>(
        quick - Clock::now() + std::chrono::milliseconds(1)));
    if (ev) {
      if (ev->kind == CompletionEvent::Kind::kError) {
        absorb(*ex, *ev);
        reply_error(res, ev->error_kind, ev->error, /*count=*/false);
        finish_log(*ex, res.status);
        return;
      }
      absorb(*ex, *ev);
    }
  }
  if (ex->finished) {
    reply_json(res, completion_json(ex->parsed, ex->result, defaults_, ex->ids));
    finish_log(*ex, 200);
    return;
  }
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json; charset=utf-8",
      [this, ex](size_t, DataSink& sink) {
        auto last_write = Clock::now();
        while (true) {
          auto ev = ex->channel->pop(kHeartbeat);
          // A space every heartbeat, events or not: the only way to find out the client left.
          if (Clock::now() - last_write >= kHeartbeat) {
            if (!sink.write(" ", 1)) {
              ex->channel->cancel();
              return false;
            }
            last_write = Clock::now();
          }
          if (!ev || !absorb(*ex, *ev)) continue;
          const Json j = ev->kind == CompletionEvent::Kind::kError
                             ? error_json(ev->error_kind, ev->error)
                             : completion_json(ex->parsed, ex->result, defaults_, ex->ids);
          const std::string s = dump(j);
          if (!sink.write(s.data(), s.size())) return false;
          sink.done();
          return true;
        }
      },
      [this, ex](bool success) {
        if (!ex->finished) ex->channel->cancel();
        finish_log(*ex, success ? 200 : 499);
      });
}

// The exchanges of a multi-completion request, pumped together by one HTTP thread.
struct MultiExchange {
  std::vector<std::shared_ptr<Exchange>> ex;
  std::vector<bool> started;
  ResponseIds ids;
  bool failed = false;
  ErrorKind error_kind = ErrorKind::kInternal;
  std::string error;

  bool all_finished() const {
    return std::all_of(ex.begin(), ex.end(), [](const auto& e) { return e->finished; });
  }
  void cancel_all() {
    for (const auto& e : ex) {
      if (e->channel && !e->finished) e->channel->cancel();
    }
  }
  void time_out() {
    failed = true;
    error_kind = ErrorKind::kTimeout;
    error = "the completions did not finish within --timeout";
  }
  // Usage of them all: prompt tokens counted once per prompt (copies share the first's),
  // generated tokens of every completion; timings of the first.
  CompletionStats usage() const {
    CompletionStats sum = ex.front()->result.stats;
    sum.n_prompt = sum.n_cached = sum.n_generated = 0;
    for (const auto& e : ex) {
      const CompletionStats& s = e->result.stats;
      if (e->parsed.copy_of < 0) {
        sum.n_prompt += s.n_prompt;
        sum.n_cached += s.n_cached;
      }
      sum.n_generated += s.n_generated;
    }
    return sum;
  }
};

void Front::completion_multi(const Request& req, Response& res, RequestLog& log, Api api,
                             std::vector<ParsedCompletion> all) {
  auto m = std::make_shared<MultiExchange>();
  m->ids = new_response_ids(api);
  for (ParsedCompletion& p : all) {
    auto e = std::make_shared<Exchange>();
    e->parsed = std::move(p);
    e->ids = m->ids;
    m->ex.push_back(std::move(e));
  }
  m->started.assign(m->ex.size(), false);
  const bool stream = m->ex.front()->parsed.stream;
  log.extra = fmt::format(" | {} completions", m->ex.size());

  // Starts every completion that may start now: firsts at once, copies once their first has
  // produced a token (its prompt is then in a slot's memory). false when a submit failed.
  auto start_ready = [this, m]() {
    for (size_t i = 0; i < m->ex.size(); ++i) {
      if (m->started[i]) continue;
      Exchange& e = *m->ex[i];
      const int32_t first = e.parsed.copy_of;
      if (first >= 0 && !m->ex[size_t(first)]->finished &&
          m->ex[size_t(first)]->result.tokens.empty()) {
        continue;
      }
      ErrorKind kind = ErrorKind::kInternal;
      auto ch = engine_.submit(e.parsed.req, &kind);
      if (!ch.ok()) {
        m->failed = true;
        m->error_kind = kind;
        m->error = ch.status().message();
        return false;
      }
      e.channel = *ch;
      m->started[i] = true;
    }
    return true;
  };
  // One round over the started, unfinished completions: each event goes to `on_event`.
  auto pump = [m](const std::function<bool(size_t, const CompletionEvent&)>& on_event) {
    bool any = false;
    for (size_t i = 0; i < m->ex.size(); ++i) {
      Exchange& e = *m->ex[i];
      if (!m->started[i] || e.finished) continue;
      while (auto ev = e.channel->pop(std::chrono::milliseconds(any ? 0 : 5))) {
        any = true;
        if (!on_event(i, *ev)) return false;
        if (e.finished) break;
      }
    }
    return true;
  };
  auto absorb_or_fail = [this, m](size_t i, const CompletionEvent& ev) {
    absorb(*m->ex[i], ev);
    if (ev.kind == CompletionEvent::Kind::kError) {
      m->failed = true;
      m->error_kind = ev.error_kind;
      m->error = ev.error;
    }
  };
  if (!start_ready()) {
    reply_error(res, m->error_kind, m->error, /*count=*/false);
    return;
  }
  log.deferred = true;
  const std::string method = req.method, path = req.path;
  auto finish = [this, m, method, path, log](int status) {
    RequestLog l = log;
    l.extra += m->failed ? " | error: " + m->error : "";
    log_request(method, path, status, l);
  };
  const auto deadline = Clock::now() + std::chrono::seconds(params_.timeout_s);

  if (!stream) {
    res.status = 200;
    res.set_chunked_content_provider(
        "application/json; charset=utf-8",
        [this, m, start_ready, pump, absorb_or_fail, deadline, api](size_t, DataSink& sink) {
          auto last_write = Clock::now();
          while (!m->all_finished() && !m->failed) {
            if (!start_ready()) break;
            pump([&](size_t i, const CompletionEvent& ev) {
              absorb_or_fail(i, ev);
              return !m->failed;
            });
            if (Clock::now() - last_write >= kHeartbeat) {  // JSON whitespace: a client alive?
              if (!sink.write(" ", 1)) {
                m->cancel_all();
                return false;
              }
              last_write = Clock::now();
            }
            if (Clock::now() > deadline) m->time_out();
          }
          Json out;
          if (m->failed) {
            m->cancel_all();
            out = error_json(m->error_kind, m->error);
          } else if (api == Api::kLlama) {
            out = Json::array();
            for (const auto& e : m->ex) {
              out.push_back(completion_json(e->parsed, e->result, defaults_, m->ids));
            }
          } else {
            out = completion_json(m->ex[0]->parsed, m->ex[0]->result, defaults_, m->ids);
            out["choices"] = Json::array();
            for (const auto& e : m->ex) {
              out["choices"].push_back(
                  completion_json(e->parsed, e->result, defaults_, m->ids)["choices"][0]);
            }
            out["usage"] = usage_json(m->usage());
          }
          const std::string s = dump(out);
          if (!sink.write(s.data(), s.size())) return false;
          sink.done();
          return true;
        },
        [m, finish](bool success) {
          m->cancel_all();
          finish(success ? 200 : 499);
        });
    return;
  }

  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, m, start_ready, pump, absorb_or_fail, deadline, api](size_t, DataSink& sink) {
        auto event = [&](const Json& j) {
          const std::string s = "data: " + dump(j) + "\n\n";
          return sink.write(s.data(), s.size());
        };
        for (const auto& e : m->ex) {
          for (const Json& j : stream_begin(e->parsed, defaults_, m->ids)) {
            if (!event(j)) return false;
          }
        }
        auto last_write = Clock::now();
        while (!m->all_finished() && !m->failed) {
          if (!start_ready()) break;
          const bool alive = pump([&](size_t i, const CompletionEvent& ev) {
            Exchange& e = *m->ex[i];
            absorb_or_fail(i, ev);
            const ParsedCompletion& p = e.parsed;
            bool ok = true;
            if (ev.kind == CompletionEvent::Kind::kText &&
                (!ev.text.empty() || p.logprobs || (api == Api::kLlama && !ev.tokens.empty()))) {
              ok = event(stream_delta(p, ev.text, ev.tokens, ev.probs, ev.stats, e.id_slot,
                                      defaults_, m->ids));
            } else if (ev.kind == CompletionEvent::Kind::kDone) {
              ParsedCompletion q = p;
              q.include_usage = false;  // one usage chunk for them all, at the end
              for (const Json& j : stream_end(q, e.result, defaults_, m->ids)) ok = ok && event(j);
            }
            if (ok) last_write = Clock::now();
            return ok;
          });
          if (!alive) {
            m->cancel_all();
            return false;
          }
          if (Clock::now() - last_write >= kPoll) {
            if (!sink.write(": keep-alive\n\n", 14)) {
              m->cancel_all();
              return false;
            }
            last_write = Clock::now();
          }
          if (Clock::now() > deadline) m->time_out();
        }
        if (m->failed) {
          m->cancel_all();
          if (!event(error_json(m->error_kind, m->error))) return false;
        } else if (api != Api::kLlama) {
          const ParsedCompletion& p0 = m->ex[0]->parsed;
          if (p0.include_usage && !event(stream_usage(p0, m->usage(), defaults_, m->ids))) {
            return false;
          }
        }
        if (api != Api::kLlama && !sink.write("data: [DONE]\n\n", 14)) return false;
        sink.done();
        return true;
      },
      [m, finish](bool success) {
        m->cancel_all();
        finish(success ? 200 : 499);
      });
}

void Front::install(httplib::Server& svr) {
  svr.set_pre_routing_handler([this](const Request& req, Response& res) {
    // A CORS preflight carries no credentials (Fetch standard); the public routes need none.
    if (params_.api_key.empty() || req.method == "OPTIONS" || req.path == "/" ||
        req.path == "/index.html" || req.path == "/health" || req.path == "/v1/health" ||
        req.path == "/models" || req.path == "/v1/models") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const bool bearer = auth.compare(0, prefix.size(), prefix) == 0 &&
                        same_secret(auth.substr(prefix.size()), params_.api_key);
    if (bearer || (req.has_header("X-Api-Key") &&
                   same_secret(req.get_header_value("X-Api-Key"), params_.api_key))) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    reply_error(res, ErrorKind::kUnauthorized,
                "invalid or missing API key: send 'Authorization: Bearer <key>' or "
                "'X-Api-Key: <key>'");
    cors_headers(req, res);
    log_request(req.method, req.path, res.status, RequestLog{});
    return httplib::Server::HandlerResponse::Handled;
  });
  // CORS (Fetch standard §3.2): the page's origin is echoed when it is allowed; a preflight
  // (OPTIONS) is answered with the methods and headers a page may use, or 403.
  svr.set_post_routing_handler(
      [this](const Request& req, Response& res) { cors_headers(req, res); });
  svr.Options(R"(.*)", [this](const Request& req, Response& res) {
    const std::string origin = req.get_header_value("Origin");
    if (!origin.empty() && !origin_allowed(origin)) {
      reply_error(res, ErrorKind::kUnauthorized, "origin '" + origin + "' is not allowed");
      res.status = 403;
      log_request(req.method, req.path, res.status, RequestLog{});
      return;
    }
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", asked.empty() ? "*" : asked);
    res.set_header("Access-Control-Max-Age", "600");
    log_request(req.method, req.path, res.status, RequestLog{});
  });
  // Errors httplib produces itself (no route, body too large, bad request line) get a JSON body.
  svr.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const ErrorKind kind = error_kind_for_http_status(res.status);
        std::string msg = "bad request";
        if (kind == ErrorKind::kNotFound) {
          msg = "no route for " + req.method + " " + req.path;
        } else if (kind == ErrorKind::kBodyTooLarge) {
          msg = fmt::format("the request body is larger than {} bytes (--max-body)",
                            params_.max_body_bytes);
        }
        metrics_.count_error(uint8_t(kind));
        cors_headers(req, res);
        Json j = error_json(kind, msg);
        j["error"]["code"] = res.status;
        res.set_content(dump(j), "application/json; charset=utf-8");
        log_request(req.method, req.path, res.status, RequestLog{});
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.Get("/", wrap(&Front::web_page));
  svr.Get("/index.html", wrap(&Front::web_page));
  svr.Get("/health", wrap(&Front::health));
  svr.Get("/v1/health", wrap(&Front::health));
  svr.Get("/props", wrap(&Front::props));
  svr.Get("/slots", wrap(&Front::slots));
  svr.Post(R"(/slots/([^/]+))", wrap_post(&Front::slot_action));
  svr.Post("/cache/requantize", wrap_post(&Front::requantize));
  svr.Post("/completion", wrap_post(&Front::completion_llama));
  svr.Post("/completions", wrap_post(&Front::completion_llama));
  svr.Post("/v1/completions", wrap_post(&Front::completion_oai));
  svr.Post("/v1/chat/completions", wrap_post(&Front::completion_chat));
  svr.Post("/chat/completions", wrap_post(&Front::completion_chat));
  svr.Get("/v1/models", wrap(&Front::models));
  svr.Get("/models", wrap(&Front::models));
  svr.Post("/tokenize", wrap_post(&Front::tokenize));
  svr.Post("/apply-template", wrap_post(&Front::apply_template));
  svr.Post("/detokenize", wrap_post(&Front::detokenize));
  svr.Get("/metrics", wrap(&Front::metrics));
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The prompt cache's settings from the flags (include/mnemo/server.h): none when both tiers are
// off.
Status cache_params(const ServerParams& p, EngineParams* ep) {
  if (p.cache_ram_mib < kCacheRamAuto || p.cache_disk_mib <= 0 || p.cache_block == 0) {
    return Status::invalid_argument(
        "--cache-ram must be >= -1, --cache-disk > 0 and --cache-block > 0");
  }
  constexpr size_t kMiB = size_t{1} << 20;
  size_t ram = 0;
  if (p.cache_ram_mib == kCacheRamAuto) {
    // As llama-server's 8 GiB, but never more than a quarter of this machine's memory: the
    // weights, the slots' K/V and the page cache of a disk tier need the rest.
    ram = std::min<size_t>(size_t{8192} * kMiB, physical_memory_bytes() / 4);
  } else if (p.cache_ram_mib == -1) {
    ram = SIZE_MAX;
  } else {
    ram = size_t(p.cache_ram_mib) * kMiB;
  }
  auto entry_type = [](const std::string& name, const char* flag,
                       std::optional<GgmlType>* out) -> Status {
    if (name.empty()) return Status();
    auto t = type_from_name(name);
    if (!t || !is_kv_cache_type(*t)) {
      return Status::invalid_argument(
          fmt::format("{}: '{}' is not a K/V cache type ({})", flag, name, kv_cache_type_names()));
    }
    *out = *t;
    return Status();
  };
  MNEMO_RETURN_IF_ERROR(entry_type(p.cache_type_k, "--prompt-cache-type-k", &ep->cache_type_k));
  MNEMO_RETURN_IF_ERROR(entry_type(p.cache_type_v, "--prompt-cache-type-v", &ep->cache_type_v));
  if (!p.cache_store.empty()) {
    if (p.cache_store_timeout_ms <= 0) {
      return Status::invalid_argument("--cache-store-timeout must be positive");
    }
    MNEMO_ASSIGN_OR_RETURN(prompt_cache::StoreUrl url,
                           prompt_cache::parse_store_url(p.cache_store));
    prompt_cache::StoreParams sp;
    sp.url = std::move(url);
    sp.timeout_ms = p.cache_store_timeout_ms;
    ep->store = std::move(sp);
  }
  ep->kv_events = p.kv_events;
  ep->block_tokens = p.cache_block;
  if (ram == 0 && p.cache_dir.empty()) {
    // No local tier, but the block size still names the store's and the events' blocks.
    return Status();
  }
  prompt_cache::PromptCacheParams c;
  c.ram_bytes = ram;
  c.dir = p.cache_dir;
  c.disk_bytes = size_t(p.cache_disk_mib) * kMiB;
  c.block_tokens = p.cache_block;
  ep->cache = std::move(c);
  return Status();
}

}  // namespace

void stop_server() { g_stop_requested.store(true); }

Status run_server(const Model& model, const Tokenizer& tok, const ServerParams& params) {
  if (!params.slot_save_path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(params.slot_save_path, ec);
    if (!std::filesystem::is_directory(params.slot_save_path, ec)) {
      return Status::invalid_argument("--slot-save-path '" + params.slot_save_path +
                                      "' is not a directory and cannot be created");
    }
  }
  std::string template_file_text;
  if (!params.chat_template_file.empty()) {
    std::ifstream in(params.chat_template_file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      return Status::invalid_argument("--chat-template-file: cannot read '" +
                                      params.chat_template_file + "'");
    }
    template_file_text = text.str();
  }
  auto tmpl = ChatTemplate::choose(
      tok, params.chat_template, params.chat_template_file.empty() ? nullptr : &template_file_text,
      params.jinja);
  if (!tmpl.ok()) {
    return tmpl.status().with_context(params.chat_template_file.empty() ? "--chat-template"
                                                                        : "--chat-template-file");
  }
  Json template_kwargs = Json::object();
  if (!params.chat_template_kwargs.empty()) {
    template_kwargs = Json::parse(params.chat_template_kwargs, nullptr, /*allow_exceptions=*/false);
    if (!template_kwargs.is_object()) {
      return Status::invalid_argument("--chat-template-kwargs must be a JSON object");
    }
  }
  MNEMO_LOG(kInfo) << "chat template: " << tmpl->mode_name()
                   << (tmpl->is_jinja() ? fmt::format(" ({} bytes)", tmpl->source().size()) : "");
  std::optional<KvPolicy> policy;
  if (!params.kv_policy.empty()) {
    auto p = KvPolicy::parse(params.kv_policy);
    if (!p.ok()) return p.status().with_context("--kv-policy");
    policy = std::move(p).value();
  }
  if (params.n_predict_max < 0 || params.timeout_s <= 0 || params.read_timeout_s <= 0 ||
      params.max_body_bytes == 0 || params.n_threads_http < 0 || params.n_threads_http_max < 0) {
    return Status::invalid_argument(
        "--n-predict-max, --timeout, --read-timeout and --max-body must be positive, "
        "--threads-http and --threads-http-max not negative");
  }

  // SIGINT / SIGTERM are taken by a watcher thread (blocked everywhere else: every thread
  // started from here inherits the mask); a broken pipe is an error return, not a signal.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t sigs, old_mask;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, &old_mask);

  Metrics metrics;
  EngineParams ep;
  ep.ctx = params.ctx;
  ep.context_shift = params.context_shift;
  ep.max_queue = params.max_queue;
  ep.kv_policy = std::move(policy);
  if (Status st = cache_params(params, &ep); !st.ok()) return st;
  auto engine_r = Engine::create(model, tok, ep, &metrics);
  if (!engine_r.ok()) {
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    return engine_r.status();
  }
  Engine& engine = **engine_r;

  httplib::Server svr;
  const int n_http = params.n_threads_http > 0
                         ? params.n_threads_http
                         : static_cast<int>(std::max<uint32_t>(16, 4 * engine.info().n_slots));
  const int n_http_max = params.n_threads_http_max > 0 ? params.n_threads_http_max : 16 * n_http;
  svr.new_task_queue = [n_http, n_http_max] {
    return new ElasticPool(static_cast<size_t>(n_http), static_cast<size_t>(n_http_max));
  };
  svr.set_payload_max_length(params.max_body_bytes);
  svr.set_read_timeout(std::min(params.read_timeout_s, params.timeout_s), 0);
  svr.set_write_timeout(params.timeout_s, 0);
  svr.set_keep_alive_max_count(1000);
  Front front(model, tok, engine, params, metrics, std::move(tmpl).value(),
              std::move(template_kwargs));
  front.install(svr);

  int port = params.port;
  if (port == 0) {
    port = svr.bind_to_any_port(params.host);
  } else if (!svr.bind_to_port(params.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    return Status::io_error(
        fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)",
                    params.host, params.port));
  }
  if (!is_loopback(params.host)) {
    MNEMO_LOG(kWarn) << "listening on " << params.host << ", not only loopback"
                     << (params.api_key.empty() ? ", and without --api-key" : "");
  }
  engine.start();
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done.load()) {
      if (sigtimedwait(&sigs, nullptr, &tick) > 0 || g_stop_requested.load()) {
        MNEMO_LOG(kInfo) << "mnemo serve: stopping";
        // The engine first: requests in flight get a "shutting down" error, so the handlers
        // waiting on them return and the HTTP thread pool can be joined.
        engine.stop();
        // stop() is a no-op until listen_after_bind() runs: repeat it until that returned.
        while (!done.load()) {
          svr.stop();
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return;
      }
    }
  });
  const EngineInfo& info = engine.info();
  MNEMO_LOG(kInfo) << fmt::format(
      "mnemo serve: {} slots, n_ctx {} ({} per slot, {} KV), {} HTTP threads (up to {})",
      info.n_slots, info.n_ctx, info.n_ctx_seq, info.kv_unified ? "unified" : "split", n_http,
      std::max(n_http, n_http_max));
  std::fprintf(stderr, "mnemo serve: listening on http://%s:%d\n", params.host.c_str(), port);
  std::fflush(stderr);
  if (params.on_listening) params.on_listening(port);
  svr.listen_after_bind();  // returns after stop()
  done.store(true);
  watcher.join();
  engine.stop();
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  g_stop_requested.store(false);
  return Status();
}

}  // namespace mnemo::server
