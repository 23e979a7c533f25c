// Router mode (`mnemo serve` without -m; include/mnemo/server.h run_router): one port, several
// models in this process. Each loaded model is a whole single-model server (ServerInstance: its
// engine, slots, prompt cache and HTTP front, http_front.h) that the router hands requests to
// (Front::dispatch) by the request's "model" field, or ?model= on GET routes.
//
// Compute: one ThreadPool (-t threads) for every model's context, shared (its calls take
// turns), so two models decoding at once do not oversubscribe the cores.
//
// Loading and unloading: a model is loaded on first use (or POST /models/load) by the
// ModelLoader with the router's flags, then the preset's, then -m. Beyond --models-max, when
// the loaded models' weights would pass 80% of the machine's memory, or when the new model's
// K/V does not fit in the memory available (Context::reserve, as a single-model server checks
// it), the least recently used model that serves no request is unloaded first: its engine stops, which puts every slot's
// sequence into its prompt cache and, with --cache-dir, the cache on disk under the model's
// fingerprint, so a conversation continues after a reload by reading only its new turn. A
// request holds its model (a shared_ptr, kept by a streamed response until it ends), so a model
// is never unloaded under a request.
//
// Routes of the router itself: GET /health, GET /models and /v1/models (every model with its
// status: loaded, loading, unloaded, failed), POST /models/load and /models/unload
// ({"model": NAME}), GET /props without ?model ("role": "router"), GET /metrics without ?model
// (per-model gauges with a model label).
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "base/buffer.h"
#include "mnemo/log.h"
#include "server/http_front.h"
#include "server/models_catalog.h"

namespace mnemo::server {
namespace {

using httplib::Request;
using httplib::Response;

constexpr size_t kMiB = size_t{1} << 20;

// A loaded model: the files and flags it was loaded with, and its server.
struct Loaded {
  LoadedServerModel lm;
  std::unique_ptr<ServerInstance> inst;
  size_t weight_bytes = 0;  // the GGUF file's size
};

enum class ModelState : uint8_t { kUnloaded, kLoading, kLoaded, kFailed };

const char* state_name(ModelState s) {
  switch (s) {
    case ModelState::kLoading:
      return "loading";
    case ModelState::kLoaded:
      return "loaded";
    case ModelState::kFailed:
      return "failed";
    default:
      return "unloaded";
  }
}

class Router {
 public:
  Router(const ServerParams& params, std::vector<std::string> base_args, ModelLoader loader,
         std::vector<ModelEntry> models)
      : params_(params),
        base_args_(std::move(base_args)),
        loader_(std::move(loader)),
        guards_(params, metrics_) {
    const int n_threads = params.ctx.n_threads > 0
                              ? params.ctx.n_threads
                              : std::max(1, int(std::thread::hardware_concurrency()));
    pool_ = std::make_shared<ThreadPool>(n_threads);
    pool_->set_shared(true);
    for (ModelEntry& e : models) {
      Entry m;
      m.entry = std::move(e);
      models_.emplace(m.entry.name, std::move(m));
    }
  }

  ~Router() { unload_all(); }

  void install(httplib::Server& svr);
  // Stops every model (the watcher, on SIGINT / SIGTERM): requests in flight end.
  void stop_engines() {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [name, m] : models_) {
      if (m.loaded) m.loaded->inst->engine->stop();
    }
  }
  void unload_all() {
    std::vector<std::shared_ptr<Loaded>> gone;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& [name, m] : models_) {
        if (m.loaded) gone.push_back(std::move(m.loaded));
        m.state = ModelState::kUnloaded;
      }
    }
    gone.clear();  // engines stop here: slots into each model's prompt cache
  }

 private:
  struct Entry {
    ModelEntry entry;
    ModelState state = ModelState::kUnloaded;
    std::string error;  // kFailed: why
    std::shared_ptr<Loaded> loaded;
    uint64_t last_used = 0;
  };

  // The loaded model `name`, loading it first when `load` (or --models-autoload allows it).
  // Errors (with the HTTP kind): unknown model (kNotFound), not loaded and no autoload
  // (kInvalidRequest), no room (kCacheFull), a failed load (kInternal for the files, or the
  // loader's InvalidArgument as kInvalidRequest).
  Result<std::shared_ptr<Loaded>> acquire(const std::string& name, bool load, ErrorKind* kind);
  // Unloads idle models, least recently used first, until one more fits (`bytes` of weights,
  // and a place under --models-max); mu_ held. The unloaded ones go into *gone (destroyed by
  // the caller without the lock).
  Status make_room(const std::string& name, size_t bytes,
                   std::vector<std::shared_ptr<Loaded>>* gone);
  std::vector<std::string> args_of(const ModelEntry& e) const;

  // Handlers.
  void list(const Request& req, Response& res);
  void load_or_unload(const Request& req, Response& res, bool load);
  // Without ?model= (with it, the routes forward).
  void props(const Request& req, Response& res);
  void metrics(const Request& req, Response& res);
  // Any other route: to the model the request names. True when that model's front answered
  // (and logged); false when the router answered an error itself.
  bool forward(const Request& req, Response& res);
  void reply(Response& res, const Json& j, int status = 200) {
    res.status = status;
    res.set_content(dump(j), "application/json; charset=utf-8");
  }

  const ServerParams& params_;
  std::vector<std::string> base_args_;
  ModelLoader loader_;
  Metrics metrics_;  // the router's own errors (the models count theirs)
  Guards guards_;
  std::mutex mu_;
  std::condition_variable loaded_cv_;  // a load ended
  std::map<std::string, Entry> models_;
  uint64_t clock_ = 0;
  // The one compute pool of every model (-t of the router): their decodes take turns.
  std::shared_ptr<ThreadPool> pool_;
};

std::vector<std::string> Router::args_of(const ModelEntry& e) const {
  std::vector<std::string> a = base_args_;
  a.insert(a.end(), e.args.begin(), e.args.end());
  a.push_back("--model");
  a.push_back(e.path);
  return a;
}

Status Router::make_room(const std::string& name, size_t bytes,
                         std::vector<std::shared_ptr<Loaded>>* gone) {
  const size_t limit = physical_memory_bytes() / 10 * 8;
  for (;;) {
    size_t n_held = 0, held_bytes = 0;
    Entry* lru = nullptr;
    for (auto& [n, m] : models_) {
      if (n == name) continue;
      if (m.state == ModelState::kLoading) ++n_held;
      if (m.state != ModelState::kLoaded) continue;
      ++n_held;
      held_bytes += m.loaded->weight_bytes;
      // Idle: nothing but this map holds it (no request, no stream).
      if (m.loaded.use_count() == 1 && (lru == nullptr || m.last_used < lru->last_used)) lru = &m;
    }
    const bool over_count = int(n_held) >= params_.models_max;
    const bool over_memory = held_bytes + bytes > limit;
    if (!over_count && !over_memory) return Status();
    if (lru == nullptr) {
      return Status::no_space(
          over_count
              ? fmt::format("{} models are loaded (--models-max {}) and each is serving a request",
                            n_held, params_.models_max)
              : fmt::format("loading '{}' ({} MiB of weights) beside the loaded models' {} MiB "
                            "would pass 80% of this machine's memory ({} MiB), and no idle model "
                            "can be unloaded",
                            name, bytes / kMiB, held_bytes / kMiB, limit / kMiB));
    }
    MNEMO_LOG(kInfo) << "router: unloading '" << lru->entry.name << "' (least recently used)";
    gone->push_back(std::move(lru->loaded));
    lru->state = ModelState::kUnloaded;
  }
}

Result<std::shared_ptr<Loaded>> Router::acquire(const std::string& name, bool load,
                                                ErrorKind* kind) {
  std::vector<std::shared_ptr<Loaded>> gone;
  std::unique_lock<std::mutex> lk(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    *kind = ErrorKind::kNotFound;
    return Status::not_found(fmt::format("model '{}' not found", name.substr(0, 200)));
  }
  Entry& m = it->second;
  loaded_cv_.wait(lk, [&] { return m.state != ModelState::kLoading; });
  if (m.state == ModelState::kLoaded) {
    m.last_used = ++clock_;
    return m.loaded;
  }
  if (!load && !params_.models_autoload) {
    *kind = ErrorKind::kInvalidRequest;
    return Status::invalid_argument(fmt::format(
        "model '{}' is not loaded (--no-models-autoload): POST /models/load first", name));
  }
  std::error_code ec;
  const size_t bytes = size_t(std::filesystem::file_size(m.entry.path, ec));
  if (Status st = make_room(name, ec ? 0 : bytes, &gone); !st.ok()) {
    *kind = ErrorKind::kCacheFull;
    return st;
  }
  m.state = ModelState::kLoading;
  lk.unlock();
  gone.clear();  // unloaded without the lock: their engines stop, slots into their caches

  MNEMO_LOG(kInfo) << "router: loading '" << name << "' from " << m.entry.path;
  auto loaded = std::make_shared<Loaded>();
  loaded->weight_bytes = ec ? 0 : bytes;
  Status st;
  auto lm = loader_(args_of(m.entry));
  if (lm.ok()) {
    loaded->lm = std::move(lm).value();
    ServerParams& p = loaded->lm.params;
    // One --cache-ram budget for all models: each loaded model gets its share.
    if (params_.cache_ram_mib != -1) {
      const int64_t total = params_.cache_ram_mib == kCacheRamAuto
                                ? int64_t(std::min<size_t>(size_t{8192} * kMiB,
                                                           physical_memory_bytes() / 4) /
                                          kMiB)
                                : params_.cache_ram_mib;
      p.cache_ram_mib = total / std::max(1, params_.models_max);
    }
    p.model_alias = p.model_alias.empty() ? name : p.model_alias;
    p.ctx.pool = pool_;
    p.on_listening = nullptr;
    auto inst = make_server_instance(*loaded->lm.model, *loaded->lm.tok, p);
    // The K/V does not fit in the memory available now (Context::reserve): unload the least
    // recently used idle models one by one and try again.
    while (!inst.ok() && inst.status().code() == StatusCode::kNoSpace) {
      std::shared_ptr<Loaded> victim;
      {
        std::lock_guard<std::mutex> g(mu_);
        Entry* lru = nullptr;
        for (auto& [n, e] : models_) {
          if (n != name && e.state == ModelState::kLoaded && e.loaded.use_count() == 1 &&
              (lru == nullptr || e.last_used < lru->last_used)) {
            lru = &e;
          }
        }
        if (lru == nullptr) break;
        MNEMO_LOG(kInfo) << "router: unloading '" << lru->entry.name << "' to make room for '"
                         << name << "''s K/V";
        victim = std::move(lru->loaded);
        lru->state = ModelState::kUnloaded;
      }
      victim.reset();
      inst = make_server_instance(*loaded->lm.model, *loaded->lm.tok, p);
    }
    if (inst.ok()) {
      loaded->inst = std::move(inst).value();
      loaded->inst->engine->start();
    } else {
      st = inst.status();
    }
  } else {
    st = lm.status();
  }
  lk.lock();
  if (!st.ok()) {
    m.state = ModelState::kFailed;
    m.error = st.message();
    loaded_cv_.notify_all();
    MNEMO_LOG(kWarn) << "router: '" << name << "' failed to load: " << st.message();
    *kind = st.code() == StatusCode::kInvalidArgument ? ErrorKind::kInvalidRequest
            : st.code() == StatusCode::kNoSpace       ? ErrorKind::kCacheFull
                                                      : ErrorKind::kInternal;
    return Status(st.code(), fmt::format("model '{}' failed to load: {}", name, st.message()));
  }
  m.state = ModelState::kLoaded;
  m.error.clear();
  m.loaded = loaded;
  m.last_used = ++clock_;
  loaded_cv_.notify_all();
  return loaded;
}

void Router::list(const Request&, Response& res) {
  Json data = Json::array();
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [name, m] : models_) {
    Json status = {{"value", state_name(m.state)}, {"args", args_of(m.entry)}};
    if (m.state == ModelState::kFailed) {
      status["failed"] = true;
      status["error"] = m.error;
    }
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"owned_by", "mnemo"},
                    {"created", 0},
                    {"source", m.entry.source},
                    {"status", std::move(status)}});
  }
  reply(res, {{"object", "list"}, {"data", std::move(data)}});
}

void Router::load_or_unload(const Request& req, Response& res, bool load) {
  Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("model") || !body["model"].is_string()) {
    guards_.reply_early_error(req, res, ErrorKind::kInvalidRequest, "'model' must be a string");
    return;
  }
  const std::string name = body["model"].get<std::string>();
  if (load) {
    ErrorKind kind = ErrorKind::kInternal;
    auto l = acquire(name, /*load=*/true, &kind);
    if (!l.ok()) {
      guards_.reply_early_error(req, res, kind, l.status().message());
      return;
    }
    reply(res, {{"success", true}});
    return;
  }
  std::shared_ptr<Loaded> gone;
  {
    std::unique_lock<std::mutex> lk(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      lk.unlock();
      guards_.reply_early_error(req, res, ErrorKind::kNotFound,
                                fmt::format("model '{}' not found", name.substr(0, 200)));
      return;
    }
    Entry& m = it->second;
    loaded_cv_.wait(lk, [&] { return m.state != ModelState::kLoading; });
    if (m.state != ModelState::kLoaded) {
      lk.unlock();
      guards_.reply_early_error(req, res, ErrorKind::kInvalidRequest, "model is not running");
      return;
    }
    gone = std::move(m.loaded);
    m.state = ModelState::kUnloaded;
  }
  // Requests in flight keep their copy; the engine stops when the last one ends.
  MNEMO_LOG(kInfo) << "router: unloading '" << name << "'";
  gone.reset();
  reply(res, {{"success", true}});
}

void Router::props(const Request&, Response& res) {
  reply(res, {{"role", "router"},
              {"max_instances", params_.models_max},
              {"models_autoload", params_.models_autoload},
              {"model_alias", "mnemo"},
              {"model_path", "none"},
              {"default_generation_settings", {{"params", nullptr}, {"n_ctx", 0}}}});
}

void Router::metrics(const Request& req, Response& res) {
  if (!params_.metrics) {
    guards_.reply_early_error(
        req, res, ErrorKind::kNotSupported,
        "This server does not support metrics endpoint. Start it with `--metrics`");
    return;
  }
  std::vector<std::pair<std::string, std::shared_ptr<Loaded>>> loaded;
  std::string o;
  o += "# HELP mnemo_router_model_loaded Whether the model is loaded (1) or not (0).\n";
  o += "# TYPE mnemo_router_model_loaded gauge\n";
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [name, m] : models_) {
      const bool is_loaded = m.state == ModelState::kLoaded;
      o += fmt::format("mnemo_router_model_loaded{{model=\"{}\"}} {}\n", name, is_loaded ? 1 : 0);
      if (is_loaded) loaded.emplace_back(name, m.loaded);
    }
  }
  std::string bytes =
      "# HELP mnemo_router_model_weight_bytes Bytes of the loaded model's weights file.\n"
      "# TYPE mnemo_router_model_weight_bytes gauge\n";
  std::string kv =
      "# HELP mnemo_router_model_kv_bytes K/V tensor bytes of the loaded model's context.\n"
      "# TYPE mnemo_router_model_kv_bytes gauge\n";
  for (const auto& [name, l] : loaded) {
    bytes += fmt::format("mnemo_router_model_weight_bytes{{model=\"{}\"}} {}\n", name,
                         l->weight_bytes);
    // A snapshot from the model's loop thread (between two of its steps); a model too busy to
    // answer within the timeout is left out of this scrape.
    auto f = l->inst->engine->control(ControlRequest{});
    if (f.wait_for(std::chrono::seconds(params_.timeout_s)) != std::future_status::ready) continue;
    const ControlReply r = f.get();
    if (!r.status.ok()) continue;
    kv += fmt::format("mnemo_router_model_kv_bytes{{model=\"{}\"}} {}\n", name,
                      r.breakdown.tensor_bytes);
  }
  res.status = 200;
  res.set_content(o + bytes + kv, "text/plain; version=0.0.4");
}

bool Router::forward(const Request& req, Response& res) {
  std::string name;
  if (req.has_param("model")) {
    name = req.get_param_value("model");
  } else if (req.method == "POST") {
    Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_object() && body.contains("model") && body["model"].is_string()) {
      name = body["model"].get<std::string>();
    }
  }
  if (name.empty()) {
    guards_.reply_early_error(req, res, ErrorKind::kInvalidRequest,
                              "model name is missing from the request");
    return false;
  }
  ErrorKind kind = ErrorKind::kInternal;
  auto loaded = acquire(name, /*load=*/false, &kind);
  if (!loaded.ok()) {
    guards_.reply_early_error(req, res, kind, loaded.status().message());
    return false;
  }
  std::shared_ptr<Loaded> keep = *loaded;
  if (!keep->inst->front->dispatch(req, res)) {
    guards_.reply_early_error(req, res, ErrorKind::kNotFound,
                              "no route for " + req.method + " " + req.path);
    return false;
  }
  // A streamed or heartbeat response runs after this handler returns: it holds the model until
  // httplib drops the response.
  auto release = std::move(res.content_provider_resource_releaser_);
  res.content_provider_resource_releaser_ = [release, keep](bool success) {
    if (release) release(success);
  };
  return true;
}

void Router::install(httplib::Server& svr) {
  guards_.install(svr);
  // Every route: fn answers and returns true when a model's front answered (it logged the
  // request then); otherwise the router's own answer is logged here.
  auto route = [](auto fn) {
    return [fn](const Request& req, Response& res) {
      RequestLog log;
      bool by_model = false;
      try {
        by_model = fn(req, res);
      } catch (const std::exception& e) {  // a library's exception: never crash
        res.status = 500;
        res.set_content(dump(error_json(ErrorKind::kInternal,
                                        std::string("internal error: ") + e.what())),
                        "application/json; charset=utf-8");
      }
      if (!by_model) log_request(req.method, req.path, res.status, log);
    };
  };
  auto health = [this](const Request&, Response& res) {
    reply(res, {{"status", "ok"}});
    return false;
  };
  auto list_route = [this](const Request& q, Response& s) {
    list(q, s);
    return false;
  };
  svr.Get("/health", route(health));
  svr.Get("/v1/health", route(health));
  svr.Get("/models", route(list_route));
  svr.Get("/v1/models", route(list_route));
  svr.Post("/models/load", route([this](const Request& q, Response& s) {
             load_or_unload(q, s, true);
             return false;
           }));
  svr.Post("/models/unload", route([this](const Request& q, Response& s) {
             load_or_unload(q, s, false);
             return false;
           }));
  svr.Get("/props", route([this](const Request& q, Response& s) {
            if (q.has_param("model")) return forward(q, s);
            props(q, s);
            return false;
          }));
  svr.Get("/metrics", route([this](const Request& q, Response& s) {
            if (q.has_param("model")) return forward(q, s);
            metrics(q, s);
            return false;
          }));
  auto fwd = route([this](const Request& q, Response& s) { return forward(q, s); });
  svr.Get(R"(/.+)", fwd);
  svr.Post(R"(/.+)", fwd);
  svr.Delete(R"(/.+)", fwd);
}

}  // namespace

Status run_router(const ServerParams& params, std::vector<std::string> base_args,
                  ModelLoader loader) {
  if (params.models_max < 1) return Status::invalid_argument("--models-max must be at least 1");
  MNEMO_ASSIGN_OR_RETURN(std::vector<ModelEntry> models,
                         list_models(params.models_dir, params.models_preset));
  StopSignalsBlocked blocked;
  std::string names;
  for (const ModelEntry& m : models) names += (names.empty() ? "" : ", ") + m.name;
  Status st;
  {
    Router router(params, std::move(base_args), std::move(loader), std::move(models));
    httplib::Server svr;
    router.install(svr);
    const int n_http = params.n_threads_http > 0 ? params.n_threads_http : 32;
    st = listen_until_stopped(
        svr, params, n_http, [&] { router.stop_engines(); },
        fmt::format("router over {} (--models-max {})", names, params.models_max));
  }
  return st;
}

}  // namespace mnemo::server
