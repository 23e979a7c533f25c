#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "mnemo/log.h"
#include "server/chat_output.h"
#include "server/http_front.h"

namespace mnemo::server {
namespace {

using httplib::Request;
using httplib::Response;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Constant-time comparison (the time taken does not reveal how much of the key matched).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

}  // namespace

void log_request(const std::string& method, const std::string& path, int status,
                 const RequestLog& log) {
  MNEMO_LOG(kInfo) << fmt::format("{} {} {} {:.0f} ms{}", method, path, status, ms_since(log.t0),
                                  log.extra);
}

Front::Front(const Model& model, const Tokenizer& tok, Engine& engine, const ServerParams& params,
             Metrics& metrics, ChatTemplate tmpl, Json template_kwargs)
    : model_(model),
      tok_(tok),
      engine_(engine),
      params_(params),
      metrics_(metrics),
      tmpl_(std::move(tmpl)),
      responses_(params.responses_max, params.responses_max_mb << 20),
      guards_(params, metrics) {
  defaults_.responses = &responses_;
  defaults_.chat_template_kwargs = std::move(template_kwargs);
  defaults_.sampling = params.sampling;
  defaults_.n_predict = params.n_predict;
  defaults_.n_predict_max = params.n_predict_max;
  defaults_.n_keep = params.n_keep;
  defaults_.n_slots = engine.info().n_slots;
  defaults_.tok = &tok;
  defaults_.n_ctx_seq = engine.info().n_ctx_seq;
  defaults_.context_shift = engine.info().context_shift;
  defaults_.n_batch = engine.info().n_batch;
  for (TokenId id = 0; id < tok.n_vocab(); ++id) {
    defaults_.max_token_bytes = std::max(defaults_.max_token_bytes, tok.token_text(id).size());
  }
  defaults_.model_name = params.model_alias.empty()
                             ? std::filesystem::path(params.model_path).filename().string()
                             : params.model_alias;
  const chat_parse::ReasoningFormat reasoning =
      params.reasoning_format == "none"       ? chat_parse::ReasoningFormat::kNone
      : params.reasoning_format == "deepseek" ? chat_parse::ReasoningFormat::kDeepSeek
                                              : chat_parse::ReasoningFormat::kAuto;
  defaults_.chat = chat_defaults(tmpl_.source(), tok, reasoning, params.reasoning_budget);
  MNEMO_LOG(kInfo) << "chat format: " << chat_parse::chat_format_name(defaults_.chat.format)
                   << " (tool calls and reasoning, from the chat template)";
  routes_ = routes();
}

void Front::install(httplib::Server& svr) {
  guards_.install(svr);
  for (const Route& r : routes_) {
    if (r.method == "GET") {
      svr.Get(r.pattern, wrap(r.handler));
    } else if (r.method == "POST") {
      svr.Post(r.pattern, wrap_post(r.handler));
    } else {
      svr.Delete(r.pattern, wrap(r.handler));
    }
  }
}

bool Front::dispatch(const Request& req, Response& res) {
  for (const Route& r : routes_) {
    if (r.method != req.method) continue;
    Request copy = req;
    std::smatch m;
    if (!std::regex_match(copy.path, m, r.re)) continue;
    copy.matches = m;  // iterators into copy.path, which stays as it is
    wrap(r.handler)(copy, res);
    return true;
  }
  return false;
}

httplib::Server::Handler Front::wrap(Handler h) {
  return [this, h](const Request& req, Response& res) {
    RequestLog log;
    try {
      h(req, res, log);
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
        reply_early_error(req, res, ErrorKind::kInvalidRequest, st.message());
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
      reply_early_error(req, res, ErrorKind::kBodyTooLarge,
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

void Front::reply_json(Response& res, const Json& j, int status) {
  res.status = status;
  res.set_content(dump(j), "application/json; charset=utf-8");
}

void Front::reply_error(Response& res, ErrorKind kind, const std::string& msg, bool count) {
  if (count) metrics_.count_error(uint8_t(kind));
  reply_json(res, error_json(kind, msg), http_error(kind).status);
}

void Front::reply_error(Response& res, const WireApi& api, const WireError& e, bool count) {
  if (count) metrics_.count_error(uint8_t(e.kind));
  reply_json(res, api.error_body(e), api.http_status(e.kind));
}

void Guards::reply_early_error(const Request& req, Response& res, ErrorKind kind,
                               const std::string& msg, int status) {
  const bool anthropic = req.path == "/v1/messages" || req.path.rfind("/v1/messages/", 0) == 0;
  const WireApi& api = anthropic_messages_api();
  if (status == 0) status = anthropic ? api.http_status(kind) : http_error(kind).status;
  Json j = anthropic ? api.error_body({kind, msg, std::nullopt}) : error_json(kind, msg);
  if (!anthropic) j["error"]["code"] = status;  // the shared body repeats the status
  metrics_.count_error(uint8_t(kind));
  res.status = status;
  res.set_content(dump(j), "application/json; charset=utf-8");
}

void Guards::cors_headers(const Request& req, Response& res) const {
  const std::string origin = req.get_header_value("Origin");
  if (origin.empty() || res.has_header("Access-Control-Allow-Origin") || !origin_allowed(origin))
    return;
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Access-Control-Allow-Credentials", "true");
  res.set_header("Vary", "Origin");
}

bool Guards::origin_allowed(const std::string& origin) const {
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

void Guards::install(httplib::Server& svr) {
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
    reply_early_error(req, res, ErrorKind::kUnauthorized,
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
      reply_early_error(req, res, ErrorKind::kUnauthorized,
                        "origin '" + origin + "' is not allowed", 403);
      log_request(req.method, req.path, res.status, RequestLog{});
      return;
    }
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
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
        reply_early_error(req, res, kind, msg, res.status);
        cors_headers(req, res);
        log_request(req.method, req.path, res.status, RequestLog{});
        return httplib::Server::HandlerResponse::Handled;
      }));
}

}  // namespace mnemo::server
