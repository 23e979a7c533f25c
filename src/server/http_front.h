// The HTTP front of `mnemo serve`: the object whose handlers httplib's pool runs, and what its
// files share. cpp-httplib is used by the http* files alone: http.cc (the routes, run_server),
// http_front.cc (body reading and limits, API key, CORS, error replies, the request log),
// http_exchange.cc (completions through a WireApi: waiting, heartbeat, SSE, cancel),
// http_control.cc (the control and utility endpoints), http_pool.cc (the thread pool). The
// JSON of every endpoint comes from the API layer (api.h), which knows nothing about sockets.
//
// Threads: httplib's pool runs the handlers (JSON, chat template, tokenization) and waits on a
// TaskChannel for the engine's events. A streamed completion holds its pool thread while it
// streams; a client that goes away makes a write fail, which cancels the request (the slot is
// freed at the next step). A non-streamed completion that takes longer than kHeartbeat (250 ms) is
// sent as a chunked body that starts with whitespace written every 250 ms (JSON whitespace), so a
// disconnect is noticed there too; such a response has status 200 even if it ends in an error
// object.
#pragma once

#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "mnemo/chat.h"
#include "mnemo/server.h"
#include "server/api.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/response_store.h"

namespace mnemo::server {

using Clock = std::chrono::steady_clock;

/// Stream keep-alive interval: WireApi::keep_alive (an SSE comment, or Anthropic's ping event)
/// after this long without an event.
constexpr auto kPoll = std::chrono::milliseconds(1000);
/// Non-streamed completions: how long a quick answer may take before the body switches to
/// chunked, and the interval of the whitespace heartbeat after that. A closed connection fails
/// the second write after the close, so a client that leaves is noticed within ~3 heartbeats.
constexpr auto kHeartbeat = std::chrono::milliseconds(250);

/// What the request log line says beyond method, path and status.
struct RequestLog {
  Clock::time_point t0 = Clock::now();
  std::string extra;
  bool deferred = false;  // a content provider logs when the response ends
};

/// Logs one line: "METHOD PATH STATUS N ms" and log.extra.
void log_request(const std::string& method, const std::string& path, int status,
                 const RequestLog& log);

/// One completion being answered: shared by the handler, the content provider and its releaser.
struct Exchange {
  const WireApi* api = nullptr;  // the route's surface (parsed.wire)
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

/// Applies one event to the exchange's result and log outcome. Returns true for the final
/// event (kDone or kError).
bool absorb(Exchange& ex, const CompletionEvent& ev);

struct MultiExchange;  // http_exchange.cc: the completions of one request, answered together

/// What every request passes before and after its route, for one listening server (a model's
/// Front, or the router of several): the API key (pre-routing), CORS headers and preflights,
/// and JSON bodies for httplib's own errors (no route, body too large, bad request line).
class Guards {
 public:
  Guards(const ServerParams& params, Metrics& metrics) : params_(params), metrics_(metrics) {}
  void install(httplib::Server& svr);
  /// An error answered before a route's handler runs (API key, body limits, no route, a model
  /// the router does not know): in the shape of the API the path belongs to (Anthropic's for
  /// /v1/messages...), else the shared one; `status` overrides the kind's status when not 0.
  void reply_early_error(const httplib::Request& req, httplib::Response& res, ErrorKind kind,
                         const std::string& msg, int status = 0);
  /// CORS response headers for a request from a web page of an allowed origin (none otherwise).
  void cors_headers(const httplib::Request& req, httplib::Response& res) const;
  /// Whether --allowed-origins ("*" or a comma-separated list) names `origin`.
  bool origin_allowed(const std::string& origin) const;

 private:
  const ServerParams& params_;
  Metrics& metrics_;
};

/// The handlers of every route. Lives as long as the httplib::Server it is installed on.
class Front {
 public:
  Front(const Model& model, const Tokenizer& tok, Engine& engine, const ServerParams& params,
        Metrics& metrics, ChatTemplate tmpl, Json template_kwargs);

  /// Registers the routes (http.cc) and the guards every request passes (Guards).
  void install(httplib::Server& svr);
  /// Answers `req`, its body already read, as this server's route for its method and path
  /// answers it (the router's way into one model's server); false, with nothing written, when
  /// no route matches.
  bool dispatch(const httplib::Request& req, httplib::Response& res);

 private:
  using Request = httplib::Request;
  using Response = httplib::Response;
  using DataSink = httplib::DataSink;
  using Handler = std::function<void(const Request&, Response&, RequestLog&)>;
  using Method = void (Front::*)(const Request&, Response&, RequestLog&);

  // ---- http_front.cc: plumbing every route shares.

  /// A handler with the request log line and the last line of defence (a library's exception
  /// becomes a 400 or 500 answer).
  httplib::Server::Handler wrap(Handler h);
  httplib::Server::Handler wrap(Method m) { return wrap(bind(m)); }
  /// For POST routes: the handler reads the body itself. A request with neither Content-Length
  /// nor a chunked Transfer-Encoding has no body (RFC 9112 §6.3): it is answered at once, not
  /// read until the client closes. A body over --max-body is a 413.
  httplib::Server::HandlerWithContentReader wrap_post(Handler h);
  httplib::Server::HandlerWithContentReader wrap_post(Method m) { return wrap_post(bind(m)); }
  /// A member handler as a Handler.
  Handler bind(Method m) {
    return [this, m](const Request& req, Response& res, RequestLog& log) {
      (this->*m)(req, res, log);
    };
  }
  /// The route of a completion API: Front::completion through `api`.
  Handler completions(const WireApi& api) {
    return [this, &api](const Request& req, Response& res, RequestLog& log) {
      completion(req, res, log, api);
    };
  }
  /// One route: method ("GET", "POST", "DELETE"), path pattern (a regular expression, as
  /// httplib takes it) and handler. The list is made once (routes(), http.cc).
  struct Route {
    std::string method;
    std::string pattern;
    std::regex re;
    Handler handler;
  };
  std::vector<Route> routes();

  /// Answers `j` with `status` (application/json).
  void reply_json(Response& res, const Json& j, int status = 200);
  /// count: false for errors the engine reported (it counted them already).
  void reply_error(Response& res, ErrorKind kind, const std::string& msg, bool count = true);
  /// reply_error in the shape of `api` (WireApi::error_body, WireApi::http_status).
  void reply_error(Response& res, const WireApi& api, const WireError& e, bool count = true);
  void reply_early_error(const Request& req, Response& res, ErrorKind kind, const std::string& msg,
                         int status = 0) {
    guards_.reply_early_error(req, res, kind, msg, status);
  }
  /// Parses the body as JSON; on failure replies 400 and returns false.
  bool parse_body(const Request& req, Response& res, Json* out);
  /// Waits for a control reply (bounded by --timeout); on failure replies and returns false.
  bool run_control(ControlRequest creq, Response& res, ControlReply* out);
  /// What /props and /v1/models report of this server.
  ServerFacts facts() const { return {model_, tok_, tmpl_, params_, defaults_.model_name}; }

  // ---- http_control.cc: the control and utility endpoints, each answering the route of its
  // name (the endpoint list of http.cc); bodies from api_control.h.

  void health(const Request&, Response& res, RequestLog&);
  /// The web page (src/server/webui/index.html, built in); public: it asks for the API key.
  void web_page(const Request&, Response& res, RequestLog&);
  void props(const Request& req, Response& res, RequestLog& log);
  void slots(const Request& req, Response& res, RequestLog& log);
  void slot_action(const Request& req, Response& res, RequestLog& log);
  void requantize(const Request& req, Response& res, RequestLog& log);
  void models(const Request& req, Response& res, RequestLog& log);
  void tokenize(const Request& req, Response& res, RequestLog& log);
  /// llama-server's POST /apply-template: {"messages": [...]} -> {"prompt": the rendered text}.
  void apply_template(const Request& req, Response& res, RequestLog& log);
  void detokenize(const Request& req, Response& res, RequestLog& log);
  void metrics(const Request& req, Response& res, RequestLog& log);
  /// GET and DELETE /v1/responses/{id}: a response kept by POST /v1/responses (api.h's
  /// stored_response).
  void response_entry(const Request& req, Response& res, RequestLog& log);

  // ---- http_exchange.cc: completions, for every WireApi alike.

  /// Parses the JSON body with `api` into *all; on failure replies in api's shape (a prompt too
  /// long with its size) and returns false. Nothing is submitted.
  bool parse_completions(const Request& req, Response& res, const WireApi& api,
                         std::vector<ParsedCompletion>* all);
  /// Anthropic's POST /v1/messages/count_tokens: the prompt /v1/messages would read, counted
  /// (the same checks and errors; nothing is submitted).
  void count_tokens(const Request& req, Response& res, RequestLog& log);
  /// Parses the body with `api`, submits, waits for a slot, then answers as the body asked:
  /// streamed (stream_sse), at once or with a heartbeat (answer_json); several completions go
  /// to completion_multi.
  void completion(const Request& req, Response& res, RequestLog& log, const WireApi& api);
  /// Submits ex's request and waits (bounded by --timeout) until it holds a slot; on failure
  /// replies and returns false.
  bool admit(Exchange& ex, Response& res, RequestLog& log);
  /// The SSE response of one admitted completion.
  void stream_sse(const std::shared_ptr<Exchange>& ex, Response& res);
  /// The JSON response of one admitted completion: a quick one with an exact status, a slow one
  /// as a chunked body behind a whitespace heartbeat.
  void answer_json(const std::shared_ptr<Exchange>& ex, Response& res);
  /// Streams events as SSE until the end; false when the client went away.
  bool pump_sse(Exchange& ex, DataSink& sink);
  void finish_log(Exchange& ex, int status);
  /// Several completions of one request (several prompts, or n > 1): started as parsed, except
  /// that a copy of a prompt waits until the prompt's first completion has read it.
  void completion_multi(const Request& req, Response& res, RequestLog& log, const WireApi& api,
                        std::vector<ParsedCompletion> all);
  /// The content providers of completion_multi: one JSON body (heartbeat first) or one SSE
  /// stream for them all; false when the client went away.
  bool multi_json(MultiExchange& m, DataSink& sink);
  bool multi_sse(MultiExchange& m, DataSink& sink);

  const Model& model_;
  const Tokenizer& tok_;
  Engine& engine_;
  const ServerParams& params_;
  Metrics& metrics_;
  ChatTemplate tmpl_;
  /// The responses kept for OpenAI's Responses API (--responses-max, --responses-max-mb);
  /// defaults_.responses points here.
  ResponseStore responses_;
  ApiDefaults defaults_;
  Guards guards_;
  std::vector<Route> routes_;
};

/// One model's server (run_server serves one; the router several): its counters, its engine
/// (loop thread running from make_server_instance) and the HTTP front answering for it.
/// Destroyed front first, then the engine (stopped: its slots go into the prompt cache).
struct ServerInstance {
  Metrics metrics;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Front> front;
  ~ServerInstance() {
    front.reset();
    if (engine) engine->stop();
  }
};

/// Checks `params` (slot directory, chat template, K/V policy, limits, prompt-cache flags) and
/// makes the engine and front of `model`; the engine is not started. `model`, `tok` and
/// `params` must outlive the instance. Errors: as run_server's (include/mnemo/server.h).
Result<std::unique_ptr<ServerInstance>> make_server_instance(const Model& model,
                                                             const Tokenizer& tok,
                                                             const ServerParams& params);

/// While alive, this thread has SIGINT and SIGTERM blocked (so does every thread it starts:
/// listen_until_stopped's watcher takes them with sigtimedwait) and SIGPIPE is ignored (a broken
/// pipe is an error return). The destructor restores the thread's previous mask.
class StopSignalsBlocked {
 public:
  StopSignalsBlocked();
  ~StopSignalsBlocked();
  StopSignalsBlocked(const StopSignalsBlocked&) = delete;
  StopSignalsBlocked& operator=(const StopSignalsBlocked&) = delete;
  /// {SIGINT, SIGTERM}.
  static sigset_t stop_signals();

 private:
  sigset_t old_mask_;
};

/// Serves `svr` on params.host / params.port until SIGINT, SIGTERM or stop_server():
/// httplib's pool of `n_http` threads (up to 16 x, or --threads-http-max), the limits of
/// `params`, "listening on" printed (and params.on_listening called) once bound. `stop_engines`
/// runs first when stopping, so requests in flight end and the pool can be joined. The caller
/// holds a StopSignalsBlocked (the handlers' threads inherit the mask).
/// Errors: IOError when the address cannot be bound.
Status listen_until_stopped(httplib::Server& svr, const ServerParams& params, int n_http,
                            const std::function<void()>& stop_engines, const std::string& banner);

}  // namespace mnemo::server
