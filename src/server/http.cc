// `mnemo serve`'s HTTP server: the routes (each naming its handler, and for a completion route
// the wire API that parses and answers it: api.h), and run_server, which reads the flags,
// starts the engine and serves until stopped. The plumbing every route shares is
// http_front.{h,cc}; completions are http_exchange.cc, the control endpoints http_control.cc.
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
//   POST /infill                      fill-in-the-middle (FIM tokens), answered as /completion
//   POST /v1/completions              OpenAI; SSE ending with "data: [DONE]"
//   POST /v1/chat/completions, /chat/completions
//   POST /v1/messages                 Anthropic's Messages API; SSE with named events; errors
//                                     {"type": "error", "error": {"type", "message"}}
//   POST /v1/messages/count_tokens    {"input_tokens": N} of a /v1/messages body
//   POST /v1/responses, /responses    OpenAI's Responses API: input items, function tools,
//                                     previous_response_id; SSE "event:" + "data:" events
//   GET, DELETE /v1/responses/{id}    a response kept with "store" (--responses-max,
//                                     --responses-max-mb)
//   GET  /v1/models, /models
//   POST /tokenize, /detokenize
//   POST /apply-template              {"messages"}: {"prompt": the chat template's text}
//   GET  /metrics                     Prometheus text; needs --metrics
//
// Threads and timing (the keep-alive and heartbeat of completions) are described in
// http_front.h. Router mode (no -m: several models behind these routes, picked by "model") is
// http_router.cc; each model there is a ServerInstance whose Front answers through dispatch().
// The web page (/, /index.html) is left out with --no-webui (a 404).
#include <fmt/format.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/buffer.h"
#include "kv_events/kv_event_codec.h"
#include "mnemo/chat.h"
#include "mnemo/log.h"
#include "mnemo/quant.h"
#include "mnemo/server.h"
#include "server/api.h"
#include "server/engine.h"
#include "server/http_front.h"
#include "server/http_pool.h"
#include "server/metrics.h"

namespace mnemo::server {

std::vector<Front::Route> Front::routes() {
  std::vector<Route> r;
  auto add = [&](const char* method, const char* pattern, Handler h) {
    r.push_back({method, pattern, std::regex(pattern), std::move(h)});
  };
  add("GET", "/", bind(&Front::web_page));
  add("GET", "/index.html", bind(&Front::web_page));
  add("GET", "/health", bind(&Front::health));
  add("GET", "/v1/health", bind(&Front::health));
  add("GET", "/props", bind(&Front::props));
  add("GET", "/slots", bind(&Front::slots));
  add("POST", R"(/slots/([^/]+))", bind(&Front::slot_action));
  add("POST", "/cache/requantize", bind(&Front::requantize));
  add("POST", "/completion", completions(llama_completion_api()));
  add("POST", "/completions", completions(llama_completion_api()));
  add("POST", "/infill", completions(llama_infill_api()));
  add("POST", "/v1/completions", completions(openai_completion_api()));
  add("POST", "/v1/chat/completions", completions(openai_chat_api()));
  add("POST", "/chat/completions", completions(openai_chat_api()));
  add("POST", "/v1/messages", completions(anthropic_messages_api()));
  add("POST", "/v1/messages/count_tokens", bind(&Front::count_tokens));
  add("POST", "/v1/responses", completions(openai_responses_api()));
  add("POST", "/responses", completions(openai_responses_api()));
  add("GET", R"((?:/v1)?/responses/([^/]+))", bind(&Front::response_entry));
  add("DELETE", R"((?:/v1)?/responses/([^/]+))", bind(&Front::response_entry));
  add("GET", "/v1/models", bind(&Front::models));
  add("GET", "/models", bind(&Front::models));
  add("POST", "/tokenize", bind(&Front::tokenize));
  add("POST", "/apply-template", bind(&Front::apply_template));
  add("POST", "/detokenize", bind(&Front::detokenize));
  add("GET", "/metrics", bind(&Front::metrics));
  return r;
}

namespace {

// Set by stop_server(); the running server's watcher thread polls it (as it waits for signals).
std::atomic<bool> g_stop_requested{false};

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
  MNEMO_RETURN_IF_ERROR(
      entry_type(p.cache_type_k, "--prompt-cache-type-k", &ep->reuse.cache_type_k));
  MNEMO_RETURN_IF_ERROR(
      entry_type(p.cache_type_v, "--prompt-cache-type-v", &ep->reuse.cache_type_v));
  if (!p.cache_store.empty()) {
    if (p.cache_store_timeout_ms <= 0) {
      return Status::invalid_argument("--cache-store-timeout must be positive");
    }
    MNEMO_ASSIGN_OR_RETURN(prompt_cache::StoreUrl url,
                           prompt_cache::parse_store_url(p.cache_store));
    prompt_cache::StoreParams sp;
    sp.url = std::move(url);
    sp.timeout_ms = p.cache_store_timeout_ms;
    ep->reuse.store = std::move(sp);
  }
  MNEMO_ASSIGN_OR_RETURN(ep->reuse.events.format,
                         kv_events::parse_event_format(p.kv_events_format));
  if (!p.kv_events_replay.empty() && p.kv_events.empty()) {
    return Status::invalid_argument("--kv-events-replay needs --kv-events");
  }
  ep->reuse.events.endpoint = p.kv_events;
  ep->reuse.events.replay_endpoint = p.kv_events_replay;
  ep->reuse.block_tokens = p.cache_block;
  if (ram == 0 && p.cache_dir.empty()) {
    // No local tier, but the block size still names the store's and the events' blocks.
    return Status();
  }
  prompt_cache::PromptCacheParams c;
  c.ram_bytes = ram;
  c.dir = p.cache_dir;
  c.disk_bytes = size_t(p.cache_disk_mib) * kMiB;
  c.block_tokens = p.cache_block;
  ep->reuse.cache = std::move(c);
  return Status();
}

}  // namespace

void stop_server() { g_stop_requested.store(true); }

Result<std::unique_ptr<ServerInstance>> make_server_instance(const Model& model,
                                                             const Tokenizer& tok,
                                                             const ServerParams& params) {
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
      params.jinja, params.jinja_explicit);
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

  auto inst = std::make_unique<ServerInstance>();
  Metrics& metrics = inst->metrics;
  EngineParams ep;
  ep.ctx = params.ctx;
  ep.context_shift = params.context_shift;
  ep.max_queue = params.max_queue;
  ep.kv_policy = std::move(policy);
  ep.spec = params.spec;
  ep.draft_model = params.draft_model;
  ep.draft_tokenizer = params.draft_tokenizer;
  // Recurrent memories keep the state after each drafted row, so a rejected tail is a copy.
  if (params.spec.ngram || params.draft_model != nullptr) ep.ctx.rs_n_spec = params.spec.draft_max;
  if (Status st = cache_params(params, &ep); !st.ok()) return st;
  MNEMO_ASSIGN_OR_RETURN(inst->engine, Engine::create(model, tok, ep, &metrics));
  inst->front = std::make_unique<Front>(model, tok, *inst->engine, params, metrics,
                                        std::move(tmpl).value(), std::move(template_kwargs));
  return inst;
}

StopSignalsBlocked::StopSignalsBlocked() {
  ::signal(SIGPIPE, SIG_IGN);
  const sigset_t sigs = stop_signals();
  pthread_sigmask(SIG_BLOCK, &sigs, &old_mask_);
}

StopSignalsBlocked::~StopSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr); }

sigset_t StopSignalsBlocked::stop_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  return sigs;
}

Status run_server(const Model& model, const Tokenizer& tok, const ServerParams& params) {
  // Before the engine's thread starts, so it inherits the mask too.
  StopSignalsBlocked blocked;
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<ServerInstance> inst,
                         make_server_instance(model, tok, params));
  Engine& engine = *inst->engine;

  httplib::Server svr;
  inst->front->install(svr);
  const int n_http = params.n_threads_http > 0
                         ? params.n_threads_http
                         : static_cast<int>(std::max<uint32_t>(16, 4 * engine.info().n_slots));
  const EngineInfo& info = engine.info();
  engine.start();
  Status st = listen_until_stopped(
      svr, params, n_http, [&] { engine.stop(); },
      fmt::format("{} slots, n_ctx {} ({} per slot, {} KV)", info.n_slots, info.n_ctx,
                  info.n_ctx_seq, info.kv_unified ? "unified" : "split"));
  engine.stop();
  return st;
}

Status listen_until_stopped(httplib::Server& svr, const ServerParams& params, int n_http,
                            const std::function<void()>& stop_engines, const std::string& banner) {
  const int n_http_max = params.n_threads_http_max > 0 ? params.n_threads_http_max : 16 * n_http;
  svr.new_task_queue = [n_http, n_http_max] {
    return new_elastic_pool(static_cast<size_t>(n_http), static_cast<size_t>(n_http_max));
  };
  svr.set_payload_max_length(params.max_body_bytes);
  svr.set_read_timeout(std::min(params.read_timeout_s, params.timeout_s), 0);
  svr.set_write_timeout(params.timeout_s, 0);
  svr.set_keep_alive_max_count(1000);

  int port = params.port;
  if (port == 0) {
    port = svr.bind_to_any_port(params.host);
  } else if (!svr.bind_to_port(params.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return Status::io_error(
        fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)",
                    params.host, params.port));
  }
  if (!is_loopback(params.host)) {
    MNEMO_LOG(kWarn) << "listening on " << params.host << ", not only loopback"
                     << (params.api_key.empty() ? ", and without --api-key" : "");
  }
  const sigset_t sigs = StopSignalsBlocked::stop_signals();
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done.load()) {
      if (sigtimedwait(&sigs, nullptr, &tick) > 0 || g_stop_requested.load()) {
        MNEMO_LOG(kInfo) << "mnemo serve: stopping";
        // The engines first: requests in flight get a "shutting down" error, so the handlers
        // waiting on them return and the HTTP thread pool can be joined.
        stop_engines();
        // stop() is a no-op until listen_after_bind() runs: repeat it until that returned.
        while (!done.load()) {
          svr.stop();
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return;
      }
    }
  });
  MNEMO_LOG(kInfo) << fmt::format("mnemo serve: {}, {} HTTP threads (up to {})", banner, n_http,
                                  std::max(n_http, n_http_max));
  std::fprintf(stderr, "mnemo serve: listening on http://%s:%d\n", params.host.c_str(), port);
  std::fflush(stderr);
  if (params.on_listening) params.on_listening(port);
  svr.listen_after_bind();  // returns after stop()
  done.store(true);
  watcher.join();
  g_stop_requested.store(false);
  return Status();
}

}  // namespace mnemo::server
